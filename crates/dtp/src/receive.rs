//! Receiving: data channel → storage, in stream mode and MODE E from any number of connections.
//!
//! Past 400 lines (about 580 of code; its tests are in `receive/tests.rs`): the per-connection
//! loop, the shared range bookkeeping and the EOD/EOF accounting decide together when a
//! transfer is complete, and splitting them would hide the one invariant a reader must check
//! (no 226 without every byte).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_net::{DataConn, DataListener, DataProtection, DetachedConn};
use ferry_proto::mode_e::{
    BlockDecoder, BlockHeader, ConnectionTally, Descriptor, TransferTally, HEADER_LEN,
};
use ferry_proto::RangeSet;
use ferry_storage::FileHandle;
use tokio::io::AsyncReadExt;
use tokio::task::JoinSet;

use crate::digest::{StreamDigest, TransferDigest};
use crate::polling::{PollBudget, PollPermit};
use crate::pool::BufferPool;
use crate::send::timed;
use crate::{ascii, DtpError};

/// Largest MODE E block accepted from a peer; payload is read in buffer-sized pieces, so this
/// only bounds nonsense, not memory.
const MAX_BLOCK: u64 = 1 << 40;

/// Shared state of one receiving transfer.
pub(crate) struct RecvJob {
    pub(crate) file: Arc<dyn FileHandle>,
    /// Added to wire offsets.
    pub(crate) file_offset: u64,
    pub(crate) pool: Arc<BufferPool>,
    /// Payload bytes written so far (one atomic add per block).
    pub(crate) bytes: Arc<AtomicU64>,
    /// Each connection's ranges written since the last restart marker; each connection locks
    /// only its own entry, the marker ticker visits them all.
    pub(crate) written: Arc<Mutex<Vec<Arc<Mutex<RangeSet>>>>>,
    pub(crate) idle: Duration,
    /// Lets the transfer's only stream poll its socket briefly before sleeping, on a thread
    /// of its own, while the budget has permits (see [`continue_on_own_thread`]).
    pub(crate) poll: Option<Arc<PollBudget>>,
    /// Connections being read now.
    pub(crate) readers: AtomicUsize,
    /// Checksums taken while receiving (each connection feeds its own part).
    pub(crate) digest: Option<Arc<TransferDigest>>,
    /// The largest round trip (µs) the connections' kernels measured; 0 until one is read.
    pub(crate) data_rtt_us: Arc<AtomicU32>,
    /// How many connections it takes.
    pub(crate) limits: crate::dtp::StreamLimits,
}

impl RecvJob {
    /// Takes every range written since the last call.
    pub(crate) fn take_written(&self) -> RangeSet {
        let mut all = RangeSet::new();
        if let Ok(list) = self.written.lock() {
            for r in list.iter() {
                if let Ok(mut r) = r.lock() {
                    all.merge(&r);
                    *r = RangeSet::new();
                }
            }
        }
        all
    }
}

/// Receives one MODE E transfer on the cached connections and any the listener accepts, until
/// the sender's EOF count of EODs has arrived. Returns the connections to cache and how many
/// were used.
pub(crate) async fn receive_mode_e(
    cached: Vec<DataConn>,
    listener: Option<Arc<DataListener>>,
    prot: Option<DataProtection>,
    job: Arc<RecvJob>,
) -> Result<(Vec<DataConn>, u32), DtpError> {
    let prot = prot.map(Arc::new);
    let mut set = JoinSet::new();
    let mut used = 0u32;
    let mut cached = cached.into_iter();
    // The first cached connection is read on this task, the others on their own: a small file
    // on one cached connection then costs no task spawn and no cross-thread wake-up.
    let first = cached.next();
    let mut first_running = first.is_some();
    used += u32::from(first_running);
    let first_reader = async {
        match first {
            Some(conn) => read_blocks(conn, Arc::clone(&job), true).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(first_reader);
    for conn in cached {
        used += 1;
        let job = Arc::clone(&job);
        set.spawn(async move { read_blocks(conn, job, true).await });
    }
    let mut tally = TransferTally::default();
    let mut keep = Vec::new();
    while !tally.is_complete() {
        tokio::select! {
            done = &mut first_reader, if first_running => {
                first_running = false;
                let (conn, conn_tally) = done?;
                tally.merge(&conn_tally).map_err(|e| DtpError::Protocol(e.to_string()))?;
                if tally.is_overrun() {
                    return Err(DtpError::Protocol("more EODs than the EOF block announced".into()));
                }
                keep.extend(conn);
            }
            accepted = accept(listener.as_deref(), job.idle), if listener.is_some() => {
                let conn = accepted?;
                // Past the transfer's or the server's bound a connection is closed at once:
                // the sender's EOF count then tells it what was missing.
                if used >= job.limits.per_transfer {
                    tracing::warn!(limit = job.limits.per_transfer, "a data connection past the transfer's bound closed");
                    drop(conn);
                    continue;
                }
                let permit = match &job.limits.server {
                    Some(s) => match Arc::clone(s).try_acquire_owned() {
                        Ok(p) => Some(p),
                        Err(_) => {
                            tracing::warn!("a data connection past the server's bound closed");
                            drop(conn);
                            continue;
                        }
                    },
                    None => None,
                };
                used += 1;
                let job = Arc::clone(&job);
                let prot = prot.clone();
                // The handshake runs on the stream's own task: streams authenticate in parallel.
                set.spawn(async move {
                    let _permit = permit;
                    let conn = crate::dtp::secure(conn, false, prot.as_deref(), job.idle).await?;
                    read_blocks(conn, job, false).await
                });
            }
            joined = set.join_next(), if !set.is_empty() => {
                let Some(joined) = joined else { continue };
                let (conn, conn_tally) = joined.map_err(|e| DtpError::Connection(format!("stream task failed: {e}")))??;
                tally.merge(&conn_tally).map_err(|e| DtpError::Protocol(e.to_string()))?;
                if tally.is_overrun() {
                    return Err(DtpError::Protocol("more EODs than the EOF block announced".into()));
                }
                keep.extend(conn);
            }
            else => return Err(DtpError::NoDataChannel),
        }
    }
    Ok((keep, used))
}

async fn accept(listener: Option<&DataListener>, idle: Duration) -> Result<DataConn, DtpError> {
    let Some(l) = listener else {
        return Err(DtpError::NoDataChannel);
    };
    match tokio::time::timeout(idle, l.accept()).await {
        Ok(r) => r.map_err(DtpError::Connect),
        Err(_) => Err(DtpError::IdleTimeout(idle.as_secs())),
    }
}

/// Reads blocks from one connection until its EOD; returns it (unless the sender closes it).
async fn read_blocks(
    mut conn: DataConn,
    job: Arc<RecvJob>,
    reused: bool,
) -> Result<(Option<DataConn>, ConnectionTally), DtpError> {
    if let Some(us) = conn.path_rtt_us() {
        job.data_rtt_us.fetch_max(us, Ordering::Relaxed);
    }
    let mut reader = ConnReader::new(&job, reused);
    // The buffer is taken when the first payload arrives: a connection that sends nothing
    // holds no memory.
    let mut buf = None;
    let _reading = Reading::start(&job);
    loop {
        if let Some(keep) = reader.block(&mut conn, &job, &mut buf).await? {
            return Ok((keep.then_some(conn), reader.tally));
        }
        if job.poll.is_some()
            && reader.received >= OWN_THREAD_AFTER
            && conn.can_detach()
            && job.readers.load(Ordering::Relaxed) == 1
        {
            if let Some(permit) = job.poll.as_ref().and_then(PollBudget::try_take) {
                drop(buf);
                return continue_on_own_thread(conn, reader, job, permit).await;
            }
        }
    }
}

/// Counts a connection among the transfer's readers while it is read.
struct Reading(Arc<RecvJob>);

impl Reading {
    fn start(job: &Arc<RecvJob>) -> Reading {
        job.readers.fetch_add(1, Ordering::Relaxed);
        Reading(Arc::clone(job))
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.0.readers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What one connection's reader carries from block to block.
struct ConnReader {
    decoder: BlockDecoder,
    /// Ranges written from this connection since the last restart marker.
    mine: Arc<Mutex<RangeSet>>,
    tally: ConnectionTally,
    /// No block read yet.
    first: bool,
    /// The connection was cached from an earlier transfer.
    reused: bool,
    /// Payload bytes read from this connection.
    received: u64,
    /// Sums what this connection stores, when the transfer takes checksums.
    sum: Option<StreamDigest>,
}

impl ConnReader {
    fn new(job: &RecvJob, reused: bool) -> ConnReader {
        let mine = Arc::new(Mutex::new(RangeSet::new()));
        if let Ok(mut list) = job.written.lock() {
            list.push(Arc::clone(&mine));
        }
        ConnReader {
            decoder: BlockDecoder::new(MAX_BLOCK),
            mine,
            tally: ConnectionTally::default(),
            first: true,
            reused,
            received: 0,
            sum: job.digest.as_ref().map(|d| d.stream()),
        }
    }

    /// Reads and stores one block. At the connection's end (its EOD, or the CLOSE that retires
    /// a surplus cached connection) answers whether the connection may be cached.
    async fn block(
        &mut self,
        conn: &mut DataConn,
        job: &RecvJob,
        buf: &mut Option<crate::pool::PooledBuf>,
    ) -> Result<Option<bool>, DtpError> {
        let mut hb = [0u8; HEADER_LEN];
        read_exact(conn, &mut hb, job.idle).await?;
        let Some(header) = self.header(&hb)? else {
            return Ok(Some(false));
        };
        if header.payload_len() == 0 {
            return Ok(self.finish(&header));
        }
        let buf = buf.get_or_insert_with(|| job.pool.take());
        for (at, n) in chunks(&header, buf.len()) {
            read_exact(conn, &mut buf[..n], job.idle).await?;
            store(job, &buf[..n], at)?;
            self.stored(job, &buf[..n], at);
        }
        Ok(self.finish(&header))
    }

    /// [`ConnReader::block`] on a thread of its own, from a connection off the runtime.
    fn block_on_thread(
        &mut self,
        conn: &mut ThreadReader<'_>,
        job: &RecvJob,
        buf: &mut [u8],
    ) -> Result<Option<bool>, DtpError> {
        let mut hb = [0u8; HEADER_LEN];
        conn.read_exact(&mut hb)?;
        let Some(header) = self.header(&hb)? else {
            return Ok(Some(false));
        };
        for (at, n) in chunks(&header, buf.len()) {
            conn.read_exact(&mut buf[..n])?;
            store(job, &buf[..n], at)?;
            self.stored(job, &buf[..n], at);
        }
        Ok(self.finish(&header))
    }

    /// Payload just stored at wire offset `at`: it counts for the next restart marker now,
    /// not at the block's end (a slow stream's large block is not sent again after a stop),
    /// and is summed when the transfer takes checksums.
    fn stored(&mut self, job: &RecvJob, data: &[u8], at: u64) {
        if let Ok(mut r) = self.mine.lock() {
            r.insert(at, at + data.len() as u64);
        }
        if let Some(s) = self.sum.as_mut() {
            s.feed(job.file_offset + at, data);
        }
    }

    /// Checks a block's header; `None` for the CLOSE that retires a surplus cached connection
    /// (a sender with fewer streams than cached connections sends it before using the rest;
    /// such a connection is not in its EOD count).
    fn header(&mut self, raw: &[u8; HEADER_LEN]) -> Result<Option<BlockHeader>, DtpError> {
        let header = BlockHeader::decode(raw);
        if self.reused
            && self.first
            && header.descriptor.has(Descriptor::CLOSE)
            && header.payload_len() == 0
        {
            return Ok(None);
        }
        self.first = false;
        self.decoder
            .check_header(&header)
            .map_err(|e| DtpError::Protocol(e.to_string()))?;
        Ok(Some(header))
    }

    /// Records a block whose payload is stored; at its EOD, whether the connection may be
    /// cached.
    fn finish(&mut self, header: &BlockHeader) -> Option<bool> {
        let len = header.payload_len();
        if len > 0 {
            self.received += len;
            self.tally.bytes += len;
        }
        if header.descriptor.has(Descriptor::EOD) {
            let eof = header
                .descriptor
                .has(Descriptor::EOF)
                .then_some(header.offset);
            self.tally.record_eod(eof);
            return Some(!header.descriptor.has(Descriptor::CLOSE));
        }
        None
    }
}

/// A block's payload in reads of at most `buf_len` bytes: (wire offset, length) of each.
fn chunks(header: &BlockHeader, buf_len: usize) -> impl Iterator<Item = (u64, usize)> {
    let (offset, len) = (header.offset, header.payload_len());
    let step = buf_len as u64;
    (0..len)
        .step_by(buf_len.max(1))
        .map(move |got| (offset + got, (len - got).min(step) as usize))
}

/// Writes payload that belongs at wire offset `at`.
fn store(job: &RecvJob, data: &[u8], at: u64) -> Result<(), DtpError> {
    job.file.write_all_at(data, job.file_offset + at)?;
    job.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
    Ok(())
}

/// A lone receiving stream moves to a thread of its own after this many bytes, so small
/// transfers never pay for the thread.
const OWN_THREAD_AFTER: u64 = 32 << 20;

/// Reads the rest of a lone stream on a thread of its own, polling its socket before sleeping.
///
/// A receiver that drains its socket faster than the data arrives sleeps once per arriving
/// burst, and every wake-up is work for the CPU that delivers the data: with the sender on
/// this host (and in a virtual machine, where waking a halted CPU exits to the hypervisor)
/// that is much of what separates one stream from the rate the CPUs can copy. Polling spends
/// this process's idle time instead. It needs its own thread, and the socket must leave the
/// runtime's epoll set: a registered socket makes every arriving segment call into epoll on the
/// sending CPU even while nobody sleeps on it, and another worker waiting in epoll would be
/// woken by each burst. The thread sleeps in `poll(2)` when polling finds nothing. The
/// connection returns to the shared runtime at the end, for caching.
async fn continue_on_own_thread(
    conn: DataConn,
    reader: ConnReader,
    job: Arc<RecvJob>,
    permit: PollPermit,
) -> Result<(Option<DataConn>, ConnectionTally), DtpError> {
    let detached = conn.detach().map_err(moving)?;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    // Set when this future is dropped (the transfer was stopped): the thread stops reading.
    let stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
    let stopped = Arc::clone(&stop.0);
    std::thread::Builder::new()
        .name("ferry-recv".into())
        .spawn(move || {
            let result = read_on_this_thread(detached, reader, &job, &stopped);
            // Given back before the answer, so the session's next transfer finds it.
            drop(permit);
            let _ = done_tx.send(result);
        })
        .map_err(moving)?;
    let (detached, tally) = done_rx.await.map_err(|_| {
        DtpError::Connection("the receiving thread ended without an answer".into())
    })??;
    drop(stop);
    let conn = detached.map(|d| d.attach()).transpose().map_err(moving)?;
    Ok((conn, tally))
}

/// Raises its flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A failure to move a connection between runtimes, or to start the thread.
fn moving(e: std::io::Error) -> DtpError {
    DtpError::Connection(format!("moving the data connection to its own thread: {e}"))
}

/// The body of [`continue_on_own_thread`]'s thread: plain syscalls, no runtime.
fn read_on_this_thread(
    detached: DetachedConn,
    mut reader: ConnReader,
    job: &RecvJob,
    stopped: &AtomicBool,
) -> Result<(Option<DetachedConn>, ConnectionTally), DtpError> {
    let mut buf = job.pool.take();
    let mut conn = ThreadReader::new(&detached, job.idle, stopped);
    let keep = loop {
        conn.check_stopped()?;
        if let Some(keep) = reader.block_on_thread(&mut conn, job, &mut buf)? {
            break keep;
        }
    };
    Ok((keep.then_some(detached), reader.tally))
}

/// Fills `buf` from `conn`; a connection that ends first is an error.
async fn read_exact(conn: &mut DataConn, buf: &mut [u8], idle: Duration) -> Result<(), DtpError> {
    let mut got = 0;
    while got < buf.len() {
        let n = timed(idle, conn.read(&mut buf[got..])).await?;
        if n == 0 {
            return Err(ended());
        }
        got += n;
    }
    Ok(())
}

fn ended() -> DtpError {
    DtpError::Connection("data connection closed before end of data".into())
}

/// How long a receiving stream polls its socket for data before it sleeps.
const POLL_FOR: Duration = Duration::from_micros(50);
/// The most reads a stream makes without polling after polls that found nothing.
const MAX_POLL_BACKOFF: u32 = 64;
/// How often a sleeping stream looks whether its transfer was stopped.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// Reads a detached connection on its own thread: polls the socket for a moment before it
/// sleeps in `poll(2)`. A stream whose polls keep finding nothing backs off, so a slow link
/// costs at most one 50 µs poll per 64 reads.
struct ThreadReader<'a> {
    conn: &'a DetachedConn,
    idle: Duration,
    stopped: &'a AtomicBool,
    /// Reads left to make without polling.
    skip: u32,
    backoff: u32,
}

impl<'a> ThreadReader<'a> {
    fn new(conn: &'a DetachedConn, idle: Duration, stopped: &'a AtomicBool) -> ThreadReader<'a> {
        ThreadReader {
            conn,
            idle,
            stopped,
            skip: 0,
            backoff: 0,
        }
    }

    fn check_stopped(&self) -> Result<(), DtpError> {
        if self.stopped.load(Ordering::Relaxed) {
            return Err(DtpError::Connection("the transfer was stopped".into()));
        }
        Ok(())
    }

    /// Fills `buf`; a connection that ends first is an error.
    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), DtpError> {
        let mut got = 0;
        while got < buf.len() {
            let n = self.read_some(&mut buf[got..])?;
            if n == 0 {
                return Err(ended());
            }
            got += n;
        }
        Ok(())
    }

    /// One read. Unless it is backing off, it polls for up to [`POLL_FOR`] when nothing is
    /// there; a read that finds data without sleeping ends the backoff. Backing off counts
    /// reads, not sleeps, so a stream that keeps up polls again after a few blocks.
    fn read_some(&mut self, buf: &mut [u8]) -> Result<usize, DtpError> {
        let mut polling = if self.skip > 0 {
            self.skip -= 1;
            false
        } else {
            true
        };
        let mut since: Option<std::time::Instant> = None;
        loop {
            match self.conn.read_now(buf) {
                Ok(n) => {
                    if polling {
                        self.backoff = 0;
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if polling {
                        let now = std::time::Instant::now();
                        if now - *since.get_or_insert(now) < POLL_FOR {
                            std::hint::spin_loop();
                            continue;
                        }
                        self.backoff = (self.backoff * 2).clamp(1, MAX_POLL_BACKOFF);
                        self.skip = self.backoff;
                        polling = false;
                    }
                    self.sleep()?;
                }
                Err(e) => return Err(DtpError::Connection(e.to_string())),
            }
        }
    }

    /// Sleeps until the socket is readable; the idle timeout and a stop end the wait.
    fn sleep(&self) -> Result<(), DtpError> {
        let deadline = std::time::Instant::now() + self.idle;
        loop {
            self.check_stopped()?;
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(DtpError::IdleTimeout(self.idle.as_secs()));
            }
            let readable = self
                .conn
                .wait_readable(left.min(STOP_CHECK))
                .map_err(|e| DtpError::Connection(e.to_string()))?;
            if readable {
                return Ok(());
            }
        }
    }
}

/// Receives a stream-mode transfer: everything until the sender closes, written from `start`.
pub(crate) async fn receive_stream(
    mut conn: DataConn,
    job: &RecvJob,
    start: u64,
    ascii_mode: bool,
) -> Result<(), DtpError> {
    let mut buf = job.pool.take();
    let mut pos = start;
    let mut held_cr = false;
    let mut converted = Vec::new();
    // TYPE A changes the bytes; its transfers take no checksums (see run_receive).
    let mut sum = job.digest.as_ref().map(|d| d.stream());
    loop {
        let n = timed(job.idle, conn.read(&mut buf)).await?;
        if n == 0 {
            break;
        }
        let data: &[u8] = if ascii_mode {
            converted.clear();
            ascii::from_crlf(&buf[..n], &mut held_cr, &mut converted);
            &converted
        } else {
            &buf[..n]
        };
        job.file.write_all_at(data, job.file_offset + pos)?;
        if let Some(s) = sum.as_mut() {
            s.feed(job.file_offset + pos, data);
        }
        if let Ok(list) = job.written.lock() {
            if let Some(r) = list.first() {
                if let Ok(mut r) = r.lock() {
                    r.insert(pos, pos + data.len() as u64);
                }
            }
        }
        pos += data.len() as u64;
        job.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
    }
    if held_cr {
        job.file.write_all_at(b"\r", job.file_offset + pos)?;
        job.bytes.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
