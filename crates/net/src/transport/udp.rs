//! The UDP sockets of the transports over UDP (`quic`, `udt`): one set-up for a listener's
//! socket and a connecting side's, with large buffers asked of the kernel.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

use socket2::{Domain, Protocol, Socket, Type};

use crate::listener::bind_in_range;
use crate::{NetError, PortRange, SocketTuning};

/// The socket buffers asked of the kernel unless the tuning asks more or the options set them
/// (it caps them at `net.core.rmem_max`/`wmem_max`: a smaller buffer is no error): bursts of a
/// fast sender queue here before the transport reads them.
const SOCKET_BUFFER: u32 = 8 << 20;

/// Socket buffer sizes a stack entry's options set (udt's `rcvbuf`/`sndbuf`), over the tuning's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Buffers {
    /// `SO_RCVBUF` in bytes, as given.
    pub(super) recv: Option<u32>,
    /// `SO_SNDBUF` in bytes, as given.
    pub(super) send: Option<u32>,
}

/// A listener's socket on `ip`, in the admin's port `range` if given.
pub(super) fn listening(
    ip: IpAddr,
    range: Option<PortRange>,
    tuning: &SocketTuning,
    buffers: Buffers,
) -> Result<UdpSocket, NetError> {
    bind_in_range(range, |port| {
        socket(SocketAddr::new(ip, port), tuning, buffers)
    })
}

/// A connecting side's socket for `peer`: any port of the unspecified address of its family.
pub(super) fn connecting(
    peer: SocketAddr,
    tuning: &SocketTuning,
    buffers: Buffers,
) -> io::Result<UdpSocket> {
    socket(unspecified(peer), tuning, buffers)
}

/// The unspecified address of `peer`'s family, any port.
pub(super) fn unspecified(peer: SocketAddr) -> SocketAddr {
    match peer {
        SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
    }
}

/// A socket bound to `addr` with its buffers as asked, non-blocking for tokio.
fn socket(addr: SocketAddr, tuning: &SocketTuning, buffers: Buffers) -> io::Result<UdpSocket> {
    let size = |given: Option<u32>, asked: Option<u32>| {
        given.unwrap_or_else(|| asked.unwrap_or(0).max(SOCKET_BUFFER)) as usize
    };
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    let _ = s.set_recv_buffer_size(size(buffers.recv, tuning.recv_buffer));
    let _ = s.set_send_buffer_size(size(buffers.send, tuning.send_buffer));
    s.bind(&addr.into())?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}
