//! Chain verification: what is accepted and every way a chain is refused.

use crate::common;

use common::{proxy_of, Pki, BASE};
use ferry_gsi::{
    CertKind, CertificateAuthority, IssueSpec, ProxyOptions, ProxyPolicy, TrustStore, VerifyOptions,
};

#[test]
fn a_user_proxy_verifies_to_the_user_identity() {
    let pki = Pki::new();
    let proxy = pki.proxy();
    let v = pki
        .trust()
        .verify(&proxy.cert, &proxy.chain, VerifyOptions::default())
        .unwrap();
    assert_eq!(v.identity(), format!("{BASE}/CN=Test User"));
    assert!(v.subject().starts_with(&format!("{BASE}/CN=Test User/CN=")));
    assert_eq!(v.chain().len(), 3, "proxy, user, CA");
    assert!(!v.limited());
    assert!(matches!(
        proxy.kind().unwrap(),
        CertKind::Proxy {
            policy: ProxyPolicy::Impersonation,
            ..
        }
    ));
}

#[test]
fn a_proxy_of_a_proxy_verifies_and_keeps_the_identity() {
    let pki = Pki::new();
    let second = proxy_of(&pki.proxy(), &ProxyOptions::default());
    let v = pki
        .trust()
        .verify(&second.cert, &second.chain, VerifyOptions::default())
        .unwrap();
    assert_eq!(v.identity(), format!("{BASE}/CN=Test User"));
    assert_eq!(v.chain().len(), 4);
}

#[test]
fn limited_proxies_are_refused_where_not_allowed() {
    let pki = Pki::new();
    let limited = proxy_of(
        &pki.user,
        &ProxyOptions {
            limited: true,
            ..ProxyOptions::default()
        },
    );
    let trust = pki.trust();
    assert!(trust
        .verify(&limited.cert, &limited.chain, VerifyOptions::default())
        .unwrap()
        .limited());
    let strict = VerifyOptions {
        allow_limited: false,
        ..VerifyOptions::default()
    };
    let e = trust
        .verify(&limited.cert, &limited.chain, strict)
        .unwrap_err()
        .to_string();
    assert!(e.contains("limited"), "{e}");
    // A proxy signed by a limited proxy is limited too.
    let below = proxy_of(&limited, &ProxyOptions::default());
    assert!(below.is_limited().unwrap());
}

#[test]
fn an_expired_proxy_is_refused() {
    let pki = Pki::new();
    let mut user_expired = IssueSpec::user(&format!("{BASE}/CN=Old User"), 1);
    user_expired.not_before = -7200;
    user_expired.not_after = -3600;
    let old = pki.ca.issue(&user_expired).unwrap();
    let e = pki
        .trust()
        .verify(&old.cert, &old.chain, VerifyOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("expired"), "{e}");
}

#[test]
fn a_not_yet_valid_certificate_is_refused() {
    let pki = Pki::new();
    let mut spec = IssueSpec::user(&format!("{BASE}/CN=Future User"), 1);
    spec.not_before = 3600;
    let future = pki.ca.issue(&spec).unwrap();
    let e = pki
        .trust()
        .verify(&future.cert, &future.chain, VerifyOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("not yet valid"), "{e}");
}

#[test]
fn a_certificate_from_an_untrusted_ca_is_refused() {
    let pki = Pki::new();
    let rogue = CertificateAuthority::create(&format!("{BASE}/CN=Throwaway CA"), 30, 2048).unwrap();
    let user = rogue
        .issue(&IssueSpec::user(&format!("{BASE}/CN=Test User"), 30))
        .unwrap();
    let e = pki
        .trust()
        .verify(&user.cert, &user.chain, VerifyOptions::default())
        .unwrap_err();
    assert!(matches!(e, ferry_gsi::GsiError::Untrusted { .. }), "{e}");
}

#[test]
fn a_proxy_signed_with_the_wrong_key_is_refused() {
    let pki = Pki::new();
    let mut forged = pki.proxy();
    // Same subject and issuer name, but signed by another user's key.
    let other = pki
        .ca
        .issue(&IssueSpec::user(&format!("{BASE}/CN=Other"), 30))
        .unwrap();
    let key = openssl::pkey::PKey::from_rsa(openssl::rsa::Rsa::generate(2048).unwrap()).unwrap();
    let wrong_signer = ferry_gsi::Credential {
        cert: pki.user.cert.clone(),
        key: other.key.clone(),
        chain: vec![],
    };
    forged.cert =
        ferry_gsi::proxy::sign_proxy(&wrong_signer, &key, &ProxyOptions::default()).unwrap();
    let e = pki
        .trust()
        .verify(&forged.cert, &forged.chain, VerifyOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("signature"), "{e}");
}

#[test]
fn a_missing_signing_policy_is_refused_unless_not_required() {
    let pki = Pki::new();
    for entry in std::fs::read_dir(pki.cert_dir()).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "signing_policy") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let trust = TrustStore::load(&pki.cert_dir()).unwrap();
    let e = trust
        .verify(&pki.user.cert, &[], VerifyOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("signing policy") && e.contains("missing"), "{e}");
    let lax = VerifyOptions {
        require_signing_policy: false,
        ..VerifyOptions::default()
    };
    assert!(trust.verify(&pki.user.cert, &[], lax).is_ok());
}

#[test]
fn a_subject_outside_the_signing_policy_is_refused() {
    let pki = Pki::new();
    let outsider = pki
        .ca
        .issue(&IssueSpec::user("/O=Elsewhere/CN=Mallory", 30))
        .unwrap();
    let e = pki
        .trust()
        .verify(&outsider.cert, &[], VerifyOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("may not sign /O=Elsewhere/CN=Mallory"), "{e}");
}

#[test]
fn an_over_long_chain_is_refused() {
    let pki = Pki::new();
    let mut cred = pki.proxy();
    for _ in 0..ferry_gsi::trust::MAX_CHAIN_DEPTH {
        cred = proxy_of(&cred, &ProxyOptions::default());
    }
    let e = pki
        .trust()
        .verify(&cred.cert, &cred.chain, VerifyOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("longer than") || e.contains("too long"), "{e}");
}

#[test]
fn a_proxy_path_length_limit_is_enforced() {
    let pki = Pki::new();
    let last = proxy_of(
        &pki.user,
        &ProxyOptions {
            path_len: Some(0),
            ..ProxyOptions::default()
        },
    );
    let below = proxy_of(&last, &ProxyOptions::default());
    let e = pki
        .trust()
        .verify(&below.cert, &below.chain, VerifyOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("path length"), "{e}");
}

#[test]
fn proxy_files_round_trip_with_mode_600() {
    use std::os::unix::fs::PermissionsExt;
    let pki = Pki::new();
    let proxy = pki.proxy();
    let path = pki.dir.path().join("x509up");
    proxy.save_proxy(&path).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let back = ferry_gsi::Credential::load_proxy(&path).unwrap();
    assert_eq!(back.cert.to_der().unwrap(), proxy.cert.to_der().unwrap());
    assert_eq!(back.chain.len(), 1);
    assert_eq!(back.identity().unwrap(), format!("{BASE}/CN=Test User"));
    assert!(back.seconds_left().unwrap() > 11 * 3600);
}

/// `openssl ca -gencrl` for the test CA, revoking `revoked` (or nothing), as `<hash>.r0`.
fn install_crl(pki: &Pki, revoked: Option<&ferry_gsi::Credential>, days: &str) {
    let work = pki.dir.path().join("ca-db");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    pki.ca.save(&work).unwrap();
    std::fs::write(work.join("index.txt"), "").unwrap();
    std::fs::write(work.join("crlnumber"), "01\n").unwrap();
    let conf = format!(
        "[ca]\ndefault_ca = t\n[t]\ndatabase = {0}/index.txt\ncrlnumber = {0}/crlnumber\n\
         certificate = {0}/cacert.pem\nprivate_key = {0}/cakey.pem\ndefault_md = sha256\n\
         default_crl_days = 1\n",
        work.display()
    );
    std::fs::write(work.join("ca.cnf"), conf).unwrap();
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let cnf = work.join("ca.cnf");
    if let Some(cred) = revoked {
        let pem = work.join("revoked.pem");
        std::fs::write(&pem, cred.cert.to_pem().unwrap()).unwrap();
        openssl(&[
            "ca",
            "-config",
            cnf.to_str().unwrap(),
            "-revoke",
            pem.to_str().unwrap(),
        ]);
    }
    let hash = format!("{:08x}", pki.ca.cert.subject_name_hash());
    let crl = pki.cert_dir().join(format!("{hash}.r0"));
    let mut args = vec![
        "ca",
        "-config",
        cnf.to_str().unwrap(),
        "-gencrl",
        "-out",
        crl.to_str().unwrap(),
    ];
    if days == "0" {
        // Already past its next update: -crlhours 0 is refused, so backdate with -crl_lastupdate.
        args.extend([
            "-crl_lastupdate",
            "20000101000000Z",
            "-crl_nextupdate",
            "20000102000000Z",
        ]);
    }
    openssl(&args);
}

#[test]
fn a_revoked_certificate_is_refused_and_an_unrevoked_one_passes_the_crl() {
    let pki = Pki::new();
    let proxy = pki.proxy();
    install_crl(&pki, None, "1");
    pki.trust()
        .verify(&proxy.cert, &proxy.chain, VerifyOptions::default())
        .expect("a CRL that lists nothing refuses nothing");
    install_crl(&pki, Some(&pki.user), "1");
    let err = pki
        .trust()
        .verify(&proxy.cert, &proxy.chain, VerifyOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("revoked"), "{err}");
}

#[test]
fn an_expired_crl_is_an_error_not_a_pass() {
    let pki = Pki::new();
    install_crl(&pki, None, "0");
    let proxy = pki.proxy();
    let err = pki
        .trust()
        .verify(&proxy.cert, &proxy.chain, VerifyOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("CRL") && err.contains("expired"), "{err}");
}
