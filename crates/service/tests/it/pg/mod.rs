//! A throw-away PostgreSQL server for tests: Debian's binaries (package `postgresql`, which
//! scripts/install-deps installs), a cluster made by initdb in a temporary directory, listening
//! on a free loopback port, stopped and removed when the handle drops. As root the server runs
//! as the `postgres` account (it refuses to run as root). [`Postgres::start_ssl_only`] gives it
//! a certificate from a CA made for the test and refuses TCP sessions without TLS; the harness
//! itself always talks to it over its Unix socket, where pg_hba.conf trusts everyone.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ferry_gsi::{CertificateAuthority, IssueSpec};

/// A running server.
pub struct Postgres {
    dir: tempfile::TempDir,
    server: Child,
    port: u16,
    /// The CA that signed the server's certificate, and its file (PEM), when it has one.
    ca: Option<(CertificateAuthority, PathBuf)>,
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT to the postmaster itself (its pid is the first line of postmaster.pid): a
        // "fast" shutdown that ends the sessions still open. As root the child is `runuser`,
        // and a signal to it did not always reach the server, which then outlived the test.
        let postmaster = std::fs::read_to_string(self.dir.path().join("data/postmaster.pid"))
            .ok()
            .and_then(|t| t.lines().next().map(str::to_owned))
            .filter(|p| p.parse::<u32>().is_ok());
        let target = postmaster
            .clone()
            .unwrap_or_else(|| self.server.id().to_string());
        let _ = Command::new("kill").args(["-INT", &target]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.server.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(pid) = postmaster {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = &self.dir;
    }
}

fn bin_dir() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("initdb").exists() && p.join("postgres").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs a PostgreSQL binary, as `postgres` when we are root.
fn command(bin: &std::path::Path, name: &str, root: bool) -> Command {
    if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin.join(name));
        c
    } else {
        Command::new(bin.join(name))
    }
}

/// A CA, made fresh, whose certificate is `ca.pem` in `dir` (readable by anyone: it is public).
pub fn make_ca(dir: &Path, name: &str) -> Result<(CertificateAuthority, PathBuf), String> {
    let ca = CertificateAuthority::create(&format!("/O=ferry tests/CN={name}"), 2, 2048)
        .map_err(|e| format!("cannot make a CA: {e}"))?;
    let path = dir.join("ca.pem");
    let pem = ca.cert.to_pem().map_err(|e| e.to_string())?;
    std::fs::write(&path, pem).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((ca, path))
}

/// A CA in `dir` and a server certificate from it for `localhost` and `127.0.0.1`
/// (`server.pem`, `server.key` mode 0600); the CA and its file.
fn server_certificate(dir: &Path) -> Result<(CertificateAuthority, PathBuf), String> {
    std::fs::create_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (ca, ca_file) = make_ca(dir, "PostgreSQL test CA")?;
    let mut spec = IssueSpec::host("/O=ferry tests", "localhost", 2);
    spec.ips.push("127.0.0.1".into());
    let server = ca
        .issue(&spec)
        .map_err(|e| format!("cannot issue the server's certificate: {e}"))?;
    ferry_gsi::ca::save_pair(dir, "server.pem", "server.key", &server)
        .map_err(|e| format!("cannot save the server's certificate: {e}"))?;
    Ok((ca, ca_file))
}

impl Postgres {
    /// Starts one, or says why it cannot (the caller skips with that message, or fails where
    /// `FERRY_REQUIRE_FTPD` says every tool is installed).
    pub fn start() -> Result<Postgres, String> {
        Postgres::launch(false)
    }

    /// Starts one with TLS (`ssl=on`, a certificate for `localhost` and `127.0.0.1` from
    /// [`Postgres::ca_file`]) whose pg_hba.conf rejects TCP sessions without TLS, and wants a
    /// client certificate from the same CA ([`Postgres::client_certificate`]) for database
    /// `tls_cert`.
    pub fn start_ssl_only() -> Result<Postgres, String> {
        Postgres::launch(true)
    }

    fn launch(ssl_only: bool) -> Result<Postgres, String> {
        let bin = bin_dir().ok_or(
            "PostgreSQL is not installed (apt-get install postgresql; scripts/install-deps does)",
        )?;
        let root = is_root();
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let data = dir.path().join("data");
        std::fs::create_dir(&data).map_err(|e| e.to_string())?;
        // Made before the directory goes to `postgres`, so the key is its (and 0600: the
        // server refuses a key that its group or others can read).
        let certs = dir.path().join("tls");
        let ca = ssl_only.then(|| server_certificate(&certs)).transpose()?;
        if root {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !ok {
                return Err("cannot give the cluster's directory to the postgres account".into());
            }
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755));
        }
        let out = command(&bin, "initdb", root)
            .args([
                "-A",
                "trust",
                "-U",
                "ferry",
                "-E",
                "UTF8",
                "--no-sync",
                "-D",
            ])
            .arg(&data)
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if ssl_only {
            let hba = data.join("pg_hba.conf");
            std::fs::write(
                &hba,
                "local all all trust\n\
                 hostssl tls_cert all 127.0.0.1/32 trust clientcert=verify-full\n\
                 hostssl all all 127.0.0.1/32 trust\n\
                 hostnossl all all 127.0.0.1/32 reject\n",
            )
            .map_err(|e| format!("{}: {e}", hba.display()))?;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| e.to_string())?;
        let mut server = command(&bin, "postgres", root);
        if ssl_only {
            server.args(["-c", "ssl=on", "-c"]);
            server.arg(format!(
                "ssl_cert_file={}",
                certs.join("server.pem").display()
            ));
            server.arg("-c");
            server.arg(format!(
                "ssl_key_file={}",
                certs.join("server.key").display()
            ));
            server.arg("-c");
            server.arg(format!("ssl_ca_file={}", certs.join("ca.pem").display()));
        }
        let server = server
            .arg("-D")
            .arg(&data)
            .args(["-k"])
            .arg(dir.path())
            .args([
                "-p",
                &port.to_string(),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "max_connections=50",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("postgres: {e}"))?;
        let pg = Postgres {
            dir,
            server,
            port,
            ca,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if pg.admin().is_ok() {
                return Ok(pg);
            }
            if Instant::now() > deadline {
                return Err("PostgreSQL did not start within 30 s".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://ferry@127.0.0.1:{}/{db}", self.port)
    }

    /// A new empty database; its URL.
    pub fn database(&self, name: &str) -> String {
        let mut c = self.admin().expect("connect to the test PostgreSQL");
        c.batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create a test database");
        self.url(name)
    }

    /// A session over the Unix socket (no TLS there, and trusted whatever TCP requires).
    pub fn admin(&self) -> Result<postgres::Client, postgres::Error> {
        postgres::Config::new()
            .host_path(self.dir.path())
            .port(self.port)
            .user("ferry")
            .dbname("postgres")
            .connect(postgres::NoTls)
    }

    /// The CA file a client trusts to verify this server (a server started with TLS).
    pub fn ca_file(&self) -> &Path {
        &self.ca.as_ref().expect("a server started with TLS").1
    }

    /// A client certificate for `user` from this server's CA, written to `dir`
    /// (`USER.pem`, `USER.key` mode 0600); their paths.
    pub fn client_certificate(&self, dir: &Path, user: &str) -> (PathBuf, PathBuf) {
        let (ca, _) = self.ca.as_ref().expect("a server started with TLS");
        let cred = ca
            .issue(&IssueSpec::user(&format!("/O=ferry tests/CN={user}"), 2))
            .expect("issue a client certificate");
        let (cert, key) = (format!("{user}.pem"), format!("{user}.key"));
        ferry_gsi::ca::save_pair(dir, &cert, &key, &cred).expect("save a client certificate");
        (dir.join(cert), dir.join(key))
    }

    /// How many sessions to database `db` use TLS, and how many do not; the TLS ones'
    /// protocol versions (pg_stat_ssl, seen from the server).
    pub fn sessions(&self, db: &str) -> (Vec<String>, usize) {
        let rows = self
            .admin()
            .expect("connect to the test PostgreSQL")
            .query(
                "SELECT s.ssl, s.version FROM pg_stat_ssl s \
                 JOIN pg_stat_activity a ON a.pid = s.pid WHERE a.datname = $1",
                &[&db],
            )
            .expect("read pg_stat_ssl");
        let tls = rows
            .iter()
            .filter(|r| r.get::<_, bool>(0))
            .map(|r| r.get::<_, Option<String>>(1).unwrap_or_default())
            .collect();
        let plain = rows.iter().filter(|r| !r.get::<_, bool>(0)).count();
        (tls, plain)
    }
}

/// A server, or `None` after saying why the test skips (and a failure where CI promised one).
pub fn or_skip() -> Option<Postgres> {
    skip_unless(Postgres::start())
}

/// A server with TLS only ([`Postgres::start_ssl_only`]), or `None` as [`or_skip`].
pub fn ssl_only_or_skip() -> Option<Postgres> {
    skip_unless(Postgres::start_ssl_only())
}

fn skip_unless(started: Result<Postgres, String>) -> Option<Postgres> {
    match started {
        Ok(pg) => Some(pg),
        Err(why) => {
            assert!(
                std::env::var_os("FERRY_REQUIRE_FTPD").is_none(),
                "PostgreSQL is needed here and CI installs it: {why}"
            );
            eprintln!("skipping: {why}");
            None
        }
    }
}
