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
        }
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match &self.inner {
            Listening::Tcp(l) => l.local_addr(),
            Listening::Other(l) => l.local_addr(),
        }
    }

    /// Accepts the next data connection.
    pub async fn accept(&self) -> Result<DataConn, NetError> {
        match &self.inner {
            Listening::Tcp(l) => {
                let (stream, peer) = l.accept().await?;
                self.remember(Some(peer.ip()));
                DataConn::from_tcp(stream, &self.tuning)
            }
            Listening::Other(l) => {
                let stream = std::future::poll_fn(|cx| l.poll_accept(cx)).await?;
                let conn = DataConn::from_transport(stream);
                self.remember(conn.peer_addr().ok().map(|a| a.ip()));
                Ok(conn)
            }
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
