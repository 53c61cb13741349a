use super::*;

/// 2026-11-22 15:30:00 UTC.
const T: i64 = 1_795_361_400;

fn meta(kind: FileKind, mode: u32) -> Metadata {
    Metadata {
        kind,
        size: 5,
        mtime: T,
        mode,
        uid: 1000,
        gid: 1000,
        nlink: 1,
        dev: 0x803,
        ino: 0x1a2b,
        link_target: None,
    }
}

fn entry(name: &str, metadata: Metadata) -> DirEntry {
    DirEntry {
        name: name.to_string(),
        metadata,
    }
}

#[test]
fn mlsx_default_facts_in_globus_order() {
    let facts = mlsx_facts(
        &meta(FileKind::File, 0o644),
        None,
        "adfrw",
        &FactSelection::default_set(),
    );
    assert_eq!(
        facts,
        "Type=file;Modify=20261122153000;Size=5;Perm=adfrw;UNIX.mode=0644;UNIX.owner=1000;\
         UNIX.uid=1000;UNIX.group=1000;UNIX.gid=1000;Unique=803-1a2b; "
    );
}

#[test]
fn mlsx_symlink_carries_encoded_target() {
    let mut m = meta(FileKind::Symlink, 0o777);
    m.link_target = Some("a b;c%".to_string());
    let facts = mlsx_facts(&m, None, "r", &FactSelection::default_set());
    assert!(facts.starts_with("Type=OS.unix=slink;"), "{facts}");
    assert!(
        facts.ends_with("Unique=803-1a2b;UNIX.slink=a%20b%3Bc%25; "),
        "{facts}"
    );
}

#[test]
fn mlsx_kind_override_and_special_types() {
    let sel = FactSelection::parse("type;");
    let dir = meta(FileKind::Dir, 0o755);
    assert_eq!(mlsx_facts(&dir, Some("cdir"), "", &sel), "Type=cdir; ");
    assert_eq!(mlsx_facts(&dir, None, "", &sel), "Type=dir; ");
    let chr = meta(FileKind::CharDevice, 0o666);
    assert_eq!(mlsx_facts(&chr, None, "", &sel), "Type=OS.unix=chr; ");
    assert_eq!(
        mlsx_facts(&meta(FileKind::Fifo, 0), None, "", &sel),
        "Type=OS.unix=pipe; "
    );
}

#[test]
fn mlsx_selection_keeps_default_order() {
    let sel = FactSelection::parse("Size;TYPE;unix.mode;charset;bogus;");
    assert_eq!(sel.facts, ["size", "type", "unix.mode", "charset"]);
    let facts = mlsx_facts(&meta(FileKind::File, 0o4755), None, "r", &sel);
    assert_eq!(facts, "Type=file;Size=5;Charset=UTF-8;UNIX.mode=4755; ");
    assert_eq!(sel.to_opts_string(), "Type;Size;Charset;UNIX.mode;");
}

#[test]
fn default_selection_lists_all_but_charset() {
    let s = FactSelection::default().to_opts_string();
    assert_eq!(
        s,
        "Type;Modify;Size;Perm;UNIX.mode;UNIX.owner;UNIX.uid;UNIX.group;UNIX.gid;Unique;UNIX.slink;"
    );
}

#[test]
fn list_line_recent_file_shows_time() {
    let line = list_line(&entry("name", meta(FileKind::File, 0o644)), T + 60);
    assert_eq!(
        line,
        "-rw-r--r--    1 1000     1000                5 Nov 22 15:30 name"
    );
}

#[test]
fn list_line_old_or_future_file_shows_year() {
    let e = entry("old", meta(FileKind::File, 0o644));
    let year_later = T + 365 * 86_400;
    assert_eq!(
        list_line(&e, year_later),
        "-rw-r--r--    1 1000     1000                5 Nov 22  2026 old"
    );
    assert!(list_line(&e, T - 3600).contains("Nov 22  2026 old"));
}

#[test]
fn list_line_symlink_shows_target() {
    let mut m = meta(FileKind::Symlink, 0o777);
    m.link_target = Some("target".to_string());
    let line = list_line(&entry("link", m), T);
    assert!(line.starts_with("lrwxrwxrwx "), "{line}");
    assert!(line.ends_with(" link -> target"), "{line}");
}

#[test]
fn perms_show_types_and_special_bits() {
    assert_eq!(perms10(FileKind::Dir, 0o1777), "drwxrwxrwt");
    assert_eq!(perms10(FileKind::Dir, 0o1776), "drwxrwxrwT");
    assert_eq!(perms10(FileKind::File, 0o4755), "-rwsr-xr-x");
    assert_eq!(perms10(FileKind::File, 0o6644), "-rwSr-Sr--");
    assert_eq!(perms10(FileKind::File, 0o2710), "-rwx--s---");
    assert_eq!(perms10(FileKind::CharDevice, 0o666), "crw-rw-rw-");
    assert_eq!(perms10(FileKind::BlockDevice, 0o660), "brw-rw----");
    assert_eq!(perms10(FileKind::Fifo, 0o600), "prw-------");
    assert_eq!(perms10(FileKind::Socket, 0o755), "srwxr-xr-x");
}

#[test]
fn list_line_pads_wide_fields() {
    let mut m = meta(FileKind::File, 0o600);
    m.size = 123_456_789_012;
    m.nlink = 12;
    m.uid = 123_456_789;
    m.mtime = 0;
    let line = list_line(&entry("big", m), 1_000);
    assert_eq!(
        line,
        "-rw-------   12 123456789 1000     123456789012 Jan  1 00:00 big"
    );
}
