//! Receiving: data channel → storage, in stream mode and MODE E from any number of connections.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_net::{DataConn, DataListener, DataProtection};
use ferry_proto::mode_e::{
    BlockDecoder, BlockHeader, ConnectionTally, Descriptor, TransferTally, HEADER_LEN,
};
use ferry_proto::RangeSet;
use ferry_storage::FileHandle;
use tokio::io::AsyncReadExt;
use tokio::task::JoinSet;

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
            Some(conn) => read_blocks(conn, &job, true).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(first_reader);
    for conn in cached {
        used += 1;
        let job = Arc::clone(&job);
        set.spawn(async move { read_blocks(conn, &job, true).await });
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
                used += 1;
                let job = Arc::clone(&job);
                let prot = prot.clone();
                // The handshake runs on the stream's own task: streams authenticate in parallel.
                set.spawn(async move {
                    let conn = crate::dtp::secure(conn, false, prot.as_deref(), job.idle).await?;
                    read_blocks(conn, &job, false).await
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
    job: &RecvJob,
    reused: bool,
) -> Result<(Option<DataConn>, ConnectionTally), DtpError> {
    let mut buf = job.pool.take();
    let mut decoder = BlockDecoder::new(MAX_BLOCK);
    let mine = Arc::new(Mutex::new(RangeSet::new()));
    if let Ok(mut list) = job.written.lock() {
        list.push(Arc::clone(&mine));
    }
    let mut tally = ConnectionTally::default();
    let mut first = true;
    loop {
        let mut hb = [0u8; HEADER_LEN];
        match tokio::time::timeout(job.idle, conn.read_exact(&mut hb)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(DtpError::Connection(
                    "data connection closed before end of data".into(),
                ))
            }
            Ok(Err(e)) => return Err(DtpError::Connection(e.to_string())),
            Err(_) => return Err(DtpError::IdleTimeout(job.idle.as_secs())),
        }
        let header = BlockHeader::decode(&hb);
        if reused && first && header.descriptor.has(Descriptor::CLOSE) && header.payload_len() == 0
        {
            // A sender with fewer streams than cached connections retires the surplus with a
            // CLOSE header before using the rest; such a connection is not in its EOD count.
            return Ok((None, ConnectionTally::default()));
        }
        first = false;
        decoder
            .check_header(&header)
            .map_err(|e| DtpError::Protocol(e.to_string()))?;
        let len = header.payload_len();
        let mut got = 0u64;
        while got < len {
            let chunk = (len - got).min(buf.len() as u64) as usize;
            timed(job.idle, conn.read_exact(&mut buf[..chunk])).await?;
            job.file
                .write_all_at(&buf[..chunk], job.file_offset + header.offset + got)?;
            got += chunk as u64;
            job.bytes.fetch_add(chunk as u64, Ordering::Relaxed);
        }
        if len > 0 {
            tally.bytes += len;
            if let Ok(mut r) = mine.lock() {
                r.insert(header.offset, header.offset + len);
            }
        }
        if header.descriptor.has(Descriptor::EOD) {
            let eof = header
                .descriptor
                .has(Descriptor::EOF)
                .then_some(header.offset);
            tally.record_eod(eof);
            let keep = !header.descriptor.has(Descriptor::CLOSE);
            return Ok((keep.then_some(conn), tally));
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
