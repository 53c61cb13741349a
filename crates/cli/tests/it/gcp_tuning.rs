//! gcp's tuning: the probe, the congestion control asked of the sending side, the per-path
//! cache and its stream search, and what `--explain` says of them; against ferry and Globus
//! servers, comparing the bytes.

use crate::common;

use std::path::Path;

use common::{
    random_bytes, run_ferry_with_cache, write_file, Sandbox, ServerKind, ServerUnderTest,
};

const MIB: usize = 1 << 20;

/// The server's transfer-log lines.
fn transfers(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .expect("transfer log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

fn expect_said(out: &common::FerryOutput, what: &str) {
    if !out.stderr.contains(what) {
        out.fail(&format!("--explain should say {what:?}"));
    }
}

#[test]
fn gcp_learns_the_path_searches_fewer_streams_and_asks_a_ferry_sender_for_its_congestion_control() {
    let sandbox = Sandbox::new();
    let local = sandbox.local_dir("local");
    let log = local.join("transfers.jsonl");
    let log_arg = log.display().to_string();
    let server = ServerUnderTest::start_ferry_with(
        &sandbox.served_dir("root"),
        &["--log-transfer", &log_arg],
    );
    let cache = local.join("cache");
    // Large enough (64 MiB and more) for the stream search to count the copy.
    let bytes = random_bytes(66 * MIB, 92);
    write_file(&server.path_of("big.bin"), &bytes);
    let url = server.url_for("big.bin");

    let first = local.join("first.bin");
    let out = run_ferry_with_cache(
        &[
            "cp",
            "--explain",
            "--congestion",
            "reno",
            &url,
            &first.display().to_string(),
        ],
        &cache,
    );
    out.assert_bytes(&bytes, &first);
    expect_said(&out, "control-channel round trip");
    expect_said(&out, "congestion control: reno, as --congestion says");
    expect_said(
        &out,
        "streams: 4 for files of 16 MiB and more (first copy on this path",
    );
    expect_said(&out, "with 4 streams for large files");
    expect_said(&out, "next copy: fewer streams");
    let logged = transfers(&log);
    let last = logged.last().expect("a transfer");
    // The server sent with what the client asked for (SITE SETNETSTACK tcp:congestion=reno).
    assert_eq!(last["tcp"]["congestion"], "reno", "{last}");
    assert_eq!(last["streams"], 4, "{last}");

    // The second copy skips the probe and tries one stream fewer than the best so far (set to
    // 8 here, so that one fewer, 7, differs from a quarter fewer, 6); on loopback (under
    // 10 ms) the sender keeps its own congestion control.
    let cache_file = cache.join("ferry/gcp-paths.json");
    let mut kept: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cache_file).unwrap()).unwrap();
    let key = format!("ftp://127.0.0.1:{} -> this host (", server.port());
    let path = kept["paths"]
        .as_object_mut()
        .unwrap()
        .iter_mut()
        .find(|(k, _)| k.starts_with(&key))
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no {key}...) in the cache"));
    assert_eq!(path["runs"], 1, "{path}");
    path["streams"] = 8.into();
    path["best_streams"] = 8.into();
    std::fs::write(&cache_file, serde_json::to_vec(&kept).unwrap()).unwrap();
    let second = local.join("second.bin");
    let out = run_ferry_with_cache(
        &["cp", "--explain", &url, &second.display().to_string()],
        &cache,
    );
    out.assert_bytes(&bytes, &second);
    expect_said(&out, "; 1 measured copies in the cache");
    expect_said(
        &out,
        "streams: 7 for files of 16 MiB and more (trying fewer",
    );
    expect_said(&out, "recovers from a loss within milliseconds");
    let logged = transfers(&log);
    let last = logged.last().expect("a transfer");
    assert_eq!(last["streams"], 7, "{last}");
    let system = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap();
    assert_eq!(last["tcp"]["congestion"], system.trim(), "{last}");

    let runs = |v: &serde_json::Value| {
        v["paths"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(k, _)| k.starts_with(&key))
            .map(|(_, e)| e["runs"].clone())
    };
    let kept: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cache_file).unwrap()).unwrap();
    // Run 1 asked for reno, run 2 had the default: the stream search started again from run 2.
    expect_said(&out, "the congestion control changed (reno -> default)");
    assert_eq!(runs(&kept), Some(1.into()), "{kept}");

    // --no-tune copies as ferry copy does and learns nothing.
    let third = local.join("third.bin");
    let out = run_ferry_with_cache(
        &[
            "cp",
            "--explain",
            "--no-tune",
            &url,
            &third.display().to_string(),
        ],
        &cache,
    );
    out.assert_bytes(&bytes, &third);
    expect_said(&out, "tuning: none (--no-tune)");
    let again: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cache_file).unwrap()).unwrap();
    assert_eq!(runs(&again), Some(1.into()), "{again}");

    // A name the sender does not offer is not asked for, and the copy goes on.
    let fourth = local.join("fourth.bin");
    let out = run_ferry_with_cache(
        &[
            "cp",
            "--explain",
            "--congestion",
            "nosuchcc",
            &url,
            &fourth.display().to_string(),
        ],
        &cache,
    );
    out.assert_bytes(&bytes, &fourth);
    expect_said(&out, "does not offer nosuchcc");
}

#[test]
fn gcp_uploads_with_its_own_congestion_control_and_a_globus_sender_is_left_its_default() {
    let sandbox = Sandbox::new();
    let local = sandbox.local_dir("local");
    let cache = local.join("cache");
    let bytes = random_bytes(20 * MIB + 3, 93);
    let src = local.join("up.bin");
    write_file(&src, &bytes);
    let log = local.join("transfers.jsonl");
    let log_arg = log.display().to_string();
    let ferry = ServerUnderTest::start_ferry_with(
        &sandbox.served_dir("ferry"),
        &["--log-transfer", &log_arg],
    );
    let out = run_ferry_with_cache(
        &[
            "cp",
            "--explain",
            "--congestion",
            "reno",
            &src.display().to_string(),
            &ferry.url_for("up.bin"),
        ],
        &cache,
    );
    out.assert_bytes(&bytes, &ferry.path_of("up.bin"));
    expect_said(&out, "congestion control: reno, as --congestion says");
    // The client's own sending connections had it.
    expect_said(&out, "over reno");

    // Third party between ferry servers: the source sends with what gcp asked, and says what
    // its connections saw (SITE TCPINFO), which the client cannot see itself.
    let other = ServerUnderTest::start_ferry_with(&sandbox.served_dir("other"), &[]);
    let out = run_ferry_with_cache(
        &[
            "cp",
            "--explain",
            "--congestion",
            "reno",
            &ferry.url_for("up.bin"),
            &other.url_for("copy.bin"),
        ],
        &cache,
    );
    out.assert_bytes(&bytes, &other.path_of("copy.bin"));
    expect_said(&out, "control-channel round trip");
    expect_said(&out, "data connections (sending): 4 over reno");
    expect_said(&out, "of the bytes sent again");

    if let Some(reason) = ServerKind::Globus.missing() {
        eprintln!("{reason}");
        return;
    }
    let globus = ServerUnderTest::start_kind(ServerKind::Globus, &sandbox.served_dir("globus"));
    write_file(&globus.path_of("g.bin"), &bytes);
    let got = local.join("g.bin");
    let out = run_ferry_with_cache(
        &[
            "cp",
            "--explain",
            "--congestion",
            "bbr",
            &globus.url_for("g.bin"),
            &got.display().to_string(),
        ],
        &cache,
    );
    out.assert_bytes(&bytes, &got);
    expect_said(&out, "does not offer bbr (offers: none)");
}

#[test]
fn a_server_that_cannot_be_reached_fails_the_copy_once_with_the_network_exit_code() {
    let sandbox = Sandbox::new();
    let local = sandbox.local_dir("local");
    let port = common::server::free_port();
    let dest = local.join("never.bin");
    let out = run_ferry_with_cache(
        &[
            "cp",
            "--explain",
            &format!("ftp://127.0.0.1:{port}/x.bin"),
            &dest.display().to_string(),
        ],
        &local.join("cache"),
    );
    // The probe's failure is the copy's: said once, not tried again by the copy.
    out.assert_exit(5);
    assert_eq!(out.stderr.matches("ferry: ").count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("hint: check that the server runs"),
        "{}",
        out.stderr
    );
    assert!(!dest.exists());
}

/// Netlab's 60 ms, 1 Gbit/s path with both hosts' socket buffers capped at 64 KiB: the first
/// copy's 16 streams (the seed's 1 Gbit/s assumed) can move about 70 Mbit/s. Its first seconds
/// show the streams held by their windows, and the copy resumes on 32 from the ranges the
/// client stored; the file arrives whole, the second RETR sends only what the first did not.
#[test]
fn streams_held_by_their_windows_double_after_the_first_seconds_and_resume_where_they_were() {
    use common::netlab::{missing, Lab};
    if let Some(why) = missing("gcp first-seconds netlab test") {
        eprintln!("{why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    // World-writable: a root server serves anonymous users as ftp or nobody.
    common::files::make_dir(&root);
    let size = 320 * MIB;
    let bytes = random_bytes(size, 93);
    std::fs::write(root.join("big.bin"), &bytes).unwrap();
    let log = dir.path().join("transfers.jsonl");
    let mut lab = Lab::up(dir.path(), "wan-60ms", "t-first", Some("cubic"));
    cap_buffers(&lab, &["a", "b"]);
    let b = lab.addr("b");
    serve_logged(&mut lab, "b", &root, &log, &dir.path().join("serve.err"));
    let got = dir.path().join("got.bin");
    let cache = dir.path().join("cache");
    let err = gcp_in_a(
        &lab,
        &cache,
        &format!("ftp://{b}:2811/big.bin"),
        got.to_str().unwrap(),
    );
    assert!(std::fs::read(&got).unwrap() == bytes, "bytes differ");
    for said in [
        "streams: 16 for files of 16 MiB and more (first copy",
        "of what their windows allow",
        "resuming the rest on 32 streams from the ranges stored",
        "next copy: more streams",
    ] {
        assert!(err.contains(said), "gcp should say {said:?}: {err}");
    }
    expect_stopped_then_resumed_on_32(&log, size);
    let kept: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cache.join("ferry/gcp-paths.json")).unwrap())
            .unwrap();
    let path = kept["paths"].as_object().unwrap().values().next().unwrap();
    assert_eq!(
        (&path["streams"], &path["search"]),
        (&32.into(), &"increase".into())
    );
    drop(lab);
}

/// Caps the hosts' socket buffers at 64 KiB, so 16 streams cannot fill a 1 Gbit/s path.
fn cap_buffers(lab: &common::netlab::Lab, hosts: &[&str]) {
    for host in hosts {
        let set = lab
            .cmd(
                host,
                &[
                    "sysctl",
                    "-w",
                    "net.ipv4.tcp_rmem=4096 65536 65536",
                    "net.ipv4.tcp_wmem=4096 65536 65536",
                ],
            )
            .output()
            .unwrap();
        assert!(set.status.success(), "sysctl in {host}: {set:?}");
    }
}

/// An anonymous, writable ferry server in `host` on port 2811, logging its transfers to `log`.
fn serve_logged(lab: &mut common::netlab::Lab, host: &str, root: &Path, log: &Path, err: &Path) {
    let at = lab.addr(host);
    let args: Vec<String> = [
        "--listen",
        &format!("{at}:2811"),
        "--anonymous",
        "--anonymous-write",
        "--root",
        root.to_str().unwrap(),
        "--log-transfer",
        log.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    lab.serve(host, 2811, &args, err);
}

/// `gcp --explain --congestion system SRC DST` in host a with its cache in `cache`; its stderr,
/// once it succeeded.
fn gcp_in_a(lab: &common::netlab::Lab, cache: &Path, src: &str, dst: &str) -> String {
    gcp_on_in_a(lab, cache, "system", src, dst)
}

/// [`gcp_in_a`] with `--congestion CONGESTION`.
fn gcp_on_in_a(
    lab: &common::netlab::Lab,
    cache: &Path,
    congestion: &str,
    src: &str,
    dst: &str,
) -> String {
    let out = lab
        .cmd(
            "a",
            &[
                "env",
                &format!("XDG_CACHE_HOME={}", cache.display()),
                env!("CARGO_BIN_EXE_ferry"),
                "cp",
                "--explain",
                "--congestion",
                congestion,
                src,
                dst,
            ],
        )
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "gcp: {err}");
    err
}

/// The sender's log shows a RETR stopped by the first-seconds rule, then one on 32 streams that
/// sent only what the destination lacked.
fn expect_stopped_then_resumed_on_32(log: &Path, size: usize) {
    let retrs: Vec<serde_json::Value> = transfers(log)
        .into_iter()
        .filter(|t| t["command"] == "RETR")
        .collect();
    assert_eq!(retrs.len(), 2, "one stopped RETR, one resumed: {retrs:?}");
    assert_ne!(retrs[0]["code"], 226, "{:?}", retrs[0]);
    let (resumed, streams) = (&retrs[1]["bytes"], &retrs[1]["streams"]);
    assert_eq!((&retrs[1]["code"], streams), (&226.into(), &32.into()));
    let resumed = resumed.as_u64().unwrap();
    assert!(
        resumed > 0 && resumed < size as u64,
        "the second RETR sends only what the destination lacked: {resumed} of {size}"
    );
}

/// A third-party copy from b to c, with the client a 33 ms round trip from each and the servers
/// 63 ms apart, their buffers capped at 64 KiB: 16 streams move about 70 Mbit/s. By the control
/// channels' round trip the windows would allow 124 and the streams would stay; the destination
/// says the data connections' round trip in its perf markers, so the rule finds them held by
/// their windows and resumes on 32. The bytes arrive whole; the source sends each once.
#[test]
fn a_third_party_copy_is_judged_by_the_round_trip_of_the_servers_own_data_connections() {
    use common::netlab::{missing, Lab};
    if let Some(why) = missing("gcp third-party first-seconds netlab test") {
        eprintln!("{why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (from, to) = (dir.path().join("b"), dir.path().join("c"));
    for d in [&from, &to] {
        // World-writable: a root server serves anonymous users as ftp or nobody.
        common::files::make_dir(d);
    }
    // Enough that more than 20 s are left at the first seconds' rate (the rule restarts no
    // shorter rest).
    let size = 400 * MIB;
    let bytes = random_bytes(size, 94);
    std::fs::write(from.join("big.bin"), &bytes).unwrap();
    let (log_b, log_c) = (dir.path().join("b.jsonl"), dir.path().join("c.jsonl"));
    let mut lab = Lab::up(dir.path(), "third-party", "t-3pt", Some("cubic"));
    cap_buffers(&lab, &["b", "c"]);
    serve_logged(&mut lab, "b", &from, &log_b, &dir.path().join("b.err"));
    serve_logged(&mut lab, "c", &to, &log_c, &dir.path().join("c.err"));
    let (b, c) = (lab.addr("b"), lab.addr("c"));
    let err = gcp_in_a(
        &lab,
        &dir.path().join("cache"),
        &format!("ftp://{b}:2811/big.bin"),
        &format!("ftp://{c}:2811/big.bin"),
    );
    assert!(
        std::fs::read(to.join("big.bin")).unwrap() == bytes,
        "bytes differ"
    );
    for said in [
        "streams: 16 for files of 16 MiB and more (first copy",
        "ms on the data connections",
        "of what their windows allow",
        "resuming the rest on 32 streams from the ranges stored",
    ] {
        assert!(err.contains(said), "gcp should say {said:?}: {err}");
    }
    expect_stopped_then_resumed_on_32(&log_b, size);
    drop(lab);
}

/// Netlab's 60 ms path losing 1 % of packets each way, hosts on cubic: gcp's first copy goes on
/// bbr; the second tries cubic, whose first seconds move a few Mbit/s where bbr moved hundreds,
/// so it resumes on bbr from the ranges stored, and the cache keeps bbr for the third. Every
/// copy arrives whole; the sender's log shows each RETR's congestion control.
#[test]
fn a_copy_that_tries_cubic_on_a_lossy_path_goes_back_to_bbr_after_its_first_seconds() {
    use common::netlab::{missing, Lab};
    if let Some(why) = missing("gcp congestion-trial netlab test") {
        eprintln!("{why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    // World-writable: a root server serves anonymous users as ftp or nobody.
    common::files::make_dir(&root);
    let size = 256 * MIB;
    let bytes = random_bytes(size, 95);
    std::fs::write(root.join("big.bin"), &bytes).unwrap();
    let log = dir.path().join("transfers.jsonl");
    let mut lab = Lab::up(dir.path(), "lossy-wan", "t-trial", Some("cubic"));
    let bbr_offered = lab
        .cmd(
            "b",
            &["cat", "/proc/sys/net/ipv4/tcp_available_congestion_control"],
        )
        .output()
        .unwrap();
    if !String::from_utf8_lossy(&bbr_offered.stdout).contains("bbr") {
        eprintln!("skipped: this kernel offers no bbr (tcp_available_congestion_control)");
        return;
    }
    let b = lab.addr("b");
    serve_logged(&mut lab, "b", &root, &log, &dir.path().join("serve.err"));
    let cache = dir.path().join("cache");
    let src = format!("ftp://{b}:2811/big.bin");
    let mut said = Vec::new();
    for copy in 1..=3 {
        let got = dir.path().join(format!("got{copy}.bin"));
        said.push(gcp_on_in_a(
            &lab,
            &cache,
            "auto",
            &src,
            got.to_str().unwrap(),
        ));
        assert!(
            std::fs::read(&got).unwrap() == bytes,
            "copy {copy}: bytes differ"
        );
    }
    for (copy, what) in [
        (0, "congestion control: bbr on"),
        (0, "a later copy tries cubic against it"),
        (1, "congestion control: cubic on"),
        (1, "on cubic: under"),
        (1, "resuming the rest on bbr from the ranges stored"),
        (1, "the next copies go on bbr"),
        (2, "congestion control: bbr on"),
    ] {
        assert!(
            said[copy].contains(what),
            "copy {} should say {what:?}: {}",
            copy + 1,
            said[copy]
        );
    }
    let retrs: Vec<(serde_json::Value, String)> = transfers(&log)
        .into_iter()
        .filter(|t| t["command"] == "RETR")
        .map(|t| {
            let cc = t["tcp"]["congestion"].as_str().unwrap_or("").to_string();
            (t, cc)
        })
        .collect();
    let summary: Vec<(&serde_json::Value, &str)> = retrs
        .iter()
        .map(|(t, cc)| (&t["code"], cc.as_str()))
        .collect();
    assert_eq!(
        retrs.len(),
        4,
        "bbr; cubic stopped, then bbr; bbr: {summary:?}"
    );
    // The stopped run logs no TCP figures; what it ran on, gcp said above.
    for i in [0, 2, 3] {
        assert_eq!(summary[i], (&226.into(), "bbr"), "{summary:?}");
    }
    assert_ne!(
        retrs[1].0["code"], 226,
        "the cubic run was stopped: {summary:?}"
    );
    let resumed = retrs[2].0["bytes"].as_u64().unwrap();
    assert!(
        resumed > 0 && resumed < size as u64,
        "the resumed RETR sends only what the client lacked: {resumed} of {size}"
    );
    drop(lab);
}

/// `ferry copy` tunes only with `--tune`, and then learns in the same path cache as gcp, which
/// the next gcp copy reads.
#[test]
fn ferry_copy_tunes_only_when_asked_and_gcp_reads_what_it_learnt() {
    let sandbox = Sandbox::new();
    let local = sandbox.local_dir("local");
    let server = ServerUnderTest::start_ferry_with(&sandbox.served_dir("root"), &[]);
    let cache = local.join("cache");
    let cache_file = cache.join("ferry/gcp-paths.json");
    let bytes = random_bytes(66 * MIB, 93);
    write_file(&server.path_of("big.bin"), &bytes);
    let url = server.url_for("big.bin");

    let plain = local.join("plain.bin");
    let out = run_ferry_with_cache(&["copy", &url, &plain.display().to_string()], &cache);
    out.assert_bytes(&bytes, &plain);
    assert!(
        !cache_file.exists(),
        "ferry copy without --tune kept something in {}",
        cache_file.display()
    );

    let tuned = local.join("tuned.bin");
    let out = run_ferry_with_cache(
        &["copy", "--tune", "-v", &url, &tuned.display().to_string()],
        &cache,
    );
    out.assert_bytes(&bytes, &tuned);
    for said in [
        "ferry copy: path ftp://127.0.0.1:",
        "nothing in the cache",
        "streams: 4 for files of 16 MiB and more (first copy on this path",
        "with 4 streams for large files",
    ] {
        if !out.stderr.contains(said) {
            out.fail(&format!("ferry copy --tune -v should say {said:?}"));
        }
    }
    let kept: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cache_file).expect("the path cache")).unwrap();
    let key = format!("ftp://127.0.0.1:{} -> this host (", server.port());
    let entry = kept["paths"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| k.starts_with(&key))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no {key}...) in {kept}"));
    assert_eq!(entry["runs"], 1, "{entry}");

    let by_gcp = local.join("gcp.bin");
    let out = run_ferry_with_cache(
        &["cp", "--explain", &url, &by_gcp.display().to_string()],
        &cache,
    );
    out.assert_bytes(&bytes, &by_gcp);
    expect_said(&out, "; 1 measured copies in the cache");
    expect_said(&out, "trying fewer");
}
