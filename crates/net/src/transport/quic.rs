//! `quic`: data connections over QUIC (RFC 9000, quinn), a user-space transport that carries
//! on through random loss where a loss-based TCP backs off, always encrypted, one UDP port per
//! listener (the port PASV/EPSV/SPAS name).
//!
//! No GridFTP implementation has QUIC, so the wire is ferry's own and both ends are ferry:
//! - one data connection is one QUIC connection with one bidirectional stream, opened by the
//!   connecting side, which first writes the 8-byte preamble `ferry-q1` (QUIC announces a
//!   stream only once it carries data, and in MODE E the connecting side may be the receiver);
//!   the listening side answers with the same 8 bytes once it took the connection;
//! - TLS 1.3 with ALPN `ferry-dc/1`. Under DCAU A/S the handshake carries the session's GSI
//!   credentials, both ways, each checked as the GSI handshake over TCP checks them (`gsi`):
//!   the QUIC connection is then the authenticated, encrypted channel DCAU and PROT C/S/P ask
//!   for, and no GSI layer runs inside it. Under DCAU N each process presents an ephemeral
//!   self-signed P-256 certificate: private from the path, the peer unnamed, as DCAU N means.
//!   A listener answers each connection attempt only when a transfer takes it, with that
//!   transfer's credential (`DataConn::establish`);
//! - ending a connection finishes the stream and keeps the connection until the peer has
//!   acknowledged every byte (a TCP close's linger), then closes it with code 0.
//!
//! Options (`SITE SETNETSTACK quic:congestion=cubic;window=67108864`):
//! - `congestion=bbr|cubic|newreno`: the sending side's controller. BBR by default: it models
//!   the path (bottleneck rate, minimum RTT) and does not read random loss as congestion.
//!   Whichever it is, its window is held to 1.5 times the measured bandwidth-delay product
//!   (`bounded`), so a start-up overshoot cannot leave the receiver more gaps than quinn keeps;
//! - `window=BYTES`: the flow-control windows (per stream and per connection) and the send
//!   window, fixed. Without it, the socket buffer asked for (`SBUF`, `-tcp-bs`) when one was,
//!   fixed too; else 64 MiB (room for 2.5 Gbit/s at 200 ms) that grows with the measured
//!   bandwidth-delay product up to 1 GiB (`windows`). A window is a limit, not an
//!   allocation: memory is used only by bytes in flight.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::sign::SingleCertAndKey;
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

use self::gsi::{GsiPeer, Refusal};
use super::{ConnectFuture, Transport};
use crate::listener::bind_in_range;
use crate::{
    DataConn, DataListener, DataProtection, EstablishFuture, Established, NetError, PortRange,
    SocketTuning, TransportListener, TransportStream,
};

/// The application protocol QUIC's TLS negotiates.
const ALPN: &[u8] = b"ferry-dc/1";
/// What the connecting side writes first on its stream.
const PREAMBLE: &[u8; 8] = b"ferry-q1";
/// Flow-control window without an option or a buffer size.
const DEFAULT_WINDOW: u64 = 64 << 20;
/// The smallest window taken from a buffer size: a 4 KiB `-tcp-bs` would starve QUIC.
const MIN_WINDOW: u64 = 1 << 20;
/// The UDP socket buffers asked of the kernel (it caps them at `net.core.rmem_max` and
/// `wmem_max`): bursts of a fast sender queue here before quinn reads them.
const SOCKET_BUFFER: usize = 8 << 20;
/// A peer silent this long is gone (keep-alives flow every [`KEEP_ALIVE`]).
const IDLE_TIMEOUT_MS: u32 = 30_000;
/// Keep-alive interval: MODE E connections may idle between transfers.
const KEEP_ALIVE: Duration = Duration::from_secs(5);
/// How long an accepted connection may take to open its stream and write the preamble.
const ARRIVAL: Duration = Duration::from_secs(30);
/// How long a closed connection waits for the peer to acknowledge what was sent.
const LINGER: Duration = Duration::from_secs(30);
/// Connections a listener holds before the DTP accepts them.
const BACKLOG: usize = 128;

/// QUIC.
#[derive(Debug)]
pub(super) struct Quic;

/// The sending side's congestion controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Controller {
    Bbr,
    Cubic,
    NewReno,
}

/// A `quic:` stack entry's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Options {
    congestion: Controller,
    window: Option<u64>,
}

impl Options {
    fn parse(options: &str) -> Result<Options, NetError> {
        let mut o = Options {
            congestion: Controller::Bbr,
            window: None,
        };
        let bad = |why: String| NetError::DriverOptions {
            driver: "quic".into(),
            why,
        };
        for pair in options.split(';').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("congestion", name)) => {
                    o.congestion = match name.to_ascii_lowercase().as_str() {
                        "bbr" => Controller::Bbr,
                        "cubic" => Controller::Cubic,
                        "newreno" | "reno" => Controller::NewReno,
                        _ => {
                            return Err(bad(format!(
                                "unknown congestion control {name:?} (bbr, cubic or newreno)"
                            )))
                        }
                    }
                }
                Some(("window", n)) => {
                    let bytes: u64 = n
                        .parse()
                        .map_err(|_| bad(format!("window must be a byte count, got {n:?}")))?;
                    if !(MIN_WINDOW..=1 << 40).contains(&bytes) {
                        return Err(bad(format!(
                            "window {bytes} is outside {MIN_WINDOW} to {}",
                            1u64 << 40
                        )));
                    }
                    o.window = Some(bytes);
                }
                _ => {
                    return Err(bad(format!(
                        "unknown option {pair:?} (the quic driver takes congestion=bbr|cubic|newreno and window=BYTES)"
                    )))
                }
            }
        }
        Ok(o)
    }

    /// The windows for connections tuned with `tuning`.
    fn window(&self, tuning: &SocketTuning) -> u64 {
        self.window
            .or_else(|| {
                tuning
                    .send_buffer
                    .max(tuning.recv_buffer)
                    .map(|b| u64::from(b).max(MIN_WINDOW))
            })
            .unwrap_or(DEFAULT_WINDOW)
    }

    /// Whether the windows grow with the path (`windows`): unless a window or a buffer size
    /// was asked for, which then holds, as an explicit TCP buffer does.
    fn follows_path(&self, tuning: &SocketTuning) -> bool {
        self.window.is_none() && tuning.send_buffer.max(tuning.recv_buffer).is_none()
    }

    fn transport(&self, tuning: &SocketTuning) -> Arc<quinn::TransportConfig> {
        let window = self.window(tuning);
        let mut t = quinn::TransportConfig::default();
        let w = quinn::VarInt::from_u64(window).unwrap_or(quinn::VarInt::MAX);
        // A growing connection window needs a stream window that does not hold it back.
        let stream = match self.follows_path(tuning) {
            true => quinn::VarInt::from_u64(windows::MAX_WINDOW).unwrap_or(quinn::VarInt::MAX),
            false => w,
        };
        t.stream_receive_window(stream)
            .receive_window(w)
            .send_window(window)
            .max_idle_timeout(Some(quinn::VarInt::from_u32(IDLE_TIMEOUT_MS).into()))
            .keep_alive_interval(Some(KEEP_ALIVE))
            .max_concurrent_bidi_streams(1u8.into())
            .max_concurrent_uni_streams(0u8.into());
        let inner: Arc<dyn quinn::congestion::ControllerFactory + Send + Sync> =
            match self.congestion {
                Controller::Bbr => Arc::new(quinn::congestion::BbrConfig::default()),
                Controller::Cubic => Arc::new(quinn::congestion::CubicConfig::default()),
                Controller::NewReno => Arc::new(quinn::congestion::NewRenoConfig::default()),
            };
        t.congestion_controller_factory(Arc::new(bounded::BoundedFactory(inner)));
        Arc::new(t)
    }
}

impl Transport for Quic {
    fn name(&self) -> &'static str {
        "quic"
    }

    fn accept_options(&self, options: &str) -> Result<(), NetError> {
        Options::parse(options).map(drop)
    }

    fn connect<'a>(
        &'a self,
        addr: SocketAddr,
        tuning: SocketTuning,
        options: &'a str,
    ) -> ConnectFuture<'a> {
        Box::pin(async move {
            let options = Options::parse(options)?;
            let fail = |source: io::Error| NetError::Connect { addr, source };
            let local = match addr {
                SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
                SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
            };
            let endpoint =
                endpoint(udp_socket(local, &tuning).map_err(fail)?, None).map_err(fail)?;
            let local = endpoint.local_addr().map_err(fail)?;
            Ok(DataConn::from_transport(Box::new(QuicStream {
                state: State::Dialing(endpoint),
                peer: addr,
                local,
                options,
                tuning,
                secured: Established::Plain,
            })))
        })
    }

    fn listen(
        &self,
        ip: IpAddr,
        range: Option<PortRange>,
        tuning: SocketTuning,
        options: &str,
    ) -> Result<DataListener, NetError> {
        let options = Options::parse(options)?;
        // The endpoint's own configuration only lets it take connection attempts; each is
        // answered with the transfer's credential once the DTP takes it (`establish`).
        let server = server_config(&options, &tuning, None, &Refusal::default())?;
        let socket = bind_in_range(range, |port| udp_socket(SocketAddr::new(ip, port), &tuning))?;
        let endpoint = endpoint(socket, Some(server))?;
        let local = endpoint.local_addr()?;
        let (tx, rx) = mpsc::channel(BACKLOG);
        let accepting = tokio::spawn(accept_all(endpoint.clone(), tx));
        Ok(DataListener::from_transport(Box::new(QuicListener {
            endpoint,
            local,
            options,
            tuning,
            ready: Mutex::new(rx),
            accepting,
        })))
    }
}

/// A UDP socket bound to `addr` with large buffers, non-blocking for tokio.
fn udp_socket(addr: SocketAddr, tuning: &SocketTuning) -> io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    let want = |asked: Option<u32>| asked.map_or(0, |b| b as usize).max(SOCKET_BUFFER);
    // The kernel caps what it grants at rmem_max/wmem_max: a smaller buffer is no error.
    let _ = s.set_recv_buffer_size(want(tuning.recv_buffer));
    let _ = s.set_send_buffer_size(want(tuning.send_buffer));
    s.bind(&addr.into())?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

fn endpoint(
    socket: std::net::UdpSocket,
    server: Option<quinn::ServerConfig>,
) -> io::Result<quinn::Endpoint> {
    quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        server,
        socket,
        Arc::new(quinn::TokioRuntime),
    )
}

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
/// credential and requires the peer's, checked by [`gsi::GsiPeer`]; with DCAU N the
/// process's ephemeral certificate and no client certificate.
fn server_config(
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
        Some(p) => builder
            .with_client_cert_verifier(Arc::new(GsiPeer::new(
                p.clone(),
                Arc::clone(&provider),
                refusal.clone(),
            )))
            .with_cert_resolver(Arc::new(SingleCertAndKey::from(gsi::certified_key(
                p, &provider,
            )?))),
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
fn client_config(
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
        Some(p) => builder
            .with_custom_certificate_verifier(Arc::new(GsiPeer::new(
                p.clone(),
                Arc::clone(&provider),
                refusal.clone(),
            )))
            .with_client_cert_resolver(Arc::new(SingleCertAndKey::from(gsi::certified_key(
                p, &provider,
            )?))),
        None => builder
            .with_custom_certificate_verifier(Arc::new(KeyProofOnly(provider)))
            .with_no_client_auth(),
    };
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = QuicClientConfig::try_from(tls).map_err(tls_error)?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(o.transport(tuning));
    Ok(config)
}

/// DCAU N: takes the listener's ephemeral certificate as it comes, but requires the handshake
/// to be signed by its key. The connection is private from the path, its peer unnamed, as
/// DCAU N means.
#[derive(Debug)]
struct KeyProofOnly(Arc<CryptoProvider>);

impl ServerCertVerifier for KeyProofOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
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
        gsi::signed_by_key(&self.0, message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Takes connection attempts until the listener goes. Each waits, unanswered, until the DTP
/// takes it for a transfer and answers it with that transfer's credential; beyond the backlog
/// they are refused.
async fn accept_all(endpoint: quinn::Endpoint, ready: mpsc::Sender<quinn::Incoming>) {
    while let Some(incoming) = endpoint.accept().await {
        match ready.try_send(incoming) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(incoming)) => {
                tracing::debug!(peer = %incoming.remote_address(), "QUIC backlog full: refused");
                incoming.refuse();
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return,
        }
    }
}

#[derive(Debug)]
struct QuicListener {
    endpoint: quinn::Endpoint,
    local: SocketAddr,
    options: Options,
    tuning: SocketTuning,
    ready: Mutex<mpsc::Receiver<quinn::Incoming>>,
    accepting: tokio::task::JoinHandle<()>,
}

impl TransportListener for QuicListener {
    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<Box<dyn TransportStream>>> {
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        match ready.poll_recv(cx) {
            Poll::Ready(Some(incoming)) => Poll::Ready(Ok(Box::new(QuicStream {
                peer: incoming.remote_address(),
                state: State::Arrived(Box::new(incoming)),
                local: self.local,
                options: self.options,
                tuning: self.tuning,
                secured: Established::Plain,
            }))),
            Poll::Ready(None) => Poll::Ready(Err(io::Error::other("QUIC listener stopped"))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for QuicListener {
    /// No new connections; those accepted carry on over the same socket.
    fn drop(&mut self) {
        self.accepting.abort();
        self.endpoint.set_server_config(None);
    }
}

/// One data connection: a QUIC connection's one stream, once [`QuicStream::establish`] made it.
#[derive(Debug)]
struct QuicStream {
    state: State,
    peer: SocketAddr,
    local: SocketAddr,
    options: Options,
    tuning: SocketTuning,
    /// What `establish` made of it.
    secured: Established,
}

#[derive(Debug)]
enum State {
    /// The connecting side, before its handshake: its own endpoint.
    Dialing(quinn::Endpoint),
    /// The listening side: a connection attempt not answered yet (boxed: it is large).
    Arrived(Box<quinn::Incoming>),
    /// Handshake done, stream open.
    Open(Open),
    /// The handshake failed.
    Failed,
}

#[derive(Debug)]
struct Open {
    conn: quinn::Connection,
    /// `None` once the drop handed it to the linger task.
    send: Option<quinn::SendStream>,
    recv: quinn::RecvStream,
    /// The connecting side's own endpoint (a listener's outlives its connections by itself).
    endpoint: Option<quinn::Endpoint>,
}

impl QuicStream {
    async fn handshake(
        &mut self,
        initiator: bool,
        protection: Option<&DataProtection>,
    ) -> Result<Open, NetError> {
        let refusal = Refusal::default();
        let peer = self.peer;
        let failed = |e: io::Error, refusal: &Refusal| match (refusal.take(), tls_alert(&e)) {
            (None, None) => NetError::Connect {
                addr: peer,
                source: explained(e),
            },
            (Some(why), _) => NetError::Security(format!(
                "QUIC data connection with {peer}: its credential is refused: {why}"
            )),
            (None, Some(Alert::Theirs)) if protection.is_some() => NetError::Security(format!(
                "QUIC data connection with {peer}: the peer refused our credential ({})",
                explained(e)
            )),
            (None, Some(Alert::Theirs)) => NetError::Security(format!(
                "QUIC data connection with {peer}: the peer refused the handshake ({}); \
                 does it ask for DCAU A or S where this side has DCAU N?",
                explained(e)
            )),
            (None, Some(Alert::Ours)) => NetError::Security(format!(
                "QUIC data connection with {peer}: TLS handshake failed: {}",
                explained(e)
            )),
        };
        match std::mem::replace(&mut self.state, State::Failed) {
            State::Dialing(endpoint) => {
                debug_assert!(initiator, "the side that connected starts the handshake");
                let config = client_config(&self.options, &self.tuning, protection, &refusal)?;
                let conn = async {
                    let conn = endpoint
                        .connect_with(config, peer, "ferry")
                        .map_err(io::Error::other)?
                        .await?;
                    let (mut send, mut recv) = conn.open_bi().await?;
                    send.write_all(PREAMBLE).await?;
                    // The answer says the listener took us: TLS 1.3 lets a client finish its
                    // handshake before the server has checked the client's certificate.
                    if &read_preamble(&mut recv).await? != PREAMBLE {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "the listener is not a ferry data channel (wrong answer)",
                        ));
                    }
                    Ok::<_, io::Error>((conn, send, recv))
                };
                let (conn, send, recv) = conn.await.map_err(|e| failed(e, &refusal))?;
                Ok(Open {
                    conn,
                    send: Some(send),
                    recv,
                    endpoint: Some(endpoint),
                })
            }
            State::Arrived(incoming) => {
                let config = server_config(&self.options, &self.tuning, protection, &refusal)?;
                let (conn, send, recv) = arrive(*incoming, config)
                    .await
                    .map_err(|e| failed(e, &refusal))?;
                Ok(Open {
                    conn,
                    send: Some(send),
                    recv,
                    endpoint: None,
                })
            }
            State::Open(open) => {
                self.state = State::Open(open);
                Err(NetError::Security(
                    "QUIC data connection established twice".into(),
                ))
            }
            State::Failed => Err(NetError::Connect {
                addr: peer,
                source: io::Error::new(io::ErrorKind::NotConnected, "its handshake failed"),
            }),
        }
    }

    fn open(&mut self) -> io::Result<&mut Open> {
        match &mut self.state {
            State::Open(open) => Ok(open),
            _ => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "QUIC data connection used before its handshake (DataConn::establish)",
            )),
        }
    }
}

/// Which side ended a failed handshake with a TLS alert.
enum Alert {
    /// The peer sent it.
    Theirs,
    /// This side did.
    Ours,
}

/// Whether a failed handshake ended in a TLS alert (QUIC's CRYPTO_ERROR codes 0x100-0x1ff),
/// and whose.
fn tls_alert(e: &io::Error) -> Option<Alert> {
    let crypto = |code: u64| (0x100..0x200).contains(&code);
    match connection_error(e)? {
        quinn::ConnectionError::ConnectionClosed(c) if crypto(u64::from(c.error_code)) => {
            Some(Alert::Theirs)
        }
        quinn::ConnectionError::TransportError(t) if crypto(u64::from(t.code)) => Some(Alert::Ours),
        _ => None,
    }
}

/// The connection's end behind an I/O error of its handshake or stream, if that is what it is.
fn connection_error(e: &io::Error) -> Option<&quinn::ConnectionError> {
    let inner = e.get_ref()?;
    if let Some(c) = inner.downcast_ref::<quinn::ConnectionError>() {
        return Some(c);
    }
    match (
        inner.downcast_ref::<quinn::ReadError>(),
        inner.downcast_ref::<quinn::WriteError>(),
    ) {
        (Some(quinn::ReadError::ConnectionLost(c)), _) => Some(c),
        (_, Some(quinn::WriteError::ConnectionLost(c))) => Some(c),
        _ => None,
    }
}

/// An I/O error of a handshake or stream, saying how the connection ended when it did.
fn explained(e: io::Error) -> io::Error {
    match connection_error(&e) {
        Some(c) => io::Error::new(e.kind(), c.clone()),
        None => e,
    }
}

/// `read_exact` of the 8-byte preamble or its answer.
async fn read_preamble(recv: &mut quinn::RecvStream) -> io::Result<[u8; PREAMBLE.len()]> {
    let mut got = [0u8; PREAMBLE.len()];
    match recv.read_exact(&mut got).await {
        Ok(()) => Ok(got),
        Err(quinn::ReadExactError::ReadError(e)) => Err(e.into()),
        Err(quinn::ReadExactError::FinishedEarly(n)) => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the stream ended after {n} of the preamble's 8 bytes"),
        )),
    }
}

/// Answers a connection attempt with `config`, then takes its stream and preamble (within
/// [`ARRIVAL`]: a peer that opens nothing is not waited for).
async fn arrive(
    incoming: quinn::Incoming,
    config: quinn::ServerConfig,
) -> io::Result<(quinn::Connection, quinn::SendStream, quinn::RecvStream)> {
    let conn = incoming.accept_with(Arc::new(config))?.await?;
    let opened = tokio::time::timeout(ARRIVAL, async {
        let (send, mut recv) = conn.accept_bi().await?;
        let first = read_preamble(&mut recv).await?;
        Ok::<_, io::Error>((send, recv, first))
    })
    .await
    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the peer opened no stream"))??;
    let (mut send, recv, first) = opened;
    if &first != PREAMBLE {
        conn.close(1u8.into(), b"not a ferry data connection");
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a ferry data connection (wrong preamble)",
        ));
    }
    send.write_all(PREAMBLE).await?;
    Ok((conn, send, recv))
}

impl TransportStream for QuicStream {
    fn peer_addr(&self) -> io::Result<SocketAddr> {
        match &self.state {
            State::Open(open) => Ok(open.conn.remote_address()),
            _ => Ok(self.peer),
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    /// The QUIC handshake: with DCAU A/S it carries the GSI credentials and checks the peer's
    /// (then no GSI layer runs inside the stream); with DCAU N the ephemeral certificate.
    fn establish<'a>(
        &'a mut self,
        initiator: bool,
        protection: Option<&'a DataProtection>,
    ) -> EstablishFuture<'a> {
        Box::pin(async move {
            let open = self.handshake(initiator, protection).await?;
            if self.options.follows_path(&self.tuning) {
                tokio::spawn(windows::follow(
                    open.conn.clone(),
                    self.options.window(&self.tuning),
                ));
            }
            self.state = State::Open(open);
            self.secured = if protection.is_some() {
                Established::Secured
            } else {
                Established::Plain
            };
            Ok(self.secured)
        })
    }
}

impl AsyncRead for QuicStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let open = self.get_mut().open()?;
        Pin::new(&mut open.recv).poll_read(cx, buf)
    }
}

impl AsyncWrite for QuicStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().open()?.send {
            Some(s) => tokio::io::AsyncWrite::poll_write(Pin::new(s), cx, buf),
            None => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Ok(Open { send: Some(s), .. }) = self.get_mut().open() {
            // Finishing twice is harmless.
            let _ = s.finish();
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for QuicStream {
    /// As a TCP close: what was written still reaches the peer. The stream is finished and
    /// the connection kept until the peer acknowledged it all (or [`LINGER`] passed).
    fn drop(&mut self) {
        let State::Open(open) = &mut self.state else {
            return;
        };
        let Some(mut send) = open.send.take() else {
            return;
        };
        let _ = send.finish();
        let conn = open.conn.clone();
        let endpoint = open.endpoint.take();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let _ = tokio::time::timeout(LINGER, send.stopped()).await;
            conn.close(0u8.into(), b"");
            if let Some(endpoint) = endpoint {
                let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
            }
        });
    }
}

mod bounded;
mod gsi;
#[cfg(test)]
mod tests;
mod windows;
