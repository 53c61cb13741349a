//! WebDAV dead properties (what PROPPATCH sets), kept in one extended attribute of the file or
//! directory they describe, so they follow it through a rename and go with it when it is
//! removed.

use cap_std::fs::Dir;
use rustix::fs::XattrFlags;
use rustix::io::Errno;

use crate::{StorageError, VirtualPath};

/// The attribute.
pub(crate) const DAV_XATTR: &str = "user.ferry.dav";
/// Largest value kept (one ext4 block holds all of a file's attributes).
pub(crate) const MAX_LEN: usize = 3072;

/// A read-only descriptor of the file or directory (attributes are set through any
/// descriptor; the kernel checks the caller's right to the inode, not the open mode).
fn open(root: &Dir, path: &VirtualPath) -> Result<std::fs::File, StorageError> {
    let rel = path.relative();
    root.open(if rel.is_empty() { "." } else { rel })
        .map(|f| f.into_std())
        .map_err(|e| super::io_err(path)(e))
}

/// The value kept for `path`, if any.
pub(crate) fn get(root: &Dir, path: &VirtualPath) -> Result<Option<Vec<u8>>, StorageError> {
    let file = open(root, path)?;
    let mut buf = vec![0u8; MAX_LEN];
    match rustix::fs::fgetxattr(&file, DAV_XATTR, &mut buf[..]) {
        Ok(n) => {
            buf.truncate(n);
            Ok(Some(buf))
        }
        Err(Errno::NODATA) | Err(Errno::NOTSUP) => Ok(None),
        Err(e) => Err(StorageError::Io {
            path: path.to_string(),
            source: e.into(),
        }),
    }
}

/// Keeps `value` for `path` (`None` removes it).
pub(crate) fn set(
    root: &Dir,
    path: &VirtualPath,
    value: Option<&[u8]>,
) -> Result<(), StorageError> {
    let file = open(root, path)?;
    let r = match value {
        Some(v) if v.len() > MAX_LEN => {
            return Err(StorageError::NoSpace(format!(
                "{path}: properties over {MAX_LEN} bytes"
            )))
        }
        Some(v) => rustix::fs::fsetxattr(&file, DAV_XATTR, v, XattrFlags::empty()),
        None => match rustix::fs::fremovexattr(&file, DAV_XATTR) {
            Err(Errno::NODATA) => Ok(()),
            r => r,
        },
    };
    r.map_err(|e| match e {
        Errno::NOTSUP => StorageError::Invalid(format!(
            "{path}: this file system keeps no extended attributes"
        )),
        Errno::PERM | Errno::ACCESS => StorageError::PermissionDenied(path.to_string()),
        Errno::NOSPC | Errno::TOOBIG | Errno::RANGE => StorageError::NoSpace(path.to_string()),
        e => StorageError::Io {
            path: path.to_string(),
            source: e.into(),
        },
    })
}

#[cfg(test)]
mod tests {
    use crate::{PosixStorage, Storage, VirtualPath, WriteOptions};

    fn p(s: &str) -> VirtualPath {
        VirtualPath::resolve(&VirtualPath::root(), s).unwrap()
    }

    #[test]
    fn dead_properties_are_kept_follow_a_rename_and_can_be_removed() {
        let dir = tempfile::tempdir().unwrap();
        let s = PosixStorage::open(dir.path(), false).unwrap();
        s.open_write(
            &p("/f"),
            WriteOptions {
                create: true,
                truncate: true,
                create_new: false,
            },
        )
        .unwrap();
        s.mkdir(&p("/d")).unwrap();
        assert_eq!(s.dead_properties(&p("/f")).unwrap(), None);
        s.set_dead_properties(&p("/f"), Some(b"one")).unwrap();
        s.set_dead_properties(&p("/d"), Some(b"two")).unwrap();
        s.rename(&p("/f"), &p("/g")).unwrap();
        assert_eq!(
            s.dead_properties(&p("/g")).unwrap().as_deref(),
            Some(&b"one"[..])
        );
        assert_eq!(
            s.dead_properties(&p("/d")).unwrap().as_deref(),
            Some(&b"two"[..])
        );
        s.set_dead_properties(&p("/g"), None).unwrap();
        assert_eq!(s.dead_properties(&p("/g")).unwrap(), None);
        assert!(s
            .set_dead_properties(&p("/g"), Some(&[0u8; super::MAX_LEN + 1]))
            .is_err());
        let ro = PosixStorage::open(dir.path(), true).unwrap();
        assert!(ro.set_dead_properties(&p("/d"), None).is_err());
    }
}
