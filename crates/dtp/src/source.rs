//! What a sending DTP reads from: a file in storage or generated listing bytes.

use std::sync::Arc;

use ferry_storage::{FileHandle, StorageError};

/// Bytes to send, readable at any offset from any stream.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// A file or device.
    File(Arc<dyn FileHandle>),
    /// Bytes made in memory (listings).
    Memory(Arc<[u8]>),
}

impl Source {
    /// Reads at `offset` into `buf`; 0 at the end.
    pub(crate) fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, StorageError> {
        match self {
            Source::File(f) => f.read_at(buf, offset),
            Source::Memory(m) => {
                let Ok(start) = usize::try_from(offset) else {
                    return Ok(0);
                };
                if start >= m.len() {
                    return Ok(0);
                }
                let n = buf.len().min(m.len() - start);
                buf[..n].copy_from_slice(&m[start..start + n]);
                Ok(n)
            }
        }
    }

    /// Total length when known (regular files and memory), `None` for devices and pipes.
    pub(crate) fn known_len(&self) -> Result<Option<u64>, StorageError> {
        match self {
            Source::File(f) if f.is_regular() => Ok(Some(f.size()?)),
            Source::File(_) => Ok(None),
            Source::Memory(m) => Ok(Some(m.len() as u64)),
        }
    }

    /// The descriptor for zero-copy sends: regular files only. Devices could splice too, but
    /// `sendfile` from `/dev/zero` measured at half the throughput of reading it into a large
    /// buffer (bench/, mem scenario): splicing hands the socket page-sized pieces.
    pub(crate) fn zero_copy_fd(&self) -> Option<std::os::fd::RawFd> {
        match self {
            Source::File(f) if f.is_regular() => f.raw_fd(),
            _ => None,
        }
    }
}
