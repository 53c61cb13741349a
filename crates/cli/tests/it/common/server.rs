//! The GridFTP server under test, run as a child process on loopback: ferry, or
//! globus-gridftp-server as the reference whose behaviour the suite is validated against.
//!
//! Past 400 lines on purpose: one harness that every test of this crate shares, so each test
//! reads as the protocol steps it checks.

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::find_executable;

/// Environment variable selecting the server: `ferry` (default) or `globus`.
pub const SERVER_ENV: &str = "FERRY_INTEROP_SERVER";

const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
const RESTART_TIMEOUT: Duration = Duration::from_secs(10);
const START_ATTEMPTS: usize = 5;

/// Which implementation answers the tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    /// `ferry serve`, the binary of this crate.
    Ferry,
    /// `globus-gridftp-server` in anonymous mode: the reference behaviour.
    Globus,
}

impl ServerKind {
    /// The kind named by `FERRY_INTEROP_SERVER`; panics on an unknown name.
    pub fn from_env() -> Self {
        let value = std::env::var(SERVER_ENV).unwrap_or_default();
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "ferry" => ServerKind::Ferry,
            "globus" => ServerKind::Globus,
            other => panic!("{SERVER_ENV}={other:?}: expected `ferry` or `globus`"),
        }
    }

    /// Why this kind cannot run on this machine, if it cannot.
    pub fn missing(self) -> Option<String> {
        match self {
            ServerKind::Ferry => None,
            ServerKind::Globus => globus_server_path().is_none().then(|| {
                "skipping: globus-gridftp-server not installed \
                 (apt-get install globus-gridftp-server-progs)"
                    .to_owned()
            }),
        }
    }
}

fn globus_server_path() -> Option<PathBuf> {
    find_executable("globus-gridftp-server", &["/usr/sbin", "/usr/local/sbin"])
}

/// A running server serving one root directory on 127.0.0.1; killed when dropped.
pub struct ServerUnderTest {
    kind: ServerKind,
    root: PathBuf,
    port: u16,
    process: Option<Child>,
    log: PathBuf,
    /// How `ferry serve` lets users in; for Globus (always anonymous), extra arguments.
    ferry_login: Vec<String>,
}

/// `ferry serve` login flags unless a test asks for passwords.
const FERRY_ANONYMOUS: [&str; 2] = ["--anonymous", "--anonymous-write"];

impl ServerUnderTest {
    /// Starts the server chosen by `FERRY_INTEROP_SERVER` on a free port, serving `root`.
    pub fn start(root: &Path) -> Self {
        Self::start_kind(ServerKind::from_env(), root)
    }

    /// Starts a server of `kind` on a free port, serving `root`.
    pub fn start_kind(kind: ServerKind, root: &Path) -> Self {
        let login = match kind {
            ServerKind::Ferry => FERRY_ANONYMOUS.map(String::from).to_vec(),
            ServerKind::Globus => Vec::new(),
        };
        Self::start_with_login(kind, root, login)
    }

    /// Starts `ferry serve` (anonymous, read-write) on a free port with `extra` arguments.
    pub fn start_ferry_with(root: &Path, extra: &[&str]) -> Self {
        let mut args = FERRY_ANONYMOUS.map(String::from).to_vec();
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        Self::start_with_login(ServerKind::Ferry, root, args)
    }

    /// Starts globus-gridftp-server (anonymous, read-write) on a free port with `extra`
    /// arguments.
    pub fn start_globus_with(root: &Path, extra: &[&str]) -> Self {
        let extra = extra.iter().map(|a| (*a).to_owned()).collect();
        Self::start_with_login(ServerKind::Globus, root, extra)
    }

    /// Starts `ferry serve` on a free port, serving `root` to the users in `password_file`
    /// (written by `ferry passwd`) and to no one else.
    pub fn start_ferry_with_password_file(root: &Path, password_file: &Path) -> Self {
        // Started as root, password users work as an account: the one anonymous Globus uses.
        let login = vec![
            "--password-file".to_owned(),
            password_file.display().to_string(),
            "--password-account".to_owned(),
            anonymous_user(),
        ];
        Self::start_with_login(ServerKind::Ferry, root, login)
    }

    fn start_with_login(kind: ServerKind, root: &Path, ferry_login: Vec<String>) -> Self {
        let root = root
            .canonicalize()
            .unwrap_or_else(|e| panic!("served root {}: {e}", root.display()));
        let log = log_path(&root);
        let mut errors = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let launched = match kind {
                ServerKind::Ferry => launch_ferry(&root, "127.0.0.1:0", &log, &ferry_login),
                ServerKind::Globus => launch_globus(&root, free_port(), &log, &ferry_login),
            };
            match launched {
                Ok((process, port)) => {
                    return ServerUnderTest {
                        kind,
                        root,
                        port,
                        process: Some(process),
                        log,
                        ferry_login,
                    };
                }
                Err(e) => errors.push(e),
            }
        }
        panic!(
            "could not start the {kind:?} server for {}:\n{}",
            root.display(),
            errors.join("\n")
        );
    }

    /// Which implementation this is.
    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// The control port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The served root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Local path of `rel` (relative to the root).
    pub fn path_of(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// `ftp://` URL naming `rel` (relative to the root) on this server.
    ///
    /// ferry confines paths to its root; Globus has no root, so its URLs carry the absolute path.
    pub fn url_for(&self, rel: &str) -> String {
        let rel = rel.trim_start_matches('/');
        match self.kind {
            ServerKind::Ferry => format!("ftp://127.0.0.1:{}/{rel}", self.port),
            ServerKind::Globus => {
                format!("ftp://127.0.0.1:{}{}/{rel}", self.port, self.root.display())
            }
        }
    }

    /// Like [`Self::url_for`], ending with `/` as directory URLs must.
    pub fn dir_url_for(&self, rel: &str) -> String {
        let url = self.url_for(rel);
        if url.ends_with('/') {
            url
        } else {
            url + "/"
        }
    }

    /// Kills the server and every process it started, at once (SIGKILL to its process group).
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            kill_group(&mut process);
        }
    }

    /// Kills the server if it still runs, then starts it again on the same port and root.
    pub fn restart_same_port(&mut self) {
        self.kill();
        let deadline = Instant::now() + RESTART_TIMEOUT;
        let listen = format!("127.0.0.1:{}", self.port);
        loop {
            let launched = match self.kind {
                ServerKind::Ferry => {
                    launch_ferry(&self.root, &listen, &self.log, &self.ferry_login)
                }
                ServerKind::Globus => {
                    launch_globus(&self.root, self.port, &self.log, &self.ferry_login)
                }
            };
            match launched {
                Ok((process, port)) => {
                    self.process = Some(process);
                    assert_eq!(port, self.port, "restarted server listens on another port");
                    return;
                }
                // The port can stay busy for a moment while the killed processes go away.
                Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
                Err(e) => panic!("could not restart the server on port {}: {e}", self.port),
            }
        }
    }

    /// The last `lines` lines of the server's output and log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }
}

impl Drop for ServerUnderTest {
    fn drop(&mut self) {
        self.kill();
        if self.kind == ServerKind::Ferry && !thread::panicking() {
            super::audit::audit_kept_checksums(&self.root);
        }
        if thread::panicking() {
            eprintln!(
                "--- {:?} server on port {} ({}), last lines of its log ---\n{}",
                self.kind,
                self.port,
                self.log.display(),
                self.log_tail(40)
            );
        }
    }
}

fn log_path(root: &Path) -> PathBuf {
    let name = root
        .file_name()
        .map_or_else(|| "root".into(), |n| n.to_string_lossy());
    root.with_file_name(format!("{name}.server.log"))
}

fn open_log(log: &Path) -> Result<fs::File, String> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("opening {}: {e}", log.display()))
}

/// Runs `ferry serve` and waits for its `listening on 127.0.0.1:PORT` line.
fn launch_ferry(
    root: &Path,
    listen: &str,
    log: &Path,
    login: &[String],
) -> Result<(Child, u16), String> {
    let mut log_file = open_log(log)?;
    let stderr = log_file.try_clone().map_err(|e| e.to_string())?;
    let mut process = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["serve", "--listen", listen, "--root"])
        .arg(root)
        .args(login)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("spawning ferry serve: {e}"))?;
    let stdout = process.stdout.take().ok_or("ferry stdout not captured")?;
    let (port_tx, port_rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = writeln!(log_file, "{line}");
            if let Some(port) = listening_port(&line) {
                let _ = port_tx.send(port);
            }
        }
    });
    match port_rx.recv_timeout(STARTUP_TIMEOUT) {
        Ok(port) => Ok((process, port)),
        Err(_) => {
            kill_group(&mut process);
            Err(format!(
                "`ferry serve --listen {listen}` did not print `listening on 127.0.0.1:PORT`; \
                 its output:\n{}",
                tail(log, 20)
            ))
        }
    }
}

fn listening_port(line: &str) -> Option<u16> {
    const NEEDLE: &str = "listening on 127.0.0.1:";
    let start = line.find(NEEDLE)? + NEEDLE.len();
    let digits: String = line[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Runs globus-gridftp-server in anonymous mode and waits for its 220 banner.
fn launch_globus(
    root: &Path,
    port: u16,
    log: &Path,
    extra: &[String],
) -> Result<(Child, u16), String> {
    let server = globus_server_path().ok_or("globus-gridftp-server not installed")?;
    // An empty configuration keeps /etc/gridftp.conf (port 2811 and more) from being read.
    let conf = log.with_file_name("gridftp-empty.conf");
    fs::write(&conf, b"").map_err(|e| format!("writing {}: {e}", conf.display()))?;
    let output = open_log(log)?;
    let output2 = output.try_clone().map_err(|e| e.to_string())?;
    let mut process = Command::new(server)
        .arg("-c")
        .arg(&conf)
        .args([
            "-aa",
            "-anonymous-user",
            &anonymous_user(),
            "-p",
            &port.to_string(),
        ])
        .args(["-no-chdir", "-log-level", "error,warn", "-l"])
        .arg(log)
        .args(extra)
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(output)
        .stderr(output2)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("spawning globus-gridftp-server: {e}"))?;
    match wait_for_banner(&mut process, port) {
        Ok(()) => Ok((process, port)),
        Err(e) => {
            kill_group(&mut process);
            Err(format!(
                "globus-gridftp-server on port {port}: {e}; log:\n{}",
                tail(log, 20)
            ))
        }
    }
}

/// Globus refuses to map anonymous users to root; as root the suite serves as `nobody`.
fn anonymous_user() -> String {
    let id = |flag: &str| {
        Command::new("id")
            .arg(flag)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    };
    if id("-u") == "0" {
        "nobody".to_owned()
    } else {
        id("-un")
    }
}

fn wait_for_banner(process: &mut Child, port: u16) -> Result<(), String> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    loop {
        if let Ok(Some(status)) = process.try_wait() {
            return Err(format!("exited ({status}) before accepting connections"));
        }
        if let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .map_err(|e| e.to_string())?;
            let mut banner = Vec::new();
            let mut byte = [0u8; 1];
            while !banner.ends_with(b"\n") && banner.len() < 1024 {
                match stream.read(&mut byte) {
                    Ok(1) => banner.push(byte[0]),
                    _ => break,
                }
            }
            let _ = stream.write_all(b"QUIT\r\n");
            if !banner.starts_with(b"220") {
                return Err(format!(
                    "answered {:?} instead of a 220 banner",
                    String::from_utf8_lossy(&banner)
                ));
            }
            // Another process may own the port while ours failed to bind it and is exiting.
            thread::sleep(Duration::from_millis(100));
            if let Ok(Some(status)) = process.try_wait() {
                return Err(format!(
                    "exited ({status}); port {port} belongs to someone else"
                ));
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "not accepting connections after {STARTUP_TIMEOUT:?}"
            ));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("binding 127.0.0.1:0 to find a free port")
}

/// SIGKILL to the process group led by `process` (Globus forks one child per session), then reap.
fn kill_group(process: &mut Child) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", process.id())])
        .stderr(Stdio::null())
        .status();
    let _ = process.kill();
    let _ = process.wait();
}

fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
