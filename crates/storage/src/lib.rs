//! Storage (Globus' DSI): a trait for data access, a POSIX back-end confined beneath a root by
//! construction, the data-processing module registry (ERET/ESTO) and checksums.
#![warn(missing_docs, unreachable_pub)]

pub mod cache;
pub mod checksum;
pub mod error;
pub mod identity;
pub mod listing;
pub mod modules;
pub mod path;
pub mod posix;

pub use cache::{CacheMode, ChecksumCache, FileVersion};
pub use checksum::{
    adler32_combine, checksum_handle, crc32c_combine, ChecksumAlgorithm, Checksummer, Joinable,
};
pub use error::StorageError;
pub use identity::{AsUser, Identity};
pub use path::VirtualPath;
pub use posix::PosixStorage;

use std::os::fd::RawFd;
use std::sync::Arc;

/// What kind of entry a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link (only from `symlink_metadata`/listings).
    Symlink,
    /// Character device (e.g. /dev/zero).
    CharDevice,
    /// Block device.
    BlockDevice,
    /// FIFO.
    Fifo,
    /// Socket.
    Socket,
}

/// Metadata of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// Kind of entry.
    pub kind: FileKind,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, seconds since the Unix epoch.
    pub mtime: i64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Owner uid.
    pub uid: u32,
    /// Group gid.
    pub gid: u32,
    /// Hard links.
    pub nlink: u64,
    /// Device number (for `Unique`).
    pub dev: u64,
    /// Inode number (for `Unique`).
    pub ino: u64,
    /// Link target, for symlinks.
    pub link_target: Option<String>,
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// File name (no slashes).
    pub name: String,
    /// Its metadata (of the link itself for symlinks).
    pub metadata: Metadata,
}

/// How to open a file for writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// Create the file if it does not exist.
    pub create: bool,
    /// Truncate it to zero length on open.
    pub truncate: bool,
    /// Fail if it exists (STOU).
    pub create_new: bool,
}

/// An open file: positional reads and writes, shareable across stream tasks.
pub trait FileHandle: Send + Sync + std::fmt::Debug {
    /// Reads up to `buf.len()` bytes at `offset`; 0 at end of file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, StorageError>;
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<(), StorageError>;
    /// Current size (0 for devices).
    fn size(&self) -> Result<u64, StorageError>;
    /// Whether this is a regular file (sendfile and size-based planning apply). By default
    /// not: a handle that is not a file on disk sends until its data ends.
    fn is_regular(&self) -> bool {
        false
    }
    /// The raw descriptor, for zero-copy `sendfile`/`splice` on clear channels. By default
    /// none, so a layer that must see the bytes cannot be bypassed by forgetting this.
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
    /// Flushes data to stable storage.
    fn sync(&self) -> Result<(), StorageError>;
    /// Sets the length (used to truncate after a full stream-mode STOR).
    fn set_len(&self, len: u64) -> Result<(), StorageError>;
    /// Whether this source decides what is sent next ([`FileHandle::next_piece`]) rather than
    /// being read at the offsets a sender claims. Ordinary files: no.
    fn offers_pieces(&self) -> bool {
        false
    }
    /// The next piece to send, for a source that [offers pieces](FileHandle::offers_pieces)
    /// (a multicast node's buffer hands each child the bytes it has, in whatever order they
    /// arrived, so a late block holds back only itself): fills the front of `buf` and returns
    /// its offset and length; waits while there is none yet; `None` once all was handed out.
    /// Each piece goes to one caller only, so parallel streams may share the source.
    fn next_piece(&self, _buf: &mut [u8]) -> Result<Option<(u64, usize)>, StorageError> {
        Err(StorageError::Invalid(
            "this source is read by offset, not in pieces".into(),
        ))
    }
}

/// The storage interface (Globus DSI). All paths are virtual, already resolved against the
/// session's working directory; implementations must confine them beneath their root.
///
/// Calls block: the DTP runs them where blocking is acceptable.
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// Metadata, following symlinks.
    fn stat(&self, path: &VirtualPath) -> Result<Metadata, StorageError>;
    /// Metadata of the entry itself (symlinks not followed).
    fn symlink_metadata(&self, path: &VirtualPath) -> Result<Metadata, StorageError>;
    /// Directory entries (without `.` and `..`), sorted by name.
    fn list(&self, path: &VirtualPath) -> Result<Vec<DirEntry>, StorageError>;
    /// Opens a file (or device) for reading.
    fn open_read(&self, path: &VirtualPath) -> Result<Arc<dyn FileHandle>, StorageError>;
    /// Opens a file for writing.
    fn open_write(
        &self,
        path: &VirtualPath,
        opts: WriteOptions,
    ) -> Result<Arc<dyn FileHandle>, StorageError>;
    /// Creates a directory.
    fn mkdir(&self, path: &VirtualPath) -> Result<(), StorageError>;
    /// Removes an empty directory.
    fn rmdir(&self, path: &VirtualPath) -> Result<(), StorageError>;
    /// Removes a file or symlink.
    fn remove_file(&self, path: &VirtualPath) -> Result<(), StorageError>;
    /// Removes a directory tree (never follows symlinks).
    fn remove_tree(&self, path: &VirtualPath) -> Result<(), StorageError>;
    /// Renames within the root.
    fn rename(&self, from: &VirtualPath, to: &VirtualPath) -> Result<(), StorageError>;
    /// Sets permission bits.
    fn chmod(&self, path: &VirtualPath, mode: u32) -> Result<(), StorageError>;
    /// Sets the modification time (seconds since the epoch).
    fn set_mtime(&self, path: &VirtualPath, mtime: i64) -> Result<(), StorageError>;
    /// The WebDAV dead properties kept with `path` (an opaque value the HTTPS door wrote), if
    /// any. They follow the entry through renames.
    fn dead_properties(&self, path: &VirtualPath) -> Result<Option<Vec<u8>>, StorageError> {
        let _ = path;
        Ok(None)
    }
    /// The dead properties of the entries `names` of directory `dir`, in their order (`None`
    /// where there are none or they cannot be read): one call for a listing's worth.
    fn dead_properties_of(&self, dir: &VirtualPath, names: &[String]) -> Vec<Option<Vec<u8>>> {
        names
            .iter()
            .map(|n| {
                dir.join(n)
                    .ok()
                    .and_then(|p| self.dead_properties(&p).ok().flatten())
            })
            .collect()
    }
    /// Keeps `value` as `path`'s dead properties (`None` removes them).
    fn set_dead_properties(
        &self,
        path: &VirtualPath,
        value: Option<&[u8]>,
    ) -> Result<(), StorageError> {
        let _ = value;
        Err(StorageError::Invalid(format!(
            "{path}: this storage keeps no properties"
        )))
    }
    /// Creates a symlink at `link` pointing to `target` (target stored as given; it is resolved
    /// beneath the root when followed, so it cannot escape).
    fn symlink(&self, target: &str, link: &VirtualPath) -> Result<(), StorageError>;
    /// Checksum of `[offset, offset + length)` (`None` = to end). The default opens the file
    /// with [`Storage::open_read`] (as the account, for a storage that switches identity) and
    /// reads it on the caller's thread through [`cache::checksum_cached`], so a long checksum
    /// holds up nothing else.
    fn checksum(
        &self,
        path: &VirtualPath,
        algorithm: ChecksumAlgorithm,
        offset: u64,
        length: Option<u64>,
    ) -> Result<String, StorageError> {
        let handle = self.open_read(path)?;
        cache::checksum_cached(self, &handle, algorithm, offset, length)
    }
    /// The whole-file checksum of `alg` this storage has at hand for the file as it is now,
    /// found without reading the file or its attributes (one `stat`): a value kept in this
    /// process's memory. `None` sends the caller to [`Storage::checksum`]. The server asks
    /// this on the session's own task, so it must not wait on anything slower than a `stat`
    /// (a storage that switches identity for each call keeps the default).
    fn checksum_at_hand(&self, path: &VirtualPath, alg: ChecksumAlgorithm) -> Option<String> {
        let _ = (path, alg);
        None
    }
    /// The whole-file checksums this storage keeps, if it keeps any (see [`cache`]).
    fn checksum_cache(&self) -> Option<&ChecksumCache> {
        None
    }
    /// Keeps `sums`, taken over `file` at version `at` (by a transfer that summed its bytes as
    /// they moved, or a `CKSM` that read it), for later `CKSM`s. Never fails the caller.
    fn remember_checksums(&self, file: &Arc<dyn FileHandle>, at: FileVersion, sums: &[cache::Sum]) {
        let _ = (file, at, sums);
    }
}
