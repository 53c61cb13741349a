//! The client's resumable copy API (`ferry_client::FileCopy`) against the server: a job run
//! with ranges a caller stored sends none of those bytes again (gets, puts and third-party
//! copies), checkpoints come from the receiver's restart markers, cancelling stops a run and
//! hands back what is stored, and errors say whether a retry can help.

use crate::common;

use common::*;
use ferry_client::{
    CancellationToken, ClientError, FileCopy, FileCopyEvent, Location, Retry, Sessions, Verify,
};
use ferry_proto::RangeSet;
use ferry_storage::ChecksumAlgorithm;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

const SIZE: usize = 3 << 20;
/// A byte no random source file is made of over a whole range, written where the destination
/// "already holds" data: if the copy sent those ranges again, they would be overwritten.
const KEPT: u8 = 0xA5;

fn url(srv: &TestServer, path: &str) -> Location {
    Location::parse(&format!(
        "ftp://{USER}:{PASSWORD}@127.0.0.1:{}/{path}",
        srv.addr.port()
    ))
    .expect("url")
}

/// The ranges a caller stored from an earlier run: the first MiB and half a MiB further on.
fn stored_ranges() -> RangeSet {
    let mut r = RangeSet::new();
    r.insert(0, 1 << 20);
    r.insert(2 << 20, (2 << 20) + (512 << 10));
    r
}

/// A destination as an earlier run left it: `KEPT` bytes in the stored ranges, zeros elsewhere.
fn partial_destination(ranges: &RangeSet) -> Vec<u8> {
    let mut d = vec![0u8; SIZE];
    for (a, b) in ranges.iter() {
        d[a as usize..b as usize].fill(KEPT);
    }
    d
}

/// The stored ranges still hold `KEPT` and every other byte is the source's.
fn assert_resumed(got: &[u8], source: &[u8], ranges: &RangeSet) {
    assert_eq!(got.len(), source.len(), "destination size");
    for (i, (g, s)) in got.iter().zip(source).enumerate() {
        let kept = ranges.contains_range(i as u64, i as u64 + 1);
        let want = if kept { KEPT } else { *s };
        assert!(
            *g == want,
            "byte {i}: {g:#x}, expected {want:#x} ({})",
            if kept {
                "a stored range was sent again"
            } else {
                "a missing range was not copied"
            }
        );
    }
}

fn job(src: Location, dst: Location, stored: RangeSet) -> FileCopy {
    let mut j = FileCopy::new(src, dst);
    j.size = Some(SIZE as u64);
    j.request.parallelism = 2;
    j.stored = stored;
    // The stored ranges here hold marker bytes, not the source's, to show they are not sent
    // again: a verified copy would rightly fail (the last tests verify on purpose).
    j.verify = None;
    j
}

async fn run(
    job: &FileCopy,
) -> (
    Result<ferry_client::FileCopied, ferry_client::FileCopyError>,
    Vec<FileCopyEvent>,
) {
    let mut sessions = Sessions::new();
    let mut events = Vec::new();
    let cancel = CancellationToken::new();
    let r = within(
        "copy job",
        job.run(&mut sessions, &cancel, &mut |e| events.push(e)),
    )
    .await;
    (r, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_resumed_from_stored_ranges_sends_none_of_them_again() {
    let srv = TestServer::start().await;
    let source = random_bytes(SIZE, 301);
    srv.write("src.bin", &source);
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("dst.bin");
    let ranges = stored_ranges();
    std::fs::write(&local, partial_destination(&ranges)).unwrap();
    let j = job(
        url(&srv, "src.bin"),
        Location::Local(local.clone()),
        ranges.clone(),
    );
    let (r, _) = run(&j).await;
    let done = r.expect("resumed get");
    assert_eq!(done.bytes, SIZE as u64);
    assert_eq!(done.moved, SIZE as u64 - ranges.total(), "bytes sent again");
    assert_resumed(&std::fs::read(&local).unwrap(), &source, &ranges);
    assert_eq!(j.stored, ranges, "the caller's ranges are the caller's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_resumed_from_stored_ranges_sends_none_of_them_again() {
    let srv = TestServer::start().await;
    let source = random_bytes(SIZE, 302);
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("src.bin");
    std::fs::write(&local, &source).unwrap();
    let ranges = stored_ranges();
    srv.write("dst.bin", &partial_destination(&ranges));
    let j = job(Location::Local(local), url(&srv, "dst.bin"), ranges.clone());
    let (r, _) = run(&j).await;
    let done = r.expect("resumed put");
    assert_eq!(done.moved, SIZE as u64 - ranges.total(), "bytes sent again");
    assert_resumed(&srv.read("dst.bin"), &source, &ranges);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_party_copy_resumed_from_stored_ranges_sends_none_of_them_again() {
    let (a, b) = (TestServer::start().await, TestServer::start().await);
    let source = random_bytes(SIZE, 303);
    a.write("src.bin", &source);
    let ranges = stored_ranges();
    b.write("dst.bin", &partial_destination(&ranges));
    let j = job(url(&a, "src.bin"), url(&b, "dst.bin"), ranges.clone());
    let (r, _) = run(&j).await;
    r.expect("resumed third-party copy");
    assert_resumed(&b.read("dst.bin"), &source, &ranges);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_copy_reports_its_checksum_and_a_corrupt_one_says_start_again() {
    let srv = TestServer::start().await;
    let source = random_bytes(SIZE, 304);
    srv.write("src.bin", &source);
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("dst.bin");

    let mut j = job(
        url(&srv, "src.bin"),
        Location::Local(local.clone()),
        RangeSet::new(),
    );
    j.verify = Some(Verify::required(ChecksumAlgorithm::Adler32));
    let (r, events) = run(&j).await;
    let done = r.expect("verified get");
    let sum = done.checksum.clone().expect("a checksum");
    assert!(
        events.contains(&FileCopyEvent::Checksum {
            algorithm: "ADLER32".into(),
            value: sum
        }),
        "{events:?}"
    );
    assert_eq!(std::fs::read(&local).unwrap(), source);

    // Claiming ranges the destination does not hold (zeros) leaves it corrupt: the checksum
    // catches it, and the stored ranges are not to be trusted any more.
    std::fs::write(&local, vec![0u8; SIZE]).unwrap();
    j.stored = stored_ranges();
    let (r, _) = run(&j).await;
    let e = r.expect_err("checksums differ");
    assert!(matches!(e.error, ClientError::Verification(_)), "{e}");
    assert_eq!(e.retry(), Retry::FromScratch);
    assert!(e.stored.is_empty(), "{:?}", e.stored);
    // No file that looks complete is left behind, and the error says so.
    assert!(!local.exists(), "the corrupt destination was kept");
    assert!(e.to_string().contains("removed"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_source_is_not_worth_a_retry_and_keeps_the_stored_ranges() {
    let srv = TestServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let j = job(
        url(&srv, "missing.bin"),
        Location::Local(dir.path().join("x")),
        stored_ranges(),
    );
    let (r, _) = run(&j).await;
    let e = r.expect_err("missing source");
    assert_eq!(e.retry(), Retry::No, "{e}");
    assert_eq!(e.stored, stored_ranges());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_says_resume_and_keeps_the_stored_ranges() {
    let srv = TestServer::start().await;
    let source = random_bytes(SIZE, 305);
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("src.bin");
    std::fs::write(&local, &source).unwrap();
    let port = srv.addr.port();
    drop(srv);
    let j = job(
        Location::Local(local),
        Location::parse(&format!("ftp://{USER}:{PASSWORD}@127.0.0.1:{port}/d.bin")).unwrap(),
        stored_ranges(),
    );
    let (r, _) = run(&j).await;
    let e = r.expect_err("no server");
    assert_eq!(e.retry(), Retry::Resume, "{e}");
    assert_eq!(e.stored, stored_ranges());
}

/// A server that takes a MODE E upload, acknowledges the first MiB with a restart marker and
/// then never finishes: the only way out of the run is the cancel token.
async fn stalling_server() -> (u16, tokio::task::JoinHandle<()>) {
    let control = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = control.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let (conn, _) = control.accept().await.unwrap();
        let (rd, mut wr) = conn.into_split();
        let mut lines = BufReader::new(rd).lines();
        wr.write_all(b"220 stalling test server\r\n").await.unwrap();
        let data = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dport = data.local_addr().unwrap().port();
        let mut held = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            let verb = line.split(' ').next().unwrap_or("").to_ascii_uppercase();
            let reply = match verb.as_str() {
                "USER" => "331 Password required.\r\n".to_string(),
                "PASS" => "230 Logged in.\r\n".to_string(),
                "FEAT" => "211-Features:\r\n211 End.\r\n".to_string(),
                "PASV" => format!(
                    "227 Entering Passive Mode (127,0,0,1,{},{})\r\n",
                    dport >> 8,
                    dport & 0xff
                ),
                "STOR" => {
                    wr.write_all(b"150 Opening.\r\n").await.unwrap();
                    let (mut d, _) = data.accept().await.unwrap();
                    let mut got = 0usize;
                    let mut buf = vec![0u8; 64 << 10];
                    while got < 1 << 20 {
                        match d.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => got += n,
                        }
                    }
                    held.push(d);
                    "111 Range Marker 0-1048576\r\n".to_string()
                }
                _ => "200 OK.\r\n".to_string(),
            };
            if wr.write_all(reply.as_bytes()).await.is_err() {
                break;
            }
        }
    });
    (port, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_run_stops_it_and_hands_back_the_checkpointed_ranges() {
    let (port, server) = stalling_server().await;
    let source = random_bytes(SIZE, 306);
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("src.bin");
    std::fs::write(&local, &source).unwrap();
    let mut j = FileCopy::new(
        Location::Local(local),
        Location::parse(&format!("ftp://u:p@127.0.0.1:{port}/d.bin")).unwrap(),
    );
    j.request.parallelism = 1;
    let cancel = CancellationToken::new();
    let mut sessions = Sessions::new();
    let mut events = Vec::new();
    let r = within("a cancelled run", async {
        j.run(&mut sessions, &cancel, &mut |e| {
            if matches!(e, FileCopyEvent::Stored { .. }) {
                cancel.cancel();
            }
            events.push(e);
        })
        .await
    })
    .await;
    let e = r.expect_err("cancelled");
    assert!(matches!(e.error, ClientError::Cancelled), "{e}");
    assert_eq!(e.retry(), Retry::No);
    let mut first_mib = RangeSet::new();
    first_mib.insert(0, 1 << 20);
    assert_eq!(e.stored, first_mib, "the checkpoint the server sent");
    assert!(events.contains(&FileCopyEvent::Stored { ranges: first_mib }));
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cancelled_before_it_starts_moves_nothing() {
    let srv = TestServer::start().await;
    srv.write("src.bin", &random_bytes(1000, 307));
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("dst.bin");
    let j = job(
        url(&srv, "src.bin"),
        Location::Local(local.clone()),
        RangeSet::new(),
    );
    let cancel = CancellationToken::new();
    cancel.cancel();
    let r = j.run(&mut Sessions::new(), &cancel, &mut |_| {}).await;
    let e = r.expect_err("cancelled");
    assert!(matches!(e.error, ClientError::Cancelled));
    assert!(!local.exists(), "nothing was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_get_is_verified_by_default_over_the_whole_file() {
    let srv = TestServer::start().await;
    let source = random_bytes(SIZE, 306);
    srv.write("src.bin", &source);
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("dst.bin");
    // An earlier run stored these ranges truly; the rest is missing.
    let ranges = stored_ranges();
    let mut partial = vec![0u8; SIZE];
    for (a, b) in ranges.iter() {
        partial[a as usize..b as usize].copy_from_slice(&source[a as usize..b as usize]);
    }
    std::fs::write(&local, partial).unwrap();
    let mut j = job(
        url(&srv, "src.bin"),
        Location::Local(local.clone()),
        ranges.clone(),
    );
    j.verify = FileCopy::new(j.src.clone(), j.dst.clone()).verify;
    let (r, _) = run(&j).await;
    let done = r.expect("verified resumed get");
    assert_eq!(done.moved, SIZE as u64 - ranges.total());
    let mut a = adler2::Adler32::new();
    a.write_slice(&source);
    assert_eq!(done.checksum, Some(format!("{:08x}", a.checksum())));
    assert_eq!(std::fs::read(&local).unwrap(), source);
}
