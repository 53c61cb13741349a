//! Shared fixture for the POSIX back-end tests.
#![allow(dead_code)]

pub use std::fs;
pub use std::os::unix::fs::{symlink, PermissionsExt};
pub use std::path::Path;
pub use std::sync::Arc;

pub use ferry_storage::{
    ChecksumAlgorithm, FileHandle, FileKind, PosixStorage, Storage, StorageError, VirtualPath,
    WriteOptions,
};

/// A temporary tree: `<tmp>/root` is the storage root, `<tmp>/outside` must stay untouched.
pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub storage: PosixStorage,
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture::with_mode(false)
    }

    pub fn with_mode(read_only: bool) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir(tmp.path().join("root")).unwrap();
        fs::create_dir(tmp.path().join("outside")).unwrap();
        fs::write(tmp.path().join("outside/secret"), b"secret").unwrap();
        fs::create_dir(tmp.path().join("root/data")).unwrap();
        fs::write(tmp.path().join("root/data/file"), b"hello").unwrap();
        let storage = PosixStorage::open(&tmp.path().join("root"), read_only).unwrap();
        Fixture { tmp, storage }
    }

    pub fn root(&self) -> std::path::PathBuf {
        self.tmp.path().join("root")
    }

    pub fn outside(&self) -> std::path::PathBuf {
        self.tmp.path().join("outside")
    }

    pub fn outside_untouched(&self) {
        let mut names: Vec<_> = fs::read_dir(self.outside())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["secret"]);
        assert_eq!(fs::read(self.outside().join("secret")).unwrap(), b"secret");
    }
}

pub fn vp(s: &str) -> VirtualPath {
    VirtualPath::resolve(&VirtualPath::root(), s).unwrap()
}

pub const CREATE: WriteOptions = WriteOptions {
    create: true,
    truncate: true,
    create_new: false,
};
pub const EXISTING: WriteOptions = WriteOptions {
    create: false,
    truncate: false,
    create_new: false,
};
pub const CREATE_NEW: WriteOptions = WriteOptions {
    create: true,
    truncate: false,
    create_new: true,
};

pub fn refused<T: std::fmt::Debug>(r: Result<T, StorageError>) -> bool {
    matches!(
        r,
        Err(StorageError::OutsideRoot(_)) | Err(StorageError::PermissionDenied(_))
    )
}

pub fn escaped<T: std::fmt::Debug>(r: Result<T, StorageError>, what: &str) {
    match r {
        Err(StorageError::OutsideRoot(_)) => {}
        other => panic!("{what}: expected OutsideRoot, got {other:?}"),
    }
}

pub fn read_all(h: &Arc<dyn FileHandle>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 7];
    loop {
        let n = h.read_at(&mut buf, out.len() as u64).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}
