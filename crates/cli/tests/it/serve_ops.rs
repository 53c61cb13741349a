//! Operating `ferry serve`: JSON logs with a line per session event and per transfer and no
//! secrets in them, and `--check-config` answering OK or the error without starting.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

const FERRY: &str = env!("CARGO_BIN_EXE_ferry");

/// Runs `ferry ARGS`, returning (exit code, stdout, stderr).
fn ferry(args: &[&str], input: Option<&str>) -> (Option<i32>, String, String) {
    let mut child = Command::new(FERRY)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = input {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn json_logs_have_a_line_per_login_and_transfer_and_never_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("f.txt"), b"hello").unwrap();
    let passwd = dir.path().join("passwd");
    let secret = "s3cret-Pa55word";
    let (code, _, err) = ferry(
        &["passwd", passwd.to_str().unwrap(), "alice", "--stdin"],
        Some(&format!("{secret}\n")),
    );
    assert_eq!(code, Some(0), "{err}");

    let mut server = Command::new(FERRY)
        .args(["serve", "--log-format", "json", "--listen", "127.0.0.1:0"])
        .arg("--root")
        .arg(&root)
        .arg("--password-file")
        .arg(&passwd)
        // Its user works as whoever runs the test (root in CI), which root must be told.
        .arg("--allow-root-sessions")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    let addr = ready
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("no address in {ready:?}"))
        .to_string();
    let local = dir.path().join("got.txt");
    let url = format!("ftp://alice:{secret}@{addr}/f.txt");
    let (code, _, err) = ferry(&["copy", &url, local.to_str().unwrap()], None);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = ferry(&["ls", &format!("ftp://alice:wrong@{addr}/")], None);
    assert_eq!(code, Some(3), "{err}");
    // Wait until every session opened has closed (the refused one closes after the server's
    // 500 ms delay for a wrong password) rather than for a fixed time.
    let stderr = server.stderr.take().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let seen = std::sync::Arc::clone(&seen);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let mut s = seen.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = seen.lock().unwrap().clone();
        let (opened, closed) = (
            text.matches("\"session opened\"").count(),
            text.matches("\"session closed\"").count(),
        );
        if closed >= 2 && opened == closed {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "sessions opened {opened}, closed {closed}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    server.kill().unwrap();
    let _ = server.wait();
    reader.join().unwrap();
    let log = seen.lock().unwrap().clone();

    let events: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let with = |message: &str| {
        events
            .iter()
            .filter(|e| e["fields"]["message"] == message)
            .collect::<Vec<_>>()
    };
    // A line when each session opens and closes; the close says what it moved.
    let closed = with("session closed");
    assert!(closed.len() >= 2, "{log}");
    assert_eq!(with("session opened").len(), closed.len(), "{log}");
    assert!(
        closed
            .iter()
            .any(|e| e["fields"]["user"] == "alice" && e["fields"]["transfers"].as_u64() >= Some(1)),
        "{log}"
    );
    let logins = with("logged in");
    assert_eq!(logins.len(), 1, "{log}");
    assert_eq!(logins[0]["fields"]["user"], "alice");
    let transfers = with("transfer");
    assert!(
        transfers
            .iter()
            .any(|t| t["fields"]["verb"] == "RETR" && t["fields"]["bytes"] == 5),
        "{log}"
    );
    assert_eq!(with("login refused").len(), 1, "{log}");
    assert!(!log.contains(secret), "the password is in the log:\n{log}");
    assert!(
        !log.contains("wrong"),
        "a refused password is in the log:\n{log}"
    );
}

#[test]
fn check_config_says_ok_or_the_error_without_starting() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let (code, out, err) = ferry(
        &["serve", "--check-config", "--root", root, "--anonymous"],
        None,
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("anonymous logins, read-only"), "{out}");
    assert_eq!(out.lines().last(), Some("configuration OK"), "{out}");

    let missing = dir.path().join("no-such-root");
    let (code, out, err) = ferry(
        &[
            "serve",
            "--check-config",
            "--root",
            missing.to_str().unwrap(),
            "--anonymous",
        ],
        None,
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        err.starts_with("ferry: configuration error: cannot use root"),
        "{err}"
    );
    assert!(!out.contains("configuration OK"));
}
