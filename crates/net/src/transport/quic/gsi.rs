//! QUIC's TLS 1.3 handshake carrying the GSI credential of DCAU A/S: each side presents the
//! certificate chain of the session (a host certificate, or a proxy chain) and checks the
//! other's with the chain check the GSI handshake over TCP uses (`DataSecurity::verify_der`:
//! trusted CAs, CRLs, signing policies, proxy rules), then who it is (`authorize`: our own
//! identity for DCAU A, the named subject for DCAU S). The QUIC connection is then the
//! authenticated, encrypted channel DCAU/PROT ask for, and no second TLS runs inside it.
//!
//! rustls' own certificate check (webpki) is not used: it knows no proxy certificates and
//! refuses their critical ProxyCertInfo extension. Handshake signatures are still checked by
//! rustls, against the public key of the chain `ferry_gsi` verified.

use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, SubjectPublicKeyInfoDer,
    UnixTime,
};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::sign::CertifiedKey;
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

use crate::{DataProtection, NetError};

/// The session's credential as rustls presents it: the chain leaf first, signed by its key.
pub(super) fn certified_key(
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
    fn set(&self, why: String) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }

    /// What the check found, if it refused the peer.
    pub(super) fn take(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// Checks the peer's chain and identity as DCAU asks; on either side of the handshake.
#[derive(Debug)]
pub(super) struct GsiPeer {
    protection: DataProtection,
    provider: Arc<CryptoProvider>,
    refusal: Refusal,
}

impl GsiPeer {
    pub(super) fn new(
        protection: DataProtection,
        provider: Arc<CryptoProvider>,
        refusal: Refusal,
    ) -> GsiPeer {
        GsiPeer {
            protection,
            provider,
            refusal,
        }
    }

    fn check(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
    ) -> Result<(), rustls::Error> {
        let security = &self.protection.security;
        let chain: Vec<&[u8]> = intermediates.iter().map(|c| c.as_ref()).collect();
        let checked = security
            .verify_der(end_entity, &chain)
            .and_then(|peer| security.authorize(&self.protection.check, &peer));
        checked.map_err(|e| {
            self.refusal.set(e.to_string());
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

impl ServerCertVerifier for GsiPeer {
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

impl ClientCertVerifier for GsiPeer {
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
pub(super) fn signed_by_key(
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
