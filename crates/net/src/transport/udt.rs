//! `udt`: data connections over UDT4 (UDP-based Data Transfer), the protocol Globus' UDT
//! driver speaks through libudt 4.11, so ferry and Globus servers and clients move data
//! over UDT with each other (`SITE SETNETSTACK udt,gsi`; globus-url-copy `-udt`).
//!
//! The protocol is `ferry-udt`'s sans-IO core; this module gives it sockets. One UDP socket
//! per listener (the port PASV/EPSV/SPAS advertise; every data connection of the transfer
//! arrives on it, told apart by UDT socket id) and one per connecting stream. A stream is
//! a plain byte stream: DCAU and PROT put the GSI layer above it exactly as over TCP, as
//! Globus' `gsi` driver sits above its `udt`.
//!
//! End of stream: UDT has no half-close. A side that finishes waits until its peer
//! acknowledged every byte, then sends UDT's shutdown; a reader sees the end once it read
//! everything before it, and an error if packets were still missing. A shutdown lost on the
//! way is repeated to a peer that keeps talking (libudt's is sent once).
//!
//! Options (`SITE SETNETSTACK udt:mss=9000;cc=udt,gsi`): Globus' `mss`, `fc` (flow window,
//! packets), `sndbuf` and `rcvbuf` (UDP socket buffers, as in Globus' driver), and ferry's
//! `cc=bbr|udt`: the sending side's congestion control, the model-based one by default,
//! libudt's own CUDTCC on request. Globus' other keys are accepted and mean nothing here.

mod batch;
mod endpoint;
mod options;

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use ferry_udt::ReadOutcome;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

use self::endpoint::{Endpoint, Slot};
use self::options::Options;
use super::{udp, Bind, ConnectFuture, Dial, Transport};
use crate::{DataConn, DataListener, NetError, TransportListener, TransportStream};

/// Connections a listener holds before the DTP takes them.
const BACKLOG: usize = 128;
/// Bytes one write copies into the connection at most. The copy holds the connection's lock,
/// and the endpoint needs it to send, read ACKs and answer the peer: a 256 MiB write took the
/// whole 64 MiB send buffer at once, 64 ms in which a new connection's handshake answer did
/// not go out and every connection on the endpoint stood still.
const WRITE_CHUNK: usize = 256 << 10;

/// UDT.
#[derive(Debug)]
pub(super) struct Udt;

impl Transport for Udt {
    fn name(&self) -> &'static str {
        "udt"
    }

    fn accept_options(&self, options: &str) -> Result<(), NetError> {
        Options::parse(options).map(drop)
    }

    fn connect<'a>(&'a self, dial: Dial<'a>) -> ConnectFuture<'a> {
        let (addr, tuning, options) = (dial.addr, dial.tuning, dial.options);
        Box::pin(async move {
            let options = Options::parse(options)?;
            let fail = |source: io::Error| NetError::Connect { addr, source };
            let socket = udp::connecting(addr, &tuning, options.buffers).map_err(fail)?;
            let (ep, _) = Endpoint::start(socket, options.config(), None).map_err(fail)?;
            let slot = ep.connect(addr);
            ep.spawn();
            poll_fn(|cx| {
                let mut st = slot.lock();
                if let Some(e) = st.conn.error() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::ConnectionRefused,
                        e.clone(),
                    )));
                }
                if st.conn.is_open() {
                    return Poll::Ready(Ok(()));
                }
                st.other = Some(cx.waker().clone());
                Poll::Pending
            })
            .await
            .map_err(fail)?;
            let local = ep.local_addr();
            Ok(DataConn::from_transport(Box::new(UdtStream::new(
                ep, slot, addr, local,
            ))))
        })
    }

    fn listen(&self, bind: Bind<'_>) -> Result<DataListener, NetError> {
        let options = Options::parse(bind.options)?;
        let socket = udp::listening(bind.ip, bind.range, &bind.tuning, options.buffers)?;
        let (ep, ready) = Endpoint::start(socket, options.config(), Some(BACKLOG))?;
        ep.spawn();
        let local = ep.local_addr();
        let ready = ready.ok_or_else(|| io::Error::other("a listening endpoint has a backlog"))?;
        Ok(DataListener::from_transport(Box::new(UdtListener {
            ep,
            local,
            ready: Mutex::new(ready),
        })))
    }
}

#[derive(Debug)]
struct UdtListener {
    ep: Arc<Endpoint>,
    local: SocketAddr,
    ready: Mutex<mpsc::Receiver<Arc<Slot>>>,
}

impl TransportListener for UdtListener {
    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<Box<dyn TransportStream>>> {
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        match ready.poll_recv(cx) {
            Poll::Ready(Some(slot)) => {
                let peer = {
                    let mut st = slot.lock();
                    st.taken = true;
                    st.conn.peer()
                };
                Poll::Ready(Ok(Box::new(UdtStream::new(
                    self.ep.clone(),
                    slot,
                    peer,
                    self.local,
                ))))
            }
            Poll::Ready(None) => Poll::Ready(Err(io::Error::other("the UDT listener stopped"))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for UdtListener {
    fn drop(&mut self) {
        self.ep.stop_listening();
    }
}

/// One UDT connection as a byte stream.
#[derive(Debug)]
struct UdtStream {
    ep: Arc<Endpoint>,
    slot: Arc<Slot>,
    peer: SocketAddr,
    local: SocketAddr,
}

impl UdtStream {
    fn new(ep: Arc<Endpoint>, slot: Arc<Slot>, peer: SocketAddr, local: SocketAddr) -> UdtStream {
        UdtStream {
            ep,
            slot,
            peer,
            local,
        }
    }
}

fn broken(e: &ferry_udt::ConnError) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, e.clone())
}

impl AsyncRead for UdtStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut st = self.slot.lock();
        match st.conn.read(buf.initialize_unfilled()) {
            Ok(ReadOutcome::Data(n)) => {
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Ok(ReadOutcome::End) => Poll::Ready(Ok(())),
            Ok(ReadOutcome::Blocked) => {
                st.read = Some(cx.waker().clone());
                Poll::Pending
            }
            Err(e) => Poll::Ready(Err(broken(&e))),
        }
    }
}

impl AsyncWrite for UdtStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut st = self.slot.lock();
        if let Some(e) = st.conn.error() {
            return Poll::Ready(Err(broken(e)));
        }
        if st.conn.is_closed() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the UDT connection is closed",
            )));
        }
        let n = st.conn.write(&data[..data.len().min(WRITE_CHUNK)]);
        if n == 0 && !data.is_empty() {
            st.write = Some(cx.waker().clone());
            return Poll::Pending;
        }
        drop(st);
        self.ep.notify();
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Waits until the peer acknowledged every byte, then sends UDT's shutdown.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = self.slot.lock();
        st.conn.close();
        if let Some(e) = st.conn.error() {
            return Poll::Ready(Err(broken(e)));
        }
        if st.conn.is_closed() {
            return Poll::Ready(Ok(()));
        }
        st.other = Some(cx.waker().clone());
        drop(st);
        self.ep.notify();
        Poll::Pending
    }
}

impl TransportStream for UdtStream {
    fn peer_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.peer)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

impl Drop for UdtStream {
    fn drop(&mut self) {
        self.slot.release(Instant::now());
        self.ep.notify();
    }
}

#[cfg(test)]
mod tests;
