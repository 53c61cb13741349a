//! The POSIX back-end moves bytes and metadata faithfully: positional I/O, options, listings,
//! checksums and devices.

use crate::common;

use common::*;

#[test]
fn out_of_order_positional_writes_read_back_exactly() {
    let f = Fixture::new();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let h = f.storage.open_write(&vp("/blocks"), CREATE).unwrap();
    let blocks: Vec<(usize, &[u8])> = data
        .chunks(65_536)
        .enumerate()
        .map(|(i, c)| (i * 65_536, c))
        .collect();
    for (off, block) in blocks.iter().rev() {
        h.write_all_at(block, *off as u64).unwrap();
    }
    h.sync().unwrap();
    assert!(h.is_regular());
    assert!(h.raw_fd().is_some());
    assert_eq!(h.size().unwrap(), data.len() as u64);
    drop(h);
    let r = f.storage.open_read(&vp("/blocks")).unwrap();
    let mut back = vec![0u8; data.len()];
    let mut pos = 0;
    while pos < back.len() {
        pos += r.read_at(&mut back[pos..], pos as u64).unwrap();
    }
    assert_eq!(back, data);
    assert_eq!(r.read_at(&mut [0u8; 4], data.len() as u64).unwrap(), 0);
}

#[test]
fn write_options_create_truncate_and_create_new() {
    let f = Fixture::new();
    let s = &f.storage;
    let r = s.open_write(&vp("/data/file"), CREATE_NEW);
    assert!(matches!(r, Err(StorageError::AlreadyExists(_))), "{r:?}");
    let r = s.open_write(&vp("/missing"), EXISTING);
    assert!(matches!(r, Err(StorageError::NotFound(_))), "{r:?}");
    s.open_write(&vp("/fresh"), CREATE_NEW)
        .unwrap()
        .write_all_at(b"x", 0)
        .unwrap();
    assert_eq!(fs::read(f.root().join("fresh")).unwrap(), b"x");
    // ESTO A / restart: no truncation, bytes land at the offset.
    s.open_write(&vp("/data/file"), EXISTING)
        .unwrap()
        .write_all_at(b"!!", 5)
        .unwrap();
    assert_eq!(fs::read(f.root().join("data/file")).unwrap(), b"hello!!");
    let h = s.open_write(&vp("/data/file"), CREATE).unwrap();
    assert_eq!(h.size().unwrap(), 0);
    h.write_all_at(b"abcdef", 0).unwrap();
    h.set_len(3).unwrap();
    assert_eq!(fs::read(f.root().join("data/file")).unwrap(), b"abc");
    let r = s.open_write(&vp("/data"), CREATE);
    assert!(matches!(r, Err(StorageError::IsADirectory(_))), "{r:?}");
}

#[test]
fn opening_a_directory_for_reading_is_is_a_directory() {
    let f = Fixture::new();
    for p in ["/data", "/"] {
        let r = f.storage.open_read(&vp(p));
        assert!(
            matches!(r, Err(StorageError::IsADirectory(_))),
            "{p}: {r:?}"
        );
    }
}

#[test]
fn rename_mkdir_rmdir_and_remove_within_the_root() {
    let f = Fixture::new();
    let s = &f.storage;
    s.rename(&vp("/data/file"), &vp("/moved")).unwrap();
    assert_eq!(fs::read(f.root().join("moved")).unwrap(), b"hello");
    assert!(matches!(
        s.stat(&vp("/data/file")),
        Err(StorageError::NotFound(_))
    ));
    s.mkdir(&vp("/data/sub")).unwrap();
    assert!(matches!(
        s.mkdir(&vp("/data/sub")),
        Err(StorageError::AlreadyExists(_))
    ));
    assert!(matches!(
        s.rmdir(&vp("/data")),
        Err(StorageError::NotEmpty(_))
    ));
    assert!(matches!(
        s.mkdir(&vp("/moved/x")),
        Err(StorageError::NotADirectory(_))
    ));
    s.rmdir(&vp("/data/sub")).unwrap();
    s.remove_file(&vp("/moved")).unwrap();
    assert!(matches!(
        s.remove_file(&vp("/moved")),
        Err(StorageError::NotFound(_))
    ));
    for r in [
        s.rmdir(&VirtualPath::root()),
        s.remove_tree(&VirtualPath::root()),
    ] {
        assert!(matches!(r, Err(StorageError::PermissionDenied(_))), "{r:?}");
    }
    assert!(f.root().exists());
}

#[test]
fn listing_is_sorted_and_describes_links_themselves() {
    let f = Fixture::new();
    fs::write(f.root().join("b"), b"12").unwrap();
    fs::write(f.root().join("a"), b"1").unwrap();
    symlink("/etc", f.root().join("c")).unwrap();
    let entries = f.storage.list(&VirtualPath::root()).unwrap();
    let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "data"]);
    assert_eq!(entries[1].metadata.size, 2);
    assert_eq!(entries[1].metadata.kind, FileKind::File);
    assert_eq!(entries[2].metadata.kind, FileKind::Symlink);
    assert_eq!(entries[2].metadata.link_target.as_deref(), Some("/etc"));
    assert_eq!(entries[3].metadata.kind, FileKind::Dir);
    let file = f.storage.list(&vp("/data/file"));
    assert!(
        matches!(file, Err(StorageError::NotADirectory(_))),
        "{file:?}"
    );
}

#[test]
fn chmod_and_set_mtime_show_in_stat() {
    let f = Fixture::new();
    f.storage.chmod(&vp("/data/file"), 0o640).unwrap();
    f.storage
        .set_mtime(&vp("/data/file"), 1_795_361_400)
        .unwrap();
    let m = f.storage.stat(&vp("/data/file")).unwrap();
    assert_eq!(m.mode, 0o640);
    assert_eq!(m.mtime, 1_795_361_400);
    assert_eq!(m.size, 5);
    assert_eq!(m.nlink, 1);
    assert!(m.ino != 0);
    f.storage.set_mtime(&vp("/data"), 0).unwrap();
    assert_eq!(f.storage.stat(&vp("/data")).unwrap().mtime, 0);
}

#[test]
fn chmod_never_sets_setuid_setgid_or_sticky() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::new();
    for (asked, got) in [
        (0o4755, 0o755),
        (0o2775, 0o775),
        (0o1777, 0o777),
        (0o7644, 0o644),
    ] {
        f.storage.chmod(&vp("/data/file"), asked).unwrap();
        assert_eq!(
            f.storage.stat(&vp("/data/file")).unwrap().mode,
            got,
            "{asked:o}"
        );
        let on_disk = fs::metadata(f.root().join("data/file"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(on_disk & 0o7777, got, "{asked:o} on disk");
    }
}

#[test]
fn an_upload_over_a_setuid_file_clears_the_special_bits() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::new();
    let path = f.root().join("data/file");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o6755)).unwrap();
    let h = f.storage.open_write(&vp("/data/file"), CREATE).unwrap();
    h.write_all_at(b"new", 0).unwrap();
    drop(h);
    let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o755);
}

#[test]
fn checksums_of_files_and_windows() {
    let f = Fixture::new();
    fs::write(f.root().join("wiki"), b"xxWikipediayy").unwrap();
    fs::write(f.root().join("digits"), b"123456789").unwrap();
    fs::write(f.root().join("empty"), b"").unwrap();
    let s = &f.storage;
    let sum = |p: &str, alg, off, len| s.checksum(&vp(p), alg, off, len).unwrap();
    assert_eq!(
        sum("/wiki", ChecksumAlgorithm::Adler32, 2, Some(9)),
        "11e60398"
    );
    assert_eq!(
        sum("/digits", ChecksumAlgorithm::Crc32c, 0, None),
        "e3069283"
    );
    assert_eq!(
        sum("/empty", ChecksumAlgorithm::Md5, 0, None),
        "d41d8cd98f00b204e9800998ecf8427e"
    );
    assert_eq!(
        sum("/data/file", ChecksumAlgorithm::Md5, 1, Some(3)),
        "3123059c1c816471780539f6b6b738dc"
    );
    assert_eq!(
        sum("/wiki", ChecksumAlgorithm::Md5, 13, None),
        "d41d8cd98f00b204e9800998ecf8427e"
    );
    assert_eq!(
        sum("/digits", ChecksumAlgorithm::Sha1, 9, Some(5)),
        "da39a3ee5e6b4b0d3255bfef95601890afd80709"
    );
    let big: Vec<u8> = (0..(2 << 20) + 5).map(|i: u32| (i % 249) as u8).collect();
    fs::write(f.root().join("big"), &big).unwrap();
    let mut whole = ferry_storage::Checksummer::new(ChecksumAlgorithm::Sha256);
    whole.update(&big[1000..]);
    assert_eq!(
        sum("/big", ChecksumAlgorithm::Sha256, 1000, None),
        whole.finish_hex()
    );
    let r = s.checksum(&vp("/data"), ChecksumAlgorithm::Md5, 0, None);
    assert!(matches!(r, Err(StorageError::IsADirectory(_))), "{r:?}");
    let r = s.checksum(&vp("/nope"), ChecksumAlgorithm::Md5, 0, None);
    assert!(matches!(r, Err(StorageError::NotFound(_))), "{r:?}");
}

#[test]
fn devices_are_readable_and_writable_with_root_slash() {
    if !Path::new("/dev/zero").exists() || !Path::new("/dev/null").exists() {
        eprintln!("skipped: /dev/zero or /dev/null is missing");
        return;
    }
    let s = PosixStorage::open(Path::new("/"), false).unwrap();
    let zero = s.open_read(&vp("/dev/zero")).unwrap();
    assert!(!zero.is_regular());
    assert_eq!(zero.size().unwrap(), 0);
    assert_eq!(s.stat(&vp("/dev/zero")).unwrap().kind, FileKind::CharDevice);
    let null = s.open_write(&vp("/dev/null"), EXISTING).unwrap();
    let mut buf = vec![1u8; 256 * 1024];
    let mut total = 0u64;
    while total < 1 << 20 {
        let n = zero.read_at(&mut buf, total).unwrap();
        assert!(n > 0);
        assert!(buf[..n].iter().all(|&b| b == 0));
        null.write_all_at(&buf[..n], total).unwrap();
        total += n as u64;
    }
    null.sync().unwrap();
    assert_eq!(total, 1 << 20);
    let md5 = s
        .checksum(&vp("/dev/zero"), ChecksumAlgorithm::Md5, 0, Some(1 << 20))
        .unwrap();
    assert_eq!(md5, "b6d81b360a5672d80c27430f39153e2c");
    let r = s.checksum(&vp("/dev/zero"), ChecksumAlgorithm::Md5, 0, None);
    assert!(matches!(r, Err(StorageError::Invalid(_))), "{r:?}");
}

#[test]
fn storage_is_usable_as_a_shared_trait_object() {
    let f = Fixture::new();
    let s: Arc<dyn Storage> = Arc::new(f.storage);
    let h = s.open_read(&vp("/data/file")).unwrap();
    let threads: Vec<_> = (0..4u64)
        .map(|i| {
            let h = Arc::clone(&h);
            std::thread::spawn(move || {
                let mut b = [0u8; 1];
                h.read_at(&mut b, i).unwrap();
                b[0]
            })
        })
        .collect();
    let got: Vec<u8> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(got, b"hell");
}
