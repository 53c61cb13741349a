//! A credential: a certificate, its private key and the chain above it, loaded from the
//! places GSI tools look and saved as proxy files they read.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ferry_proto::clock::unix_now;
use openssl::pkey::{PKey, Private};
use openssl::x509::{X509Ref, X509};

use crate::certkind::{self as proxy, CertKind};
use crate::dn;
use crate::error::{GsiError, Result};

/// A certificate with its key and the certificates above it (leaf first, CA not included).
#[derive(Clone)]
pub struct Credential {
    /// The certificate whose key we hold.
    pub cert: X509,
    /// Its private key.
    pub key: PKey<Private>,
    /// The issuers from the leaf's signer upward, as sent in a TLS handshake.
    pub chain: Vec<X509>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("subject", &self.subject())
            .field("chain", &self.chain.len())
            .finish_non_exhaustive()
    }
}

/// Where a credential came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// A proxy file (certificate, key and chain in one PEM file).
    Proxy(PathBuf),
    /// A certificate file and a key file.
    CertAndKey(PathBuf, PathBuf),
}

impl std::fmt::Display for CredentialSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialSource::Proxy(p) => write!(f, "proxy {}", p.display()),
            CredentialSource::CertAndKey(c, k) => write!(f, "{} and {}", c.display(), k.display()),
        }
    }
}

impl Credential {
    /// Builds a credential from PEM: the certificate file may carry the chain after the leaf.
    pub fn from_pem(
        cert_pem: &[u8],
        key_pem: &[u8],
        passphrase: Option<&[u8]>,
    ) -> Result<Credential> {
        let mut certs = X509::stack_from_pem(cert_pem)
            .map_err(|e| GsiError::decode("PEM certificate", e))?
            .into_iter();
        let cert = certs
            .next()
            .ok_or_else(|| GsiError::decode("PEM certificate", "no certificate"))?;
        // Without a passphrase OpenSSL would prompt on the terminal itself; say so instead.
        if passphrase.is_none() && String::from_utf8_lossy(key_pem).contains("ENCRYPTED") {
            return Err(GsiError::decode(
                "private key",
                "the key is encrypted; give its passphrase",
            ));
        }
        let key = match passphrase {
            Some(p) => PKey::private_key_from_pem_passphrase(key_pem, p),
            None => PKey::private_key_from_pem(key_pem),
        }
        .map_err(|e| GsiError::decode("private key", e))?;
        Credential::new(cert, key, certs.collect())
    }

    /// Builds a credential after checking that the key belongs to the certificate.
    pub fn new(cert: X509, key: PKey<Private>, chain: Vec<X509>) -> Result<Credential> {
        if !cert.public_key()?.public_eq(&key) {
            return Err(GsiError::decode(
                "credential",
                format!(
                    "the private key does not belong to {}",
                    dn::one_line(cert.subject_name())
                ),
            ));
        }
        Ok(Credential { cert, key, chain })
    }

    /// Reads a proxy file: certificate, private key, then the chain, in any PEM order after
    /// the first certificate.
    pub fn from_proxy_pem(pem: &[u8]) -> Result<Credential> {
        Credential::from_pem(pem, pem, None)
    }

    /// Loads a proxy file.
    pub fn load_proxy(path: &Path) -> Result<Credential> {
        let pem = std::fs::read(path).map_err(|e| GsiError::file(path, e))?;
        Credential::from_proxy_pem(&pem)
            .map_err(|e| GsiError::decode(path.display().to_string(), e))
    }

    /// Loads a certificate file and a key file, refusing a key others can read, as Globus does.
    pub fn load_cert_key(cert: &Path, key: &Path, passphrase: Option<&[u8]>) -> Result<Credential> {
        let cert_pem = std::fs::read(cert).map_err(|e| GsiError::file(cert, e))?;
        let meta = std::fs::metadata(key).map_err(|e| GsiError::file(key, e))?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(GsiError::file(
                key,
                std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    "private key is readable by others; chmod 600 it",
                ),
            ));
        }
        let key_pem = std::fs::read(key).map_err(|e| GsiError::file(key, e))?;
        Credential::from_pem(&cert_pem, &key_pem, passphrase)
            .map_err(|e| GsiError::decode(cert.display().to_string(), e))
    }

    /// The proxy file form: certificate, unencrypted PKCS#8 key, chain.
    pub fn to_proxy_pem(&self) -> Result<Vec<u8>> {
        let mut out = self.cert.to_pem()?;
        out.extend_from_slice(&self.key.private_key_to_pem_pkcs8()?);
        for c in &self.chain {
            out.extend_from_slice(&c.to_pem()?);
        }
        Ok(out)
    }

    /// Writes the proxy file with mode 600, replacing any old one only once the new is whole.
    pub fn save_proxy(&self, path: &Path) -> Result<()> {
        let pem = self.to_proxy_pem()?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&pem)?;
            f.sync_all()?;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
            std::fs::rename(&tmp, path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            GsiError::file(path, e)
        })
    }

    /// The leaf's subject, one-line form.
    pub fn subject(&self) -> String {
        dn::one_line(self.cert.subject_name())
    }

    /// The identity GSI authorizes: the subject of the first certificate that is not a proxy
    /// or is an independent proxy (see [`crate::trust::Verified::identity`]).
    pub fn identity(&self) -> Result<String> {
        let all = self.certs();
        for (i, c) in all.iter().enumerate() {
            if proxy::classify(c, all.get(i + 1).copied())?.bears_identity() {
                return Ok(dn::one_line(c.subject_name()));
            }
        }
        Err(GsiError::decode(
            "credential",
            "a chain of proxies with no end-entity certificate",
        ))
    }

    /// What the leaf is.
    pub fn kind(&self) -> Result<CertKind> {
        proxy::classify(&self.cert, self.chain.first().map(|c| &**c))
    }

    /// Whether any proxy in the chain is limited.
    pub fn is_limited(&self) -> Result<bool> {
        let all = self.certs();
        for (i, c) in all.iter().enumerate() {
            if proxy::classify(c, all.get(i + 1).copied())?.is_limited() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Seconds until the first certificate of the chain expires (negative once expired).
    pub fn seconds_left(&self) -> Result<i64> {
        let mut end = i64::MAX;
        for c in self.certs() {
            end = end.min(proxy::time_to_unix(c.not_after())?);
        }
        Ok(end - unix_now())
    }

    /// The leaf then the chain.
    pub fn certs(&self) -> Vec<&X509Ref> {
        std::iter::once(&*self.cert)
            .chain(self.chain.iter().map(|c| &**c))
            .collect()
    }

    /// Looks for the user's credential where GSI clients do: `X509_USER_PROXY`, else
    /// `/tmp/x509up_u<uid>`, else `X509_USER_CERT`/`X509_USER_KEY`, else
    /// `~/.globus/usercert.pem`/`userkey.pem`. `env` reads variables (tests pass their own).
    pub fn find_user(
        env: &dyn Fn(&str) -> Option<String>,
        passphrase: Option<&[u8]>,
    ) -> Result<(Credential, CredentialSource)> {
        if let Some(p) = env("X509_USER_PROXY").filter(|p| !p.is_empty()) {
            let p = PathBuf::from(p);
            return Ok((Credential::load_proxy(&p)?, CredentialSource::Proxy(p)));
        }
        let default = default_proxy_path();
        if default.exists() {
            return Ok((
                Credential::load_proxy(&default)?,
                CredentialSource::Proxy(default),
            ));
        }
        let (cert, key) = user_cert_paths(env);
        if cert.exists() {
            let c = Credential::load_cert_key(&cert, &key, passphrase)?;
            return Ok((c, CredentialSource::CertAndKey(cert, key)));
        }
        Err(GsiError::NoCredential(format!(
            "no proxy at {} (X509_USER_PROXY unset) and no certificate at {}; run `ferry proxy init` or set X509_USER_PROXY",
            default.display(),
            cert.display()
        )))
    }

    /// Looks for a service's credential: `X509_USER_CERT`/`X509_USER_KEY`, else
    /// `/etc/grid-security/hostcert.pem`/`hostkey.pem`. Never a stray user proxy.
    pub fn find_host(
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(Credential, CredentialSource)> {
        let cert = env("X509_USER_CERT")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/etc/grid-security/hostcert.pem"));
        let key = env("X509_USER_KEY")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/etc/grid-security/hostkey.pem"));
        let c = Credential::load_cert_key(&cert, &key, None)?;
        Ok((c, CredentialSource::CertAndKey(cert, key)))
    }
}

/// `/tmp/x509up_u<uid>`, where grid-proxy-init writes by default.
/// (GSI tools use /tmp whatever TMPDIR says.)
pub fn default_proxy_path() -> PathBuf {
    PathBuf::from(format!(
        "/tmp/x509up_u{}",
        rustix::process::geteuid().as_raw()
    ))
}

/// The proxy file GSI tools mean: `explicit`, else `X509_USER_PROXY`, else
/// [`default_proxy_path`].
pub fn proxy_path(explicit: Option<PathBuf>, env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    explicit
        .or_else(|| {
            env("X509_USER_PROXY")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(default_proxy_path)
}

/// Removes the proxy at `path` (grid-proxy-destroy), its bytes overwritten first so that the
/// key does not stay on the disk.
pub fn destroy_proxy(path: &Path) -> std::io::Result<()> {
    let len = std::fs::metadata(path)?.len();
    if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(path) {
        let _ = f.write_all(&vec![0u8; len as usize]);
        let _ = f.sync_all();
    }
    std::fs::remove_file(path)
}

/// The user certificate and key: `X509_USER_CERT`/`X509_USER_KEY`, else `~/.globus/`.
pub fn user_cert_paths(env: &dyn Fn(&str) -> Option<String>) -> (PathBuf, PathBuf) {
    let home = env("HOME").unwrap_or_else(|| "/".into());
    let globus = Path::new(&home).join(".globus");
    let cert = env("X509_USER_CERT")
        .map(PathBuf::from)
        .unwrap_or_else(|| globus.join("usercert.pem"));
    let key = env("X509_USER_KEY")
        .map(PathBuf::from)
        .unwrap_or_else(|| globus.join("userkey.pem"));
    (cert, key)
}

/// Reads process environment variables, for the `find_*` functions.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}
