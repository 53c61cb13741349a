//! Labs brought up for real: namespaces, TUN devices and the emulator, checked with Debian's
//! ping. They need root and iproute2; without them each test says so and passes. Throughput
//! through the emulator is a benchmark figure (bench/), not a test.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn netlab() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ferry-netlab"))
}

/// Why these tests cannot run here, if they cannot.
fn missing() -> Option<String> {
    #[allow(unsafe_code)]
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("netlab tests need root (network namespaces); skipped".into());
    }
    for tool in ["ip", "ping"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Some(format!(
                "netlab tests need `{tool}` (scripts/install-deps); skipped"
            ));
        }
    }
    None
}

/// One lab test at a time: `down --all` tears down every lab, so tests must not overlap.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

macro_rules! require_root {
    () => {
        if let Some(why) = missing() {
            eprintln!("{why}");
            return;
        }
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    };
}

/// A topology file in a temporary directory (names unique per test, so tests run in parallel).
fn topology(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("lab.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn point_to_point(name: &str, link: &str) -> String {
    format!("name = \"{name}\"\n[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n[[link]]\na = \"a\"\nb = \"b\"\n{link}\n")
}

fn run(args: &[&str]) -> Output {
    Command::new(netlab()).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The average round trip ping reports, in ms.
fn ping_avg_ms(out: &str) -> Option<f64> {
    let line = out.lines().find(|l| l.contains("min/avg/max"))?;
    let values = line.split('=').nth(1)?.trim();
    values.split('/').nth(1)?.trim().parse().ok()
}

#[test]
fn ping_through_a_60_ms_link_takes_60_ms() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let file = topology(
        dir.path(),
        &point_to_point("t-ping", "rate = \"1Gbit\"\ndelay = \"30ms\""),
    );
    let out = run(&[
        "run",
        file.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "ip netns exec $NETLAB_NS_A ping -c 20 -i 0.05 -q $NETLAB_ADDR_B",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let avg = ping_avg_ms(&String::from_utf8_lossy(&out.stdout))
        .unwrap_or_else(|| panic!("no ping summary: {}", text(&out)));
    assert!(
        (58.0..=62.0).contains(&avg),
        "RTT {avg} ms, expected 60 ± 2: {}",
        text(&out)
    );
    assert!(
        !Path::new("/run/netns/fnl-t-ping-a").exists(),
        "run left its namespace behind"
    );
}

#[test]
fn up_exec_addr_and_down_work_on_a_running_lab() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let file = topology(dir.path(), &point_to_point("t-updown", "delay = \"1ms\""));
    let f = file.to_str().unwrap();
    let up = run(&["up", f]);
    assert!(up.status.success(), "{}", text(&up));
    let addr = run(&["addr", "--lab", "t-updown", "b"]);
    let b = String::from_utf8_lossy(&addr.stdout).trim().to_string();
    assert_eq!(b, "10.77.0.2", "{}", text(&addr));
    let ping = run(&[
        "exec", "--lab", "t-updown", "a", "--", "ping", "-c", "3", "-i", "0.1", "-q", &b,
    ]);
    let down = run(&["down", f]);
    assert!(ping.status.success(), "{}", text(&ping));
    assert!(down.status.success(), "{}", text(&down));
    assert!(!Path::new("/run/netns/fnl-t-updown-a").exists());
    let again = run(&["exec", "--lab", "t-updown", "a", "--", "true"]);
    assert!(
        !again.status.success(),
        "exec after down should fail: {}",
        text(&again)
    );
}

#[test]
fn a_lost_link_drops_what_it_should_and_a_command_failure_still_tears_down() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    // Half the packets lost each way: most pings fail, some get through.
    let file = topology(dir.path(), &point_to_point("t-loss", "loss = 50.0"));
    let out = run(&[
        "run",
        file.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "ip netns exec $NETLAB_NS_A ping -c 200 -i 0.002 -q $NETLAB_ADDR_B; exit 7",
    ]);
    assert_eq!(
        out.status.code(),
        Some(7),
        "run exits with its command's status: {}",
        text(&out)
    );
    let s = String::from_utf8_lossy(&out.stdout);
    let received: u32 = s
        .split(',')
        .find(|p| p.contains("received"))
        .and_then(|p| p.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no ping summary: {}", text(&out)));
    // Each echo and its reply cross a 50 % link: 25 % come back; 200 tries give 25-75.
    assert!(
        (25..=75).contains(&received),
        "{received} of 200 came back: {}",
        text(&out)
    );
    assert!(!Path::new("/run/netns/fnl-t-loss-a").exists());
}

#[test]
fn a_run_killed_half_way_leaves_nothing_after_down_all() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let file = topology(dir.path(), &point_to_point("t-killed", "delay = \"5ms\""));
    let mut child = Command::new(netlab())
        .args(["run", file.to_str().unwrap(), "--", "sleep", "31.5"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !Path::new("/run/netns/fnl-t-killed-b").exists() {
        assert!(Instant::now() < deadline, "the lab never came up");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let down = run(&["down", "--all"]);
    assert!(down.status.success(), "{}", text(&down));
    let left: Vec<String> = ["/run/netns", "/etc/netns"]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|d| d.flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("fnl-t-killed"))
        .collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
    for pattern in ["ferry-netlab emulate", "sleep 31.5"] {
        let ps = Command::new("pgrep")
            .args(["-f", pattern])
            .output()
            .unwrap();
        let pids = String::from_utf8_lossy(&ps.stdout).trim().to_string();
        assert!(pids.is_empty(), "`{pattern}` processes left: {pids}");
    }
    let links = Command::new("ip").args(["-o", "link"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&links.stdout).contains("fnlt"),
        "TUN devices left in the root namespace"
    );
}
