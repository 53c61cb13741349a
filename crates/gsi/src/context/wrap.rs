//! An established context at work: wrapping control-channel messages, and sealing and opening
//! data-channel records (or handing their traffic secrets to a `RecordLayer`).

use openssl::ssl::{ErrorCode, SslVersion};

use super::tls::tls_error;
use super::{SecurityContext, State};
use crate::error::{GsiError, Result};

impl SecurityContext {
    /// Protects a message: the TLS records that carry it.
    pub fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>> {
        if self.state != State::Established {
            return Err(GsiError::Protocol(
                "wrap before the context is established".into(),
            ));
        }
        self.write_app(message)?;
        Ok(self.take_output())
    }

    /// Opens a wrapped message.
    pub fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>> {
        if self.state != State::Established {
            return Err(GsiError::Protocol(
                "unwrap before the context is established".into(),
            ));
        }
        self.tls.get_mut().push(token);
        self.fill_early()?;
        Ok(std::mem::take(&mut self.early))
    }

    /// Data channels, sending: encrypts `plain` into TLS records queued for the transport
    /// (see [`SecurityContext::unsent`]). Records are at most 16 KiB of plaintext each.
    pub fn seal(&mut self, plain: &[u8]) -> Result<()> {
        if self.state != State::Established {
            return Err(GsiError::Protocol(
                "seal before the context is established".into(),
            ));
        }
        self.write_app(plain)
    }

    /// Data channels: TLS bytes waiting for the transport (records from
    /// [`SecurityContext::seal`], a close_notify, handshake tokens of a socket-driven
    /// exchange).
    pub fn unsent(&self) -> &[u8] {
        self.tls.get_ref().unsent()
    }

    /// Data channels: the transport took `n` bytes of [`SecurityContext::unsent`].
    pub fn mark_sent(&mut self, n: usize) {
        let io = self.tls.get_mut();
        io.sent = (io.sent + n).min(io.output.len());
        if io.sent == io.output.len() {
            io.output.clear();
            io.sent = 0;
        }
    }

    /// Data channels, receiving: lets `fill` read transport bytes straight into the context's
    /// input buffer (up to `max` bytes); returns what `fill` returned.
    pub fn receive_with<E>(
        &mut self,
        max: usize,
        fill: impl FnOnce(&mut [u8]) -> std::result::Result<usize, E>,
    ) -> std::result::Result<usize, E> {
        let io = self.tls.get_mut();
        io.room(max);
        let end = io.end;
        let n = fill(&mut io.input[end..end + max])?;
        io.end += n.min(max);
        Ok(n)
    }

    /// Data channels, receiving: decrypts into `out` from the bytes received so far.
    /// `Some(0)` is the peer's close_notify; `None` means more transport bytes are needed.
    pub fn open(&mut self, out: &mut [u8]) -> Result<Option<usize>> {
        if !self.early.is_empty() {
            let n = self.early.len().min(out.len());
            out[..n].copy_from_slice(&self.early[..n]);
            self.early.drain(..n);
            return Ok(Some(n));
        }
        if self.closed || out.is_empty() {
            return Ok(Some(0));
        }
        match self.tls.ssl_read(out) {
            Ok(0) => {
                self.closed = true;
                Ok(Some(0))
            }
            Ok(n) => Ok(Some(n)),
            Err(e) if e.code() == ErrorCode::WANT_READ => Ok(None),
            Err(e) if e.code() == ErrorCode::ZERO_RETURN => {
                self.closed = true;
                Ok(Some(0))
            }
            Err(e) => Err(tls_error(&self.tls, e)),
        }
    }

    /// Data channels: queues our close_notify (the end of a protected stream-mode transfer).
    pub fn close(&mut self) -> Result<()> {
        match self.tls.shutdown() {
            Ok(_) => Ok(()),
            Err(e) if e.code() == ErrorCode::WANT_READ => Ok(()),
            Err(e) => Err(tls_error(&self.tls, e)),
        }
    }

    /// Data channels (SSL-compatible contexts under TLS 1.3 with a suite `record` implements):
    /// the application traffic secrets, for a [`crate::RecordLayer`] that takes over the
    /// connection from here. `None` keeps the records with OpenSSL (TLS 1.2, other suites).
    /// Call right after the handshake, before any data is sealed or opened here.
    pub fn traffic_secrets(&self) -> Option<crate::record::TrafficSecrets> {
        if self.state != State::Established {
            return None;
        }
        let ssl = self.tls.ssl();
        if ssl.version2() != Some(SslVersion::TLS1_3) {
            return None;
        }
        let suite = crate::record::Suite::from_name(ssl.current_cipher()?.standard_name()?)?;
        let lines = self.keylog.as_ref()?.lock().ok()?;
        let secret = |label: &str| {
            lines.iter().find_map(|l| {
                let mut it = l.split(' ');
                (it.next() == Some(label))
                    .then(|| it.nth(1))
                    .flatten()
                    .and_then(hex_bytes)
            })
        };
        let client = secret("CLIENT_TRAFFIC_SECRET_0")?;
        let server = secret("SERVER_TRAFFIC_SECRET_0")?;
        let (read, write) = if self.initiator {
            (server, client)
        } else {
            (client, server)
        };
        Some(crate::record::TrafficSecrets { suite, read, write })
    }
}

fn hex_bytes(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}
