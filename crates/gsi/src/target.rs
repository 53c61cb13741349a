//! Is the peer the server we meant? GSI's target-name check (gsi.md §1, STRICT_RFC2818): by
//! default the host from the URL against the server certificate's DNS names (the CN only when
//! it has none) or IP addresses; with `-s`/`--subject`, an exact DN or a `host@name` service.

use std::net::IpAddr;

use openssl::nid::Nid;
use openssl::x509::X509Ref;

use crate::dn;
use crate::error::{GsiError, Result};
use crate::trust::Verified;

/// Who the initiator expects to find on the other side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A host certificate for this name (the URL's host), or the address connected to.
    Host {
        /// The host as written in the URL.
        name: String,
        /// The address actually connected to.
        ip: Option<IpAddr>,
    },
    /// An exact identity, one-line DN (`-s "/O=Grid/CN=..."`).
    Subject(String),
    /// Anyone the CAs vouch for (data channels under DCAU N never get here; tests).
    Any,
}

impl Target {
    /// A `-s` value: `host@name` or `ftp@name` is a service on a host, anything else a DN.
    pub fn from_subject(s: &str) -> Target {
        for prefix in ["host@", "ftp@"] {
            if let Some(name) = s.strip_prefix(prefix) {
                return Target::Host {
                    name: name.to_owned(),
                    ip: None,
                };
            }
        }
        Target::Subject(s.to_owned())
    }

    /// The name GSI sends as SNI for this target.
    pub fn sni(&self) -> Option<String> {
        match self {
            Target::Host { name, .. } => Some(name.clone()),
            Target::Subject(s) => s.rfind("/CN=").map(|i| s[i + 4..].to_owned()),
            Target::Any => None,
        }
    }

    /// Checks the verified peer against this target.
    pub fn check(&self, peer: &Verified) -> Result<()> {
        match self {
            Target::Any => Ok(()),
            Target::Subject(want) => {
                if dn::same(want, peer.identity()) || dn::same(want, peer.subject()) {
                    Ok(())
                } else {
                    Err(GsiError::WrongPeer {
                        found: peer.identity().into(),
                        expected: want.clone(),
                    })
                }
            }
            Target::Host { name, ip } => {
                // As Globus: the names are those of the identity certificate, so an
                // independent proxy does not pass for its issuer's host.
                if host_matches(peer.identity_cert(), name, *ip) {
                    Ok(())
                } else {
                    Err(GsiError::WrongPeer {
                        found: peer.identity().into(),
                        expected: format!("/CN={name}"),
                    })
                }
            }
        }
    }
}

fn host_matches(cert: &X509Ref, name: &str, ip: Option<IpAddr>) -> bool {
    let want_ip: Option<IpAddr> = name.parse().ok().or(ip);
    let mut had_dns = false;
    if let Some(sans) = cert.subject_alt_names() {
        for san in sans.iter() {
            if let Some(d) = san.dnsname() {
                had_dns = true;
                if dns_matches(d, name) {
                    return true;
                }
            }
            if let (Some(bytes), Some(want)) = (san.ipaddress(), want_ip) {
                let got: Option<IpAddr> = match bytes.len() {
                    4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
                    16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
                    _ => None,
                };
                if got == Some(want) {
                    return true;
                }
            }
        }
    }
    if had_dns {
        return false;
    }
    let Some(cn) = cert.subject_name().entries_by_nid(Nid::COMMONNAME).next() else {
        return false;
    };
    let Ok(cn) = cn.data().to_string() else {
        return false;
    };
    let cn: &str = &cn;
    // `host/dtn.example.org` and `ftp/dtn.example.org` name a service on a host.
    let host = cn.split_once('/').map(|(_, h)| h).unwrap_or(cn);
    dns_matches(host, name)
}

/// RFC 2818 matching: case-insensitive, a `*` only as the whole leftmost label.
fn dns_matches(pattern: &str, name: &str) -> bool {
    let name = name.trim_end_matches('.');
    let pattern = pattern.trim_end_matches('.');
    if let Some(rest) = pattern.strip_prefix("*.") {
        return name
            .split_once('.')
            .is_some_and(|(first, tail)| !first.is_empty() && tail.eq_ignore_ascii_case(rest));
    }
    pattern.eq_ignore_ascii_case(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_cover_one_leftmost_label() {
        assert!(dns_matches("*.example.org", "dtn1.example.org"));
        assert!(!dns_matches("*.example.org", "a.b.example.org"));
        assert!(!dns_matches("*.example.org", "example.org"));
        assert!(dns_matches("DTN.example.org", "dtn.EXAMPLE.org."));
    }

    #[test]
    fn service_subjects_name_hosts() {
        assert_eq!(
            Target::from_subject("host@dtn.example.org"),
            Target::Host {
                name: "dtn.example.org".into(),
                ip: None
            }
        );
        assert_eq!(
            Target::from_subject("/O=Grid/CN=x"),
            Target::Subject("/O=Grid/CN=x".into())
        );
    }
}
