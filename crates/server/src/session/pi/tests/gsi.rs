//! A whole GSI login in memory: a test CA, the real `ferry_gsi` AUTH/ADAT exchange, and every
//! later line wrapped both ways.

use std::sync::Arc;

use ferry_gsi::SecurityContext;

use super::pair::Pair;
use crate::ServerConfig;

/// A CA, a host credential, a user credential and a grid-mapfile in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    user: ferry_gsi::Credential,
    trust: Arc<ferry_gsi::TrustStore>,
}

impl Pki {
    const USER_DN: &'static str = "/O=ferry test/CN=Alice";

    fn new() -> Pki {
        use ferry_gsi::ca::{save_pair, CertificateAuthority, IssueSpec};
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = CertificateAuthority::create("/O=ferry test/CN=Test CA", 1, 2048).expect("CA");
        let certs = dir.path().join("certificates");
        ca.install(&certs).expect("install the CA");
        let host = ca
            .issue(&IssueSpec::host("/O=ferry test", "localhost", 1))
            .expect("host credential");
        save_pair(dir.path(), "hostcert.pem", "hostkey.pem", &host).expect("save host");
        let user = ca
            .issue(&IssueSpec::user(Pki::USER_DN, 1))
            .expect("user credential");
        let gridmap = format!("\"{}\" alice\n", Pki::USER_DN);
        std::fs::write(dir.path().join("grid-mapfile"), gridmap).expect("gridmap");
        let trust = Arc::new(ferry_gsi::TrustStore::load(&certs).expect("trust store"));
        Pki { dir, user, trust }
    }

    fn configure(&self, c: &mut ServerConfig) {
        let d = self.dir.path();
        c.gsi = true;
        c.anonymous = false;
        c.host_cert = Some(d.join("hostcert.pem"));
        c.host_key = Some(d.join("hostkey.pem"));
        c.cert_dir = Some(d.join("certificates"));
        c.gridmap = Some(d.join("grid-mapfile"));
    }
}

#[test]
fn a_gsi_login_protects_every_later_line_and_opens_dcau_and_prot() {
    use base64::engine::general_purpose::STANDARD as B64;
    use base64::Engine;
    let pki = Pki::new();
    let mut p = Pair::with(|c| pki.configure(c));
    p.expect("FEAT", 530);
    p.expect("AUTH GSSAPI", 334);
    let config = ferry_gsi::ContextConfig::new(pki.user.clone(), Arc::clone(&pki.trust));
    let (mut ctx, mut token) = SecurityContext::initiator(config).expect("initiator");
    loop {
        let r = p.line(&format!("ADAT {}", B64.encode(&token)));
        let r = r.last().expect("a reply").clone();
        let answer = r
            .text()
            .trim()
            .strip_prefix("ADAT=")
            .map(|t| B64.decode(t).unwrap());
        match (r.code, answer) {
            (335, Some(t)) => match ctx.step(&t).expect("a step") {
                ferry_gsi::Step::Continue(next) | ferry_gsi::Step::Done(Some(next)) => token = next,
                other => panic!("the exchange stalled: {other:?}"),
            },
            (235, last) => {
                if let Some(t) = last {
                    ctx.step(&t).expect("the last step");
                }
                break;
            }
            _ => panic!("ADAT refused: {r:?}"),
        }
    }
    assert!(ctx.is_established());
    p.client_gss = Some(ctx);
    let r = p.expect("USER :globus-mapping:", 331);
    assert_eq!(r.text(), "Password required for alice.");
    p.expect("PASS dummy", 230);
    // After a GSI login data channels default to DCAU A; the client may name a subject.
    p.expect("PASV", 227);
    p.expect("RETR f", 226);
    assert_eq!(
        p.last_transfer().security.dcau,
        ferry_proto::command::Dcau::Self_
    );
    p.expect("DCAU S /O=ferry test/CN=Peer", 200);
    p.expect("PBSZ 1048576", 200);
    p.expect("PROT P", 200);
    p.expect("RETR f", 226);
    let sec = &p.last_transfer().security;
    assert_eq!(
        sec.dcau,
        ferry_proto::command::Dcau::Subject("/O=ferry test/CN=Peer".into())
    );
    assert_eq!(sec.prot, ferry_proto::command::Protection::Private);
    // A line in clear on a protected session is refused, and the session goes on.
    p.send_clear = true;
    p.expect("NOOP", 533);
    p.expect("NOOP", 200);
}
