//! A throw-away PostgreSQL server for tests: Debian's binaries (package `postgresql`, which
//! scripts/install-deps installs), a cluster made by initdb in a temporary directory, listening
//! on a free loopback port, stopped and removed when the handle drops. As root the server runs
//! as the `postgres` account (it refuses to run as root).

#![allow(dead_code)]

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running server.
pub struct Postgres {
    dir: tempfile::TempDir,
    server: Child,
    port: u16,
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

impl Postgres {
    /// Starts one, or says why it cannot (the caller skips with that message, or fails where
    /// `FERRY_REQUIRE_FTPD` says every tool is installed).
    pub fn start() -> Result<Postgres, String> {
        let bin = bin_dir().ok_or(
            "PostgreSQL is not installed (apt-get install postgresql; scripts/install-deps does)",
        )?;
        let root = is_root();
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let data = dir.path().join("data");
        std::fs::create_dir(&data).map_err(|e| e.to_string())?;
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
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| e.to_string())?;
        let server = command(&bin, "postgres", root)
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
        let pg = Postgres { dir, server, port };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok()
                && postgres::Client::connect(&pg.url("postgres"), postgres::NoTls).is_ok()
            {
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
        let mut c = postgres::Client::connect(&self.url("postgres"), postgres::NoTls)
            .expect("connect to the test PostgreSQL");
        c.batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create a test database");
        self.url(name)
    }
}

/// A server, or `None` after saying why the test skips (and a failure where CI promised one).
pub fn or_skip() -> Option<Postgres> {
    match Postgres::start() {
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
