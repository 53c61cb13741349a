//! The check of a QUIC handshake's peer, on either side: its handshake signed by the key of
//! the certificate it presents, and under DCAU A/S that certificate's GSI chain and identity.
//!
//! rustls' own certificate check (webpki) is not used: it knows no proxy certificates and
//! refuses their critical ProxyCertInfo extension. Handshake signatures are still checked by
//! rustls, against the public key of the certificate, whichever check the chain passed.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, SubjectPublicKeyInfoDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::gsi::Refusal;
use crate::DataProtection;

/// Checks the peer as DCAU asks; on either side of the handshake.
#[derive(Debug)]
pub(super) struct PeerCheck {
    provider: Arc<CryptoProvider>,
    /// DCAU A/S: the session's protection and where a refusal's reason goes; `None` for DCAU N.
    gsi: Option<(DataProtection, Refusal)>,
}

impl PeerCheck {
    /// DCAU A/S: the peer's chain and identity checked as the GSI handshake over TCP checks them
    /// (`DataSecurity::verify_der`: trusted CAs, CRLs, signing policies, proxy rules; then
    /// `authorize`: our own identity for DCAU A, the named subject for DCAU S).
    pub(super) fn gsi(
        protection: DataProtection,
        provider: Arc<CryptoProvider>,
        refusal: Refusal,
    ) -> PeerCheck {
        PeerCheck {
            provider,
            gsi: Some((protection, refusal)),
        }
    }

    /// DCAU N: the listener's ephemeral certificate taken as it comes, but the handshake must
    /// be signed by its key. The connection is private from the path, its peer unnamed, as
    /// DCAU N means.
    pub(super) fn key_proof_only(provider: Arc<CryptoProvider>) -> PeerCheck {
        PeerCheck {
            provider,
            gsi: None,
        }
    }

    fn check(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
    ) -> Result<(), rustls::Error> {
        let Some((protection, refusal)) = &self.gsi else {
            return Ok(());
        };
        let security = &protection.security;
        let chain: Vec<&[u8]> = intermediates.iter().map(|c| c.as_ref()).collect();
        let checked = security
            .verify_der(end_entity, &chain)
            .and_then(|peer| security.authorize(&protection.check, &peer));
        checked.map_err(|e| {
            refusal.set(e.to_string());
            rustls::Error::InvalidCertificate(CertificateError::ApplicationVerificationFailure)
        })
    }

    fn signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        signed_by_key(&self.provider, message, cert, dss)
    }

    fn schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

impl ServerCertVerifier for PeerCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.check(end_entity, intermediates)
            .map(|()| ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("QUIC speaks only TLS 1.3".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes()
    }
}

impl ClientCertVerifier for PeerCheck {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.check(end_entity, intermediates)
            .map(|()| ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("QUIC speaks only TLS 1.3".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes()
    }
}

/// Whether `dss` over `message` is the signature of `cert`'s key (TLS 1.3's CertificateVerify),
/// read from the certificate without webpki's checks of it: a proxy certificate is no error.
fn signed_by_key(
    provider: &CryptoProvider,
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    let spki = openssl::x509::X509::from_der(cert)
        .and_then(|c| c.public_key())
        .and_then(|k| k.public_key_to_der())
        .map_err(|e| rustls::Error::General(format!("the peer's public key: {e}")))?;
    rustls::crypto::verify_tls13_signature_with_raw_key(
        message,
        &SubjectPublicKeyInfoDer::from(spki.as_slice()),
        dss,
        &provider.signature_verification_algorithms,
    )
}
