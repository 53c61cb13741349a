//! Every path stays beneath the root: `..`, absolute paths and symlinks that lead out are
//! refused with 550, and nothing outside the root is read, created or changed.

use crate::common;

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::PathBuf;

use common::*;
use ferry_client::ControlClient;

/// A server whose base holds `outside/secret.txt` beside the root, plus symlinks in the root:
/// `etc` → `/etc`, `out_abs` → the outside directory, `out_rel` → `../outside`.
async fn fenced() -> (TestServer, PathBuf) {
    let srv = TestServer::start().await;
    let outside = srv.base().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), b"top secret").unwrap();
    srv.write("inside.txt", b"inside");
    symlink("/etc", srv.path("etc")).unwrap();
    symlink(&outside, srv.path("out_abs")).unwrap();
    symlink("../outside", srv.path("out_rel")).unwrap();
    (srv, outside)
}

/// Starts a stream-mode RETR/LIST/STOR of `line` with a data connection open (as ftplib
/// does), so a wrongly started transfer would show, and returns the final reply and any data
/// the server sent. A refused transfer must answer with its error alone (no 150, as Globus) and
/// end the waiting data connection with FIN, not a reset.
async fn transfer_outcome(c: &mut ControlClient, line: &str) -> (u16, Vec<u8>) {
    let addr = pasv(c).await;
    let mut data = data_connect(addr).await;
    let reader = tokio::spawn(async move {
        let mut out = Vec::new();
        let ended = tokio::io::AsyncReadExt::read_to_end(&mut data, &mut out).await;
        (ended.map(|_| ()), out)
    });
    let r = cmd(c, line).await;
    let fin = if r.is_preliminary() {
        final_reply(c).await.1
    } else {
        r.clone()
    };
    if fin.code >= 400 {
        assert!(
            !r.is_preliminary(),
            "'{line}' was refused after it began: {r} {fin}"
        );
    }
    // A new PASV drops the old listener, so an unaccepted connection ends too.
    pasv(c).await;
    let (ended, got) = within("data reader", reader).await.expect("reader task");
    assert!(
        ended.is_ok(),
        "'{line}': data connection ended with {ended:?}"
    );
    (fin.code, got)
}

fn outside_untouched(outside: &std::path::Path) {
    let names: Vec<_> = std::fs::read_dir(outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["secret.txt"], "nothing new outside the root");
    assert_eq!(
        std::fs::read(outside.join("secret.txt")).unwrap(),
        b"top secret"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dotdot_paths_out_of_the_root_are_refused_with_550() {
    let (srv, outside) = fenced().await;
    let mut c = srv.login().await;
    for line in [
        "RETR ../../etc/passwd",
        "RETR ../outside/secret.txt",
        "RETR /../outside/secret.txt",
        "LIST ..",
        "NLST ../outside",
        "STOR ../outside/new.txt",
        "APPE ../outside/secret.txt",
    ] {
        let (code, got) = transfer_outcome(&mut c, line).await;
        assert_eq!(code, 550, "'{line}'");
        assert!(got.is_empty(), "'{line}' sent {} bytes", got.len());
    }
    for line in [
        "CWD ..",
        "CWD ../outside",
        "SIZE ../outside/secret.txt",
        "MDTM ../outside/secret.txt",
        "MLST ..",
        "STAT ../outside",
        "DELE ../outside/secret.txt",
        "MKD ../outside/newdir",
        "RMD ../outside",
        "CKSM MD5 0 -1 ../outside/secret.txt",
        "SITE CHMOD 777 ../outside/secret.txt",
        "SITE RDEL ../outside",
    ] {
        let r = cmd(&mut c, line).await;
        assert_eq!(r.code, 550, "'{line}': {r}");
    }
    expect(&mut c, "RNFR inside.txt", 350).await;
    expect(&mut c, "RNTO ../outside/moved.txt", 550).await;
    let r = expect(&mut c, "PWD", 257).await;
    assert!(r.text().starts_with("\"/\""), "still at the root: {r}");
    // CDUP at the root stays at the root.
    ok(&mut c, "CDUP").await;
    let r = expect(&mut c, "PWD", 257).await;
    assert!(r.text().starts_with("\"/\""), "{r}");
    outside_untouched(&outside);
    assert_eq!(srv.read("inside.txt"), b"inside");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_paths_name_files_inside_the_root() {
    let (srv, _outside) = fenced().await;
    let mut c = srv.login().await;
    let r = expect(&mut c, "SIZE /etc/passwd", 550).await;
    assert!(!r.text().contains("root:"), "{r}");
    expect(&mut c, "SIZE /inside.txt", 213).await;
    let (code, got) = transfer_outcome(&mut c, "RETR /etc/passwd").await;
    assert_eq!((code, got.len()), (550, 0));
    let (code, got) = transfer_outcome(&mut c, "RETR /inside.txt").await;
    assert_eq!((code, got.as_slice()), (226, &b"inside"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_to_etc_is_refused_for_retr_list_cwd_and_stor() {
    let (srv, _outside) = fenced().await;
    let probe = format!("ferry-confinement-probe-{}", std::process::id());
    let mut c = srv.login().await;
    for line in [
        "RETR etc/passwd".to_string(),
        "RETR etc/hostname".to_string(),
        "LIST etc".to_string(),
        "NLST etc".to_string(),
        "MLSD etc".to_string(),
        format!("STOR etc/{probe}"),
    ] {
        let (code, got) = transfer_outcome(&mut c, &line).await;
        assert_eq!(code, 550, "'{line}'");
        assert!(
            got.is_empty(),
            "'{line}' sent {:?}",
            String::from_utf8_lossy(&got)
        );
    }
    for line in [
        "CWD etc".to_string(),
        "SIZE etc/passwd".to_string(),
        "MLST etc/passwd".to_string(),
        "STAT etc".to_string(),
        "CKSM MD5 0 -1 etc/passwd".to_string(),
        format!("MKD etc/{probe}"),
    ] {
        let r = cmd(&mut c, &line).await;
        assert_eq!(r.code, 550, "'{line}': {r}");
    }
    let leaked = std::path::Path::new("/etc").join(&probe);
    let existed = leaked.exists();
    if existed {
        let _ = std::fs::remove_file(&leaked);
        let _ = std::fs::remove_dir(&leaked);
    }
    assert!(
        !existed,
        "{} was created through the symlink",
        leaked.display()
    );
    let r = expect(&mut c, "PWD", 257).await;
    assert!(r.text().starts_with("\"/\""), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_to_an_outside_directory_cannot_be_read_or_written_through() {
    let (srv, outside) = fenced().await;
    let before = std::fs::metadata(outside.join("secret.txt")).unwrap();
    let mut c = srv.login().await;
    for link in ["out_abs", "out_rel"] {
        for line in [
            format!("RETR {link}/secret.txt"),
            format!("LIST {link}"),
            format!("STOR {link}/new.txt"),
            format!("STOR {link}/secret.txt"),
            format!("APPE {link}/secret.txt"),
            format!("ESTO A 0 {link}/secret.txt"),
        ] {
            let (code, got) = transfer_outcome(&mut c, &line).await;
            assert_eq!(code, 550, "'{line}'");
            assert!(got.is_empty(), "'{line}' sent data");
        }
        for line in [
            format!("CWD {link}"),
            format!("SIZE {link}/secret.txt"),
            format!("DELE {link}/secret.txt"),
            format!("MKD {link}/newdir"),
            format!("SITE CHMOD 777 {link}/secret.txt"),
            format!("SITE CHMOD 777 {link}"),
            format!("SITE UTIME 20000101000000 {link}/secret.txt"),
            format!("MFMT 20000101000000 {link}/secret.txt"),
            format!("SITE SYMLINK x {link}/newlink"),
        ] {
            let r = cmd(&mut c, &line).await;
            assert_eq!(r.code, 550, "'{line}': {r}");
        }
    }
    outside_untouched(&outside);
    let after = std::fs::metadata(outside.join("secret.txt")).unwrap();
    assert_eq!(before.mode(), after.mode(), "mode unchanged");
    assert_eq!(before.mtime(), after.mtime(), "mtime unchanged");
    let dir_mode = std::fs::metadata(&outside).unwrap().permissions().mode();
    assert_ne!(dir_mode & 0o777, 0o777, "outside directory mode unchanged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_that_would_lead_out_cannot_be_created() {
    let (srv, outside) = fenced().await;
    let mut c = srv.login().await;
    let r = cmd(&mut c, "SITE SYMLINK /etc/passwd pw").await;
    assert!(r.code >= 500, "absolute target refused: {r}");
    let r = cmd(&mut c, "SITE SYMLINK ../outside/secret.txt up").await;
    assert_eq!(r.code, 550, "climbing target refused: {r}");
    expect(&mut c, "SITE SYMLINKFROM ../../etc", 350).await;
    let r = cmd(&mut c, "SITE SYMLINKTO up2").await;
    assert_eq!(r.code, 550, "climbing target refused: {r}");
    for name in ["pw", "up", "up2"] {
        assert!(
            std::fs::symlink_metadata(srv.path(name)).is_err(),
            "{name} must not exist"
        );
    }
    // Removing the link to /etc removes the link only.
    expect(&mut c, "SITE RDEL etc", 250).await;
    assert!(std::fs::symlink_metadata(srv.path("etc")).is_err());
    assert!(std::path::Path::new("/etc/passwd").exists());
    expect(&mut c, "DELE out_abs", 250).await;
    outside_untouched(&outside);
}
