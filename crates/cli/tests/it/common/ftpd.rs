//! Plain FTP servers from Debian's packages, started per test: ProFTPD (package proftpd-core)
//! and Pure-FTPd (pure-ftpd, which conflicts with proftpd-core in apt, so `scripts/install-deps`
//! unpacks it under `/opt/ferry-test/pure-ftpd`). Each serves a user `alice` (password
//! `ferrytest`, chrooted to its home) and anonymous users (their own root), on IPv4 and IPv6,
//! both running as `nobody`.
//!
//! Past 400 lines: the two servers' set-ups read best side by side.
//!
//! They need root: both switch to the user's uid, and Pure-FTPd takes its anonymous root from
//! the system user `ftp`, which the harness points at the test's directory by binding its own
//! passwd file over `/etc/passwd` in a private mount namespace (`unshare -m`).

use std::fs;
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::find_executable;
use super::sandbox::Sandbox;
use super::server::free_port;

/// The user both servers know, and its password.
pub const USER: &str = "alice";
/// `USER`'s password.
pub const PASSWORD: &str = "ferrytest";
/// `openssl passwd -6 -salt ferrysalt ferrytest`, for ProFTPD's AuthUserFile.
const PASSWORD_HASH: &str = "$6$ferrysalt$bbQl3hE4daB4uvqsxRHzPQ2tKgtAHE5cU44ZkC2I9dX6TjK9llXcpn2E5PfK4nW4niuD8kMsnjwoIOUUQjZhC.";
/// The uid and gid the servers run sessions as (`nobody`/`nogroup`).
const NOBODY: u32 = 65534;

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FtpdKind {
    /// ProFTPD 1.3.8.
    ProFtpd,
    /// Pure-FTPd 1.0.50.
    PureFtpd,
}

impl FtpdKind {
    /// Both.
    pub const ALL: [FtpdKind; 2] = [FtpdKind::ProFtpd, FtpdKind::PureFtpd];

    fn binary(self) -> Option<PathBuf> {
        match self {
            FtpdKind::ProFtpd => find_executable("proftpd", &["/usr/sbin"]),
            FtpdKind::PureFtpd => find_executable(
                "pure-ftpd",
                &["/usr/sbin", "/opt/ferry-test/pure-ftpd/usr/sbin"],
            ),
        }
    }

    /// Why this server cannot serve `mode`, if it cannot.
    pub fn missing_tls(self, mode: FtpsMode) -> Option<String> {
        if self == FtpdKind::PureFtpd && mode == FtpsMode::Implicit {
            return Some("skipping PureFtpd: it has no implicit FTPS".into());
        }
        self.missing()
    }

    /// Why this server cannot run here, if it cannot. With `FERRY_REQUIRE_FTPD` set (CI sets
    /// it as root) a missing server fails the test instead of skipping it.
    pub fn missing(self) -> Option<String> {
        let reason = self.why_missing();
        if let (Some(reason), Some(_)) = (&reason, std::env::var_os("FERRY_REQUIRE_FTPD")) {
            panic!("{reason}; FERRY_REQUIRE_FTPD is set, so this is a failure");
        }
        reason
    }

    fn why_missing(self) -> Option<String> {
        if effective_uid() != 0 {
            return Some(format!(
                "skipping {self:?}: plain FTP servers switch users, so these tests need root (CI runs them as root)"
            ));
        }
        if self.binary().is_none() {
            return Some(format!(
                "skipping {self:?}: not installed (bash scripts/install-deps as root installs proftpd-core and unpacks pure-ftpd)"
            ));
        }
        None
    }
}

/// The effective uid, from /proc (the harness has no libc binding).
fn effective_uid() -> u32 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().nth(1).map(str::to_owned))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(u32::MAX)
}

/// FTP over TLS, as the server requires it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FtpsMode {
    /// `AUTH TLS` before login (`ftpes://`), required: clear logins are refused.
    Explicit,
    /// TLS from the first byte (`ftps://`); ProFTPD only (Pure-FTPd has no implicit mode).
    Implicit,
}

/// How to start a server.
#[derive(Debug, Clone, Copy, Default)]
pub struct FtpdOptions {
    /// Require FTP over TLS, with a certificate for `localhost` from a `ferry ca` CA.
    pub tls: Option<FtpsMode>,
    /// Throttle every transfer to this many KiB/s (to interrupt one mid-file).
    pub rate_kib: Option<u32>,
    /// ProFTPD: refuse APPE and REST before STOR (its default, `AllowStoreRestart off`).
    pub refuse_store_restart: bool,
}

/// A running server; stopped when dropped.
pub struct Ftpd {
    /// Which.
    pub kind: FtpdKind,
    /// Control port (IPv4 and IPv6 loopback).
    pub port: u16,
    /// `USER`'s home (its `/`).
    pub home: PathBuf,
    /// The anonymous root (its `/`).
    pub anon: PathBuf,
    /// The CA certificate that signed the server's, when it speaks TLS.
    pub ca_file: Option<PathBuf>,
    tls: Option<FtpsMode>,
    dir: PathBuf,
    child: Child,
}

impl Ftpd {
    /// Starts `kind` in `sandbox`, waiting until it answers.
    pub fn start(kind: FtpdKind, sandbox: &Sandbox, opts: FtpdOptions) -> Ftpd {
        let dir = sandbox.path().join(format!("{kind:?}").to_lowercase());
        let (home, anon) = (dir.join("home"), dir.join("anon"));
        for d in [&dir, &home, &anon] {
            fs::create_dir_all(d).unwrap();
            fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
        }
        for d in [&home, &anon] {
            chown(d, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let port = free_port();
        let binary = kind.binary().expect("checked by missing()");
        let log = fs::File::create(dir.join("server.log")).unwrap();
        let ca = opts.tls.map(|_| make_ca(&dir));
        let mut cmd = match kind {
            FtpdKind::ProFtpd => proftpd(&binary, &dir, port, opts),
            FtpdKind::PureFtpd => pure_ftpd(&binary, &dir, port, opts),
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {kind:?}: {e}"));
        let server = Ftpd {
            kind,
            port,
            home,
            anon,
            ca_file: ca,
            tls: opts.tls,
            dir,
            child,
        };
        server.wait_for_banner();
        server
    }

    fn wait_for_banner(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "{:?} did not listen on {}:\n{}",
            self.kind,
            self.port,
            self.log()
        );
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
            + &fs::read_to_string(self.dir.join("system.log")).unwrap_or_default()
    }

    /// `ftp://`, or `ftpes://`/`ftps://` on a TLS server.
    pub fn scheme(&self) -> &'static str {
        match self.tls {
            None => "ftp",
            Some(FtpsMode::Explicit) => "ftpes",
            Some(FtpsMode::Implicit) => "ftps",
        }
    }

    /// The IPv4 host of URLs: `localhost` on a TLS server (its certificate's name).
    fn host(&self) -> &'static str {
        if self.tls.is_some() {
            "localhost"
        } else {
            "127.0.0.1"
        }
    }

    /// `ftp://alice:ferrytest@127.0.0.1:PORT/path` (`path` starts with `/`).
    pub fn user_url(&self, path: &str) -> String {
        let (scheme, host, port) = (self.scheme(), self.host(), self.port);
        format!("{scheme}://{USER}:{PASSWORD}@{host}:{port}{path}")
    }

    /// The same on IPv6 loopback.
    pub fn user_url_v6(&self, path: &str) -> String {
        format!(
            "{}://{USER}:{PASSWORD}@[::1]:{}{path}",
            self.scheme(),
            self.port
        )
    }

    /// `ftp://127.0.0.1:PORT/path`, logged in anonymously.
    pub fn anon_url(&self, path: &str) -> String {
        format!("{}://{}:{}{path}", self.scheme(), self.host(), self.port)
    }

    /// `--ca-file FILE` for a TLS server, nothing for a clear one.
    pub fn ca_args(&self) -> Vec<String> {
        match &self.ca_file {
            Some(f) => vec!["--ca-file".into(), f.display().to_string()],
            None => Vec::new(),
        }
    }

    /// Writes a file under the anonymous root or the user's home, owned by the server's user.
    pub fn put_file(&self, root: &Path, rel: &str, bytes: &[u8]) -> PathBuf {
        let path = root.join(rel.trim_start_matches('/'));
        let parent = path.parent().unwrap().to_path_buf();
        fs::create_dir_all(&parent).unwrap();
        chown(&parent, Some(NOBODY), Some(NOBODY)).unwrap();
        fs::write(&path, bytes).unwrap();
        chown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
        path
    }

    /// Kills every session process (the master's descendants), as a crash or a cut connection
    /// would end them; the master keeps listening.
    pub fn kill_sessions(&self) -> usize {
        let pids = descendants(self.child.id());
        for pid in &pids {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        pids.len()
    }
}

impl Drop for Ftpd {
    fn drop(&mut self) {
        for pid in descendants(self.child.id()) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- {:?} log:\n{}", self.kind, self.log());
        }
    }
}

/// A throw-away CA and a host certificate for `localhost` (also 127.0.0.1 and ::1) with
/// `ferry ca`; returns the CA's certificate.
fn make_ca(dir: &Path) -> PathBuf {
    let ca = dir.join("ca");
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .arg("ca")
        .arg(&ca)
        .args(["--host", "localhost"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ferry ca: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    ca.join("ca/cacert.pem")
}

/// The host certificate and key `make_ca` issued.
fn host_credential(dir: &Path) -> (PathBuf, PathBuf) {
    let host = dir.join("ca/hosts/localhost");
    (host.join("hostcert.pem"), host.join("hostkey.pem"))
}

/// Every process below `pid`, from /proc.
fn descendants(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces, so read after the last ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok());
        if let Some(ppid) = ppid {
            parents.push((p, ppid));
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for (child, _) in parents.iter().filter(|(_, pp)| *pp == p) {
            out.push(*child);
            frontier.push(*child);
        }
    }
    out
}

fn proftpd(binary: &Path, dir: &Path, port: u16, opts: FtpdOptions) -> Command {
    let passwd = dir.join("passwd");
    fs::write(
        &passwd,
        format!(
            "{USER}:{PASSWORD_HASH}:{NOBODY}:{NOBODY}::{home}:/bin/sh\nftpanon:*:{NOBODY}:{NOBODY}::{anon}:/bin/sh\n",
            home = dir.join("home").display(),
            anon = dir.join("anon").display()
        ),
    )
    .unwrap();
    // ProFTPD refuses an AuthUserFile others can read.
    fs::set_permissions(&passwd, fs::Permissions::from_mode(0o600)).unwrap();
    let group = dir.join("group");
    fs::write(&group, format!("nogroup:x:{NOBODY}:\n")).unwrap();
    let rate = opts
        .rate_kib
        .map(|k| format!("TransferRate RETR,STOR,APPE {k}\n"))
        .unwrap_or_default();
    let tls = match opts.tls {
        None => String::new(),
        Some(mode) => {
            let (cert, key) = host_credential(dir);
            format!(
                "LoadModule mod_tls.c\nTLSEngine on\nTLSLog {d}/tls.log\nTLSProtocol TLSv1.2 TLSv1.3\n\
                 TLSRSACertificateFile {cert}\nTLSRSACertificateKeyFile {key}\nTLSRequired on\n{implicit}",
                d = dir.display(),
                cert = cert.display(),
                key = key.display(),
                implicit = if mode == FtpsMode::Implicit {
                    "TLSOptions UseImplicitSSL\n"
                } else {
                    ""
                },
            )
        }
    };
    let conf = format!(
        r#"ServerName "ferry test"
ServerType standalone
DefaultServer on
Port {port}
UseIPv6 on
PidFile {d}/proftpd.pid
ScoreboardFile {d}/scoreboard
DelayTable none
WtmpLog off
SystemLog {d}/system.log
TransferLog none
UseReverseDNS off
User nobody
Group nogroup
AuthOrder mod_auth_file.c
AuthUserFile {passwd}
AuthGroupFile {group}
RequireValidShell off
DefaultRoot ~
AllowOverwrite on
AllowStoreRestart {store_restart}
Umask 022
MaxInstances 64
{rate}{tls}<Anonymous {d}/anon>
  User ftpanon
  Group nogroup
  UserAlias anonymous ftpanon
  RequireValidShell off
</Anonymous>
"#,
        d = dir.display(),
        passwd = passwd.display(),
        group = group.display(),
        store_restart = if opts.refuse_store_restart {
            "off"
        } else {
            "on"
        },
    );
    let path = dir.join("proftpd.conf");
    fs::write(&path, conf).unwrap();
    let mut cmd = Command::new(binary);
    cmd.arg("-n").arg("-c").arg(&path);
    cmd
}

fn pure_ftpd(binary: &Path, dir: &Path, port: u16, opts: FtpdOptions) -> Command {
    let pure_pw = binary
        .parent()
        .and_then(Path::parent)
        .map(|usr| usr.join("bin/pure-pw"))
        .filter(|p| p.exists())
        .or_else(|| find_executable("pure-pw", &["/usr/bin"]))
        .expect("pure-pw beside pure-ftpd");
    let pdb = dir.join("pureftpd.pdb");
    // The account written directly with ProFTPD's SHA-512 crypt hash: `pure-pw useradd`
    // hashes with Argon2 at a cost that makes every login take seconds here.
    let text = dir.join("pureftpd.passwd");
    fs::write(
        &text,
        format!(
            "{USER}:{PASSWORD_HASH}:{NOBODY}:{NOBODY}::{}/./::::::::::::\n",
            dir.join("home").display()
        ),
    )
    .unwrap();
    let made = Command::new(pure_pw)
        .arg("mkdb")
        .arg(&pdb)
        .arg("-f")
        .arg(&text)
        .status()
        .unwrap();
    assert!(made.success(), "pure-pw mkdb");
    // Anonymous sessions are chrooted to the home of the system user `ftp`.
    let system = fs::read_to_string("/etc/passwd").unwrap();
    let mut passwd: String = system
        .lines()
        .filter(|l| !l.starts_with("ftp:"))
        .map(|l| format!("{l}\n"))
        .collect();
    passwd.push_str(&format!(
        "ftp:x:{NOBODY}:{NOBODY}::{}:/usr/sbin/nologin\n",
        dir.join("anon").display()
    ));
    let ns_passwd = dir.join("passwd.ns");
    fs::write(&ns_passwd, passwd).unwrap();
    fs::set_permissions(&ns_passwd, fs::Permissions::from_mode(0o644)).unwrap();
    let mut args = format!(
        "-S ,{port} -l puredb:{pdb} -p 40000:60000 -H -A -M -g {pid}",
        pdb = pdb.display(),
        pid = dir.join("pure-ftpd.pid").display()
    );
    if let Some(k) = opts.rate_kib {
        args.push_str(&format!(" -t {k} -T {k}"));
    }
    if opts.tls.is_some() {
        // -Y 3: TLS required for the login and for every data connection.
        let (cert, key) = host_credential(dir);
        args.push_str(&format!(" -Y 3 -2 {},{}", cert.display(), key.display()));
    }
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount --bind {ns} /etc/passwd && exec {bin} {args}",
            ns = ns_passwd.display(),
            bin = binary.display()
        ));
    cmd
}
