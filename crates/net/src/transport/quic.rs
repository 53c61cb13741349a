//! `quic`: data connections over QUIC (RFC 9000, quinn), a user-space transport that carries
//! on through random loss where a loss-based TCP backs off, always encrypted, one UDP port per
//! listener (the port PASV/EPSV/SPAS name).
//!
//! No GridFTP implementation has QUIC, so the wire is ferry's own and both ends are ferry:
//! - one data connection is one QUIC connection with one bidirectional stream (with
//!   `parallel=streams`, one stream of a connection a transfer's streams share: `shared`), opened
//!   by the connecting side, which first writes the 8-byte preamble `ferry-q1` (QUIC announces a
//!   stream only once it carries data, and in MODE E the connecting side may be the receiver);
//!   the listening side answers with the same 8 bytes once it took the connection. With a
//!   session key (`bind=`) the preamble is `ferry-q2` and each side follows it with its proof
//!   of the key, bound to this connection's TLS session (`binding`);
//! - TLS 1.3 with ALPN `ferry-dc/1`. Under DCAU A/S the handshake carries the session's GSI
//!   credentials, both ways, each checked as the GSI handshake over TCP checks them (`gsi`):
//!   the QUIC connection is then the authenticated, encrypted channel DCAU and PROT C/S/P ask
//!   for, and no GSI layer runs inside it. Under DCAU N each process presents an ephemeral
//!   self-signed P-256 certificate: private from the path, the peer unnamed, as DCAU N means;
//!   with a session key, the peer is then the one the control sessions set up, and no other.
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
//! - `parallel=connections|streams`: a transfer's parallel data connections as QUIC
//!   connections of their own (the default) or as streams of one (`shared`);
//! - `bind=HEX`: a 32-byte session key (64 hexadecimal digits) that both ends of each
//!   connection must prove they know (`binding`). ferry's client chooses one per copy and
//!   sets it at every end;
//! - `mtu=BYTES`: the largest UDP payload a connection probes for and takes, 1200 to 65507;
//!   8952 by default (a jumbo frame's), which a 1500-byte path settles below (`datagrams`);
//! - `window=BYTES`: the flow-control windows (per stream and per connection) and the send
//!   window, fixed. Without it, the socket buffer asked for (`SBUF`, `-tcp-bs`) when one was,
//!   fixed too; else 64 MiB (room for 2.5 Gbit/s at 200 ms) that grows with the measured
//!   bandwidth-delay product up to 1 GiB (`windows`). A window is a limit, not an
//!   allocation: memory is used only by bytes in flight.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

use self::binding::SessionKey;
use self::gsi::Refusal;
use self::options::Options;
#[cfg(test)]
use self::options::{Controller, DEFAULT_WINDOW, MIN_WINDOW};
use self::shared::{DialKey, Shared};
use self::tls::{client_config, server_config};
use super::udp::{self, Buffers};
use super::{Bind, ConnectFuture, Dial, Transport};
use crate::{
    DataConn, DataListener, DataProtection, EstablishFuture, Established, NetError, SocketTuning,
    TransportListener, TransportStream,
};

/// The application protocol QUIC's TLS negotiates.
const ALPN: &[u8] = b"ferry-dc/1";
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

impl Transport for Quic {
    fn name(&self) -> &'static str {
        "quic"
    }

    fn accept_options(&self, options: &str) -> Result<(), NetError> {
        Options::parse(options).map(drop)
    }

    fn secures_itself(&self) -> bool {
        true
    }

    fn connect<'a>(&'a self, dial: Dial<'a>) -> ConnectFuture<'a> {
        let (addr, tuning, options) = (dial.addr, dial.tuning, dial.options);
        Box::pin(async move {
            let options = Options::parse(options)?;
            let fail = |source: io::Error| NetError::Connect { addr, source };
            // Streams of a shared connection find (or open) it at their handshake.
            let (state, local) = match options.shared {
                true => (State::Joining, udp::unspecified(addr)),
                false => {
                    let endpoint =
                        dialing_endpoint(addr, &tuning, options.max_payload).map_err(fail)?;
                    let local = endpoint.local_addr().map_err(fail)?;
                    (State::Dialing(endpoint), local)
                }
            };
            Ok(DataConn::from_transport(Box::new(QuicStream {
                state,
                peer: addr,
                local,
                options,
                tuning,
                secured: Established::Plain,
                more: None,
            })))
        })
    }

    fn listen(&self, bind: Bind<'_>) -> Result<DataListener, NetError> {
        let options = Options::parse(bind.options)?;
        // The endpoint's own configuration only lets it take connection attempts; each is
        // answered with the transfer's credential once the DTP takes it (`establish`).
        let server = server_config(&options, &bind.tuning, None, &Refusal::default())?;
        let socket = udp::listening(bind.ip, bind.range, &bind.tuning, Buffers::default())?;
        let endpoint = endpoint(socket, Some(server), options.max_payload)?;
        let local = endpoint.local_addr()?;
        let (tx, rx) = mpsc::channel(BACKLOG);
        let more = tx.clone();
        let accepting = tokio::spawn(accept_all(endpoint.clone(), tx));
        Ok(DataListener::from_transport(Box::new(QuicListener {
            endpoint,
            local,
            options,
            tuning: bind.tuning,
            ready: Mutex::new(rx),
            more,
            accepting,
        })))
    }
}

/// A connecting side's own endpoint, for a connection to `peer`.
fn dialing_endpoint(
    peer: SocketAddr,
    tuning: &SocketTuning,
    max_payload: u16,
) -> io::Result<quinn::Endpoint> {
    endpoint(
        udp::connecting(peer, tuning, Buffers::default())?,
        None,
        max_payload,
    )
}

/// An endpoint on `socket` that takes datagrams of up to `max_payload` bytes and sends its
/// batches within what one `sendmsg` takes (`datagrams`).
fn endpoint(
    socket: std::net::UdpSocket,
    server: Option<quinn::ServerConfig>,
    max_payload: u16,
) -> io::Result<quinn::Endpoint> {
    use quinn::Runtime;
    let mut config = quinn::EndpointConfig::default();
    config
        .max_udp_payload_size(max_payload)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let runtime = Arc::new(quinn::TokioRuntime);
    let socket = Arc::new(datagrams::Batched::new(
        runtime.wrap_udp_socket(socket)?,
        max_payload,
    ));
    quinn::Endpoint::new_with_abstract_socket(config, server, socket, runtime)
}

/// Takes connection attempts until the listener goes. Each waits, unanswered, until the DTP
/// takes it for a transfer and answers it with that transfer's credential; beyond the backlog
/// they are refused.
async fn accept_all(endpoint: quinn::Endpoint, ready: mpsc::Sender<Arrival>) {
    while let Some(incoming) = endpoint.accept().await {
        match ready.try_send(Arrival::Attempt(Box::new(incoming))) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(arrival)) => {
                if let Arrival::Attempt(incoming) = arrival {
                    tracing::debug!(peer = %incoming.remote_address(), "QUIC backlog full: refused");
                    incoming.refuse();
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return,
        }
    }
}

/// What a listener hands the DTP.
#[derive(Debug)]
enum Arrival {
    /// A connection attempt (boxed: it is large).
    Attempt(Box<quinn::Incoming>),
    /// A further stream on a connection already answered (`parallel=streams`).
    Stream(Box<SharedStream>),
}

/// A shared connection and one of its streams.
type SharedStream = (Arc<Shared>, quinn::SendStream, quinn::RecvStream);

#[derive(Debug)]
struct QuicListener {
    endpoint: quinn::Endpoint,
    local: SocketAddr,
    options: Options,
    tuning: SocketTuning,
    ready: Mutex<mpsc::Receiver<Arrival>>,
    /// Where a shared connection's further streams arrive.
    more: mpsc::Sender<Arrival>,
    accepting: tokio::task::JoinHandle<()>,
}

impl TransportListener for QuicListener {
    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<Box<dyn TransportStream>>> {
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        let stream = |peer, state| {
            Box::new(QuicStream {
                peer,
                state,
                local: self.local,
                options: self.options,
                tuning: self.tuning,
                secured: Established::Plain,
                more: self.options.shared.then(|| self.more.clone()),
            })
        };
        match ready.poll_recv(cx) {
            Poll::Ready(Some(Arrival::Attempt(incoming))) => Poll::Ready(Ok(stream(
                incoming.remote_address(),
                State::Arrived(incoming),
            ))),
            Poll::Ready(Some(Arrival::Stream(joined))) => Poll::Ready(Ok(stream(
                joined.0.conn.remote_address(),
                State::Joined(joined),
            ))),
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
    /// A listening side's, with `parallel=streams`: where the connection's further streams go.
    more: Option<mpsc::Sender<Arrival>>,
}

#[derive(Debug)]
enum State {
    /// The connecting side, before its handshake: its own endpoint.
    Dialing(quinn::Endpoint),
    /// The listening side: a connection attempt not answered yet (boxed: it is large).
    Arrived(Box<quinn::Incoming>),
    /// The connecting side of a shared connection (`parallel=streams`), before its stream.
    Joining,
    /// The listening side: a further stream of a shared connection, before its first bytes.
    Joined(Box<SharedStream>),
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
    /// The connection, when its streams share it (it then closes with the last of them).
    shared: Option<Arc<Shared>>,
    /// Whether this stream's handshake made the connection.
    first: bool,
}

impl Open {
    /// A stream of a shared connection (`first`: its handshake made the connection).
    fn on(
        shared: Arc<Shared>,
        send: quinn::SendStream,
        recv: quinn::RecvStream,
        first: bool,
    ) -> Open {
        Open {
            conn: shared.conn.clone(),
            send: Some(send),
            recv,
            endpoint: None,
            shared: Some(shared),
            first,
        }
    }
}

impl QuicStream {
    async fn handshake(
        &mut self,
        initiator: bool,
        protection: Option<&DataProtection>,
    ) -> Result<Open, NetError> {
        let refusal = Refusal::default();
        let peer = self.peer;
        let protected = protection.is_some();
        let failed = |e: io::Error, refusal: &Refusal| errors::failed(e, refusal, peer, protected);
        match std::mem::replace(&mut self.state, State::Failed) {
            State::Dialing(endpoint) => {
                debug_assert!(initiator, "the side that connected starts the handshake");
                let config = client_config(&self.options, &self.tuning, protection, &refusal)?;
                let bind = self.options.bind.as_ref();
                let conn = async {
                    let conn = dial(&endpoint, config, peer).await?;
                    let (send, recv) = introduce(&conn, bind).await?;
                    Ok::<_, io::Error>((conn, send, recv))
                };
                let (conn, send, recv) = conn.await.map_err(|e| failed(e, &refusal))?;
                Ok(Open {
                    conn,
                    send: Some(send),
                    recv,
                    endpoint: Some(endpoint),
                    shared: None,
                    first: true,
                })
            }
            State::Arrived(incoming) => {
                let config = server_config(&self.options, &self.tuning, protection, &refusal)?;
                let (conn, send, recv) = arrive(*incoming, config, self.options.bind.as_ref())
                    .await
                    .map_err(|e| failed(e, &refusal))?;
                let shared = self.more.take().map(|more| {
                    let shared = Arc::new(Shared::new(conn.clone(), None));
                    tokio::spawn(shared::accept_more(Arc::clone(&shared), more));
                    shared
                });
                Ok(Open {
                    conn,
                    send: Some(send),
                    recv,
                    endpoint: None,
                    shared,
                    first: true,
                })
            }
            State::Joining => {
                let config = client_config(&self.options, &self.tuning, protection, &refusal)?;
                let key = DialKey::new(peer, self.options, self.tuning, protection);
                let (tuning, max_payload) = (self.tuning, self.options.max_payload);
                let bind = self.options.bind.as_ref();
                let joined = async {
                    let (shared, first) = shared::join(key, || async move {
                        let endpoint = dialing_endpoint(peer, &tuning, max_payload)?;
                        let conn = dial(&endpoint, config, peer).await?;
                        Ok(Shared::new(conn, Some(endpoint)))
                    })
                    .await?;
                    let (send, recv) = introduce(&shared.conn, bind).await?;
                    Ok::<_, io::Error>((shared, first, send, recv))
                };
                let (shared, first, send, recv) = joined.await.map_err(|e| failed(e, &refusal))?;
                if let Some(local) = shared.local_addr() {
                    self.local = local;
                }
                Ok(Open::on(shared, send, recv, first))
            }
            State::Joined(joined) => {
                let (shared, mut send, mut recv) = *joined;
                let bind = self.options.bind.as_ref();
                let answered = tokio::time::timeout(
                    ARRIVAL,
                    binding::answer(&shared.conn, &mut send, &mut recv, bind),
                )
                .await
                .unwrap_or_else(|_| {
                    Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the stream brought no preamble",
                    ))
                });
                answered.map_err(|e| failed(e, &refusal))?;
                Ok(Open::on(shared, send, recv, false))
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

/// Makes a QUIC connection from `endpoint` to `peer` with `config`.
async fn dial(
    endpoint: &quinn::Endpoint,
    config: quinn::ClientConfig,
    peer: SocketAddr,
) -> io::Result<quinn::Connection> {
    let connecting = endpoint
        .connect_with(config, peer, "ferry")
        .map_err(io::Error::other)?;
    Ok(connecting.await?)
}

/// Opens a stream of `conn` and writes its preamble and proof (`binding`).
async fn introduce(
    conn: &quinn::Connection,
    bind: Option<&SessionKey>,
) -> io::Result<(quinn::SendStream, quinn::RecvStream)> {
    let (mut send, mut recv) = conn.open_bi().await?;
    binding::introduce(conn, &mut send, &mut recv, bind).await?;
    Ok((send, recv))
}

/// Answers a connection attempt with `config`, then takes its stream, first bytes and proof
/// (within [`ARRIVAL`]: a peer that opens nothing is not waited for).
async fn arrive(
    incoming: quinn::Incoming,
    config: quinn::ServerConfig,
    bind: Option<&SessionKey>,
) -> io::Result<(quinn::Connection, quinn::SendStream, quinn::RecvStream)> {
    let conn = incoming.accept_with(Arc::new(config))?.await?;
    let opened = tokio::time::timeout(ARRIVAL, async {
        let (mut send, mut recv) = conn.accept_bi().await?;
        binding::answer(&conn, &mut send, &mut recv, bind).await?;
        Ok::<_, io::Error>((send, recv))
    })
    .await
    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the peer opened no stream"))??;
    let (send, recv) = opened;
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
            if open.first && self.options.follows_path(&self.tuning) {
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
        let shared = open.shared.take();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let _ = tokio::time::timeout(LINGER, send.stopped()).await;
            // A shared connection closes when its last stream lets go of it.
            if shared.is_some() {
                return;
            }
            conn.close(0u8.into(), b"");
            if let Some(endpoint) = endpoint {
                let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
            }
        });
    }
}

mod binding;
mod bounded;
mod datagrams;
mod errors;
mod gsi;
mod options;
mod peer;
mod shared;
#[cfg(test)]
mod tests;
mod tls;
mod windows;
