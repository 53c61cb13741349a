//! QUIC's TLS 1.3 configurations: under DCAU A/S the session's GSI credential both ways
//! (`gsi`), under DCAU N this process's ephemeral certificate.

use std::sync::{Arc, OnceLock};

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::gsi::{self, Refusal};
use super::peer::PeerCheck;
use super::{Options, ALPN};
use crate::{DataProtection, NetError, SocketTuning};

/// This process's certificate for DCAU N connections: made once, never written anywhere.
struct Identity {
    cert: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
}

fn identity() -> Result<&'static Identity, NetError> {
    static IDENTITY: OnceLock<Identity> = OnceLock::new();
    if let Some(id) = IDENTITY.get() {
        return Ok(id);
    }
    let made = make_identity()
        .map_err(|e| NetError::Security(format!("cannot make the QUIC certificate: {e}")))?;
    Ok(IDENTITY.get_or_init(|| made))
}

fn make_identity() -> Result<Identity, openssl::error::ErrorStack> {
    use openssl::asn1::Asn1Time;
    use openssl::bn::{BigNum, MsbOption};
    use openssl::ec::{EcGroup, EcKey};
    use openssl::hash::MessageDigest;
    use openssl::nid::Nid;
    use openssl::pkey::PKey;
    use openssl::x509::{X509NameBuilder, X509};
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1)?;
    let key = PKey::from_ec_key(EcKey::generate(&group)?)?;
    let mut name = X509NameBuilder::new()?;
    name.append_entry_by_text("CN", "ferry data channel")?;
    let name = name.build();
    let mut serial = BigNum::new()?;
    serial.rand(63, MsbOption::MAYBE_ZERO, false)?;
    let mut b = X509::builder()?;
    b.set_version(2)?;
    let serial = serial.to_asn1_integer()?;
    b.set_serial_number(&serial)?;
    b.set_subject_name(&name)?;
    b.set_issuer_name(&name)?;
    b.set_pubkey(&key)?;
    let (from, until) = (Asn1Time::days_from_now(0)?, Asn1Time::days_from_now(3650)?);
    b.set_not_before(&from)?;
    b.set_not_after(&until)?;
    b.sign(&key, MessageDigest::sha256())?;
    Ok(Identity {
        cert: CertificateDer::from(b.build().to_der()?),
        key: PrivatePkcs8KeyDer::from(key.private_key_to_pkcs8()?),
    })
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_error(e: impl std::fmt::Display) -> NetError {
    NetError::Security(format!("QUIC TLS set-up: {e}"))
}

/// The listening side's TLS: with DCAU A/S (`protection`) it presents the session's GSI
/// credential and requires the peer's, checked by [`PeerCheck`]; with DCAU N the
/// process's ephemeral certificate and no client certificate.
pub(super) fn server_config(
    o: &Options,
    tuning: &SocketTuning,
    protection: Option<&DataProtection>,
    refusal: &Refusal,
) -> Result<quinn::ServerConfig, NetError> {
    let provider = provider();
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_error)?;
    let mut tls = match protection {
        Some(p) => {
            let (peer, own) = gsi::halves(p, &provider, refusal)?;
            builder
                .with_client_cert_verifier(peer)
                .with_cert_resolver(own)
        }
        None => {
            let id = identity()?;
            builder
                .with_no_client_auth()
                .with_single_cert(
                    vec![id.cert.clone()],
                    PrivateKeyDer::Pkcs8(id.key.clone_key()),
                )
                .map_err(tls_error)?
        }
    };
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = QuicServerConfig::try_from(tls).map_err(tls_error)?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(o.transport(tuning));
    Ok(config)
}

/// The connecting side's TLS, as [`server_config`]'s.
pub(super) fn client_config(
    o: &Options,
    tuning: &SocketTuning,
    protection: Option<&DataProtection>,
    refusal: &Refusal,
) -> Result<quinn::ClientConfig, NetError> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_error)?
        .dangerous();
    let mut tls = match protection {
        Some(p) => {
            let (peer, own) = gsi::halves(p, &provider, refusal)?;
            builder
                .with_custom_certificate_verifier(peer)
                .with_client_cert_resolver(own)
        }
        None => builder
            .with_custom_certificate_verifier(Arc::new(PeerCheck::key_proof_only(provider)))
            .with_no_client_auth(),
    };
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = QuicClientConfig::try_from(tls).map_err(tls_error)?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(o.transport(tuning));
    Ok(config)
}
