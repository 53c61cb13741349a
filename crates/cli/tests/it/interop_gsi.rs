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

use ferry_proto::command::{Dcau, TransferType};
use ferry_proto::Command as FtpCommand;

use crate::common;
use crate::common::globus::GlobusGsi;

/// An installed program (PATH, then the Debian sbin/bin directories).
fn tool(name: &str) -> Option<PathBuf> {
    common::find_executable(name, &["/usr/sbin", "/usr/bin"])
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
    // Run as root, the server works as the mapped account (nobody) in here.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let (server, port) = serve_gsi(
        &ca,
        &root,
        &["--dc-whitelist", "tcp,quic,udt,gsi"],
        &dir.path().join("transfers.log"),
    );
    let site = Site { dir, port, server };
    Some(site)
}

/// `ferry serve --gsi` on a free port with the host credential, CAs and grid-mapfile of `ca`,
/// serving `root` (whose forwarding trees it may join) with `extra` arguments; waits for it.
fn serve_gsi(ca: &Path, root: &Path, extra: &[&str], transfers: &Path) -> (Child, u16) {
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
        .arg(root)
        .arg("--host-cert")
        .arg(host.join("hostcert.pem"))
        .arg("--host-key")
        .arg(host.join("hostkey.pem"))
        .arg("--cert-dir")
        .arg(ca.join("certificates"))
        .arg("--gridmap")
        .arg(ca.join("grid-mapfile"))
        .args([
            "--fs-whitelist",
            "file,gridftp_multicast",
            "--multicast-allow-to",
            "127.0.0.0/8,::1",
            "--log-transfer",
        ])
        .arg(transfers)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "ferry serve --gsi did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (server, port)
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
    proxy_from_as(ca, user, out, "-rfc")
}

/// grid-proxy-init with a format flag: `-rfc`, `-draft` (GT3) or `-old` (GT2).
fn proxy_from_as(ca: &Path, user: &str, out: &Path, format: &str) {
    common::grid_proxy_init(ca, user, out, format)
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

fn globus_gsi(site: &Site) -> Option<GlobusGsi> {
    globus_gsi_with(site, "globus-root", &[])
}

/// A GSI globus-gridftp-server serving `name` in the site's directory, with `extra` arguments.
fn globus_gsi_with(site: &Site, name: &str, extra: &[&str]) -> Option<GlobusGsi> {
    GlobusGsi::start(site.dir.path(), &site.ca(), name, extra)
}

/// `ferry copy` with the site's CAs and `proxy`.
fn ferry_copy(site: &Site, proxy: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
        .env("X509_CERT_DIR", site.cert_dir())
        .env("X509_USER_PROXY", proxy)
        .env_remove("X509_USER_CERT")
        .env_remove("X509_USER_KEY")
        .arg("copy")
        .arg("-q")
        .args(args)
        .output()
        .unwrap()
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn readable_by_all(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

#[test]
fn ferry_copy_gets_and_puts_with_globus_gridftp_server_at_every_level() {
    let Some(site) = site() else { return };
    let Some(globus) = globus_gsi(&site) else {
        return;
    };
    let proxy = proxy(&site, "Mapped User");
    let data = pattern(6 << 20, 11);
    let src = globus.root.join("src.bin");
    std::fs::write(&src, &data).unwrap();
    readable_by_all(&src);
    for (n, level) in ["--no-dcau", "", "--dcsafe", "--dcpriv"]
        .into_iter()
        .enumerate()
    {
        for p in ["1", "4"] {
            let got = site.dir.path().join(format!("g-{n}-{p}.bin"));
            let url = format!("gsiftp://localhost:{}{}", globus.port, src.display());
            let mut args = vec!["-p", p, &url, got.to_str().unwrap()];
            if !level.is_empty() {
                args.insert(0, level);
            }
            ok(
                &ferry_copy(&site, &proxy, &args),
                &format!("get {level} -p {p}"),
            );
            assert!(
                std::fs::read(&got).unwrap() == data,
                "get {level} -p {p}: bytes differ"
            );

            let put = globus.root.join(format!("put-{n}-{p}.bin"));
            let url = format!("gsiftp://localhost:{}{}", globus.port, put.display());
            let mut args = vec!["-p", p, got.to_str().unwrap(), &url];
            if !level.is_empty() {
                args.insert(0, level);
            }
            ok(
                &ferry_copy(&site, &proxy, &args),
                &format!("put {level} -p {p}"),
            );
            assert!(
                std::fs::read(&put).unwrap() == data,
                "put {level} -p {p}: bytes differ"
            );
        }
    }
}

#[test]
fn third_party_with_delegation_both_ways_between_ferry_and_globus() {
    let Some(site) = site() else { return };
    let Some(globus) = globus_gsi(&site) else {
        return;
    };
    let proxy = proxy(&site, "Mapped User");
    let data = pattern(7 << 20, 21);
    std::fs::write(site.root().join("src.bin"), &data).unwrap();
    let gsrc = globus.root.join("src.bin");
    std::fs::write(&gsrc, &data).unwrap();
    readable_by_all(&gsrc);
    let ferry_url = |name: &str| format!("gsiftp://localhost:{}/{name}", site.port);
    let globus_url = |p: &Path| format!("gsiftp://localhost:{}{}", globus.port, p.display());
    // `level` first (if any), then `-p 4 SRC DST`.
    let argv = |level: &str, src: String, dst: String| -> Vec<String> {
        let mut v: Vec<String> = vec![];
        if !level.is_empty() {
            v.push(level.into());
        }
        v.extend(["-p".into(), "4".into(), src, dst]);
        v
    };
    for (n, (level, guc_level)) in [("", ""), ("--dcpriv", "-dcpriv"), ("--no-dcau", "-nodcau")]
        .into_iter()
        .enumerate()
    {
        // Driven by ferry copy and by globus-url-copy, ferry → Globus and Globus → ferry, each
        // server on the proxy the client delegated to it.
        for driver in ["ferry", "guc"] {
            let to_globus = globus.root.join(format!("{driver}-from-ferry-{n}.bin"));
            let to_ferry = format!("{driver}-from-globus-{n}.bin");
            let ways = [
                (
                    "ferry→globus",
                    ferry_url("src.bin"),
                    globus_url(&to_globus),
                    to_globus.clone(),
                ),
                (
                    "globus→ferry",
                    globus_url(&gsrc),
                    ferry_url(&to_ferry),
                    site.root().join(&to_ferry),
                ),
            ];
            for (way, src, dst, written) in ways {
                let out = if driver == "ferry" {
                    ferry_copy(&site, &proxy, &refs(&argv(level, src, dst)))
                } else {
                    guc(&site, &proxy, &refs(&argv(guc_level, src, dst)))
                };
                let what = format!("{driver} {level}{guc_level} {way}");
                ok(&out, &what);
                assert!(
                    std::fs::read(&written).unwrap() == data,
                    "{what}: bytes differ"
                );
            }
        }
    }
}

#[test]
fn ferry_copy_with_a_ferry_server_two_and_three_party_encrypted() {
    let Some(site) = site() else { return };
    let proxy = proxy(&site, "Mapped User");
    let data = pattern(8 << 20, 31);
    let local = site.dir.path().join("local.bin");
    std::fs::write(&local, &data).unwrap();
    let url = |name: &str| format!("gsiftp://localhost:{}/{name}", site.port);
    for level in ["", "--dcsafe", "--dcpriv"] {
        let tag = level.trim_start_matches('-');
        let mut put = vec!["-p", "4", local.to_str().unwrap()];
        let dst = url(&format!("up-{tag}.bin"));
        put.push(&dst);
        if !level.is_empty() {
            put.insert(0, level);
        }
        ok(&ferry_copy(&site, &proxy, &put), &format!("put {level}"));
        assert!(std::fs::read(site.root().join(format!("up-{tag}.bin"))).unwrap() == data);

        let got = site.dir.path().join(format!("down-{tag}.bin"));
        let mut get = vec!["-p", "2", &dst, got.to_str().unwrap()];
        if !level.is_empty() {
            get.insert(0, level);
        }
        ok(&ferry_copy(&site, &proxy, &get), &format!("get {level}"));
        assert!(std::fs::read(&got).unwrap() == data);

        // Third party on one server (two sessions): each side's DTP on the delegated proxy.
        let copy = format!("gsiftp://127.0.0.1:{}/tp-{tag}.bin", site.port);
        let mut tp = vec!["-p", "4", &dst, &copy];
        if !level.is_empty() {
            tp.insert(0, level);
        }
        ok(
            &ferry_copy(&site, &proxy, &tp),
            &format!("third party {level}"),
        );
        assert!(std::fs::read(site.root().join(format!("tp-{tag}.bin"))).unwrap() == data);
    }
}

/// Logs in to the site's ferry server as `user` with the gsi library, through the client's
/// control channel, so a test can hold a data connection of its own.
fn gsi_login(
    rt: &tokio::runtime::Runtime,
    site: &Site,
    cred: ferry_gsi::Credential,
) -> Result<ferry_client::ControlClient, ferry_client::ClientError> {
    rt.block_on(async {
        let addr = format!("127.0.0.1:{}", site.port).parse().unwrap();
        let mut ctl = ferry_client::ControlClient::connect(addr).await?;
        let trust = Arc::new(ferry_gsi::TrustStore::load(&site.cert_dir()).unwrap());
        let mut config = ferry_gsi::ContextConfig::new(cred, trust);
        config.delegation = ferry_gsi::Delegation::Limited;
        ctl.authenticate_gsi(config, &ferry_gsi::Target::Any)
            .await?;
        ctl.login(":globus-mapping:", "dummy").await?;
        Ok(ctl)
    })
}

#[test]
fn a_data_connection_from_another_users_credential_is_refused_and_stores_nothing() {
    let Some(site) = site() else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mapped = ferry_gsi::Credential::load_proxy(&proxy(&site, "Mapped User")).unwrap();
    let mapped_identity = mapped.identity().unwrap();
    let stranger = ferry_gsi::Credential::load_proxy(&proxy(&site, "Stranger")).unwrap();
    let mut ctl = gsi_login(&rt, &site, mapped).unwrap();
    rt.block_on(async {
        ctl.expect_ok(&FtpCommand::Type(TransferType::Image))
            .await
            .unwrap();
        ctl.expect_ok(&FtpCommand::Dcau(Dcau::Self_)).await.unwrap();
        let pasv = ctl.expect_ok(&FtpCommand::Pasv).await.unwrap();
        let addr = ferry_proto::hostport::HostPort::from_pasv_reply(&pasv.text())
            .unwrap()
            .0;
        ctl.send(&FtpCommand::Stor("victim.bin".into()))
            .await
            .unwrap();
        // The stranger's proxy chains to the same CA but is another identity.
        let trust = Arc::new(ferry_gsi::TrustStore::load(&site.cert_dir()).unwrap());
        let prot = ferry_net::DataProtection {
            security: Arc::new(ferry_gsi::DataSecurity::new(stranger, trust).unwrap()),
            check: ferry_gsi::PeerCheck::Subject(mapped_identity.clone()),
            // The session's PROT C: authenticated, then clear.
            protected: false,
        };
        let conn = ferry_net::connect(addr, Default::default()).await.unwrap();
        let secured = conn.secure(true, &prot).await;
        if let Ok(mut c) = secured {
            use tokio::io::AsyncWriteExt;
            let _ = c.write_all(b"stolen bytes").await;
            let _ = c.shutdown().await;
        }
        let mut reply = ctl.read_reply().await.unwrap();
        while reply.is_preliminary() {
            reply = ctl.read_reply().await.unwrap();
        }
        assert!(reply.code == 425 || reply.code == 426, "{reply:?}");
        assert!(
            reply.text().contains("Stranger"),
            "names the intruder: {}",
            reply.text()
        );
    });
    let stored = std::fs::read(site.root().join("victim.bin")).unwrap_or_default();
    assert!(stored.is_empty(), "the stranger's bytes were stored");
}

#[test]
fn an_expired_proxy_is_refused_at_login() {
    let Some(site) = site() else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let user = site.ca().join("users/Mapped User");
    let eec = ferry_gsi::Credential::load_cert_key(
        &user.join("usercert.pem"),
        &user.join("userkey.pem"),
        None,
    )
    .unwrap();
    let options = ferry_gsi::ProxyOptions {
        lifetime: Duration::from_secs(1),
        ..Default::default()
    };
    let expired = ferry_gsi::proxy::create_proxy(&eec, 2048, &options).unwrap();
    // Its end is within the second: wait for the clock to pass it, not for a fixed time.
    while expired.seconds_left().unwrap() >= 0 {
        std::thread::sleep(Duration::from_millis(50));
    }
    let err = gsi_login(&rt, &site, expired).expect_err("an expired proxy logged in");
    let text = err.to_string();
    assert!(
        text.contains("expired") || text.contains("certificate"),
        "{text}"
    );
}

#[test]
fn a_ca_without_a_signing_policy_is_not_trusted() {
    let Some(site) = site() else { return };
    // A client whose CA directory lacks the .signing_policy refuses the server, as Globus does.
    let certs = site.dir.path().join("no-policy");
    std::fs::create_dir(&certs).unwrap();
    for e in std::fs::read_dir(site.cert_dir()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) != Some("signing_policy") {
            std::fs::copy(&p, certs.join(p.file_name().unwrap())).unwrap();
        }
    }
    let proxy = proxy(&site, "Mapped User");
    std::fs::write(site.root().join("f.bin"), b"policy").unwrap();
    let got = site.dir.path().join("got.bin");
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .env("X509_CERT_DIR", &certs)
        .env("X509_USER_PROXY", &proxy)
        .args(["copy", "-q"])
        .arg(format!("gsiftp://localhost:{}/f.bin", site.port))
        .arg(&got)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("signing policy") || err.contains("signing_policy"),
        "{err}"
    );
    assert!(!got.exists() || std::fs::metadata(&got).unwrap().len() == 0);
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn draft_and_legacy_proxies_from_grid_proxy_init_are_accepted() {
    let Some(site) = site() else { return };
    let data = pattern(3 << 20, 41);
    std::fs::write(site.root().join("src.bin"), &data).unwrap();
    let url = format!("gsiftp://localhost:{}/src.bin", site.port);
    for format in ["-draft", "-old"] {
        let proxy = site.dir.path().join(format!("x509up{format}"));
        proxy_from_as(&site.ca(), "Mapped User", &proxy, format);
        let got = site.dir.path().join(format!("got{format}.bin"));
        ok(
            &ferry_copy(&site, &proxy, &["-p", "2", &url, got.to_str().unwrap()]),
            &format!("ferry copy with a {format} proxy"),
        );
        assert!(
            std::fs::read(&got).unwrap() == data,
            "{format}: bytes differ"
        );
    }
    // globus-url-copy with a draft proxy, data channel authenticated with the proxy it
    // delegated. (With -old, Globus' own callback refuses ferry's CA-issued user certificates:
    // their key usage has no certificate signing, and the Globus pair fails the same way.)
    let proxy = site.dir.path().join("x509up-draft");
    let got = site.dir.path().join("guc-draft.bin");
    let dst = format!("file://{}", got.display());
    ok(
        &guc(&site, &proxy, &["-p", "2", &url, &dst]),
        "guc with a -draft proxy",
    );
    assert!(std::fs::read(&got).unwrap() == data);
}

fn running_as_root() -> bool {
    let uid = Command::new("id").arg("-u").output().unwrap().stdout;
    String::from_utf8_lossy(&uid).trim() == "0"
}

#[test]
fn started_as_root_a_session_works_as_its_mapped_account() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Some(site) = site() else { return };
    if !running_as_root() {
        eprintln!("skipping: switching to the mapped account needs a server started as root");
        return;
    }
    let proxy = proxy(&site, "Mapped User");
    let root = site.root();
    // A file only root may read, a directory only root may write, one the account owns.
    std::fs::write(root.join("root-only.bin"), b"not for nobody").unwrap();
    std::fs::set_permissions(
        root.join("root-only.bin"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::create_dir(root.join("closed")).unwrap();
    std::fs::set_permissions(root.join("closed"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let nobody: u32 = String::from_utf8(
        Command::new("id")
            .args(["-u", "nobody"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .parse()
    .unwrap();
    let url = |p: &str| format!("gsiftp://localhost:{}/{p}", site.port);

    let got = site.dir.path().join("stolen.bin");
    let out = ferry_copy(
        &site,
        &proxy,
        &[&url("root-only.bin"), got.to_str().unwrap()],
    );
    assert!(!out.status.success(), "nobody read a root-only file");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"));

    let local = site.dir.path().join("up.bin");
    std::fs::write(&local, pattern(1 << 20, 5)).unwrap();
    let out = ferry_copy(
        &site,
        &proxy,
        &[local.to_str().unwrap(), &url("closed/up.bin")],
    );
    assert!(
        !out.status.success(),
        "nobody wrote into a root-only directory"
    );
    assert!(!root.join("closed/up.bin").exists());

    ok(
        &ferry_copy(
            &site,
            &proxy,
            &["-p", "4", local.to_str().unwrap(), &url("mine.bin")],
        ),
        "put as the mapped account",
    );
    let meta = std::fs::metadata(root.join("mine.bin")).unwrap();
    assert_eq!(
        meta.uid(),
        nobody,
        "the new file belongs to the mapped account"
    );
    assert!(std::fs::read(root.join("mine.bin")).unwrap() == pattern(1 << 20, 5));
}

#[test]
fn many_files_over_cached_protected_data_channels() {
    // A tree copied with --dcpriv: files after the first reuse the session's MODE E
    // connections with their TLS sessions (and runs of small files are pipelined on them).
    let Some(site) = site() else { return };
    let proxy = proxy(&site, "Mapped User");
    let src = site.dir.path().join("tree");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let mut files = Vec::new();
    for i in 0..40u32 {
        let name = if i % 2 == 0 {
            format!("f{i}.bin")
        } else {
            format!("sub/f{i}.bin")
        };
        let len = if i % 13 == 0 {
            3 << 20
        } else {
            1000 + i as usize * 777
        };
        let data = pattern(len, i);
        std::fs::write(src.join(&name), &data).unwrap();
        files.push((name, data));
    }
    for level in ["--dcpriv", ""] {
        let tag = if level.is_empty() { "dcau" } else { "dcpriv" };
        let dst = format!("gsiftp://localhost:{}/up-{tag}/", site.port);
        let srcs = format!("{}/", src.display());
        let mut args = vec!["-r", "--create-dirs", &srcs, &dst];
        if !level.is_empty() {
            args.insert(0, level);
        }
        ok(
            &ferry_copy(&site, &proxy, &args),
            &format!("put tree {level}"),
        );
        let back = site.dir.path().join(format!("back-{tag}"));
        let from = format!("gsiftp://localhost:{}/up-{tag}/", site.port);
        let backs = format!("{}/", back.display());
        let mut args = vec!["-r", "--create-dirs", &from, &backs];
        if !level.is_empty() {
            args.insert(0, level);
        }
        ok(
            &ferry_copy(&site, &proxy, &args),
            &format!("get tree {level}"),
        );
        for (name, data) in &files {
            assert!(
                std::fs::read(site.root().join(format!("up-{tag}")).join(name)).unwrap() == *data,
                "{level} put {name}"
            );
            assert!(
                std::fs::read(back.join(name)).unwrap() == *data,
                "{level} get {name}"
            );
        }
    }
}

#[test]
fn a_server_on_a_user_credential_not_root_is_named_with_its_subject() {
    // As with Globus: a server run by a user on that user's own credential. Clients name the
    // server's DN (-s / --subject), and the grid-mapfile maps to the account it runs as.
    use std::os::unix::fs::PermissionsExt;
    let Some(site) = site() else { return };
    if !running_as_root() {
        eprintln!("skipping: needs root to start the server as nobody");
        return;
    }
    let Some(setpriv) = tool("setpriv") else {
        eprintln!("skipping: needs setpriv (util-linux)");
        return;
    };
    let home = site.dir.path().join("nobody-home");
    std::fs::create_dir(&home).unwrap();
    let user = site.ca().join("users/Mapped User");
    for f in ["usercert.pem", "userkey.pem"] {
        std::fs::copy(user.join(f), home.join(f)).unwrap();
    }
    let chown = |p: &Path| {
        assert!(Command::new("chown")
            .arg("nobody")
            .arg(p)
            .status()
            .unwrap()
            .success());
    };
    chown(&home);
    chown(&home.join("usercert.pem"));
    chown(&home.join("userkey.pem"));
    std::fs::set_permissions(
        home.join("userkey.pem"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::set_permissions(site.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for p in [site.ca(), site.cert_dir()] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let data = pattern(2 << 20, 77);
    std::fs::write(home.join("f.bin"), &data).unwrap();
    chown(&home.join("f.bin"));
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new(setpriv)
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_ferry"))
        .args([
            "serve",
            "--gsi",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--root",
        ])
        .arg(&home)
        .arg("--host-cert")
        .arg(home.join("usercert.pem"))
        .arg("--host-key")
        .arg(home.join("userkey.pem"))
        .arg("--cert-dir")
        .arg(site.cert_dir())
        .arg("--gridmap")
        .arg(site.ca().join("grid-mapfile"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = server.try_wait() {
            let mut err = String::new();
            use std::io::Read;
            server
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("ferry serve as nobody exited {status}: {err}");
        }
        assert!(
            Instant::now() < deadline,
            "ferry serve as nobody did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let proxy = proxy(&site, "Mapped User");
    let dn = String::from_utf8(
        Command::new("openssl")
            .args(["x509", "-noout", "-subject", "-nameopt", "compat", "-in"])
            .arg(home.join("usercert.pem"))
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .trim_start_matches("subject=")
    .to_string();
    let url = format!("gsiftp://localhost:{port}/f.bin");
    let got = site.dir.path().join("from-user-server.bin");
    // Without the subject the host name check fails; with it, the copy works.
    let out = ferry_copy(&site, &proxy, &[&url, got.to_str().unwrap()]);
    assert!(
        !out.status.success(),
        "a user certificate passed as host localhost"
    );
    ok(
        &ferry_copy(
            &site,
            &proxy,
            &["--subject", &dn, "--dcpriv", &url, got.to_str().unwrap()],
        ),
        "ferry copy --subject",
    );
    assert!(std::fs::read(&got).unwrap() == data);
    let got2 = site.dir.path().join("guc-from-user-server.bin");
    let dst = format!("file://{}", got2.display());
    ok(
        &guc(&site, &proxy, &["-s", &dn, &url, &dst]),
        "globus-url-copy -s",
    );
    assert!(std::fs::read(&got2).unwrap() == data);
    let _ = server.kill();
    let _ = server.wait();
}

/// `ferry copy --transport quic` against ferry servers: two-party both ways and third party,
/// with DCAU's GSI handshake and PROT P inside the QUIC streams; the server's transfer log
/// says QUIC carried each one.
#[test]
fn ferry_copy_over_quic_two_and_three_party_at_every_security_level() {
    let Some(site) = site() else { return };
    let proxy = proxy(&site, "Mapped User");
    let data = pattern(9 << 20, 41);
    let local = site.dir.path().join("q-local.bin");
    std::fs::write(&local, &data).unwrap();
    let url = |name: &str| format!("gsiftp://localhost:{}/{name}", site.port);
    for level in ["--no-dcau", "--dcsafe", "--dcpriv"] {
        let tag = level.trim_start_matches('-');
        let up = url(&format!("q-up-{tag}.bin"));
        let got = site.dir.path().join(format!("q-down-{tag}.bin"));
        let tp = format!("gsiftp://127.0.0.1:{}/q-tp-{tag}.bin", site.port);
        let runs: [(&str, &str, Vec<&str>, PathBuf); 3] = [
            (
                "put",
                "4",
                vec![local.to_str().unwrap(), &up],
                site.root().join(format!("q-up-{tag}.bin")),
            ),
            ("get", "1", vec![&up, got.to_str().unwrap()], got.clone()),
            (
                "third party",
                "2",
                vec![&up, &tp],
                site.root().join(format!("q-tp-{tag}.bin")),
            ),
        ];
        for (what, p, ends, written) in runs {
            let mut args = vec![level, "--transport", "quic", "-p", p];
            args.extend(ends);
            ok(
                &ferry_copy(&site, &proxy, &args),
                &format!("quic {what} {level}"),
            );
            assert!(
                std::fs::read(&written).unwrap() == data,
                "quic {what} {level}: bytes differ"
            );
        }
    }
    // globus-url-copy's spelling, `-dcstack quic,gsi`, through ferry url-copy.
    let guc_got = site.dir.path().join("q-url-copy.bin");
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .env("X509_CERT_DIR", site.cert_dir())
        .env("X509_USER_PROXY", &proxy)
        .args(["url-copy", "-dbg", "-dcstack", "quic,gsi", "-p", "2"])
        .arg(url("q-up-dcpriv.bin"))
        .arg(format!("file://{}", guc_got.display()))
        .output()
        .unwrap();
    ok(&out, "ferry url-copy -dcstack quic,gsi");
    // The stack the server was given carries the copy's session key, which both ends of each
    // QUIC connection then proved (the copies above ran bound too).
    let dialogue = String::from_utf8_lossy(&out.stderr);
    let key = dialogue
        .split("SITE SETNETSTACK quic:bind=")
        .nth(1)
        .unwrap_or_else(|| panic!("no session key sent: {dialogue}"));
    assert!(
        key.len() > 64
            && key[..64].bytes().all(|b| b.is_ascii_hexdigit())
            && key[64..].starts_with(",gsi"),
        "{dialogue}"
    );
    assert!(
        std::fs::read(&guc_got).unwrap() == data,
        "url-copy over quic: bytes differ"
    );
    // Four parallel streams as streams of one QUIC connection, each end of it in one process
    // (get) and between two servers (third party), encrypted.
    let shared_got = site.dir.path().join("q-shared.bin");
    let shared_tp = format!("gsiftp://127.0.0.1:{}/q-shared-tp.bin", site.port);
    for (what, ends, written) in [
        (
            "get",
            [
                url("q-up-dcpriv.bin"),
                shared_got.to_str().unwrap().to_string(),
            ],
            shared_got.clone(),
        ),
        (
            "third party",
            [url("q-up-dcpriv.bin"), shared_tp],
            site.root().join("q-shared-tp.bin"),
        ),
    ] {
        let mut args = vec![
            "--dcpriv",
            "--transport",
            "quic:parallel=streams",
            "-p",
            "4",
        ];
        args.extend(ends.iter().map(String::as_str));
        ok(
            &ferry_copy(&site, &proxy, &args),
            &format!("quic streams {what}"),
        );
        assert!(
            std::fs::read(&written).unwrap() == data,
            "quic streams {what}: bytes differ"
        );
    }
    let log = std::fs::read_to_string(site.dir.path().join("transfers.log")).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v["path"].as_str().unwrap_or("").starts_with("/q-"))
        .collect();
    // Per level: the put's STOR, the get's RETR, the third party's RETR and STOR; then
    // url-copy's RETR; then the shared get's RETR and third party's RETR and STOR.
    assert_eq!(lines.len(), 16, "{log}");
    for l in &lines {
        assert_eq!(l["transport"], "quic", "{l}");
        assert_eq!(l["result"], "ok", "{l}");
        assert!(
            l.get("tcp").is_none(),
            "TCP figures for a QUIC transfer: {l}"
        );
    }
}

/// A Globus server has no QUIC: it refuses `SITE SETNETSTACK quic` with its multi-line 500,
/// and `ferry copy --transport quic` fails naming the server and its answer, writing nothing.
#[test]
fn a_globus_server_refuses_quic_and_ferry_copy_says_so_and_writes_nothing() {
    let Some(site) = site() else { return };
    let Some(globus) = globus_gsi(&site) else {
        return;
    };
    let proxy = proxy(&site, "Mapped User");
    let src = globus.root.join("q-src.bin");
    std::fs::write(&src, pattern(1 << 20, 51)).unwrap();
    readable_by_all(&src);
    let got = site.dir.path().join("q-from-globus.bin");
    let out = ferry_copy(
        &site,
        &proxy,
        &[
            "--transport",
            "quic",
            &format!("gsiftp://localhost:{}{}", globus.port, src.display()),
            got.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "localhost:{} refused data channel transport quic: 500",
            globus.port
        )) && err.contains("Setting data channel driver stack failed"),
        "{err}"
    );
    assert!(!got.exists(), "a refused copy wrote {}", got.display());
    eprintln!("Globus' answer, as ferry copy reports it: {err}");
}

/// The server dies (SIGKILL) in the middle of a QUIC get: its control connection drops at
/// once, so `ferry copy` fails within seconds instead of waiting out QUIC's idle timeout, says
/// so, and reports no file copied.
#[test]
fn a_server_killed_mid_quic_transfer_fails_the_copy_and_reports_nothing_done() {
    let Some(mut site) = site() else { return };
    let proxy = proxy(&site, "Mapped User");
    // 3 GiB of zeros on no disk: a sparse file reads as fast as memory.
    let big = site.root().join("sparse.bin");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(3 << 30)
        .unwrap();
    readable_by_all(&big);
    let got = site.dir.path().join("q-killed.bin");
    let child = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .env("X509_CERT_DIR", site.cert_dir())
        .env("X509_USER_PROXY", &proxy)
        .args(["copy", "--retries", "0", "--no-dcau", "--transport", "quic"])
        .arg(format!("gsiftp://localhost:{}/sparse.bin", site.port))
        .arg(&got)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kill the server once bytes are arriving.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(&got).map_or(0, |m| m.len()) < (64 << 20) {
        assert!(Instant::now() < deadline, "no bytes arrived over QUIC");
        std::thread::sleep(Duration::from_millis(20));
    }
    let killed = Instant::now();
    site.server.kill().unwrap();
    site.server.wait().unwrap();
    let out = child.wait_with_output().unwrap();
    let took = killed.elapsed();
    let err = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success(),
        "a copy whose server died succeeded: {err}"
    );
    assert!(err.contains("0 files copied, 1 failed"), "{err}");
    // Not a timing bar: a hang would be QUIC's 30 s idle timeout or more.
    assert!(
        took < Duration::from_secs(25),
        "the copy took {took:?} to notice: {err}"
    );
    assert!(std::fs::metadata(&got).unwrap().len() < 3 << 30);
}

/// Multilink over GSI: every hop logs in to the next with the proxy the hop before delegated
/// to it, DCAU A (and PROT P) on every data channel; a ferry tree with a Globus leaf driven by
/// `ferry copy --to-many`, and a ferry tree driven by globus-url-copy -MC -p 4 -dcpriv.
#[test]
fn multicast_trees_over_gsi_forward_on_delegated_proxies() {
    let Some(site) = site() else { return };
    let Some(globus) = globus_gsi_with(
        &site,
        "globus-mc",
        &["-fs-whitelist", "file,gridftp_multicast"],
    ) else {
        return;
    };
    let proxy = proxy(&site, "Mapped User");
    let data = pattern(9 << 20, 31);
    let local = site.dir.path().join("mc-src.bin");
    std::fs::write(&local, &data).unwrap();
    let second = site.dir.path().join("root2");
    std::fs::create_dir(&second).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&second, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let (mut b, b_port) = serve_gsi(&site.ca(), &second, &[], &site.dir.path().join("b.log"));
    let a_url = |n: &str| format!("gsiftp://localhost:{}/{n}", site.port);
    let b_url = |n: &str| format!("gsiftp://localhost:{b_port}/{n}");
    let g_path = globus.root.join("mc.bin");
    let g_url = format!("gsiftp://localhost:{}{}", globus.port, g_path.display());
    // A → {B, Globus}, A storing too; all three on the user's delegated proxies.
    let out = ferry_copy(
        &site,
        &proxy,
        &[
            "--dcpriv",
            "--fan-out",
            "2",
            "--to-many",
            local.to_str().unwrap(),
            &a_url("mc.bin"),
            &b_url("mc.bin"),
            &g_url,
        ],
    );
    ok(&out, "ferry copy --to-many over gsiftp");
    for path in [site.root().join("mc.bin"), second.join("mc.bin"), g_path] {
        assert!(
            std::fs::read(&path).unwrap() == data,
            "{}: bytes differ",
            path.display()
        );
    }
    // globus-url-copy -MC with four streams into A, which forwards to B.
    std::fs::write(site.root().join("mc-in.bin"), &data).unwrap();
    let mc = site.dir.path().join("mc.txt");
    std::fs::write(&mc, format!("{}\n{}\n", a_url("guc.bin"), b_url("guc.bin"))).unwrap();
    let out = guc(
        &site,
        &proxy,
        &[
            "-p",
            "4",
            "-dcpriv",
            "-MC",
            mc.to_str().unwrap(),
            &a_url("mc-in.bin"),
        ],
    );
    ok(&out, "globus-url-copy -MC over gsiftp");
    for path in [site.root().join("guc.bin"), second.join("guc.bin")] {
        assert!(
            std::fs::read(&path).unwrap() == data,
            "{}: bytes differ",
            path.display()
        );
    }
    let _ = b.kill();
    let _ = b.wait();
}

/// A user who delegated nothing cannot make a node forward to a gsiftp:// server: the node
/// would have only its own host credential to log in with, and it must never act as itself
/// for a user. The refusal names the hop; the node's own copy is written.
#[test]
fn a_forward_without_a_delegated_proxy_is_refused_not_made_as_the_server() {
    let Some(site) = site() else { return };
    let second = site.dir.path().join("root-nd");
    std::fs::create_dir(&second).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&second, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let (mut b, b_port) = serve_gsi(&site.ca(), &second, &[], &site.dir.path().join("nd.log"));
    let local = site.dir.path().join("nd-src.bin");
    std::fs::write(&local, pattern(1 << 20, 5)).unwrap();
    let cred = ferry_gsi::Credential::load_proxy(&proxy(&site, "Mapped User")).unwrap();
    let trust = Arc::new(ferry_gsi::TrustStore::load(&site.cert_dir()).unwrap());
    // DCAU N: without a delegated proxy the node's data channel has only the host credential.
    let options = ferry_client::GsiOptions {
        delegation: ferry_gsi::Delegation::None,
        dcau: false,
        ..Default::default()
    };
    let gsi = ferry_client::GsiSetup::with_credential(options, cred, trust).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let child =
        ferry_proto::multicast::Destination::parse(&format!("gsiftp://localhost:{b_port}/nd.bin"))
            .unwrap();
    let err = rt.block_on(async {
        let url = match ferry_client::Location::parse(&format!("gsiftp://localhost:{}/", site.port))
            .unwrap()
        {
            ferry_client::Location::Remote(u) => u,
            other => panic!("{other:?}"),
        };
        let mut s = ferry_client::RemoteSession::connect(&url, &gsi)
            .await
            .unwrap();
        let req = ferry_client::FileRequest {
            parallelism: 1,
            disk_stack: Some(ferry_proto::multicast::first_hop_stack(Some(""), &[child])),
            ..Default::default()
        };
        s.put(&local, "/nd.bin", &req, &mut |_| {})
            .await
            .unwrap_err()
    });
    let text = err.to_string();
    assert!(
        text.contains(&format!("localhost:{b_port}/nd.bin")) && text.contains("delegate"),
        "the refusal should name the hop and ask for delegation: {text}"
    );
    assert!(
        !second.join("nd.bin").exists(),
        "the hop was written without a delegated proxy"
    );
    let _ = b.kill();
    let _ = b.wait();
}

/// The transfer log's lines for paths starting with `prefix`.
fn logged(log: &Path, prefix: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v["path"].as_str().unwrap_or("").starts_with(prefix))
        .collect()
}

/// globus-url-copy `-udt` (Globus' own UDT driver over Debian's libudt) gets from and puts to
/// a ferry server with DCAU and with privacy: `SITE SETNETSTACK udt,gsi`, then ferry's UDT
/// under the GSI layer. Stream mode both ways, and MODE E with four streams for the put, where
/// globus-url-copy connects. (A MODE E get makes globus-url-copy accept the connections,
/// which its UDT driver never completes: `-udt -p N` hangs against Globus' own server too.)
#[test]
fn globus_url_copy_udt_gets_and_puts_with_a_ferry_server() {
    let Some(site) = site() else { return };
    let proxy = proxy(&site, "Mapped User");
    let data = pattern(12 << 20, 61);
    std::fs::write(site.root().join("u-src.bin"), &data).unwrap();
    let local = site.dir.path().join("u-local.bin");
    std::fs::write(&local, &data).unwrap();
    let url = |name: &str| format!("gsiftp://localhost:{}/{name}", site.port);
    let file = |p: &Path| format!("file://{}", p.display());
    let mut runs = 0;
    for level in ["", "-dcpriv"] {
        let tag = level.trim_start_matches('-');
        let got = site.dir.path().join(format!("u-got-{tag}.bin"));
        let mut get = vec!["-udt"];
        get.extend((!level.is_empty()).then_some(level));
        let (from, to) = (url("u-src.bin"), file(&got));
        get.extend([from.as_str(), to.as_str()]);
        ok(
            &guc(&site, &proxy, &get),
            &format!("globus-url-copy -udt get {level}"),
        );
        assert!(
            std::fs::read(&got).unwrap() == data,
            "get {level}: bytes differ"
        );
        for p in ["1", "4"] {
            let name = format!("u-put-{tag}-{p}.bin");
            let mut put = vec!["-udt"];
            put.extend((!level.is_empty()).then_some(level));
            if p == "4" {
                put.extend(["-p", "4"]);
            }
            let (from, to) = (file(&local), url(&name));
            put.extend([from.as_str(), to.as_str()]);
            ok(
                &guc(&site, &proxy, &put),
                &format!("globus-url-copy -udt put {level} -p {p}"),
            );
            assert!(
                std::fs::read(site.root().join(&name)).unwrap() == data,
                "put {level} -p {p}: bytes differ"
            );
        }
        runs += 3;
    }
    let lines = logged(&site.dir.path().join("transfers.log"), "/u-");
    assert_eq!(lines.len(), runs, "{lines:?}");
    for l in &lines {
        assert_eq!(l["transport"], "udt", "{l}");
        assert_eq!(l["result"], "ok", "{l}");
    }
    assert!(
        lines.iter().any(|l| l["mode"] == "E" && l["streams"] == 4),
        "{lines:?}"
    );
}

/// `ferry copy --transport udt` against Debian's globus-gridftp-server with udt whitelisted,
/// getting and putting, one and four streams, with DCAU and with privacy.
#[test]
fn ferry_copy_over_udt_with_globus_gridftp_server() {
    let Some(site) = site() else { return };
    let Some(globus) = globus_gsi_with(&site, "globus-udt", &["-dc-whitelist", "udt,gsi,tcp"])
    else {
        return;
    };
    let proxy = proxy(&site, "Mapped User");
    let data = pattern(12 << 20, 67);
    let src = globus.root.join("src.bin");
    std::fs::write(&src, &data).unwrap();
    readable_by_all(&src);
    for level in ["--dcsafe", "--dcpriv"] {
        for p in ["1", "4"] {
            let tag = format!("{}{p}", level.trim_start_matches('-'));
            let got = site.dir.path().join(format!("gu-{tag}.bin"));
            let url = format!("gsiftp://localhost:{}{}", globus.port, src.display());
            let args = [
                level,
                "--transport",
                "udt",
                "-p",
                p,
                &url,
                got.to_str().unwrap(),
            ];
            ok(&ferry_copy(&site, &proxy, &args), &format!("udt get {tag}"));
            assert!(
                std::fs::read(&got).unwrap() == data,
                "udt get {tag}: bytes differ"
            );

            let put = globus.root.join(format!("put-{tag}.bin"));
            let url = format!("gsiftp://localhost:{}{}", globus.port, put.display());
            let args = [
                level,
                "--transport",
                "udt",
                "-p",
                p,
                got.to_str().unwrap(),
                &url,
            ];
            ok(&ferry_copy(&site, &proxy, &args), &format!("udt put {tag}"));
            assert!(
                std::fs::read(&put).unwrap() == data,
                "udt put {tag}: bytes differ"
            );
        }
    }
}

/// Servers whose admins made UDT the default (`-dc-default udt,gsi` on Globus, which with `udt`
/// alone runs no GSI on its data channels whatever DCAU says; `--dc-default udt` on ferry, which
/// always applies DCAU). From Globus to ferry a client that names no transport gets UDT, in MODE E with
/// two streams (Globus connects). From ferry to Globus the client says `--transport udt`, and
/// so knows to copy in stream mode with Globus connecting: Globus never completes a MODE E
/// connection it accepts over UDT with GSI.
#[test]
fn third_party_udt_between_ferry_and_globus_servers_defaulting_to_udt() {
    let Some(site) = site() else { return };
    let Some(globus) = globus_gsi_with(
        &site,
        "globus-udt-default",
        &["-dc-whitelist", "udt,gsi,tcp", "-dc-default", "udt,gsi"],
    ) else {
        return;
    };
    let root = site.dir.path().join("ferry-udt-default");
    std::fs::create_dir_all(&root).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let log = site.dir.path().join("udt-default.log");
    let (mut server, port) = serve_gsi(
        &site.ca(),
        &root,
        &["--dc-whitelist", "tcp,udt,gsi", "--dc-default", "udt"],
        &log,
    );
    let proxy = proxy(&site, "Mapped User");
    let data = pattern(10 << 20, 71);
    let at_globus = globus.root.join("at-globus.bin");
    std::fs::write(&at_globus, &data).unwrap();
    readable_by_all(&at_globus);
    let out = ferry_copy(
        &site,
        &proxy,
        &[
            "-p",
            "2",
            &format!("gsiftp://localhost:{}{}", globus.port, at_globus.display()),
            &format!("gsiftp://localhost:{port}/from-globus.bin"),
        ],
    );
    ok(&out, "third party Globus to ferry");
    assert!(
        std::fs::read(root.join("from-globus.bin")).unwrap() == data,
        "Globus to ferry: bytes differ"
    );
    let to_globus = globus.root.join("from-ferry.bin");
    let out = ferry_copy(
        &site,
        &proxy,
        &[
            "--transport",
            "udt",
            &format!("gsiftp://localhost:{port}/from-globus.bin"),
            &format!("gsiftp://localhost:{}{}", globus.port, to_globus.display()),
        ],
    );
    ok(&out, "third party ferry to Globus");
    assert!(
        std::fs::read(&to_globus).unwrap() == data,
        "ferry to Globus: bytes differ"
    );
    let _ = server.kill();
    let _ = server.wait();
    let lines = logged(&log, "/from-");
    assert_eq!(lines.len(), 2, "{lines:?}");
    for l in &lines {
        assert_eq!(l["transport"], "udt", "{l}");
        assert_eq!(l["result"], "ok", "{l}");
    }
}

/// ferry to ferry over UDT: a put with four streams, a get, and a third-party copy between two
/// sessions of the same server, with privacy; MODE E throughout (ferry servers say
/// `UDT PARALLEL`), the transfer log says `udt`.
#[test]
fn ferry_copy_over_udt_to_a_ferry_server_two_and_three_party() {
    let Some(site) = site() else { return };
    let proxy = proxy(&site, "Mapped User");
    let data = pattern(9 << 20, 83);
    let local = site.dir.path().join("fu-local.bin");
    std::fs::write(&local, &data).unwrap();
    let url = |name: &str| format!("gsiftp://localhost:{}/{name}", site.port);
    let got = site.dir.path().join("fu-got.bin");
    let tp = format!("gsiftp://127.0.0.1:{}/fu-tp.bin", site.port);
    let (up, down) = (url("fu-up.bin"), got.to_str().unwrap().to_string());
    let runs: [(&str, &str, [&str; 2], PathBuf); 3] = [
        (
            "put",
            "4",
            [local.to_str().unwrap(), &up],
            site.root().join("fu-up.bin"),
        ),
        ("get", "2", [&up, &down], got.clone()),
        (
            "third party",
            "2",
            [&up, &tp],
            site.root().join("fu-tp.bin"),
        ),
    ];
    for (what, p, ends, written) in runs {
        let mut args = vec!["--dcpriv", "--transport", "udt", "-p", p];
        args.extend(ends);
        ok(&ferry_copy(&site, &proxy, &args), &format!("udt {what}"));
        assert!(
            std::fs::read(&written).unwrap() == data,
            "udt {what}: bytes differ"
        );
    }
    let lines = logged(&site.dir.path().join("transfers.log"), "/fu-");
    assert_eq!(lines.len(), 4, "{lines:?}");
    for l in &lines {
        assert_eq!(l["transport"], "udt", "{l}");
        assert_eq!(l["mode"], "E", "{l}");
        assert_eq!(l["result"], "ok", "{l}");
    }
}
