//! The accept loops: one small task per connection, TLS with the host credential (ALPN `h2`
//! or `http/1.1`) then HTTP/1.1 or HTTP/2, or clear-text HTTP/1.1, on hyper with deadlines
//! for slow handshakes and headers and a bound on header size.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_openssl::SslStream;

use crate::coalesce::Coalesce;
use crate::context::DoorContext;
use crate::principal::ConnAuth;
use crate::zerocopy::{ClearIo, Splicer};

/// Protocols offered in ALPN, preferred first: HTTP/1.1 unless the site prefers HTTP/2
/// (`https.prefer-http2`). The field's data movers (davix, gfal2, FTS3, XRootD's third-party
/// copy) speak HTTP/1.1, and XRootD 5's push over HTTP/2 ends its PUT's stream before the body;
/// HTTP/1.1 is also where the door gathers TLS records and splices clear-text files.
pub fn alpn(prefer_http2: bool) -> &'static [&'static [u8]] {
    if prefer_http2 {
        &[b"h2", b"http/1.1"]
    } else {
        &[b"http/1.1", b"h2"]
    }
}

/// How long a closing HTTP/1.1 connection goes on reading (and dropping) what the client still
/// sends, and how much it reads at most. An answer given before the request's body was read (a
/// 507 for a full disk, a 413) ends the connection with body bytes still on their way: closed
/// at once, the socket would answer them with a reset, and the client, still sending, would get
/// "broken pipe" and never read the answer (RFC 9112 section 9.6 says to half-close and read on).
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: u64 = 256 << 20;

/// The configuration in force; `replace` swaps it (SIGHUP), connections keep theirs.
#[derive(Debug, Clone)]
pub struct DoorHandle {
    ctx: Arc<RwLock<Arc<DoorContext>>>,
    open: Arc<AtomicUsize>,
}

impl DoorHandle {
    /// The configuration new connections get.
    pub fn load(&self) -> Arc<DoorContext> {
        Arc::clone(&self.ctx.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Puts `ctx` in force for new connections.
    pub fn replace(&self, ctx: DoorContext) {
        *self.ctx.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(ctx);
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
}

/// A bound door: its HTTPS listener, and a clear-text HTTP one where configured.
#[derive(Debug)]
pub struct Door {
    tls: Option<TcpListener>,
    clear: Option<TcpListener>,
    handle: DoorHandle,
}

impl Door {
    /// Binds `tls` (HTTPS) and `clear` (plain HTTP: anonymous access only), either optional.
    pub async fn bind(
        tls: Option<SocketAddr>,
        clear: Option<SocketAddr>,
        ctx: DoorContext,
    ) -> std::io::Result<Door> {
        let bind = |a: Option<SocketAddr>| async move {
            match a {
                Some(a) => TcpListener::bind(a).await.map(Some),
                None => Ok(None),
            }
        };
        Ok(Door {
            tls: bind(tls).await?,
            clear: bind(clear).await?,
            handle: DoorHandle {
                ctx: Arc::new(RwLock::new(Arc::new(ctx))),
                open: Arc::new(AtomicUsize::new(0)),
            },
        })
    }

    /// The bound HTTPS address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.tls.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The bound clear-text HTTP address.
    pub fn clear_addr(&self) -> Option<SocketAddr> {
        self.clear.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// A handle for reloads.
    pub fn handle(&self) -> DoorHandle {
        self.handle.clone()
    }

    /// Accepts connections on every listener until the task is dropped.
    pub async fn run(self) {
        let clear = self
            .clear
            .map(|l| tokio::spawn(accept_loop(l, self.handle.clone(), false)));
        if let Some(l) = self.tls {
            accept_loop(l, self.handle.clone(), true).await;
        }
        if let Some(c) = clear {
            let _ = c.await;
        }
    }
}

async fn accept_loop(listener: TcpListener, handle: DoorHandle, tls: bool) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("http accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let ctx = handle.load();
        let open = Arc::clone(&handle.open);
        if open.fetch_add(1, Ordering::AcqRel) >= ctx.https.connections_max {
            open.fetch_sub(1, Ordering::AcqRel);
            ctx.metrics.connections.refused();
            tracing::warn!(%peer, connections_max = ctx.https.connections_max, "http connection refused: too many connections");
            continue;
        }
        ctx.metrics.connections.opened();
        tokio::spawn(async move {
            if tls {
                serve_tls(stream, peer, Arc::clone(&ctx)).await;
            } else {
                let _ = stream.set_nodelay(true);
                let conn = Arc::new(ConnAuth::clear());
                let splicer = Splicer::default();
                let io = ClearIo::new(stream, splicer.clone());
                serve(io, false, conn, Some(splicer), peer, Arc::clone(&ctx)).await;
            }
            open.fetch_sub(1, Ordering::AcqRel);
            ctx.metrics.connections.closed();
        });
    }
}

async fn serve_tls(stream: TcpStream, peer: SocketAddr, ctx: Arc<DoorContext>) {
    let _ = stream.set_nodelay(true);
    let deadline = Duration::from_secs(ctx.https.header_timeout.max(1));
    let tls = match tls_accept(&ctx, stream, deadline).await {
        Ok(t) => t,
        Err(e) => {
            tracing::debug!(%peer, "https handshake failed: {e}");
            return;
        }
    };
    let certificate = match &ctx.x509 {
        Some(x) => ferry_gsi::https::peer_certificate(&x.trust, tls.ssl()),
        None => ferry_gsi::https::PeerCertificate::None,
    };
    let conn = Arc::new(ConnAuth::new(certificate));
    let h2 = tls.ssl().selected_alpn_protocol() == Some(b"h2".as_slice());
    serve(tls, h2, conn, None, peer, ctx).await;
}

/// A connection whose TCP socket can be read beneath it, to linger on close.
trait OnTcp: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    fn tcp(&mut self) -> &mut TcpStream;
}

impl OnTcp for ClearIo {
    fn tcp(&mut self) -> &mut TcpStream {
        self.tcp_mut()
    }
}

impl OnTcp for SslStream<Coalesce<TcpStream>> {
    fn tcp(&mut self) -> &mut TcpStream {
        self.get_mut().get_mut()
    }
}

/// Closes an HTTP/1.1 connection: TLS close_notify (where TLS), FIN, then what the client
/// still sends is read and dropped for up to [`LINGER`], so that it gets to read the last
/// answer instead of a reset.
async fn linger<S: OnTcp>(mut io: S) {
    let deadline = tokio::time::Instant::now() + LINGER;
    if tokio::time::timeout_at(deadline, io.shutdown())
        .await
        .is_err()
    {
        return;
    }
    // On the heap, and only now: the connection's future stays small while it is served.
    let mut scratch = vec![0u8; 64 << 10];
    let mut dropped = 0u64;
    while dropped < LINGER_BYTES {
        match tokio::time::timeout_at(deadline, io.tcp().read(&mut scratch)).await {
            Ok(Ok(n)) if n > 0 => dropped += n as u64,
            _ => break,
        }
    }
}

/// HTTP on an established connection (TLS or clear); `splicer` where file bodies may be
/// spliced (its connection is a [`ClearIo`]).
async fn serve<S: OnTcp>(
    io: S,
    h2: bool,
    conn: Arc<ConnAuth>,
    splicer: Option<Splicer>,
    peer: SocketAddr,
    ctx: Arc<DoorContext>,
) {
    let io = TokioIo::new(io);
    // HTTP/2 copies body bytes into its DATA frames: never splice there.
    let splicer = splicer.filter(|_| !h2);
    let splicing = splicer.is_some();
    let deadline = Duration::from_secs(ctx.https.header_timeout.max(1));
    let service = {
        let ctx = Arc::clone(&ctx);
        hyper::service::service_fn(move |req| {
            let (ctx, conn, splicer) = (Arc::clone(&ctx), Arc::clone(&conn), splicer.clone());
            async move {
                Ok::<_, std::convert::Infallible>(
                    crate::request::handle(ctx, conn, splicer, peer, req).await,
                )
            }
        })
    };
    // One protocol per connection, as ALPN chose: an HTTP/1.1 connection then holds only
    // HTTP/1.1's state (hyper-util's auto builder would hold room for both).
    let result = if h2 {
        hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .max_header_list_size(u32::try_from(ctx.https.max_header_bytes).unwrap_or(u32::MAX))
            .serve_connection(io, service)
            .await
    } else {
        let mut http1 = hyper::server::conn::http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(deadline)
            .max_buf_size(ctx.https.max_header_bytes.max(8192))
            .keep_alive(true);
        if splicing {
            // Body frames queued as they are, never copied into hyper's buffer: spliced
            // bodies depend on it (their stand-in bytes must reach the ClearIo by address).
            http1.writev(true);
        }
        match http1.serve_connection(io, service).without_shutdown().await {
            Ok(parts) => {
                linger(parts.io.into_inner()).await;
                Ok(())
            }
            Err(e) => Err(e),
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, "http connection ended: {e}");
    }
}

async fn tls_accept(
    ctx: &DoorContext,
    stream: TcpStream,
    deadline: Duration,
) -> std::io::Result<tokio_openssl::SslStream<Coalesce<TcpStream>>> {
    let Some(acceptor) = &ctx.tls else {
        return Err(std::io::Error::other(
            "no host credential loaded (the configuration in force has no https listen address)",
        ));
    };
    let ssl = openssl::ssl::Ssl::new(acceptor.context()).map_err(std::io::Error::other)?;
    let mut tls =
        tokio_openssl::SslStream::new(ssl, Coalesce::new(stream)).map_err(std::io::Error::other)?;
    match tokio::time::timeout(deadline, std::pin::Pin::new(&mut tls).accept()).await {
        Ok(Ok(())) => Ok(tls),
        Ok(Err(e)) => Err(std::io::Error::other(e.to_string())),
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "TLS handshake took too long",
        )),
    }
}
