//! Conversion of cap-std metadata into the storage [`Metadata`].

use cap_std::fs::MetadataExt;

use crate::{FileKind, Metadata};

/// The kind encoded in `st_mode`.
pub(crate) fn kind_of(mode: u32) -> FileKind {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileKind::Dir,
        libc::S_IFLNK => FileKind::Symlink,
        libc::S_IFCHR => FileKind::CharDevice,
        libc::S_IFBLK => FileKind::BlockDevice,
        libc::S_IFIFO => FileKind::Fifo,
        libc::S_IFSOCK => FileKind::Socket,
        _ => FileKind::File,
    }
}

/// Our metadata from cap-std's; `link_target` is filled in by the caller for symlinks.
pub(crate) fn convert(m: &cap_std::fs::Metadata, link_target: Option<String>) -> Metadata {
    let kind = kind_of(m.mode());
    Metadata {
        kind,
        size: match kind {
            FileKind::CharDevice | FileKind::BlockDevice => 0,
            _ => m.size(),
        },
        mtime: m.mtime(),
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        nlink: m.nlink(),
        dev: m.dev(),
        ino: m.ino(),
        link_target,
    }
}
