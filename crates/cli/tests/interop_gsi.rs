//! GSI on the control channel, against the real Globus client: globus-url-copy with a proxy from
//! grid-proxy-init logs in to `ferry serve --gsi` (AUTH GSSAPI, ADAT, delegation, ENC/632) and
//! gets and puts files, compared byte for byte; and the refusals: a DN not in the grid-mapfile,
//! a CA the server does not trust, plain commands on a protected session.
//!
//! Data channels at every level: `-nodcau`, the default DCAU A, `-dcsafe` (PROT S), `-dcpriv`
//! (PROT P).

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn tool(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

struct Site {
    dir: tempfile::TempDir,
    port: u16,
    server: Child,
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

impl Site {
    fn ca(&self) -> PathBuf {
        self.dir.path().join("ca")
    }
    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }
    fn cert_dir(&self) -> PathBuf {
        self.ca().join("certificates")
    }
}

fn ferry(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(args)
        .output()
        .unwrap()
}

/// A CA with a host, a mapped user and an unmapped one, and `ferry serve --gsi` on it.
fn site() -> Option<Site> {
    if tool("globus-url-copy").is_none() || tool("grid-proxy-init").is_none() {
        eprintln!("skipping: needs globus-url-copy and grid-proxy-init (globus-gass-copy-progs, globus-proxy-utils)");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca");
    let out = ferry(&[
        "ca",
        ca.to_str().unwrap(),
        "--host",
        "localhost",
        "--user",
        "Mapped User:nobody",
        "--days",
        "2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A second user the grid-mapfile does not know.
    let out = ferry(&["ca", ca.to_str().unwrap(), "--user", "Stranger:nobody"]);
    assert!(out.status.success());
    let gridmap = std::fs::read_to_string(ca.join("grid-mapfile")).unwrap();
    let kept: String = gridmap
        .lines()
        .filter(|l| !l.contains("Stranger"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(ca.join("grid-mapfile"), kept).unwrap();

    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let host = ca.join("hosts/localhost");
    let server = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args([
            "serve",
            "--gsi",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--root",
        ])
        .arg(&root)
        .arg("--host-cert")
        .arg(host.join("hostcert.pem"))
        .arg("--host-key")
        .arg(host.join("hostkey.pem"))
        .arg("--cert-dir")
        .arg(ca.join("certificates"))
        .arg("--gridmap")
        .arg(ca.join("grid-mapfile"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let site = Site { dir, port, server };
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "ferry serve --gsi did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(site)
}

/// A proxy for `user` from grid-proxy-init, as a user would make it.
fn proxy(site: &Site, user: &str) -> PathBuf {
    let out = site
        .dir
        .path()
        .join(format!("x509up-{}", user.replace(' ', "_")));
    proxy_from(&site.ca(), user, &out);
    out
}

/// grid-proxy-init for `user` of the CA in `ca`, checked against that CA, written to `out`.
fn proxy_from(ca: &Path, user: &str, out: &Path) {
    let u = ca.join("users").join(user);
    let status = Command::new(tool("grid-proxy-init").unwrap())
        .args(["-q", "-cert"])
        .arg(u.join("usercert.pem"))
        .arg("-key")
        .arg(u.join("userkey.pem"))
        .arg("-certdir")
        .arg(ca.join("certificates"))
        .arg("-out")
        .arg(out)
        .status()
        .unwrap();
    assert!(status.success(), "grid-proxy-init for {user}");
}

fn guc(site: &Site, proxy: &Path, args: &[&str]) -> Output {
    Command::new(tool("globus-url-copy").unwrap())
        .env("X509_CERT_DIR", site.cert_dir())
        .env("X509_USER_PROXY", proxy)
        .env_remove("X509_USER_CERT")
        .env_remove("X509_USER_KEY")
        .args(args)
        .output()
        .unwrap()
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 11) as u8)
        .collect()
}

#[test]
fn globus_url_copy_gets_and_puts_at_every_security_level_and_1_and_4_streams() {
    let Some(site) = site() else { return };
    let proxy = proxy(&site, "Mapped User");
    let src = site.root().join("src.bin");
    let data = pattern(9 << 20, 7);
    std::fs::write(&src, &data).unwrap();
    // -nodcau: clear, unauthenticated; no flag: DCAU A (the default), clear data after the
    // handshake; -dcsafe: PROT S; -dcpriv: PROT P.
    for (n, level) in ["-nodcau", "", "-dcsafe", "-dcpriv"]
        .into_iter()
        .enumerate()
    {
        for p in ["1", "4"] {
            let got = site.dir.path().join(format!("got-{n}-{p}.bin"));
            let url = format!("gsiftp://localhost:{}/src.bin", site.port);
            let dst = format!("file://{}", got.display());
            let mut args = vec!["-p", p, &url, &dst];
            if !level.is_empty() {
                args.insert(0, level);
            }
            let out = guc(&site, &proxy, &args);
            assert!(
                out.status.success(),
                "get {level} -p {p}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                std::fs::read(&got).unwrap() == data,
                "get {level} -p {p}: bytes differ"
            );

            let up = pattern(5 << 20, (n * 10 + p.len()) as u32 + 100);
            let local = site.dir.path().join(format!("up-{n}-{p}.bin"));
            std::fs::write(&local, &up).unwrap();
            let src = format!("file://{}", local.display());
            let url = format!("gsiftp://localhost:{}/put-{n}-{p}.bin", site.port);
            let mut args = vec!["-p", p, &src, &url];
            if !level.is_empty() {
                args.insert(0, level);
            }
            let out = guc(&site, &proxy, &args);
            assert!(
                out.status.success(),
                "put {level} -p {p}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                std::fs::read(site.root().join(format!("put-{n}-{p}.bin"))).unwrap() == up,
                "put {level} -p {p}: bytes differ"
            );
        }
    }
}

#[test]
fn a_dn_missing_from_the_grid_mapfile_is_refused_and_moves_nothing() {
    let Some(site) = site() else { return };
    let proxy = proxy(&site, "Stranger");
    std::fs::write(site.root().join("secret.bin"), b"not for strangers").unwrap();
    let got = site.dir.path().join("got.bin");
    let url = format!("gsiftp://localhost:{}/secret.bin", site.port);
    let out = guc(
        &site,
        &proxy,
        &["-nodcau", &url, &format!("file://{}", got.display())],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("530") && err.contains("Could not map"),
        "{err}"
    );
    assert!(
        std::fs::metadata(&got)
            .map(|m| m.len() == 0)
            .unwrap_or(true),
        "no data moved"
    );
}

#[test]
fn a_proxy_from_an_untrusted_ca_is_refused() {
    let Some(site) = site() else { return };
    let other = site.dir.path().join("other-ca");
    let out = ferry(&[
        "ca",
        other.to_str().unwrap(),
        "--user",
        "Mapped User:nobody",
    ]);
    assert!(out.status.success());
    // The proxy is made against its own CA, then presented to a server that trusts only ours.
    let proxy = site.dir.path().join("x509up-other");
    proxy_from(&other, "Mapped User", &proxy);
    std::fs::write(site.root().join("f"), b"x").unwrap();
    let url = format!("gsiftp://localhost:{}/f", site.port);
    let got = site.dir.path().join("got");
    let out = guc(
        &site,
        &proxy,
        &["-nodcau", &url, &format!("file://{}", got.display())],
    );
    assert!(!out.status.success(), "an untrusted client got in");
    assert!(!got.exists() || std::fs::metadata(&got).unwrap().len() == 0);
}

#[test]
fn before_auth_only_auth_is_served_and_after_it_plain_commands_get_533() {
    use base64::Engine;
    let Some(site) = site() else { return };
    let b64 = base64::engine::general_purpose::STANDARD;
    let s = TcpStream::connect(("127.0.0.1", site.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut rd = BufReader::new(s.try_clone().unwrap());
    let mut wr = s;
    let mut line = || {
        let mut l = String::new();
        rd.read_line(&mut l).unwrap();
        l.trim_end().to_owned()
    };
    assert!(line().starts_with("220"));
    for cmd in ["FEAT", "USER anonymous", "PWD"] {
        wr.write_all(format!("{cmd}\r\n").as_bytes()).unwrap();
        assert!(
            line().starts_with("530 Must perform GSSAPI"),
            "{cmd} before AUTH"
        );
    }
    wr.write_all(b"AUTH GSSAPI\r\n").unwrap();
    assert!(line().starts_with("334"));

    let user = site.ca().join("users/Mapped User");
    let cred = ferry_gsi::Credential::load_cert_key(
        &user.join("usercert.pem"),
        &user.join("userkey.pem"),
        None,
    )
    .unwrap();
    let trust = Arc::new(ferry_gsi::TrustStore::load(&site.cert_dir()).unwrap());
    let (mut ctx, mut token) =
        ferry_gsi::SecurityContext::initiator(ferry_gsi::ContextConfig::new(cred, trust)).unwrap();
    loop {
        wr.write_all(format!("ADAT {}\r\n", b64.encode(&token)).as_bytes())
            .unwrap();
        let reply = line();
        if let Some(t) = reply.strip_prefix("335 ADAT=") {
            match ctx.step(&b64.decode(t).unwrap()).unwrap() {
                ferry_gsi::Step::Continue(t) | ferry_gsi::Step::Done(Some(t)) => token = t,
                other => panic!("{other:?}"),
            }
        } else {
            assert!(reply.starts_with("235"), "{reply}");
            break;
        }
    }
    // A plain command on the protected session: refused, in a wrapped 533.
    wr.write_all(b"PWD\r\n").unwrap();
    let reply = line();
    let code = &reply[..4];
    assert!(code == "632 " || code == "631 ", "{reply}");
    let plain = ctx.unwrap(&b64.decode(&reply[4..]).unwrap()).unwrap();
    assert!(
        plain.starts_with(b"533"),
        "{}",
        String::from_utf8_lossy(&plain)
    );
    // A wrapped one is served.
    let enc = ctx.wrap(b"USER :globus-mapping:\r\n").unwrap();
    wr.write_all(format!("ENC {}\r\n", b64.encode(enc)).as_bytes())
        .unwrap();
    let reply = line();
    let plain = ctx.unwrap(&b64.decode(&reply[4..]).unwrap()).unwrap();
    assert!(
        plain.starts_with(b"331"),
        "{}",
        String::from_utf8_lossy(&plain)
    );
}

#[test]
fn a_server_subject_other_than_the_expected_one_is_refused_by_the_client() {
    let Some(site) = site() else { return };
    let proxy = proxy(&site, "Mapped User");
    std::fs::write(site.root().join("f.bin"), pattern(1 << 20, 3)).unwrap();
    let got = site.dir.path().join("got.bin");
    let url = format!("gsiftp://localhost:{}/f.bin", site.port);
    let out = guc(
        &site,
        &proxy,
        &[
            "-s",
            "/O=Grid/OU=Elsewhere/CN=other.example.org",
            &url,
            &format!("file://{}", got.display()),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("do not match"), "{err}");
    assert!(std::fs::metadata(&got)
        .map(|m| m.len() == 0)
        .unwrap_or(true));
}
