//! Reusable transfer buffers: taken once per stream per transfer, never per block.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

/// Size of the buffers the data path reads and writes through. Blocks on the wire may be larger;
/// a buffer this size stays in a core's L2 cache between the file read and the socket copy,
/// which measured about 20 % less server CPU per GB than 1 MiB buffers (bench/, mem scenario).
pub const IO_CHUNK: usize = 256 * 1024;

/// The MODE E block size a sender uses when none was configured: 256 KiB on a single stream;
/// on several, 4 MiB, or less when `total` bytes would not give every stream four blocks
/// (never below 256 KiB).
///
/// Receivers commonly read each block's payload with one call of the block's length
/// (globus-url-copy does: one `recv` of the whole block). On a single stream that call waits
/// for the whole block to cross the one socket, so sender and receiver take turns; 256 KiB keeps
/// both busy. With several streams another socket always holds a complete block, and larger
/// blocks mean less per-block work at the receiver, which is then the busier side. Measured on
/// loopback with globus-url-copy pulling 4 GiB from /dev/zero (bench/ `mem`): 1 stream
/// 6.3 GB/s with 256 KiB blocks against 4.5 GB/s with 1 MiB; 4 and 8 streams 4.3 GB/s with
/// 4 MiB, 3.5-3.7 with 1 MiB and 2.9 with 256 KiB. 512 KiB at one stream (sent in one write)
/// left globus-url-copy where it was and slowed ferry's own server as receiver by 13 %; only a
/// receiver that polls gains from it, so ferry's client asks for it (`SITE BLOCKSIZE`).
pub fn auto_block_size(streams: usize, total: u64) -> u64 {
    const SMALLEST: u64 = IO_CHUNK as u64;
    const LARGEST: u64 = 16 * IO_CHUNK as u64;
    if streams <= 1 {
        return SMALLEST;
    }
    let per_block = total / (4 * streams as u64);
    // Whole chunks, so every block but the last is read in full buffers.
    (per_block / SMALLEST * SMALLEST).clamp(SMALLEST, LARGEST)
}

#[cfg(test)]
mod block_size_tests {
    use super::auto_block_size;

    #[test]
    fn one_stream_gets_small_blocks_and_many_streams_large_ones() {
        assert_eq!(auto_block_size(1, 1 << 40), 256 << 10);
        assert_eq!(auto_block_size(4, 1 << 40), 4 << 20);
        assert_eq!(auto_block_size(8, u64::MAX), 4 << 20);
    }

    #[test]
    fn small_totals_still_give_every_stream_work() {
        // 16 MiB over 4 streams: 1 MiB blocks, four per stream.
        assert_eq!(auto_block_size(4, 16 << 20), 1 << 20);
        // Tiny files never go below one buffer.
        assert_eq!(auto_block_size(8, 1000), 256 << 10);
        assert_eq!(auto_block_size(2, 0), 256 << 10);
        // Rounded down to whole buffers.
        assert_eq!(auto_block_size(2, 5 << 20), 512 << 10);
    }
}

/// A pool of equally sized byte buffers. A stream takes one buffer when its transfer starts and
/// gives it back when it ends, so the data path allocates nothing per block and idle sessions
/// hold no buffers.
#[derive(Debug)]
pub struct BufferPool {
    size: usize,
    keep: usize,
    free: Mutex<Vec<Box<[u8]>>>,
}

impl BufferPool {
    /// A pool of `size`-byte buffers that keeps at most `keep` idle ones.
    pub fn new(size: usize, keep: usize) -> Arc<BufferPool> {
        Arc::new(BufferPool {
            size,
            keep,
            free: Mutex::new(Vec::new()),
        })
    }

    /// Buffer size in bytes.
    pub fn buffer_size(&self) -> usize {
        self.size
    }

    /// Takes a buffer (allocating one if none is free).
    pub fn take(self: &Arc<Self>) -> PooledBuf {
        let buf = self
            .free
            .lock()
            .ok()
            .and_then(|mut f| f.pop())
            .unwrap_or_else(|| vec![0u8; self.size].into_boxed_slice());
        PooledBuf {
            buf: Some(buf),
            pool: Arc::clone(self),
        }
    }
}

/// A buffer that returns to its pool when dropped.
#[derive(Debug)]
pub struct PooledBuf {
    buf: Option<Box<[u8]>>,
    pool: Arc<BufferPool>,
}

impl Deref for PooledBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.as_deref().unwrap_or(&[])
    }
}

impl AsRef<[u8]> for PooledBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl DerefMut for PooledBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buf.as_deref_mut().unwrap_or(&mut [])
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        if let (Some(buf), Ok(mut free)) = (self.buf.take(), self.pool.free.lock()) {
            if free.len() < self.pool.keep {
                free.push(buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_go_back_to_the_pool_and_are_reused() {
        let pool = BufferPool::new(4096, 2);
        let p1 = {
            let b = pool.take();
            b.as_ptr()
        };
        let b2 = pool.take();
        assert_eq!(b2.as_ptr(), p1);
        assert_eq!(b2.len(), 4096);
    }
}
