//! Watching and reloading a running `ferry serve`: Prometheus metrics that count a scripted
//! session exactly (and parse with the Prometheus client's own parser), `/healthz`, and SIGHUP
//! reloads of the grid-mapfile and CRLs under a transfer that keeps going.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const FERRY: &str = env!("CARGO_BIN_EXE_ferry");

/// A `ferry serve` child with its control and metrics addresses; its log goes to a file.
struct Served {
    child: Child,
    control: SocketAddr,
    metrics: SocketAddr,
    log: PathBuf,
}

impl Served {
    fn start(dir: &Path, args: &[&str]) -> Served {
        let log = dir.join("server.log");
        let mut child = Command::new(FERRY)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--metrics",
                "127.0.0.1:0",
                // Sessions work as whoever runs the test (root in CI), which root must be told.
                "--allow-root-sessions",
                "--anonymous-user",
                &me(),
            ])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let control = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("no address in {line:?}: {}", read(&log)))
            .parse()
            .unwrap();
        line.clear();
        out.read_line(&mut line).unwrap();
        let metrics = line
            .trim()
            .strip_prefix("metrics on http://")
            .and_then(|s| s.strip_suffix("/metrics"))
            .unwrap_or_else(|| panic!("no metrics address in {line:?}"))
            .parse()
            .unwrap();
        Served {
            child,
            control,
            metrics,
            log,
        }
    }

    fn log(&self) -> String {
        read(&self.log)
    }

    /// GET `path` from the metrics endpoint: (status code, body).
    fn get(&self, path: &str) -> (u16, String) {
        let mut s = TcpStream::connect(self.metrics).unwrap();
        write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
        let code = head.split(' ').nth(1).unwrap().parse().unwrap();
        (code, body.to_string())
    }

    /// The scrape, as sample (name with labels, as written) → value.
    fn scrape(&self) -> HashMap<String, f64> {
        let (code, body) = self.get("/metrics");
        assert_eq!(code, 200, "{body}");
        assert_eq!(body.lines().last(), Some("# EOF"), "{body}");
        body.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| {
                let (k, v) = l.rsplit_once(' ').unwrap();
                (k.to_string(), v.parse().unwrap())
            })
            .collect()
    }

    fn hup(&self) {
        let ok = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }

    /// Waits until the sample `key` reaches `value` (after a reload, say).
    fn wait_for(&self, key: &str, value: f64) {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let got = self.scrape().get(key).copied();
            if got == Some(value) {
                return;
            }
            assert!(
                Instant::now() < end,
                "{key} is {got:?}, not {value}; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read(p: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned()
}

fn ferry(args: &[&str], env: &[(&str, &Path)]) -> (Option<i32>, String) {
    let out = Command::new(FERRY)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v.as_os_str())))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

fn value(m: &HashMap<String, f64>, key: &str) -> f64 {
    m.get(key)
        .copied()
        .unwrap_or_else(|| panic!("{key} not in the scrape: {m:#?}"))
}

/// Checks the exposition with the Prometheus Python client's parser, the reference parser
/// besides promtool; CI installs it (python3-prometheus-client). Returns the families it read.
fn prometheus_parse(text: &str) -> Option<Vec<String>> {
    // The strict OpenMetrics parser (what the endpoint's content type promises): it refuses a
    // missing `# EOF`, untyped samples and counters without `_total`.
    let script =
        "import sys\nfrom prometheus_client.openmetrics.parser import text_string_to_metric_families as p\n\
                  for f in p(sys.stdin.read()):\n    print(f.name, f.type, len(f.samples))\n";
    // Debian's interpreter, which python3-prometheus-client installs into (a pyenv one on PATH
    // would not see it).
    let python = if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let mut child = Command::new(python)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("No module named 'prometheus_client'") {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install python3-prometheus-client"
        );
        eprintln!(
            "skipping the Prometheus parser check: apt-get install python3-prometheus-client"
        );
        return None;
    }
    assert!(
        out.status.success(),
        "the Prometheus parser refused it: {err}\n{text}"
    );
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect(),
    )
}

/// One FTP command on a raw control connection; returns the final reply.
fn command(ctl: &mut BufReader<TcpStream>, line: &str) -> String {
    if !line.is_empty() {
        write!(ctl.get_mut(), "{line}\r\n").unwrap();
    }
    loop {
        let mut l = String::new();
        ctl.read_line(&mut l).unwrap();
        let b = l.as_bytes();
        if b.len() >= 4 && b[3] == b' ' && b[..3].iter().all(u8::is_ascii_digit) {
            return l;
        }
        assert!(!l.is_empty(), "the server closed the control connection");
    }
}

#[test]
fn metrics_count_a_scripted_session_exactly_and_parse_as_prometheus() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    std::fs::write(dir.path().join("up.bin"), &data).unwrap();
    std::fs::write(root.join("small.txt"), b"0123456789abcdef").unwrap();
    let passwd = dir.path().join("passwd");
    let (code, text) = {
        let mut c = Command::new(FERRY)
            .args(["passwd", passwd.to_str().unwrap(), "alice", "--stdin"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(b"pw-alice\n").unwrap();
        let o = c.wait_with_output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(0), "{text}");
    let srv = Served::start(
        dir.path(),
        &[
            "--root",
            root.to_str().unwrap(),
            "--anonymous",
            "--password-file",
            passwd.to_str().unwrap(),
        ],
    );
    let before = srv.scrape();
    assert_eq!(
        value(
            &before,
            "ferry_transfers_total{direction=\"receive\",result=\"ok\"}"
        ),
        0.0
    );
    assert!(value(&before, "process_resident_memory_bytes") > 0.0);
    assert!(value(&before, "process_open_fds") >= 3.0);
    let (code, body) = srv.get("/healthz");
    assert_eq!(code, 200, "{body}");
    let h: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(h["status"], "ok");
    assert_eq!(h["transfers_running"], 0);

    // The script: a 4-stream put and get as alice, a wrong password, an anonymous listing.
    let base = format!("ftp://alice:pw-alice@{}", srv.control);
    let up = dir.path().join("up.bin");
    let (code, text) = ferry(
        &[
            "copy",
            "-p",
            "4",
            up.to_str().unwrap(),
            &format!("{base}/up.bin"),
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{text}");
    let back = dir.path().join("back.bin");
    let (code, text) = ferry(
        &[
            "copy",
            "-p",
            "4",
            &format!("{base}/up.bin"),
            back.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(
        std::fs::read(&back).unwrap() == data,
        "the bytes came back changed"
    );
    let (code, _) = ferry(&["ls", &format!("ftp://alice:nope@{}/", srv.control)], &[]);
    assert_ne!(code, Some(0));
    let (code, text) = ferry(&["ls", &format!("ftp://{}/", srv.control)], &[]);
    assert_eq!(code, Some(0), "{text}");

    // By hand: a restarted RETR (REST 10) and a RETR whose PORT names a closed port.
    let mut ctl = BufReader::new(TcpStream::connect(srv.control).unwrap());
    assert!(command(&mut ctl, "").starts_with("220"));
    assert!(command(&mut ctl, "USER anonymous").starts_with("331"));
    assert!(command(&mut ctl, "PASS x@y").starts_with("230"));
    assert!(command(&mut ctl, "TYPE I").starts_with("200"));
    let pasv = command(&mut ctl, "PASV");
    let nums: Vec<u16> = pasv[pasv.find('(').unwrap() + 1..pasv.find(')').unwrap()]
        .split(',')
        .map(|n| n.trim().parse().unwrap())
        .collect();
    let port = nums[4] * 256 + nums[5];
    let mut data_conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    assert!(command(&mut ctl, "REST 10").starts_with("350"));
    assert!(command(&mut ctl, "RETR small.txt").starts_with("150"));
    let mut got = Vec::new();
    data_conn.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"abcdef");
    assert!(command(&mut ctl, "").starts_with("226"));
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let p = closed.local_addr().unwrap().port();
    drop(closed);
    let port_cmd = format!("PORT 127,0,0,1,{},{}", p / 256, p % 256);
    assert!(command(&mut ctl, &port_cmd).starts_with("200"));
    let r = command(&mut ctl, "RETR small.txt");
    let r = if r.starts_with("150") {
        command(&mut ctl, "")
    } else {
        r
    };
    assert!(r.starts_with("425"), "{r}");
    let (_, during) = srv.get("/healthz");
    assert!(during.contains("\"sessions\":1"), "{during}");
    assert!(command(&mut ctl, "QUIT").starts_with("221"));
    drop(ctl);

    let n = data.len() as f64;
    // The session's end is counted when its task ends, a moment after QUIT.
    srv.wait_for("ferry_sessions{auth=\"anonymous\"}", 0.0);
    srv.wait_for("ferry_control_connections", 0.0);
    let m = srv.scrape();
    let expect = [
        ("ferry_logins_total{auth=\"password\"}", 2.0),
        ("ferry_logins_total{auth=\"anonymous\"}", 2.0),
        ("ferry_login_failures_total{auth=\"password\"}", 1.0),
        ("ferry_sessions{auth=\"password\"}", 0.0),
        ("ferry_control_connections", 0.0),
        (
            "ferry_transfers_total{direction=\"receive\",result=\"ok\"}",
            1.0,
        ),
        (
            "ferry_transfers_total{direction=\"send\",result=\"ok\"}",
            2.0,
        ),
        (
            "ferry_transfers_total{direction=\"send\",result=\"failed\"}",
            1.0,
        ),
        ("ferry_transfer_bytes_total{direction=\"receive\"}", n),
        ("ferry_transfer_bytes_total{direction=\"send\"}", n + 6.0),
        ("ferry_transfer_restarts_total", 1.0),
        ("ferry_data_channel_errors_total{kind=\"connect\"}", 1.0),
        ("ferry_transfers_running", 0.0),
        ("ferry_transfer_streams_count", 3.0),
        (
            "ferry_transfer_throughput_bytes_per_second_count{direction=\"receive\"}",
            1.0,
        ),
        (
            "ferry_transfer_throughput_bytes_per_second_count{direction=\"send\"}",
            1.0,
        ),
    ];
    for (key, want) in expect {
        assert_eq!(value(&m, key), want, "{key}; log:\n{}", srv.log());
    }
    // Listings (the client's stat and ls) are counted apart from file transfers.
    assert!(value(&m, "ferry_listings_total{result=\"ok\"}") >= 1.0);
    assert!(value(&m, "ferry_transfer_streams_sum") >= 4.0 + 4.0 + 1.0 - 1.0);

    let (_, text) = srv.get("/metrics");
    if let Some(families) = prometheus_parse(&text) {
        for f in [
            "ferry_transfers counter",
            "ferry_transfer_throughput_bytes_per_second histogram",
            "ferry_sessions gauge",
            "process_cpu_seconds counter",
        ] {
            assert!(
                families.iter().any(|l| l.starts_with(f)),
                "{f} not parsed: {families:#?}"
            );
        }
    }
}

/// Writes a CRL for the CA in `ca_dir` (`ferry ca`'s layout) into its trusted directory,
/// revoking `revoked` (a PEM certificate), with `openssl ca -gencrl`.
fn publish_crl(ca_dir: &Path, revoked: &Path) {
    let work = ca_dir.join("crl-db");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("index.txt"), "").unwrap();
    std::fs::write(work.join("crlnumber"), "01\n").unwrap();
    let conf = format!(
        "[ca]\ndefault_ca = t\n[t]\ndatabase = {0}/index.txt\ncrlnumber = {0}/crlnumber\n\
         certificate = {1}/ca/cacert.pem\nprivate_key = {1}/ca/cakey.pem\ndefault_md = sha256\n\
         default_crl_days = 1\n",
        work.display(),
        ca_dir.display()
    );
    let cnf = work.join("ca.cnf");
    std::fs::write(&cnf, conf).unwrap();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let cnf = cnf.to_str().unwrap();
    openssl(&["ca", "-config", cnf, "-revoke", revoked.to_str().unwrap()]);
    let ca_cert = ca_dir.join("ca/cacert.pem");
    let hash = openssl(&[
        "x509",
        "-noout",
        "-subject_hash",
        "-in",
        ca_cert.to_str().unwrap(),
    ]);
    let crl = ca_dir.join(format!("certificates/{hash}.r0"));
    openssl(&[
        "ca",
        "-config",
        cnf,
        "-gencrl",
        "-out",
        crl.to_str().unwrap(),
    ]);
}

#[test]
fn sighup_reloads_the_gridmap_and_crls_without_dropping_a_transfer() {
    let Some(guc) = ["/usr/bin/globus-url-copy", "/usr/local/bin/globus-url-copy"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install globus-url-copy"
        );
        eprintln!(
            "skipping: globus-url-copy not installed (apt-get install globus-gass-copy-progs)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let me = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout).unwrap();
    let me = me.trim();
    let ca = d.join("ca");
    let (code, text) = ferry(
        &[
            "ca",
            ca.to_str().unwrap(),
            "--host",
            "localhost",
            "--user",
            &format!("Alice:{me}"),
            "--user",
            &format!("Bob:{me}"),
            "--days",
            "2",
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{text}");
    let certs = ca.join("certificates");
    let full_map = read(&ca.join("grid-mapfile"));
    let gridmap = d.join("grid-mapfile");
    let alice_only: String = full_map
        .lines()
        .filter(|l| l.contains("CN=Alice"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&gridmap, &alice_only).unwrap();
    let proxy = |who: &str| {
        let user = ca.join("users").join(who);
        let out = d.join(format!("{who}.proxy"));
        let (code, text) = ferry(
            &[
                "proxy",
                "init",
                "--cert",
                user.join("usercert.pem").to_str().unwrap(),
                "--key",
                user.join("userkey.pem").to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
            &[("X509_CERT_DIR", &certs)],
        );
        assert_eq!(code, Some(0), "{text}");
        out
    };
    let (alice, bob) = (proxy("Alice"), proxy("Bob"));
    let root = d.join("root");
    std::fs::create_dir(&root).unwrap();
    let host = ca.join("hosts/localhost");
    let config = d.join("ferry.toml");
    let good_config = format!(
        "gsi = true\nroot = {:?}\nhost-cert = {:?}\nhost-key = {:?}\ncert-dir = {:?}\n\
         gridmap = {:?}\nrun-as-user = false\n",
        root,
        host.join("hostcert.pem"),
        host.join("hostkey.pem"),
        certs,
        gridmap
    );
    std::fs::write(&config, &good_config).unwrap();
    let srv = Served::start(d, &["--config", config.to_str().unwrap()]);
    let url = format!("gsiftp://localhost:{}/", srv.control.port());
    let ls = |proxy: &Path| {
        ferry(
            &["ls", &url],
            &[("X509_USER_PROXY", proxy), ("X509_CERT_DIR", &certs)],
        )
    };
    let (code, text) = ls(&alice);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = ls(&bob);
    assert_ne!(code, Some(0), "Bob is not in the grid-mapfile yet: {text}");
    assert!(text.contains("Could not map"), "{text}");

    // A transfer that runs across the reloads: globus-url-copy stores what we feed its stdin.
    let chunk: Vec<u8> = (0..1_000_000u32).map(|i| (i % 253) as u8).collect();
    let mut upload = Command::new(guc)
        .args(["file:///dev/stdin", &format!("{url}piped.bin")])
        .env("X509_USER_PROXY", &alice)
        .env("X509_CERT_DIR", &certs)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut feed = upload.stdin.take().unwrap();
    feed.write_all(&chunk).unwrap();
    srv.wait_for("ferry_transfers_running", 1.0);

    // SIGHUP 1: Bob joins the grid-mapfile and a CRL revokes Alice.
    std::fs::write(&gridmap, &full_map).unwrap();
    publish_crl(&ca, &ca.join("users/Alice/usercert.pem"));
    srv.hup();
    srv.wait_for("ferry_config_reloads_total{result=\"ok\"}", 1.0);
    let (code, text) = ls(&bob);
    assert_eq!(code, Some(0), "Bob is mapped now: {text}\n{}", srv.log());
    let (code, text) = ls(&alice);
    assert_ne!(code, Some(0), "Alice is revoked now: {text}");
    assert!(text.contains("revoked"), "{text}");
    srv.wait_for("ferry_gsi_failures_total{reason=\"revoked\"}", 1.0);

    // SIGHUP 2: a configuration file that does not parse is refused; the last one stays.
    std::fs::write(&config, "gsi = maybe\n").unwrap();
    srv.hup();
    srv.wait_for("ferry_config_reloads_total{result=\"refused\"}", 1.0);
    assert!(
        srv.log().contains("configuration reload refused"),
        "{}",
        srv.log()
    );
    let (code, text) = ls(&bob);
    assert_eq!(code, Some(0), "the running configuration stays: {text}");

    // SIGHUP 3: a file that parses but names a missing grid-mapfile is refused too.
    std::fs::write(
        &config,
        good_config.replace(gridmap.to_str().unwrap(), "/nonexistent/grid-mapfile"),
    )
    .unwrap();
    srv.hup();
    srv.wait_for("ferry_config_reloads_total{result=\"refused\"}", 2.0);
    let (code, text) = ls(&bob);
    assert_eq!(code, Some(0), "{text}");

    // Alice's transfer, authorized before all this, finishes with every byte.
    feed.write_all(&chunk).unwrap();
    drop(feed);
    let out = upload.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the transfer under the reloads failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored = std::fs::read(root.join("piped.bin")).unwrap();
    assert!(
        stored.len() == 2 * chunk.len()
            && stored[..chunk.len()] == chunk[..]
            && stored[chunk.len()..] == chunk[..]
    );
    let m = srv.scrape();
    assert_eq!(
        value(
            &m,
            "ferry_transfers_total{direction=\"receive\",result=\"ok\"}"
        ),
        1.0
    );
    assert_eq!(
        value(&m, "ferry_gsi_failures_total{reason=\"not_authorized\"}"),
        1.0
    );
}

/// The account running the test.
fn me() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
