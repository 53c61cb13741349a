//! What a sending DTP reads from: a file in storage or generated listing bytes.

use std::sync::Arc;

use ferry_storage::{FileHandle, StorageError};

/// Bytes to send, readable at any offset from any stream.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// A file or device, with a regular file's size as it was when the transfer began (what
    /// is sent; taken once, not per block).
    File(Arc<dyn FileHandle>, Option<u64>),
    /// Bytes made in memory (listings).
    Memory(Arc<[u8]>),
}

impl Source {
    /// Wraps an opened file, noting a regular file's size.
    pub(crate) fn file(handle: Arc<dyn FileHandle>) -> Result<Source, StorageError> {
        let len = if handle.is_regular() {
            Some(handle.size()?)
        } else {
            None
        };
        Ok(Source::File(handle, len))
    }

    /// Reads at `offset` into `buf`; 0 at the end.
    pub(crate) fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, StorageError> {
        match self {
            Source::File(f, _) => f.read_at(buf, offset),
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

    /// The source decides what is sent next (see [`FileHandle::offers_pieces`]).
    pub(crate) fn offers_pieces(&self) -> bool {
        matches!(self, Source::File(f, None) if f.offers_pieces())
    }

    /// The next piece of a source that offers them: `(offset, len)` at the front of `buf`,
    /// `None` once all was handed out.
    pub(crate) fn next_piece(&self, buf: &mut [u8]) -> Result<Option<(u64, usize)>, StorageError> {
        match self {
            Source::File(f, _) => f.next_piece(buf),
            Source::Memory(_) => Err(StorageError::Invalid(
                "listing bytes are read by offset".into(),
            )),
        }
    }

    /// Total length when known (regular files and memory), `None` for devices and pipes.
    pub(crate) fn known_len(&self) -> Option<u64> {
        match self {
            Source::File(_, len) => *len,
            Source::Memory(m) => Some(m.len() as u64),
        }
    }

    /// The descriptor for zero-copy sends: regular files only. Devices could splice too, but
    /// `sendfile` from `/dev/zero` measured at half the throughput of reading it into a large
    /// buffer (bench/, mem scenario): splicing hands the socket page-sized pieces.
    pub(crate) fn zero_copy_fd(&self) -> Option<std::os::fd::RawFd> {
        match self {
            Source::File(f, Some(_)) => f.raw_fd(),
            _ => None,
        }
    }
}
