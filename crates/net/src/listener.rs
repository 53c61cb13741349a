//! Passive data listeners, bound in the administrator's port range.

use std::net::{IpAddr, SocketAddr};
use std::task::{Context, Poll, Waker};

use tokio::net::{TcpListener, TcpSocket};

use crate::conn::DataConn;
use crate::link::TransportStream;
use crate::{NetError, SocketTuning};

/// Connections a listener queues before the DTP accepts them.
const BACKLOG: u32 = 128;

/// An inclusive port range for data listeners (`--port-range LO-HI`); `None` = any port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PortRange {
    /// Lowest port.
    pub lo: u16,
    /// Highest port.
    pub hi: u16,
}

impl std::str::FromStr for PortRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, b) = s
            .split_once(['-', ',', ':'])
            .ok_or_else(|| format!("expected LO-HI, got '{s}'"))?;
        let lo: u16 = a.trim().parse().map_err(|_| format!("bad port '{a}'"))?;
        let hi: u16 = b.trim().parse().map_err(|_| format!("bad port '{b}'"))?;
        if lo == 0 || lo > hi {
            return Err(format!("bad port range '{s}'"));
        }
        Ok(PortRange { lo, hi })
    }
}

/// A listening data endpoint that accepts any number of data connections.
#[derive(Debug)]
pub struct DataListener {
    inner: Listening,
    tuning: SocketTuning,
    /// The host of the last connection accepted (transfer logs name it).
    last_peer: std::sync::Mutex<Option<std::net::IpAddr>>,
    /// The one host whose connections are taken (a session that may not be third party):
    /// any other is closed at once.
    admit_only: std::sync::Mutex<Option<std::net::IpAddr>>,
}

/// A transport's listening endpoint.
#[derive(Debug)]
enum Listening {
    Tcp(TcpListener),
    Other(Box<dyn TransportListener>),
}

/// The listening side of a transport other than TCP (see [`crate::Transport`]).
pub trait TransportListener: Send + Sync + std::fmt::Debug {
    /// The bound address.
    fn local_addr(&self) -> std::io::Result<SocketAddr>;
    /// The next connection, when one is waiting.
    fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<std::io::Result<Box<dyn TransportStream>>>;
}

impl DataListener {
    /// A listener of another transport.
    pub fn from_transport(listener: Box<dyn TransportListener>) -> DataListener {
        DataListener {
            inner: Listening::Other(listener),
            tuning: SocketTuning::default(),
            last_peer: std::sync::Mutex::new(None),
            admit_only: std::sync::Mutex::new(None),
        }
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match &self.inner {
            Listening::Tcp(l) => l.local_addr(),
            Listening::Other(l) => l.local_addr(),
        }
    }

    /// Takes connections only from `host` from now on (`None`: from anyone).
    pub fn admit_only(&self, host: Option<std::net::IpAddr>) {
        *self.admit_only.lock().unwrap_or_else(|e| e.into_inner()) = host.map(canonical);
    }

    /// Whether a connection from `peer` may be taken.
    fn admits(&self, peer: Option<std::net::IpAddr>) -> bool {
        match *self.admit_only.lock().unwrap_or_else(|e| e.into_inner()) {
            None => true,
            Some(only) => peer.map(canonical) == Some(only),
        }
    }

    /// Accepts the next data connection; one from a host the listener does not admit is
    /// closed at once and the wait goes on.
    pub async fn accept(&self) -> Result<DataConn, NetError> {
        loop {
            let (conn, peer) = match &self.inner {
                Listening::Tcp(l) => {
                    let (stream, peer) = l.accept().await?;
                    if !self.admits(Some(peer.ip())) {
                        tracing::warn!(%peer, "data connection from a host other than the session's refused");
                        continue;
                    }
                    (DataConn::from_tcp(stream, &self.tuning)?, Some(peer.ip()))
                }
                Listening::Other(l) => {
                    let stream = std::future::poll_fn(|cx| l.poll_accept(cx)).await?;
                    let conn = DataConn::from_transport(stream);
                    let peer = conn.peer_addr().ok().map(|a| a.ip());
                    if !self.admits(peer) {
                        tracing::warn!(peer = ?peer, "data connection from a host other than the session's refused");
                        continue;
                    }
                    (conn, peer)
                }
            };
            self.remember(peer);
            return Ok(conn);
        }
    }

    fn remember(&self, peer: Option<std::net::IpAddr>) {
        *self.last_peer.lock().unwrap_or_else(|e| e.into_inner()) = peer;
    }

    /// The host of the last connection accepted, if any.
    pub fn last_peer(&self) -> Option<std::net::IpAddr> {
        *self.last_peer.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for DataListener {
    /// Closing a listening socket resets the connections still waiting in its accept queue.
    /// Clients such as Python's ftplib connect before they send RETR, so a transfer refused
    /// before the DTP accepted would reach them as a reset; accepting and closing those
    /// connections ends them with FIN instead.
    fn drop(&mut self) {
        let mut cx = Context::from_waker(Waker::noop());
        for _ in 0..BACKLOG {
            let accepted = match &self.inner {
                Listening::Tcp(l) => l.poll_accept(&mut cx).map_ok(drop),
                Listening::Other(l) => l.poll_accept(&mut cx).map_ok(drop),
            };
            if !matches!(accepted, Poll::Ready(Ok(()))) {
                break;
            }
        }
    }
}

/// An IPv4 address carried as IPv6 (`::ffff:a.b.c.d`) as the IPv4 address it is.
fn canonical(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
        v4 => v4,
    }
}

/// Binds a listener on `ip`, in `range` if given (starting at a random port so concurrent
/// sessions spread out), with `tuning` applied before `listen`.
pub fn bind_listener(
    ip: IpAddr,
    range: Option<PortRange>,
    tuning: SocketTuning,
) -> Result<DataListener, NetError> {
    let bind = |port: u16| -> std::io::Result<TcpListener> {
        let socket = if ip.is_ipv6() {
            TcpSocket::new_v6()?
        } else {
            TcpSocket::new_v4()?
        };
        tuning.apply(&socket)?;
        socket.set_reuseaddr(true)?;
        socket.bind(SocketAddr::new(ip, port))?;
        socket.listen(BACKLOG)
    };
    let inner = bind_in_range(range, bind)?;
    Ok(DataListener {
        inner: Listening::Tcp(inner),
        tuning,
        last_peer: std::sync::Mutex::new(None),
        admit_only: std::sync::Mutex::new(None),
    })
}

/// The first port of `range` (tried from a random one, so concurrent sessions spread out) that
/// `bind` takes, or any port (0) without a range.
pub(crate) fn bind_in_range<T>(
    range: Option<PortRange>,
    mut bind: impl FnMut(u16) -> std::io::Result<T>,
) -> Result<T, NetError> {
    let Some(r) = range else {
        return Ok(bind(0)?);
    };
    let span = u32::from(r.hi - r.lo) + 1;
    let start = random_below(span);
    (0..span)
        .find_map(|i| bind(r.lo + ((start + i) % span) as u16).ok())
        .ok_or(NetError::NoFreePort { lo: r.lo, hi: r.hi })
}

/// A cheap pseudo-random number below `n` from the clock; only spreads ports, needs no quality.
fn random_below(n: u32) -> u32 {
    let nanos = ferry_proto::clock::now_since_epoch().subsec_nanos();
    nanos.wrapping_mul(2_654_435_761) % n.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_range_parses_and_rejects_reversed() {
        assert_eq!(
            "50000-50100".parse::<PortRange>().unwrap(),
            PortRange {
                lo: 50000,
                hi: 50100
            }
        );
        assert!("50100-50000".parse::<PortRange>().is_err());
        assert!("x".parse::<PortRange>().is_err());
    }

    #[tokio::test]
    async fn a_listener_that_admits_one_host_closes_connections_from_others() {
        use tokio::io::AsyncReadExt;
        let l = bind_listener("127.0.0.1".parse().unwrap(), None, SocketTuning::default()).unwrap();
        let addr = l.local_addr().unwrap();
        l.admit_only(Some("127.0.0.1".parse().unwrap()));
        let accepted = tokio::spawn(async move {
            let c = l.accept().await.unwrap();
            (c.peer_addr().unwrap(), l.last_peer())
        });
        let from = |ip: &str| {
            let s = TcpSocket::new_v4().unwrap();
            s.bind(SocketAddr::new(ip.parse().unwrap(), 0)).unwrap();
            s.connect(addr)
        };
        let mut stranger = from("127.0.0.2").await.unwrap();
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), stranger.read(&mut buf))
            .await
            .expect("the stranger's connection is closed, not kept");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        let _own = from("127.0.0.1").await.unwrap();
        let (peer, last) = accepted.await.unwrap();
        assert_eq!(peer.ip().to_string(), "127.0.0.1");
        assert_eq!(last, Some("127.0.0.1".parse().unwrap()));
    }

    #[tokio::test]
    async fn listener_binds_inside_the_range() {
        let l = bind_listener(
            "127.0.0.1".parse().unwrap(),
            Some(PortRange {
                lo: 42100,
                hi: 42199,
            }),
            SocketTuning::default(),
        )
        .unwrap();
        let p = l.local_addr().unwrap().port();
        assert!((42100..=42199).contains(&p));
    }
}
