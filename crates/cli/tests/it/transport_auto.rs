//! `ferry copy --transport auto` (the default): QUIC where the rule says so, UDT where a server
//! offers that and not QUIC, TCP elsewhere, and `-v` says which and why. On loopback (a LAN) it
//! stays on TCP; across a netlab WAN (1 Gbit/s, 60 ms, both hosts on cubic) it picks QUIC for a
//! large file both ways, TCP for a small file, UDT from a server whose admin offers UDT and not
//! QUIC (ferry's, and Globus' with udt whitelisted), and TCP from a Globus server that offers
//! neither. On a short path that loses 1 % (5 ms), the round trip alone says LAN and the first
//! large file goes over TCP; its sender's retransmissions then send the next one over QUIC.
//! The ferry server's transfer log says which transport carried each file; bytes compared. The
//! netlab parts need root, `ip` and ferry-netlab; elsewhere they say so and pass.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::netlab::{missing, Lab};

const LAB: &str = "t-auto";
const MIB: usize = 1 << 20;

/// The transport of each file a transfer log records (listings left out).
fn transports(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line"))
        .filter(|v| !matches!(v["command"].as_str(), Some("MLSD" | "LIST" | "NLST")))
        .map(|v| v["transport"].as_str().unwrap_or("?").to_string())
        .collect()
}

fn said(out: &Output, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains(what),
        "ferry copy should succeed and say {what:?}: {out:?}"
    );
}

fn same(path: &Path, bytes: &[u8]) {
    let got = std::fs::read(path).unwrap();
    assert!(got == bytes, "{}: bytes differ", path.display());
}

/// Starts `ferry serve` in the foreground of `cmd`'s host (or here) and waits for `port`.
fn serve(mut cmd: Command, port: u16, log: &Path, listening: impl Fn() -> bool) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !listening() {
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!(
                "ferry serve did not listen on {port}: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child
}

#[test]
fn on_loopback_auto_stays_on_tcp_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    // World-writable: a root server serves anonymous users as ftp or nobody.
    common::files::make_dir(&root);
    let bytes = common::striping::pattern(20 * MIB);
    std::fs::write(root.join("big.bin"), &bytes).unwrap();
    let log = dir.path().join("transfers.log");
    let port = common::server::free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferry"));
    cmd.args(["serve", "--anonymous", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--root")
        .arg(&root)
        .args(["--dc-whitelist", "tcp,quic,gsi", "--log-transfer"])
        .arg(&log);
    let mut server = serve(cmd, port, &dir.path().join("serve.err"), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let dest = dir.path().join("got.bin");
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["copy", "-v"])
        .arg(format!("ftp://127.0.0.1:{port}/big.bin"))
        .arg(&dest)
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    said(&out, "transport auto chose tcp: the round trip is");
    said(&out, "a LAN");
    same(&dest, &bytes);
    assert_eq!(transports(&log), ["tcp"]);
}

/// `ferry copy -v FROM TO` in host a.
fn copy(lab: &Lab, from: &str, to: &str) -> Output {
    lab.cmd("a", &[env!("CARGO_BIN_EXE_ferry"), "copy", "-v", from, to])
        .output()
        .unwrap()
}

#[test]
fn across_a_60_ms_wan_auto_picks_quic_or_udt_for_large_files_where_both_ends_offer_it() {
    if let Some(why) = missing("transport auto netlab test") {
        eprintln!("{why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    // World-writable: a root server serves anonymous users as ftp or nobody.
    common::files::make_dir(&root);
    let big = common::striping::pattern(24 * MIB);
    let small = common::striping::pattern(MIB);
    std::fs::write(root.join("big.bin"), &big).unwrap();
    std::fs::write(root.join("small.bin"), &small).unwrap();
    let (quic_log, udt_log) = (dir.path().join("quic.log"), dir.path().join("udt.log"));
    let root_arg = root.to_str().unwrap();
    // Both hosts on cubic, whatever this machine's default: the rule reads the sender's.
    let mut lab = Lab::up(dir.path(), "wan-60ms", LAB, Some("cubic"));
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let b = lab.addr("b");
    lab.serve(
        "b",
        2811,
        &strings(&[
            "--listen",
            &format!("{b}:2811"),
            "--anonymous",
            "--anonymous-write",
            "--root",
            root_arg,
            "--dc-whitelist",
            "tcp,quic,gsi",
            "--log-transfer",
            quic_log.to_str().unwrap(),
        ]),
        &dir.path().join("quic.err"),
    );
    lab.serve(
        "b",
        2812,
        &strings(&[
            "--listen",
            &format!("{b}:2812"),
            "--anonymous",
            "--root",
            root_arg,
            "--dc-whitelist",
            "tcp,udt,gsi",
            "--log-transfer",
            udt_log.to_str().unwrap(),
        ]),
        &dir.path().join("udt.err"),
    );
    let url = |port: u16, name: &str| format!("ftp://{b}:{port}/{name}");
    let local = |name: &str| dir.path().join(name).to_str().unwrap().to_string();

    // A large file from a server that offers QUIC: the server sends, on cubic.
    let out = copy(&lab, &url(2811, "big.bin"), &local("got-big.bin"));
    said(&out, "transport auto chose quic: the round trip is");
    same(&dir.path().join("got-big.bin"), &big);
    // A large file to it: this host sends, on cubic too.
    let out = copy(&lab, &local("got-big.bin"), &url(2811, "up.bin"));
    said(&out, "transport auto chose quic");
    said(&out, "this host sends with TCP cubic");
    same(&root.join("up.bin"), &big);
    // A small file: TCP.
    let out = copy(&lab, &url(2811, "small.bin"), &local("got-small.bin"));
    said(&out, "transport auto chose tcp: a file under 16 MiB");
    same(&dir.path().join("got-small.bin"), &small);
    assert_eq!(transports(&quic_log), ["quic", "quic", "tcp"]);

    // A server whose admin offers UDT and not QUIC: UDT, and the copy says who refused QUIC.
    let out = copy(&lab, &url(2812, "big.bin"), &local("got-big-2.bin"));
    said(&out, "transport auto chose udt: the round trip is");
    said(&out, &format!("{b}:2812 does not offer QUIC"));
    same(&dir.path().join("got-big-2.bin"), &big);
    assert_eq!(transports(&udt_log), ["udt"]);

    // A Globus server refuses `SITE SETNETSTACK quic` (no such XIO driver) and, by default,
    // udt (not on its whitelist): TCP, with both answers, and the copy goes on on its default
    // stack. With udt whitelisted, it sends over UDT.
    if Command::new("globus-gridftp-server")
        .arg("-version")
        .output()
        .is_err()
    {
        eprintln!("globus-gridftp-server not installed: its part of the test skipped");
        return;
    }
    // Globus' anonymous sessions run as nobody: they must reach the file.
    use std::os::unix::fs::PermissionsExt;
    for d in [dir.path(), root.as_path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let conf = dir.path().join("empty.conf");
    std::fs::write(&conf, "").unwrap();
    for (port, whitelist) in [(2813, None), (2814, Some("udt,gsi,tcp"))] {
        let port_arg = port.to_string();
        let log = dir.path().join(format!("globus-{port}.log"));
        let mut args = vec![
            "globus-gridftp-server",
            "-c",
            conf.to_str().unwrap(),
            "-aa",
            "-anonymous-user",
            "nobody",
            "-hostname",
            &b,
            "-p",
            &port_arg,
            "-no-chdir",
            "-l",
            log.to_str().unwrap(),
        ];
        if let Some(w) = whitelist {
            args.extend(["-dc-whitelist", w]);
        }
        lab.spawn(
            "b",
            port,
            &strings(&args),
            &dir.path().join(format!("globus-{port}.err")),
        );
    }
    let from_globus = |port: u16| format!("ftp://{b}:{port}{}", root.join("big.bin").display());
    let out = copy(&lab, &from_globus(2813), &local("got-big-3.bin"));
    said(
        &out,
        &format!("transport auto chose tcp: {b}:2813 does not offer QUIC (500"),
    );
    said(&out, &format!("{b}:2813 does not offer UDT (500"));
    same(&dir.path().join("got-big-3.bin"), &big);
    let out = copy(&lab, &from_globus(2814), &local("got-big-4.bin"));
    said(&out, "transport auto chose udt");
    said(&out, &format!("{b}:2814 does not offer QUIC (500"));
    same(&dir.path().join("got-big-4.bin"), &big);
}

#[test]
fn on_a_short_lossy_path_the_first_file_s_loss_sends_the_next_over_quic() {
    if let Some(why) = missing("transport auto netlab test (loss)") {
        eprintln!("{why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    common::files::make_dir(&root.join("set"));
    let files = [
        ("set/1.bin", common::striping::pattern(24 * MIB)),
        ("set/2.bin", common::striping::pattern(20 * MIB)),
    ];
    for (name, bytes) in &files {
        std::fs::write(root.join(name), bytes).unwrap();
    }
    let log = dir.path().join("transfers.log");
    let mut lab = Lab::up(dir.path(), "lossy-lan", "t-autoloss", Some("cubic"));
    let b = lab.addr("b");
    let args: Vec<String> = [
        "--listen",
        &format!("{b}:2811"),
        "--anonymous",
        "--root",
        root.to_str().unwrap(),
        "--dc-whitelist",
        "tcp,quic,gsi",
        "--log-transfer",
        log.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    lab.serve("b", 2811, &args, &dir.path().join("ferry.err"));
    let got = dir.path().join("got");
    // One file at a time, so that the second follows the first on one worker's sessions.
    let out = lab
        .cmd(
            "a",
            &[
                env!("CARGO_BIN_EXE_ferry"),
                "copy",
                "-v",
                "-r",
                "--concurrency",
                "1",
                &format!("ftp://{b}:2811/set/"),
                got.to_str().unwrap(),
            ],
        )
        .output()
        .unwrap();
    said(&out, "transport auto chose tcp: the round trip is");
    said(&out, "a LAN");
    // The server sent the first file; its SITE TCPINFO gave the retransmissions.
    said(
        &out,
        "transport auto chose quic: the last large file over TCP",
    );
    said(&out, "so loss is what holds it back");
    assert_eq!(transports(&log), ["tcp", "quic"]);
    for (name, bytes) in &files {
        same(&got.join(name.trim_start_matches("set/")), bytes);
    }
}
