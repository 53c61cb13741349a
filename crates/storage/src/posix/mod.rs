//! The POSIX back-end: every path resolved beneath a root directory handle (cap-std), so `..`,
//! absolute paths and symlinks cannot escape by construction.
//!
//! Symlinks inside the root are followed wherever the operation follows links; a link whose
//! resolution would leave the root (absolute target, or `..` past the root) fails with
//! [`StorageError::OutsideRoot`]. Creating a symlink with an absolute target, or a relative one
//! that lexically climbs above the root, is refused up front, so the store never holds links
//! that could mislead a program outside the sandbox.

mod file;
mod meta;
mod properties;

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use cap_fs_ext::{DirExt, SystemTimeSpec};
use cap_std::fs::{Dir, OpenOptions, Permissions, PermissionsExt};
use std::os::unix::fs::PermissionsExt as _;

use crate::cache::Sum;
use crate::{
    ChecksumAlgorithm, ChecksumCache, DirEntry, FileHandle, FileVersion, Metadata, Storage,
    StorageError, VirtualPath, WriteOptions,
};

use file::PosixFile;

/// setuid, setgid and sticky: bits no client sets, by `SITE CHMOD` or by uploading.
const SPECIAL_BITS: u32 = 0o7000;

/// POSIX storage confined beneath one directory.
#[derive(Debug)]
pub struct PosixStorage {
    /// Every operation resolves relative to this handle, never through host path strings.
    root: Dir,
    read_only: bool,
    /// Whole-file checksums kept for `CKSM` (shared by every session on this root).
    cache: Option<Arc<ChecksumCache>>,
}

impl PosixStorage {
    /// Opens `root` as the confinement directory. `read_only` refuses every change with
    /// [`crate::StorageError::PermissionDenied`].
    pub fn open(root: &Path, read_only: bool) -> Result<PosixStorage, crate::StorageError> {
        let dir = Dir::open_ambient_dir(root, cap_std::ambient_authority())
            .map_err(|e| StorageError::from_io(&root.display().to_string(), e))?;
        Ok(PosixStorage::from_dir(dir, read_only))
    }

    /// Confines storage beneath an already opened directory (e.g. a home opened before
    /// privileges were dropped).
    pub fn from_dir(root: Dir, read_only: bool) -> PosixStorage {
        PosixStorage {
            root,
            read_only,
            cache: None,
        }
    }

    /// Keeps whole-file checksums in `cache` (a read-only storage keeps them in its memory
    /// only, never in the files' attributes).
    pub fn with_checksum_cache(mut self, cache: Arc<ChecksumCache>) -> PosixStorage {
        self.cache = Some(cache);
        self
    }

    /// Whether every change is refused.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Refuses changes in a read-only session.
    fn check_writable(&self, path: &VirtualPath) -> Result<(), StorageError> {
        if self.read_only {
            return Err(StorageError::PermissionDenied(path.to_string()));
        }
        Ok(())
    }

    /// Refuses changes in a read-only session and any removal or rename of the root itself.
    fn check_removable(&self, path: &VirtualPath) -> Result<(), StorageError> {
        self.check_writable(path)?;
        if path.is_root() {
            return Err(StorageError::PermissionDenied(path.to_string()));
        }
        Ok(())
    }

    /// The target text of the symlink at `rel`, if it is one and can be read.
    fn link_target(&self, dir: &Dir, rel: &Path) -> Option<String> {
        dir.read_link_contents(rel)
            .ok()
            .map(|t| t.to_string_lossy().into_owned())
    }
}

/// An error mapper for `path`.
fn io_err(path: &VirtualPath) -> impl Fn(io::Error) -> StorageError + '_ {
    move |e| StorageError::from_io(path.as_str(), e)
}

/// Seconds since the epoch as a file time.
fn file_time(path: &VirtualPath, secs: i64) -> Result<SystemTimeSpec, StorageError> {
    let magnitude = Duration::from_secs(secs.unsigned_abs());
    let time = if secs >= 0 {
        UNIX_EPOCH.checked_add(magnitude)
    } else {
        UNIX_EPOCH.checked_sub(magnitude)
    };
    let time = time.ok_or_else(|| StorageError::Invalid(path.to_string()))?;
    Ok(SystemTimeSpec::Absolute(
        cap_std::time::SystemTime::from_std(time),
    ))
}

impl Storage for PosixStorage {
    fn stat(&self, path: &VirtualPath) -> Result<Metadata, StorageError> {
        let m = self.root.metadata(path.relative()).map_err(io_err(path))?;
        Ok(meta::convert(&m, None))
    }

    fn symlink_metadata(&self, path: &VirtualPath) -> Result<Metadata, StorageError> {
        let rel = Path::new(path.relative());
        let m = self.root.symlink_metadata(rel).map_err(io_err(path))?;
        let target = if m.file_type().is_symlink() {
            self.link_target(&self.root, rel)
        } else {
            None
        };
        Ok(meta::convert(&m, target))
    }

    /// Names that are not UTF-8 are shown lossily (they cannot be named back by a client).
    fn list(&self, path: &VirtualPath) -> Result<Vec<DirEntry>, StorageError> {
        let dir = self.root.open_dir(path.relative()).map_err(io_err(path))?;
        let mut entries = Vec::new();
        for entry in dir.entries().map_err(io_err(path))? {
            let entry = entry.map_err(io_err(path))?;
            let os_name = entry.file_name();
            let m = match entry.metadata() {
                Ok(m) => m,
                // Removed between readdir and lstat: it is simply no longer listed.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(path)(e)),
            };
            let target = if m.file_type().is_symlink() {
                self.link_target(&dir, Path::new(&os_name))
            } else {
                None
            };
            entries.push(DirEntry {
                name: os_name.to_string_lossy().into_owned(),
                metadata: meta::convert(&m, target),
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// Opening a FIFO blocks until a writer appears, as `open(2)` does.
    fn open_read(&self, path: &VirtualPath) -> Result<Arc<dyn FileHandle>, StorageError> {
        let file = self
            .root
            .open(path.relative())
            .map_err(io_err(path))?
            .into_std();
        let m = file.metadata().map_err(io_err(path))?;
        if m.is_dir() {
            return Err(StorageError::IsADirectory(path.to_string()));
        }
        if m.is_file() {
            // Parallel streams read neighbouring blocks out of order; tell the kernel the file
            // as a whole is read front to back so its readahead keeps ahead of them. Advice
            // only: a refusal changes nothing.
            let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Sequential);
        }
        Ok(Arc::new(PosixFile::new(
            file,
            path.to_string(),
            m.is_file(),
        )))
    }

    /// The handle is write-only: `read_at` on it fails.
    fn open_write(
        &self,
        path: &VirtualPath,
        opts: WriteOptions,
    ) -> Result<Arc<dyn FileHandle>, StorageError> {
        self.check_writable(path)?;
        let mut options = OpenOptions::new();
        options
            .write(true)
            .create(opts.create)
            .truncate(opts.truncate)
            .create_new(opts.create_new);
        let file = self
            .root
            .open_with(path.relative(), &options)
            .map_err(io_err(path))?
            .into_std();
        let m = file.metadata().map_err(io_err(path))?;
        if m.is_file() && m.permissions().mode() & SPECIAL_BITS != 0 {
            // A file written by a client is never setuid, setgid or sticky: the data tasks
            // write as the server process, whose privilege would keep the bits a write by
            // the account itself clears.
            file.set_permissions(std::fs::Permissions::from_mode(
                m.permissions().mode() & 0o777,
            ))
            .map_err(io_err(path))?;
        }
        let handle = PosixFile::new(file, path.to_string(), m.is_file());
        if let Some(c) = &self.cache {
            // The checksums kept for what is about to be overwritten are stale from now on.
            c.forget(&handle, true);
        }
        Ok(Arc::new(handle))
    }

    fn mkdir(&self, path: &VirtualPath) -> Result<(), StorageError> {
        self.check_writable(path)?;
        self.root.create_dir(path.relative()).map_err(io_err(path))
    }

    fn rmdir(&self, path: &VirtualPath) -> Result<(), StorageError> {
        self.check_removable(path)?;
        self.root.remove_dir(path.relative()).map_err(io_err(path))
    }

    fn remove_file(&self, path: &VirtualPath) -> Result<(), StorageError> {
        self.check_removable(path)?;
        self.root.remove_file(path.relative()).map_err(io_err(path))
    }

    /// A symlink is removed itself, never its target; a file is removed like `rm -r` does.
    fn remove_tree(&self, path: &VirtualPath) -> Result<(), StorageError> {
        self.check_removable(path)?;
        let rel = path.relative();
        let m = self.root.symlink_metadata(rel).map_err(io_err(path))?;
        if m.is_dir() {
            self.root.remove_dir_all(rel).map_err(io_err(path))
        } else {
            self.root.remove_file(rel).map_err(io_err(path))
        }
    }

    fn rename(&self, from: &VirtualPath, to: &VirtualPath) -> Result<(), StorageError> {
        self.check_removable(from)?;
        self.check_removable(to)?;
        self.root
            .rename(from.relative(), &self.root, to.relative())
            .map_err(io_err(from))
    }

    /// Only the permission bits are set: setuid, setgid and sticky in `mode` are dropped (a
    /// copy that keeps a group directory's 2775 still succeeds, as 775).
    fn chmod(&self, path: &VirtualPath, mode: u32) -> Result<(), StorageError> {
        self.check_writable(path)?;
        let perms = Permissions::from_mode(mode & 0o777);
        self.root
            .set_permissions(path.relative(), perms)
            .map_err(io_err(path))
    }

    fn set_mtime(&self, path: &VirtualPath, mtime: i64) -> Result<(), StorageError> {
        self.check_writable(path)?;
        let time = file_time(path, mtime)?;
        // The bytes do not change: values kept for them follow the file to its new mtime.
        let kept = match &self.cache {
            Some(c)
                if self
                    .stat(path)
                    .is_ok_and(|m| m.kind == crate::FileKind::File) =>
            {
                self.open_read(path).ok().map(|f| (c.valid(&*f), f))
            }
            _ => None,
        };
        self.root
            .set_times(path.relative(), None, Some(time))
            .map_err(io_err(path))?;
        if let Some((sums, file)) = kept {
            if let Some(at) = FileVersion::of(&*file) {
                self.remember_checksums(&file, at, &sums);
            }
        }
        Ok(())
    }

    /// Absolute targets, and `..` after a name (`a/../../x`, which another link swapped in
    /// for `a` could make climb out later), are refused with [`StorageError::Invalid`]. The
    /// target is resolved through the links that exist, from where the link's directory
    /// really is: one that leads outside the root is refused with
    /// [`StorageError::OutsideRoot`]. Programs that follow links without ferry's confinement
    /// (web servers, backups) then never find a way out through a link a client made.
    fn dead_properties(&self, path: &VirtualPath) -> Result<Option<Vec<u8>>, StorageError> {
        properties::get(&self.root, path)
    }

    fn set_dead_properties(
        &self,
        path: &VirtualPath,
        value: Option<&[u8]>,
    ) -> Result<(), StorageError> {
        self.check_writable(path)?;
        properties::set(&self.root, path, value)
    }

    fn symlink(&self, target: &str, link: &VirtualPath) -> Result<(), StorageError> {
        self.check_writable(link)?;
        let invalid = || StorageError::Invalid(target.replace('\0', "\\0"));
        if target.is_empty() || target.starts_with('/') || target.contains('\0') {
            return Err(invalid());
        }
        let parent = link
            .parent()
            .ok_or_else(|| StorageError::AlreadyExists(link.to_string()))?;
        VirtualPath::resolve(&parent, target)?;
        let outside = || StorageError::OutsideRoot(format!("{link} -> {target}"));
        // Where the link's directory is once the links on its way are followed.
        let mut at: std::path::PathBuf = self
            .root
            .canonicalize(parent.relative())
            .map_err(io_err(&parent))?
            .components()
            .filter(|c| matches!(c, std::path::Component::Normal(_)))
            .collect();
        let mut named = false;
        for part in Path::new(target).components() {
            match part {
                std::path::Component::CurDir => {}
                std::path::Component::ParentDir if !named => {
                    if !at.pop() {
                        return Err(outside());
                    }
                }
                std::path::Component::Normal(n) => {
                    named = true;
                    at.push(n);
                }
                _ => return Err(invalid()),
            }
        }
        // The longest part of the target that exists must resolve inside the root.
        let mut existing = at.as_path();
        while !existing.as_os_str().is_empty() && self.root.symlink_metadata(existing).is_err() {
            existing = existing.parent().unwrap_or(Path::new(""));
        }
        if !existing.as_os_str().is_empty() {
            self.root.canonicalize(existing).map_err(|_| outside())?;
        }
        self.root
            .symlink(target, link.relative())
            .map_err(io_err(link))
    }

    /// A `stat` by path (no open: a FIFO cannot block it), then the memory's value for that
    /// version.
    fn checksum_at_hand(&self, path: &VirtualPath, alg: ChecksumAlgorithm) -> Option<String> {
        let cache = self.cache.as_deref()?;
        let m = self.root.metadata(path.relative()).ok()?;
        cache.in_memory(FileVersion::of_metadata(&m)?, alg)
    }

    fn checksum_cache(&self) -> Option<&ChecksumCache> {
        self.cache.as_deref()
    }

    fn remember_checksums(&self, file: &Arc<dyn FileHandle>, at: FileVersion, sums: &[Sum]) {
        if let Some(c) = &self.cache {
            c.remember(&**file, at, sums, !self.read_only);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_times_cover_negative_and_positive_seconds() {
        let p = VirtualPath::root();
        for secs in [0, 1, -1, 1_795_361_400, -86_400] {
            assert!(file_time(&p, secs).is_ok(), "{secs}");
        }
    }
}
