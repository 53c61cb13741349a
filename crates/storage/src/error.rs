//! Storage errors, each mapped to the FTP reply a PI sends.

use std::io;

/// What went wrong in storage.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// No such file or directory: 550.
    #[error("{0}: No such file or directory.")]
    NotFound(String),
    /// Permission denied (by the OS or by a read-only session): 550.
    #[error("{0}: Permission denied.")]
    PermissionDenied(String),
    /// The path would leave the root (`..`, absolute symlink, symlink escape): 550.
    #[error("{0}: Path is outside the root.")]
    OutsideRoot(String),
    /// Already exists: 550 (553 for STOU).
    #[error("{0}: File exists.")]
    AlreadyExists(String),
    /// Not a directory: 550.
    #[error("{0}: Not a directory.")]
    NotADirectory(String),
    /// Is a directory: 550.
    #[error("{0}: Is a directory.")]
    IsADirectory(String),
    /// Directory not empty: 550.
    #[error("{0}: Directory not empty.")]
    NotEmpty(String),
    /// No space left on device / quota: 452.
    #[error("{0}: No space left on device.")]
    NoSpace(String),
    /// Invalid name or argument: 553 / 501.
    #[error("{0}: Invalid argument.")]
    Invalid(String),
    /// Unknown checksum algorithm: 504.
    #[error("checksum algorithm {0} is not supported")]
    UnsupportedAlgorithm(String),
    /// Any other I/O error: 451.
    #[error("{path}: {source}")]
    Io {
        /// Path involved.
        path: String,
        /// Underlying error.
        source: io::Error,
    },
}

impl StorageError {
    /// The FTP reply code for this error.
    pub fn reply_code(&self) -> u16 {
        match self {
            StorageError::NotFound(_)
            | StorageError::PermissionDenied(_)
            | StorageError::OutsideRoot(_)
            | StorageError::AlreadyExists(_)
            | StorageError::NotADirectory(_)
            | StorageError::IsADirectory(_)
            | StorageError::NotEmpty(_) => 550,
            StorageError::NoSpace(_) => 452,
            StorageError::Invalid(_) => 553,
            StorageError::UnsupportedAlgorithm(_) => 504,
            StorageError::Io { .. } => 451,
        }
    }

    /// Maps an `io::Error` for `path` to the matching variant.
    pub fn from_io(path: &str, err: io::Error) -> StorageError {
        let _ = (path, err);
        todo!()
    }
}
