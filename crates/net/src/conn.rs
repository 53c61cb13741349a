//! An established data connection, whatever its stack.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};

use crate::{NetError, SocketTuning};

/// One data connection. An enum rather than a trait object so the hot path is monomorphic;
/// TLS and other transports add variants.
#[derive(Debug)]
pub enum DataConn {
    /// Plain TCP.
    Tcp(TcpStream),
}

impl DataConn {
    pub(crate) fn from_tcp(stream: TcpStream, tuning: &SocketTuning) -> Result<DataConn, NetError> {
        let _ = tuning;
        stream.set_nodelay(false)?;
        Ok(DataConn::Tcp(stream))
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        match self {
            DataConn::Tcp(s) => s.peer_addr(),
        }
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            DataConn::Tcp(s) => s.local_addr(),
        }
    }

    /// Turns Nagle's algorithm off (`true`: small writes leave at once) or on. Data connections
    /// run with it on while a transfer streams, so a block's tail rides with the next block
    /// instead of leaving as its own small segment; the sender turns it off after the final
    /// EOD so that header is not held back waiting for an ACK.
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        match self {
            DataConn::Tcp(s) => s.set_nodelay(nodelay),
        }
    }

    /// The socket for zero-copy sends (`sendfile`), only when bytes go to it unchanged and
    /// the peer is on another host. Over loopback the spliced page-cache pages reach the
    /// receiver as they are, and the bench measured the receiving process spending 2-8x the
    /// CPU per GB (disk scenario, globus-url-copy as receiver): copying once on the sending side
    /// is cheaper for the pair.
    pub fn zero_copy_socket(&self) -> Option<&TcpStream> {
        match self {
            DataConn::Tcp(s) => match s.peer_addr() {
                Ok(a) if !a.ip().is_loopback() => Some(s),
                _ => None,
            },
        }
    }

    /// The raw descriptor of the transport socket.
    pub fn raw_fd(&self) -> RawFd {
        match self {
            DataConn::Tcp(s) => s.as_raw_fd(),
        }
    }
}

/// Connects to `addr` with `tuning` applied before the handshake, optionally from `bind_ip`.
pub async fn connect(addr: SocketAddr, tuning: SocketTuning) -> Result<DataConn, NetError> {
    let socket = if addr.is_ipv6() {
        TcpSocket::new_v6()
    } else {
        TcpSocket::new_v4()
    }
    .map_err(|source| NetError::Connect { addr, source })?;
    tuning
        .apply(&socket)
        .map_err(|source| NetError::Connect { addr, source })?;
    let stream = socket
        .connect(addr)
        .await
        .map_err(|source| NetError::Connect { addr, source })?;
    DataConn::from_tcp(stream, &tuning)
}

impl AsyncRead for DataConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            DataConn::Tcp(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for DataConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            DataConn::Tcp(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            DataConn::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            DataConn::Tcp(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            DataConn::Tcp(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
