//! Started as root, no session works as root unless the admin says so: anonymous sessions work
//! as `--anonymous-user` (ftp, else nobody, by default), password users as the account their
//! line names: the kernel refuses what that account may not do and new files are its own.
//! (The GSI mapped-account case is in interop_gsi.rs.) Tests that need root skip with a
//! message elsewhere.

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

/// Starts `ferry serve --listen 127.0.0.1:PORT ARGS` and waits until it listens.
fn serve(args: &[&str]) -> (std::process::Child, u16) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = server.try_wait() {
            let mut err = String::new();
            use std::io::Read;
            let _ = server.stderr.take().unwrap().read_to_string(&mut err);
            panic!("ferry serve {args:?} exited with {status}: {err}");
        }
        assert!(Instant::now() < deadline, "ferry serve did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    (server, port)
}

/// `ferry serve ARGS --check-config`, or a start that must fail: (exit success, stdout+stderr).
fn serve_output(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Logs in as `user` and sends each of `commands` on a plain control connection; the replies.
fn control(port: u16, user: &str, pass: &str, commands: &[&str]) -> Vec<String> {
    use std::io::{BufRead, BufReader, Write};
    let conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut rd = BufReader::new(conn.try_clone().unwrap());
    let mut wr = conn;
    let mut reply = || {
        let mut last = String::new();
        loop {
            let mut line = String::new();
            if rd.read_line(&mut line).unwrap() == 0 {
                return last;
            }
            let done = line.len() > 3 && line.as_bytes()[3] == b' ';
            last = line.trim_end().to_string();
            if done {
                return last;
            }
        }
    };
    reply();
    let mut out = Vec::new();
    for cmd in [format!("USER {user}"), format!("PASS {pass}")]
        .into_iter()
        .chain(commands.iter().map(|c| c.to_string()))
    {
        wr.write_all(format!("{cmd}\r\n").as_bytes()).unwrap();
        out.push(reply());
    }
    out
}

fn copy(src: &str, dst: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["copy", "-q", "--retries", "0", src, dst])
        .output()
        .unwrap()
}

/// Anonymous service of `/` must be asked for twice: `--root` other than `/` is required, and
/// `--root /` alone is refused too.
#[test]
fn anonymous_service_needs_a_root_other_than_slash() {
    for args in [
        &["--anonymous"][..],
        &["--anonymous", "--root", "/"],
        &["--anonymous", "--anonymous-write", "--root", "//"],
    ] {
        let (ok, text) = serve_output(args);
        assert!(
            !ok && text.contains("anonymous service needs --root"),
            "{args:?}: {text}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let (ok, text) = serve_output(&["--anonymous", "--root", root, "--check-config"]);
    assert!(ok, "{text}");
}

/// `--check-config` says which account each kind of login works as.
#[test]
fn check_config_says_which_account_each_login_works_as() {
    let dir = tempfile::tempdir().unwrap();
    let passwd = dir.path().join("passwd");
    let status = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["passwd", "--stdin", "--account", "nobody"])
        .arg(&passwd)
        .arg("alice")
        .stdin(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"pw-of-alice\n")?;
            c.wait()
        })
        .unwrap();
    assert!(status.success());
    let (ok, text) = serve_output(&[
        "--anonymous",
        "--root",
        dir.path().to_str().unwrap(),
        "--password-file",
        passwd.to_str().unwrap(),
        "--check-config",
    ]);
    assert!(ok, "{text}");
    if uid_of(&whoami()) == Some(0) {
        assert!(
            text.contains("anonymous sessions work as ftp")
                || text.contains("anonymous sessions work as nobody"),
            "{text}"
        );
        assert!(
            text.contains("password users work as: alice as nobody"),
            "{text}"
        );
    } else {
        assert!(
            text.contains("work as this process's own account"),
            "{text}"
        );
    }
}

/// Run as root with `--root /` forced, an anonymous writer can neither read /etc/shadow nor
/// leave a setuid file: it works as an unprivileged account, and SITE CHMOD drops the bits.
#[test]
fn a_root_server_serves_anonymous_users_as_an_unprivileged_account() {
    if uid_of(&whoami()) != Some(0) {
        eprintln!("skipping: needs a server started as root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (mut server, port) = serve(&[
        "--root",
        "/",
        "--anonymous-whole-fs",
        "--anonymous",
        "--anonymous-write",
    ]);
    let url = |p: &str| format!("ftp://127.0.0.1:{port}{p}");
    let got = dir.path().join("shadow");
    let out = copy(&url("/etc/shadow"), got.to_str().unwrap());
    assert!(!out.status.success(), "anonymous read /etc/shadow");
    assert!(std::fs::metadata(&got).map_or(true, |m| m.len() == 0));
    let local = dir.path().join("sh");
    std::fs::write(&local, b"#!/bin/sh\nid\n").unwrap();
    let remote = format!("{}/sh", open.display());
    let out = copy(local.to_str().unwrap(), &url(&remote));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replies = control(
        port,
        "anonymous",
        "x@y",
        &[&format!("SITE CHMOD 4755 {remote}")],
    );
    assert!(replies[2].starts_with('2'), "{replies:?}");
    let meta = std::fs::metadata(open.join("sh")).unwrap();
    assert_ne!(meta.uid(), 0, "the upload belongs to root");
    assert_eq!(
        meta.mode() & 0o7777,
        0o755,
        "SITE CHMOD 4755 left {:o}",
        meta.mode()
    );
    let _ = server.kill();
    let _ = server.wait();
}

/// Run as root, a password user works as the account its line names; a user with none (and
/// no --password-account) stops the start, naming the user.
#[test]
fn a_root_server_serves_password_users_as_their_account() {
    if uid_of(&whoami()) != Some(0) {
        eprintln!("skipping: needs a server started as root");
        return;
    }
    let Some(nobody) = uid_of("nobody") else {
        eprintln!("skipping: no account 'nobody'");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(root.join("open")).unwrap();
    std::fs::set_permissions(root.join("open"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let passwd = dir.path().join("passwd");
    let set = |user: &str, account: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferry"));
        cmd.args(["passwd", "--stdin"]);
        if let Some(a) = account {
            cmd.args(["--account", a]);
        }
        let mut child = cmd
            .arg(&passwd)
            .arg(user)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"pw\n").unwrap();
        assert!(child.wait().unwrap().success());
    };
    set("alice", Some("nobody"));
    let root_s = root.to_str().unwrap();
    let (mut server, port) = serve(&[
        "--root",
        root_s,
        "--password-file",
        passwd.to_str().unwrap(),
    ]);
    let local = dir.path().join("up.bin");
    std::fs::write(&local, vec![9u8; 10_000]).unwrap();
    let out = copy(
        local.to_str().unwrap(),
        &format!("ftp://alice:pw@127.0.0.1:{port}/up.bin"),
    );
    assert!(
        !out.status.success(),
        "alice (as nobody) wrote into a root-owned directory"
    );
    let out = copy(
        local.to_str().unwrap(),
        &format!("ftp://alice:pw@127.0.0.1:{port}/open/up.bin"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::metadata(root.join("open/up.bin")).unwrap().uid(),
        nobody
    );
    let _ = server.kill();
    let _ = server.wait();

    set("bob", None);
    let (ok, text) = serve_output(&[
        "--root",
        root_s,
        "--password-file",
        passwd.to_str().unwrap(),
    ]);
    assert!(
        !ok && text.contains("password user bob has no account"),
        "{text}"
    );
    let (ok, text) = serve_output(&[
        "--root",
        root_s,
        "--password-file",
        passwd.to_str().unwrap(),
        "--password-account",
        "root",
    ]);
    assert!(!ok && text.contains("which is root"), "{text}");
}
