//! The transport under a data connection: a TCP socket (the fast path, monomorphic), or the
//! byte stream of any other registered transport.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::{DataProtection, NetError};

/// A connected byte stream of a transport other than TCP (see [`crate::Transport`]).
pub trait TransportStream: AsyncRead + AsyncWrite + Send + Sync + Unpin + std::fmt::Debug {
    /// The peer's address.
    fn peer_addr(&self) -> io::Result<SocketAddr>;
    /// The local address.
    fn local_addr(&self) -> io::Result<SocketAddr>;

    /// Runs once before any byte moves ([`crate::DataConn::establish`]), `initiator` on the
    /// side that connected, with the transfer's DCAU/PROT (`None`: DCAU N). A transport whose
    /// own handshake can carry the GSI credential (QUIC's TLS 1.3) authenticates the peer here
    /// as `protection` asks and answers [`Established::Secured`]; the default answers
    /// [`Established::Plain`] and the GSI layer runs over the stream, as on TCP.
    fn establish<'a>(
        &'a mut self,
        _initiator: bool,
        _protection: Option<&'a DataProtection>,
    ) -> EstablishFuture<'a> {
        Box::pin(std::future::ready(Ok(Established::Plain)))
    }
}

/// What a transport's own handshake did for a data connection's security.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Established {
    /// Nothing: DCAU/PROT's GSI layer runs over the stream.
    Plain,
    /// The peer is authenticated as the protection asked (DCAU A/S) and every byte is
    /// encrypted and integrity-protected by the transport: no GSI layer goes above it.
    Secured,
}

/// The future of [`TransportStream::establish`].
pub type EstablishFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Established, NetError>> + Send + 'a>>;

/// What a data connection's bytes travel over.
#[derive(Debug)]
pub(crate) enum Link {
    /// A TCP socket.
    Tcp(TcpStream),
    /// Another transport's stream.
    Other(Box<dyn TransportStream>),
}

impl Link {
    pub(crate) fn peer_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Link::Tcp(s) => s.peer_addr(),
            Link::Other(s) => s.peer_addr(),
        }
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Link::Tcp(s) => s.local_addr(),
            Link::Other(s) => s.local_addr(),
        }
    }

    /// Reads what is there into `buf` (the TLS layer's ciphertext buffer); 0 at the end.
    pub(crate) fn poll_read_into(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self {
            Link::Tcp(s) => loop {
                ready!(s.poll_read_ready(cx))?;
                match s.try_read(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    r => return Poll::Ready(r),
                }
            },
            Link::Other(s) => {
                let mut rb = ReadBuf::new(buf);
                ready!(Pin::new(s).poll_read(cx, &mut rb))?;
                Poll::Ready(Ok(rb.filled().len()))
            }
        }
    }

    /// Writes some of `buf` (the TLS layer's sealed records).
    pub(crate) fn poll_write_some(
        &mut self,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self {
            Link::Tcp(s) => loop {
                ready!(s.poll_write_ready(cx))?;
                match s.try_write(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    r => return Poll::Ready(r),
                }
            },
            Link::Other(s) => Pin::new(s).poll_write(cx, buf),
        }
    }
}

impl AsyncRead for Link {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Link::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Link::Other(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Link {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Link::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Link::Other(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Link::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Link::Other(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Link::Tcp(_) => true,
            Link::Other(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Link::Tcp(s) => Pin::new(s).poll_flush(cx),
            Link::Other(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Link::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Link::Other(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
