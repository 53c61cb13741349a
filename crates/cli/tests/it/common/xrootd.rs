//! XRootD as the other party of HTTP third-party copies, started by the tests.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::common::https::{require_tool, HttpsSite};

/// XRootD 5.5.3's HTTPS door with its third-party-copy plugin (Debian `xrootd-server`,
/// `xrootd-server-plugins`), on `root`, with the host credential and CAs of `site`; anyone may
/// read and write (the authorisation database says `u * / a`).
pub struct Xrootd {
    child: Child,
    /// Its HTTPS port on 127.0.0.1.
    pub port: u16,
    /// The directory it serves.
    pub root: std::path::PathBuf,
}

impl Drop for Xrootd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Xrootd {
    /// XRootD on `site`'s CA; `None`, after saying why, where it is not installed.
    pub fn start(site: &HttpsSite) -> Option<Xrootd> {
        let xrootd = require_tool("xrootd", "xrootd-server xrootd-server-plugins")?;
        let is_root = crate::common::https::is_root();
        let work = site.dir().join("xrootd");
        let root = work.join("root");
        crate::common::files::make_dir(&root);
        let user = if is_root {
            "nobody".to_owned()
        } else {
            crate::common::https::whoami()
        };
        let host = site.dir().join("ca/hosts/localhost");
        let (cert, key) = (work.join("hostcert.pem"), work.join("hostkey.pem"));
        std::fs::copy(host.join("hostcert.pem"), &cert).unwrap();
        std::fs::copy(host.join("hostkey.pem"), &key).unwrap();
        let authdb = work.join("authdb");
        std::fs::write(&authdb, "u * / a\n").unwrap();
        let secret = work.join("secret");
        std::fs::write(&secret, "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3I=\n").unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            let uid = crate::common::https::uid_of(&user);
            for (path, mode) in [
                (&cert, 0o444),
                (&key, 0o400),
                (&authdb, 0o444),
                (&secret, 0o400),
            ] {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
                if is_root {
                    std::os::unix::fs::chown(path, Some(uid), None).unwrap();
                }
            }
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let conf = work.join("xrootd.cfg");
        std::fs::write(
            &conf,
            format!(
                "all.export /\nall.sitename ferrytest\noss.localroot {root}\nxrd.port {port}\n\
                 xrd.protocol XrdHttp:{port} libXrdHttp.so\nxrd.tls {cert} {key}\n\
                 xrd.tlsca certdir {cadir}\nhttp.exthandler xrdtpc libXrdHttpTPC.so\n\
                 http.exthandler xrdmacaroons libXrdMacaroons.so\nmacaroons.secretkey {secret}\n\
                 ofs.authorize 1\nofs.authlib ++ libXrdMacaroons.so\nacc.authdb {authdb}\n\
                 xrootd.chksum adler32\nall.adminpath {work}\nall.pidpath {work}\n",
                root = root.display(),
                cert = cert.display(),
                key = key.display(),
                cadir = site.cert_dir().display(),
                secret = secret.display(),
                authdb = authdb.display(),
                work = work.display(),
            ),
        )
        .unwrap();
        let mut cmd = Command::new(xrootd);
        cmd.arg("-c")
            .arg(&conf)
            .arg("-l")
            .arg(work.join("xrootd.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if is_root {
            cmd.args(["-R", &user]);
        }
        let child = cmd.spawn().expect("starting xrootd");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "xrootd did not listen on {port}: {}",
                std::fs::read_to_string(work.join("xrootd.log")).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Some(Xrootd { child, port, root })
    }

    /// The URL of `path` on it.
    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    /// A COPY sent to XRootD (the active party here) with `headers`; its answer's body.
    pub fn copy(&self, site: &HttpsSite, curl: &Path, path: &str, headers: &[&str]) -> String {
        let ca = site.ca_cert();
        let mut args = vec!["-sS", "-N", "--cacert", crate::common::https::path_str(&ca)];
        args.extend(["-X", "COPY"]);
        for h in headers {
            args.extend(["-H", h]);
        }
        let url = self.url(path);
        args.push(&url);
        crate::common::https::run_tool(curl, &args, &[], site.dir())
            .stdout()
            .to_owned()
    }
}
