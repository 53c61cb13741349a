//! Proxy certificates told apart: RFC 3820, pre-RFC GT3, legacy GT2; impersonation, limited,
//! independent, restricted. The credential, the trust store and the signing all read this.

use openssl::asn1::Asn1Time;
use openssl::nid::Nid;
use openssl::x509::X509Ref;

use crate::der::{self, ProxyCertInfo};
use crate::error::Result;

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
