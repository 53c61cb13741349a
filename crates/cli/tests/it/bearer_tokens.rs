//! Bearer tokens on the HTTPS door, end to end: a local issuer serving its OpenID
//! configuration and key set over HTTPS (with a CA of its own, which the server trusts through
//! `SSL_CERT_FILE`), tokens minted by `scitokens-create` (Debian's scitokens-cpp) with the
//! issuer's key, and curl and gfal2 presenting them. Every refusal is checked to have read and
//! written nothing.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use openssl::bn::{BigNum, BigNumContext};
use openssl::ec::{EcGroup, EcKey};
use openssl::nid::Nid;
use openssl::pkey::Private;
use openssl::ssl::{SslAcceptor, SslFiletype, SslMethod};
use serde_json::{json, Value};

use crate::common::https::{
    is_root, path_str, require_tool, whoami, HttpsSite, Login, SiteOptions,
};
use crate::common::{random_bytes, write_file};

/// The audience the site's issuers are configured with.
pub(crate) const AUDIENCE: &str = "https://ferry.test";

/// A token issuer on loopback: `https://localhost:PORT/issuer/one`.
pub(crate) struct Issuer {
    pub(crate) url: String,
    key: EcKey<Private>,
    key_pem: PathBuf,
    pub_pem: PathBuf,
    pub(crate) ca_cert: PathBuf,
    fetches: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    port: u16,
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn b64(b: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(b)
}

impl Issuer {
    /// Starts an issuer whose files (CA, key) live in `dir`.
    pub(crate) fn start(dir: &Path) -> Issuer {
        let ca = dir.join("issuer-ca");
        let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(["ca", path_str(&ca), "--host", "localhost", "--days", "2"])
            .output()
            .expect("ferry ca");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
        let key = EcKey::generate(&group).unwrap();
        let key_pem = dir.join("issuer-key.pem");
        let pub_pem = dir.join("issuer-pub.pem");
        std::fs::write(&key_pem, key.private_key_to_pem().unwrap()).unwrap();
        std::fs::write(&pub_pem, key.public_key_to_pem().unwrap()).unwrap();
        let (mut x, mut y) = (BigNum::new().unwrap(), BigNum::new().unwrap());
        key.public_key()
            .affine_coordinates(&group, &mut x, &mut y, &mut BigNumContext::new().unwrap())
            .unwrap();
        let jwks = json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "key1", "use": "sig",
            "alg": "ES256", "x": b64(&x.to_vec_padded(32).unwrap()),
            "y": b64(&y.to_vec_padded(32).unwrap())}]})
        .to_string();

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let url = format!("https://localhost:{port}/issuer/one");
        let config = json!({"issuer": url, "jwks_uri": format!("{url}/jwks")}).to_string();
        let host = ca.join("hosts/localhost");
        let mut acceptor = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls()).unwrap();
        acceptor
            .set_certificate_chain_file(host.join("hostcert.pem"))
            .unwrap();
        acceptor
            .set_private_key_file(host.join("hostkey.pem"), SslFiletype::PEM)
            .unwrap();
        let acceptor = Arc::new(acceptor.build());
        let (fetches, stop) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (f, s) = (Arc::clone(&fetches), Arc::clone(&stop));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (acceptor, f) = (Arc::clone(&acceptor), Arc::clone(&f));
                let (config, jwks) = (config.clone(), jwks.clone());
                std::thread::spawn(move || {
                    let Ok(mut tls) = acceptor.accept(conn) else {
                        return;
                    };
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && tls.read(&mut byte).unwrap_or(0) == 1 {
                        head.push(byte[0]);
                    }
                    let line = String::from_utf8_lossy(&head);
                    let path = line.split(' ').nth(1).unwrap_or("");
                    let (status, body) = match path {
                        "/issuer/one/.well-known/openid-configuration" => ("200 OK", config),
                        "/issuer/one/jwks" => {
                            f.fetch_add(1, Ordering::SeqCst);
                            ("200 OK", jwks)
                        }
                        _ => ("404 Not Found", "{}".to_string()),
                    };
                    let _ = write!(
                        tls,
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = tls.shutdown();
                });
            }
        });
        Issuer {
            url,
            key,
            key_pem,
            pub_pem,
            ca_cert: ca.join("ca/cacert.pem"),
            fetches,
            stop,
            port,
        }
    }

    /// A WLCG token from `scitokens-create`, signed by this issuer's key as `kid`, for `scope`
    /// and `aud`, as `issuer` (this one's URL unless another is named).
    fn mint(&self, tool: &Path, kid: &str, issuer: Option<&str>, scope: &str, aud: &str) -> String {
        let out = Command::new(tool)
            .arg("--cred")
            .arg(&self.pub_pem)
            .arg("--key")
            .arg(&self.key_pem)
            .args(["--keyid", kid, "--issuer", issuer.unwrap_or(&self.url)])
            .args(["--profile", "wlcg"])
            .args([
                "--claim",
                &format!("scope={scope}"),
                "--claim",
                &format!("aud={aud}"),
            ])
            .output()
            .expect("running scitokens-create");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A token signed here (ES256, or unsigned with `alg: none`), for the claims
    /// scitokens-create cannot write (times in the past or the future).
    pub(crate) fn sign(&self, alg: &str, claims: Value) -> String {
        let signed = format!(
            "{}.{}",
            b64(json!({"alg": alg, "kid": "key1", "typ": "JWT"})
                .to_string()
                .as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        if alg == "none" {
            return format!("{signed}.");
        }
        let digest =
            openssl::hash::hash(openssl::hash::MessageDigest::sha256(), signed.as_bytes()).unwrap();
        let sig = openssl::ecdsa::EcdsaSig::sign(&digest, &self.key).unwrap();
        let mut raw = sig.r().to_vec_padded(32).unwrap();
        raw.extend(sig.s().to_vec_padded(32).unwrap());
        format!("{signed}.{}", b64(&raw))
    }

    /// WLCG claims from this issuer valid from `from` to `to` seconds from now.
    pub(crate) fn claims(&self, scope: &str, from: i64, to: i64) -> Value {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        json!({"iss": self.url, "sub": "robot", "aud": AUDIENCE, "wlcg.ver": "1.0",
               "iat": now + from, "nbf": now + from, "exp": now + to, "jti": "t", "scope": scope})
    }
}

/// A site whose door trusts `issuer` (and a second issuer that cannot be reached), its
/// bearers working as the account password users get.
fn site_trusting(issuer: &Issuer) -> HttpsSite {
    let account = if is_root() {
        "nobody".to_owned()
    } else {
        whoami()
    };
    let config = format!(
        "[[tokens.issuer]]\nurl = \"{}\"\naudiences = [\"{AUDIENCE}\"]\naccount = \"{account}\"\n\n\
         [[tokens.issuer]]\nurl = \"https://localhost:1/unreachable\"\naudiences = [\"{AUDIENCE}\"]\n\
         account = \"{account}\"\n",
        issuer.url
    );
    HttpsSite::start_with(SiteOptions {
        config,
        env: vec![("SSL_CERT_FILE".into(), path_str(&issuer.ca_cert).to_owned())],
        ..SiteOptions::default()
    })
}

fn tools() -> Option<(PathBuf, PathBuf)> {
    Some((
        require_tool("scitokens-create", "scitokens-cpp")?,
        require_tool("curl", "curl")?,
    ))
}

#[test]
fn scopes_decide_what_a_bearer_reads_and_writes_and_nothing_more() {
    let Some((mint, curl)) = tools() else { return };
    let site_dir = crate::common::Sandbox::new();
    let issuer = Issuer::start(site_dir.path());
    let site = site_trusting(&issuer);
    let data = random_bytes(200_000, 41);
    site.put_local("data/run1.bin", &data);
    site.put_local("foobar/secret.bin", b"not yours");
    site.put_local("up/old.bin", b"old");
    site.mkdir_local("up");

    let read = issuer.mint(
        &mint,
        "key1",
        None,
        "storage.read:/data storage.read:/foo",
        AUDIENCE,
    );
    let got = site.curl(&curl, Login::Bearer(&read), &[], "/data/run1.bin");
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.body, data);
    // Fetched at start (or by the first token, if it came first), then kept.
    let fetched = issuer.fetches.load(Ordering::SeqCst);
    assert!((1..=2).contains(&fetched), "{fetched} fetches");
    // /foo does not grant /foobar; a path with `..` is refused before any scope is asked.
    let r = site.curl(
        &curl,
        Login::Bearer(&read),
        &[],
        "/data/../foobar/secret.bin",
    );
    assert_eq!(r.status, 400, "{}", r.text());
    for path in ["/foobar/secret.bin", "/foobar"] {
        let r = site.curl(&curl, Login::Bearer(&read), &[], path);
        assert_eq!(r.status, 403, "{path}: {}", r.text());
        assert!(
            r.text().contains("storage.read"),
            "the 403 names the scope: {}",
            r.text()
        );
    }
    // Reading does not write.
    let local = site.dir().join("new.bin");
    write_file(&local, b"new bytes");
    let put = ["-T", path_str(&local)];
    let r = site.curl(&curl, Login::Bearer(&read), &put, "/data/new.bin");
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(!site.path("data/new.bin").exists());

    // storage.create writes new files, never over old ones, and never deletes.
    let create = issuer.mint(&mint, "key1", None, "storage.create:/up", AUDIENCE);
    let r = site.curl(&curl, Login::Bearer(&create), &put, "/up/new.bin");
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        std::fs::read(site.path("up/new.bin")).unwrap(),
        b"new bytes"
    );
    let r = site.curl(&curl, Login::Bearer(&create), &put, "/up/old.bin");
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(std::fs::read(site.path("up/old.bin")).unwrap(), b"old");
    let r = site.curl(
        &curl,
        Login::Bearer(&create),
        &["-X", "DELETE"],
        "/up/old.bin",
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(site.path("up/old.bin").exists());
    let r = site.curl(&curl, Login::Bearer(&create), &[], "/up/new.bin");
    assert_eq!(r.status, 403, "create does not read: {}", r.text());

    // storage.modify overwrites and deletes, but does not read.
    let modify = issuer.mint(&mint, "key1", None, "storage.modify:/up", AUDIENCE);
    let r = site.curl(&curl, Login::Bearer(&modify), &put, "/up/old.bin");
    assert_eq!(r.status, 204, "{}", r.text());
    let r = site.curl(&curl, Login::Bearer(&modify), &[], "/up/old.bin");
    assert_eq!(r.status, 403, "modify does not read: {}", r.text());
    let r = site.curl(
        &curl,
        Login::Bearer(&modify),
        &["-X", "DELETE"],
        "/up/old.bin",
    );
    assert_eq!(r.status, 204, "{}", r.text());
    assert!(!site.path("up/old.bin").exists());
    let got = || {
        site.transfer_log()
            .into_iter()
            .any(|l| l["path"] == "/data/run1.bin" && l["command"] == "GET")
    };
    assert!(site.eventually(got), "{:?}", site.transfer_log());
    let r = site.curl(&curl, Login::Bearer(&read), &["-I"], "/data/run1.bin");
    assert_eq!(r.status, 200, "HEAD: {}", r.text());
    assert_eq!(
        issuer.fetches.load(Ordering::SeqCst),
        fetched,
        "no key fetched again"
    );
}

#[test]
fn refused_tokens_get_401_with_the_reason_and_touch_nothing() {
    let Some((mint, curl)) = tools() else { return };
    let site_dir = crate::common::Sandbox::new();
    let issuer = Issuer::start(site_dir.path());
    let site = site_trusting(&issuer);
    site.put_local("data/f.bin", b"payload");
    let scope = "storage.read:/ storage.modify:/";
    let elsewhere = format!("{}/two", issuer.url);
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "expired",
            issuer.sign("ES256", issuer.claims(scope, -1200, -600)),
            "expired",
        ),
        (
            "not yet valid",
            issuer.sign("ES256", issuer.claims(scope, 600, 1200)),
            "not valid",
        ),
        (
            "alg none",
            issuer.sign("none", issuer.claims(scope, -10, 600)),
            "algorithm",
        ),
        (
            "wrong issuer",
            issuer.mint(&mint, "key1", Some(&elsewhere), scope, AUDIENCE),
            "not trusted",
        ),
        (
            "wrong audience",
            issuer.mint(&mint, "key1", None, scope, "https://other.test"),
            "audience",
        ),
        (
            "any audience",
            issuer.mint(
                &mint,
                "key1",
                None,
                scope,
                "https://wlcg.cern.ch/jwt/v1/any",
            ),
            "audience",
        ),
        (
            "unknown key",
            issuer.mint(&mint, "key9", None, scope, AUDIENCE),
            "no key",
        ),
        (
            "issuer unreachable",
            issuer.mint(
                &mint,
                "key1",
                Some("https://localhost:1/unreachable"),
                scope,
                AUDIENCE,
            ),
            "could not be fetched",
        ),
        ("not a JWT", "opaque-token".to_string(), "malformed"),
    ];
    let local = site.dir().join("x.bin");
    write_file(&local, b"should never land");
    for (what, token, reason) in &cases {
        for (args, path) in [
            (vec![], "/data/f.bin"),
            (vec!["-T", path_str(&local)], "/data/x.bin"),
        ] {
            let r = site.curl(&curl, Login::Bearer(token), &args, path);
            assert_eq!(r.status, 401, "{what}: {} {}", r.text(), r.run.describe());
            let challenge = r.header("www-authenticate").unwrap_or_default();
            assert!(challenge.contains("invalid_token"), "{what}: {challenge}");
            assert!(r.text().contains(reason), "{what}: {}", r.text());
            assert!(
                !r.text().contains(&token[..token.len().min(20)]) || token.len() < 20,
                "{what}: the token is echoed"
            );
        }
    }
    assert!(!site.path("data/x.bin").exists(), "a refused token wrote");
    assert_eq!(std::fs::read(site.path("data/f.bin")).unwrap(), b"payload");
    // An unknown key id fetched the keys again, at most once a minute whatever comes.
    let before = issuer.fetches.load(Ordering::SeqCst);
    for _ in 0..3 {
        let t = issuer.mint(&mint, "key7", None, scope, AUDIENCE);
        assert_eq!(
            site.curl(&curl, Login::Bearer(&t), &[], "/data/f.bin")
                .status,
            401
        );
    }
    assert!(issuer.fetches.load(Ordering::SeqCst) <= before + 1);
    assert!(
        !site.server_log().contains(&cases[3].1),
        "a token went into the log"
    );
}

#[test]
fn gfal2_copies_with_bearer_token_alone() {
    let Some((mint, _)) = tools() else { return };
    let Some(gfal) = crate::https_door::Gfal::find(&["gfal-copy"]) else {
        return;
    };
    let site_dir = crate::common::Sandbox::new();
    let issuer = Issuer::start(site_dir.path());
    let site = site_trusting(&issuer);
    let token = issuer.mint(
        &mint,
        "key1",
        None,
        "storage.read:/ storage.create:/gf",
        AUDIENCE,
    );
    let data = random_bytes((3 << 20) + 5, 43);
    let local = site.dir().join("g.bin");
    write_file(&local, &data);
    site.mkdir_local("gf");
    let remote = site.davs("/gf/g.bin");
    let file_url = |p: &Path| format!("file://{}", p.display());
    let env = [("BEARER_TOKEN", token.as_str())];
    gfal.run_with(&site, 0, &[&file_url(&local), &remote], &env)
        .assert_ok();
    assert_eq!(std::fs::read(site.path("gf/g.bin")).unwrap(), data);
    let back = site.dir().join("g.back");
    gfal.run_with(&site, 0, &[&remote, &file_url(&back)], &env)
        .assert_ok();
    assert_eq!(std::fs::read(&back).unwrap(), data);
}

#[test]
fn gfal2_has_the_door_pull_with_the_token_it_forwards() {
    let Some((mint, _)) = tools() else { return };
    let Some(gfal) = crate::https_door::Gfal::find(&["gfal-copy"]) else {
        return;
    };
    let site_dir = crate::common::Sandbox::new();
    let issuer = Issuer::start(site_dir.path());
    let site = site_trusting(&issuer);
    let token = issuer.mint(
        &mint,
        "key1",
        None,
        "storage.read:/data storage.modify:/tpc",
        AUDIENCE,
    );
    let data = random_bytes((6 << 20) + 3, 47);
    site.put_local("data/src.bin", &data);
    site.mkdir_local("tpc");
    let env = [("BEARER_TOKEN", token.as_str())];
    // gfal2 sends COPY to the destination with Source, TransferHeaderAuthorization: Bearer and
    // Credential: none; the door GETs the source (itself) with the forwarded token.
    let run = gfal.run_with(
        &site,
        0,
        &[
            "--copy-mode",
            "pull",
            "-K",
            "ADLER32",
            &site.davs("/data/src.bin"),
            &site.davs("/tpc/pulled.bin"),
        ],
        &env,
    );
    run.assert_ok();
    assert_eq!(std::fs::read(site.path("tpc/pulled.bin")).unwrap(), data);
    assert!(
        site.transfer_log()
            .iter()
            .any(|l| l["command"] == "COPY-PULL" && l["path"] == "/tpc/pulled.bin"),
        "{:?}",
        site.transfer_log()
    );
    // A token without the right to write there: refused before anything moves.
    let reader = issuer.mint(&mint, "key1", None, "storage.read:/data", AUDIENCE);
    let run = gfal.run_with(
        &site,
        0,
        &[
            "--copy-mode",
            "pull",
            &site.davs("/data/src.bin"),
            &site.davs("/tpc/refused.bin"),
        ],
        &[("BEARER_TOKEN", reader.as_str())],
    );
    assert!(!run.ok(), "{}", run.describe());
    assert!(!site.path("tpc/refused.bin").exists());
}

#[test]
fn a_group_mapped_token_without_scopes_works_with_its_accounts_rights() {
    let Some((_, curl)) = tools() else { return };
    let site_dir = crate::common::Sandbox::new();
    let issuer = Issuer::start(site_dir.path());
    // As root, bearers of /vo/prod work as `daemon` and the rest as `nobody`, so the owner of
    // what a PUT writes shows which account the mapping chose.
    let (mapped, other) = if is_root() {
        ("daemon".to_owned(), "nobody".to_owned())
    } else {
        (whoami(), whoami())
    };
    let config = format!(
        "[[tokens.issuer]]\nurl = \"{}\"\naudiences = [\"{AUDIENCE}\"]\naccount = \"{other}\"\n\
         restricted-paths = [\"/prod\"]\n\n\
         [[tokens.issuer.map]]\ngroup = \"/vo/prod\"\naccount = \"{mapped}\"\ngroup-access = true\n",
        issuer.url
    );
    let site = HttpsSite::start_with(SiteOptions {
        config,
        env: vec![("SSL_CERT_FILE".into(), path_str(&issuer.ca_cert).to_owned())],
        ..SiteOptions::default()
    });
    let prod = site.mkdir_local("prod");
    site.mkdir_local("other");
    site.put_local("other/secret.bin", b"not in prod");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prod, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let with_groups = |scope: &str, groups: Value| {
        let mut c = issuer.claims(scope, -10, 600);
        c["wlcg.groups"] = groups;
        issuer.sign("ES256", c)
    };
    let data = random_bytes(300_000, 43);
    let local = site.dir().join("up.bin");
    write_file(&local, &data);
    let put = ["-T", path_str(&local)];

    // A group-only token (no storage scope): the mapped account's rights, inside the
    // restricted path.
    let group = with_groups("openid offline_access", json!(["/vo", "/vo/prod"]));
    let r = site.curl(&curl, Login::Bearer(&group), &put, "/prod/run.bin");
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(std::fs::read(site.path("prod/run.bin")).unwrap(), data);
    if is_root() {
        use std::os::unix::fs::MetadataExt;
        let owner = std::fs::metadata(site.path("prod/run.bin")).unwrap().uid();
        assert_eq!(
            owner,
            crate::common::https::uid_of(&mapped),
            "written as the mapped account"
        );
    }
    let r = site.curl(&curl, Login::Bearer(&group), &[], "/prod/run.bin");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, data);
    let r = site.curl(&curl, Login::Bearer(&group), &[], "/other/secret.bin");
    assert_eq!(r.status, 403, "outside the restricted path: {}", r.text());

    // The same group with a storage scope: the scope decides.
    let scoped = with_groups("storage.read:/prod", json!(["/vo/prod"]));
    let r = site.curl(&curl, Login::Bearer(&scoped), &put, "/prod/second.bin");
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(!site.path("prod/second.bin").exists());

    // A group the admin did not map, and no scope: nothing.
    let stranger = with_groups("openid", json!(["/vo"]));
    let r = site.curl(&curl, Login::Bearer(&stranger), &[], "/prod/run.bin");
    assert_eq!(r.status, 403, "{}", r.text());
}
