//! Test data: seeded random files, marked pattern files, and byte-exact comparison.
//!
//! Fixtures are created world-readable and world-writable because globus-gridftp-server, run as
//! root in anonymous mode, serves them as `nobody`.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

/// `len` bytes from a generator seeded with `seed`, the same on every run.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    StdRng::seed_from_u64(seed).fill_bytes(&mut bytes);
    bytes
}

/// Writes `bytes` to `path` (mode 0666), creating parent directories.
pub fn write_file(path: &Path, bytes: &[u8]) {
    if let Some(parent) = path.parent() {
        make_dir(parent);
    }
    fs::write(path, bytes).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    open_up(path, 0o666);
}

/// Creates `path` and any missing ancestors, each with mode 0777.
pub fn make_dir(path: &Path) {
    if path.is_dir() {
        return;
    }
    if let Some(parent) = path.parent() {
        make_dir(parent);
    }
    fs::create_dir(path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
    open_up(path, 0o777);
}

fn open_up(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

/// Size of one block of [`write_marked_pattern_file`].
pub const PATTERN_BLOCK: usize = 1 << 20;

/// Writes `blocks` MiB quickly: one random MiB repeated, each copy starting with its own index,
/// so a block written at the wrong offset is detected by comparison.
pub fn write_marked_pattern_file(path: &Path, blocks: u64, seed: u64) {
    let mut block = random_bytes(PATTERN_BLOCK, seed);
    let file = File::create(path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
    let mut out = BufWriter::with_capacity(PATTERN_BLOCK, file);
    for index in 0..blocks {
        block[..8].copy_from_slice(b"FERRYMIB");
        block[8..16].copy_from_slice(&index.to_be_bytes());
        out.write_all(&block)
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
    out.flush()
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    open_up(path, 0o666);
}

/// Checks that the file at `actual` holds exactly the same bytes as the file at `expected`.
pub fn compare_files(expected: &Path, actual: &Path) -> Result<(), String> {
    let open = |p: &Path| File::open(p).map_err(|e| format!("cannot open {}: {e}", p.display()));
    let mut expected_file = open(expected)?;
    let mut actual_file = open(actual)?;
    let expected_len = expected_file.metadata().map(|m| m.len()).unwrap_or(0);
    let actual_len = actual_file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut offset = 0u64;
    let mut expected_buf = vec![0u8; 1 << 20];
    let mut actual_buf = vec![0u8; 1 << 20];
    loop {
        let n = read_full(&mut expected_file, &mut expected_buf, expected)?;
        let m = read_full(&mut actual_file, &mut actual_buf, actual)?;
        if let Some(i) = first_difference(&expected_buf[..n], &actual_buf[..m]) {
            return Err(describe_difference(
                &format!("{}", actual.display()),
                &format!("{}", expected.display()),
                offset + i as u64,
                expected_buf.get(i).filter(|_| i < n).copied(),
                actual_buf.get(i).filter(|_| i < m).copied(),
                expected_len,
                actual_len,
            ));
        }
        if n == 0 {
            return Ok(());
        }
        offset += n as u64;
    }
}

/// Checks that the file at `actual` holds exactly `expected`.
pub fn compare_bytes(expected: &[u8], actual: &Path) -> Result<(), String> {
    let bytes = fs::read(actual).map_err(|e| format!("cannot read {}: {e}", actual.display()))?;
    match first_difference(expected, &bytes) {
        None => Ok(()),
        Some(i) => Err(describe_difference(
            &format!("{}", actual.display()),
            "the expected bytes",
            i as u64,
            expected.get(i).copied(),
            bytes.get(i).copied(),
            expected.len() as u64,
            bytes.len() as u64,
        )),
    }
}

fn read_full(file: &mut File, buf: &mut [u8], path: &Path) -> Result<usize, String> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(k) => filled += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        }
    }
    Ok(filled)
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    let common = a.len().min(b.len());
    a[..common]
        .iter()
        .zip(&b[..common])
        .position(|(x, y)| x != y)
        .or((a.len() != b.len()).then_some(common))
}

fn describe_difference(
    actual: &str,
    expected: &str,
    offset: u64,
    expected_byte: Option<u8>,
    actual_byte: Option<u8>,
    expected_len: u64,
    actual_len: u64,
) -> String {
    let show = |b: Option<u8>| b.map_or_else(|| "end of file".to_owned(), |b| format!("0x{b:02x}"));
    format!(
        "{actual} differs from {expected}: first difference at byte offset {offset} \
         (MiB block {}, offset {} in it): expected {}, found {}; expected length {expected_len}, \
         actual length {actual_len}",
        offset / PATTERN_BLOCK as u64,
        offset % PATTERN_BLOCK as u64,
        show(expected_byte),
        show(actual_byte),
    )
}

/// Checks that two directory trees hold the same names (files and directories) and that every
/// file has the same bytes.
pub fn compare_trees(expected: &Path, actual: &Path) -> Result<(), String> {
    let want = list_tree(expected)?;
    let got = list_tree(actual)?;
    let missing: Vec<_> = want
        .iter()
        .filter(|(k, v)| got.get(*k) != Some(v))
        .collect();
    let extra: Vec<_> = got
        .iter()
        .filter(|(k, v)| want.get(*k) != Some(v))
        .collect();
    if !missing.is_empty() || !extra.is_empty() {
        return Err(format!(
            "tree {} differs from {}:\n  missing or of another kind: {missing:?}\n  unexpected: {extra:?}",
            actual.display(),
            expected.display()
        ));
    }
    for (rel, kind) in &want {
        if *kind == EntryKind::File {
            compare_files(&expected.join(rel), &actual.join(rel))?;
        }
    }
    Ok(())
}

/// Kind of an entry in a compared tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
}

/// Every entry below `root`, by path relative to it.
pub fn list_tree(root: &Path) -> Result<BTreeMap<PathBuf, EntryKind>, String> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let dir = root.join(&rel);
        let read = fs::read_dir(&dir).map_err(|e| format!("listing {}: {e}", dir.display()))?;
        for entry in read {
            let entry = entry.map_err(|e| format!("listing {}: {e}", dir.display()))?;
            let child = rel.join(entry.file_name());
            let file_type = entry
                .file_type()
                .map_err(|e| format!("stat {}: {e}", entry.path().display()))?;
            if file_type.is_dir() {
                entries.insert(child.clone(), EntryKind::Dir);
                pending.push(child);
            } else {
                entries.insert(child, EntryKind::File);
            }
        }
    }
    Ok(entries)
}

/// MD5 of `bytes` in lowercase hex, as `CKSM MD5` reports it.
pub fn md5_hex(bytes: &[u8]) -> String {
    use md5::{Digest, Md5};
    hex::encode(Md5::digest(bytes))
}

/// MD5 of the file at `path` in lowercase hex.
pub fn md5_of_file(path: &Path) -> String {
    use md5::{Digest, Md5};
    let mut file = File::open(path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    let mut hasher = Md5::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = read_full(&mut file, &mut buf, path).unwrap_or_else(|e| panic!("{e}"));
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    hex::encode(hasher.finalize())
}

/// Adler-32 of `bytes` (RFC 1950), as `CKSM ADLER32` reports it.
pub fn adler32(bytes: &[u8]) -> u32 {
    const MOD: u32 = 65_521;
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in bytes.chunks(5552) {
        for &byte in chunk {
            a += u32::from(byte);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}
