//! A site for the HTTPS door's tests: a throw-away CA (`ferry ca`) with a host credential for
//! `localhost` and a user `alice` mapped to `nobody`, her proxy, a password user `bob`, and
//! `ferry serve --gsi --https-listen` on loopback serving a root in the test's sandbox; killed
//! when dropped. Clients (curl, davix, gfal2, litmus) run with a timeout through
//! [`run_tool`]; raw requests go over TLS with the openssl crate ([`HttpsSite::raw`]).
//!
//! Tools are found with [`require_tool`]: a test without its tool skips with a message, except
//! where `FERRY_REQUIRE_FTPD` is set (CI runs the suite as root after `scripts/install-deps`),
//! where a missing tool fails it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use openssl::ssl::{SslConnector, SslMethod, SslStream};

use crate::common::files::{make_dir, write_file};
use crate::common::find_executable;
use crate::common::process::{Finished, Running};
use crate::common::sandbox::Sandbox;

/// The password user, and its password.
pub const PASSWORD_USER: &str = "bob";
/// [`PASSWORD_USER`]'s password.
pub const PASSWORD: &str = "door-test-pw";

/// How long one client run may take.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// CI's signal that every tool is installed (it runs the suite as root after install-deps).
const REQUIRE_ENV: &str = "FERRY_REQUIRE_FTPD";

/// The executable `name`, or `None` after printing why the test skips (`package` installs it);
/// with `FERRY_REQUIRE_FTPD` set a missing tool is a failure.
pub fn require_tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = find_executable(name, &["/usr/bin", "/usr/local/bin"]);
    if found.is_none() {
        skip_or_fail(&format!(
            "{name} is not installed (apt-get install {package}, or bash scripts/install-deps as root)"
        ));
    }
    found
}

/// Prints that the test skips for `reason`, or fails when CI says everything is installed.
#[track_caller]
pub fn skip_or_fail(reason: &str) {
    assert!(
        std::env::var_os(REQUIRE_ENV).is_none(),
        "{reason}; {REQUIRE_ENV} is set, so this is a failure"
    );
    eprintln!("skipping: {reason}");
}

/// Whether this process runs as root (from /proc: the harness has no libc binding).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().nth(1).map(str::to_owned))
        })
        .is_some_and(|uid| uid == "0")
}

/// The uid of the local account `name`, from /etc/passwd.
pub fn uid_of(name: &str) -> u32 {
    let passwd = std::fs::read_to_string("/etc/passwd").expect("reading /etc/passwd");
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 2 && f[0] == name)
        .and_then(|f| f[2].parse().ok())
        .unwrap_or_else(|| panic!("no account {name} in /etc/passwd"))
}

/// Runs `program ARGS` with `env` set, to completion or [`TOOL_TIMEOUT`], in `cwd`.
pub fn run_tool(program: &Path, args: &[&str], env: &[(&str, &str)], cwd: &Path) -> ToolRun {
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(cwd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut shown = vec![program.display().to_string()];
    shown.extend(args.iter().map(|a| (*a).to_owned()));
    let what = program.display().to_string();
    ToolRun(Running::spawn(cmd, shown, None, &what).finish(TOOL_TIMEOUT))
}

/// A finished client run.
pub struct ToolRun(pub Finished);

impl ToolRun {
    /// Whether it exited with status 0.
    pub fn ok(&self) -> bool {
        self.0.status.is_some_and(|s| s.success())
    }

    /// Standard output.
    pub fn stdout(&self) -> &str {
        &self.0.stdout
    }

    /// Standard error.
    pub fn stderr(&self) -> &str {
        &self.0.stderr
    }

    /// The command line, how it ended and what it printed, for messages.
    pub fn describe(&self) -> String {
        format!(
            "{}\n  ended: {:?} after {:.1?}\n  stdout: {}\n  stderr: {}",
            self.0.args.join(" "),
            self.0.status,
            self.0.elapsed,
            self.0.stdout.trim_end(),
            self.0.stderr.trim_end()
        )
    }

    /// Panics, showing the run, unless it exited with status 0.
    #[track_caller]
    pub fn assert_ok(&self) -> &Self {
        assert!(self.ok(), "expected success: {}", self.describe());
        self
    }
}

/// Who a request logs in as.
#[derive(Debug, Clone, Copy)]
pub enum Login<'a> {
    /// alice's X.509 proxy (mapped to `nobody` by the grid-mapfile).
    Proxy,
    /// HTTP Basic with this user and password.
    Password(&'a str, &'a str),
    /// No credentials at all.
    Anonymous,
    /// `Authorization: Bearer` with this token.
    Bearer(&'a str),
}

/// How the server is started.
#[derive(Debug, Clone, Default)]
pub struct SiteOptions {
    /// `--anonymous`: logins without credentials, read-only.
    pub anonymous: bool,
    /// `[https] header-timeout` (seconds), written to a configuration file.
    pub header_timeout: Option<u64>,
    /// `--http-listen`: the clear-text listener too.
    pub clear: bool,
    /// `--metrics` on a loopback port ([`HttpsSite::metrics`]).
    pub metrics: bool,
    /// More of the configuration file (`[[tokens.issuer]]` tables, say).
    pub config: String,
    /// More of the server's environment.
    pub env: Vec<(String, String)>,
    /// The host's own subject in the grid-mapfile (as `nobody`): the door's GridFTP client
    /// logs in to the site's own GridFTP door, and to a Globus server on the same CA, with the
    /// host credential.
    pub host_in_gridmap: bool,
}

/// A CA, credentials and `ferry serve` with its HTTPS door; the server is killed when dropped.
pub struct HttpsSite {
    // Dropped first: the server dies before its directory goes.
    server: Running,
    port: u16,
    gridftp_port: u16,
    dir: Sandbox,
}

impl HttpsSite {
    /// A site serving GSI and password logins.
    pub fn start() -> HttpsSite {
        Self::start_with(SiteOptions::default())
    }

    /// A site started with `options`.
    pub fn start_with(options: SiteOptions) -> HttpsSite {
        let dir = Sandbox::new();
        let ca = dir.path().join("ca");
        ferry_ok(&[
            "ca",
            path_str(&ca),
            "--host",
            "localhost",
            "--user",
            "alice:nobody",
            "--days",
            "2",
        ]);
        let proxy = dir.path().join("x509up_alice");
        let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
            .env("X509_CERT_DIR", ca.join("certificates"))
            .args(["proxy", "init", "--cert"])
            .arg(ca.join("users/alice/usercert.pem"))
            .arg("--key")
            .arg(ca.join("users/alice/userkey.pem"))
            .arg("--out")
            .arg(&proxy)
            .output()
            .expect("running ferry proxy init");
        assert!(
            out.status.success(),
            "ferry proxy init: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if options.host_in_gridmap {
            let host = subject(&ca.join("hosts/localhost/hostcert.pem"));
            let gridmap = ca.join("grid-mapfile");
            let mut text = std::fs::read_to_string(&gridmap).expect("reading the grid-mapfile");
            text.push_str(&format!("\"{host}\" nobody\n"));
            std::fs::write(&gridmap, text).expect("writing the grid-mapfile");
        }
        let passwords = dir.path().join("passwd");
        // Run as root, password users work as nobody; otherwise as whoever runs the test.
        let account = if is_root() {
            "nobody".to_owned()
        } else {
            whoami()
        };
        let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(["passwd", "--account", &account, "--stdin"])
            .arg(&passwords)
            .arg(PASSWORD_USER)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                if let Some(mut stdin) = child.stdin.take() {
                    stdin.write_all(format!("{PASSWORD}\n").as_bytes())?;
                }
                child.wait_with_output()
            })
            .expect("running ferry passwd");
        assert!(
            out.status.success(),
            "ferry passwd: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let root = dir.served_dir("root");
        let host = ca.join("hosts/localhost");
        let mut args: Vec<String> = [
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--https-listen",
            "127.0.0.1:0",
            "--root",
            path_str(&root),
            "--gsi",
            "--host-cert",
            path_str(&host.join("hostcert.pem")),
            "--host-key",
            path_str(&host.join("hostkey.pem")),
            "--cert-dir",
            path_str(&ca.join("certificates")),
            "--gridmap",
            path_str(&ca.join("grid-mapfile")),
            "--password-file",
            path_str(&passwords),
            "--log-transfer",
            path_str(&dir.path().join("transfers.log")),
        ]
        .map(str::to_owned)
        .to_vec();
        if options.anonymous {
            args.push("--anonymous".into());
        }
        if options.clear {
            args.push("--http-listen".into());
            args.push("127.0.0.1:0".into());
        }
        if options.metrics {
            args.push("--metrics".into());
            args.push("127.0.0.1:0".into());
        }
        let mut conf_text = options.config.clone();
        if let Some(secs) = options.header_timeout {
            conf_text.push_str(&format!("\n[https]\nheader-timeout = {secs}\n"));
        }
        if !conf_text.is_empty() {
            let conf = dir.path().join("ferry.toml");
            std::fs::write(&conf, conf_text).expect("writing the configuration file");
            args.push("--config".into());
            args.push(path_str(&conf).to_owned());
        }
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferry"));
        cmd.args(&args)
            .env("RUST_LOG", "info,ferry_door=debug,ferry_site=debug")
            .envs(options.env.iter().map(|(k, v)| (k, v)));
        let (server, port) = wait_for_https_port(Running::spawn(cmd, args, None, "ferry serve"));
        let gridftp_port = server
            .stdout_so_far()
            .lines()
            .find_map(|l| l.strip_prefix("listening on 127.0.0.1:"))
            .and_then(|p| p.trim().parse().ok())
            .expect("ferry serve announces its GridFTP door first");
        HttpsSite {
            server,
            port,
            gridftp_port,
            dir,
        }
    }

    /// The GridFTP door's port on 127.0.0.1.
    pub fn gridftp_port(&self) -> u16 {
        self.gridftp_port
    }

    /// The test's directory (the root, the CA, the proxy and the transfer log are in it).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The served root.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// Local path of `rel` beneath the root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel.trim_start_matches('/'))
    }

    /// The CA's certificate (what curl trusts).
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.path().join("ca/ca/cacert.pem")
    }

    /// The trusted-CA directory (X509_CERT_DIR).
    pub fn cert_dir(&self) -> PathBuf {
        self.dir.path().join("ca/certificates")
    }

    /// alice's proxy.
    pub fn proxy(&self) -> PathBuf {
        self.dir.path().join("x509up_alice")
    }

    /// The transfer log's JSON lines.
    pub fn transfer_log(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.path().join("transfers.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("transfer log line {l:?} is not JSON: {e}"))
            })
            .collect()
    }

    /// The HTTPS door's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The clear-text HTTP port (`SiteOptions::clear`).
    pub fn clear_port(&self) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = self.server.stdout_so_far();
            if let Some(port) = out
                .lines()
                .find_map(|l| l.strip_prefix("http on http://"))
                .and_then(|rest| rest.trim_end_matches('/').rsplit(':').next())
                .and_then(|port| port.parse().ok())
            {
                return port;
            }
            assert!(
                Instant::now() < deadline,
                "no clear-text HTTP door announced: {out}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's Prometheus text (`SiteOptions::metrics`).
    pub fn metrics(&self) -> String {
        let out = self.server.stdout_so_far();
        let addr = out
            .lines()
            .find_map(|l| l.strip_prefix("metrics on http://"))
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_else(|| panic!("no metrics address announced: {out}"));
        let mut tcp = TcpStream::connect(addr).expect("connecting to the metrics endpoint");
        tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .expect("asking for metrics");
        let mut text = String::new();
        tcp.read_to_string(&mut text).expect("reading metrics");
        text
    }

    /// A counter's value in [`HttpsSite::metrics`] (0 when absent).
    pub fn counter(&self, name: &str) -> u64 {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// `https://localhost:PORT` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    /// `davs://localhost:PORT` followed by `path` (gfal2's name for WebDAV over TLS).
    pub fn davs(&self, path: &str) -> String {
        format!("davs://localhost:{}{path}", self.port)
    }

    /// What the server has logged so far.
    pub fn server_log(&self) -> String {
        self.server.stderr_so_far()
    }

    /// Writes `bytes` beneath the root at `rel` (world-readable, for sessions run as nobody).
    pub fn put_local(&self, rel: &str, bytes: &[u8]) -> PathBuf {
        let path = self.path(rel);
        write_file(&path, bytes);
        path
    }

    /// Makes the collection `rel` beneath the root (world-writable).
    pub fn mkdir_local(&self, rel: &str) -> PathBuf {
        let path = self.path(rel);
        make_dir(&path);
        path
    }

    /// Names beneath the root (at any depth) that are upload temporaries (`.ferry-put-*`).
    pub fn temp_files(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut pending = vec![self.root()];
        while let Some(dir) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let path = e.path();
                if e.file_name().to_string_lossy().starts_with(".ferry-put-") {
                    found.push(path.clone());
                }
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    pending.push(path);
                }
            }
        }
        found
    }

    /// Waits up to 10 s for `check` to hold, returning whether it did.
    pub fn eventually(&self, mut check: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if check() {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs curl on `path` as `login` with `args` (method, headers, body options) and returns
    /// the final response. curl sends the path as it is (`--path-as-is`).
    pub fn curl(&self, curl: &Path, login: Login<'_>, args: &[&str], path: &str) -> CurlReply {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let heads = self.dir.path().join(format!("curl-{n}.head"));
        let body = self.dir.path().join(format!("curl-{n}.body"));
        let (ca, proxy) = (self.ca_cert(), self.proxy());
        let user = match login {
            Login::Password(u, p) => format!("{u}:{p}"),
            Login::Bearer(t) => format!("Authorization: Bearer {t}"),
            _ => String::new(),
        };
        let mut all = vec![
            "-sS",
            "--path-as-is",
            "--cacert",
            path_str(&ca),
            "-D",
            path_str(&heads),
            "-o",
            path_str(&body),
            "-w",
            "%{http_code}",
        ];
        match login {
            Login::Proxy => all.extend(["--cert", path_str(&proxy), "--key", path_str(&proxy)]),
            Login::Password(..) => all.extend(["-u", &user]),
            Login::Bearer(_) => all.extend(["-H", &user]),
            Login::Anonymous => {}
        }
        all.extend(args);
        let url = self.url(path);
        all.push(&url);
        let run = run_tool(curl, &all, &[], self.dir.path());
        let status = run.stdout().trim().parse().unwrap_or(0);
        let head_text = String::from_utf8_lossy(&std::fs::read(&heads).unwrap_or_default())
            .replace("\r\n", "\n");
        // The last header block is the final response's (after any 100 Continue).
        let last = head_text
            .split("\n\n")
            .filter(|b| !b.trim().is_empty())
            .last()
            .unwrap_or("")
            .to_owned();
        let reply = CurlReply {
            status,
            headers: last,
            body: std::fs::read(&body).unwrap_or_default(),
            run,
        };
        let _ = std::fs::remove_file(&heads);
        let _ = std::fs::remove_file(&body);
        reply
    }

    /// A TLS connection to the door offering only HTTP/1.1, verified against the CA.
    pub fn tls(&self) -> SslStream<TcpStream> {
        let mut builder = SslConnector::builder(SslMethod::tls_client()).expect("TLS client");
        builder.set_ca_file(self.ca_cert()).expect("loading the CA");
        builder
            .set_alpn_protos(b"\x08http/1.1")
            .expect("setting ALPN");
        let tcp = TcpStream::connect(("127.0.0.1", self.port)).expect("connecting to the door");
        tcp.set_read_timeout(Some(Duration::from_secs(15)))
            .expect("read timeout");
        builder
            .build()
            .connect("localhost", tcp)
            .expect("TLS handshake with the door")
    }

    /// Sends `request` as it is on a fresh HTTP/1.1 connection and reads one response.
    /// Write errors are ignored: a server may answer and close before it has read all.
    pub fn raw(&self, request: &[u8]) -> RawReply {
        let mut tls = self.tls();
        let _ = tls.write_all(request).and_then(|()| tls.flush());
        read_response(&mut tls)
    }

    /// `Authorization` header value for the password user.
    pub fn basic_auth(&self) -> String {
        use base64::Engine as _;
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{PASSWORD_USER}:{PASSWORD}"));
        format!("Basic {encoded}")
    }
}

/// A response curl received.
pub struct CurlReply {
    /// The status code (0 when there was no response).
    pub status: u16,
    /// The final response's header block, lines separated by `\n`.
    pub headers: String,
    /// The body.
    pub body: Vec<u8>,
    /// The curl run.
    pub run: ToolRun,
}

impl CurlReply {
    /// The value of header `name` (case-insensitive), if the response has it.
    pub fn header(&self, name: &str) -> Option<String> {
        header_value(&self.headers, name)
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Panics, showing the exchange, unless the status is `want`.
    #[track_caller]
    pub fn expect(&self, want: u16) -> &Self {
        self.expect_one_of(&[want])
    }

    /// Panics, showing the exchange, unless the status is a 4xx.
    #[track_caller]
    pub fn expect_client_error(&self) -> &Self {
        let all: Vec<u16> = (400..500).collect();
        self.expect_one_of(&all)
    }

    /// Panics, showing the exchange, unless the status is one of `allowed`.
    #[track_caller]
    pub fn expect_one_of(&self, allowed: &[u16]) -> &Self {
        assert!(
            allowed.contains(&self.status),
            "expected {allowed:?}, got {}\n  headers:\n{}\n  body: {}\n  curl: {}",
            self.status,
            self.headers,
            self.text().chars().take(2000).collect::<String>(),
            self.run.describe()
        );
        self
    }
}

/// A response read off a raw connection.
#[derive(Debug)]
pub struct RawReply {
    /// The status (0 when none came: the connection closed or timed out first).
    pub status: u16,
    /// The status line and headers.
    pub head: String,
    /// The body (as much as arrived).
    pub body: Vec<u8>,
}

/// Reads one response: the head, then `Content-Length` bytes (or until the connection ends).
fn read_response(tls: &mut SslStream<TcpStream>) -> RawReply {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break Some(i + 4);
        }
        match tls.read(&mut chunk) {
            Ok(0) | Err(_) => break None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let Some(head_end) = head_end else {
        return RawReply {
            status: 0,
            head: String::from_utf8_lossy(&buf).into_owned(),
            body: Vec::new(),
        };
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    let want = header_value(&head.replace("\r\n", "\n"), "content-length")
        .and_then(|v| v.parse::<usize>().ok());
    while want.is_none_or(|w| body.len() < w) {
        match tls.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    RawReply { status, head, body }
}

fn header_value(block: &str, name: &str) -> Option<String> {
    block.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
    })
}

/// Waits for `ferry serve` to print its HTTPS address; returns it with the process.
/// A third-party COPY's answer: its last line (`success: …` or `failure: …`) and the bytes its
/// last performance marker counted.
pub fn tpc_outcome(text: &str) -> (String, Option<u64>) {
    let last = text
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or_default()
        .to_owned();
    let bytes = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("Stripe Bytes Transferred: "))
        .and_then(|n| n.trim().parse().ok());
    (last, bytes)
}

/// The subject of the certificate in `pem`, as grid-mapfiles write it (`/O=…/CN=…`).
pub fn subject(pem: &Path) -> String {
    let cert = openssl::x509::X509::from_pem(&std::fs::read(pem).expect("reading a certificate"))
        .expect("a PEM certificate");
    cert.subject_name()
        .entries()
        .map(|e| {
            format!(
                "/{}={}",
                e.object().nid().short_name().unwrap_or("?"),
                e.data().to_string().unwrap_or_default()
            )
        })
        .collect()
}

fn wait_for_https_port(mut server: Running) -> (Running, u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = server.stdout_so_far();
        let port = out
            .lines()
            .find_map(|l| l.strip_prefix("https on https://127.0.0.1:"))
            .and_then(|rest| rest.trim_end_matches('/').parse().ok());
        if let Some(port) = port {
            return (server, port);
        }
        if server.has_exited() || Instant::now() > deadline {
            panic!(
                "ferry serve did not announce its HTTPS door\n  stdout: {out}\n  stderr: {}",
                server.stderr_so_far()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ferry_ok(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(args)
        .output()
        .expect("running ferry");
    assert!(
        out.status.success(),
        "ferry {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn whoami() -> String {
    Command::new("id")
        .arg("-un")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// `path` as UTF-8 (the sandbox's paths are).
pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("test paths are UTF-8")
}
