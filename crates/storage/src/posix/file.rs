//! An open POSIX file: positional reads and writes on a `std::fs::File`.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;

use crate::{FileHandle, StorageError};

/// A file opened beneath the root. Devices and pipes, which cannot seek, fall back to plain
/// reads and writes, where the offset is ignored.
#[derive(Debug)]
pub(crate) struct PosixFile {
    file: File,
    /// The virtual path, for error messages (never the host path).
    path: String,
    regular: bool,
}

impl PosixFile {
    /// Wraps an opened file.
    pub(crate) fn new(file: File, path: String, regular: bool) -> PosixFile {
        PosixFile {
            file,
            path,
            regular,
        }
    }

    fn err(&self, e: io::Error) -> StorageError {
        StorageError::from_io(&self.path, e)
    }
}

impl FileHandle for PosixFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, StorageError> {
        loop {
            let result = match self.file.read_at(buf, offset) {
                Err(e) if e.raw_os_error() == Some(libc::ESPIPE) => (&self.file).read(buf),
                other => other,
            };
            match result {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other.map_err(|e| self.err(e)),
            }
        }
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<(), StorageError> {
        match self.file.write_all_at(buf, offset) {
            Err(e) if e.raw_os_error() == Some(libc::ESPIPE) => (&self.file).write_all(buf),
            other => other,
        }
        .map_err(|e| self.err(e))
    }

    fn size(&self) -> Result<u64, StorageError> {
        if !self.regular {
            return Ok(0);
        }
        Ok(self.file.metadata().map_err(|e| self.err(e))?.len())
    }

    fn is_regular(&self) -> bool {
        self.regular
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.file.as_raw_fd())
    }

    fn sync(&self) -> Result<(), StorageError> {
        match self.file.sync_all() {
            // Devices such as /dev/null cannot be synced and have nothing to lose.
            Err(e) if !self.regular && e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
            other => other.map_err(|e| self.err(e)),
        }
    }

    fn set_len(&self, len: u64) -> Result<(), StorageError> {
        self.file.set_len(len).map_err(|e| self.err(e))
    }
}
