//! `quic`: data connections over QUIC (RFC 9000, quinn), a user-space transport that carries
//! on through random loss where a loss-based TCP backs off, always encrypted, one UDP port per
//! listener (the port PASV/EPSV/SPAS name).
//!
//! No GridFTP implementation has QUIC, so the wire is ferry's own and both ends are ferry:
//! - one data connection is one QUIC connection with one bidirectional stream, opened by the
//!   connecting side, which first writes the 8-byte preamble `ferry-q1` (QUIC announces a
//!   stream only once it carries data, and in MODE E the connecting side may be the receiver);
//! - TLS 1.3 with ALPN `ferry-dc/1`; each process presents an ephemeral self-signed P-256
//!   certificate. QUIC's TLS keeps the bytes private from the path; who the peer is remains
//!   the business of the GSI layer above the transport, exactly as on TCP: DCAU A/S run their
//!   GSI handshake and peer check inside the stream, PROT S/P their records;
//! - ending a connection finishes the stream and keeps the connection until the peer has
//!   acknowledged every byte (a TCP close's linger), then closes it with code 0.
//!
//! Options (`SITE SETNETSTACK quic:congestion=cubic;window=67108864`):
//! - `congestion=bbr|cubic|newreno`: the sending side's controller. BBR by default: it models
//!   the path (bottleneck rate, minimum RTT) and does not read random loss as congestion.
//!   Whichever it is, its window is held to 1.5 times the measured bandwidth-delay product
//!   (`bounded`), so a start-up overshoot cannot leave the receiver more gaps than quinn keeps;
//! - `window=BYTES`: the flow-control windows (per stream and per connection) and the send
//!   window. Without it, the socket buffer asked for (`SBUF`, `-tcp-bs`) when one was, or
//!   64 MiB: room for 2.5 Gbit/s at 200 ms. A window is a limit, not an allocation: memory is
//!   used only by bytes in flight.

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
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

use super::{ConnectFuture, Transport};
use crate::listener::bind_in_range;
use crate::{
    DataConn, DataListener, NetError, PortRange, SocketTuning, TransportListener, TransportStream,
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

    fn transport(&self, tuning: &SocketTuning) -> Arc<quinn::TransportConfig> {
        let window = self.window(tuning);
        let mut t = quinn::TransportConfig::default();
        let w = quinn::VarInt::from_u64(window).unwrap_or(quinn::VarInt::MAX);
        t.stream_receive_window(w)
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
            let o = Options::parse(options)?;
            Ok(DataConn::from_transport(Box::new(
                dial(addr, &tuning, &o).await?,
            )))
        })
    }

    fn listen(
        &self,
        ip: IpAddr,
        range: Option<PortRange>,
        tuning: SocketTuning,
        options: &str,
    ) -> Result<DataListener, NetError> {
        let o = Options::parse(options)?;
        let server = server_config(&o, &tuning)?;
        let socket = bind_in_range(range, |port| udp_socket(SocketAddr::new(ip, port), &tuning))?;
        let endpoint = endpoint(socket, Some(server))?;
        let local = endpoint.local_addr()?;
        let (tx, rx) = mpsc::channel(BACKLOG);
        let accepting = tokio::spawn(accept_all(endpoint.clone(), tx));
        Ok(DataListener::from_transport(Box::new(QuicListener {
            endpoint,
            local,
            ready: Mutex::new(rx),
            accepting,
        })))
    }
}

/// A connection to a listener at `addr`, its stream opened and announced.
async fn dial(
    addr: SocketAddr,
    tuning: &SocketTuning,
    o: &Options,
) -> Result<QuicStream, NetError> {
    let fail = |source: io::Error| NetError::Connect { addr, source };
    let local = match addr {
        SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
    };
    let endpoint = endpoint(udp_socket(local, tuning).map_err(fail)?, None).map_err(fail)?;
    let config = client_config(o, tuning)?;
    let conn = endpoint
        .connect_with(config, addr, "ferry")
        .map_err(|e| fail(io::Error::other(e)))?
        .await
        .map_err(|e| fail(e.into()))?;
    let (mut send, recv) = conn.open_bi().await.map_err(|e| fail(e.into()))?;
    send.write_all(PREAMBLE).await.map_err(|e| fail(e.into()))?;
    let local = endpoint.local_addr().map_err(fail)?;
    Ok(QuicStream {
        conn,
        send: Some(send),
        recv,
        local,
        endpoint: Some(endpoint),
    })
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

/// This process's QUIC certificate and key: made once, never written anywhere.
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

fn server_config(o: &Options, tuning: &SocketTuning) -> Result<quinn::ServerConfig, NetError> {
    let id = identity()?;
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_error)?
        .with_no_client_auth()
        .with_single_cert(
            vec![id.cert.clone()],
            PrivateKeyDer::Pkcs8(id.key.clone_key()),
        )
        .map_err(tls_error)?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = QuicServerConfig::try_from(tls).map_err(tls_error)?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(o.transport(tuning));
    Ok(config)
}

fn client_config(o: &Options, tuning: &SocketTuning) -> Result<quinn::ClientConfig, NetError> {
    let provider = provider();
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_error)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(KeyProofOnly(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = QuicClientConfig::try_from(tls).map_err(tls_error)?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(o.transport(tuning));
    Ok(config)
}

/// Takes the server's ephemeral certificate as it comes, but requires the handshake to be
/// signed by its key: the QUIC layer encrypts; DCAU's GSI layer above says who the peer is.
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
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Accepts connections until the listener goes, each in its own task so that one slow or
/// hostile peer holds up no other.
async fn accept_all(endpoint: quinn::Endpoint, ready: mpsc::Sender<QuicStream>) {
    while let Some(incoming) = endpoint.accept().await {
        let ready = ready.clone();
        let local = endpoint.local_addr();
        tokio::spawn(async move {
            let peer = incoming.remote_address();
            match tokio::time::timeout(ARRIVAL, arrive(incoming)).await {
                Ok(Ok((conn, send, recv))) => {
                    let stream = QuicStream {
                        conn,
                        send: Some(send),
                        recv,
                        local: local.unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0))),
                        endpoint: None,
                    };
                    // A listener gone meanwhile drops the stream, which closes it.
                    let _ = ready.send(stream).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "QUIC data connection refused"),
                Err(_) => tracing::debug!(%peer, "QUIC data connection opened no stream in time"),
            }
        });
    }
}

/// An incoming connection's handshake, stream and preamble.
async fn arrive(
    incoming: quinn::Incoming,
) -> io::Result<(quinn::Connection, quinn::SendStream, quinn::RecvStream)> {
    let conn = incoming.await?;
    let (send, mut recv) = conn.accept_bi().await?;
    let mut first = [0u8; PREAMBLE.len()];
    recv.read_exact(&mut first)
        .await
        .map_err(io::Error::other)?;
    if &first != PREAMBLE {
        conn.close(1u8.into(), b"not a ferry data connection");
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a ferry data connection (wrong preamble)",
        ));
    }
    Ok((conn, send, recv))
}

#[derive(Debug)]
struct QuicListener {
    endpoint: quinn::Endpoint,
    local: SocketAddr,
    ready: Mutex<mpsc::Receiver<QuicStream>>,
    accepting: tokio::task::JoinHandle<()>,
}

impl TransportListener for QuicListener {
    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<Box<dyn TransportStream>>> {
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        match ready.poll_recv(cx) {
            Poll::Ready(Some(s)) => Poll::Ready(Ok(Box::new(s))),
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

/// One data connection: a QUIC connection's one stream.
#[derive(Debug)]
struct QuicStream {
    conn: quinn::Connection,
    /// `None` once the drop handed it to the linger task.
    send: Option<quinn::SendStream>,
    recv: quinn::RecvStream,
    local: SocketAddr,
    /// The connecting side's own endpoint (a listener's outlives its connections by itself).
    endpoint: Option<quinn::Endpoint>,
}

impl TransportStream for QuicStream {
    fn peer_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.conn.remote_address())
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

impl AsyncRead for QuicStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().recv).poll_read(cx, buf)
    }
}

impl AsyncWrite for QuicStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().send {
            Some(s) => tokio::io::AsyncWrite::poll_write(Pin::new(s), cx, buf),
            None => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(s) = &mut self.get_mut().send {
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
        let Some(mut send) = self.send.take() else {
            return;
        };
        let _ = send.finish();
        let conn = self.conn.clone();
        let endpoint = self.endpoint.take();
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
#[cfg(test)]
mod tests;
