//! The disk-stack seam end to end: a driver registered beside `file` sees every byte a
//! transfer reads from or writes to storage, through the description's `disk_stack`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferry_dtp::disk_stack::{Access, DiskDriver, DiskStackError, DiskStacks, Layer};
use ferry_dtp::{
    BufferPool, ChannelSetup, DataMover, Direction, Dtp, DtpError, DtpEvent, TransferDescription,
};
use ferry_proto::command::TransferMode;
use ferry_proto::stack::StackSpec;
use ferry_storage::{FileHandle, PosixStorage, Storage, StorageError, VirtualPath};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// Counts the bytes that pass through it, each way.
#[derive(Debug, Default)]
struct Tally {
    read: Arc<AtomicU64>,
    written: Arc<AtomicU64>,
}

impl DiskDriver for Tally {
    fn name(&self) -> &'static str {
        "tally"
    }

    fn accept(&self, options: &str) -> Result<(), DiskStackError> {
        match options {
            "" => Ok(()),
            _ => Err(DiskStackError::Options {
                name: "tally".into(),
                why: "no options".into(),
            }),
        }
    }

    fn wrap(
        &self,
        below: Arc<dyn FileHandle>,
        _access: Access<'_>,
        _options: &str,
    ) -> Result<Layer, StorageError> {
        Ok(Layer::plain(Arc::new(Counted {
            below,
            read: Arc::clone(&self.read),
            written: Arc::clone(&self.written),
        })))
    }
}

#[derive(Debug)]
struct Counted {
    below: Arc<dyn FileHandle>,
    read: Arc<AtomicU64>,
    written: Arc<AtomicU64>,
}

impl FileHandle for Counted {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, StorageError> {
        let n = self.below.read_at(buf, offset)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<(), StorageError> {
        self.written.fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.below.write_all_at(buf, offset)
    }
    fn size(&self) -> Result<u64, StorageError> {
        self.below.size()
    }
    fn is_regular(&self) -> bool {
        self.below.is_regular()
    }
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        // A layer that must see the bytes takes zero-copy away.
        None
    }
    fn sync(&self) -> Result<(), StorageError> {
        self.below.sync()
    }
    fn set_len(&self, len: u64) -> Result<(), StorageError> {
        self.below.set_len(len)
    }
}

fn description(
    direction: Direction,
    addr: std::net::SocketAddr,
    stack: &str,
) -> TransferDescription {
    TransferDescription {
        mode: TransferMode::Stream,
        truncate: true,
        disk_stack: StackSpec::parse(stack).expect("stack"),
        idle_timeout_ms: 30_000,
        ..TransferDescription::new(
            direction,
            VirtualPath::resolve(&VirtualPath::root(), "/f.bin").expect("path"),
            ChannelSetup::Active(vec![addr]),
        )
    }
}

/// A DTP on `dir` whose disk stacks are the standard ones and `driver`.
fn dtp_with(dir: &std::path::Path, driver: Arc<dyn DiskDriver>) -> Dtp {
    let storage: Arc<dyn Storage> = Arc::new(PosixStorage::open(dir, false).expect("storage"));
    let mut dtp = Dtp::new(storage, BufferPool::new(ferry_dtp::IO_CHUNK, 4), false);
    dtp.use_disk_stacks(Arc::new(DiskStacks::standard().with(driver)));
    dtp
}

fn dtp_with_tally(dir: &std::path::Path) -> (Dtp, Arc<AtomicU64>, Arc<AtomicU64>) {
    let tally = Tally::default();
    let (read, written) = (Arc::clone(&tally.read), Arc::clone(&tally.written));
    (dtp_with(dir, Arc::new(tally)), read, written)
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 253) as u8).collect()
}

#[tokio::test]
async fn a_driver_above_file_sees_every_byte_stored_and_sent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut dtp, read, written) = dtp_with_tally(dir.path());
    let data = pattern(3 << 20);

    // Receive: the DTP connects to us and we send the file.
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let desc = description(
        Direction::Receive,
        l.local_addr().expect("addr"),
        "file,tally",
    );
    let sent = data.clone();
    let peer = tokio::spawn(async move {
        let (mut c, _) = l.accept().await.expect("accept");
        c.write_all(&sent).await.expect("send");
    });
    let (tx, mut rx) = mpsc::channel(64);
    dtp.run(&desc, &tx).await.expect("receive");
    peer.await.expect("peer");
    assert_eq!(rx.try_recv(), Ok(DtpEvent::Begin));
    assert_eq!(
        std::fs::read(dir.path().join("f.bin")).expect("stored"),
        data
    );
    assert_eq!(written.load(Ordering::Relaxed), data.len() as u64);

    // Send it back: every byte is read through the driver.
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let desc = description(Direction::Send, l.local_addr().expect("addr"), "file,tally");
    let peer = tokio::spawn(async move {
        let (mut c, _) = l.accept().await.expect("accept");
        let mut got = Vec::new();
        c.read_to_end(&mut got).await.expect("read");
        got
    });
    dtp.run(&desc, &tx).await.expect("send");
    assert_eq!(peer.await.expect("peer"), data);
    assert_eq!(read.load(Ordering::Relaxed), data.len() as u64);
}

#[tokio::test]
async fn a_stack_this_dtp_cannot_build_fails_before_the_transfer_begins() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut dtp, _read, written) = dtp_with_tally(dir.path());
    let addr = "127.0.0.1:9".parse().expect("addr");
    let (tx, mut rx) = mpsc::channel(64);
    for stack in ["file,gridftp_multicast", "tally", "file,tally:x=1"] {
        let desc = description(Direction::Receive, addr, stack);
        let err = dtp.run(&desc, &tx).await.expect_err(stack);
        assert!(matches!(err, DtpError::DiskStack(_)), "{stack}: {err}");
        assert_eq!(err.reply_code(), 500);
        assert!(rx.try_recv().is_err(), "{stack}: no Begin");
    }
    assert!(!dir.path().join("f.bin").exists(), "nothing was created");
    assert_eq!(written.load(Ordering::Relaxed), 0);
}

/// A driver with work of its own: `finish` fails when its option says so, and whether it ran,
/// was dropped unrun, or stored nothing (`relay`) is recorded.
#[derive(Debug, Default)]
struct Finishing {
    finished: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
}

struct Work {
    fail: bool,
    done: bool,
    finished: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
}

impl ferry_dtp::disk_stack::Finish for Work {
    fn finish(
        mut self: Box<Self>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>> {
        self.done = true;
        self.finished.fetch_add(1, Ordering::Relaxed);
        let fail = self.fail;
        Box::pin(async move {
            if fail {
                Err("a child at gsiftp://b/x failed".into())
            } else {
                Ok(())
            }
        })
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        if !self.done {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl DiskDriver for Finishing {
    fn name(&self) -> &'static str {
        "finishing"
    }
    fn accept(&self, _options: &str) -> Result<(), DiskStackError> {
        Ok(())
    }
    fn stores(&self, options: &str) -> bool {
        options != "relay"
    }
    fn wrap(
        &self,
        below: Arc<dyn FileHandle>,
        _access: Access<'_>,
        options: &str,
    ) -> Result<Layer, StorageError> {
        Ok(Layer {
            file: below,
            finish: Some(Box::new(Work {
                fail: options == "fail",
                done: false,
                finished: Arc::clone(&self.finished),
                dropped: Arc::clone(&self.dropped),
            })),
            beyond: None,
        })
    }
}

/// Receives `data` through `stack` from a peer that sends it and closes.
async fn receive_through(dtp: &mut Dtp, stack: &str, data: &[u8]) -> Result<(), DtpError> {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let desc = description(Direction::Receive, l.local_addr().expect("addr"), stack);
    let sent = data.to_vec();
    let peer = tokio::spawn(async move {
        let (mut c, _) = l.accept().await.expect("accept");
        c.write_all(&sent).await.expect("send");
    });
    let (tx, _rx) = mpsc::channel(64);
    let r = dtp.run(&desc, &tx).await.map(drop);
    peer.await.expect("peer");
    r
}

#[tokio::test]
async fn a_drivers_work_is_finished_before_the_reply_and_its_failure_is_a_451() {
    let dir = tempfile::tempdir().expect("tempdir");
    let driver = Finishing::default();
    let (finished, dropped) = (Arc::clone(&driver.finished), Arc::clone(&driver.dropped));
    let mut dtp = dtp_with(dir.path(), Arc::new(driver));
    let data = pattern(1 << 20);

    receive_through(&mut dtp, "file,finishing", &data)
        .await
        .expect("ok");
    assert_eq!(
        (
            finished.load(Ordering::Relaxed),
            dropped.load(Ordering::Relaxed)
        ),
        (1, 0)
    );

    let err = receive_through(&mut dtp, "file,finishing:fail", &data)
        .await
        .expect_err("the driver's failure fails the transfer");
    assert_eq!(err.reply_code(), 451);
    assert!(err.to_string().contains("gsiftp://b/x"), "{err}");
    assert_eq!(
        std::fs::read(dir.path().join("f.bin")).expect("stored"),
        data
    );

    // A relay stores nothing: the file from before is untouched, no new one appears.
    std::fs::remove_file(dir.path().join("f.bin")).expect("rm");
    receive_through(&mut dtp, "file,finishing:relay", &data)
        .await
        .expect("relay");
    assert!(
        !dir.path().join("f.bin").exists(),
        "a relay created the file"
    );
    assert_eq!(finished.load(Ordering::Relaxed), 3);

    // A transfer that fails (no data connection) drops the work unfinished.
    let desc = description(
        Direction::Receive,
        "127.0.0.1:9".parse().expect("addr"),
        "file,finishing",
    );
    let (tx, _rx) = mpsc::channel(64);
    dtp.run(&desc, &tx)
        .await
        .expect_err("nothing listens on port 9");
    assert_eq!(
        (
            finished.load(Ordering::Relaxed),
            dropped.load(Ordering::Relaxed)
        ),
        (3, 1)
    );
}

/// A driver that starts work when its stack is chosen: each prepared token records whether the
/// next transfer took it over or it was dropped unused.
#[derive(Debug, Default)]
struct Preparing {
    prepared: Arc<AtomicU64>,
    taken: Arc<AtomicU64>,
    abandoned: Arc<AtomicU64>,
    /// With options `slow`, the reply waits until this is notified.
    release: Arc<tokio::sync::Notify>,
}

struct Token {
    taken: bool,
    abandoned: Arc<AtomicU64>,
}

impl Drop for Token {
    fn drop(&mut self) {
        if !self.taken {
            self.abandoned.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl DiskDriver for Preparing {
    fn name(&self) -> &'static str {
        "preparing"
    }
    fn accept(&self, _options: &str) -> Result<(), DiskStackError> {
        Ok(())
    }
    fn prepare(
        &self,
        options: &str,
        how: ferry_dtp::disk_stack::Preparing<'_>,
    ) -> Option<ferry_dtp::disk_stack::Prepared> {
        assert_eq!(how.channel, &ferry_dtp::ChannelSecurity::default());
        if options == "slow" {
            let release = Arc::clone(&self.release);
            how.waits
                .add(Box::pin(async move { release.notified().await }));
        }
        (options != "nothing").then(|| {
            self.prepared.fetch_add(1, Ordering::Relaxed);
            Box::new(Token {
                taken: false,
                abandoned: Arc::clone(&self.abandoned),
            }) as ferry_dtp::disk_stack::Prepared
        })
    }
    fn wrap(
        &self,
        below: Arc<dyn FileHandle>,
        _access: Access<'_>,
        _options: &str,
    ) -> Result<Layer, StorageError> {
        Ok(Layer::plain(below))
    }
    fn wrap_prepared(
        &self,
        below: Arc<dyn FileHandle>,
        access: Access<'_>,
        options: &str,
        prepared: ferry_dtp::disk_stack::Prepared,
    ) -> Result<Layer, StorageError> {
        let mut token = prepared.downcast::<Token>().expect("this driver's token");
        token.taken = true;
        self.taken.fetch_add(1, Ordering::Relaxed);
        self.wrap(below, access, options)
    }
}

/// What a driver prepares when a stack is chosen goes to the next transfer that receives
/// through that same stack, once; a transfer through another stack, or a new choice, leaves it
/// unused and it is dropped (its work abandoned), never handed on later.
#[tokio::test]
async fn prepared_work_goes_to_the_next_transfer_through_the_same_stack_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let driver = Preparing::default();
    let (prepared, taken, abandoned) = (
        Arc::clone(&driver.prepared),
        Arc::clone(&driver.taken),
        Arc::clone(&driver.abandoned),
    );
    let mut dtp = dtp_with(dir.path(), Arc::new(driver));
    let counts = || {
        (
            prepared.load(Ordering::Relaxed),
            taken.load(Ordering::Relaxed),
            abandoned.load(Ordering::Relaxed),
        )
    };
    let data = pattern(256 << 10);
    let security = ferry_dtp::ChannelSecurity::default();
    let stack = |s: &str| StackSpec::parse(s).expect("stack");

    dtp.prepare_disk_stack(&stack("file,preparing:a"), &security)
        .await;
    assert_eq!(counts(), (1, 0, 0));
    receive_through(&mut dtp, "file,preparing:a", &data)
        .await
        .expect("ok");
    assert_eq!(counts(), (1, 1, 0), "the transfer takes the prepared work");
    receive_through(&mut dtp, "file,preparing:a", &data)
        .await
        .expect("ok");
    assert_eq!(counts(), (1, 1, 0), "only once");

    // Chosen again, then another stack's transfer: dropped, not kept for later.
    dtp.prepare_disk_stack(&stack("file,preparing:a"), &security)
        .await;
    receive_through(&mut dtp, "file,preparing:b", &data)
        .await
        .expect("ok");
    assert_eq!(counts(), (2, 1, 1));
    receive_through(&mut dtp, "file,preparing:a", &data)
        .await
        .expect("ok");
    assert_eq!(counts(), (2, 1, 1));

    // A new choice abandons what the last one started; a driver may prepare nothing.
    dtp.prepare_disk_stack(&stack("file,preparing:a"), &security)
        .await;
    dtp.prepare_disk_stack(&stack("file,preparing:nothing"), &security)
        .await;
    assert_eq!(counts(), (3, 1, 2));
    assert_eq!(
        std::fs::read(dir.path().join("f.bin")).expect("stored"),
        data
    );
}

/// What drivers prepare may be worth waiting for: the future `prepare_disk_stack` returns (the
/// session's reply waits on it) is ready only once every driver's is, and at once when none
/// left anything to wait for.
#[tokio::test]
async fn choosing_a_stack_is_ready_when_what_its_drivers_prepare_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let driver = Preparing::default();
    let release = Arc::clone(&driver.release);
    let mut dtp = dtp_with(dir.path(), Arc::new(driver));
    let security = ferry_dtp::ChannelSecurity::default();
    let stack = |s: &str| StackSpec::parse(s).expect("stack");
    let wait = std::time::Duration::from_millis(200);

    let quick = dtp.prepare_disk_stack(&stack("file,preparing:a"), &security);
    tokio::time::timeout(wait, quick)
        .await
        .expect("nothing to wait for");
    let mut slow = dtp.prepare_disk_stack(&stack("file,preparing:slow"), &security);
    assert!(
        tokio::time::timeout(wait, &mut slow).await.is_err(),
        "ready before the driver's work"
    );
    release.notify_one();
    tokio::time::timeout(std::time::Duration::from_secs(5), slow)
        .await
        .expect("ready once the driver's work is");
}

/// A driver that sends the data on: its destinations hold the first `limit` bytes until its
/// work finishes, which takes a while and then lifts the limit; it reports news at once.
#[derive(Debug, Default)]
struct Onward {
    limit: Arc<AtomicU64>,
}

#[derive(Debug)]
struct Limit(Arc<AtomicU64>);

impl ferry_dtp::disk_stack::Beyond for Limit {
    fn held(&self, written: &ferry_proto::RangeSet) -> ferry_proto::RangeSet {
        written.intersect(&ferry_proto::RangeSet::from_range(
            0,
            self.0.load(Ordering::Relaxed),
        ))
    }
}

struct CatchUp(Arc<AtomicU64>);

impl ferry_dtp::disk_stack::Finish for CatchUp {
    fn finish(
        self: Box<Self>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>> {
        Box::pin(async move {
            tokio::time::sleep(std::time::Duration::from_millis(350)).await;
            self.0.store(u64::MAX, Ordering::Relaxed);
            Ok(())
        })
    }
}

impl DiskDriver for Onward {
    fn name(&self) -> &'static str {
        "onward"
    }
    fn accept(&self, _options: &str) -> Result<(), DiskStackError> {
        Ok(())
    }
    fn wrap(
        &self,
        below: Arc<dyn FileHandle>,
        access: Access<'_>,
        _options: &str,
    ) -> Result<Layer, StorageError> {
        access
            .news
            .say(" Forward Failed: ftp://c/f; Held: ; Error: test".into());
        Ok(Layer {
            file: below,
            finish: Some(Box::new(CatchUp(Arc::clone(&self.limit)))),
            beyond: Some(Arc::new(Limit(Arc::clone(&self.limit)))),
        })
    }
}

#[tokio::test]
async fn restart_markers_wait_for_the_destinations_beyond_and_news_goes_out_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let driver = Onward::default();
    driver.limit.store(1 << 20, Ordering::Relaxed);
    let mut dtp = dtp_with(dir.path(), Arc::new(driver));
    let data = pattern(3 << 20);
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let mut desc = description(
        Direction::Receive,
        l.local_addr().expect("addr"),
        "file,onward",
    );
    desc.markers.restart_ms = Some(100);
    let sent = data.clone();
    let peer = tokio::spawn(async move {
        let (mut c, _) = l.accept().await.expect("accept");
        c.write_all(&sent).await.expect("send");
    });
    let (tx, mut rx) = mpsc::channel(64);
    dtp.run(&desc, &tx).await.expect("receive");
    peer.await.expect("peer");
    let mut restarts = Vec::new();
    let mut news = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        match ev {
            DtpEvent::Restart(r) => restarts.push(r),
            DtpEvent::Perf { news: n, .. } => news.extend(n),
            DtpEvent::Begin => {}
        }
    }
    assert_eq!(news, [" Forward Failed: ftp://c/f; Held: ; Error: test"]);
    // While the destinations beyond held the first MiB, no marker went further; once they
    // caught up (the driver's work, after the last byte came), the rest was reported.
    assert_eq!(
        restarts.first(),
        Some(&ferry_proto::RangeSet::from_range(0, 1 << 20)),
        "{restarts:?}"
    );
    let mut all = ferry_proto::RangeSet::new();
    for r in &restarts {
        all.merge(r);
    }
    assert_eq!(all, ferry_proto::RangeSet::from_range(0, data.len() as u64));
    assert_eq!(
        std::fs::read(dir.path().join("f.bin")).expect("stored"),
        data
    );
}
