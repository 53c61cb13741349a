//! The transport seam end to end: a test-only transport (TCP that counts every byte it
//! carries) registered beside `tcp`, admitted by `--dc-whitelist`, chosen with
//! `SITE SETNETSTACK`, carries the data of passive and active, stream and MODE E transfers;
//! `SITE SETNETSTACK tcp` puts the session back on plain TCP.

use crate::common;

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use common::*;
use ferry_net::{
    Bind, ConnectFuture, DataConn, DataListener, Dial, NetError, Transport, TransportListener,
    TransportStream, Transports,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// What the transport carried.
#[derive(Debug, Default)]
struct Tally {
    bytes: AtomicU64,
    connections: AtomicU64,
}

#[derive(Debug)]
struct Counted(Arc<Tally>);

impl Transport for Counted {
    fn name(&self) -> &'static str {
        "counted"
    }

    fn connect<'a>(&'a self, dial: Dial<'a>) -> ConnectFuture<'a> {
        let addr = dial.addr;
        Box::pin(async move {
            let s = TcpStream::connect(addr)
                .await
                .map_err(|source| NetError::Connect { addr, source })?;
            self.0.connections.fetch_add(1, Ordering::Relaxed);
            Ok(DataConn::from_transport(Box::new(CountedStream(
                s,
                Arc::clone(&self.0),
            ))))
        })
    }

    fn listen(&self, bind: Bind<'_>) -> Result<DataListener, NetError> {
        let Bind { ip, .. } = bind;
        let std = std::net::TcpListener::bind((ip, 0))?;
        std.set_nonblocking(true)?;
        let l = TcpListener::from_std(std)?;
        Ok(DataListener::from_transport(Box::new(CountedListener(
            l,
            Arc::clone(&self.0),
        ))))
    }
}

#[derive(Debug)]
struct CountedListener(TcpListener, Arc<Tally>);

impl TransportListener for CountedListener {
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }

    fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<Box<dyn TransportStream>>> {
        self.0.poll_accept(cx).map_ok(|(s, _)| {
            self.1.connections.fetch_add(1, Ordering::Relaxed);
            Box::new(CountedStream(s, Arc::clone(&self.1))) as Box<dyn TransportStream>
        })
    }
}

#[derive(Debug)]
struct CountedStream(TcpStream, Arc<Tally>);

impl TransportStream for CountedStream {
    fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.0.peer_addr()
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

impl AsyncRead for CountedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut me.0).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        me.1.bytes.fetch_add(n as u64, Ordering::Relaxed);
        r
    }
}

impl AsyncWrite for CountedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.0).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            me.1.bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

async fn server_with_counted(whitelisted: bool) -> (TestServer, Arc<Tally>) {
    let tally = Arc::new(Tally::default());
    let drivers = ferry_server::Drivers {
        transports: Transports::standard().with(Arc::new(Counted(Arc::clone(&tally)))),
        ..Default::default()
    };
    let srv = TestServer::try_start_with_drivers(
        |c| {
            if whitelisted {
                c.dc_whitelist = vec!["tcp".into(), "gsi".into(), "counted".into()];
            }
        },
        drivers,
    )
    .await
    .expect("server starts");
    (srv, tally)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setnetstack_moves_passive_and_active_transfers_over_the_chosen_transport() {
    let (srv, tally) = server_with_counted(true).await;
    let data = random_bytes(3 << 20, 11);
    srv.write("f.bin", &data);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "SITE SETNETSTACK counted,gsi", 250).await;

    // Passive, stream mode: the client dials the transport's listener.
    let addr = pasv(&mut c).await;
    let mut conn = data_connect(addr).await;
    start_transfer(&mut c, "RETR f.bin").await;
    assert_eq!(read_all(&mut conn).await, data);
    expect_final(&mut c, 226).await;
    assert_eq!(tally.connections.load(Ordering::Relaxed), 1);
    assert_eq!(tally.bytes.load(Ordering::Relaxed), data.len() as u64);

    // Active, MODE E over 4 streams: the server connects with the transport.
    let (got, streams) = client_get(&mut c, "f.bin", 4).await;
    assert_eq!(got, data);
    assert_eq!(streams, 4);
    assert_eq!(tally.connections.load(Ordering::Relaxed), 5);
    let carried = tally.bytes.load(Ordering::Relaxed) - data.len() as u64;
    assert!(carried > data.len() as u64, "MODE E headers too: {carried}");

    // Back on TCP: the transport carries nothing more.
    expect(&mut c, "SITE SETNETSTACK tcp", 250).await;
    let before = tally.bytes.load(Ordering::Relaxed);
    let (got, _) = client_get(&mut c, "f.bin", 2).await;
    assert_eq!(got, data);
    assert_eq!(tally.bytes.load(Ordering::Relaxed), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_transport_the_admin_did_not_whitelist_is_refused() {
    let (srv, tally) = server_with_counted(false).await;
    let mut c = srv.login().await;
    let r = cmd(&mut c, "SITE SETNETSTACK counted").await;
    assert_eq!(r.code, 500, "{r}");
    assert!(r.text().contains("counted driver not whitelisted"), "{r}");
    let r = cmd(&mut c, "SITE SETNETSTACK counted:rate=1M").await;
    assert_eq!(r.code, 500, "{r}");
    srv.write("f.bin", b"still tcp");
    let (got, _) = client_get(&mut c, "f.bin", 1).await;
    assert_eq!(got, b"still tcp");
    assert_eq!(tally.connections.load(Ordering::Relaxed), 0);
}
