//! Against the real Globus tools: proxies from grid-proxy-init verify here, proxies made here
//! are read by grid-proxy-info, and the whole GSI login — AUTH GSSAPI, ADAT tokens, delegation
//! of a proxy signed here, ENC commands and 632 replies, then a file over a data channel — works
//! with globus-gridftp-server, in TLS 1.3 and 1.2.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use common::{Pki, BASE};
use ferry_gsi::{
    ContextConfig, Credential, Delegation, SecurityContext, Step, Target, VerifyOptions,
};
use openssl::ssl::SslVersion;

fn tool(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(["/usr/sbin".into(), "/usr/bin".into()])
        .map(|d: PathBuf| d.join(name))
        .find(|p| p.is_file())
}

fn save_user(pki: &Pki) -> (PathBuf, PathBuf) {
    ferry_gsi::ca::save_pair(pki.dir.path(), "usercert.pem", "userkey.pem", &pki.user).unwrap();
    (
        pki.dir.path().join("usercert.pem"),
        pki.dir.path().join("userkey.pem"),
    )
}

#[test]
fn a_grid_proxy_init_proxy_verifies_here() {
    let Some(gpi) = tool("grid-proxy-init") else {
        eprintln!("skipping: grid-proxy-init not installed (apt-get install globus-proxy-utils)");
        return;
    };
    let pki = Pki::new();
    let (cert, key) = save_user(&pki);
    for (flags, limited) in [(&[][..], false), (&["-limited"][..], true)] {
        let out = pki.dir.path().join("x509up-globus");
        let status = Command::new(&gpi)
            .args(["-q", "-cert"])
            .arg(&cert)
            .arg("-key")
            .arg(&key)
            .arg("-certdir")
            .arg(pki.cert_dir())
            .arg("-out")
            .arg(&out)
            .args(flags)
            .status()
            .unwrap();
        assert!(status.success(), "grid-proxy-init {flags:?}");
        let proxy = Credential::load_proxy(&out).unwrap();
        let v = pki
            .trust()
            .verify(&proxy.cert, &proxy.chain, VerifyOptions::default())
            .unwrap();
        assert_eq!(v.identity(), format!("{BASE}/CN=Test User"));
        assert_eq!(v.limited(), limited, "grid-proxy-init {flags:?}");
    }
}

#[test]
fn grid_proxy_info_reads_a_proxy_made_here() {
    let Some(gpi) = tool("grid-proxy-info") else {
        eprintln!("skipping: grid-proxy-info not installed (apt-get install globus-proxy-utils)");
        return;
    };
    let pki = Pki::new();
    let path = pki.dir.path().join("x509up-ferry");
    pki.proxy().save_proxy(&path).unwrap();
    let out = Command::new(&gpi)
        .arg("-file")
        .arg(&path)
        .arg("-all")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("RFC 3820 compliant impersonation proxy"),
        "{text}"
    );
    assert!(
        text.contains(&format!("identity : {BASE}/CN=Test User")),
        "{text}"
    );
    let ok = Command::new(&gpi)
        .arg("-file")
        .arg(&path)
        .args(["-exists", "-valid", "11:00"])
        .status()
        .unwrap();
    assert!(ok.success(), "a 12-hour proxy has 11 hours left");
}

/// globus-gridftp-server in GSI mode with the PKI's host credential.
struct GlobusServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for GlobusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_globus(pki: &Pki) -> Option<GlobusServer> {
    let server = tool("globus-gridftp-server")?;
    let dir = pki.dir.path();
    ferry_gsi::ca::save_pair(dir, "hostcert.pem", "hostkey.pem", &pki.host).unwrap();
    let root = rustix::process::geteuid().is_root();
    let user = if root {
        "nobody".to_owned()
    } else {
        String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_owned()
    };
    std::fs::write(
        dir.join("grid-mapfile"),
        format!("\"{BASE}/CN=Test User\" {user}\n"),
    )
    .unwrap();
    std::fs::write(dir.join("empty.conf"), "").unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = dir.join("globus.log");
    let child = Command::new(server)
        .env_remove("X509_USER_PROXY")
        .env("X509_CERT_DIR", pki.cert_dir())
        .env("X509_USER_CERT", dir.join("hostcert.pem"))
        .env("X509_USER_KEY", dir.join("hostkey.pem"))
        .env("GRIDMAP", dir.join("grid-mapfile"))
        .arg("-c")
        .arg(dir.join("empty.conf"))
        .args([
            "-p",
            &port.to_string(),
            "-control-interface",
            "127.0.0.1",
            "-data-interface",
            "127.0.0.1",
        ])
        .args(["-no-chdir", "-l"])
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = GlobusServer { child, port, log };
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(server);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "globus-gridftp-server did not listen on {port}: {}",
        log_tail(&server.log)
    );
}

/// A control connection that speaks the GSI exchange by hand.
struct Control {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Control {
    fn connect(port: u16) -> Control {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Control {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
        }
    }

    fn send(&mut self, line: &str) {
        self.writer
            .write_all(format!("{line}\r\n").as_bytes())
            .unwrap();
    }

    /// Reads one reply; returns its lines.
    fn reply(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            assert!(
                self.reader.read_line(&mut line).unwrap() > 0,
                "server closed: {lines:?}"
            );
            let line = line.trim_end().to_owned();
            let done = line.len() >= 4
                && line.as_bytes()[3] == b' '
                && line[..3].bytes().all(|b| b.is_ascii_digit());
            lines.push(line);
            if done {
                return lines;
            }
        }
    }

    /// Sends a wrapped command and returns the unwrapped reply text.
    fn command(&mut self, ctx: &mut SecurityContext, line: &str) -> String {
        let token = ctx.wrap(format!("{line}\r\n").as_bytes()).unwrap();
        self.send(&format!("ENC {}", B64.encode(token)));
        self.wrapped_reply(ctx)
    }

    /// Reads one wrapped reply and returns its unwrapped text.
    fn wrapped_reply(&mut self, ctx: &mut SecurityContext) -> String {
        let mut text = String::new();
        for wrapped in self.reply() {
            assert!(
                wrapped.starts_with("632"),
                "expected a 632 reply, got {wrapped}"
            );
            let plain = ctx.unwrap(&B64.decode(&wrapped[4..]).unwrap()).unwrap();
            text.push_str(&String::from_utf8(plain).unwrap());
        }
        text
    }
}

/// AUTH GSSAPI and the ADAT exchange; returns the context and the number of ADATs sent.
fn login(ctl: &mut Control, config: ContextConfig) -> (SecurityContext, usize) {
    assert!(ctl.reply()[0].starts_with("220"));
    ctl.send("AUTH GSSAPI");
    assert!(ctl.reply()[0].starts_with("334"));
    let (mut ctx, mut token) = SecurityContext::initiator(config).unwrap();
    let mut adats = 0;
    loop {
        ctl.send(&format!("ADAT {}", B64.encode(&token)));
        adats += 1;
        let reply = ctl.reply().join("\n");
        if let Some(b64) = reply.strip_prefix("335 ADAT=") {
            match ctx.step(&B64.decode(b64.trim()).unwrap()).unwrap() {
                Step::Continue(t) | Step::Done(Some(t)) => token = t,
                other => panic!("after 335: {other:?}"),
            }
        } else {
            assert!(reply.starts_with("235"), "{reply}");
            assert!(ctx.is_established());
            return (ctx, adats);
        }
    }
}

fn globus_login_and_get(version: Option<SslVersion>) {
    let pki = Pki::new();
    let Some(server) = start_globus(&pki) else {
        eprintln!("skipping: globus-gridftp-server not installed (apt-get install globus-gridftp-server-progs)");
        return;
    };
    let data = pki.dir.path().join("data.bin");
    let bytes: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&data, &bytes).unwrap();
    let mut perms = std::fs::metadata(pki.dir.path()).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(pki.dir.path(), perms).unwrap();
    let mut perms = std::fs::metadata(&data).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
    std::fs::set_permissions(&data, perms).unwrap();

    let mut ctl = Control::connect(server.port);
    let mut config = ContextConfig::new(pki.proxy(), pki.trust());
    config.delegation = Delegation::Limited;
    config.sni = Some("localhost".into());
    config.max_version = version;
    let (mut ctx, adats) = login(&mut ctl, config);
    // TLS 1.3: ClientHello, client Finished, D, proxy; TLS 1.2: the same count, the client's
    // flight carrying its Finished and the server's reply its own.
    assert_eq!(adats, 4);
    Target::Host {
        name: "localhost".into(),
        ip: None,
    }
    .check(ctx.peer().unwrap())
    .unwrap();

    let user = ctl.command(&mut ctx, "USER :globus-mapping:");
    assert!(
        user.starts_with("331"),
        "{user}\nlog:\n{}",
        log_tail(&server.log)
    );
    let pass = ctl.command(&mut ctx, "PASS dummy");
    assert!(
        pass.starts_with("230"),
        "{pass}\nlog:\n{}",
        log_tail(&server.log)
    );
    // A multi-line reply arrives as several 632 lines, each wrapped on its own.
    let feat = ctl.command(&mut ctx, "FEAT");
    assert!(
        feat.starts_with("211-") && feat.contains("DCAU") && feat.trim_end().ends_with("211 End."),
        "{feat}"
    );

    for cmd in ["TYPE I", "DCAU N"] {
        let r = ctl.command(&mut ctx, cmd);
        assert!(r.starts_with("200"), "{cmd}: {r}");
    }
    let pasv = ctl.command(&mut ctx, "PASV");
    assert!(pasv.starts_with("227"), "{pasv}");
    let nums: Vec<u16> = pasv[pasv.find('(').unwrap() + 1..pasv.find(')').unwrap()]
        .split(',')
        .map(|n| n.trim().parse().unwrap())
        .collect();
    let mut data_conn = TcpStream::connect(("127.0.0.1", nums[4] * 256 + nums[5])).unwrap();
    let retr = ctl.command(&mut ctx, &format!("RETR {}", data.display()));
    assert!(retr.starts_with("150"), "{retr}");
    let mut got = Vec::new();
    data_conn.read_to_end(&mut got).unwrap();
    let done = ctl.wrapped_reply(&mut ctx);
    assert!(done.starts_with("226"), "{done}");
    assert_eq!(got.len(), bytes.len());
    assert!(got == bytes, "the file arrives byte for byte");
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .rev()
        .take(20)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn gsi_login_with_delegation_to_globus_gridftp_server_tls13() {
    globus_login_and_get(None);
}

#[test]
fn gsi_login_with_delegation_to_globus_gridftp_server_tls12() {
    globus_login_and_get(Some(SslVersion::TLS1_2));
}
