//! TLS for HTTPS services that know their clients by X.509 certificates and RFC 3820 proxies
//! (the transfer service's API, the HTTPS/WebDAV door): the acceptor, and the check of the
//! chain a client sent against the trusted CAs, signing policies and CRLs, as GSI checks it.

use openssl::ssl::{AlpnError, SslAcceptor, SslMethod, SslRef, SslVerifyMode, SslVersion};

use crate::credential::Credential;
use crate::error::{GsiError, Result};
use crate::trust::{TrustStore, Verified, VerifyOptions};

/// A TLS acceptor for `host`: TLS 1.2 or later, a client certificate asked for but not required
/// (anonymous, password and token clients have none), no session resumption (each connection
/// proves itself), and `alpn` offered in order of preference (empty: no ALPN).
///
/// OpenSSL's own chain check is bypassed so that legacy and draft proxies pass the handshake;
/// the handshake still proves the client holds the key, and [`peer_certificate`] then judges
/// the chain.
pub fn acceptor(host: &Credential, alpn: &'static [&'static [u8]]) -> Result<SslAcceptor> {
    let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls())?;
    b.set_min_proto_version(Some(SslVersion::TLS1_2))?;
    b.set_certificate(&host.cert)?;
    b.set_private_key(&host.key)?;
    for c in &host.chain {
        b.add_extra_chain_cert(c.clone())?;
    }
    b.check_private_key()?;
    b.set_verify_callback(SslVerifyMode::PEER, |_, _| true);
    b.set_session_cache_mode(openssl::ssl::SslSessionCacheMode::OFF);
    b.set_options(openssl::ssl::SslOptions::NO_TICKET);
    // An idle connection then holds no record buffers (about 34 KiB), only its state.
    b.set_mode(openssl::ssl::SslMode::RELEASE_BUFFERS);
    // Each read takes what has arrived (up to a record buffer) instead of a record's 5-byte
    // header and then its body: half the reads on an upload.
    b.set_read_ahead(true);
    if !alpn.is_empty() {
        b.set_alpn_select_callback(move |_, offered| {
            alpn.iter()
                .find_map(|want| {
                    let mut rest = offered;
                    while let Some((&len, tail)) = rest.split_first() {
                        let (name, next) = tail.split_at(usize::from(len).min(tail.len()));
                        if name == *want {
                            return Some(name);
                        }
                        rest = next;
                    }
                    None
                })
                .ok_or(AlpnError::NOACK)
        });
    }
    Ok(b.build())
}

/// What the client of an established TLS connection proved about itself.
#[derive(Debug)]
pub enum PeerCertificate {
    /// It sent no certificate.
    None,
    /// Its chain verified: the identity is [`Verified::identity`].
    Verified(Box<Verified>),
    /// It sent a chain that does not verify.
    Refused(GsiError),
}

/// Verifies the chain the client of `ssl` sent (proxies allowed, limited ones too).
pub fn peer_certificate(trust: &TrustStore, ssl: &SslRef) -> PeerCertificate {
    let Some(leaf) = ssl.peer_certificate() else {
        return PeerCertificate::None;
    };
    // On the server side OpenSSL's peer chain leaves out the leaf.
    let chain: Vec<openssl::x509::X509> = ssl
        .peer_cert_chain()
        .map(|s| s.iter().map(|c| c.to_owned()).collect())
        .unwrap_or_default();
    match trust.verify(&leaf, &chain, VerifyOptions::default()) {
        Ok(v) => PeerCertificate::Verified(Box::new(v)),
        Err(e) => PeerCertificate::Refused(e),
    }
}
