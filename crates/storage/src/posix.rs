//! The POSIX back-end: every path resolved beneath a root directory handle (cap-std), so `..`,
//! absolute paths and symlinks cannot escape by construction.

use std::path::Path;

/// POSIX storage confined beneath one directory.
#[derive(Debug)]
pub struct PosixStorage {
    _private: (),
}

impl PosixStorage {
    /// Opens `root` as the confinement directory. `read_only` refuses every change with
    /// [`crate::StorageError::PermissionDenied`].
    pub fn open(root: &Path, read_only: bool) -> Result<PosixStorage, crate::StorageError> {
        let _ = (root, read_only);
        todo!()
    }
}
