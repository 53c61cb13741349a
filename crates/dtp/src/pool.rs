//! Reusable transfer buffers: taken once per stream per transfer, never per block.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

/// Size of the buffers the data path reads and writes through. Blocks on the wire may be larger;
/// a buffer this size stays in a core's L2 cache between the file read and the socket copy,
/// which measured about 20 % less server CPU per GB than 1 MiB buffers (bench/, mem scenario).
pub const IO_CHUNK: usize = 256 * 1024;

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
