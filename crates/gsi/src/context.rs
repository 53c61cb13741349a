//! The GSI security context, driven through memory: the tokens that travel in `ADAT` lines on
//! the control channel, or as raw bytes at the start of a DCAU data connection.
//!
//! GSI's GSS-API mechanism is TLS with a short tail (see `shared/reference/gsi.md` §1): the
//! initiator (client) is the TLS client, both sides present certificates, then
//! - the acceptor writes one application byte `0x00` when the handshake left it nothing to say
//!   (always so in TLS 1.3), so the exchange keeps alternating;
//! - the initiator writes `D` ("I will delegate") or `0`;
//! - on `D` the acceptor sends a DER certificate request for a fresh key, and the initiator
//!   answers with the DER proxy certificate it signed: the delegated credential.
//!
//! Afterwards [`SecurityContext::wrap`] and [`SecurityContext::unwrap`] turn messages into TLS
//! records and back, which is what `ENC`/`MIC` commands and `63x` replies carry.

mod delegation;
mod handshake;
mod tls;
mod wrap;

use std::sync::{Arc, Mutex};

use openssl::pkey::{PKey, Private};
use openssl::ssl::{ErrorCode, Ssl, SslStream, SslVersion};

use self::tls::{tls_context, tls_error, MemIo};
use crate::credential::Credential;
use crate::error::{GsiError, Result};
use crate::trust::{TrustStore, Verified, VerifyOptions};

/// Whether the initiator hands the acceptor a credential, and of which kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delegation {
    /// No delegation (`0`); what data channels always do.
    None,
    /// A limited proxy (what globus-url-copy delegates).
    Limited,
    /// A full impersonation proxy.
    Full,
}

/// How one side of a context is set up.
#[derive(Clone)]
pub struct ContextConfig {
    /// The credential presented in the handshake.
    pub credential: Credential,
    /// The CAs the peer's chain must lead to.
    pub trust: Arc<TrustStore>,
    /// What the peer's chain may contain.
    pub verify: VerifyOptions,
    /// Initiator only: what to delegate.
    pub delegation: Delegation,
    /// Initiator only: the server name sent as SNI.
    pub sni: Option<String>,
    /// Initiator only: who the acceptor must be. Checked as soon as its certificate is
    /// verified, before the delegation flag: a peer that fails it never sees `D`, signs no
    /// request and receives no proxy. `None`: the caller checks the peer afterwards (and
    /// must not delegate).
    pub target: Option<crate::target::Target>,
    /// The newest TLS version to speak (`None`: TLS 1.3); the oldest is always TLS 1.2.
    pub max_version: Option<SslVersion>,
    /// Plain TLS with no GSI tail (Globus' `GSS_C_GLOBUS_SSL_COMPATIBLE`): neither the
    /// acceptor's `0x00` nor the delegation flag. PROT S and P data channels are set up so;
    /// the control channel and PROT C data channels have the tail.
    pub ssl_compatible: bool,
}

impl std::fmt::Debug for ContextConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextConfig")
            .field("credential", &self.credential)
            .field("delegation", &self.delegation)
            .field("sni", &self.sni)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl ContextConfig {
    /// A configuration with default verification, no delegation and no SNI.
    pub fn new(credential: Credential, trust: Arc<TrustStore>) -> ContextConfig {
        ContextConfig {
            credential,
            trust,
            verify: VerifyOptions::default(),
            delegation: Delegation::None,
            sni: None,
            target: None,
            max_version: None,
            ssl_compatible: false,
        }
    }
}

/// What a step produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send this token; the peer answers with the next.
    Continue(Vec<u8>),
    /// The token held only part of a TLS flight: feed more bytes (never the case with whole
    /// ADAT tokens; normal when reading a socket).
    NeedMore,
    /// The context is established; send this last token first if there is one.
    Done(Option<Vec<u8>>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Handshake,
    /// Initiator: sent its last handshake flight, waits for the acceptor's `0x00`.
    AwaitKeepGoing,
    /// Initiator: sent `D`, waits for the certificate request.
    AwaitRequest,
    /// Acceptor: waits for `D` or `0`.
    AwaitFlag,
    /// Acceptor: sent the request, waits for the proxy certificate.
    AwaitProxy,
    Established,
}

/// One side of a GSI security context.
pub struct SecurityContext {
    initiator: bool,
    tls: SslStream<MemIo>,
    state: State,
    config: ContextConfig,
    peer: Option<Verified>,
    /// Acceptor: the key whose certificate the initiator is signing.
    pending_key: Option<PKey<Private>>,
    delegated: Option<Credential>,
    /// Application bytes read during the handshake tail, or unwrapped and not yet taken.
    early: Vec<u8>,
    /// The peer closed its TLS session (close_notify): the end of a protected stream.
    closed: bool,
    /// SSL-compatible (data) contexts: the TLS 1.3 traffic secrets OpenSSL logs, so the
    /// records after the handshake can be sealed without OpenSSL (see `record`).
    keylog: Option<Arc<Mutex<Vec<String>>>>,
}

impl std::fmt::Debug for SecurityContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecurityContext")
            .field("initiator", &self.initiator)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl SecurityContext {
    /// Starts an initiator; returns it and the first token (the TLS ClientHello).
    pub fn initiator(config: ContextConfig) -> Result<(SecurityContext, Vec<u8>)> {
        let (ctx, keylog) = tls_context(&config, true)?;
        let mut ssl = Ssl::new(&ctx)?;
        ssl.set_connect_state();
        if let Some(name) = config.sni.as_deref().filter(|n| !n.is_empty()) {
            ssl.set_hostname(name)?;
        }
        let mut me = SecurityContext::new(true, ssl, config, keylog)?;
        match me.tls.do_handshake() {
            Ok(()) => {
                return Err(GsiError::Protocol(
                    "TLS finished before the first token".into(),
                ))
            }
            Err(e) if e.code() == ErrorCode::WANT_READ => {}
            Err(e) => return Err(tls_error(&me.tls, e)),
        }
        let first = me.take_output();
        Ok((me, first))
    }

    /// Starts an acceptor; it waits for the initiator's first token.
    pub fn acceptor(config: ContextConfig) -> Result<SecurityContext> {
        let (ctx, keylog) = tls_context(&config, false)?;
        let mut ssl = Ssl::new(&ctx)?;
        ssl.set_accept_state();
        SecurityContext::new(false, ssl, config, keylog)
    }

    fn new(
        initiator: bool,
        ssl: Ssl,
        config: ContextConfig,
        keylog: Option<Arc<Mutex<Vec<String>>>>,
    ) -> Result<SecurityContext> {
        Ok(SecurityContext {
            initiator,
            tls: SslStream::new(ssl, MemIo::default())?,
            state: State::Handshake,
            config,
            peer: None,
            pending_key: None,
            delegated: None,
            early: Vec::new(),
            closed: false,
            keylog,
        })
    }

    /// Whether the context is established.
    pub fn is_established(&self) -> bool {
        self.state == State::Established
    }

    /// Bytes received after the last TLS record consumed: on a PROT C data channel, the first
    /// clear data after the handshake.
    pub fn take_unconsumed(&mut self) -> Vec<u8> {
        let io = self.tls.get_mut();
        let rest = io.input[io.start..io.end].to_vec();
        io.start = 0;
        io.end = 0;
        rest
    }

    /// Whether the peer closed its TLS session: the end of a protected stream.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The verified peer, once the handshake is done.
    pub fn peer(&self) -> Option<&Verified> {
        self.peer.as_ref()
    }

    /// The credential the initiator delegated (acceptor only), once.
    pub fn take_delegated(&mut self) -> Option<Credential> {
        self.delegated.take()
    }

    /// Whether wrapped messages are encrypted (`ENC`/632) or only integrity-protected
    /// (`MIC`/631, a NULL cipher).
    pub fn confidential(&self) -> bool {
        self.tls
            .ssl()
            .current_cipher()
            .is_some_and(|c| c.bits().secret > 0)
    }

    /// The TLS version and cipher, for logs.
    pub fn describe(&self) -> String {
        let ssl = self.tls.ssl();
        format!(
            "{} {}",
            ssl.version_str(),
            ssl.current_cipher().map(|c| c.name()).unwrap_or("none")
        )
    }

    /// One application byte, if one has arrived. Reads one record at most: on a data channel
    /// with PROT C the bytes after the handshake tail are clear data, not TLS.
    fn read_byte(&mut self) -> Result<Option<u8>> {
        if !self.early.is_empty() {
            return Ok(Some(self.early.remove(0)));
        }
        let mut one = [0u8; 1];
        match self.tls.ssl_read(&mut one) {
            Ok(1) => Ok(Some(one[0])),
            Ok(_) => Err(GsiError::Protocol("the peer closed the TLS session".into())),
            Err(e) if e.code() == ErrorCode::WANT_READ => Ok(None),
            Err(e) => Err(tls_error(&self.tls, e)),
        }
    }

    fn fill_early(&mut self) -> Result<()> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match self.tls.ssl_read(&mut buf) {
                Ok(n) if n > 0 => self.early.extend_from_slice(&buf[..n]),
                Err(e) if e.code() == ErrorCode::WANT_READ => return Ok(()),
                Ok(_) => {
                    self.closed = true;
                    return Ok(());
                }
                Err(e) if e.code() == ErrorCode::ZERO_RETURN => {
                    self.closed = true;
                    return Ok(());
                }
                Err(e) => return Err(tls_error(&self.tls, e)),
            }
        }
    }

    fn write_app(&mut self, data: &[u8]) -> Result<()> {
        let mut done = 0;
        while done < data.len() {
            done += self
                .tls
                .ssl_write(&data[done..])
                .map_err(|e| tls_error(&self.tls, e))?;
        }
        Ok(())
    }

    fn take_output(&mut self) -> Vec<u8> {
        let io = self.tls.get_mut();
        let out = io.output.split_off(io.sent);
        io.output.clear();
        io.sent = 0;
        out
    }
}
