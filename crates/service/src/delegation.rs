//! FTS3's delegation: the service makes a key and a certificate request, the user signs a
//! proxy for that key with their own credential and sends it back with their chain, and the
//! service keeps the proxy to act for them. The private key never leaves the service.

use ferry_gsi::{Credential, TrustStore, VerifyOptions};
use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::rsa::Rsa;
use openssl::x509::{X509Name, X509Req, X509};
use sha1::{Digest, Sha1};

use crate::ServiceError;

/// The delegation id of a user, as FTS3 derives it from the DN: the first 16 hex digits of
/// its SHA-1.
pub fn id_for(dn: &str) -> String {
    hex::encode(Sha1::digest(dn.as_bytes()))[..16].to_owned()
}

/// A new key and a request for it: `(key PEM, request PEM)`.
pub fn new_request() -> Result<(String, String), ServiceError> {
    let key = PKey::from_rsa(Rsa::generate(2048)?)?;
    let mut name = X509Name::builder()?;
    name.append_entry_by_text("CN", "proxy")?;
    let name = name.build();
    let mut req = X509Req::builder()?;
    req.set_version(0)?;
    req.set_subject_name(&name)?;
    req.set_pubkey(&key)?;
    req.sign(&key, MessageDigest::sha256())?;
    let key_pem = String::from_utf8(key.private_key_to_pem_pkcs8()?)
        .map_err(|_| ServiceError::Tls("a key that is not text".into()))?;
    let req_pem = String::from_utf8(req.build().to_pem()?)
        .map_err(|_| ServiceError::Tls("a request that is not text".into()))?;
    Ok((key_pem, req_pem))
}

/// A delegated credential that passed: the proxy file to keep (certificate, key, chain, as
/// Globus writes proxies) and when it ends.
#[derive(Debug)]
pub struct Accepted {
    /// The proxy file.
    pub proxy_pem: String,
    /// Seconds since the epoch.
    pub termination: i64,
}

/// Checks a delegated chain against the pending key and the caller: the first certificate
/// must be for `key_pem`'s key, the chain must verify, and its identity must be `dn`.
pub fn accept(
    body: &[u8],
    key_pem: &str,
    dn: &str,
    trust: &TrustStore,
) -> Result<Accepted, ServiceError> {
    let bad = |m: String| ServiceError::BadRequest(m);
    let certs = X509::stack_from_pem(body).map_err(|e| {
        bad(format!(
            "the credential is not a PEM certificate chain: {e}"
        ))
    })?;
    let Some((leaf, chain)) = certs.split_first() else {
        return Err(bad("the credential holds no certificate".into()));
    };
    let key = PKey::private_key_from_pem(key_pem.as_bytes())?;
    let leaf_key = leaf.public_key()?;
    if !leaf_key.public_eq(&key) {
        return Err(bad(
            "the certificate is not for the key of this delegation's request: ask for a new request and sign that".into(),
        ));
    }
    let verified = trust
        .verify(leaf, chain, VerifyOptions::default())
        .map_err(|e| {
            ServiceError::Forbidden(format!("the delegated chain is not accepted: {e}"))
        })?;
    if !ferry_gsi::dn::same(verified.identity(), dn) {
        return Err(ServiceError::Forbidden(format!(
            "the delegated chain is {}'s, not the caller's ({dn})",
            verified.identity()
        )));
    }
    let credential = Credential::new(leaf.clone(), key, chain.to_vec())
        .map_err(|e| bad(format!("the delegated chain cannot be used: {e}")))?;
    let proxy_pem = String::from_utf8(
        credential
            .to_proxy_pem()
            .map_err(|e| bad(format!("the delegated chain cannot be kept: {e}")))?,
    )
    .map_err(|_| bad("a proxy that is not text".into()))?;
    Ok(Accepted {
        proxy_pem,
        termination: verified.not_after(),
    })
}

/// What a user's client does with a request: signs a proxy for its key with `issuer` and
/// returns the proxy followed by the issuer's chain, the body of `PUT …/credential`.
pub fn sign_request(
    issuer: &Credential,
    request_pem: &[u8],
    lifetime: std::time::Duration,
) -> Result<Vec<u8>, ServiceError> {
    let req = X509Req::from_pem(request_pem).map_err(|e| {
        ServiceError::BadRequest(format!(
            "the service's request is not a PEM certificate request: {e}"
        ))
    })?;
    let key = req.public_key()?;
    if !req.verify(&key)? {
        return Err(ServiceError::BadRequest(
            "the service's request is not signed by its key".into(),
        ));
    }
    let options = ferry_gsi::ProxyOptions {
        lifetime,
        ..ferry_gsi::ProxyOptions::default()
    };
    let proxy = ferry_gsi::proxy::sign_proxy(issuer, &key, &options)
        .map_err(|e| ServiceError::Tls(format!("cannot sign a proxy: {e}")))?;
    let mut out = proxy.to_pem()?;
    for c in issuer.certs() {
        out.extend_from_slice(&c.to_pem()?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_gsi::{CertificateAuthority, IssueSpec};

    #[test]
    fn a_proxy_signed_for_the_request_is_kept_and_others_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::create("/O=Test/CN=Test CA", 2, 2048).unwrap();
        ca.install(dir.path()).unwrap();
        let trust = TrustStore::load(dir.path()).unwrap();
        let user = ca.issue(&IssueSpec::user("/O=Test/CN=Alice", 1)).unwrap();
        let dn = user.identity().unwrap();
        let (key, req) = new_request().unwrap();
        let body =
            sign_request(&user, req.as_bytes(), std::time::Duration::from_secs(3600)).unwrap();
        let ok = accept(&body, &key, &dn, &trust).unwrap();
        let back = Credential::from_proxy_pem(ok.proxy_pem.as_bytes()).unwrap();
        assert_eq!(back.identity().unwrap(), dn);
        assert!(ok.termination > 0);

        // Someone else's chain for the same key.
        let bob = ca.issue(&IssueSpec::user("/O=Test/CN=Bob", 1)).unwrap();
        let body_bob =
            sign_request(&bob, req.as_bytes(), std::time::Duration::from_secs(3600)).unwrap();
        let e = accept(&body_bob, &key, &dn, &trust).unwrap_err();
        assert!(
            matches!(e, ServiceError::Forbidden(ref m) if m.contains("not the caller's")),
            "{e}"
        );
        // A proxy for another key.
        let (other_key, _) = new_request().unwrap();
        let e = accept(&body, &other_key, &dn, &trust).unwrap_err();
        assert!(e.to_string().contains("not for the key"), "{e}");
        // Garbage.
        let e = accept(b"hello", &key, &dn, &trust).unwrap_err();
        assert!(matches!(e, ServiceError::BadRequest(_)), "{e}");
        // A chain from a CA the service does not trust.
        let other_ca = CertificateAuthority::create("/O=Else/CN=Else CA", 2, 2048).unwrap();
        let mallory = other_ca
            .issue(&IssueSpec::user("/O=Test/CN=Alice", 1))
            .unwrap();
        let body_m = sign_request(
            &mallory,
            req.as_bytes(),
            std::time::Duration::from_secs(3600),
        )
        .unwrap();
        let e = accept(&body_m, &key, &dn, &trust).unwrap_err();
        assert!(matches!(e, ServiceError::Forbidden(_)), "{e}");
    }

    #[test]
    fn delegation_ids_follow_the_dn() {
        assert_eq!(id_for("/O=Test/CN=Alice").len(), 16);
        assert_eq!(id_for("/O=Test/CN=Alice"), id_for("/O=Test/CN=Alice"));
        assert_ne!(id_for("/O=Test/CN=Alice"), id_for("/O=Test/CN=Bob"));
    }
}
