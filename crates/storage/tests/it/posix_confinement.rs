//! The POSIX back-end never lets a path, `..` or symlink reach outside its root.

use crate::common;

use common::*;

#[test]
fn dotdot_out_of_the_root_is_refused_before_storage() {
    let cwd = vp("/data");
    for input in [
        "../..",
        "/../outside/secret",
        "../../outside",
        "data/../../../x",
        "../../etc/passwd",
    ] {
        let r = VirtualPath::resolve(&cwd, input);
        assert!(
            matches!(r, Err(StorageError::OutsideRoot(_))),
            "{input}: {r:?}"
        );
    }
}

#[test]
fn absolute_symlink_to_etc_is_refused_for_every_access() {
    let f = Fixture::new();
    symlink("/etc", f.root().join("etc")).unwrap();
    escaped(f.storage.open_read(&vp("/etc/passwd")), "open_read");
    escaped(f.storage.stat(&vp("/etc")), "stat");
    escaped(f.storage.stat(&vp("/etc/passwd")), "stat through");
    escaped(f.storage.list(&vp("/etc")), "list");
    escaped(
        f.storage.open_write(&vp("/etc/ferry-test"), CREATE),
        "open_write",
    );
    escaped(
        f.storage
            .checksum(&vp("/etc/passwd"), ChecksumAlgorithm::Md5, 0, None),
        "checksum",
    );
    let link = f.storage.symlink_metadata(&vp("/etc")).unwrap();
    assert_eq!(link.kind, FileKind::Symlink);
    assert_eq!(link.link_target.as_deref(), Some("/etc"));
}

#[test]
fn absolute_symlink_to_outside_dir_cannot_be_written_through() {
    let f = Fixture::new();
    let mode_before = fs::metadata(f.outside().join("secret"))
        .unwrap()
        .permissions()
        .mode();
    symlink(f.outside(), f.root().join("escape")).unwrap();
    symlink(f.outside().join("secret"), f.root().join("secret")).unwrap();
    escaped(
        f.storage.open_write(&vp("/escape/new"), CREATE),
        "create inside",
    );
    escaped(
        f.storage.open_write(&vp("/secret"), EXISTING),
        "write via file link",
    );
    escaped(f.storage.mkdir(&vp("/escape/dir")), "mkdir inside");
    escaped(
        f.storage.remove_file(&vp("/escape/secret")),
        "remove inside",
    );
    escaped(f.storage.chmod(&vp("/secret"), 0o777), "chmod via link");
    escaped(f.storage.set_mtime(&vp("/secret"), 0), "set_mtime via link");
    escaped(
        f.storage.rename(&vp("/data/file"), &vp("/escape/stolen")),
        "rename into",
    );
    assert!(refused(f.storage.symlink("x", &vp("/escape/link"))));
    f.outside_untouched();
    let mode_after = fs::metadata(f.outside().join("secret"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode_after, mode_before);
}

#[test]
fn relative_symlink_climbing_out_is_refused() {
    let f = Fixture::new();
    symlink("../../outside", f.root().join("data/up")).unwrap();
    symlink("../../etc", f.root().join("data/etc")).unwrap();
    escaped(f.storage.open_read(&vp("/data/up/secret")), "open_read");
    escaped(f.storage.stat(&vp("/data/up")), "stat");
    escaped(f.storage.list(&vp("/data/up")), "list");
    escaped(
        f.storage.open_write(&vp("/data/up/new"), CREATE),
        "open_write",
    );
    escaped(f.storage.open_read(&vp("/data/etc/passwd")), "etc");
    f.outside_untouched();
}

#[test]
fn dangling_symlink_escaping_is_not_created_through() {
    let f = Fixture::new();
    symlink("../outside/created", f.root().join("dangling")).unwrap();
    symlink(f.outside().join("created"), f.root().join("dangling_abs")).unwrap();
    assert!(refused(f.storage.open_write(&vp("/dangling"), CREATE)));
    assert!(refused(f.storage.open_write(&vp("/dangling_abs"), CREATE)));
    f.outside_untouched();
}

#[test]
fn symlinks_inside_the_root_are_followed() {
    let f = Fixture::new();
    symlink("data/file", f.root().join("flink")).unwrap();
    symlink("data", f.root().join("dlink")).unwrap();
    symlink("../data/file", f.root().join("data/self")).unwrap();
    assert_eq!(
        read_all(&f.storage.open_read(&vp("/flink")).unwrap()),
        b"hello"
    );
    assert_eq!(
        read_all(&f.storage.open_read(&vp("/dlink/file")).unwrap()),
        b"hello"
    );
    assert_eq!(
        read_all(&f.storage.open_read(&vp("/data/self")).unwrap()),
        b"hello"
    );
    assert_eq!(f.storage.stat(&vp("/flink")).unwrap().kind, FileKind::File);
    assert_eq!(f.storage.stat(&vp("/dlink")).unwrap().kind, FileKind::Dir);
    let names: Vec<_> = f
        .storage
        .list(&vp("/dlink"))
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["file", "self"]);
    let h = f.storage.open_write(&vp("/dlink/new"), CREATE).unwrap();
    h.write_all_at(b"via link", 0).unwrap();
    assert_eq!(fs::read(f.root().join("data/new")).unwrap(), b"via link");
}

#[test]
fn read_only_refuses_every_change() {
    let f = Fixture::with_mode(true);
    let s = &f.storage;
    assert!(s.is_read_only());
    let denied = |r: Result<(), StorageError>, what: &str| {
        assert!(
            matches!(r, Err(StorageError::PermissionDenied(_))),
            "{what}: {r:?}"
        );
    };
    denied(
        s.open_write(&vp("/data/file"), EXISTING).map(drop),
        "open_write",
    );
    denied(s.open_write(&vp("/new"), CREATE).map(drop), "create");
    denied(s.mkdir(&vp("/d")), "mkdir");
    denied(s.rmdir(&vp("/data")), "rmdir");
    denied(s.remove_file(&vp("/data/file")), "remove_file");
    denied(s.remove_tree(&vp("/data")), "remove_tree");
    denied(s.rename(&vp("/data/file"), &vp("/moved")), "rename");
    denied(s.chmod(&vp("/data/file"), 0o600), "chmod");
    denied(s.set_mtime(&vp("/data/file"), 0), "set_mtime");
    denied(s.symlink("data", &vp("/l")), "symlink");
    assert_eq!(fs::read(f.root().join("data/file")).unwrap(), b"hello");
    assert!(!f.root().join("new").exists());
    assert_eq!(read_all(&s.open_read(&vp("/data/file")).unwrap()), b"hello");
}

#[test]
fn remove_tree_never_follows_symlinks_out_of_the_root() {
    let f = Fixture::new();
    fs::create_dir_all(f.root().join("tree/a/b")).unwrap();
    fs::write(f.root().join("tree/a/b/f"), b"1").unwrap();
    symlink(f.outside(), f.root().join("tree/abs")).unwrap();
    symlink("../../outside", f.root().join("tree/a/rel")).unwrap();
    symlink("../data", f.root().join("tree/inside")).unwrap();
    symlink(f.outside(), f.root().join("toplink")).unwrap();
    f.storage.remove_tree(&vp("/toplink")).unwrap();
    assert!(fs::symlink_metadata(f.root().join("toplink")).is_err());
    f.storage.remove_tree(&vp("/tree")).unwrap();
    assert!(!f.root().join("tree").exists());
    f.outside_untouched();
    assert_eq!(fs::read(f.root().join("data/file")).unwrap(), b"hello");
}

#[test]
fn symlink_creation_policy() {
    let f = Fixture::new();
    let s = &f.storage;
    assert!(matches!(
        s.symlink("/etc", &vp("/abs")),
        Err(StorageError::Invalid(_))
    ));
    assert!(matches!(
        s.symlink("", &vp("/empty")),
        Err(StorageError::Invalid(_))
    ));
    assert!(matches!(
        s.symlink("../outside", &vp("/up")),
        Err(StorageError::OutsideRoot(_))
    ));
    assert!(matches!(
        s.symlink("../../x", &vp("/data/up")),
        Err(StorageError::OutsideRoot(_))
    ));
    s.symlink("../data/file", &vp("/data/rel")).unwrap();
    s.symlink("data/./file", &vp("/dot")).unwrap();
    assert_eq!(
        fs::read_link(f.root().join("dot")).unwrap(),
        Path::new("data/./file")
    );
    assert_eq!(read_all(&s.open_read(&vp("/data/rel")).unwrap()), b"hello");
    assert!(matches!(
        s.symlink("data", &vp("/dot")),
        Err(StorageError::AlreadyExists(_))
    ));
    let m = s.symlink_metadata(&vp("/data/rel")).unwrap();
    assert_eq!(m.link_target.as_deref(), Some("../data/file"));
}

/// A link whose target reads as inside the root but leads out through other links is refused:
/// through a link to the root's parent made before, through `..` after a name that a link may
/// stand for, and through a link someone else left pointing outside.
#[test]
fn symlink_targets_are_resolved_through_existing_links() {
    let f = Fixture::new();
    let s = &f.storage;
    s.mkdir(&vp("/d")).unwrap();
    // d/up is the root itself: allowed.
    s.symlink("..", &vp("/d/up")).unwrap();
    // Read as text, d/up/../x is d/x; followed, it is the root's parent.
    assert!(matches!(
        s.symlink("d/up/../outside/secret", &vp("/l1")),
        Err(StorageError::Invalid(_))
    ));
    // Made in d/up, which is the root: its `..` is outside.
    assert!(matches!(
        s.symlink("../outside/secret", &vp("/d/up/l2")),
        Err(StorageError::OutsideRoot(_))
    ));
    // A link left by someone else that points outside is not a way out either.
    symlink(f.outside(), f.root().join("data/out")).unwrap();
    assert!(matches!(
        s.symlink("data/out/secret", &vp("/l3")),
        Err(StorageError::OutsideRoot(_))
    ));
    // Links that stay inside, through links too, are made.
    s.symlink("d/up/data/file", &vp("/l4")).unwrap();
    s.symlink("../data/file", &vp("/d/l5")).unwrap();
    s.symlink("d/not-yet/there", &vp("/l6")).unwrap();
    assert_eq!(read_all(&s.open_read(&vp("/l4")).unwrap()), b"hello");
    for name in ["l1", "d/up/l2", "l3"] {
        assert!(
            fs::symlink_metadata(f.root().join(name)).is_err(),
            "{name} exists"
        );
    }
    f.outside_untouched();
}
