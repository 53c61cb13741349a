//! A striped ferry server (`ferry serve --remote-nodes` with `ferry serve --data-node`s on
//! 127.0.0.x) driven by globus-url-copy `-stripe`, by `ferry copy --stripe`, against a second
//! ferry cluster with another node count and against a striped globus-gridftp-server; and what
//! happens when data nodes are down, come back, or die in the middle of a transfer. Every
//! transfer's bytes are compared.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use ferry_proto::stripe::Layout;
use ferry_proto::RangeSet;

use crate::common;

use common::striping::{ferry, globus_striped, guc, pattern, source_dir, tool, FerryCluster};

/// Why this machine cannot run these tests, if it cannot.
fn missing(needs_globus: bool) -> Option<&'static str> {
    if TcpListener::bind("127.0.0.2:0").is_err() {
        return Some("skipping: 127.0.0.2 is not a local address here");
    }
    if tool("globus-url-copy").is_none() {
        return Some(common::GUC_MISSING);
    }
    if needs_globus && tool("globus-gridftp-server").is_none() {
        return Some("skipping: needs globus-gridftp-server");
    }
    None
}

macro_rules! require {
    ($globus:expr) => {
        if let Some(why) = missing($globus) {
            eprintln!("{why}");
            return;
        }
    };
}

fn ok(out: &Output, what: &str) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

fn same(path: &Path, bytes: &[u8], what: &str) {
    let got = std::fs::read(path).unwrap_or_else(|e| panic!("{what}: {}: {e}", path.display()));
    assert!(
        got == bytes,
        "{what}: bytes differ ({} vs {} bytes)",
        got.len(),
        bytes.len()
    );
}

/// The stripes that the range markers in a `-dbg` log were written by, checking that each
/// marker lies within one stripe of `layout` over `n`.
fn marker_stripes(log: &str, layout: Layout, n: u32) -> std::collections::BTreeSet<u32> {
    let mut stripes = std::collections::BTreeSet::new();
    for line in log.lines() {
        let Some(ranges) = line.trim().strip_prefix("111 Range Marker ") else {
            continue;
        };
        let set = RangeSet::parse(ranges.trim()).unwrap();
        let Some((first, _)) = set.iter().next() else {
            continue;
        };
        let stripe = layout.stripe_of(first, n);
        for (a, b) in set.iter() {
            assert_eq!(layout.stripe_of(a, n), stripe, "{line}");
            assert_eq!(layout.stripe_of(b - 1, n), stripe, "{line}");
        }
        stripes.insert(stripe);
    }
    stripes
}

/// A control-channel conversation: logs in anonymously, sends each command and collects the
/// replies (multi-line ones whole).
fn dialogue(port: u16, commands: &[&str]) -> Vec<String> {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut rd = BufReader::new(stream.try_clone().unwrap());
    let mut wr = stream;
    let read_reply = |rd: &mut BufReader<TcpStream>| {
        let mut text = String::new();
        loop {
            let mut line = String::new();
            if rd.read_line(&mut line).unwrap() == 0 {
                return text;
            }
            text.push_str(&line);
            let b = line.as_bytes();
            if b.len() >= 4 && b[..3].iter().all(u8::is_ascii_digit) && b[3] == b' ' {
                return text;
            }
        }
    };
    read_reply(&mut rd);
    let mut out = Vec::new();
    for c in ["USER anonymous", "PASS ferry@"].iter().chain(commands) {
        write!(wr, "{c}\r\n").unwrap();
        out.push(read_reply(&mut rd));
    }
    out.split_off(2)
}

#[test]
fn globus_url_copy_stripe_gets_and_puts_through_a_ferry_striped_server() {
    require!(false);
    let len = 21 * (1 << 20) + 4321;
    let (_dir, data, bytes) = source_dir(len);
    let cluster = FerryCluster::start(&data, &["127.0.0.2", "127.0.0.3", "127.0.0.4"]);

    // Put: SPAS lists three nodes and globus-url-copy stripes over them (1 MiB blocks); each
    // node's range markers hold only its own stripe's blocks. (Without -sbs globus-url-copy
    // connects to every node but sends all blocks to the first: its put has no layout then.)
    let put = data.join("put.bin");
    let src_url = format!("file://{}", data.join("src.bin").display());
    let log = ok(
        &guc(&[
            "-dbg",
            "-stripe",
            "-sbs",
            "1048576",
            "-p",
            "2",
            &src_url,
            &cluster.url("put.bin"),
        ]),
        "guc -stripe put",
    );
    same(&put, &bytes, "guc -stripe put");
    let spas = log
        .split("229-Entering Striped Passive Mode.")
        .nth(1)
        .expect("a SPAS reply");
    let listed = spas
        .lines()
        .take_while(|l| !l.starts_with("229 "))
        .filter(|l| l.trim().starts_with("127,0,0,"))
        .count();
    assert_eq!(listed, 3, "one SPAS address per data node:\n{log}");
    let stripes = marker_stripes(&log, Layout::Blocked { block: 1 << 20 }, 3);
    assert_eq!(stripes.len(), 3, "markers from every node:\n{log}");
    let plain = data.join("put-plain.bin");
    ok(
        &guc(&[
            "-stripe",
            "-p",
            "2",
            &src_url,
            &cluster.url("put-plain.bin"),
        ]),
        "guc -stripe put without -sbs",
    );
    same(&plain, &bytes, "guc -stripe put without -sbs");

    // Get: globus-url-copy sends PORT, and one node sends it all (as Globus' frontend does).
    let got = data.join("got.bin");
    ok(
        &guc(&[
            "-stripe",
            "-p",
            "2",
            &cluster.url("src.bin"),
            &format!("file://{}", got.display()),
        ]),
        "guc -stripe get",
    );
    same(&got, &bytes, "guc -stripe get");

    // ferry's own client: a striped put (SPAS) and a plain get, and stream mode through a node.
    let put2 = data.join("put2.bin");
    ok(
        &ferry(&[
            "copy",
            "-q",
            "--stripe",
            "--stripe-block-size",
            "0",
            data.join("src.bin").to_str().unwrap(),
            &cluster.url("put2.bin"),
        ]),
        "ferry copy --stripe put",
    );
    same(&put2, &bytes, "ferry copy --stripe put");
    let got2 = data.join("got2.bin");
    ok(
        &guc(&[
            &cluster.url("put2.bin"),
            &format!("file://{}", got2.display()),
        ]),
        "guc stream-mode get",
    );
    same(&got2, &bytes, "stream-mode get through a node");
}

#[test]
fn third_party_striped_between_ferry_clusters_of_three_and_two_nodes() {
    require!(false);
    let len = 17 * (1 << 20) + 99;
    let (_dir, a_root, bytes) = source_dir(len);
    let b_dir = tempfile::tempdir().unwrap();
    // World-writable: root servers serve anonymous users as ftp or nobody.
    std::fs::set_permissions(
        b_dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let a = FerryCluster::start(&a_root, &["127.0.0.2", "127.0.0.3", "127.0.0.4"]);
    let b = FerryCluster::start(b_dir.path(), &["127.0.0.5", "127.0.0.6"]);
    for (sbs, layout) in [
        ("1048576", Layout::Blocked { block: 1 << 20 }),
        ("0", Layout::partitioned(len as u64, 2)),
    ] {
        // 3 → 2: sending node j serves receiving stripes r ≡ j (mod 3).
        let name = format!("a-to-b-{sbs}.bin");
        let log = ok(
            &guc(&[
                "-dbg",
                "-stripe",
                "-sbs",
                sbs,
                "-p",
                "2",
                &a.url("src.bin"),
                &b.url(&name),
            ]),
            "guc -stripe 3 → 2",
        );
        same(&b_dir.path().join(&name), &bytes, "3 → 2");
        assert!(!marker_stripes(&log, layout, 2).is_empty(), "{log}");
        // 2 → 3, driven by ferry.
        let back = format!("b-to-a-{sbs}.bin");
        ok(
            &ferry(&[
                "copy",
                "-q",
                "--stripe",
                "--stripe-block-size",
                sbs,
                "-p",
                "2",
                &b.url(&name),
                &a.url(&back),
            ]),
            "ferry copy --stripe 2 → 3",
        );
        same(&a_root.join(&back), &bytes, "2 → 3");
        // 3 → 2 again over QUIC and over UDT: the frontends pass the stack to their nodes,
        // whose stripes connect over UDP, each node on its own port.
        for transport in ["quic", "udt"] {
            let name = format!("a-to-b-{transport}-{sbs}.bin");
            ok(
                &ferry(&[
                    "copy",
                    "-q",
                    "--transport",
                    transport,
                    "--stripe",
                    "--stripe-block-size",
                    sbs,
                    "-p",
                    "2",
                    &a.url("src.bin"),
                    &b.url(&name),
                ]),
                &format!("ferry copy --transport {transport} --stripe 3 → 2"),
            );
            same(
                &b_dir.path().join(&name),
                &bytes,
                &format!("3 → 2 over {transport}"),
            );
        }
    }
    // gcp --big: the same striped third-party copy, with gcp's tuning, verified.
    let log = ok(
        &ferry(&[
            "cp",
            "--big",
            "--explain",
            &a.url("src.bin"),
            &b.url("gcp-big.bin"),
        ]),
        "gcp --big 3 → 2",
    );
    same(&b_dir.path().join("gcp-big.bin"), &bytes, "gcp --big");
    assert!(log.contains("1 file copied"), "{log}");
}

#[test]
fn third_party_striped_between_ferry_and_a_striped_globus_server() {
    require!(true);
    let len = 19 * (1 << 20) + 5;
    let (dir, data, bytes) = source_dir(len);
    let (_globus, gport) = globus_striped(dir.path());
    let ferry_root = tempfile::tempdir().unwrap();
    // World-writable: root servers serve anonymous users as ftp or nobody.
    std::fs::set_permissions(
        ferry_root.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let f = FerryCluster::start(ferry_root.path(), &["127.0.0.5", "127.0.0.6", "127.0.0.7"]);
    let globus_url = |p: &Path| format!("ftp://127.0.0.1:{gport}{}", p.display());
    for sbs in ["1048576", "0"] {
        // Globus (3 nodes) → ferry (3 nodes) by globus-url-copy.
        let name = format!("from-globus-{sbs}.bin");
        ok(
            &guc(&[
                "-stripe",
                "-sbs",
                sbs,
                "-p",
                "2",
                &globus_url(&data.join("src.bin")),
                &f.url(&name),
            ]),
            "striped Globus → striped ferry",
        );
        same(&ferry_root.path().join(&name), &bytes, "Globus → ferry");
        // ferry → Globus by globus-url-copy and by ferry copy.
        let back = data.join(format!("from-ferry-{sbs}.bin"));
        ok(
            &guc(&["-stripe", "-sbs", sbs, &f.url(&name), &globus_url(&back)]),
            "striped ferry → striped Globus",
        );
        same(&back, &bytes, "ferry → Globus");
        let back2 = data.join(format!("from-ferry-copy-{sbs}.bin"));
        ok(
            &ferry(&[
                "copy",
                "-q",
                "--stripe",
                "--stripe-block-size",
                sbs,
                &f.url(&name),
                &globus_url(&back2),
            ]),
            "ferry copy --stripe ferry → Globus",
        );
        same(&back2, &bytes, "ferry copy ferry → Globus");
    }
}

#[test]
fn a_frontend_with_a_node_down_still_serves_names_it_and_uses_it_again_when_it_returns() {
    require!(false);
    let (_dir, data, bytes) = source_dir(5 * (1 << 20) + 3);
    let mut cluster = FerryCluster::start(&data, &["127.0.0.2", "127.0.0.3", "127.0.0.4"]);
    let down = format!("{}:{}", cluster.nodes[1].0, cluster.nodes[1].1);
    cluster.kill_node(1);

    // FEAT and LIST answer; SPAS lists the two live nodes; STAT names the missing one.
    let replies = dialogue(cluster.port, &["FEAT", "SPAS", "STAT"]);
    assert!(replies[0].contains("SPAS"), "{replies:?}");
    let spas_lines = replies[1]
        .lines()
        .filter(|l| l.trim().starts_with("127,0,0,"))
        .count();
    assert_eq!(spas_lines, 2, "{replies:?}");
    assert!(
        replies[2].contains(&format!("data node {down}: not reachable")),
        "{replies:?}"
    );
    let ls = ok(
        &ferry(&["ls", &cluster.url("")]),
        "ferry ls with a node down",
    );
    assert!(ls.contains("src.bin"), "{ls}");

    // A striped put and a get work on the nodes that remain; the 226 names the missing node.
    let log = ok(
        &guc(&[
            "-dbg",
            "-stripe",
            &format!("file://{}", data.join("src.bin").display()),
            &cluster.url("two.bin"),
        ]),
        "put with a node down",
    );
    same(&data.join("two.bin"), &bytes, "put with a node down");
    assert!(
        log.contains(&format!("Data nodes not reachable: {down}")),
        "{log}"
    );

    // The node comes back and is used again, without restarting the frontend.
    cluster.start_node(1);
    let replies = dialogue(cluster.port, &["SPAS", "STAT"]);
    let spas_lines = replies[0]
        .lines()
        .filter(|l| l.trim().starts_with("127,0,0,"))
        .count();
    assert_eq!(spas_lines, 3, "{replies:?}");
    assert!(
        replies[1].contains(&format!("data node {down}: ok")),
        "{replies:?}"
    );
    ok(
        &guc(&[
            "-stripe",
            &format!("file://{}", data.join("src.bin").display()),
            &cluster.url("three.bin"),
        ]),
        "put after the node returned",
    );
    same(
        &data.join("three.bin"),
        &bytes,
        "put after the node returned",
    );
}

#[test]
fn a_data_node_lost_mid_transfer_fails_it_by_name_and_the_retry_resumes() {
    require!(false);
    // Large enough that the client is still sending when it is stopped below.
    let len = 400 * (1 << 20);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // World-writable: root servers serve anonymous users as ftp or nobody.
    common::files::make_dir(&data);
    let bytes = pattern(len);
    std::fs::write(data.join("src.bin"), &bytes).unwrap();
    let mut cluster = FerryCluster::start(&data, &["127.0.0.2", "127.0.0.3", "127.0.0.4"]);
    let lost = format!("{}:{}", cluster.nodes[2].0, cluster.nodes[2].1);
    let dst = data.join("dst.bin");

    let client = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["copy", "--json", "--stripe"])
        .arg(data.join("src.bin"))
        .arg(cluster.url("dst.bin"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once data lands, freeze the client, kill a node, and let the client go on.
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(&dst).map_or(0, |m| m.len()) == 0 {
        assert!(Instant::now() < deadline, "no data arrived");
        std::thread::sleep(Duration::from_millis(1));
    }
    let pid = client.id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    cluster.kill_node(2);
    // The frontend notices the lost link at once and fails the transfer by the node's name.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cluster.frontend_log().contains("data node unreachable") {
        assert!(Instant::now() < deadline, "{}", cluster.frontend_log());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    let out = client.wait_with_output().unwrap();
    let text = ok(&out, "ferry copy across a node loss");
    same(&dst, &bytes, "after the node loss and retry");
    assert!(
        text.contains(&format!("Data node {lost} lost during the transfer")),
        "the failure names the node:\n{text}"
    );
    assert!(text.contains("\"retry\""), "it was retried:\n{text}");
}

/// Runs `ferry serve` with `args` (stderr to `log`), waiting until it listens on `ip:port`.
fn serve(args: &[String], ip: &str, port: u16, log: &Path) -> common::striping::Procs {
    let child = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .arg("serve")
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let procs = common::striping::Procs(vec![child]);
    common::striping::wait_listening(ip, port, "ferry serve");
    procs
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn a_gsi_striped_server_links_nodes_with_host_credentials_and_encrypts_every_stripe() {
    require!(false);
    if tool("grid-proxy-init").is_none() {
        eprintln!("skipping: needs grid-proxy-init (globus-proxy-utils)");
        return;
    }
    use common::striping::free_port;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca");
    ok(
        &ferry(&[
            "ca",
            ca.to_str().unwrap(),
            "--host",
            "localhost",
            "--user",
            "Striped User:nobody",
        ]),
        "ferry ca",
    );
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
    let bytes = pattern(13 * (1 << 20) + 17);
    std::fs::write(root.join("src.bin"), &bytes).unwrap();
    std::fs::set_permissions(root.join("src.bin"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let host = ca.join("hosts/localhost");
    let gsi = |extra: &[&str]| -> Vec<String> {
        let mut v = s(&["--gsi", "--root", root.to_str().unwrap()]);
        v.extend(s(&[
            "--host-cert",
            host.join("hostcert.pem").to_str().unwrap(),
            "--host-key",
            host.join("hostkey.pem").to_str().unwrap(),
            "--cert-dir",
            ca.join("certificates").to_str().unwrap(),
        ]));
        v.extend(s(extra));
        v
    };
    let mut procs = Vec::new();
    let mut nodes = Vec::new();
    for ip in ["127.0.0.2", "127.0.0.3"] {
        let port = free_port(ip);
        let addr = format!("{ip}:{port}");
        let log = dir.path().join(format!("node-{ip}.log"));
        procs.push(serve(
            &gsi(&["--data-node", "--listen", &addr]),
            ip,
            port,
            &log,
        ));
        nodes.push(addr);
    }
    let port = free_port("127.0.0.1");
    let gridmap = ca.join("grid-mapfile");
    procs.push(serve(
        &gsi(&[
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--gridmap",
            gridmap.to_str().unwrap(),
            "--remote-nodes",
            &nodes.join(","),
        ]),
        "127.0.0.1",
        port,
        &dir.path().join("frontend.log"),
    ));
    let proxy = dir.path().join("x509up");
    common::grid_proxy_init(&ca, "Striped User", &proxy, "-rfc");
    let guc_gsi = |args: &[&str]| {
        // Bounded like common::striping::guc, with the test's CAs and proxy.
        Command::new("timeout")
            .arg("120")
            .arg(tool("globus-url-copy").unwrap())
            .env("X509_CERT_DIR", ca.join("certificates"))
            .env("X509_USER_PROXY", &proxy)
            .args(args)
            .output()
            .unwrap()
    };
    let url = |p: &str| format!("gsiftp://localhost:{port}/{p}");
    let src = format!("file://{}", root.join("src.bin").display());
    for (level, flag) in [("dcau", None), ("dcpriv", Some("-dcpriv"))] {
        let mut args = vec!["-stripe", "-sbs", "1048576", "-p", "2"];
        args.extend(flag);
        let name = format!("put-{level}.bin");
        let remote = url(&name);
        let mut put = args.clone();
        put.extend([src.as_str(), &remote]);
        ok(&guc_gsi(&put), &format!("GSI striped put, {level}"));
        same(
            &root.join(&name),
            &bytes,
            &format!("GSI striped put, {level}"),
        );
        if common::striping::is_root() {
            use std::os::unix::fs::MetadataExt;
            let owner = std::fs::metadata(root.join(&name)).unwrap().uid();
            assert_eq!(
                owner, 65534,
                "the nodes wrote as the mapped account (nobody)"
            );
        }
        let got = dir.path().join(format!("got-{level}.bin"));
        let mut get = args.clone();
        let dst = format!("file://{}", got.display());
        get.extend([remote.as_str(), &dst]);
        ok(&guc_gsi(&get), &format!("GSI striped get, {level}"));
        same(&got, &bytes, &format!("GSI striped get, {level}"));
    }
}

#[test]
fn nodes_refuse_frontends_without_the_secret_or_from_other_addresses() {
    require!(false);
    use common::striping::free_port;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("good"),
        "the cluster's shared secret, long enough",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("bad"),
        "some other secret that is long enough",
    )
    .unwrap();
    std::fs::write(dir.path().join("short"), "too short").unwrap();
    let root = dir.path().join("root");
    // World-writable: a root server serves anonymous users as ftp or nobody.
    common::files::make_dir(&root);
    let secret = |f: &str| dir.path().join(f).to_str().unwrap().to_string();

    // A node that only takes frontends from 127.0.0.9, and one with the good secret whose data
    // listeners are on another address.
    let (p1, p2) = (free_port("127.0.0.2"), free_port("127.0.0.3"));
    let root_s = root.to_str().unwrap();
    let _n1 = serve(
        &s(&[
            "--data-node",
            "--listen",
            &format!("127.0.0.2:{p1}"),
            "--root",
            root_s,
            "--ipc-secret-file",
            &secret("good"),
            "--ipc-allow-from",
            "127.0.0.9",
        ]),
        "127.0.0.2",
        p1,
        &dir.path().join("n1.log"),
    );
    let _n2 = serve(
        &s(&[
            "--data-node",
            "--listen",
            &format!("127.0.0.3:{p2}"),
            "--root",
            root_s,
            "--ipc-secret-file",
            &secret("good"),
            "--data-interface",
            "127.0.0.8",
        ]),
        "127.0.0.3",
        p2,
        &dir.path().join("n2.log"),
    );
    let nodes = format!("127.0.0.2:{p1},127.0.0.3:{p2}");
    let frontend = |key: &str, log: &str| {
        let port = free_port("127.0.0.1");
        let p = serve(
            &s(&[
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--root",
                root_s,
                "--anonymous",
                "--remote-nodes",
                &nodes,
                "--ipc-secret-file",
                &secret(key),
                "--ipc-connect-timeout",
                "2",
            ]),
            "127.0.0.1",
            port,
            &dir.path().join(log),
        );
        (p, port)
    };
    // With the wrong secret no node links: SPAS fails and says why for each.
    let (_bad, bad_port) = frontend("bad", "bad.log");
    let r = dialogue(bad_port, &["SPAS"]);
    assert!(r[0].starts_with("425"), "{r:?}");
    assert!(r[0].contains(&format!("127.0.0.3:{p2}")), "{r:?}");
    let n2_log = std::fs::read_to_string(dir.path().join("n2.log")).unwrap();
    assert!(n2_log.contains("IPC link refused"), "{n2_log}");
    // Garbage instead of a TLS handshake is dropped, and the node goes on serving.
    {
        let mut junk = TcpStream::connect(("127.0.0.3", p2)).unwrap();
        junk.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let _ = junk.write_all(b"USER anonymous\r\nPASS x\r\nSPAS\r\n\x00\xff garbage");
        let mut buf = [0u8; 64];
        let n = std::io::Read::read(&mut junk, &mut buf).unwrap_or(0);
        assert!(n == 0 || !buf[..n].starts_with(b"2"), "a node answered FTP");
    }
    // With the right secret only the node that allows 127.0.0.1 links.
    let (_good, good_port) = frontend("good", "good.log");
    let r = dialogue(good_port, &["SPAS", "STAT"]);
    let listed: Vec<&str> = r[0]
        .lines()
        .filter(|l| l.trim().starts_with("127,0,0,"))
        .collect();
    assert_eq!(listed.len(), 1, "{r:?}");
    // That node's listener is on its --data-interface, not the address the link came to.
    assert!(listed[0].trim().starts_with("127,0,0,8,"), "{r:?}");
    assert!(
        r[1].contains(&format!("data node 127.0.0.2:{p1}: not reachable")),
        "{r:?}"
    );
    let n1_log = std::fs::read_to_string(dir.path().join("n1.log")).unwrap();
    assert!(n1_log.contains("not in --ipc-allow-from"), "{n1_log}");
    // A secret shorter than 16 bytes is refused at start.
    let out = ferry(&[
        "serve",
        "--data-node",
        "--listen",
        "127.0.0.2:0",
        "--root",
        root_s,
        "--ipc-secret-file",
        &secret("short"),
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("too short"),
        "{out:?}"
    );
    // And a data node or frontend without any IPC authentication does not start.
    let out = ferry(&[
        "serve",
        "--data-node",
        "--listen",
        "127.0.0.2:0",
        "--root",
        root_s,
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("must be authenticated"),
        "{out:?}"
    );
}

#[test]
fn a_frontend_refuses_a_node_that_answers_with_a_certificate_instead_of_the_secret() {
    require!(false);
    let Some(openssl) = tool("openssl") else {
        eprintln!("skipping: needs the openssl command");
        return;
    };
    use common::striping::free_port;
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
    let st = Command::new(&openssl)
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=impostor", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(st.status.success(), "{st:?}");
    // A TLS 1.3 server with a certificate and no idea of the secret poses as a data node.
    let port = free_port("127.0.0.9");
    let impostor = Command::new(&openssl)
        .args(["s_server", "-quiet", "-tls1_3", "-accept"])
        .arg(format!("127.0.0.9:{port}"))
        .arg("-cert")
        .arg(&cert)
        .arg("-key")
        .arg(&key)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _impostor = common::striping::Procs(vec![impostor]);
    common::striping::wait_listening("127.0.0.9", port, "openssl s_server");
    std::fs::write(
        dir.path().join("secret"),
        "the real cluster secret, long enough",
    )
    .unwrap();
    let fport = free_port("127.0.0.1");
    let _front = serve(
        &s(&[
            "--listen",
            &format!("127.0.0.1:{fport}"),
            "--root",
            dir.path().to_str().unwrap(),
            "--anonymous",
            "--remote-nodes",
            &format!("127.0.0.9:{port}"),
            "--ipc-secret-file",
            dir.path().join("secret").to_str().unwrap(),
        ]),
        "127.0.0.1",
        fport,
        &dir.path().join("front.log"),
    );
    let r = dialogue(fport, &["SPAS"]);
    assert!(r[0].starts_with("425"), "{r:?}");
    assert!(r[0].contains("TLS handshake failed"), "{r:?}");
}

#[test]
fn a_full_disk_on_the_nodes_fails_the_store_with_452_naming_a_node() {
    require!(false);
    if !common::striping::is_root() {
        eprintln!("skipping: mounting a small file system needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(&small)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipping: cannot mount a tmpfs here");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(small.clone());
    let src = dir.path().join("src.bin");
    std::fs::write(&src, pattern(6 << 20)).unwrap();
    let cluster = FerryCluster::start(&small, &["127.0.0.2", "127.0.0.3"]);
    let out = ferry(&[
        "copy",
        "--stripe",
        "--retries",
        "0",
        src.to_str().unwrap(),
        &cluster.url("big.bin"),
    ]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "a 6 MiB file fit in 2 MiB:\n{text}");
    assert!(text.contains("452"), "{text}");
    assert!(text.contains("No space left on device"), "{text}");
    assert!(text.contains("Data node 127.0.0."), "{text}");
    // The frontend and its nodes go on: a file that fits is stored whole.
    std::fs::remove_file(small.join("big.bin")).unwrap();
    let fits = dir.path().join("fits.bin");
    let bytes = pattern(1 << 20);
    std::fs::write(&fits, &bytes).unwrap();
    ok(
        &ferry(&[
            "copy",
            "--stripe",
            fits.to_str().unwrap(),
            &cluster.url("fits.bin"),
        ]),
        "a store that fits",
    );
    same(&small.join("fits.bin"), &bytes, "a store that fits");
}

#[test]
fn a_rotated_ipc_secret_takes_effect_on_frontend_and_nodes_at_a_reload() {
    require!(false);
    let (_dir, data, bytes) = source_dir(3 * (1 << 20) + 5);
    let cluster = FerryCluster::start(&data, &["127.0.0.2", "127.0.0.3"]);
    let get = |name: &str| {
        let out = data.join(name);
        let r = ferry(&[
            "copy",
            "--stripe",
            &cluster.url("src.bin"),
            out.to_str().unwrap(),
        ]);
        (r, out)
    };
    let (r, out) = get("before.bin");
    ok(&r, "a striped get before the rotation");
    same(&out, &bytes, "a striped get before the rotation");

    // Both ends read the new secret at SIGHUP; new sessions link with it.
    cluster.rotate_secret("a rotated secret, still long enough for the link");
    cluster.reload_all();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cluster.frontend_log().contains("configuration reloaded") {
        assert!(Instant::now() < deadline, "{}", cluster.frontend_log());
        std::thread::sleep(Duration::from_millis(50));
    }
    // The nodes reload in their own time, a moment after the frontend: try until they have
    // (without the frontend's new link, no try would work).
    let deadline = Instant::now() + Duration::from_secs(10);
    let (r, out) = loop {
        let (r, out) = get("after.bin");
        if r.status.success() || Instant::now() > deadline {
            break (r, out);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    ok(&r, "a striped get after the rotation");
    same(&out, &bytes, "a striped get after the rotation");
}
