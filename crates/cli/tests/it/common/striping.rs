//! Striped servers for tests: a striped globus-gridftp-server (frontend + data nodes, as the
//! Globus docs set it up), a ferry cluster (`ferry serve --remote-nodes` + `--data-node`s) and
//! a single ferry server, on loopback addresses 127.0.0.x.

use std::ffi::OsStr;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// An installed program (PATH, then the Debian sbin/bin directories).
pub fn tool(name: &str) -> Option<PathBuf> {
    super::find_executable(name, &["/usr/sbin", "/usr/bin"])
}

pub struct Procs(pub Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn free_port(ip: &str) -> u16 {
    TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn wait_listening(ip: &str, port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect((ip, port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on {ip}:{port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn is_root() -> bool {
    let out = Command::new("id").arg("-u").output().unwrap().stdout;
    String::from_utf8_lossy(&out).trim() == "0"
}

/// A Globus frontend on 127.0.0.1 with data nodes on 127.0.0.2-4; returns it and its port.
pub fn globus_striped(dir: &Path) -> (Procs, u16) {
    let server = tool("globus-gridftp-server").unwrap();
    let conf = dir.join("empty.conf");
    std::fs::write(&conf, "").unwrap();
    let anon: Vec<&str> = if is_root() {
        vec!["-anonymous-user", "nobody"]
    } else {
        vec![]
    };
    let mut procs = Procs(Vec::new());
    let mut nodes = Vec::new();
    for i in 2..=4 {
        let ip = format!("127.0.0.{i}");
        let port = free_port(&ip);
        procs.0.push(
            Command::new(&server)
                .arg("-c")
                .arg(&conf)
                .arg("-aa")
                .args(&anon)
                .args(["-dn", "-hostname", &ip, "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        wait_listening(&ip, port, "a Globus data node");
        nodes.push(format!("{ip}:{port}"));
    }
    let port = free_port("127.0.0.1");
    procs.0.push(
        Command::new(&server)
            .arg("-c")
            .arg(&conf)
            .arg("-aa")
            .args(&anon)
            .args([
                "-hostname",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-r",
                &nodes.join(","),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening("127.0.0.1", port, "the Globus frontend");
    (procs, port)
}

pub fn ferry_server(root: &Path) -> (Procs, u16) {
    let port = free_port("127.0.0.1");
    let child = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--root"])
        .arg(root)
        // Third-party copies with the clusters' nodes on other loopback addresses.
        .args([
            "--anonymous",
            "--anonymous-write",
            "--allow-third-party",
            "anonymous",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let procs = Procs(vec![child]);
    wait_listening("127.0.0.1", port, "ferry serve");
    (procs, port)
}

/// A directory every server account may use (Globus data nodes run as nobody when root), with
/// `data/src.bin` of `len` pattern bytes.
pub fn source_dir(len: usize) -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    let dir = tempfile::tempdir().unwrap();
    mode(dir.path(), 0o755).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    mode(&data, 0o777).unwrap();
    let bytes = pattern(len);
    std::fs::write(data.join("src.bin"), &bytes).unwrap();
    mode(&data.join("src.bin"), 0o644).unwrap();
    (dir, data, bytes)
}

pub fn pattern(n: usize) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 9) as u8)
        .collect()
}

/// A striped ferry server: a frontend on 127.0.0.1 (`--remote-nodes`) and one `--data-node`
/// per address given, all serving `root` (anonymous, writable) and sharing an IPC secret.
pub struct FerryCluster {
    /// Control port of the frontend.
    pub port: u16,
    /// The data nodes' addresses.
    pub nodes: Vec<(String, u16)>,
    node_procs: Vec<Option<Child>>,
    frontend: Option<Child>,
    root: PathBuf,
    secret_dir: tempfile::TempDir,
    frontend_log: PathBuf,
}

impl FerryCluster {
    pub fn start(root: &Path, node_ips: &[&str]) -> FerryCluster {
        let secret_dir = tempfile::tempdir().unwrap();
        std::fs::write(
            secret_dir.path().join("secret"),
            "a test secret shared by frontend and nodes\n",
        )
        .unwrap();
        let nodes: Vec<(String, u16)> = node_ips
            .iter()
            .map(|ip| (ip.to_string(), free_port(ip)))
            .collect();
        let mut c = FerryCluster {
            port: free_port("127.0.0.1"),
            nodes,
            node_procs: Vec::new(),
            frontend: None,
            root: root.to_path_buf(),
            frontend_log: secret_dir.path().join("frontend.log"),
            secret_dir,
        };
        for i in 0..c.nodes.len() {
            c.node_procs.push(None);
            c.start_node(i);
        }
        let list: Vec<String> = c.nodes.iter().map(|(ip, p)| format!("{ip}:{p}")).collect();
        let log = std::fs::File::create(&c.frontend_log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{}", c.port),
                "--root",
            ])
            .arg(&c.root)
            .args([
                "--anonymous",
                "--anonymous-write",
                "--allow-third-party",
                "anonymous",
                "--remote-nodes",
                &list.join(","),
                "--dc-whitelist",
                "tcp,quic,udt,gsi",
            ])
            .arg("--ipc-secret-file")
            .arg(c.secret_dir.path().join("secret"))
            .args(["--ipc-connect-timeout", "2"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        c.frontend = Some(child);
        wait_listening("127.0.0.1", c.port, "the ferry frontend");
        c
    }

    /// Starts (or restarts) data node `i` on its address.
    pub fn start_node(&mut self, i: usize) {
        let (ip, port) = self.nodes[i].clone();
        let child = Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args([
                "serve",
                "--data-node",
                "--listen",
                &format!("{ip}:{port}"),
                "--root",
            ])
            .arg(&self.root)
            .arg("--ipc-secret-file")
            .arg(self.secret_dir.path().join("secret"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.node_procs[i] = Some(child);
        wait_listening(&ip, port, "a ferry data node");
    }

    /// Writes a new shared secret for frontend and nodes to read at their next reload.
    pub fn rotate_secret(&self, text: &str) {
        std::fs::write(self.secret_dir.path().join("secret"), text).unwrap();
    }

    /// Sends SIGHUP (reload) to the frontend and every running node.
    pub fn reload_all(&self) {
        let running = self
            .node_procs
            .iter()
            .chain(std::iter::once(&self.frontend));
        for c in running.flatten() {
            let hup = Command::new("kill")
                .args(["-HUP", &c.id().to_string()])
                .status()
                .unwrap();
            assert!(hup.success());
        }
    }

    /// Kills data node `i` (SIGKILL: no goodbye on its links).
    pub fn kill_node(&mut self, i: usize) {
        if let Some(mut c) = self.node_procs[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `ftp://` URL of `path` (relative to the root) on the frontend.
    pub fn url(&self, path: &str) -> String {
        format!("ftp://127.0.0.1:{}/{path}", self.port)
    }

    /// The frontend's log so far.
    pub fn frontend_log(&self) -> String {
        std::fs::read_to_string(&self.frontend_log).unwrap_or_default()
    }
}

impl Drop for FerryCluster {
    fn drop(&mut self) {
        for c in self
            .node_procs
            .iter_mut()
            .chain(std::iter::once(&mut self.frontend))
        {
            if let Some(mut c) = c.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// `program args`, killed after two minutes: a stripe that never gets its EOF would hang its
/// receiver (and the test) for good.
pub fn run_bounded<S: AsRef<OsStr>>(program: impl AsRef<OsStr>, args: &[S]) -> Output {
    // gcp (ferry cp) learns per path: an empty cache of its own, not the user's ~/.cache.
    let cache = tempfile::tempdir().unwrap();
    Command::new("timeout")
        .env("XDG_CACHE_HOME", cache.path())
        .arg("120")
        .arg(program)
        .args(args)
        .output()
        .unwrap()
}

/// globus-url-copy, bounded.
pub fn guc<S: AsRef<OsStr>>(args: &[S]) -> Output {
    run_bounded(tool("globus-url-copy").unwrap(), args)
}

/// The ferry binary under test, bounded.
pub fn ferry<S: AsRef<OsStr>>(args: &[S]) -> Output {
    run_bounded(env!("CARGO_BIN_EXE_ferry"), args)
}
