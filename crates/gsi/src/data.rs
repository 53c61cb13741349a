//! Data-channel security (DCAU and PROT): the per-connection context and who may be on the
//! other end. Sans-IO like the rest of the crate; `ferry-net` drives it over a socket.
//!
//! Globus (`globus_ftp_control_data.c`, `globus_io_xio_compat.c`) sets up every data connection
//! with a fresh context, no delegation, and:
//! - `PROT C`: the GSI tail (`0x00` / `0`) after the handshake, then clear bytes on the socket;
//! - `PROT S`/`P`: SSL-compatible mode (no tail), then every write as TLS records.
//!
//! The connecting side is the initiator (TLS client). Each side presents the credential of
//! the session (the server its delegated one), and DCAU A accepts a peer whose identity equals
//! ours; DCAU S one whose identity is the given subject.

use std::sync::Arc;

use openssl::ssl::SslVersion;

use crate::context::{ContextConfig, Delegation, SecurityContext};
use crate::credential::Credential;
use crate::dn;
use crate::error::{GsiError, Result};
use crate::trust::{TrustStore, Verified, VerifyOptions};

/// Who must be at the other end of a data connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerCheck {
    /// `DCAU A`: the same identity as our own credential.
    SameIdentity,
    /// `DCAU S <subject>`: this identity (compared as Globus compares DNs).
    Subject(String),
}

/// The credential and trust a session protects its data connections with.
#[derive(Clone)]
pub struct DataSecurity {
    credential: Credential,
    identity: String,
    trust: Arc<TrustStore>,
    /// What a peer's chain may contain.
    pub verify: VerifyOptions,
    /// The newest TLS version to speak (`None`: TLS 1.3).
    pub max_version: Option<SslVersion>,
}

impl std::fmt::Debug for DataSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataSecurity")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl DataSecurity {
    /// Data connections presenting `credential`, trusting peers that chain to `trust`.
    pub fn new(credential: Credential, trust: Arc<TrustStore>) -> Result<DataSecurity> {
        let identity = credential.identity()?;
        Ok(DataSecurity {
            credential,
            identity,
            trust,
            verify: VerifyOptions::default(),
            max_version: None,
        })
    }

    /// The CAs, CRLs and signing policies peers are checked against.
    pub fn trust(&self) -> &Arc<TrustStore> {
        &self.trust
    }

    /// Our identity (see [`Credential::identity`]).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// A context for one data connection: `initiator` for the side that connected;
    /// `protected` for PROT S/P (SSL-compatible, no tail). Returns the initiator's first
    /// token too.
    pub fn context(
        &self,
        initiator: bool,
        check: &PeerCheck,
        protected: bool,
    ) -> Result<(SecurityContext, Option<Vec<u8>>)> {
        let mut config = ContextConfig::new(self.credential.clone(), Arc::clone(&self.trust));
        config.verify = self.verify;
        config.max_version = self.max_version;
        config.delegation = Delegation::None;
        config.ssl_compatible = protected;
        // As Globus: the SNI is the common name of the identity we expect.
        config.sni = last_cn(match check {
            PeerCheck::SameIdentity => &self.identity,
            PeerCheck::Subject(s) => s,
        });
        if initiator {
            let (ctx, first) = SecurityContext::initiator(config)?;
            Ok((ctx, Some(first)))
        } else {
            Ok((SecurityContext::acceptor(config)?, None))
        }
    }

    /// The credential data connections present.
    pub fn credential(&self) -> &Credential {
        &self.credential
    }

    /// Verifies a chain a peer presented outside a GSI context (QUIC's TLS 1.3 handshake):
    /// `leaf` and the certificates it sent above it, DER-encoded, checked as the GSI handshake
    /// checks them (trusted CAs, CRLs, signing policies, proxy rules, [`DataSecurity::verify`]).
    /// Who it is still goes through [`DataSecurity::authorize`].
    pub fn verify_der(&self, leaf: &[u8], chain: &[&[u8]]) -> Result<Verified> {
        let bad = |what: &str, e: openssl::error::ErrorStack| GsiError::Untrusted {
            subject: String::new(),
            reason: format!("{what} is not a DER certificate: {e}"),
        };
        let leaf = openssl::x509::X509::from_der(leaf).map_err(|e| bad("the leaf", e))?;
        let chain = chain
            .iter()
            .map(|c| openssl::x509::X509::from_der(c).map_err(|e| bad("a chain certificate", e)))
            .collect::<Result<Vec<_>>>()?;
        self.trust.verify(&leaf, &chain, self.verify)
    }

    /// Whether the verified `peer` of a data connection is who `check` asks for.
    pub fn authorize(&self, check: &PeerCheck, peer: &Verified) -> Result<()> {
        let expected = match check {
            PeerCheck::SameIdentity => self.identity.as_str(),
            PeerCheck::Subject(s) => s.as_str(),
        };
        if dn::same(peer.identity(), expected) {
            Ok(())
        } else {
            Err(GsiError::WrongPeer {
                found: peer.identity().to_string(),
                expected: expected.to_string(),
            })
        }
    }
}

fn last_cn(dn: &str) -> Option<String> {
    dn.split('/')
        .filter_map(|p| p.strip_prefix("CN="))
        .next_back()
        .filter(|cn| !cn.is_empty() && cn.len() <= 255)
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sni_is_the_last_common_name() {
        assert_eq!(
            last_cn("/O=Grid/OU=Test/CN=Jane Doe").as_deref(),
            Some("Jane Doe")
        );
        assert_eq!(last_cn("/O=Grid").as_deref(), None);
    }
}
