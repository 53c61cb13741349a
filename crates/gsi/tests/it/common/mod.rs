//! A throw-away PKI in a temporary directory: a CA installed in a trusted-CA directory, a user,
//! a host and a proxy.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use ferry_gsi::{CertificateAuthority, Credential, IssueSpec, ProxyOptions, TrustStore};

pub const BASE: &str = "/O=Grid/OU=Ferry Test";

pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: CertificateAuthority,
    pub user: Credential,
    pub host: Credential,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca =
            CertificateAuthority::create(&format!("{BASE}/CN=Throwaway CA"), 30, 2048).unwrap();
        ca.install(&dir.path().join("certificates")).unwrap();
        let user = ca
            .issue(&IssueSpec::user(&format!("{BASE}/CN=Test User"), 30))
            .unwrap();
        let host = ca.issue(&IssueSpec::host(BASE, "localhost", 30)).unwrap();
        Pki {
            dir,
            ca,
            user,
            host,
        }
    }

    pub fn cert_dir(&self) -> PathBuf {
        self.dir.path().join("certificates")
    }

    pub fn trust(&self) -> Arc<TrustStore> {
        Arc::new(TrustStore::load(&self.cert_dir()).unwrap())
    }

    /// An impersonation proxy of the user, 12 hours.
    pub fn proxy(&self) -> Credential {
        proxy_of(&self.user, &ProxyOptions::default())
    }
}

pub fn proxy_of(issuer: &Credential, options: &ProxyOptions) -> Credential {
    let key = openssl::pkey::PKey::from_rsa(openssl::rsa::Rsa::generate(2048).unwrap()).unwrap();
    let cert = ferry_gsi::proxy::sign_proxy(issuer, &key, options).unwrap();
    let mut chain = vec![issuer.cert.clone()];
    chain.extend(issuer.chain.iter().cloned());
    Credential::new(cert, key, chain).unwrap()
}
