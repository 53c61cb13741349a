//! Emulated hosts for tests (ferry-netlab): a lab from one of `bench/topologies`, commands run
//! in its hosts, servers started there and waited for, everything torn down on drop. Needs root,
//! `ip` and the ferry-netlab binary: [`missing`] says what is absent, for a test to skip.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The ferry-netlab binary beside the ferry under test.
pub fn netlab() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_ferry")).with_file_name("ferry-netlab")
}

/// Why a netlab test (`what`) cannot run here, if it cannot.
pub fn missing(what: &str) -> Option<String> {
    if !super::striping::is_root() {
        return Some(format!("{what} needs root (network namespaces); skipped"));
    }
    if !netlab().exists() {
        return Some(format!(
            "{what} needs {} (cargo build --release --workspace); skipped",
            netlab().display()
        ));
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some(format!("{what} needs `ip` (iproute2); skipped"));
    }
    None
}

/// One lab at a time in a test binary: bringing one up takes every other lab down.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A lab, torn down when dropped; every process started in it is killed first.
pub struct Lab {
    name: String,
    file: PathBuf,
    pub procs: Vec<Child>,
    /// Held until the lab is down (fields drop after `drop`); a failed test's lab still lets
    /// go of it.
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.procs {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new(netlab()).arg("down").arg(&self.file).output();
    }
}

impl Lab {
    /// Brings up `bench/topologies/TOPOLOGY.toml` as lab `name` (its file in `dir`), with the
    /// hosts' TCP congestion control set when `congestion` names one.
    pub fn up(dir: &Path, topology: &str, name: &str, congestion: Option<&str>) -> Lab {
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../../bench/topologies/{topology}.toml"));
        let cc = congestion
            .map(|c| format!("\ncongestion = \"{c}\""))
            .unwrap_or_default();
        let text = std::fs::read_to_string(src).unwrap().replace(
            &format!("name = \"{topology}\""),
            &format!("name = \"{name}\"{cc}"),
        );
        let file = dir.join(format!("{name}.toml"));
        std::fs::write(&file, text).unwrap();
        let _ = Command::new(netlab()).args(["down", "--all"]).output();
        let out = Command::new(netlab())
            .arg("up")
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "netlab up: {out:?}");
        Lab {
            name: name.to_string(),
            file,
            procs: Vec::new(),
            _turn: turn,
        }
    }

    /// A host's address.
    pub fn addr(&self, host: &str) -> String {
        let out = Command::new(netlab())
            .args(["addr", "--lab", &self.name, host])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// `args` (a program and its arguments) to run in `host`.
    pub fn cmd(&self, host: &str, args: &[&str]) -> Command {
        let mut c = Command::new(netlab());
        c.args(["exec", "--lab", &self.name, host, "--"]).args(args);
        c
    }

    /// Starts `args` (a program and its arguments) in `host`, its stderr to `log`, and waits
    /// for it to listen on TCP `port`; returns its index in `procs`.
    pub fn spawn(&mut self, host: &str, port: u16, args: &[String], log: &Path) -> usize {
        let mut c = Command::new(netlab());
        c.args(["exec", "--lab", &self.name, host, "--"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap());
        self.procs.push(c.spawn().unwrap());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = self
                .cmd(host, &["ss", "-Hltn", &format!("sport = :{port}")])
                .output()
                .unwrap();
            if !out.stdout.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{args:?} did not listen in {host}: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        self.procs.len() - 1
    }

    /// Starts `ferry serve ARGS` in `host` and waits for it to listen on `port`; returns its
    /// index in `procs`. The lab's servers are ends of third-party copies between its hosts,
    /// which anonymous and password sessions may be only where the admin says so.
    pub fn serve(&mut self, host: &str, port: u16, args: &[String], log: &Path) -> usize {
        let mut full = vec![env!("CARGO_BIN_EXE_ferry").to_string(), "serve".to_string()];
        full.extend(args.iter().cloned());
        if !args.iter().any(|a| a == "--data-node") {
            full.extend(["--allow-third-party".into(), "anonymous,password".into()]);
        }
        self.spawn(host, port, &full, log)
    }
}
