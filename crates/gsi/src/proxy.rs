//! Proxy certificates: telling them apart (RFC 3820, pre-RFC GT3, legacy GT2; impersonation,
//! limited, independent, restricted) and signing new ones, as grid-proxy-init and GSI
//! delegation do.

use std::time::Duration;

use ferry_proto::clock::unix_now;
use openssl::asn1::{Asn1Integer, Asn1Object, Asn1OctetString, Asn1Time};
use openssl::bn::BigNum;
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{HasPublic, PKeyRef};
use openssl::x509::extension::KeyUsage;
use openssl::x509::{X509Extension, X509NameBuilder, X509Ref, X509};

use crate::credential::Credential;
use crate::der::{self, ProxyCertInfo};
use crate::error::{GsiError, Result};

/// What a proxy's policy lets it do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyPolicy {
    /// Everything its issuer may do (id-ppl-inheritAll; legacy `CN=proxy`).
    Impersonation,
    /// Globus' limited proxy: accepted for data movement, refused by job gatekeepers.
    Limited,
    /// Nothing inherited from the issuer (id-ppl-independent): the proxy is its own identity.
    Independent,
    /// Another policy language, by dotted OID: chain verification refuses it, since its
    /// restrictions cannot be enforced here.
    Restricted(String),
}

/// How a proxy is spelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyFormat {
    /// RFC 3820, ProxyCertInfo 1.3.6.1.5.5.7.1.14.
    Rfc3820,
    /// Pre-RFC Globus Toolkit 3, ProxyCertInfo 1.3.6.1.4.1.3536.1.222.
    Gt3,
    /// Globus Toolkit 2: no extension, `CN=proxy` or `CN=limited proxy` appended.
    Legacy,
}

/// What a certificate is in a GSI chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertKind {
    /// A certification authority.
    Ca,
    /// An end-entity certificate: a user or a host.
    EndEntity,
    /// A proxy certificate.
    Proxy {
        /// How it is spelled.
        format: ProxyFormat,
        /// What it may do.
        policy: ProxyPolicy,
        /// How many proxies may follow it, when limited.
        path_len: Option<u64>,
    },
}

impl CertKind {
    /// Whether this is a proxy.
    pub fn is_proxy(&self) -> bool {
        matches!(self, CertKind::Proxy { .. })
    }

    /// Whether this certificate names the chain's identity, as Globus' identity certificate
    /// does (`globus_gsi_cert_utils_get_identity_cert`): an end entity, or an independent
    /// proxy, which inherits nothing from its issuer and so stands for itself.
    pub fn bears_identity(&self) -> bool {
        matches!(
            self,
            CertKind::Ca
                | CertKind::EndEntity
                | CertKind::Proxy {
                    policy: ProxyPolicy::Independent,
                    ..
                }
        )
    }

    /// Whether this is a limited proxy.
    pub fn is_limited(&self) -> bool {
        matches!(
            self,
            CertKind::Proxy {
                policy: ProxyPolicy::Limited,
                ..
            }
        )
    }

    /// grid-proxy-info's words for it.
    pub fn describe(&self) -> String {
        match self {
            CertKind::Ca => "CA certificate".into(),
            CertKind::EndEntity => "end entity credential".into(),
            CertKind::Proxy { format, policy, .. } => {
                let format = match format {
                    ProxyFormat::Rfc3820 => "RFC 3820 compliant",
                    ProxyFormat::Gt3 => "Proxy draft (pre-RFC) compliant",
                    ProxyFormat::Legacy => "full legacy globus",
                };
                let policy = match policy {
                    ProxyPolicy::Impersonation => "impersonation".to_string(),
                    ProxyPolicy::Limited => "limited".to_string(),
                    ProxyPolicy::Independent => "independent".to_string(),
                    ProxyPolicy::Restricted(oid) => format!("restricted ({oid})"),
                };
                format!("{format} {policy} proxy")
            }
        }
    }
}

/// Classifies one certificate; `issuer` (its signer, when known) is needed to recognise
/// legacy proxies, which carry no extension.
pub fn classify(cert: &X509Ref, issuer: Option<&X509Ref>) -> Result<CertKind> {
    let der_bytes = cert.to_der()?;
    for (oid, format) in [
        (der::OID_PROXY_CERT_INFO, ProxyFormat::Rfc3820),
        (der::OID_PROXY_CERT_INFO_GT3, ProxyFormat::Gt3),
    ] {
        if let Some((_, value)) = der::find_extension(&der_bytes, oid)? {
            let info = ProxyCertInfo::parse(value, format == ProxyFormat::Gt3)?;
            return Ok(CertKind::Proxy {
                format,
                policy: policy_of(&info.language),
                path_len: info.path_len,
            });
        }
    }
    if let Some((_, value)) = der::find_extension(&der_bytes, der::OID_BASIC_CONSTRAINTS)? {
        if der::basic_constraints_ca(value)? {
            return Ok(CertKind::Ca);
        }
    }
    if let Some(issuer) = issuer {
        if let Some(limited) = legacy_proxy(cert, issuer) {
            let policy = if limited {
                ProxyPolicy::Limited
            } else {
                ProxyPolicy::Impersonation
            };
            return Ok(CertKind::Proxy {
                format: ProxyFormat::Legacy,
                policy,
                path_len: None,
            });
        }
    }
    Ok(CertKind::EndEntity)
}

/// `Some(limited)` when `cert`'s subject is its issuer's plus `CN=proxy` or `CN=limited proxy`.
fn legacy_proxy(cert: &X509Ref, issuer: &X509Ref) -> Option<bool> {
    let subject: Vec<_> = cert.subject_name().entries().collect();
    let parent: Vec<_> = issuer.subject_name().entries().collect();
    let (last, head) = subject.split_last()?;
    if head.len() != parent.len() || last.object().nid() != Nid::COMMONNAME {
        return None;
    }
    let same = head.iter().zip(&parent).all(|(a, b)| {
        a.object().nid() == b.object().nid() && a.data().as_slice() == b.data().as_slice()
    });
    match (same, last.data().as_slice()) {
        (true, b"proxy") => Some(false),
        (true, b"limited proxy") => Some(true),
        _ => None,
    }
}

fn policy_of(language: &[u8]) -> ProxyPolicy {
    match language {
        l if l == der::OID_INHERIT_ALL => ProxyPolicy::Impersonation,
        l if l == der::OID_LIMITED => ProxyPolicy::Limited,
        l if l == der::OID_INDEPENDENT => ProxyPolicy::Independent,
        l => ProxyPolicy::Restricted(dotted(l)),
    }
}

fn dotted(oid: &[u8]) -> String {
    let mut parts = Vec::new();
    let mut acc: u64 = 0;
    for &b in oid {
        acc = (acc << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if parts.is_empty() {
                parts.push((acc / 40).min(2));
                parts.push(acc - 40 * (acc / 40).min(2));
            } else {
                parts.push(acc);
            }
            acc = 0;
        }
    }
    parts
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".")
}

/// What a new proxy should be.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    /// How long it lives; never past its issuer's end.
    pub lifetime: Duration,
    /// A limited proxy (what globus-url-copy delegates); otherwise impersonation. A proxy
    /// signed by a limited proxy is limited whatever this says.
    pub limited: bool,
    /// How many proxies may be signed below it; `None` for no limit.
    pub path_len: Option<u64>,
    /// The format; `None` takes the issuer's when it is a proxy (a legacy or draft proxy
    /// signs proxies of its own kind, as Globus requires of a chain), else RFC 3820.
    pub format: Option<ProxyFormat>,
}

impl Default for ProxyOptions {
    fn default() -> ProxyOptions {
        ProxyOptions {
            lifetime: Duration::from_secs(12 * 3600),
            limited: false,
            path_len: None,
            format: None,
        }
    }
}

/// Signs a proxy for `public_key` with `issuer`'s credential, RFC 3820 unless the issuer is a
/// legacy or draft proxy (see [`ProxyOptions::format`]): subject = issuer's subject plus a CN
/// that is also the serial number (derived from the key, as Globus does; `proxy` or `limited
/// proxy` for legacy proxies), valid from five minutes ago (clock skew) until the lifetime or
/// the issuer's end.
pub fn sign_proxy<T: HasPublic>(
    issuer: &Credential,
    public_key: &PKeyRef<T>,
    options: &ProxyOptions,
) -> Result<X509> {
    let issuer_kind = classify(&issuer.cert, issuer.chain.first().map(|c| &**c))?;
    // Only the two languages every GSI peer enforces: ferry never makes independent or
    // restricted proxies.
    let language = if options.limited || issuer_kind.is_limited() {
        der::OID_LIMITED
    } else {
        der::OID_INHERIT_ALL
    };
    sign_with_language(issuer, public_key, options, language)
}

/// [`sign_proxy`] with the ProxyCertInfo policy language given (DER OID content bytes); a
/// legacy proxy is limited when `language` is Globus' limited one.
pub(crate) fn sign_with_language<T: HasPublic>(
    issuer: &Credential,
    public_key: &PKeyRef<T>,
    options: &ProxyOptions,
    language: &[u8],
) -> Result<X509> {
    let issuer_kind = classify(&issuer.cert, issuer.chain.first().map(|c| &**c))?;
    if issuer_kind == CertKind::Ca {
        return Err(GsiError::Protocol(
            "a CA certificate cannot sign a proxy; use a user or host credential".into(),
        ));
    }
    let limited = language == der::OID_LIMITED;
    let serial = serial_for(public_key)?;
    let format = options.format.unwrap_or(match issuer_kind {
        CertKind::Proxy { format, .. } => format,
        _ => ProxyFormat::Rfc3820,
    });

    let mut name = X509NameBuilder::new()?;
    for entry in issuer.cert.subject_name().entries() {
        name.append_entry(entry)?;
    }
    let cn = match format {
        ProxyFormat::Legacy if limited => "limited proxy".to_string(),
        ProxyFormat::Legacy => "proxy".to_string(),
        _ => serial.to_string(),
    };
    name.append_entry_by_nid(Nid::COMMONNAME, &cn)?;
    let name = name.build();

    let now = unix_now();
    let not_after = now.saturating_add(options.lifetime.as_secs() as i64);
    let issuer_end = time_to_unix(issuer.cert.not_after())?;
    let not_after = not_after.min(issuer_end);

    let mut b = X509::builder()?;
    b.set_version(2)?;
    let serial_bn = BigNum::from_dec_str(&serial.to_string())?;
    let serial_number = Asn1Integer::from_bn(&serial_bn)?;
    b.set_serial_number(&serial_number)?;
    b.set_subject_name(&name)?;
    b.set_issuer_name(issuer.cert.subject_name())?;
    b.set_pubkey(public_key)?;
    let (from, until) = (
        Asn1Time::from_unix(now - 300)?,
        Asn1Time::from_unix(not_after)?,
    );
    b.set_not_before(&from)?;
    b.set_not_after(&until)?;
    b.append_extension(end_entity_key_usage()?)?;
    let info = ProxyCertInfo {
        path_len: options.path_len,
        language: language.to_vec(),
    };
    match format {
        ProxyFormat::Rfc3820 => {
            let oid = Asn1Object::from_str("1.3.6.1.5.5.7.1.14")?;
            let value = Asn1OctetString::new_from_bytes(&info.encode())?;
            b.append_extension(X509Extension::new_from_der(&oid, true, &value)?)?;
        }
        ProxyFormat::Gt3 => {
            let oid = Asn1Object::from_str("1.3.6.1.4.1.3536.1.222")?;
            let value = Asn1OctetString::new_from_bytes(&info.encode_gt3())?;
            b.append_extension(X509Extension::new_from_der(&oid, true, &value)?)?;
        }
        // The subject says it all.
        ProxyFormat::Legacy => {}
    }
    b.sign(&issuer.key, signing_digest(&issuer.cert))?;
    Ok(b.build())
}

/// The key usage of user, host and proxy certificates: signing and key exchange, never
/// certificate signing.
pub(crate) fn end_entity_key_usage() -> Result<X509Extension> {
    Ok(KeyUsage::new()
        .critical()
        .digital_signature()
        .key_encipherment()
        .data_encipherment()
        .build()?)
}

/// The digest the issuer's own certificate was signed with (Globus signs proxies the same
/// way), SHA-256 when that cannot be told.
pub(crate) fn signing_digest(cert: &X509Ref) -> MessageDigest {
    cert.signature_algorithm()
        .object()
        .nid()
        .signature_algorithms()
        .and_then(|a| MessageDigest::from_nid(a.digest))
        .filter(|d| d.size() >= 32)
        .unwrap_or_else(MessageDigest::sha256)
}

/// The proxy's serial number and CN: the first four bytes of the SHA-1 of its public key, as
/// a positive number.
fn serial_for<T: HasPublic>(key: &PKeyRef<T>) -> Result<u32> {
    let digest = openssl::hash::hash(MessageDigest::sha1(), &key.public_key_to_der()?)?;
    Ok(u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) & 0x7fff_ffff)
}

/// Seconds since the epoch of an ASN.1 time.
pub fn time_to_unix(t: &openssl::asn1::Asn1TimeRef) -> Result<i64> {
    let diff = Asn1Time::from_unix(0)?.diff(t)?;
    Ok(i64::from(diff.days) * 86_400 + i64::from(diff.secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oids_print_dotted() {
        assert_eq!(dotted(der::OID_LIMITED), "1.3.6.1.4.1.3536.1.1.1.9");
        assert_eq!(dotted(der::OID_PROXY_CERT_INFO), "1.3.6.1.5.5.7.1.14");
    }
}
