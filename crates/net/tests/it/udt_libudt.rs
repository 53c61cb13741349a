//! ferry's UDT against libudt 4.11 itself (Debian's libudt, the library Globus' UDT driver
//! links): a small C++ peer built from `crates/udt/tests/peer/udt_peer.cpp` sends and
//! receives files, ferry takes the other end, each side listening in turn, both of ferry's
//! controllers sending; the bytes are compared every time.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use ferry_net::{DataConn, SocketTuning, Transports};
use ferry_proto::stack::StackSpec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// The libudt peer, built once; `None` (with the reason printed) where libudt-dev or g++
/// is missing. CI installs both (`scripts/install-deps`).
fn peer_program() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let source =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../udt/tests/peer/udt_peer.cpp");
            let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("udt_peer");
            if !Path::new("/usr/include/udt/udt.h").exists() {
                eprintln!("skipped: libudt-dev is not installed (apt-get install libudt-dev)");
                return None;
            }
            let built = Command::new("g++")
                .args(["-O2", "-std=c++11", "-Wall", "-o"])
                .arg(&out)
                .arg(&source)
                .args(["-ludt", "-lpthread"])
                .status();
            match built {
                Ok(s) if s.success() => Some(out),
                other => {
                    eprintln!("skipped: could not build the libudt peer ({other:?})");
                    None
                }
            }
        })
        .as_deref()
}

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 13 + i / 7919) as u8).collect()
}

fn stack(s: &str) -> StackSpec {
    StackSpec::parse(s).unwrap()
}

/// Starts the libudt peer listening; returns it and its port.
fn peer_listening(program: &Path, role: &str, file: &Path) -> (Child, u16) {
    let mut child = Command::new(program)
        .args(["listen", "127.0.0.1", "0", role])
        .arg(file)
        .args(["--timeout", "90"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("port ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the libudt peer said {line:?}"));
    (child, port)
}

fn peer_connecting(program: &Path, port: u16, role: &str, file: &Path) -> Child {
    Command::new(program)
        .args(["connect", "127.0.0.1", &port.to_string(), role])
        .arg(file)
        .args(["--timeout", "90"])
        .spawn()
        .unwrap()
}

fn wait_ok(mut child: Child) {
    let status = child.wait().unwrap();
    assert!(status.success(), "the libudt peer failed: {status}");
}

async fn send(mut conn: DataConn, bytes: &[u8]) {
    conn.write_all(bytes).await.unwrap();
    conn.shutdown().await.unwrap();
}

async fn receive(mut conn: DataConn) -> Vec<u8> {
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(90), conn.read_to_end(&mut got))
        .await
        .expect("the transfer hung")
        .unwrap();
    got
}

/// A file of `len` pattern bytes for the libudt peer to send, in a directory of its own.
fn source_file(len: usize) -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in");
    let d = data(len);
    std::fs::File::create(&file).unwrap().write_all(&d).unwrap();
    (dir, file, d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libudt_sends_to_ferry_whichever_side_listens() {
    let Some(program) = peer_program() else {
        return;
    };
    let (_dir, file, d) = source_file(24 << 20);
    let t = Transports::standard();

    let listener = t
        .listen(&stack("udt"), LOCAL, None, SocketTuning::default())
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let child = peer_connecting(program, port, "send", &file);
    let got = receive(listener.accept().await.unwrap()).await;
    wait_ok(child);
    assert!(
        got == d,
        "ferry listening: {} of {} bytes, or different ones",
        got.len(),
        d.len()
    );

    let (child, port) = peer_listening(program, "send", &file);
    let conn = t
        .connect(
            &stack("udt"),
            SocketAddr::new(LOCAL, port),
            SocketTuning::default(),
        )
        .await
        .unwrap();
    let got = receive(conn).await;
    wait_ok(child);
    assert!(
        got == d,
        "ferry connecting: {} of {} bytes, or different ones",
        got.len(),
        d.len()
    );
}

/// ferry sends `d` over `stack` to the libudt peer, which writes it to `out`; ferry listens or
/// connects as `ferry_listens` says.
async fn ferry_sends(program: &Path, stack: &StackSpec, ferry_listens: bool, d: &[u8], out: &Path) {
    let t = Transports::standard();
    let child = if ferry_listens {
        let listener = t
            .listen(stack, LOCAL, None, SocketTuning::default())
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let child = peer_connecting(program, port, "recv", out);
        send(listener.accept().await.unwrap(), d).await;
        child
    } else {
        let (child, port) = peer_listening(program, "recv", out);
        let conn = t
            .connect(stack, SocketAddr::new(LOCAL, port), SocketTuning::default())
            .await
            .unwrap();
        send(conn, d).await;
        child
    };
    wait_ok(child);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ferry_sends_to_libudt_with_either_controller() {
    let Some(program) = peer_program() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = data(24 << 20);
    for cc in ["bbr", "udt"] {
        for listens in [false, true] {
            let out = dir.path().join(format!("{cc}-{listens}"));
            ferry_sends(program, &stack(&format!("udt:cc={cc}")), listens, &d, &out).await;
            assert!(
                std::fs::read(&out).unwrap() == d,
                "{cc}, ferry listening: {listens}: bytes differ"
            );
        }
    }
}

/// A libudt sender killed mid-transfer: ferry's reader gets what arrived, then an error that
/// names the silence (not an end of file); the 60 s timeout only guards against a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_killed_mid_transfer_is_an_error_not_an_end() {
    let Some(program) = peer_program() else {
        return;
    };
    let (_dir, file, d) = source_file(96 << 20);
    let t = Transports::standard();
    let listener = t
        .listen(&stack("udt"), LOCAL, None, SocketTuning::default())
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut child = peer_connecting(program, port, "send", &file);
    let mut conn = listener.accept().await.unwrap();
    let mut first = vec![0u8; 1 << 20];
    conn.read_exact(&mut first).await.unwrap();
    // Unread, the flow window fills and the sender waits: it dies with most of the file unsent.
    tokio::time::sleep(Duration::from_millis(500)).await;
    child.kill().unwrap();
    child.wait().unwrap();
    let mut rest = Vec::new();
    let outcome = tokio::time::timeout(Duration::from_secs(60), conn.read_to_end(&mut rest))
        .await
        .expect("the reader hung");
    let e = outcome.expect_err("a killed sender read as a clean end");
    assert!(e.to_string().contains("silent"), "{e}");
    assert!(first.len() + rest.len() < d.len());
    assert!(first[..] == d[..first.len()] && rest[..] == d[first.len()..first.len() + rest.len()]);
}

/// ferry sending to the libudt peer on loopback, for measuring: `SIZE` MiB (256), `CC`
/// (bbr), ferry `LISTEN`ing (1) or connecting (0). The peer prints its rate. Run with
/// `cargo test --release -p ferry-net --test it udt_libudt:: -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "an experiment, not a check"]
async fn ferry_to_libudt_experiment() {
    let Some(program) = peer_program() else {
        return;
    };
    // RUST_LOG=ferry_net=trace: each connection's state every second.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let size: usize = env("SIZE", "256").parse().unwrap();
    let s = stack(&format!("udt:cc={}", env("CC", "bbr")));
    let d = data(size << 20);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    ferry_sends(program, &s, env("LISTEN", "1") == "1", &d, &out).await;
    assert!(std::fs::read(&out).unwrap() == d, "bytes differ");
}
