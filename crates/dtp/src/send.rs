//! Sending: storage → data channel, in stream mode and MODE E with parallel streams.
//!
//! Past 400 lines with its tests (430 of code): the stream and MODE E senders share one buffer
//! and marker discipline, and the data path reads best in one place.

use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferry_net::DataConn;
use ferry_proto::mode_e::BlockHeader;
use ferry_proto::RangeSet;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinSet;

use crate::digest::{StreamDigest, TransferDigest};
use crate::pool::{BufferPool, PooledBuf};
use crate::source::Source;
use crate::{ascii, zerocopy, DtpError};

/// Hands out blocks of the ranges to send to any number of streams with one atomic counter:
/// no lock is taken per block.
///
/// Near the end blocks shrink, so the streams finish together: with 16 streams sharing a
/// 1 Gbit/s path a 4 MiB block takes half a second on one stream, and a transfer whose last
/// blocks land on a few streams waits that long with the others idle. Once fewer than two
/// blocks per stream remain, each claim takes about 1/(2·streams) of what is left (whole I/O
/// chunks, at least one), so the tail is a few small blocks spread over every stream.
#[derive(Debug)]
pub(crate) struct BlockClaimer {
    ranges: Vec<(u64, u64)>,
    /// Position in the ranges laid end to end.
    cursor: AtomicU64,
    total: u64,
    block: u64,
    /// Streams sharing the claimer; the tail shrinks only when there are several.
    streams: u64,
    /// Set when a stream met the end of a source of unknown length.
    ended: AtomicBool,
}

/// The smallest block the tail shrinks to: one I/O chunk.
const TAIL_BLOCK: u64 = crate::pool::IO_CHUNK as u64;

impl BlockClaimer {
    pub(crate) fn with_streams(ranges: &RangeSet, block: u64, streams: usize) -> BlockClaimer {
        let ranges: Vec<_> = ranges.iter().collect();
        let total = ranges
            .iter()
            .map(|(a, b)| b - a)
            .fold(0u64, u64::saturating_add);
        BlockClaimer {
            ranges,
            cursor: AtomicU64::new(0),
            total,
            block: block.max(1),
            streams: streams.max(1) as u64,
            ended: AtomicBool::new(false),
        }
    }

    /// The size of the block that starts at `start`.
    fn block_at(&self, start: u64) -> u64 {
        let remaining = self.total - start;
        if self.streams <= 1
            || self.block <= TAIL_BLOCK
            || remaining / self.block >= 2 * self.streams
        {
            return self.block;
        }
        let share = remaining / (2 * self.streams) / TAIL_BLOCK * TAIL_BLOCK;
        share.clamp(TAIL_BLOCK, self.block)
    }

    /// The next block as `(wire_offset, len)` pieces (a block may straddle two ranges); `None`
    /// when nothing is left, `Some(true)` when this block holds the last bytes (the caller's
    /// next claim will fail, so it may send its trailer with this block).
    fn claim(&self, out: &mut Vec<(u64, u64)>) -> Option<bool> {
        out.clear();
        if self.ended.load(Ordering::Relaxed) {
            return None;
        }
        let mut start = self.cursor.load(Ordering::Relaxed);
        let size = loop {
            if start >= self.total {
                return None;
            }
            let size = self.block_at(start);
            match self.cursor.compare_exchange_weak(
                start,
                start.saturating_add(size),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break size,
                Err(now) => start = now,
            }
        };
        let end = start.saturating_add(size).min(self.total);
        let (mut pos, mut acc) = (start, 0u64);
        for &(a, b) in &self.ranges {
            let len = b - a;
            if pos < acc + len {
                let from = a + (pos - acc);
                let until = (a + (end - acc).min(len)).min(b);
                out.push((from, until - from));
                pos = acc + (until - a);
                if pos >= end {
                    break;
                }
            }
            acc += len;
        }
        (!out.is_empty()).then_some(end >= self.total)
    }
}

/// Per-stream byte counters, read by the marker ticker.
pub(crate) type Counters = Arc<Vec<AtomicU64>>;

/// What one sending stream needs.
pub(crate) struct SendJob {
    /// Whether the bytes to send are known to exist (regular file, listing, or a length the
    /// client gave), so a block's header can announce its full size before the reads.
    pub(crate) bounded: bool,
    pub(crate) source: Source,
    pub(crate) claimer: Arc<BlockClaimer>,
    pub(crate) file_offset: u64,
    pub(crate) pool: Arc<BufferPool>,
    pub(crate) counters: Counters,
    pub(crate) idle: Duration,
    /// Checksums taken while sending (each stream feeds its own part).
    pub(crate) digest: Option<Arc<TransferDigest>>,
}

/// Sends MODE E blocks on every connection in parallel, then EOF (on the first) and EOD (on
/// the rest). Returns the connections for caching.
pub(crate) async fn send_mode_e(
    conns: Vec<DataConn>,
    job: SendJob,
) -> Result<Vec<DataConn>, DtpError> {
    let n = conns.len();
    if n == 1 && job.bounded {
        // One connection: sent on this task, no spawn and no cross-thread wake-up per file.
        // Not from a source whose reads wait for data to come (a multicast node's buffer, a
        // pipe): on its own task, so this one goes on reading the control channel meanwhile.
        let mut conn = conns.into_iter().next().ok_or(DtpError::NoDataChannel)?;
        conn.limit_unsent(None)
            .map_err(|e| DtpError::Connection(format!("setting TCP_NOTSENT_LOWAT: {e}")))?;
        let trailer = BlockHeader::eof(1).encode();
        return Ok(vec![send_stream_blocks(conn, 0, &job, &trailer).await?]);
    }
    let job = Arc::new(job);
    let mut set = JoinSet::new();
    let unsent = u32::try_from(job.claimer.block).unwrap_or(u32::MAX);
    for (i, mut conn) in conns.into_iter().enumerate() {
        // Each stream queues about one block in the kernel, so blocks spread over all streams
        // whatever the send buffer size (see DataConn::limit_unsent).
        conn.limit_unsent((n > 1).then_some(unsent))
            .map_err(|e| DtpError::Connection(format!("setting TCP_NOTSENT_LOWAT: {e}")))?;
        let job = Arc::clone(&job);
        // EOF, with the connection count, on the first connection; EOD on the others.
        let trailer = if i == 0 {
            BlockHeader::eof(n as u64)
        } else {
            BlockHeader::eod()
        }
        .encode();
        set.spawn(async move {
            send_stream_blocks(conn, i, &job, &trailer)
                .await
                .map(|c| (i, c))
        });
    }
    let mut done: Vec<Option<DataConn>> = (0..n).map(|_| None).collect();
    while let Some(r) = set.join_next().await {
        let (i, c) = r.map_err(|e| DtpError::Connection(format!("stream task failed: {e}")))??;
        done[i] = Some(c);
    }
    Ok(done.into_iter().flatten().collect())
}

/// Sends claimed blocks on one connection, then its `trailer` (EOF or EOD): in the same write
/// as the last chunk when this stream sends the transfer's last bytes from a buffer (one
/// syscall and one segment less per small file), else on its own.
async fn send_stream_blocks(
    mut conn: DataConn,
    index: usize,
    job: &SendJob,
    trailer: &[u8],
) -> Result<DataConn, DtpError> {
    if job.source.offers_pieces() {
        return send_pieces(conn, index, job, trailer).await;
    }
    let mut buf = job.pool.take();
    // A lone stream with blocks larger than one buffer (configured, or asked for with SITE
    // BLOCKSIZE) takes a second buffer and writes both at once: one stream's sender is the busy
    // end against a receiver that polls, and half the writes take 7 % off its time.
    let mut second: Option<PooledBuf> = None;
    let mut pieces = Vec::with_capacity(2);
    let mut zero_copy = job.source.zero_copy_fd();
    let mut trailer_sent = false;
    let mut sum = job.digest.as_ref().map(|d| d.stream());
    while let Some(last_block) = job.claimer.claim(&mut pieces) {
        let count = pieces.len();
        for (p, &(wire, len)) in pieces.iter().enumerate() {
            let last_piece = last_block && p + 1 == count;
            let file_at = wire + job.file_offset;
            let sent = match (zero_copy, conn.zero_copy_socket()) {
                (Some(fd), Some(sock)) => {
                    let want = match job.source.known_len() {
                        Some(total) => len.min(total.saturating_sub(file_at)),
                        None => len,
                    };
                    if want == 0 {
                        job.claimer.ended.store(true, Ordering::Relaxed);
                        break;
                    }
                    let header = BlockHeader::data(wire, want).encode();
                    timed(job.idle, zerocopy::send_more(sock, &header)).await?;
                    let n = match zerocopy::sendfile_all(sock, fd, file_at, want).await {
                        Ok(n) => n,
                        // A device that cannot splice: the header is out, so deliver its bytes
                        // by reading, and read from now on.
                        Err(e) if zerocopy::unsupported(&e) => {
                            zero_copy = None;
                            let mut got = 0u64;
                            while got < want {
                                let cap = (want - got).min(buf.len() as u64) as usize;
                                let n = read_full(&job.source, &mut buf[..cap], file_at + got)?;
                                if n < cap {
                                    return Err(DtpError::Connection(format!(
                                        "source ended at offset {file_at}"
                                    )));
                                }
                                feed(&mut sum, file_at + got, &buf[..n]);
                                timed(job.idle, conn.write_all(&buf[..n])).await?;
                                got += n as u64;
                            }
                            got
                        }
                        Err(e) => return Err(DtpError::Connection(e.to_string())),
                    };
                    if n < want {
                        return Err(DtpError::Connection(format!(
                            "file shrank while sending at offset {file_at}"
                        )));
                    }
                    if zero_copy.is_some() {
                        sum_sent(&mut sum, &job.source, &mut buf, file_at, n)?;
                    }
                    n
                }
                _ if job.bounded => {
                    // One header for the whole block, payload in buffer-sized chunks: the
                    // receiver sees large blocks while the chunk stays in the CPU cache
                    // between the read and the socket copy.
                    if second.is_none() && job.claimer.streams == 1 && len > buf.len() as u64 {
                        second = Some(job.pool.take());
                    }
                    let mut got = 0u64;
                    while got < len {
                        let first = (len - got).min(buf.len() as u64) as usize;
                        read_exactly(&job.source, &mut buf[..first], file_at + got)?;
                        let after = got + first as u64;
                        let more: &[u8] = match second.as_deref_mut() {
                            Some(more) => {
                                let m = (len - after).min(more.len() as u64) as usize;
                                read_exactly(&job.source, &mut more[..m], file_at + after)?;
                                &more[..m]
                            }
                            None => &[],
                        };
                        let n = first + more.len();
                        feed(&mut sum, file_at + got, &buf[..first]);
                        feed(&mut sum, file_at + after, more);
                        let header = BlockHeader::data(wire, len).encode();
                        let head: &[u8] = if got == 0 { &header } else { &[] };
                        let tail: &[u8] = if last_piece && got + n as u64 == len {
                            trailer_sent = true;
                            trailer
                        } else {
                            &[]
                        };
                        timed(
                            job.idle,
                            write_all_slices(&mut conn, [head, &buf[..first], more, tail]),
                        )
                        .await?;
                        got += n as u64;
                        job.counters[index].fetch_add(n as u64, Ordering::Relaxed);
                    }
                    continue;
                }
                _ => {
                    let mut got = 0u64;
                    while got < len {
                        let chunk = (len - got).min(buf.len() as u64) as usize;
                        let n = read_full(&job.source, &mut buf[..chunk], file_at + got)?;
                        if n == 0 {
                            break;
                        }
                        feed(&mut sum, file_at + got, &buf[..n]);
                        let header = BlockHeader::data(wire + got, n as u64).encode();
                        timed(job.idle, write_all_slices(&mut conn, [&header, &buf[..n]])).await?;
                        got += n as u64;
                        job.counters[index].fetch_add(n as u64, Ordering::Relaxed);
                        if n < chunk {
                            break;
                        }
                    }
                    if got < len {
                        job.claimer.ended.store(true, Ordering::Relaxed);
                    }
                    continue;
                }
            };
            job.counters[index].fetch_add(sent, Ordering::Relaxed);
        }
    }
    if !trailer_sent {
        timed(job.idle, conn.write_all(trailer)).await?;
    }
    Ok(conn)
}

/// Sends what a source that offers pieces hands this stream, each piece one block at its own
/// offset, then `trailer`. No claims: the source decides, so bytes that arrived go out while an
/// earlier block is still on its way (a multicast node forwarding what its parent's streams
/// deliver out of order).
async fn send_pieces(
    mut conn: DataConn,
    index: usize,
    job: &SendJob,
    trailer: &[u8],
) -> Result<DataConn, DtpError> {
    let mut buf = job.pool.take();
    let mut sum = job.digest.as_ref().map(|d| d.stream());
    while let Some((at, n)) = job.source.next_piece(&mut buf)? {
        feed(&mut sum, at, &buf[..n]);
        let header = BlockHeader::data(at.saturating_sub(job.file_offset), n as u64).encode();
        timed(job.idle, write_all_slices(&mut conn, [&header, &buf[..n]])).await?;
        job.counters[index].fetch_add(n as u64, Ordering::Relaxed);
    }
    timed(job.idle, conn.write_all(trailer)).await?;
    Ok(conn)
}

/// Sums bytes just read, when the transfer takes checksums.
fn feed(sum: &mut Option<StreamDigest>, offset: u64, data: &[u8]) {
    if let Some(s) = sum.as_mut() {
        s.feed(offset, data);
    }
}

/// Sums `n` bytes that `sendfile` sent from `offset` without bringing them to user space, by
/// reading them back: the pages were just read into the page cache, and one copy to sum them
/// costs less than giving up `sendfile`, which would copy twice.
fn sum_sent(
    sum: &mut Option<StreamDigest>,
    source: &Source,
    buf: &mut [u8],
    offset: u64,
    n: u64,
) -> Result<(), DtpError> {
    if sum.is_none() {
        return Ok(());
    }
    let mut got = 0u64;
    while got < n {
        let cap = (n - got).min(buf.len() as u64) as usize;
        read_exactly(source, &mut buf[..cap], offset + got)?;
        feed(sum, offset + got, &buf[..cap]);
        got += cap as u64;
    }
    Ok(())
}

/// Fills `buf` from `offset`; a source that ends first is an error (its bytes were promised).
fn read_exactly(source: &Source, buf: &mut [u8], offset: u64) -> Result<(), DtpError> {
    let n = read_full(source, buf, offset)?;
    if n < buf.len() {
        let at = offset + n as u64;
        return Err(DtpError::Connection(format!(
            "source ended early at offset {at}"
        )));
    }
    Ok(())
}

/// Reads until `buf` is full or the source ends.
fn read_full(source: &Source, buf: &mut [u8], offset: u64) -> Result<usize, DtpError> {
    let mut got = 0;
    while got < buf.len() {
        let n = source.read_at(&mut buf[got..], offset + got as u64)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(got)
}

/// Writes the slices in order (a header, a payload, a trailer; empty ones are skipped) with as
/// few syscalls as the socket allows.
async fn write_all_slices<const N: usize>(
    conn: &mut DataConn,
    parts: [&[u8]; N],
) -> std::io::Result<()> {
    // On the stack: the data path allocates nothing per write.
    let mut slices = [IoSlice::new(&[]); N];
    let mut used = 0;
    for part in parts.into_iter().filter(|p| !p.is_empty()) {
        slices[used] = IoSlice::new(part);
        used += 1;
    }
    let mut bufs = &mut slices[..used];
    while !bufs.is_empty() {
        let n = conn.write_vectored(bufs).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut bufs, n);
    }
    Ok(())
}

/// Sends in stream mode on one connection and closes it (end of data is end of connection).
pub(crate) async fn send_stream(
    mut conn: DataConn,
    job: SendJob,
    ascii_mode: bool,
) -> Result<(), DtpError> {
    let mut buf = job.pool.take();
    let mut pieces = Vec::with_capacity(2);
    let mut zero_copy = if ascii_mode {
        None
    } else {
        job.source.zero_copy_fd()
    };
    let mut prev_cr = false;
    let mut converted = Vec::new();
    // TYPE A changes the bytes on the wire; its transfers take no checksums (see run_send).
    let mut sum = job.digest.as_ref().map(|d| d.stream());
    'outer: while job.claimer.claim(&mut pieces).is_some() {
        for &(wire, len) in &pieces {
            let file_at = wire + job.file_offset;
            if let (Some(fd), Some(sock)) = (zero_copy, conn.zero_copy_socket()) {
                match tokio::time::timeout(job.idle, zerocopy::sendfile_all(sock, fd, file_at, len))
                    .await
                {
                    Ok(Ok(n)) => {
                        job.counters[0].fetch_add(n, Ordering::Relaxed);
                        sum_sent(&mut sum, &job.source, &mut buf, file_at, n)?;
                        if n < len {
                            break 'outer;
                        }
                        continue;
                    }
                    // Nothing was sent: fall back to reading for the rest of the transfer.
                    Ok(Err(e)) if zerocopy::unsupported(&e) => zero_copy = None,
                    Ok(Err(e)) => return Err(DtpError::Connection(e.to_string())),
                    Err(_) => return Err(DtpError::IdleTimeout(job.idle.as_secs())),
                }
            }
            let mut got = 0u64;
            while got < len {
                let chunk = (len - got).min(buf.len() as u64) as usize;
                let n = read_full(&job.source, &mut buf[..chunk], file_at + got)?;
                if n == 0 {
                    break 'outer;
                }
                feed(&mut sum, file_at + got, &buf[..n]);
                if ascii_mode {
                    converted.clear();
                    ascii::to_crlf(&buf[..n], &mut prev_cr, &mut converted);
                    timed(job.idle, conn.write_all(&converted)).await?;
                } else {
                    timed(job.idle, conn.write_all(&buf[..n])).await?;
                }
                got += n as u64;
                job.counters[0].fetch_add(n as u64, Ordering::Relaxed);
                if n < chunk {
                    break 'outer;
                }
            }
        }
    }
    timed(job.idle, conn.shutdown()).await?;
    Ok(())
}

/// Runs an I/O future with the data idle timeout, mapping errors to transfer failures.
pub(crate) async fn timed<T>(
    idle: Duration,
    f: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, DtpError> {
    match tokio::time::timeout(idle, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(DtpError::Connection(e.to_string())),
        Err(_) => Err(DtpError::IdleTimeout(idle.as_secs())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claimer_hands_out_every_byte_once_across_ranges() {
        let mut set = RangeSet::new();
        set.insert(0, 10);
        set.insert(20, 25);
        set.insert(30, 43);
        let c = BlockClaimer::with_streams(&set, 4, 3);
        let mut got = RangeSet::new();
        let mut pieces = Vec::new();
        let mut total = 0;
        let mut lasts = 0;
        while let Some(last) = c.claim(&mut pieces) {
            for &(a, l) in &pieces {
                assert!(l > 0 && l <= 4);
                got.insert(a, a + l);
                total += l;
            }
            if last {
                lasts += 1;
                assert!(pieces.iter().any(|&(a, l)| a + l == 43));
            }
        }
        assert_eq!(got, set);
        assert_eq!(total, 28);
        assert_eq!(
            lasts, 1,
            "exactly one claim is marked as holding the last bytes"
        );
    }

    #[test]
    fn the_tail_shrinks_so_streams_finish_together() {
        const MIB: u64 = 1 << 20;
        let set = RangeSet::from_range(0, 512 * MIB + 12345);
        let c = BlockClaimer::with_streams(&set, 4 * MIB, 16);
        let mut pieces = Vec::new();
        let mut sizes = Vec::new();
        let mut got = RangeSet::new();
        while c.claim(&mut pieces).is_some() {
            let len: u64 = pieces.iter().map(|p| p.1).sum();
            for &(a, l) in &pieces {
                got.insert(a, a + l);
            }
            sizes.push(len);
        }
        assert_eq!(got, set, "every byte once");
        assert_eq!(sizes[0], 4 * MIB, "full blocks while plenty remains");
        // Sizes never grow, and the last 16 claims (one round of the streams) are all small.
        assert!(sizes.windows(2).all(|w| w[1] <= w[0]));
        let tail = &sizes[sizes.len() - 16..];
        assert!(tail.iter().all(|&s| s <= TAIL_BLOCK), "tail {tail:?}");
        // Shrinking costs about a hundred extra blocks (a 17-byte header each) over 512 MiB.
        assert!(sizes.len() < 2 * 128, "{} blocks", sizes.len());
    }

    #[test]
    fn one_stream_keeps_its_block_size_to_the_end() {
        let set = RangeSet::from_range(0, 10 << 20);
        let c = BlockClaimer::with_streams(&set, 1 << 20, 1);
        let mut pieces = Vec::new();
        let mut n = 0;
        while c.claim(&mut pieces).is_some() {
            assert_eq!(pieces.iter().map(|p| p.1).sum::<u64>(), 1 << 20);
            n += 1;
        }
        assert_eq!(n, 10);
    }
}
