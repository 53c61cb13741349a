//! Striping across emulated hosts (netlab): two ferry clusters of four data nodes, each node in
//! its own network namespace behind a 400 Mbit/s, 15 ms link (bench/topologies/cluster-pair.toml),
//! a striped third-party copy whose every node carries its stripe, and a node killed in the
//! middle of a copy that the client's retry finishes. Bytes compared. Rates are the striping
//! benchmark's business (bench/, scenario `striping`), not this test's. Needs root, `ip` and the
//! ferry-netlab binary (built by `cargo test --workspace`); elsewhere it says so and passes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

const LAB: &str = "t-stripe";

fn netlab() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_ferry")).with_file_name("ferry-netlab")
}

fn missing() -> Option<String> {
    if !common::striping::is_root() {
        return Some("striped netlab test needs root (network namespaces); skipped".into());
    }
    if !netlab().exists() {
        return Some(format!(
            "striped netlab test needs {} (cargo build --release --workspace); skipped",
            netlab().display()
        ));
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("striped netlab test needs `ip` (iproute2); skipped".into());
    }
    None
}

/// The lab, torn down when dropped; every process started in it is killed first.
struct Lab {
    file: PathBuf,
    procs: Vec<Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.procs {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new(netlab()).arg("down").arg(&self.file).output();
    }
}

impl Lab {
    fn up(dir: &Path) -> Lab {
        let src =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/topologies/cluster-pair.toml");
        let text = std::fs::read_to_string(src)
            .unwrap()
            .replace("name = \"cluster-pair\"", &format!("name = \"{LAB}\""));
        let file = dir.join("lab.toml");
        std::fs::write(&file, text).unwrap();
        let _ = Command::new(netlab()).args(["down", "--all"]).output();
        let out = Command::new(netlab())
            .arg("up")
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "netlab up: {out:?}");
        Lab {
            file,
            procs: Vec::new(),
        }
    }

    fn addr(&self, host: &str) -> String {
        let out = Command::new(netlab())
            .args(["addr", "--lab", LAB, host])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn cmd(&self, host: &str, args: &[&str]) -> Command {
        let mut c = Command::new(netlab());
        c.args(["exec", "--lab", LAB, host, "--"]).args(args);
        c
    }

    /// Starts `ferry serve ARGS` in `host` and waits for it to listen on `port`; returns its
    /// index in `procs`.
    fn serve(&mut self, host: &str, port: u16, args: &[String], log: &Path) -> usize {
        let mut full = vec!["serve".to_string()];
        full.extend(args.iter().cloned());
        let mut c = Command::new(netlab());
        c.args([
            "exec",
            "--lab",
            LAB,
            host,
            "--",
            env!("CARGO_BIN_EXE_ferry"),
        ])
        .args(&full)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
        self.procs.push(c.spawn().unwrap());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = self
                .cmd(host, &["ss", "-Hltn", &format!("sport = :{port}")])
                .output()
                .unwrap();
            if !out.stdout.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "ferry serve {full:?} did not listen in {host}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        self.procs.len() - 1
    }
}

#[test]
fn striped_copy_between_clusters_of_emulated_hosts_survives_a_killed_node() {
    if let Some(why) = missing() {
        eprintln!("{why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (src_root, dst_root) = (dir.path().join("src"), dir.path().join("dst"));
    std::fs::create_dir(&src_root).unwrap();
    std::fs::create_dir(&dst_root).unwrap();
    let bytes = common::striping::pattern(48 << 20);
    std::fs::write(src_root.join("src.bin"), &bytes).unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "netlab test secret for the IPC links").unwrap();
    let secret = secret.to_str().unwrap().to_string();
    let mut lab = Lab::up(dir.path());

    let mut nodes = std::collections::HashMap::new();
    for (side, root) in [("s", &src_root), ("d", &dst_root)] {
        let hosts: Vec<String> = (1..=4).map(|i| format!("{side}{i}")).collect();
        let mut list = Vec::new();
        for h in &hosts {
            let a = lab.addr(h);
            let args = vec![
                "--data-node".into(),
                "--listen".into(),
                format!("{a}:2820"),
                "--root".into(),
                root.to_str().unwrap().into(),
                "--ipc-secret-file".into(),
                secret.clone(),
            ];
            let log = dir.path().join(format!("node-{h}.log"));
            let i = lab.serve(h, 2820, &args, &log);
            nodes.insert(h.clone(), (i, args, log));
            list.push(format!("{a}:2820"));
        }
        let front = &hosts[0];
        let a = lab.addr(front);
        let args = vec![
            "--listen".into(),
            format!("{a}:2812"),
            "--root".into(),
            root.to_str().unwrap().into(),
            "--anonymous".into(),
            "--anonymous-write".into(),
            "--remote-nodes".into(),
            list.join(","),
            "--ipc-secret-file".into(),
            secret.clone(),
        ];
        lab.serve(
            front,
            2812,
            &args,
            &dir.path().join(format!("front-{side}.log")),
        );
    }
    let (s1, d1) = (lab.addr("s1"), lab.addr("d1"));
    let copy = |name: &str| {
        lab.cmd(
            "s1",
            &[
                env!("CARGO_BIN_EXE_ferry"),
                "copy",
                "--json",
                "--stripe",
                "-p",
                "2",
                &format!("ftp://{s1}:2812/src.bin"),
                &format!("ftp://{d1}:2812/{name}"),
            ],
        )
    };

    // Every node of both clusters carries its stripe.
    let out = copy("whole.bin").output().unwrap();
    assert!(out.status.success(), "striped copy: {out:?}");
    assert!(
        std::fs::read(dst_root.join("whole.bin")).unwrap() == bytes,
        "bytes differ"
    );
    for (h, (_, _, log)) in &nodes {
        let text = std::fs::read_to_string(log).unwrap();
        // Each node has run one transfer so far: its stripe of src.bin (sending) or of
        // whole.bin (receiving).
        let carried = text
            .lines()
            .any(|l| l.contains("striped transfer done") && !l.contains("bytes=0 "));
        assert!(carried, "node {h} moved nothing:\n{text}");
    }

    // A sending node dies as data arrives; the client's retry finishes on the other three.
    let dst = dst_root.join("lossy.bin");
    let client = copy("lossy.bin")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(&dst).map_or(0, |m| m.len()) < 4 << 20 {
        assert!(Instant::now() < deadline, "no data arrived");
        std::thread::sleep(Duration::from_millis(5));
    }
    let (i, _, _) = nodes["s3"].clone();
    let _ = lab.procs[i].kill();
    let _ = lab.procs[i].wait();
    let out = client.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "copy across a node loss: {text}");
    assert!(
        std::fs::read(&dst).unwrap() == bytes,
        "bytes differ after the retry"
    );
    assert!(
        text.contains("\"event\":\"retry\""),
        "no retry happened: {text}"
    );
    assert!(
        text.contains("Data node 10.77.0."),
        "the failing node is not named: {text}"
    );
}
