//! globus-gridftp-server in GSI mode on a `ferry ca` site: its host credential, CAs and
//! grid-mapfile, serving absolute paths as the mapped account (`nobody`). Root only: a non-root
//! Globus server can only map to the account it runs as. Killed when dropped.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running GSI globus-gridftp-server.
pub struct GlobusGsi {
    server: Child,
    /// Its control port on 127.0.0.1.
    pub port: u16,
    /// A directory `nobody` may write.
    pub root: PathBuf,
}

impl Drop for GlobusGsi {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

impl GlobusGsi {
    /// A server on `ca` (a `ferry ca` directory with a `localhost` host) serving `dir/name`,
    /// with `extra` arguments; `None`, after saying why, where it cannot run here.
    pub fn start(dir: &Path, ca: &Path, name: &str, extra: &[&str]) -> Option<GlobusGsi> {
        let Some(bin) = super::find_executable("globus-gridftp-server", &["/usr/sbin", "/usr/bin"])
        else {
            eprintln!("skipping: needs globus-gridftp-server (globus-gridftp-server-progs)");
            return None;
        };
        let uid = Command::new("id").arg("-u").output().unwrap().stdout;
        if String::from_utf8_lossy(&uid).trim() != "0" {
            eprintln!("skipping: a GSI globus-gridftp-server maps users only when run as root");
            return None;
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = dir.join(name);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(dir.join("empty.conf"), "").unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let host = ca.join("hosts/localhost");
        let server = Command::new(bin)
            .env_remove("X509_USER_PROXY")
            .env("X509_CERT_DIR", ca.join("certificates"))
            .env("X509_USER_CERT", host.join("hostcert.pem"))
            .env("X509_USER_KEY", host.join("hostkey.pem"))
            .env("GRIDMAP", ca.join("grid-mapfile"))
            .arg("-c")
            .arg(dir.join("empty.conf"))
            .args(["-p", &port.to_string()])
            .args([
                "-control-interface",
                "127.0.0.1",
                "-data-interface",
                "127.0.0.1",
            ])
            .args(["-no-chdir", "-l"])
            .arg(dir.join(format!("{name}.log")))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let g = GlobusGsi { server, port, root };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "globus-gridftp-server did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(g)
    }
}
