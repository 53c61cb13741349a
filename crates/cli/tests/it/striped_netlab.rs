//! Striping across emulated hosts (netlab): two ferry clusters of four data nodes, each node in
//! its own network namespace behind a 400 Mbit/s, 15 ms link (bench/topologies/cluster-pair.toml),
//! a striped third-party copy whose every node carries its stripe, and a node killed in the
//! middle of a copy that the client's retry finishes. Bytes compared. Rates are the striping
//! benchmark's business (bench/, scenario `striping`), not this test's. Needs root, `ip` and the
//! ferry-netlab binary (built by `cargo test --workspace`); elsewhere it says so and passes.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common;

use common::netlab::{missing, Lab};

const LAB: &str = "t-stripe";

#[test]
fn striped_copy_between_clusters_of_emulated_hosts_survives_a_killed_node() {
    if let Some(why) = missing("striped netlab test") {
        eprintln!("{why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (src_root, dst_root) = (dir.path().join("src"), dir.path().join("dst"));
    // World-writable: root servers serve anonymous users as ftp or nobody.
    common::files::make_dir(&src_root);
    common::files::make_dir(&dst_root);
    let bytes = common::striping::pattern(48 << 20);
    std::fs::write(src_root.join("src.bin"), &bytes).unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "netlab test secret for the IPC links").unwrap();
    let secret = secret.to_str().unwrap().to_string();
    let mut lab = Lab::up(dir.path(), "cluster-pair", LAB, None);

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
