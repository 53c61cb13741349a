//! What a proxy's policy language does to a chain: impersonation and limited proxies stand for
//! the user, an independent proxy for itself, any other language is refused.

use openssl::pkey::PKey;
use openssl::rsa::Rsa;

use super::*;
use crate::ca::{CertificateAuthority, IssueSpec};
use crate::credential::Credential;
use crate::der;
use crate::gridmap::{Authorizer, GridMap};
use crate::proxy::ProxyOptions;
use crate::target::Target;

const BASE: &str = "/O=Grid/OU=Ferry Test";
/// 1.2.3.4, a policy language nobody defined.
const OID_UNKNOWN: &[u8] = &[0x2a, 3, 4];

struct Pki {
    _dir: tempfile::TempDir,
    ca: CertificateAuthority,
    trust: TrustStore,
    user: Credential,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca =
            CertificateAuthority::create(&format!("{BASE}/CN=Throwaway CA"), 30, 2048).unwrap();
        ca.install(&dir.path().join("certificates")).unwrap();
        let trust = TrustStore::load(&dir.path().join("certificates")).unwrap();
        let user = ca
            .issue(&IssueSpec::user(&format!("{BASE}/CN=Test User"), 30))
            .unwrap();
        Pki {
            _dir: dir,
            ca,
            trust,
            user,
        }
    }

    fn verify(&self, cred: &Credential) -> Result<Verified> {
        self.trust
            .verify(&cred.cert, &cred.chain, VerifyOptions::default())
    }
}

/// A proxy of `issuer` with the given ProxyCertInfo policy language.
fn proxy_with(issuer: &Credential, language: &[u8]) -> Credential {
    let key = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
    let cert =
        crate::proxy::sign_with_language(issuer, &key, &ProxyOptions::default(), language).unwrap();
    chained(issuer, cert, key)
}

/// A proxy of `issuer` as ferry signs them (delegation, `ferry proxy`).
fn ferry_proxy(issuer: &Credential, limited: bool) -> Credential {
    let key = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
    let options = ProxyOptions {
        limited,
        ..ProxyOptions::default()
    };
    let cert = crate::proxy::sign_proxy(issuer, &key, &options).unwrap();
    chained(issuer, cert, key)
}

fn chained(issuer: &Credential, cert: X509, key: PKey<openssl::pkey::Private>) -> Credential {
    let mut chain = vec![issuer.cert.clone()];
    chain.extend(issuer.chain.iter().cloned());
    Credential::new(cert, key, chain).unwrap()
}

fn policy(cred: &Credential) -> ProxyPolicy {
    match cred.kind().unwrap() {
        CertKind::Proxy { policy, .. } => policy,
        other => panic!("not a proxy: {other:?}"),
    }
}

#[test]
fn impersonation_and_limited_proxies_authenticate_as_the_user() {
    let pki = Pki::new();
    let user_dn = pki.user.identity().unwrap();
    for language in [der::OID_INHERIT_ALL, der::OID_LIMITED] {
        let p = proxy_with(&pki.user, language);
        let v = pki.verify(&p).unwrap();
        assert_eq!(v.identity(), user_dn);
        assert_eq!(
            v.identity_cert().to_der().unwrap(),
            pki.user.cert.to_der().unwrap()
        );
        assert_eq!(v.limited(), language == der::OID_LIMITED);
        assert_eq!(p.identity().unwrap(), user_dn);
    }
}

#[test]
fn an_independent_proxy_is_its_own_identity() {
    let pki = Pki::new();
    let user_dn = pki.user.identity().unwrap();
    let p = proxy_with(&pki.user, der::OID_INDEPENDENT);
    assert_eq!(policy(&p), ProxyPolicy::Independent);
    let v = pki.verify(&p).unwrap();
    assert_eq!(v.identity(), p.subject());
    assert!(!dn::same(v.identity(), &user_dn), "{}", v.identity());
    assert_eq!(
        v.identity_cert().to_der().unwrap(),
        p.cert.to_der().unwrap()
    );
    assert_eq!(p.identity().unwrap(), p.subject());
    // The grid-mapfile is asked about the proxy, not the user it came from.
    let users_line = GridMap::parse(&format!("\"{user_dn}\" jane\n")).unwrap();
    let e = users_line.authorize(v.identity(), None).unwrap_err();
    assert!(matches!(e, GsiError::NotAuthorized(_)), "{e}");
    let proxy_line = GridMap::parse(&format!("\"{}\" robot\n", p.subject())).unwrap();
    assert_eq!(proxy_line.authorize(v.identity(), None).unwrap(), "robot");
    // Nor does it pass for the user where a peer expects the user's DN.
    let e = Target::Subject(user_dn).check(&v).unwrap_err();
    assert!(matches!(e, GsiError::WrongPeer { .. }), "{e}");
}

#[test]
fn proxies_below_an_independent_proxy_take_its_identity() {
    let pki = Pki::new();
    let independent = proxy_with(&pki.user, der::OID_INDEPENDENT);
    // What ferry delegates from such a credential is an impersonation proxy of it.
    let delegated = ferry_proxy(&independent, false);
    assert_eq!(policy(&delegated), ProxyPolicy::Impersonation);
    let v = pki.verify(&delegated).unwrap();
    assert_eq!(v.identity(), independent.subject());
    assert_eq!(v.chain().len(), 4, "proxy, independent proxy, user, CA");
    assert_eq!(delegated.identity().unwrap(), independent.subject());
}

#[test]
fn an_independent_host_proxy_does_not_pass_for_the_hosts_names() {
    let pki = Pki::new();
    let mut spec = IssueSpec::host(BASE, "gridftp.example", 30);
    spec.dns.push("alias.example".into());
    let host = pki.ca.issue(&spec).unwrap();
    let alias = Target::Host {
        name: "alias.example".into(),
        ip: None,
    };
    alias
        .check(&pki.verify(&ferry_proxy(&host, false)).unwrap())
        .unwrap();
    // The proxy carries no subjectAltName of its own, and its first CN is not the alias.
    let independent = pki
        .verify(&proxy_with(&host, der::OID_INDEPENDENT))
        .unwrap();
    let e = alias.check(&independent).unwrap_err();
    assert!(matches!(e, GsiError::WrongPeer { .. }), "{e}");
}

#[test]
fn an_unknown_policy_language_is_refused() {
    let pki = Pki::new();
    let restricted = proxy_with(&pki.user, OID_UNKNOWN);
    assert_eq!(
        policy(&restricted),
        ProxyPolicy::Restricted("1.2.3.4".into())
    );
    let e = pki.verify(&restricted).unwrap_err();
    match &e {
        GsiError::UnsupportedProxyPolicy { subject, language } => {
            assert_eq!(subject, &restricted.subject());
            assert_eq!(language, "1.2.3.4");
        }
        other => panic!("{other}"),
    }
    assert_eq!(e.reason(), "proxy_policy");
    assert!(e.to_string().contains("1.2.3.4"), "{e}");
    // Nor is it laundered by an impersonation proxy below it.
    let below = ferry_proxy(&restricted, false);
    assert!(matches!(
        pki.verify(&below).unwrap_err(),
        GsiError::UnsupportedProxyPolicy { .. }
    ));
}

#[test]
fn ferry_signs_only_impersonation_and_limited_proxies() {
    let pki = Pki::new();
    let full = ferry_proxy(&pki.user, false);
    assert_eq!(policy(&full), ProxyPolicy::Impersonation);
    assert_eq!(policy(&ferry_proxy(&pki.user, true)), ProxyPolicy::Limited);
    // Below a limited proxy, limited whatever was asked.
    let limited = ferry_proxy(&pki.user, true);
    assert_eq!(policy(&ferry_proxy(&limited, false)), ProxyPolicy::Limited);
    // Below an independent proxy, impersonation of it: never independent again.
    let independent = proxy_with(&pki.user, der::OID_INDEPENDENT);
    assert_eq!(
        policy(&ferry_proxy(&independent, false)),
        ProxyPolicy::Impersonation
    );
}
