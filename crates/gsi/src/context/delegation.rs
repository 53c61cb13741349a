//! Delegation after the handshake: the acceptor's certificate request, the proxy the initiator
//! signs for it, and the delegated credential that results.

use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::rsa::Rsa;
use openssl::x509::{X509NameBuilder, X509Req, X509};

use super::{Delegation, SecurityContext, State, Step};
use crate::credential::Credential;
use crate::error::{GsiError, Result};
use crate::proxy::{self, ProxyOptions};

/// The largest key generated for a delegated proxy, whatever the peer's own.
const MAX_DELEGATED_KEY_BITS: u32 = 4096;

impl SecurityContext {
    /// Initiator: signs a proxy for the key in the acceptor's certificate request and sends it.
    pub(super) fn sign_delegation(&mut self) -> Result<Step> {
        let Some(der) = self.read_der()? else {
            return Ok(Step::NeedMore);
        };
        let req = X509Req::from_der(&der).map_err(|e| GsiError::decode("delegation request", e))?;
        let key = req.public_key()?;
        if !req.verify(&key)? {
            return Err(GsiError::Protocol(
                "the delegation request's signature is wrong".into(),
            ));
        }
        let left = self.config.credential.seconds_left()?.max(0) as u64;
        let options = ProxyOptions {
            lifetime: std::time::Duration::from_secs(left),
            limited: self.config.delegation == Delegation::Limited,
            path_len: None,
            format: None,
        };
        let cert = proxy::sign_proxy(&self.config.credential, &key, &options)?;
        self.write_app(&cert.to_der()?)?;
        self.state = State::Established;
        Ok(Step::Done(Some(self.take_output())))
    }

    /// Acceptor, on `D`: sends a certificate request for a fresh key of the peer's size.
    pub(super) fn request_delegation(&mut self) -> Result<Step> {
        let peer_bits = self.peer_key_bits();
        let key = PKey::from_rsa(Rsa::generate(peer_bits)?)?;
        let mut req = X509Req::builder()?;
        let mut name = X509NameBuilder::new()?;
        name.append_entry_by_text("CN", "proxy")?;
        req.set_subject_name(&name.build())?;
        req.set_pubkey(&key)?;
        req.sign(&key, self.peer_digest())?;
        self.write_app(&req.build().to_der()?)?;
        self.pending_key = Some(key);
        self.state = State::AwaitProxy;
        Ok(Step::Continue(self.take_output()))
    }

    /// Acceptor: takes the proxy certificate the initiator signed as the delegated credential.
    pub(super) fn accept_delegated(&mut self) -> Result<Step> {
        let Some(der) = self.read_der()? else {
            return Ok(Step::NeedMore);
        };
        let cert =
            X509::from_der(&der).map_err(|e| GsiError::decode("delegated certificate", e))?;
        let key = self
            .pending_key
            .take()
            .ok_or_else(|| GsiError::Protocol("no delegation key".into()))?;
        let peer = self
            .peer
            .as_ref()
            .ok_or_else(|| GsiError::Protocol("no peer".into()))?;
        // The chain above the new proxy: the peer's, without the trust anchor.
        let mut chain: Vec<X509> = peer.chain().to_vec();
        chain.pop();
        let delegated = Credential::new(cert, key, chain)?;
        self.config
            .trust
            .verify(&delegated.cert, &delegated.chain, self.config.verify)?;
        self.delegated = Some(delegated);
        self.state = State::Established;
        Ok(Step::Done(None))
    }

    fn peer_key_bits(&self) -> u32 {
        self.tls
            .ssl()
            .peer_certificate()
            .and_then(|c| c.public_key().ok())
            .map(|k| k.bits())
            // The peer's certificate names the size, so it is held to what a proxy needs: a
            // 16384-bit key would cost this side minutes of CPU to generate.
            .map(|b| b.clamp(2048, MAX_DELEGATED_KEY_BITS))
            .unwrap_or(2048)
    }

    fn peer_digest(&self) -> MessageDigest {
        self.tls
            .ssl()
            .peer_certificate()
            .map(|c| proxy::signing_digest(&c))
            .unwrap_or_else(MessageDigest::sha256)
    }

    /// One whole DER object from the application data, if all of it has arrived.
    fn read_der(&mut self) -> Result<Option<Vec<u8>>> {
        self.fill_early()?;
        let Some(len) = der_len(&self.early)? else {
            return Ok(None);
        };
        if self.early.len() < len {
            return Ok(None);
        }
        let rest = self.early.split_off(len);
        Ok(Some(std::mem::replace(&mut self.early, rest)))
    }
}

/// The total length of the DER object at the start of `bytes`, once its header has arrived.
fn der_len(bytes: &[u8]) -> Result<Option<usize>> {
    if bytes.len() < 2 {
        return Ok(None);
    }
    if bytes[0] != 0x30 {
        return Err(GsiError::Protocol(format!(
            "expected a DER SEQUENCE, got {:#04x}",
            bytes[0]
        )));
    }
    let first = bytes[1];
    if first < 0x80 {
        return Ok(Some(2 + usize::from(first)));
    }
    let n = usize::from(first & 0x7f);
    if n == 0 || n > 3 {
        return Err(GsiError::Protocol("DER object too large".into()));
    }
    if bytes.len() < 2 + n {
        return Ok(None);
    }
    let len = bytes[2..2 + n]
        .iter()
        .fold(0usize, |a, &b| (a << 8) | usize::from(b));
    Ok(Some(2 + n + len))
}
