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
    ///
    /// cap-std's refusal of a path that leads outside the root (`PermissionDenied` without an OS
    /// error code, "a path led outside of the filesystem") becomes [`StorageError::OutsideRoot`];
    /// the kernel's `EXDEV` from `openat2(RESOLVE_BENEATH)` is already translated by cap-std.
    /// `ELOOP` (too many links, or `O_NOFOLLOW` on a link) is [`StorageError::Invalid`].
    pub fn from_io(path: &str, err: io::Error) -> StorageError {
        let path = path.to_string();
        if let Some(code) = err.raw_os_error() {
            match code {
                libc::ENOENT => return StorageError::NotFound(path),
                libc::EACCES | libc::EPERM | libc::EROFS => {
                    return StorageError::PermissionDenied(path)
                }
                libc::EEXIST => return StorageError::AlreadyExists(path),
                libc::ENOTDIR => return StorageError::NotADirectory(path),
                libc::EISDIR => return StorageError::IsADirectory(path),
                libc::ENOTEMPTY => return StorageError::NotEmpty(path),
                libc::ENOSPC | libc::EDQUOT => return StorageError::NoSpace(path),
                libc::ELOOP | libc::ENAMETOOLONG | libc::EINVAL => {
                    return StorageError::Invalid(path)
                }
                _ => return StorageError::Io { path, source: err },
            }
        }
        match err.kind() {
            io::ErrorKind::NotFound => StorageError::NotFound(path),
            io::ErrorKind::PermissionDenied if is_escape(&err) => StorageError::OutsideRoot(path),
            io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
                StorageError::PermissionDenied(path)
            }
            io::ErrorKind::AlreadyExists => StorageError::AlreadyExists(path),
            io::ErrorKind::NotADirectory => StorageError::NotADirectory(path),
            io::ErrorKind::IsADirectory => StorageError::IsADirectory(path),
            io::ErrorKind::DirectoryNotEmpty => StorageError::NotEmpty(path),
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => {
                StorageError::NoSpace(path)
            }
            io::ErrorKind::InvalidInput => StorageError::Invalid(path),
            _ => StorageError::Io { path, source: err },
        }
    }
}

/// Whether `err` is cap-std's "a path led outside of the filesystem" (it carries no OS code).
fn is_escape(err: &io::Error) -> bool {
    err.raw_os_error().is_none() && err.to_string().contains("outside")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(code: i32) -> StorageError {
        StorageError::from_io("/f", io::Error::from_raw_os_error(code))
    }

    #[test]
    fn raw_os_errors_map_to_variants() {
        assert!(matches!(os(libc::ENOSPC), StorageError::NoSpace(_)));
        assert!(matches!(os(libc::EDQUOT), StorageError::NoSpace(_)));
        assert!(matches!(os(libc::ENOENT), StorageError::NotFound(_)));
        assert!(matches!(
            os(libc::EACCES),
            StorageError::PermissionDenied(_)
        ));
        assert!(matches!(os(libc::EROFS), StorageError::PermissionDenied(_)));
        assert!(matches!(os(libc::EEXIST), StorageError::AlreadyExists(_)));
        assert!(matches!(os(libc::ENOTDIR), StorageError::NotADirectory(_)));
        assert!(matches!(os(libc::EISDIR), StorageError::IsADirectory(_)));
        assert!(matches!(os(libc::ENOTEMPTY), StorageError::NotEmpty(_)));
        assert!(matches!(os(libc::ELOOP), StorageError::Invalid(_)));
        assert!(matches!(os(libc::EIO), StorageError::Io { .. }));
    }

    #[test]
    fn no_space_is_452_and_keeps_the_path() {
        let err = os(libc::ENOSPC);
        assert_eq!(err.reply_code(), 452);
        assert_eq!(err.to_string(), "/f: No space left on device.");
    }

    #[test]
    fn kinds_without_os_code_map_to_variants() {
        let kind = |k: io::ErrorKind| StorageError::from_io("/f", io::Error::new(k, "x"));
        assert!(matches!(
            kind(io::ErrorKind::NotFound),
            StorageError::NotFound(_)
        ));
        assert!(matches!(
            kind(io::ErrorKind::PermissionDenied),
            StorageError::PermissionDenied(_)
        ));
        assert!(matches!(
            kind(io::ErrorKind::AlreadyExists),
            StorageError::AlreadyExists(_)
        ));
        assert!(matches!(
            kind(io::ErrorKind::StorageFull),
            StorageError::NoSpace(_)
        ));
        assert!(matches!(
            kind(io::ErrorKind::QuotaExceeded),
            StorageError::NoSpace(_)
        ));
        assert!(matches!(
            kind(io::ErrorKind::DirectoryNotEmpty),
            StorageError::NotEmpty(_)
        ));
        assert!(matches!(
            kind(io::ErrorKind::Other),
            StorageError::Io { .. }
        ));
    }

    #[test]
    fn cap_std_escape_is_outside_root() {
        let err = io::Error::new(
            io::ErrorKind::PermissionDenied,
            "a path led outside of the filesystem",
        );
        let mapped = StorageError::from_io("/link", err);
        assert!(matches!(mapped, StorageError::OutsideRoot(_)));
        assert_eq!(mapped.reply_code(), 550);
    }
}
