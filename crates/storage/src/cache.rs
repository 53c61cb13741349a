//! Whole-file checksums kept with the file, so `CKSM` on a file ferry moved is answered without
//! reading it again.
//!
//! Where they are kept:
//! - **Extended attributes** (`xattr` mode, the default), in two forms:
//!   - `user.XrdCks.<alg>`: XRootD's 96-byte record (name, the file's mtime in seconds, seconds
//!     from that mtime to when the sum was taken, the binary value), in network byte order.
//!     XRootD, `xrdadler32` and dCache's tools read it; ferry reads theirs.
//!   - `user.ferry.checksums`: ferry's own record, `1 SIZE MTIME MTIME_NS alg:hex ...`. It
//!     names the exact version (size, and mtime to the nanosecond) every value in it was taken
//!     at.
//! - **Memory**: a bounded map per (device, inode) with the same version, for file systems
//!   without user xattrs, read-only roots and files the session may not change (`memory` mode
//!   keeps only this).
//!
//! When a value is trusted: a file is never answered from a stale value because every value
//! carries the version it was taken at, and the file's version is checked (`fstat`) at every
//! lookup.
//! - ferry's own record and the memory entry are trusted only when size, mtime and mtime
//!   nanoseconds all match.
//! - A foreign XrdCks record has only whole seconds, so it is trusted when its mtime matches and
//!   it was taken two or more seconds after that mtime. A later write then cannot leave the
//!   mtime unchanged, even with the kernel's coarse file clock. XRootD also checks only the
//!   mtime.
//!
//! Opening a file for writing removes its records (and its memory entry). Setting its mtime
//! (`MFMT`) carries valid values over to the new mtime, since the bytes did not change.
//!
//! What no mtime-based cache can see: content changed by a program that then sets the old mtime
//! back to the nanosecond (and keeps the size). Sites that fear that run with `off`, and every
//! `CKSM` reads the file.

use std::collections::{HashMap, VecDeque};
use std::os::fd::BorrowedFd;
use std::sync::Mutex;

use rustix::fs::XattrFlags;
use rustix::io::Errno;

use crate::{ChecksumAlgorithm, FileHandle};

/// XRootD's record size: name 16, fmTime 8, csTime 4, reserved 3, length 1, value 64.
pub const XRDCKS_RECORD_LEN: usize = 96;

/// ferry's own record's attribute name.
pub const FERRY_XATTR: &str = "user.ferry.checksums";

/// Files the memory keeps values for before it forgets the oldest.
const MEMO_FILES: usize = 65_536;

/// Where whole-file checksums are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    /// Extended attributes on the file, and memory.
    #[default]
    Xattr,
    /// Memory only: the file's metadata is never changed.
    Memory,
    /// Nothing kept: every `CKSM` reads the file.
    Off,
}

impl CacheMode {
    /// Parses `xattr`, `memory` or `off` (`on` means `xattr`).
    pub fn from_name(name: &str) -> Option<CacheMode> {
        match name.to_ascii_lowercase().as_str() {
            "xattr" | "on" => Some(CacheMode::Xattr),
            "memory" => Some(CacheMode::Memory),
            "off" => Some(CacheMode::Off),
            _ => None,
        }
    }
}

/// Which version of which file a value belongs to: identity, size and mtime to the nanosecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileVersion {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_ns: u32,
}

impl FileVersion {
    /// The version of an open regular file (`None` for devices, pipes and handles without a
    /// descriptor).
    pub fn of(file: &dyn FileHandle) -> Option<FileVersion> {
        if !file.is_regular() {
            return None;
        }
        let fd = fd_of(file)?;
        let st = rustix::fs::fstat(fd).ok()?;
        Some(FileVersion {
            dev: st.st_dev,
            ino: st.st_ino,
            size: u64::try_from(st.st_size).ok()?,
            mtime: st.st_mtime,
            mtime_ns: u32::try_from(st.st_mtime_nsec).ok()?,
        })
    }

    /// The version a `stat` of a regular file describes (`None` for anything else).
    pub fn of_metadata(m: &cap_std::fs::Metadata) -> Option<FileVersion> {
        use cap_std::fs::MetadataExt;
        if !m.is_file() {
            return None;
        }
        Some(FileVersion {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: m.mtime(),
            mtime_ns: u32::try_from(m.mtime_nsec()).ok()?,
        })
    }

    /// File size at this version.
    pub fn size(&self) -> u64 {
        self.size
    }

    fn key(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }
}

fn fd_of(file: &dyn FileHandle) -> Option<BorrowedFd<'_>> {
    // SAFETY: the descriptor belongs to `file`, which outlives the borrow.
    file.raw_fd()
        .map(|fd| unsafe { BorrowedFd::borrow_raw(fd) })
}

/// A value with its algorithm.
pub type Sum = (ChecksumAlgorithm, String);

#[derive(Debug)]
struct Entry {
    version: FileVersion,
    sums: Vec<Sum>,
}

#[derive(Debug, Default)]
struct Memo {
    files: HashMap<(u64, u64), Entry>,
    /// Insertion order, for forgetting the oldest; may hold keys already removed.
    order: VecDeque<(u64, u64)>,
}

/// The checksums a server keeps (see the module notes). One per storage root, shared by its
/// sessions.
#[derive(Debug)]
pub struct ChecksumCache {
    mode: CacheMode,
    memo: Mutex<Memo>,
}

impl ChecksumCache {
    /// A cache in `mode`.
    pub fn new(mode: CacheMode) -> ChecksumCache {
        ChecksumCache {
            mode,
            memo: Mutex::new(Memo::default()),
        }
    }

    /// Its mode.
    pub fn mode(&self) -> CacheMode {
        self.mode
    }

    fn memo(&self) -> std::sync::MutexGuard<'_, Memo> {
        self.memo.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value of `alg` for the file as it is now, if one was kept for this version.
    pub fn lookup(&self, file: &dyn FileHandle, alg: ChecksumAlgorithm) -> Option<String> {
        self.kept(file, &[alg]).into_iter().next().map(|(_, v)| v)
    }

    /// The value of `alg` this process keeps in memory for the file at `version`, if any:
    /// nothing is opened or read.
    pub fn in_memory(&self, version: FileVersion, alg: ChecksumAlgorithm) -> Option<String> {
        if self.mode == CacheMode::Off {
            return None;
        }
        match self.memo().files.get(&version.key()) {
            Some(e) if e.version == version => e
                .sums
                .iter()
                .find(|(a, _)| *a == alg)
                .map(|(_, v)| v.clone()),
            _ => None,
        }
    }

    /// Every value kept for the file as it is now.
    pub fn valid(&self, file: &dyn FileHandle) -> Vec<Sum> {
        self.kept(file, ChecksumAlgorithm::all())
    }

    /// The values of `algs` kept for the file as it is now. What this process keeps in memory
    /// for the version answers without reading the file's attributes (a `CKSM` after a transfer,
    /// once per file of a verified copy, costs one `fstat`); otherwise ferry's record is read,
    /// then XRootD's for each algorithm still missing, and what they hold is kept in memory.
    pub fn kept(&self, file: &dyn FileHandle, algs: &[ChecksumAlgorithm]) -> Vec<Sum> {
        if self.mode == CacheMode::Off {
            return Vec::new();
        }
        let Some(now) = FileVersion::of(file) else {
            return Vec::new();
        };
        let mut sums: Vec<Sum> = match self.memo().files.get(&now.key()) {
            Some(e) if e.version == now => e
                .sums
                .iter()
                .filter(|(a, _)| algs.contains(a))
                .cloned()
                .collect(),
            _ => Vec::new(),
        };
        let missing = |sums: &[Sum], alg: &ChecksumAlgorithm| !sums.iter().any(|(a, _)| a == alg);
        if self.mode != CacheMode::Xattr || !algs.iter().any(|a| missing(&sums, a)) {
            return sums;
        }
        let Some(fd) = fd_of(file) else {
            return sums;
        };
        let mut found = Vec::new();
        if let Some((v, own)) = read_ferry_record(fd) {
            if v == now {
                found.extend(own);
            }
        }
        for &alg in algs {
            if !missing(&found, &alg) || !missing(&sums, &alg) {
                continue;
            }
            if let Some(r) = read_xrdcks(fd, alg) {
                if r.fm_time == now.mtime && r.cs_time >= 2 {
                    found.push((alg, hex::encode(&r.value)));
                }
            }
        }
        if !found.is_empty() {
            self.keep_in_memory(now, &found);
        }
        found.retain(|(a, _)| algs.contains(a));
        merge(&mut sums, found);
        sums
    }

    /// Keeps `sums`, taken over the file at version `at`, unless the file has changed since.
    /// `persist` writes the attributes (a read-only root keeps them in memory only). A file
    /// system without user xattrs, or a file the caller may not change, keeps them in memory;
    /// nothing here fails the caller.
    pub fn remember(&self, file: &dyn FileHandle, at: FileVersion, sums: &[Sum], persist: bool) {
        if self.mode == CacheMode::Off || sums.is_empty() {
            return;
        }
        if FileVersion::of(file) != Some(at) {
            tracing::debug!("file changed while it was summed: its checksums are not kept");
            return;
        }
        let all = self.keep_in_memory(at, sums);
        if self.mode != CacheMode::Xattr || !persist {
            return;
        }
        let Some(fd) = fd_of(file) else { return };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let cs_time = i32::try_from(now.saturating_sub(at.mtime).max(0)).unwrap_or(i32::MAX);
        let mut wrote = write_xattr(fd, FERRY_XATTR, ferry_record(at, &all).as_bytes());
        for (alg, value) in sums {
            let Ok(bytes) = hex::decode(value) else {
                continue;
            };
            let record = XrdCksRecord {
                alg: *alg,
                fm_time: at.mtime,
                cs_time,
                value: bytes,
            };
            if wrote {
                wrote = write_xattr(fd, &xrdcks_name(*alg), &record.encode());
            }
        }
    }

    /// Forgets the file's values: it is about to be written.
    pub fn forget(&self, file: &dyn FileHandle, persist: bool) {
        if self.mode == CacheMode::Off {
            return;
        }
        if let Some(v) = FileVersion::of(file) {
            self.memo().files.remove(&v.key());
        }
        if self.mode != CacheMode::Xattr || !persist {
            return;
        }
        let Some(fd) = fd_of(file) else { return };
        let mut names = vec![0u8; 4096];
        let n = match rustix::fs::flistxattr(fd, &mut names[..]) {
            Ok(n) => n,
            Err(Errno::RANGE) => {
                // Too many to list in 4 KiB: remove every name ferry could have written.
                let _ = rustix::fs::fremovexattr(fd, FERRY_XATTR);
                for &alg in ChecksumAlgorithm::all() {
                    let _ = rustix::fs::fremovexattr(fd, xrdcks_name(alg));
                }
                return;
            }
            Err(_) => return,
        };
        for name in names[..n].split(|&b| b == 0) {
            let Ok(name) = std::str::from_utf8(name) else {
                continue;
            };
            if name == FERRY_XATTR || name.starts_with("user.XrdCks.") {
                if let Err(e) = rustix::fs::fremovexattr(fd, name) {
                    tracing::debug!("cannot remove the stale checksum {name}: {e}");
                }
            }
        }
    }

    /// Adds `sums` to the memory entry for `at`; every value now kept for that version.
    fn keep_in_memory(&self, at: FileVersion, sums: &[Sum]) -> Vec<Sum> {
        let mut memo = self.memo();
        let key = at.key();
        let entry = memo.files.entry(key).or_insert_with(|| Entry {
            version: at,
            sums: Vec::new(),
        });
        if entry.version != at {
            *entry = Entry {
                version: at,
                sums: Vec::new(),
            };
        }
        merge(&mut entry.sums, sums.to_vec());
        let all = entry.sums.clone();
        memo.order.push_back(key);
        while memo.files.len() > MEMO_FILES {
            match memo.order.pop_front() {
                Some(old) if old != key => {
                    memo.files.remove(&old);
                }
                Some(_) => {}
                None => break,
            }
        }
        if memo.order.len() > 4 * MEMO_FILES {
            // Keys re-inserted many times: keep one mention of each live key.
            let Memo { files, order } = &mut *memo;
            let mut seen = std::collections::HashSet::new();
            order.retain(|k| files.contains_key(k) && seen.insert(*k));
        }
        all
    }
}

/// Adds the values of `more` whose algorithm `into` lacks; a new value for an algorithm already
/// there replaces it.
fn merge(into: &mut Vec<Sum>, more: Vec<Sum>) {
    for (alg, value) in more {
        match into.iter_mut().find(|(a, _)| *a == alg) {
            Some(slot) => slot.1 = value,
            None => into.push((alg, value)),
        }
    }
}

/// Writes one attribute; `false` when the file system or the caller's rights refuse, so the
/// other records are not tried.
fn write_xattr(fd: BorrowedFd<'_>, name: &str, value: &[u8]) -> bool {
    match rustix::fs::fsetxattr(fd, name, value, XattrFlags::empty()) {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!("checksums kept in memory only: cannot set {name}: {e}");
            false
        }
    }
}

/// The attribute name of XRootD's record for `alg`.
pub fn xrdcks_name(alg: ChecksumAlgorithm) -> String {
    format!("user.XrdCks.{}", xrdcks_alg(alg))
}

/// XRootD's name for an algorithm (lower case).
fn xrdcks_alg(alg: ChecksumAlgorithm) -> &'static str {
    match alg {
        ChecksumAlgorithm::Md5 => "md5",
        ChecksumAlgorithm::Adler32 => "adler32",
        ChecksumAlgorithm::Crc32c => "crc32c",
        ChecksumAlgorithm::Sha1 => "sha1",
        ChecksumAlgorithm::Sha256 => "sha256",
        ChecksumAlgorithm::Sha512 => "sha512",
    }
}

/// ferry's record for `at` holding `sums`.
fn ferry_record(at: FileVersion, sums: &[Sum]) -> String {
    let mut s = format!("1 {} {} {}", at.size, at.mtime, at.mtime_ns);
    for (alg, value) in sums {
        s.push(' ');
        s.push_str(xrdcks_alg(*alg));
        s.push(':');
        s.push_str(value);
    }
    s
}

/// Parses ferry's record: the version (with the given file's identity) and its values.
fn parse_ferry_record(text: &str, dev: u64, ino: u64) -> Option<(FileVersion, Vec<Sum>)> {
    let mut words = text.split(' ');
    if words.next()? != "1" {
        return None;
    }
    let version = FileVersion {
        dev,
        ino,
        size: words.next()?.parse().ok()?,
        mtime: words.next()?.parse().ok()?,
        mtime_ns: words.next()?.parse().ok()?,
    };
    let mut sums = Vec::new();
    for w in words {
        let (name, value) = w.split_once(':')?;
        let alg = *ChecksumAlgorithm::all()
            .iter()
            .find(|a| xrdcks_alg(**a) == name)?;
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        sums.push((alg, value.to_ascii_lowercase()));
    }
    Some((version, sums))
}

fn read_ferry_record(fd: BorrowedFd<'_>) -> Option<(FileVersion, Vec<Sum>)> {
    let mut buf = [0u8; 1024];
    let n = rustix::fs::fgetxattr(fd, FERRY_XATTR, &mut buf[..]).ok()?;
    let st = rustix::fs::fstat(fd).ok()?;
    parse_ferry_record(std::str::from_utf8(&buf[..n]).ok()?, st.st_dev, st.st_ino)
}

fn read_xrdcks(fd: BorrowedFd<'_>, alg: ChecksumAlgorithm) -> Option<XrdCksRecord> {
    let mut buf = [0u8; XRDCKS_RECORD_LEN];
    let n = rustix::fs::fgetxattr(fd, xrdcks_name(alg), &mut buf[..]).ok()?;
    XrdCksRecord::decode(&buf[..n]).filter(|r| r.alg == alg)
}

/// XRootD's checksum record (`XrdCksData`), as its xattr holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XrdCksRecord {
    /// The algorithm.
    pub alg: ChecksumAlgorithm,
    /// The file's mtime (seconds) when the value was taken.
    pub fm_time: i64,
    /// Seconds from that mtime to when it was taken.
    pub cs_time: i32,
    /// The binary value.
    pub value: Vec<u8>,
}

impl XrdCksRecord {
    /// The 96 bytes: name (NUL-padded), fmTime and csTime big-endian, three reserved zero
    /// bytes, the value's length, the value (zero-padded).
    pub fn encode(&self) -> [u8; XRDCKS_RECORD_LEN] {
        let mut b = [0u8; XRDCKS_RECORD_LEN];
        let name = xrdcks_alg(self.alg).as_bytes();
        b[..name.len()].copy_from_slice(name);
        b[16..24].copy_from_slice(&self.fm_time.to_be_bytes());
        b[24..28].copy_from_slice(&self.cs_time.to_be_bytes());
        let len = self.value.len().min(64);
        b[31] = len as u8;
        b[32..32 + len].copy_from_slice(&self.value[..len]);
        b
    }

    /// Parses a record; `None` when it is not 96 bytes, names an algorithm ferry does not know
    /// or has a value of the wrong length for it.
    pub fn decode(b: &[u8]) -> Option<XrdCksRecord> {
        if b.len() != XRDCKS_RECORD_LEN {
            return None;
        }
        let name_end = b[..16].iter().position(|&c| c == 0).unwrap_or(16);
        let name = std::str::from_utf8(&b[..name_end]).ok()?;
        let alg = *ChecksumAlgorithm::all()
            .iter()
            .find(|a| xrdcks_alg(**a).eq_ignore_ascii_case(name))?;
        let len = usize::from(b[31]);
        if len != digest_len(alg) {
            return None;
        }
        Some(XrdCksRecord {
            alg,
            fm_time: i64::from_be_bytes(b[16..24].try_into().ok()?),
            cs_time: i32::from_be_bytes(b[24..28].try_into().ok()?),
            value: b[32..32 + len].to_vec(),
        })
    }
}

/// Bytes in a value of `alg`.
fn digest_len(alg: ChecksumAlgorithm) -> usize {
    match alg {
        ChecksumAlgorithm::Adler32 | ChecksumAlgorithm::Crc32c => 4,
        ChecksumAlgorithm::Md5 => 16,
        ChecksumAlgorithm::Sha1 => 20,
        ChecksumAlgorithm::Sha256 => 32,
        ChecksumAlgorithm::Sha512 => 64,
    }
}

/// The checksum `storage` answers for `[offset, offset + length)` of the open `file`: a
/// whole-file request is answered from the cache when it holds a value for this version, and
/// a value read is kept; a part of the file is always read.
pub fn checksum_cached<S: crate::Storage + ?Sized>(
    storage: &S,
    file: &std::sync::Arc<dyn FileHandle>,
    alg: ChecksumAlgorithm,
    offset: u64,
    length: Option<u64>,
) -> Result<String, crate::StorageError> {
    let cache = storage.checksum_cache();
    let version = cache.and_then(|_| FileVersion::of(&**file));
    let whole = offset == 0 && version.is_some_and(|v| length.is_none_or(|l| l >= v.size));
    if let (true, Some(c)) = (whole, cache) {
        if let Some(value) = c.lookup(&**file, alg) {
            return Ok(value);
        }
    }
    let value = crate::checksum_handle(&**file, alg, offset, length)?;
    if let (true, Some(at)) = (whole, version) {
        storage.remember_checksums(file, at, &[(alg, value.clone())]);
    }
    Ok(value)
}

#[cfg(test)]
mod tests;
