//! The trusted CAs (a directory in the hashed layout of `/etc/grid-security/certificates`:
//! `<hash>.0` certificates, `<hash>.r0` CRLs, `<hash>.signing_policy`) and chain verification.
//!
//! Path validation is OpenSSL's, with proxy certificates allowed. On top of it, as Globus'
//! verification callback does: CRLs are checked for the CAs that publish one (a CA without a
//! CRL is not an error), each CA's signing policy must allow what it signed, and limited
//! proxies are refused where the caller does not accept them. Proxies with a policy language
//! other than impersonation, limited or independent are refused; an independent proxy is its
//! own identity.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ferry_proto::clock::unix_now;
use openssl::stack::Stack;
use openssl::x509::store::{X509Store, X509StoreBuilder};
use openssl::x509::verify::X509VerifyFlags;
use openssl::x509::{CrlStatus, X509Crl, X509PurposeId, X509Ref, X509StoreContext, X509};

use crate::certkind::{self as proxy, CertKind, ProxyPolicy};
use crate::dn;
use crate::error::{GsiError, Result};
use crate::signing_policy::{self, SigningPolicy};

/// Longest chain accepted: root, intermediates, end entity and proxies.
pub const MAX_CHAIN_DEPTH: u32 = 12;

/// The trusted CAs, their CRLs and signing policies.
pub struct TrustStore {
    dir: PathBuf,
    cas: Vec<X509>,
    crls: Vec<X509Crl>,
    /// Signing policies by the CA subject hash their file is named for.
    policies: HashMap<u32, Vec<SigningPolicy>>,
}

impl std::fmt::Debug for TrustStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustStore")
            .field("dir", &self.dir)
            .field("cas", &self.cas.len())
            .field("crls", &self.crls.len())
            .field("policies", &self.policies.len())
            .finish()
    }
}

/// What a verification accepts beyond a valid chain.
#[derive(Debug, Clone, Copy)]
pub struct VerifyOptions {
    /// Accept chains with limited proxies (GridFTP servers do; gatekeepers do not).
    pub allow_limited: bool,
    /// Require a signing policy for every CA that signed in the chain (Globus does).
    pub require_signing_policy: bool,
}

impl Default for VerifyOptions {
    fn default() -> VerifyOptions {
        VerifyOptions {
            allow_limited: true,
            require_signing_policy: true,
        }
    }
}

/// A chain that passed every check. Only [`TrustStore::verify`] makes one, so holding it is
/// proof that the identity was verified.
#[derive(Debug, Clone)]
pub struct Verified {
    identity: String,
    /// Where in `chain` the certificate that names the identity is.
    identity_at: usize,
    subject: String,
    chain: Vec<X509>,
    limited: bool,
    not_after: i64,
}

impl Verified {
    /// The identity authorized, as Globus names the peer: the end-entity subject (proxy CNs
    /// left off), or the subject of the first independent proxy from the leaf up.
    pub fn identity(&self) -> &str {
        &self.identity
    }
    /// The certificate that names the identity: the end entity, or an independent proxy.
    pub fn identity_cert(&self) -> &X509Ref {
        &self.chain[self.identity_at]
    }
    /// The leaf's own subject.
    pub fn subject(&self) -> &str {
        &self.subject
    }
    /// The verified chain, leaf first, trust anchor last.
    pub fn chain(&self) -> &[X509] {
        &self.chain
    }
    /// Whether a limited proxy is in the chain.
    pub fn limited(&self) -> bool {
        self.limited
    }
    /// When the first certificate of the chain expires (seconds since the epoch).
    pub fn not_after(&self) -> i64 {
        self.not_after
    }
}

impl TrustStore {
    /// Loads every CA, CRL and signing policy in `dir`.
    pub fn load(dir: &Path) -> Result<TrustStore> {
        let entries = std::fs::read_dir(dir).map_err(|e| GsiError::file(dir, e))?;
        let mut store = TrustStore {
            dir: dir.to_owned(),
            cas: Vec::new(),
            crls: Vec::new(),
            policies: HashMap::new(),
        };
        let mut names: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        names.sort();
        for path in names {
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let Some((hash, suffix)) = name.split_once('.') else {
                continue;
            };
            let Some(hash) = (hash.len() == 8)
                .then(|| u32::from_str_radix(hash, 16).ok())
                .flatten()
            else {
                continue;
            };
            let read = || std::fs::read(&path).map_err(|e| GsiError::file(&path, e));
            if suffix.bytes().all(|b| b.is_ascii_digit()) && !suffix.is_empty() {
                let certs =
                    X509::stack_from_pem(&read()?).map_err(|e| GsiError::decode(name, e))?;
                store.cas.extend(certs);
            } else if suffix.starts_with('r')
                && suffix[1..].bytes().all(|b| b.is_ascii_digit())
                && suffix.len() > 1
            {
                let crl = X509Crl::from_pem(&read()?).map_err(|e| GsiError::decode(name, e))?;
                store.crls.push(crl);
            } else if suffix == "signing_policy" {
                let text = String::from_utf8_lossy(&read()?).into_owned();
                let policies = signing_policy::parse(&text)
                    .map_err(|e| GsiError::SigningPolicy(format!("{}: {e}", path.display())))?;
                store.policies.insert(hash, policies);
            }
        }
        if store.cas.is_empty() {
            return Err(GsiError::Untrusted {
                subject: String::new(),
                reason: format!("no CA certificates (<hash>.0) in {}", dir.display()),
            });
        }
        Ok(store)
    }

    /// The trusted-CA directory GSI uses: `X509_CERT_DIR`, else `~/.globus/certificates` when
    /// it exists, else `/etc/grid-security/certificates`.
    pub fn default_dir(env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
        if let Some(d) = env("X509_CERT_DIR").filter(|d| !d.is_empty()) {
            return PathBuf::from(d);
        }
        if let Some(home) = env("HOME") {
            let d = Path::new(&home).join(".globus/certificates");
            if d.is_dir() {
                return d;
            }
        }
        PathBuf::from("/etc/grid-security/certificates")
    }

    /// The directory this store was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// An OpenSSL store of the CAs, set up for GSI chains (proxies allowed, any purpose: a
    /// proxy that says "client" still serves the passive side of a data channel).
    pub fn x509_store(&self) -> Result<X509Store> {
        let mut b = X509StoreBuilder::new()?;
        for ca in &self.cas {
            b.add_cert(ca.clone())?;
        }
        b.set_flags(X509VerifyFlags::ALLOW_PROXY_CERTS)?;
        b.set_purpose(X509PurposeId::ANY)?;
        Ok(b.build())
    }

    /// Verifies `leaf` with the untrusted `chain` the peer sent, then CRLs, signing policies
    /// and limited proxies.
    pub fn verify(
        &self,
        leaf: &X509Ref,
        chain: &[X509],
        options: VerifyOptions,
    ) -> Result<Verified> {
        let subject = dn::one_line(leaf.subject_name());
        let untrusted = |reason: String| GsiError::Untrusted {
            subject: subject.clone(),
            reason,
        };
        // Legacy (GT2) and draft (GT3) proxies at the bottom are checked link by link here
        // (OpenSSL knows only RFC 3820 proxies); from the first other certificate up, OpenSSL
        // validates the path as for any chain.
        let now = unix_now();
        let (mut path, top, rest) = old_format_proxies(leaf, chain, now).map_err(&untrusted)?;
        let store = self.x509_store()?;
        let mut stack = Stack::new()?;
        for c in &rest {
            stack.push(c.clone())?;
        }
        let mut ctx = X509StoreContext::new()?;
        let outcome = ctx.init(&store, &top, &stack, |c| {
            if c.verify_cert()? {
                let path: Vec<X509> = c
                    .chain()
                    .map(|s| s.iter().map(|x| x.to_owned()).collect())
                    .unwrap_or_default();
                Ok(Ok(path))
            } else {
                let at = c
                    .current_cert()
                    .map(|x| dn::one_line(x.subject_name()))
                    .unwrap_or_default();
                Ok(Err(format!("{} (at {at})", c.error().error_string())))
            }
        })?;
        path.extend(outcome.map_err(&untrusted)?);
        if path.len() as u32 > MAX_CHAIN_DEPTH {
            return Err(untrusted(format!(
                "chain of {} certificates is longer than {MAX_CHAIN_DEPTH}",
                path.len()
            )));
        }
        let mut identity_at = None;
        let mut limited = false;
        let mut not_after = i64::MAX;
        for (i, cert) in path.iter().enumerate() {
            let issuer = path.get(i + 1);
            not_after = not_after.min(proxy::time_to_unix(cert.not_after())?);
            let kind = proxy::classify(cert, issuer.map(|c| &**c))?;
            // OpenSSL passes any policy language; a restricted proxy accepted here would act
            // with its issuer's full rights, so it is refused outright.
            if let CertKind::Proxy {
                policy: ProxyPolicy::Restricted(language),
                ..
            } = kind
            {
                return Err(GsiError::UnsupportedProxyPolicy {
                    subject: dn::one_line(cert.subject_name()),
                    language,
                });
            }
            if kind.is_limited() {
                limited = true;
            }
            if identity_at.is_none() && kind.bears_identity() {
                identity_at = Some(i);
            }
            let Some(issuer) = issuer else { continue };
            self.check_revocation(cert, issuer, now)
                .map_err(&untrusted)?;
            let issuer_is_ca = i + 2 == path.len()
                || proxy::classify(issuer, path.get(i + 2).map(|c| &**c))? == CertKind::Ca;
            if issuer_is_ca && options.require_signing_policy {
                self.check_policy(cert, issuer)?;
            }
        }
        if limited && !options.allow_limited {
            return Err(untrusted("limited proxies are not accepted here".into()));
        }
        let identity_at = identity_at
            .ok_or_else(|| untrusted("no end-entity certificate in the chain".into()))?;
        Ok(Verified {
            identity: dn::one_line(path[identity_at].subject_name()),
            identity_at,
            subject,
            chain: path,
            limited,
            not_after,
        })
    }

    /// Checks `cert` against its issuer's CRLs, which must not have expired before `now`.
    fn check_revocation(&self, cert: &X509Ref, issuer: &X509Ref, now: i64) -> Result<(), String> {
        let issuer_key = issuer.public_key().map_err(|e| e.to_string())?;
        for crl in &self.crls {
            if crl.issuer_name().to_der().ok() != issuer.subject_name().to_der().ok() {
                continue;
            }
            if !crl.verify(&issuer_key).unwrap_or(false) {
                return Err(format!(
                    "the CRL of {} does not verify with its key; replace it",
                    dn::one_line(issuer.subject_name())
                ));
            }
            if let Some(next) = crl.next_update() {
                if proxy::time_to_unix(next).map_err(|e| e.to_string())? < now {
                    return Err(format!(
                        "the CRL of {} expired; update the CRLs (fetch-crl)",
                        dn::one_line(issuer.subject_name())
                    ));
                }
            }
            let owned = cert.to_owned();
            if let CrlStatus::Revoked(_) = crl.get_by_cert(&owned) {
                return Err(format!(
                    "{}{}",
                    dn::one_line(cert.subject_name()),
                    crate::error::REVOKED
                ));
            }
        }
        Ok(())
    }

    fn check_policy(&self, cert: &X509Ref, ca: &X509Ref) -> Result<()> {
        let hash = ca.subject_name_hash();
        let ca_dn = dn::one_line(ca.subject_name());
        let subject = dn::one_line(cert.subject_name());
        let policies = self.policies.get(&hash).ok_or_else(|| {
            GsiError::SigningPolicy(format!(
                "no signing policy for {ca_dn}: {}/{hash:08x}.signing_policy is missing",
                self.dir.display()
            ))
        })?;
        let allowed = policies
            .iter()
            .filter(|p| dn::same(&p.ca, &ca_dn))
            .any(|p| p.allows(&subject));
        if allowed {
            Ok(())
        } else {
            Err(GsiError::SigningPolicy(format!(
                "{ca_dn} may not sign {subject} under its signing policy"
            )))
        }
    }
}

/// Splits a presented chain into its legacy/draft proxies (leaf first, each checked against
/// its issuer), the first certificate above them and the untrusted rest.
///
/// A legacy or draft proxy is signed by an end-entity certificate (or another proxy), which
/// OpenSSL's validator refuses as "invalid CA"; Globus' verify callback accepts such links
/// under the rules applied here: the issuer's signature (checked by OpenSSL), validity at `now`,
/// subject = issuer subject + one CN, an issuer that is no CA, no proxy formats mixed in one
/// chain, no unknown critical extension, and the draft ProxyCertInfo's path length.
#[allow(clippy::type_complexity)]
fn old_format_proxies(
    leaf: &X509Ref,
    chain: &[X509],
    now: i64,
) -> std::result::Result<(Vec<X509>, X509, Vec<X509>), String> {
    let mut rest: Vec<X509> = chain.to_vec();
    let mut below: Vec<X509> = Vec::new();
    let mut cur = leaf.to_owned();
    let mut format = None;
    let e = |e: GsiError| e.to_string();
    loop {
        let issuer_at = rest.iter().position(|c| {
            c.subject_name().to_der().ok() == cur.issuer_name().to_der().ok()
                && c.public_key()
                    .is_ok_and(|k| cur.verify(&k).unwrap_or(false))
        });
        let Some(at) = issuer_at else { break };
        let kind = proxy::classify(&cur, Some(&rest[at])).map_err(e)?;
        let CertKind::Proxy {
            format: f,
            path_len,
            ..
        } = kind
        else {
            break;
        };
        if f == proxy::ProxyFormat::Rfc3820 {
            if format.is_some() {
                return Err("a chain mixes legacy or draft proxies with RFC 3820 ones".into());
            }
            break;
        }
        if format.is_some_and(|g| g != f) {
            return Err("a chain mixes legacy and draft proxies".into());
        }
        format = Some(f);
        let issuer = rest.remove(at);
        let name = dn::one_line(cur.subject_name());
        if proxy::time_to_unix(cur.not_before()).map_err(e)? > now + 300 {
            return Err(format!("{name} is not valid yet"));
        }
        if proxy::time_to_unix(cur.not_after()).map_err(e)? < now {
            return Err(format!("{name} has expired"));
        }
        let issuer_kind = proxy::classify(&issuer, rest.first().map(|c| &**c)).map_err(e)?;
        if issuer_kind == CertKind::Ca {
            return Err(format!("{name} claims to be a proxy but a CA signed it"));
        }
        let subject: Vec<_> = cur.subject_name().entries().collect();
        let parent: Vec<_> = issuer.subject_name().entries().collect();
        let extends = subject.len() == parent.len() + 1
            && subject.iter().zip(&parent).all(|(a, b)| {
                a.object().nid() == b.object().nid() && a.data().as_slice() == b.data().as_slice()
            })
            && subject
                .last()
                .is_some_and(|l| l.object().nid() == openssl::nid::Nid::COMMONNAME);
        if !extends {
            return Err(format!(
                "{name}: a proxy's subject must be its issuer's plus one CN"
            ));
        }
        let der_bytes = cur.to_der().map_err(|e| e.to_string())?;
        for (oid, critical, _) in crate::der::extensions(&der_bytes).map_err(e)? {
            let known = [
                crate::der::OID_PROXY_CERT_INFO_GT3,
                crate::der::OID_KEY_USAGE,
                crate::der::OID_EXT_KEY_USAGE,
                crate::der::OID_BASIC_CONSTRAINTS,
            ];
            if critical && !known.contains(&oid) {
                return Err(format!("{name} has an unknown critical extension"));
            }
        }
        if let Some(limit) = path_len {
            if below.len() as u64 > limit {
                return Err(format!("{name} allows {limit} proxies below it"));
            }
        }
        below.push(cur);
        cur = issuer;
    }
    // `below` holds the old-format proxies leaf first; path lengths were counted from the leaf.
    Ok((below, cur, rest))
}

#[cfg(test)]
mod tests;
