//! A throw-away certification authority, for tests and for first-time users (`ferry ca`):
//! a CA certificate, host and user certificates it signs, and the trusted-CA directory entry
//! (`<hash>.0` and `<hash>.signing_policy`) that Globus tools and ferry read.

use std::path::Path;

use ferry_proto::clock::unix_now;
use openssl::asn1::{Asn1Integer, Asn1Time};
use openssl::bn::{BigNum, MsbOption};
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::rsa::Rsa;
use openssl::x509::extension::{
    AuthorityKeyIdentifier, BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAlternativeName,
    SubjectKeyIdentifier,
};
use openssl::x509::{X509Name, X509NameBuilder, X509};

use crate::credential::Credential;
use crate::dn;
use crate::error::{GsiError, Result};

mod site;

pub use site::{make_site, Issued, Site, SiteSpec};

/// A CA that can sign host and user certificates.
#[derive(Clone)]
pub struct CertificateAuthority {
    /// The self-signed CA certificate.
    pub cert: X509,
    /// Its key.
    pub key: PKey<Private>,
}

/// What a certificate the CA issues should hold.
#[derive(Debug, Clone)]
pub struct IssueSpec {
    /// Subject, one-line form (`/O=Grid/CN=Jane Doe`).
    pub subject: String,
    /// subjectAltName DNS names.
    pub dns: Vec<String>,
    /// subjectAltName IP addresses.
    pub ips: Vec<String>,
    /// Valid from this many seconds from now (negative: in the past).
    pub not_before: i64,
    /// Valid until this many seconds from now (negative: already expired).
    pub not_after: i64,
    /// RSA key size.
    pub bits: u32,
    /// Extended key usages: host certificates get serverAuth and clientAuth, users clientAuth.
    pub server: bool,
}

impl IssueSpec {
    /// A user certificate valid for `days`.
    pub fn user(subject: &str, days: u32) -> IssueSpec {
        IssueSpec {
            subject: subject.into(),
            dns: Vec::new(),
            ips: Vec::new(),
            not_before: -300,
            not_after: i64::from(days) * 86_400,
            bits: 2048,
            server: false,
        }
    }

    /// A host certificate for `host` (CN and DNS name), valid for `days`.
    pub fn host(base: &str, host: &str, days: u32) -> IssueSpec {
        let mut s = IssueSpec::user(&format!("{base}/CN={host}"), days);
        if host.parse::<std::net::IpAddr>().is_ok() {
            s.ips.push(host.into());
        } else {
            s.dns.push(host.into());
        }
        s.server = true;
        s
    }
}

impl CertificateAuthority {
    /// Makes a new self-signed CA.
    pub fn create(subject: &str, days: u32, bits: u32) -> Result<CertificateAuthority> {
        let key = PKey::from_rsa(Rsa::generate(bits)?)?;
        let name = parse_dn(subject)?;
        let mut b = X509::builder()?;
        b.set_version(2)?;
        let serial = random_serial()?;
        b.set_serial_number(&serial)?;
        b.set_subject_name(&name)?;
        b.set_issuer_name(&name)?;
        b.set_pubkey(&key)?;
        let (from, until) = (
            Asn1Time::from_unix(unix_now() - 300)?,
            Asn1Time::days_from_now(days)?,
        );
        b.set_not_before(&from)?;
        b.set_not_after(&until)?;
        b.append_extension(BasicConstraints::new().critical().ca().build()?)?;
        b.append_extension(
            KeyUsage::new()
                .critical()
                .key_cert_sign()
                .crl_sign()
                .build()?,
        )?;
        let ski = SubjectKeyIdentifier::new().build(&b.x509v3_context(None, None))?;
        b.append_extension(ski)?;
        b.sign(&key, MessageDigest::sha256())?;
        Ok(CertificateAuthority {
            cert: b.build(),
            key,
        })
    }

    /// The CA's one-line DN.
    pub fn subject(&self) -> String {
        dn::one_line(self.cert.subject_name())
    }

    /// Issues a certificate and its key.
    pub fn issue(&self, spec: &IssueSpec) -> Result<Credential> {
        let key = PKey::from_rsa(Rsa::generate(spec.bits)?)?;
        let now = unix_now();
        let mut b = X509::builder()?;
        b.set_version(2)?;
        let serial = random_serial()?;
        b.set_serial_number(&serial)?;
        let subject = parse_dn(&spec.subject)?;
        b.set_subject_name(&subject)?;
        b.set_issuer_name(self.cert.subject_name())?;
        b.set_pubkey(&key)?;
        let from = Asn1Time::from_unix(now + spec.not_before)?;
        let until = Asn1Time::from_unix(now + spec.not_after)?;
        b.set_not_before(&from)?;
        b.set_not_after(&until)?;
        b.append_extension(BasicConstraints::new().critical().build()?)?;
        b.append_extension(crate::proxy::end_entity_key_usage()?)?;
        let mut eku = ExtendedKeyUsage::new();
        eku.client_auth();
        if spec.server {
            eku.server_auth();
        }
        b.append_extension(eku.build()?)?;
        if !spec.dns.is_empty() || !spec.ips.is_empty() {
            let mut san = SubjectAlternativeName::new();
            for d in &spec.dns {
                san.dns(d);
            }
            for ip in &spec.ips {
                san.ip(ip);
            }
            let ext = san.build(&b.x509v3_context(Some(&*self.cert), None))?;
            b.append_extension(ext)?;
        }
        let aki = AuthorityKeyIdentifier::new()
            .keyid(true)
            .build(&b.x509v3_context(Some(&*self.cert), None))?;
        b.append_extension(aki)?;
        b.sign(&self.key, MessageDigest::sha256())?;
        Credential::new(b.build(), key, Vec::new())
    }

    /// The signing policy that lets this CA sign subjects under its own DN's parent
    /// (`/O=Grid/OU=Test/CN=CA` signs `/O=Grid/OU=Test/*`).
    pub fn signing_policy(&self) -> String {
        let ca = self.subject();
        let base = ca.rsplit_once('/').map(|(b, _)| b).unwrap_or("");
        format!(
            "# Signing policy for {ca}, written by ferry ca.\n\
             access_id_CA   X509   '{ca}'\n\
             pos_rights     globus CA:sign\n\
             cond_subjects  globus '\"{base}/*\"'\n"
        )
    }

    /// Writes `<hash>.0` and `<hash>.signing_policy` into a trusted-CA directory.
    pub fn install(&self, cert_dir: &Path) -> Result<String> {
        std::fs::create_dir_all(cert_dir).map_err(|e| GsiError::file(cert_dir, e))?;
        let hash = format!("{:08x}", self.cert.subject_name_hash());
        let write = |name: String, bytes: &[u8]| {
            let path = cert_dir.join(name);
            std::fs::write(&path, bytes).map_err(|e| GsiError::file(&path, e))
        };
        write(format!("{hash}.0"), &self.cert.to_pem()?)?;
        write(
            format!("{hash}.signing_policy"),
            self.signing_policy().as_bytes(),
        )?;
        Ok(hash)
    }

    /// Loads a CA saved by [`CertificateAuthority::save`].
    pub fn load(dir: &Path) -> Result<CertificateAuthority> {
        let cred =
            Credential::load_cert_key(&dir.join("cacert.pem"), &dir.join("cakey.pem"), None)?;
        Ok(CertificateAuthority {
            cert: cred.cert,
            key: cred.key,
        })
    }

    /// Saves the CA's certificate and key (mode 600) in `dir`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        save_pair(
            dir,
            "cacert.pem",
            "cakey.pem",
            &Credential::new(self.cert.clone(), self.key.clone(), Vec::new())?,
        )
    }
}

/// Writes a credential as a certificate file and a key file (mode 600).
pub fn save_pair(dir: &Path, cert: &str, key: &str, cred: &Credential) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir).map_err(|e| GsiError::file(dir, e))?;
    let cert_path = dir.join(cert);
    std::fs::write(&cert_path, cred.cert.to_pem()?).map_err(|e| GsiError::file(&cert_path, e))?;
    let key_path = dir.join(key);
    let _ = std::fs::remove_file(&key_path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&key_path)
        .map_err(|e| GsiError::file(&key_path, e))?;
    f.write_all(&cred.key.private_key_to_pem_pkcs8()?)
        .map_err(|e| GsiError::file(&key_path, e))
}

fn random_serial() -> Result<Asn1Integer> {
    let mut bn = BigNum::new()?;
    bn.rand(63, MsbOption::MAYBE_ZERO, false)?;
    Ok(Asn1Integer::from_bn(&bn)?)
}

/// Parses a one-line DN (`/O=Grid/OU=Test/CN=Jane Doe`) into a name.
pub fn parse_dn(text: &str) -> Result<X509Name> {
    let body = text
        .strip_prefix('/')
        .ok_or_else(|| GsiError::decode("DN", format!("{text:?} does not start with /")))?;
    let mut b = X509NameBuilder::new()?;
    for part in body.split('/') {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| GsiError::decode("DN", format!("{part:?} is not KEY=value")))?;
        b.append_entry_by_text(key, value)
            .map_err(|e| GsiError::decode("DN", format!("{key}={value}: {e}")))?;
    }
    Ok(b.build())
}
