//! An established data connection, whatever its stack.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};

use crate::link::{Established, Link, TransportStream};
use crate::tls::{self, DataProtection, TlsState};
use crate::{NetError, SocketTuning};

/// One data connection: a transport's stream (TCP, or another registered transport), and the
/// GSI layer when PROT S/P protects it. A struct over an enum, not a trait object, so the TCP
/// path stays monomorphic.
#[derive(Debug)]
pub struct DataConn {
    link: Link,
    /// The peer is on another host (decided once: the send path asks per block).
    off_host: bool,
    /// The TCP_NOTSENT_LOWAT this socket carries, when one was set.
    unsent_limit: Option<u32>,
    /// TLS records over the socket (PROT S/P).
    tls: Option<Box<TlsState>>,
    /// The kernel's counters when [`DataConn::tcp_stats`] last read them: a connection kept
    /// for the next transfer reports only what came after.
    tcp_seen: Option<Box<crate::TcpStats>>,
}

impl DataConn {
    pub(crate) fn from_tcp(stream: TcpStream, tuning: &SocketTuning) -> Result<DataConn, NetError> {
        // Linux gives an accepted connection its listener's congestion control; set it again
        // so that a connection made elsewhere (and a future kernel) has it too.
        if let Some(cc) = &tuning.congestion {
            if crate::Congestion::of_socket(socket2::SockRef::from(&stream)).as_deref()
                != Some(cc.as_str())
            {
                socket2::SockRef::from(&stream).set_tcp_congestion(cc.as_str().as_bytes())?;
            }
        }
        // Every write leaves at once, as with Globus: Nagle holding back each write's last
        // partial segment measured 15-20 % lower single-stream throughput and more sender CPU
        // per GB (bench/ mem, 256 KiB blocks, globus-url-copy and ferry clients), and gained
        // nothing with more streams.
        stream.set_nodelay(true)?;
        let off_host = stream
            .peer_addr()
            .is_ok_and(|a| !a.ip().to_canonical().is_loopback());
        Ok(DataConn {
            link: Link::Tcp(stream),
            off_host,
            unsent_limit: None,
            tls: None,
            tcp_seen: None,
        })
    }

    /// A connection over another transport's stream (see [`crate::Transport`]).
    pub fn from_transport(stream: Box<dyn TransportStream>) -> DataConn {
        let off_host = stream
            .peer_addr()
            .is_ok_and(|a| !a.ip().to_canonical().is_loopback());
        DataConn {
            link: Link::Other(stream),
            off_host,
            unsent_limit: None,
            tls: None,
            tcp_seen: None,
        }
    }

    /// Wraps a TCP connection made elsewhere (e.g. a striped server's IPC link, which then runs
    /// the same GSI handshake as a data connection).
    pub fn from_stream(stream: TcpStream) -> Result<DataConn, NetError> {
        DataConn::from_tcp(stream, &SocketTuning::default())
    }

    /// Authenticates the connection with GSI (DCAU A/S): the handshake, with us as initiator
    /// when we connected, then the check of who the peer is. Under PROT S/P every byte after
    /// it travels in TLS records; under PROT C the connection carries clear data again.
    pub async fn secure(
        self,
        initiator: bool,
        protection: &DataProtection,
    ) -> Result<DataConn, NetError> {
        self.establish(initiator, Some(protection)).await
    }

    /// Readies a new data connection for its transfer (`initiator`: we connected): the
    /// transport's own handshake where it has one, then, with DCAU A/S (`protection`), the
    /// GSI layer, unless the transport's handshake already authenticated the peer with the
    /// GSI credential and protects the bytes itself (QUIC). Every data connection goes
    /// through here once, DCAU N included.
    pub async fn establish(
        mut self,
        initiator: bool,
        protection: Option<&DataProtection>,
    ) -> Result<DataConn, NetError> {
        let secured = match &mut self.link {
            Link::Tcp(_) => Established::Plain,
            Link::Other(s) => s.establish(initiator, protection).await?,
        };
        if let (Some(protection), Established::Plain) = (protection, secured) {
            self.tls = tls::handshake(&mut self.link, initiator, protection)
                .await?
                .map(Box::new);
        }
        Ok(self)
    }

    /// Whether the bytes travel in TLS records (PROT S/P).
    pub fn is_protected(&self) -> bool {
        self.tls.is_some()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.link.peer_addr()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.link.local_addr()
    }

    /// Caps the bytes the kernel holds unsent for this socket (TCP_NOTSENT_LOWAT), or lifts
    /// the cap (`None`). Parallel streams claim blocks as their writes complete; with a large
    /// fixed send buffer (`-tcp-bs` = a WAN's bandwidth-delay product) a write completes into
    /// the buffer at once, so a few streams would queue the whole file while the others sat
    /// idle (measured: 2 of 8 streams carrying a 9 MiB transfer on a lossy 60 ms path, at a
    /// quarter of Globus' rate). With the cap a stream takes its next block only once its
    /// queue has nearly drained.
    /// Other transports keep their own queues: a no-op for them.
    pub fn limit_unsent(&mut self, limit: Option<u32>) -> io::Result<()> {
        let Link::Tcp(stream) = &self.link else {
            return Ok(());
        };
        if self.unsent_limit != limit {
            // The kernel's "no limit" is its default, UINT_MAX.
            socket2::SockRef::from(stream).set_tcp_notsent_lowat(limit.unwrap_or(u32::MAX))?;
            self.unsent_limit = limit;
        }
        Ok(())
    }

    /// The connection's round trip as its kernel knows it now, µs: the least it has seen (from
    /// the handshake on), else the smoothed one; `None` for other transports. Unlike
    /// [`DataConn::tcp_stats`] it leaves the counts of the next report alone.
    pub fn path_rtt_us(&self) -> Option<u32> {
        let Link::Tcp(s) = &self.link else {
            return None;
        };
        let t = crate::TcpStats::of(s).ok()?;
        [t.min_rtt_us, t.rtt_us].into_iter().find(|us| *us > 0)
    }

    /// The kernel's view of the connection's path (`TCP_INFO`) since the last call: byte and
    /// packet counts are what moved after it (a connection reused by the next transfer does
    /// not count the earlier ones again); round trips and rates are the latest. `None` for
    /// other transports or when the kernel does not answer.
    pub fn tcp_stats(&mut self) -> Option<crate::TcpStats> {
        let now = match &self.link {
            Link::Tcp(s) => crate::TcpStats::of(s).ok()?,
            Link::Other(_) => return None,
        };
        let since = match &self.tcp_seen {
            Some(before) => now.since(before),
            None => now.clone(),
        };
        self.tcp_seen = Some(Box::new(now));
        Some(since)
    }

    /// Turns Nagle's algorithm off (`true`: small writes leave at once) or on. Data connections
    /// start with it off. Only TCP has it: a no-op for other transports.
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        match &self.link {
            Link::Tcp(s) => s.set_nodelay(nodelay),
            Link::Other(_) => Ok(()),
        }
    }

    /// The socket for zero-copy sends (`sendfile`), only when bytes go to it unchanged (no
    /// TLS) and the peer is on another host. Over loopback the spliced page-cache pages reach
    /// the receiver as they are, and the bench measured the receiving process spending 2-8x
    /// the CPU per GB (disk scenario, globus-url-copy as receiver): copying once on the
    /// sending side is cheaper for the pair.
    pub fn zero_copy_socket(&self) -> Option<&TcpStream> {
        match &self.link {
            Link::Tcp(s) if self.off_host && self.tls.is_none() => Some(s),
            _ => None,
        }
    }

    /// Whether [`DataConn::detach`] can take this connection off its runtime: clear TCP only.
    pub fn can_detach(&self) -> bool {
        self.tls.is_none() && matches!(self.link, Link::Tcp(_))
    }
}

/// A clear data connection taken off the tokio runtime it was registered with, so that another
/// runtime (a dedicated thread's) can drive it.
#[derive(Debug)]
pub struct DetachedConn {
    stream: std::net::TcpStream,
    off_host: bool,
    unsent_limit: Option<u32>,
    tcp_seen: Option<Box<crate::TcpStats>>,
}

impl DataConn {
    /// Takes a clear TCP connection off its runtime. Protected connections (their TLS state is
    /// tied to the async stream) and other transports cannot move: `Unsupported`.
    pub fn detach(self) -> io::Result<DetachedConn> {
        let stream = match self.link {
            Link::Tcp(s) if self.tls.is_none() => s,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "only a clear TCP data connection can leave its runtime",
                ))
            }
        };
        Ok(DetachedConn {
            stream: stream.into_std()?,
            off_host: self.off_host,
            unsent_limit: self.unsent_limit,
            tcp_seen: self.tcp_seen,
        })
    }
}

impl DetachedConn {
    /// Reads what the kernel already holds, at once: `WouldBlock` when nothing has arrived
    /// (tokio left the socket non-blocking). With no runtime in between, a receiver on a thread
    /// of its own can poll the socket for a moment before it sleeps.
    pub fn read_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        io::Read::read(&mut &self.stream, buf)
    }

    /// Sleeps until the socket has something to read (data, its end, or an error) or `timeout`
    /// passes; answers whether it has. A detached socket is in no epoll set, so it is on the
    /// socket's wait queue only during this sleep: arriving data costs the delivering CPU no
    /// wake-up call while the receiver is polling.
    pub fn wait_readable(&self, timeout: std::time::Duration) -> io::Result<bool> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&self.stream, PollFlags::IN)];
        let timeout = Timespec::try_from(timeout).ok();
        match poll(&mut fds, timeout.as_ref()) {
            Ok(n) => Ok(n > 0),
            Err(rustix::io::Errno::INTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Registers the connection with the runtime this is called on.
    pub fn attach(self) -> io::Result<DataConn> {
        // tokio's into_std leaves the socket non-blocking, as from_std requires.
        Ok(DataConn {
            link: Link::Tcp(TcpStream::from_std(self.stream)?),
            off_host: self.off_host,
            unsent_limit: self.unsent_limit,
            tls: None,
            tcp_seen: self.tcp_seen,
        })
    }
}

/// Connects to `addr` with `tuning` applied before the handshake.
pub async fn connect(addr: SocketAddr, tuning: SocketTuning) -> Result<DataConn, NetError> {
    DataConn::from_tcp(connect_tcp(addr, tuning).await?, &tuning)
}

/// A TCP connection to `addr` with `tuning` applied before the handshake, for a layer that
/// wraps the socket itself (a client's FTPS data connections) before it becomes a [`DataConn`].
pub async fn connect_tcp(addr: SocketAddr, tuning: SocketTuning) -> Result<TcpStream, NetError> {
    let socket = if addr.is_ipv6() {
        TcpSocket::new_v6()
    } else {
        TcpSocket::new_v4()
    }
    .map_err(|source| NetError::Connect { addr, source })?;
    tuning
        .apply(&socket)
        .map_err(|source| NetError::Connect { addr, source })?;
    socket
        .connect(addr)
        .await
        .map_err(|source| NetError::Connect { addr, source })
}

impl AsyncRead for DataConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match &mut me.tls {
            Some(tls) => tls.poll_read(&mut me.link, cx, buf),
            None => Pin::new(&mut me.link).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for DataConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        match &mut me.tls {
            Some(tls) => tls.poll_write_vectored(&mut me.link, cx, &[io::IoSlice::new(buf)]),
            None => Pin::new(&mut me.link).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        match &mut me.tls {
            Some(tls) => tls.poll_write_vectored(&mut me.link, cx, bufs),
            None => Pin::new(&mut me.link).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match &mut me.tls {
            Some(tls) => tls.poll_flush(&mut me.link, cx),
            None => Pin::new(&mut me.link).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if let Some(tls) = &mut me.tls {
            ready!(tls.poll_close(&mut me.link, cx))?;
        }
        Pin::new(&mut me.link).poll_shutdown(cx)
    }
}
