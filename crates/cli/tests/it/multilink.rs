//! Multilink: one file to many servers through a forwarding tree (`gridftp_multicast`), driven
//! by the real globus-url-copy `-MC` and by `ferry url-copy -MC`, over trees of ferry servers,
//! of Globus servers and of both. Every destination's bytes are compared with the source.
//!
//! Without globus-gridftp-server or globus-url-copy (and Globus' multicast driver,
//! libglobus-xio-gridftp-multicast) the tests that need them print why and pass; CI installs
//! them.

use crate::common;

use std::path::Path;

use common::files::compare_bytes;
use common::{random_bytes, run_ferry, run_guc, write_file, Sandbox, ServerUnderTest};

/// Every ferry node may forward to the test's hosts: loopback, and netlab's private networks.
const WHITELIST: [&str; 4] = [
    "--fs-whitelist",
    "file,gridftp_multicast",
    "--multicast-allow-to",
    "127.0.0.0/8,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fd00::/8",
];
const GLOBUS_WHITELIST: [&str; 2] = ["-fs-whitelist", "file,gridftp_multicast"];

/// Why Globus' side of these tests cannot run here, if it cannot.
fn globus_missing() -> Option<String> {
    if common::guc::globus_url_copy_path().is_none() {
        return Some(common::GUC_MISSING.into());
    }
    if let Some(why) = common::ServerKind::Globus.missing() {
        return Some(why);
    }
    let driver = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
    ]
    .iter()
    .any(|d| {
        Path::new(d)
            .join("libglobus_xio_gridftp_multicast_driver.so")
            .exists()
    });
    (!driver).then(|| {
        "skipping: Globus' multicast driver not installed \
         (apt-get install libglobus-xio-gridftp-multicast)"
            .into()
    })
}

/// `n` ferry servers that may forward, each serving its own directory.
fn ferry_servers(sb: &Sandbox, prefix: &str, n: usize) -> Vec<ServerUnderTest> {
    (0..n)
        .map(|i| {
            ServerUnderTest::start_ferry_with(&sb.served_dir(&format!("{prefix}{i}")), &WHITELIST)
        })
        .collect()
}

fn globus_servers(sb: &Sandbox, prefix: &str, n: usize) -> Vec<ServerUnderTest> {
    (0..n)
        .map(|i| {
            ServerUnderTest::start_globus_with(
                &sb.served_dir(&format!("{prefix}{i}")),
                &GLOBUS_WHITELIST,
            )
        })
        .collect()
}

/// Writes an `-MC` file of `lines`.
fn mc_file(sb: &Sandbox, lines: &[String]) -> String {
    let path = sb.path().join("mc.txt");
    write_file(&path, (lines.join("\n") + "\n").as_bytes());
    path.display().to_string()
}

fn assert_all_have(bytes: &[u8], servers: &[&ServerUnderTest], name: &str) {
    for s in servers {
        if let Err(e) = compare_bytes(bytes, &s.path_of(name)) {
            panic!(
                "{} ({:?}): {e}\nits log:\n{}",
                s.url_for(name),
                s.kind(),
                s.log_tail(30)
            );
        }
    }
}

#[test]
fn globus_url_copy_mc_with_four_streams_fills_a_tree_of_ferry_servers() {
    if let Some(why) = globus_missing() {
        eprintln!("{why}");
        return;
    }
    let sb = Sandbox::new();
    let data = random_bytes(24 << 20, 41);
    let source = ServerUnderTest::start_ferry_with(&sb.served_dir("src"), &[]);
    write_file(&source.path_of("in.bin"), &data);
    // Four destinations, cc=2 by default: d0 → {d1 → d3, d2}.
    let dests = ferry_servers(&sb, "d", 4);
    let mc = mc_file(
        &sb,
        &dests
            .iter()
            .map(|d| d.url_for("out.bin"))
            .collect::<Vec<_>>(),
    );
    let out = run_guc(&["-p", "4", "-MC", &mc, &source.url_for("in.bin")]);
    out.assert_success();
    assert_all_have(&data, &dests.iter().collect::<Vec<_>>(), "out.bin");
}

#[test]
fn globus_url_copy_mc_hears_a_dead_hop_named_in_a_marker_and_the_live_branches_finish() {
    if let Some(why) = globus_missing() {
        eprintln!("{why}");
        return;
    }
    let sb = Sandbox::new();
    let data = random_bytes(24 << 20, 49);
    let source = ServerUnderTest::start_ferry_with(&sb.served_dir("src"), &[]);
    write_file(&source.path_of("in.bin"), &data);
    let d = ferry_servers(&sb, "d", 2);
    let dead = format!("ftp://127.0.0.1:{}/out.bin", common::server::free_port());
    // d0 → {dead, d1}: d0 names the dead hop in a perf marker line at once, and in its 451.
    let mc = mc_file(
        &sb,
        &[
            d[0].url_for("out.bin"),
            dead.clone(),
            d[1].url_for("out.bin"),
        ],
    );
    let out = run_guc(&["-MC", &mc, &source.url_for("in.bin")]);
    // It read the marker line (its -dbg dialogue shows it) and went on to the final reply,
    // which fails the copy; it was not killed, nor did it stop at the marker.
    assert!(
        out.stderr.contains(&format!("Forward Failed: {dead}")),
        "the dead hop should be named in a marker or the 451:\n{}",
        out.stderr
    );
    assert!(
        out.status.is_some() && !out.success(),
        "globus-url-copy should end, failed: {:?}",
        out.status
    );
    assert_all_have(&data, &[&d[0], &d[1]], "out.bin");
}

#[test]
fn ferry_url_copy_mc_fills_a_tree_of_globus_servers_over_one_stream() {
    if let Some(why) = globus_missing() {
        eprintln!("{why}");
        return;
    }
    let sb = Sandbox::new();
    let data = random_bytes(20 << 20, 42);
    let local = sb.local_dir("local").join("in.bin");
    write_file(&local, &data);
    let dests = globus_servers(&sb, "g", 4);
    let mc = mc_file(
        &sb,
        &dests
            .iter()
            .map(|d| d.url_for("out.bin"))
            .collect::<Vec<_>>(),
    );
    // Globus' driver writes a corrupt file when the data comes on several streams; ferry asks
    // for four and must send one to a Globus first hop.
    let out = run_ferry(&[
        "url-copy",
        "-vb",
        "-p",
        "4",
        "-MC",
        &mc,
        &local.display().to_string(),
    ]);
    out.assert_success();
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains("1 streams"),
        "ferry should send one stream to Globus' multicast driver:\n{said}"
    );
    assert_all_have(&data, &dests.iter().collect::<Vec<_>>(), "out.bin");
}

#[test]
fn a_mixed_chain_ferry_globus_ferry_delivers_every_copy() {
    if let Some(why) = globus_missing() {
        eprintln!("{why}");
        return;
    }
    let sb = Sandbox::new();
    let data = random_bytes(12 << 20, 43);
    let source = ServerUnderTest::start_ferry_with(&sb.served_dir("src"), &[]);
    write_file(&source.path_of("in.bin"), &data);
    let f = ferry_servers(&sb, "f", 2);
    let g = globus_servers(&sb, "g", 1);
    // A chain (cc=1 at every node), third party from the source: ferry → Globus → ferry.
    let mc = mc_file(
        &sb,
        &[
            format!("{}?cc=1;P=2", f[0].url_for("out.bin")),
            format!("{}?cc=1", g[0].url_for("out.bin")),
            f[1].url_for("out.bin"),
        ],
    );
    let out = run_ferry(&["url-copy", "-MC", &mc, &source.url_for("in.bin")]);
    out.assert_success();
    assert_all_have(&data, &[&f[0], &g[0], &f[1]], "out.bin");
}

#[test]
fn a_tree_of_ferry_servers_with_parallel_hops_and_a_relay_that_keeps_nothing() {
    let sb = Sandbox::new();
    let data = random_bytes(30 << 20, 44);
    let local = sb.local_dir("local").join("in.bin");
    write_file(&local, &data);
    let d = ferry_servers(&sb, "d", 5);
    // d0 relays only (local_write=n) to three children with four streams each; d1 forwards
    // the two destinations left to it on to d4.
    let mut lines = vec![format!(
        "{}?cc=3;P=4;local_write=n",
        d[0].url_for("out.bin")
    )];
    lines.extend(d[1..].iter().map(|s| s.url_for("out.bin")));
    let mc = mc_file(&sb, &lines);
    let out = run_ferry(&[
        "url-copy",
        "-p",
        "4",
        "-MC",
        &mc,
        &local.display().to_string(),
    ]);
    out.assert_success();
    assert_all_have(&data, &d[1..].iter().collect::<Vec<_>>(), "out.bin");
    assert!(
        !d[0].path_of("out.bin").exists(),
        "the relay stored a file although local_write=n"
    );
}

#[test]
fn a_dead_hop_is_named_and_the_other_branches_finish() {
    let sb = Sandbox::new();
    let data = random_bytes(8 << 20, 45);
    let local = sb.local_dir("local").join("in.bin");
    write_file(&local, &data);
    let d = ferry_servers(&sb, "d", 2);
    // A port nothing listens on.
    let dead = format!("ftp://127.0.0.1:{}/out.bin", common::server::free_port());
    let mc = mc_file(
        &sb,
        &[
            d[0].url_for("out.bin"),
            dead.clone(),
            d[1].url_for("out.bin"),
        ],
    );
    let out = run_ferry(&["url-copy", "-MC", &mc, &local.display().to_string()]);
    assert_ne!(out.code(), Some(0), "the copy succeeded with a dead hop");
    assert!(
        out.stderr.contains(&dead) && out.stderr.contains("451"),
        "the failure should name the dead hop with a 451:\n{}",
        out.stderr
    );
    // d0 → {dead, d1}: the first hop and the live branch have the whole file.
    assert_all_have(&data, &[&d[0], &d[1]], "out.bin");
}

#[test]
fn a_bad_multicast_option_string_is_refused_at_setdiskstack() {
    let sb = Sandbox::new();
    let local = sb.local_dir("local").join("in.bin");
    write_file(&local, b"x");
    let d = ferry_servers(&sb, "d", 1);
    let mc = mc_file(&sb, &[format!("{}?cc=2;bogus=1", d[0].url_for("out.bin"))]);
    let out = run_ferry(&["url-copy", "-MC", &mc, &local.display().to_string()]);
    assert_ne!(out.code(), Some(0));
    assert!(
        out.stderr.contains("bogus"),
        "the refusal should name the bad option:\n{}",
        out.stderr
    );
    assert!(!d[0].path_of("out.bin").exists());
}

/// Overlay routing into a cluster (netlab `head-workers`: the client is 30 ms from the head
/// node, the workers sit on a private network behind it). `--via` the head's server reaches
/// workers the client has no route to; the head forwards and stores nothing.
#[test]
fn workers_behind_a_head_node_get_the_file_through_it_and_the_head_stores_nothing() {
    use common::netlab::{missing, Lab};
    if let Some(why) = missing("multilink through a head node") {
        eprintln!("{why}");
        return;
    }
    let sb = Sandbox::new();
    let mut lab = Lab::up(sb.path(), "head-workers", "mlhead", Some("cubic"));
    let data = random_bytes(24 << 20, 46);
    let local = sb.local_dir("local").join("in.bin");
    write_file(&local, &data);
    let mut roots = Vec::new();
    for host in ["head", "w1", "w2"] {
        let root = sb.served_dir(host);
        let addr = lab.addr(host);
        let args: Vec<String> = [
            "--listen",
            &format!("{addr}:2811"),
            "--root",
            &root.display().to_string(),
            "--anonymous",
            "--anonymous-write",
            WHITELIST[0],
            WHITELIST[1],
            WHITELIST[2],
            WHITELIST[3],
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        lab.serve(host, 2811, &args, &sb.path().join(format!("{host}.log")));
        roots.push(root);
    }
    let (head, w1, w2) = (lab.addr("head"), lab.addr("w1"), lab.addr("w2"));
    // The client has no route to the workers.
    let direct = lab
        .cmd("client", &["ping", "-c", "1", "-W", "1", &w1])
        .output()
        .unwrap();
    assert!(
        !direct.status.success(),
        "the client reaches a worker directly"
    );
    let out = lab
        .cmd(
            "client",
            &[
                env!("CARGO_BIN_EXE_ferry"),
                "copy",
                "-v",
                "--via",
                &format!("ftp://{head}:2811/"),
                "--to-many",
                &local.display().to_string(),
                &format!("ftp://{w1}:2811/out.bin"),
                &format!("ftp://{w2}:2811/out.bin"),
            ],
        )
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the copy failed:\n{said}");
    assert!(said.contains("not reachable from here"), "{said}");
    for root in &roots[1..] {
        compare_bytes(&data, &root.join("out.bin")).unwrap_or_else(|e| panic!("{e}\n{said}"));
    }
    let kept: Vec<_> = std::fs::read_dir(&roots[0]).unwrap().collect();
    assert!(kept.is_empty(), "the head node stored {kept:?}");
}

/// How many STORs a ferry server's log records.
fn stores(s: &ServerUnderTest) -> usize {
    s.log_tail(10_000)
        .lines()
        .filter(|l| l.contains("verb=\"STOR\""))
        .count()
}

#[test]
fn a_hop_killed_mid_transfer_is_named_and_only_its_subtree_gets_the_file_again() {
    let sb = Sandbox::new();
    let data = random_bytes(160 << 20, 47);
    let local = sb.local_dir("local").join("in.bin");
    write_file(&local, &data);
    let mut d = ferry_servers(&sb, "d", 4);
    // Fan-out 2, in the order given: d0 → {d1 → d3, d2}. (Ordered by round trip, a login
    // over a millisecond under the suite's load once put d1 at the root.)
    let mut args = vec![
        "copy",
        "--json",
        "--fan-out",
        "2",
        "--keep-order",
        "--to-many",
    ];
    let local_arg = local.display().to_string();
    args.push(&local_arg);
    let urls: Vec<String> = d.iter().map(|s| s.url_for("out.bin")).collect();
    args.extend(urls.iter().map(String::as_str));
    let run = common::spawn_ferry(&args);
    // Kill d1 once it holds a few MiB, and bring it back at once for the retry.
    let partial = d[1].path_of("out.bin");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::metadata(&partial).map_or(0, |m| m.len()) < 8 << 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "d1 never received data"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    d[1].restart_same_port();
    let out = run.wait(std::time::Duration::from_secs(300));
    out.assert_success();
    // The tree named d1 (its parent d0 reported it), with what d1 and d3 held.
    let named: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == "forward_failed")
        .collect();
    assert!(
        named.iter().any(|e| e["url"] == urls[1].as_str()),
        "d1's failure should be reported as an event:\n{}",
        out.stdout
    );
    let held = named
        .iter()
        .rfind(|e| e["url"] == urls[1].as_str())
        .and_then(|e| e["held"].as_str())
        .map(|h| ferry_proto::RangeSet::parse(h).expect("ranges"))
        .expect("held");
    assert!(
        held.total() < data.len() as u64,
        "d1 held everything: {held}"
    );
    // The retry moved exactly what the subtree lacked: the file less what it held.
    let moved: Vec<u64> = out
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == "done")
        .filter_map(|e| e["moved"].as_u64())
        .collect();
    assert_eq!(moved, [data.len() as u64 - held.total()], "{}", out.stdout);
    // Only d1's subtree (d1, d3) is sent again, what it lacked, through d0 storing nothing.
    assert!(
        out.stderr.contains(&format!(
            "sending {} and the destination below it the",
            urls[1]
        )) && out.stderr.contains("storing nothing there"),
        "the failed hop's subtree should be sent again through d0:\n{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains(&format!("sending {}", urls[2])),
        "{}",
        out.stderr
    );
    assert!(stores(&d[3]) <= 2, "d3 got the file more than twice");
    assert_all_have(&data, &d.iter().collect::<Vec<_>>(), "out.bin");
    assert_eq!(stores(&d[2]), 1, "d2 got the file twice");
    // d0's second STOR relayed (local_write=n): its copy is the first, whole, one.
    assert!(stores(&d[0]) <= 2, "d0 got the file more than twice");
}

/// Sends `lines` on a raw control connection to a ferry server (anonymous login first) and
/// returns each command's reply code; the connection stays open until `hold` ends.
fn raw_session(port: u16, lines: &[String], hold: std::time::Duration) -> Vec<u16> {
    use std::io::{BufRead, BufReader, Write};
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let mut read_reply = || -> u16 {
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                reader.read_line(&mut line).unwrap() > 0,
                "the server closed"
            );
            // The last line of a reply is "NNN text".
            if line.len() >= 4 && line.as_bytes()[3] == b' ' {
                return line[..3].parse().unwrap();
            }
        }
    };
    read_reply();
    let mut codes = Vec::new();
    let login = ["USER anonymous".to_string(), "PASS x@y".to_string()];
    for l in login.iter().chain(lines) {
        writer.write_all(format!("{l}\r\n").as_bytes()).unwrap();
        codes.push(read_reply());
    }
    std::thread::sleep(hold);
    writer.write_all(b"QUIT\r\n").unwrap();
    codes
}

/// Lines of `s`'s log that say a session opened (any client's, forwarders' included).
fn sessions_opened(s: &ServerUnderTest) -> usize {
    s.log_tail(10_000)
        .lines()
        .filter(|l| l.contains("session opened"))
        .count()
}

/// A node logs in to its children as soon as it is told the tree (`SITE SETDISKSTACK`), not
/// when the data comes, and tells each its own share, so a chain logs in all the way down
/// before the first byte; a session that ends with no transfer ends those logins, and a
/// transfer after the stack was chosen is forwarded whole over the logins made ahead.
#[test]
fn children_log_in_when_told_the_tree_before_any_data_and_leave_when_none_comes() {
    let sb = Sandbox::new();
    let d = ferry_servers(&sb, "d", 3);
    let dests = ferry_proto::multicast::parse_mc_file(
        &format!("{}\n{}\n", d[1].url_for("out.bin"), d[2].url_for("out.bin")),
        None,
    )
    .unwrap();
    // d0 → d1 → d2: one child each.
    let stack = ferry_proto::multicast::first_hop_stack(Some("cc=1"), &dests);
    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let session = {
        let (port, stack) = (d[0].port(), stack.clone());
        std::thread::spawn(move || {
            raw_session(
                port,
                &[format!("SITE SETDISKSTACK {stack}")],
                std::time::Duration::from_secs(3),
            )
        })
    };
    // No STOR was sent: d1 and d2 see logins all the same (d0's forwarder, then d1's).
    wait_for("d0 never logged in to d1 before the data", &|| {
        sessions_opened(&d[1]) >= 1
    });
    wait_for("d1 never logged in to d2 before the data", &|| {
        sessions_opened(&d[2]) >= 1
    });
    let codes = session.join().unwrap();
    assert_eq!(codes, [331, 230, 250], "the stack should be taken");
    // The node's session ended without a transfer: the logins it made end too.
    wait_for("d1's session from d0 never closed", &|| {
        d[1].log_tail(10_000).contains("session closed")
    });
    wait_for("d2's session from d1 never closed", &|| {
        d[2].log_tail(10_000).contains("session closed")
    });
    assert!(!d[1].path_of("out.bin").exists() && !d[2].path_of("out.bin").exists());

    // A real copy down the same chain: every byte arrives at each node.
    let data = random_bytes(12 << 20, 48);
    let local = sb.local_dir("local").join("in.bin");
    write_file(&local, &data);
    let mc = mc_file(
        &sb,
        &[
            format!("{}?cc=1", d[0].url_for("out.bin")),
            d[1].url_for("out.bin"),
            d[2].url_for("out.bin"),
        ],
    );
    let out = run_ferry(&["url-copy", "-MC", &mc, &local.display().to_string()]);
    out.assert_success();
    assert_all_have(&data, &d.iter().collect::<Vec<_>>(), "out.bin");
}
