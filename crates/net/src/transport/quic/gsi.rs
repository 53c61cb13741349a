//! QUIC's TLS 1.3 handshake carrying the GSI credential of DCAU A/S: each side presents the
//! certificate chain of the session (a host certificate, or a proxy chain) and checks the
//! other's with the chain check the GSI handshake over TCP uses, then who it is (`peer`). The
//! QUIC connection is then the authenticated, encrypted channel DCAU/PROT ask for, and no
//! second TLS runs inside it.

use std::sync::{Arc, Mutex};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::{CertifiedKey, SingleCertAndKey};

use super::peer::PeerCheck;
use crate::{DataProtection, NetError};

/// Both GSI halves of a DCAU A/S handshake, for either side: the check of the peer, and the
/// session's own credential as rustls presents it.
pub(super) fn halves(
    protection: &DataProtection,
    provider: &Arc<CryptoProvider>,
    refusal: &Refusal,
) -> Result<(Arc<PeerCheck>, Arc<SingleCertAndKey>), NetError> {
    let peer = PeerCheck::gsi(protection.clone(), Arc::clone(provider), refusal.clone());
    let own = SingleCertAndKey::from(certified_key(protection, provider)?);
    Ok((Arc::new(peer), Arc::new(own)))
}

/// The session's credential as rustls presents it: the chain leaf first, signed by its key.
fn certified_key(
    protection: &DataProtection,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, NetError> {
    let credential = protection.security.credential();
    let fail = |e: &dyn std::fmt::Display| {
        NetError::Security(format!(
            "cannot present the credential {} over QUIC: {e}",
            protection.security.identity()
        ))
    };
    let chain = credential
        .certs()
        .iter()
        .map(|c| c.to_der().map(CertificateDer::from))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(&e))?;
    let key = credential
        .key
        .private_key_to_pkcs8()
        .map_err(|e| fail(&e))?;
    let key = provider
        .key_provider
        .load_private_key(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)))
        .map_err(|e| fail(&e))?;
    Ok(Arc::new(CertifiedKey::new(chain, key)))
}

/// Why the peer's chain was refused, kept for the error the handshake's failure becomes (a
/// TLS alert says only "bad certificate").
#[derive(Debug, Clone, Default)]
pub(super) struct Refusal(Arc<Mutex<Option<String>>>);

impl Refusal {
    /// Keeps why the peer's chain was refused.
    pub(super) fn set(&self, why: String) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }

    /// What the check found, if it refused the peer.
    pub(super) fn take(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}
