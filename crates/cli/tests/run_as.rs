//! Started as root with `--anonymous-user nobody`, anonymous sessions work as nobody: the
//! kernel refuses what nobody may not do and new files are nobody's. (The GSI mapped-account
//! case is in interop_gsi.rs.) Skips with a message when not root.

use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn uid_of(name: &str) -> Option<u32> {
    let out = Command::new("id").args(["-u", name]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

#[test]
fn anonymous_sessions_work_as_the_anonymous_user() {
    if uid_of(&whoami()) != Some(0) {
        eprintln!("skipping: needs a server started as root");
        return;
    }
    let Some(nobody) = uid_of("nobody") else {
        eprintln!("skipping: no account 'nobody'");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(root.join("open")).unwrap();
    std::fs::set_permissions(root.join("open"), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(root.join("root-only"), b"secret").unwrap();
    std::fs::set_permissions(
        root.join("root-only"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--root"])
        .arg(&root)
        .args([
            "--anonymous",
            "--anonymous-write",
            "--anonymous-user",
            "nobody",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "ferry serve did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let copy = |src: &str, dst: &str| {
        Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(["copy", "-q", src, dst])
            .output()
            .unwrap()
    };
    let url = |p: &str| format!("ftp://127.0.0.1:{port}/{p}");
    let local = dir.path().join("up.bin");
    std::fs::write(&local, vec![7u8; 100_000]).unwrap();

    let got = dir.path().join("got");
    let out = copy(&url("root-only"), got.to_str().unwrap());
    assert!(!out.status.success(), "nobody read a root-only file");
    let out = copy(local.to_str().unwrap(), &url("up.bin"));
    assert!(
        !out.status.success(),
        "nobody wrote into a root-owned directory"
    );
    assert!(!root.join("up.bin").exists());
    let out = copy(local.to_str().unwrap(), &url("open/up.bin"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta = std::fs::metadata(root.join("open/up.bin")).unwrap();
    assert_eq!(meta.uid(), nobody);
    assert_eq!(
        std::fs::read(root.join("open/up.bin")).unwrap(),
        vec![7u8; 100_000]
    );
    let _ = server.kill();
    let _ = server.wait();
}

fn whoami() -> String {
    String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string()
}
