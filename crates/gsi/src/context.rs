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

use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex};

use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::rsa::Rsa;
use openssl::ssl::{
    ErrorCode, Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslSessionCacheMode,
    SslStream, SslVerifyMode, SslVersion,
};
use openssl::x509::{X509NameBuilder, X509Req, X509};

use crate::credential::Credential;
use crate::error::{GsiError, Result};
use crate::proxy::{self, ProxyOptions};
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

/// Bytes in from the peer's tokens, bytes out to ours: the transport under the TLS session.
/// The input is one buffer with a consumed prefix, so a data channel can read its socket
/// straight into it (no copy through a token) and keep the buffer for the whole transfer.
#[derive(Debug, Default)]
struct MemIo {
    input: Vec<u8>,
    /// Consumed bytes at the front of `input`.
    start: usize,
    /// Filled bytes of `input` (the rest is spare room).
    end: usize,
    output: Vec<u8>,
    /// Bytes at the front of `output` already handed to the transport.
    sent: usize,
}

impl MemIo {
    /// Makes room for `n` more input bytes after `end`.
    fn room(&mut self, n: usize) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if self.input.len() - self.end < n {
            if self.start > 0 {
                self.input.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.input.len() - self.end < n {
                self.input.resize(self.end + n, 0);
            }
        }
    }

    fn push(&mut self, data: &[u8]) {
        self.room(data.len());
        self.input[self.end..self.end + data.len()].copy_from_slice(data);
        self.end += data.len();
    }

    fn unsent(&self) -> &[u8] {
        &self.output[self.sent..]
    }
}

impl Read for MemIo {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = &self.input[self.start..self.end];
        if left.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = left.len().min(buf.len());
        buf[..n].copy_from_slice(&left[..n]);
        self.start += n;
        Ok(n)
    }
}

impl Write for MemIo {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.sent == self.output.len() {
            self.output.clear();
            self.sent = 0;
        }
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
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
            State::AwaitRequest => {
                let Some(der) = self.read_der()? else {
                    return Ok(Step::NeedMore);
                };
                let req = X509Req::from_der(&der)
                    .map_err(|e| GsiError::decode("delegation request", e))?;
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
            State::AwaitFlag => match self.read_byte()? {
                None => Ok(Step::NeedMore),
                Some(b'0') => {
                    self.state = State::Established;
                    Ok(Step::Done(None))
                }
                Some(b'D') => {
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
                Some(b) => Err(GsiError::Protocol(format!(
                    "expected the delegation flag D or 0, got {b:#04x}"
                ))),
            },
            State::AwaitProxy => {
                let Some(der) = self.read_der()? else {
                    return Ok(Step::NeedMore);
                };
                let cert = X509::from_der(&der)
                    .map_err(|e| GsiError::decode("delegated certificate", e))?;
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

    fn peer_key_bits(&self) -> u32 {
        self.tls
            .ssl()
            .peer_certificate()
            .and_then(|c| c.public_key().ok())
            .map(|k| k.bits())
            .filter(|&b| b >= 2048)
            .unwrap_or(2048)
    }

    fn peer_digest(&self) -> MessageDigest {
        self.tls
            .ssl()
            .peer_certificate()
            .map(|c| proxy::signing_digest(&c))
            .unwrap_or_else(MessageDigest::sha256)
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

type Keylog = Option<Arc<Mutex<Vec<String>>>>;

/// Whether OpenSSL's complaint comes from a legacy or draft proxy in the chain.
fn old_format_proxy_error(store: &mut openssl::x509::X509StoreContextRef) -> bool {
    // invalid CA, path length, purpose, no certsign, critical extension, non-CA, proxy path
    // length, invalid extension, proxy subject name.
    const OLD_PROXY_ERRORS: [i32; 9] = [79, 25, 26, 32, 34, 37, 38, 41, 72];
    if !OLD_PROXY_ERRORS.contains(&store.error().as_raw()) {
        return false;
    }
    let Some(chain) = store.chain() else {
        return false;
    };
    let certs: Vec<&openssl::x509::X509Ref> = chain.iter().collect();
    certs.windows(2).any(|w| {
        matches!(
            proxy::classify(w[0], Some(w[1])),
            Ok(crate::proxy::CertKind::Proxy {
                format: crate::proxy::ProxyFormat::Legacy | crate::proxy::ProxyFormat::Gt3,
                ..
            })
        )
    })
}

fn tls_context(config: &ContextConfig, initiator: bool) -> Result<(SslContext, Keylog)> {
    let mut b = SslContextBuilder::new(SslMethod::tls())?;
    b.set_min_proto_version(Some(SslVersion::TLS1_2))?;
    b.set_max_proto_version(config.max_version)?;
    let cred = &config.credential;
    b.set_certificate(&cred.cert)?;
    b.set_private_key(&cred.key)?;
    for c in &cred.chain {
        b.add_extra_chain_cert(c.clone())?;
    }
    b.check_private_key()?;
    b.set_cert_store(config.trust.x509_store()?);
    // OpenSSL refuses legacy (GT2) and draft (GT3) proxies, which Globus tools still make
    // (grid-proxy-init -old / -draft): let those particular errors pass the handshake when
    // such a proxy is in the chain. `TrustStore::verify` then judges the whole chain before
    // the context is used (`verify_peer`).
    b.set_verify_callback(
        SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT,
        |ok, store| ok || old_format_proxy_error(store),
    );
    b.set_options(SslOptions::NO_TICKET);
    b.set_session_cache_mode(SslSessionCacheMode::OFF);
    if !initiator {
        b.set_num_tickets(0)?;
        b.set_cipher_list("HIGH")?;
    }
    let keylog = config.ssl_compatible.then(|| {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        b.set_keylog_callback(move |_, line| {
            if line.starts_with("CLIENT_TRAFFIC_SECRET_0 ")
                || line.starts_with("SERVER_TRAFFIC_SECRET_0 ")
            {
                if let Ok(mut l) = sink.lock() {
                    l.push(line.to_owned());
                }
            }
        });
        lines
    });
    Ok((b.build(), keylog))
}

fn tls_error(tls: &SslStream<MemIo>, e: openssl::ssl::Error) -> GsiError {
    let verify = tls.ssl().verify_result();
    // A verify error the callback let pass (an old-format proxy) stays recorded; report it
    // only when verification is what failed.
    if verify.as_raw() != 0 && e.to_string().contains("certificate verify failed") {
        return GsiError::Untrusted {
            subject: tls
                .ssl()
                .peer_certificate()
                .map(|c| crate::dn::one_line(c.subject_name()))
                .unwrap_or_else(|| "the peer".into()),
            reason: verify.error_string().to_string(),
        };
    }
    GsiError::Tls(e.to_string())
}
