use std::sync::Arc;

use super::*;
use crate::{PosixStorage, Storage, VirtualPath, WriteOptions};

const DATA: &[u8] = b"the quick brown fox jumps over the lazy dog\n";

fn setup(mode: CacheMode, read_only: bool) -> (tempfile::TempDir, PosixStorage, VirtualPath) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("f"), DATA).expect("write");
    let s = PosixStorage::open(dir.path(), read_only)
        .expect("storage")
        .with_checksum_cache(Arc::new(ChecksumCache::new(mode)));
    (
        dir,
        s,
        VirtualPath::resolve(&VirtualPath::root(), "f").expect("path"),
    )
}

fn adler(data: &[u8]) -> String {
    let mut a = adler2::Adler32::new();
    a.write_slice(data);
    format!("{:08x}", a.checksum())
}

fn xattr(dir: &tempfile::TempDir, name: &str) -> Option<Vec<u8>> {
    let f = std::fs::File::open(dir.path().join("f")).expect("open");
    let mut buf = vec![0u8; 1024];
    let n = rustix::fs::fgetxattr(&f, name, &mut buf[..]).ok()?;
    buf.truncate(n);
    Some(buf)
}

fn set_xattr(dir: &tempfile::TempDir, name: &str, value: &[u8]) {
    let f = std::fs::File::open(dir.path().join("f")).expect("open");
    rustix::fs::fsetxattr(&f, name, value, XattrFlags::empty()).expect("setxattr");
}

fn mtime_of(dir: &tempfile::TempDir) -> i64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir.path().join("f"))
        .expect("stat")
        .mtime()
}

#[test]
fn the_xrootd_record_has_its_layout() {
    let r = XrdCksRecord {
        alg: ChecksumAlgorithm::Adler32,
        fm_time: 0x0102_0304_0506_0708,
        cs_time: 0x0a0b_0c0d,
        value: vec![0x11, 0x22, 0x33, 0x44],
    };
    let b = r.encode();
    assert_eq!(&b[..8], b"adler32\0");
    assert!(b[8..16].iter().all(|&c| c == 0));
    assert_eq!(&b[16..24], &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(&b[24..28], &[0x0a, 0x0b, 0x0c, 0x0d]);
    assert_eq!(&b[28..31], &[0, 0, 0]);
    assert_eq!(b[31], 4);
    assert_eq!(&b[32..36], &[0x11, 0x22, 0x33, 0x44]);
    assert!(b[36..].iter().all(|&c| c == 0));
    assert_eq!(XrdCksRecord::decode(&b), Some(r));
    // Wrong size, unknown name, value length that does not fit the algorithm.
    assert_eq!(XrdCksRecord::decode(&b[..95]), None);
    let mut unknown = b;
    unknown[..8].copy_from_slice(b"crc64\0\0\0");
    assert_eq!(XrdCksRecord::decode(&unknown), None);
    let mut short = b;
    short[31] = 3;
    assert_eq!(XrdCksRecord::decode(&short), None);
}

#[test]
fn a_cksm_read_once_is_kept_in_both_records_and_answered_from_them() {
    let (dir, s, p) = setup(CacheMode::Xattr, false);
    let want = adler(DATA);
    assert_eq!(
        s.checksum(&p, ChecksumAlgorithm::Adler32, 0, None)
            .expect("cksm"),
        want
    );
    let own = String::from_utf8(xattr(&dir, FERRY_XATTR).expect("ferry record")).expect("utf8");
    assert!(
        own.starts_with(&format!("1 {} {} ", DATA.len(), mtime_of(&dir))),
        "{own}"
    );
    assert!(own.ends_with(&format!(" adler32:{want}")), "{own}");
    let rec = XrdCksRecord::decode(&xattr(&dir, "user.XrdCks.adler32").expect("xrdcks"))
        .expect("decodes");
    assert_eq!(hex::encode(&rec.value), want);
    assert_eq!(rec.fm_time, mtime_of(&dir));

    // A fresh cache (another process) trusts ferry's record for this exact version: proven by
    // a value no read of the file would give.
    let fake = format!("1 {} {} {} adler32:0badc0de", DATA.len(), mtime_of(&dir), {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(dir.path().join("f"))
            .expect("stat")
            .mtime_nsec()
    });
    set_xattr(&dir, FERRY_XATTR, fake.as_bytes());
    let other = PosixStorage::open(dir.path(), false)
        .expect("storage")
        .with_checksum_cache(Arc::new(ChecksumCache::new(CacheMode::Xattr)));
    assert_eq!(
        other
            .checksum(&p, ChecksumAlgorithm::Adler32, 0, None)
            .expect("cksm"),
        "0badc0de"
    );
    // A part of the file is always read.
    assert_eq!(
        other
            .checksum(&p, ChecksumAlgorithm::Adler32, 4, Some(5))
            .expect("cksm"),
        adler(&DATA[4..9])
    );
    // A whole-file window given as offset 0 and a length past the end uses the record.
    assert_eq!(
        other
            .checksum(&p, ChecksumAlgorithm::Adler32, 0, Some(1 << 40))
            .expect("cksm"),
        "0badc0de"
    );
}

#[test]
fn a_changed_file_is_never_answered_from_a_stale_value() {
    let (dir, s, p) = setup(CacheMode::Xattr, false);
    s.checksum(&p, ChecksumAlgorithm::Adler32, 0, None)
        .expect("cksm");
    // Changed behind ferry's back (same size, new content): mtime moves, the records stay.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let changed = DATA.to_ascii_uppercase();
    std::fs::write(dir.path().join("f"), &changed).expect("write");
    assert!(xattr(&dir, FERRY_XATTR).is_some());
    assert_eq!(
        s.checksum(&p, ChecksumAlgorithm::Adler32, 0, None)
            .expect("cksm"),
        adler(&changed)
    );
}

#[test]
fn opening_for_writing_removes_the_records() {
    let (dir, s, p) = setup(CacheMode::Xattr, false);
    set_xattr(&dir, "user.other", b"kept");
    s.checksum(&p, ChecksumAlgorithm::Md5, 0, None)
        .expect("cksm");
    assert!(xattr(&dir, "user.XrdCks.md5").is_some());
    let opts = WriteOptions {
        create: true,
        truncate: false,
        create_new: false,
    };
    drop(s.open_write(&p, opts).expect("open"));
    assert_eq!(xattr(&dir, FERRY_XATTR), None);
    assert_eq!(xattr(&dir, "user.XrdCks.md5"), None);
    assert_eq!(xattr(&dir, "user.other").as_deref(), Some(&b"kept"[..]));
}

#[test]
fn foreign_records_are_trusted_only_when_taken_well_after_the_mtime() {
    let (dir, s, p) = setup(CacheMode::Xattr, false);
    let mut record = XrdCksRecord {
        alg: ChecksumAlgorithm::Adler32,
        fm_time: mtime_of(&dir),
        cs_time: 0,
        value: vec![0xde, 0xad, 0xbe, 0xef],
    };
    set_xattr(&dir, "user.XrdCks.adler32", &record.encode());
    let f = s.open_read(&p).expect("open");
    // Taken in the same second as the last write: a later write could share that mtime.
    assert_eq!(
        s.checksum_cache().expect("cache").lookup(&*f, record.alg),
        None
    );
    record.cs_time = 5;
    set_xattr(&dir, "user.XrdCks.adler32", &record.encode());
    assert_eq!(
        s.checksum_cache()
            .expect("cache")
            .lookup(&*f, record.alg)
            .as_deref(),
        Some("deadbeef")
    );
    // Taken at another mtime: stale.
    record.fm_time -= 1;
    set_xattr(&dir, "user.XrdCks.adler32", &record.encode());
    let fresh = ChecksumCache::new(CacheMode::Xattr);
    assert_eq!(fresh.lookup(&*f, record.alg), None);
}

#[test]
fn a_new_mtime_carries_the_values_over() {
    let (dir, s, p) = setup(CacheMode::Xattr, false);
    let want = adler(DATA);
    s.checksum(&p, ChecksumAlgorithm::Adler32, 0, None)
        .expect("cksm");
    s.set_mtime(&p, 1_600_000_000).expect("mfmt");
    assert_eq!(mtime_of(&dir), 1_600_000_000);
    let fresh = ChecksumCache::new(CacheMode::Xattr);
    let f = s.open_read(&p).expect("open");
    assert_eq!(fresh.lookup(&*f, ChecksumAlgorithm::Adler32), Some(want));
    let rec = XrdCksRecord::decode(&xattr(&dir, "user.XrdCks.adler32").expect("xrdcks"))
        .expect("decodes");
    assert_eq!(rec.fm_time, 1_600_000_000);
}

#[test]
fn memory_mode_and_read_only_roots_leave_the_file_alone() {
    for (mode, read_only) in [(CacheMode::Memory, false), (CacheMode::Xattr, true)] {
        let (dir, s, p) = setup(mode, read_only);
        let f = s.open_read(&p).expect("open");
        let at = FileVersion::of(&*f).expect("version");
        s.remember_checksums(&f, at, &[(ChecksumAlgorithm::Adler32, "0badc0de".into())]);
        assert_eq!(xattr(&dir, FERRY_XATTR), None, "{mode:?}");
        assert_eq!(xattr(&dir, "user.XrdCks.adler32"), None, "{mode:?}");
        assert_eq!(
            s.checksum(&p, ChecksumAlgorithm::Adler32, 0, None)
                .expect("cksm"),
            "0badc0de",
            "{mode:?}: answered from memory"
        );
    }
}

#[test]
fn off_keeps_nothing_and_a_changed_file_is_not_kept() {
    let (dir, s, p) = setup(CacheMode::Off, false);
    let f = s.open_read(&p).expect("open");
    let at = FileVersion::of(&*f).expect("version");
    s.remember_checksums(&f, at, &[(ChecksumAlgorithm::Adler32, "0badc0de".into())]);
    assert_eq!(xattr(&dir, FERRY_XATTR), None);
    assert_eq!(
        s.checksum(&p, ChecksumAlgorithm::Adler32, 0, None)
            .expect("cksm"),
        adler(DATA)
    );

    // Summed at one version, the file changed before the value was kept: nothing is kept.
    let (dir, s, p) = setup(CacheMode::Xattr, false);
    let f = s.open_read(&p).expect("open");
    let at = FileVersion::of(&*f).expect("version");
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("f"))
        .and_then(|mut w| std::io::Write::write_all(&mut w, b"more"))
        .expect("append");
    s.remember_checksums(&f, at, &[(ChecksumAlgorithm::Adler32, "0badc0de".into())]);
    assert_eq!(xattr(&dir, FERRY_XATTR), None);
    assert_ne!(
        s.checksum(&p, ChecksumAlgorithm::Adler32, 0, None)
            .expect("cksm"),
        "0badc0de"
    );
}

#[test]
fn ferry_records_that_do_not_parse_are_ignored() {
    for bad in [
        "2 44 1 1 adler32:00",
        "1 44 1",
        "1 x 1 1",
        "1 44 1 1 crc64:00",
        "1 44 1 1 adler32:zz",
        "1 44 1 1 adler32",
    ] {
        assert_eq!(parse_ferry_record(bad, 1, 2), None, "{bad}");
    }
    let (v, sums) = parse_ferry_record("1 44 7 9 adler32:0A md5:ff", 1, 2).expect("parses");
    assert_eq!((v.size, v.mtime, v.mtime_ns), (44, 7, 9));
    assert_eq!(
        sums,
        vec![
            (ChecksumAlgorithm::Adler32, "0a".to_string()),
            (ChecksumAlgorithm::Md5, "ff".to_string())
        ]
    );
}

#[test]
fn at_hand_answers_only_from_memory_for_the_file_as_it_is_now() {
    let (dir, s, p) = setup(CacheMode::Xattr, false);
    let adler32 = ChecksumAlgorithm::Adler32;
    // Nothing summed yet: the caller must read the file.
    assert_eq!(s.checksum_at_hand(&p, adler32), None);
    // Another process's record is on disk, but at hand means memory only.
    s.checksum(&p, adler32, 0, None).expect("cksm");
    let fresh = PosixStorage::open(dir.path(), false)
        .expect("storage")
        .with_checksum_cache(Arc::new(ChecksumCache::new(CacheMode::Xattr)));
    assert_eq!(fresh.checksum_at_hand(&p, adler32), None);
    // Summed by this storage: at hand, and only for the algorithm summed.
    assert_eq!(s.checksum_at_hand(&p, adler32), Some(adler(DATA)));
    assert_eq!(s.checksum_at_hand(&p, ChecksumAlgorithm::Md5), None);
    // Changed (same size, new content): not at hand, and a read gives the new value.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let changed = DATA.to_ascii_uppercase();
    std::fs::write(dir.path().join("f"), &changed).expect("write");
    assert_eq!(s.checksum_at_hand(&p, adler32), None);
    assert_eq!(
        s.checksum(&p, adler32, 0, None).expect("cksm"),
        adler(&changed)
    );
    // Missing files, directories and FIFOs (which an open would wait on) are never at hand.
    let gone = VirtualPath::resolve(&VirtualPath::root(), "gone").expect("path");
    assert_eq!(s.checksum_at_hand(&gone, adler32), None);
    assert_eq!(s.checksum_at_hand(&VirtualPath::root(), adler32), None);
    rustix::fs::mknodat(
        rustix::fs::CWD,
        dir.path().join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    let fifo = VirtualPath::resolve(&VirtualPath::root(), "fifo").expect("path");
    assert_eq!(s.checksum_at_hand(&fifo, adler32), None);
    // A cache that is off has nothing at hand.
    let (_dir, off, p) = setup(CacheMode::Off, false);
    off.checksum(&p, adler32, 0, None).expect("cksm");
    assert_eq!(off.checksum_at_hand(&p, adler32), None);
}
