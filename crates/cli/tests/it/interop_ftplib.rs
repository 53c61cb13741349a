//! Python's standard `ftplib` against `ferry serve`: a plain FTP client that connects its data
//! connection before it sends RETR and reads exactly one reply per command. A refused RETR must
//! be one 5xx (no 150 first, as Globus answers) so every later reply stays in step, and the
//! session goes on to move real files, whose bytes are compared.

use crate::common;

use std::os::unix::fs::symlink;
use std::process::Command;

use common::{md5_hex, random_bytes, write_file, Sandbox, ServerKind, ServerUnderTest};

/// The client: anonymous login, TYPE I, then for each argument `get:NAME` (RETR, printing
/// `GOT NAME LEN MD5` or `REFUSED NAME CODE`) or `put:NAME:LEN` (STOR of LEN bytes of a
/// pattern, printing `PUT NAME` or `REFUSED NAME CODE`). Any other exception fails it.
const CLIENT: &str = r#"
import ftplib, hashlib, sys
port = int(sys.argv[1])
ftp = ftplib.FTP()
ftp.connect("127.0.0.1", port, timeout=30)
ftp.login()
ftp.voidcmd("TYPE I")
for step in sys.argv[2:]:
    kind, name, *rest = step.split(":")
    try:
        if kind == "get":
            parts = []
            ftp.retrbinary("RETR " + name, parts.append)
            data = b"".join(parts)
            print("GOT", name, len(data), hashlib.md5(data).hexdigest())
        else:
            import io
            data = bytes(i % 251 for i in range(int(rest[0])))
            ftp.storbinary("STOR " + name, io.BytesIO(data))
            print("PUT", name)
    except ftplib.error_perm as e:
        print("REFUSED", name, str(e)[:3])
    sys.stdout.flush()
ftp.quit()
print("BYE")
"#;

fn python3() -> Option<std::path::PathBuf> {
    common::find_executable("python3", &["/usr/bin"])
}

/// Runs the client against `port` with `steps` and returns its output lines.
fn run_client(port: u16, steps: &[&str]) -> Vec<String> {
    let python = python3().expect("python3");
    let out = Command::new(python)
        .arg("-c")
        .arg(CLIENT)
        .arg(port.to_string())
        .args(steps)
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "ftplib client failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout.lines().map(str::to_owned).collect()
}

#[test]
fn ftplib_sees_one_550_for_missing_and_forbidden_files_and_the_session_goes_on() {
    if python3().is_none() {
        eprintln!("skipping: python3 not installed (apt-get install python3)");
        return;
    }
    let sandbox = Sandbox::new();
    let root = sandbox.served_dir("root");
    let outside = sandbox.served_dir("outside");
    std::fs::write(outside.join("secret.txt"), b"top secret").expect("secret");
    symlink(outside.join("secret.txt"), root.join("escape.txt")).expect("symlink");
    let data = random_bytes(3 << 20, 19);
    write_file(&root.join("good.bin"), &data);
    let server = ServerUnderTest::start_kind(ServerKind::Ferry, &root);

    let lines = run_client(
        server.port(),
        &[
            "get:missing.bin",
            "get:escape.txt",
            "get:good.bin",
            "put:no/such/dir/f.bin:1000",
            "put:stored.bin:700000",
            "get:missing.bin",
            "get:good.bin",
        ],
    );
    let good = format!("GOT good.bin {} {}", data.len(), md5_hex(&data));
    assert_eq!(
        lines,
        [
            "REFUSED missing.bin 550",
            "REFUSED escape.txt 550",
            good.as_str(),
            "REFUSED no/such/dir/f.bin 550",
            "PUT stored.bin",
            "REFUSED missing.bin 550",
            good.as_str(),
            "BYE",
        ]
    );
    let stored = std::fs::read(root.join("stored.bin")).expect("stored file");
    let expected: Vec<u8> = (0..700_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(stored, expected, "STOR through ftplib stored other bytes");
    assert_eq!(
        std::fs::read(outside.join("secret.txt")).expect("secret"),
        b"top secret"
    );
}

#[test]
fn globus_answers_ftplib_the_same_way_for_a_missing_file() {
    // The reference: Globus' server refuses a missing file with one 5xx, which is what the
    // test above holds ferry to.
    if python3().is_none() {
        eprintln!("skipping: python3 not installed (apt-get install python3)");
        return;
    }
    if let Some(why) = ServerKind::Globus.missing() {
        eprintln!("{why}");
        return;
    }
    let sandbox = Sandbox::new();
    let root = sandbox.served_dir("root");
    let data = random_bytes(1 << 20, 23);
    write_file(&root.join("good.bin"), &data);
    let server = ServerUnderTest::start_kind(ServerKind::Globus, &root);
    // Globus serves the whole file system: name the files by their absolute paths.
    let missing = format!("get:{}/missing.bin", root.display());
    let good_step = format!("get:{}/good.bin", root.display());
    let lines = run_client(server.port(), &[&missing, &good_step]);
    let refused = format!("REFUSED {}/missing.bin 5", root.display());
    let good = format!(
        "GOT {}/good.bin {} {}",
        root.display(),
        data.len(),
        md5_hex(&data)
    );
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[0].starts_with(&refused), "{lines:?}");
    assert_eq!(lines[1], good);
}
