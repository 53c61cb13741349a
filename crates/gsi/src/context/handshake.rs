//! Stepping the handshake: the TLS flights, the peer's verification and GSI's tail (the
//! acceptor's `0x00`, the initiator's delegation flag).

use openssl::ssl::ErrorCode;
use openssl::x509::X509;

use super::tls::tls_error;
use super::{Delegation, SecurityContext, State, Step};
use crate::error::{GsiError, Result};

impl SecurityContext {
    /// Takes the peer's next token (or the next bytes from a socket) and says what to do.
    pub fn step(&mut self, token: &[u8]) -> Result<Step> {
        self.tls.get_mut().push(token);
        match self.state {
            State::Handshake => self.handshake(),
            State::AwaitKeepGoing => {
                let Some(byte) = self.read_byte()? else {
                    return Ok(Step::NeedMore);
                };
                if byte != 0 {
                    return Err(GsiError::Protocol(format!(
                        "expected the acceptor's 0x00, got {byte:#04x}"
                    )));
                }
                self.send_flag()
            }
            State::AwaitRequest => self.sign_delegation(),
            State::AwaitFlag => match self.read_byte()? {
                None => Ok(Step::NeedMore),
                Some(b'0') => {
                    self.state = State::Established;
                    Ok(Step::Done(None))
                }
                Some(b'D') => self.request_delegation(),
                Some(b) => Err(GsiError::Protocol(format!(
                    "expected the delegation flag D or 0, got {b:#04x}"
                ))),
            },
            State::AwaitProxy => self.accept_delegated(),
            State::Established => Err(GsiError::Protocol(
                "a token after the context was established".into(),
            )),
        }
    }

    fn handshake(&mut self) -> Result<Step> {
        match self.tls.do_handshake() {
            Ok(()) => {}
            Err(e) if e.code() == ErrorCode::WANT_READ => {
                let out = self.take_output();
                return Ok(if out.is_empty() {
                    Step::NeedMore
                } else {
                    Step::Continue(out)
                });
            }
            Err(e) => return Err(tls_error(&self.tls, e)),
        }
        self.verify_peer()?;
        if self.initiator {
            // Host authorisation before anything of ours goes out (Globus checks the target
            // name in gss_init_sec_context before it sends the delegation flag).
            if let (Some(target), Some(peer)) = (&self.config.target, &self.peer) {
                target.check(peer)?;
            }
        }
        let flight = self.take_output();
        if self.config.ssl_compatible {
            self.state = State::Established;
            return Ok(Step::Done((!flight.is_empty()).then_some(flight)));
        }
        if self.initiator {
            if !flight.is_empty() {
                // TLS 1.3: our Finished still has to reach the acceptor, who then says 0x00.
                self.state = State::AwaitKeepGoing;
                return Ok(Step::Continue(flight));
            }
            // TLS 1.2: the acceptor's Finished came last; a 0x00 may ride with it.
            if let Some(b) = self.read_byte()? {
                if b != 0 {
                    return Err(GsiError::Protocol(format!("expected 0x00, got {b:#04x}")));
                }
            }
            self.send_flag()
        } else {
            self.state = State::AwaitFlag;
            if !flight.is_empty() {
                // TLS 1.2: our Finished goes last, and the initiator speaks next anyway.
                return Ok(Step::Continue(flight));
            }
            self.write_app(&[0])?;
            Ok(Step::Continue(self.take_output()))
        }
    }

    fn send_flag(&mut self) -> Result<Step> {
        if self.config.delegation == Delegation::None {
            self.write_app(b"0")?;
            self.state = State::Established;
            Ok(Step::Done(Some(self.take_output())))
        } else {
            self.write_app(b"D")?;
            self.state = State::AwaitRequest;
            Ok(Step::Continue(self.take_output()))
        }
    }

    fn verify_peer(&mut self) -> Result<()> {
        let ssl = self.tls.ssl();
        let leaf = ssl
            .peer_certificate()
            .ok_or_else(|| GsiError::Protocol("the peer presented no certificate".into()))?;
        let leaf_der = leaf.to_der()?;
        let chain: Vec<X509> = ssl
            .peer_cert_chain()
            .map(|s| {
                s.iter()
                    .filter(|c| c.to_der().ok().as_deref() != Some(&leaf_der[..]))
                    .map(|c| c.to_owned())
                    .collect()
            })
            .unwrap_or_default();
        self.peer = Some(
            self.config
                .trust
                .verify(&leaf, &chain, self.config.verify)?,
        );
        Ok(())
    }
}
