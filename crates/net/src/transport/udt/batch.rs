//! Batched UDP I/O for a UDT endpoint, through quinn-udp (made for exactly this, and already
//! QUIC's): `recvmmsg` with GRO on the way in, one `sendmsg` of up to
//! [`MAX_BATCH_BYTES`] of equal-sized packets with GSO on the way out. Per-datagram system
//! calls cost most of a UDT transfer's CPU before this.
//!
//! quinn-udp also forbids fragmentation, as QUIC needs. UDT does not: libudt's packets fill
//! the MSS it negotiated (1500 by default, IP and UDP headers counted as for IPv4), so over
//! IPv6, or with a large `mss`, they may exceed the path's MTU and must be fragmented as a
//! plain socket would. The socket's path-MTU settings go back to the kernel's defaults
//! afterwards; neither socket2 nor rustix sets `IPV6_DONTFRAG`, hence the one `unsafe` call.
#![allow(unsafe_code)]

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use quinn_udp::{RecvMeta, Transmit, UdpSocketState, BATCH_SIZE};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Bytes one GSO send carries at most (the kernel takes 64 KiB less headers).
pub(super) const MAX_BATCH_BYTES: usize = 65_000;
/// Largest datagram read alone (any MSS a peer may ask).
const DATAGRAM: usize = 65_536;

/// A socket's batching state: what the kernel offers, found once.
#[derive(Debug)]
pub(super) struct Batching {
    state: UdpSocketState,
}

impl Batching {
    /// Sets `socket` up for batched I/O.
    pub(super) fn new(socket: &std::net::UdpSocket) -> io::Result<Batching> {
        let state = UdpSocketState::new(socket.into())?;
        let v6 = socket.local_addr()?.is_ipv6();
        allow_fragments(socket, v6);
        Ok(Batching { state })
    }

    /// Packets one send may carry.
    pub(super) fn max_segments(&self) -> usize {
        self.state.max_gso_segments().max(1)
    }

    /// Reads what is waiting, up to [`BATCH_SIZE`] messages (each maybe several coalesced
    /// datagrams), and hands every datagram to `each`. Returns the datagrams read;
    /// `WouldBlock` when none was waiting.
    pub(super) fn recv(
        &self,
        socket: &UdpSocket,
        bufs: &mut RecvBuffers,
        mut each: impl FnMut(SocketAddr, &[u8]),
    ) -> io::Result<usize> {
        let chunk = bufs.data.len() / BATCH_SIZE;
        let mut iovs: Vec<IoSliceMut<'_>> =
            bufs.data.chunks_mut(chunk).map(IoSliceMut::new).collect();
        let metas = &mut bufs.metas;
        let n = socket.try_io(Interest::READABLE, || {
            self.state.recv(socket.into(), &mut iovs, metas)
        })?;
        let mut datagrams = 0;
        for (meta, buf) in metas.iter().zip(iovs.iter()).take(n) {
            let stride = if meta.stride == 0 {
                meta.len
            } else {
                meta.stride
            };
            for d in buf[..meta.len].chunks(stride.max(1)) {
                datagrams += 1;
                each(meta.addr, d);
            }
        }
        Ok(datagrams)
    }

    /// Sends `contents` to `to`: packets of `segment` bytes, the last maybe shorter.
    /// `WouldBlock` when the socket's buffer is full; other errors are logged by quinn-udp
    /// and dropped, as a lost datagram would be.
    pub(super) fn send(
        &self,
        socket: &UdpSocket,
        to: SocketAddr,
        contents: &[u8],
        segment: usize,
    ) -> io::Result<()> {
        let transmit = Transmit {
            destination: to,
            ecn: None,
            contents,
            segment_size: (contents.len() > segment).then_some(segment),
            src_ip: None,
        };
        socket.try_io(Interest::WRITABLE, || {
            self.state.send(socket.into(), &transmit)
        })
    }

    /// Buffers for [`Batching::recv`], sized for what the kernel coalesces.
    pub(super) fn buffers(&self) -> RecvBuffers {
        let per = DATAGRAM.max(self.state.gro_segments() * 1_500);
        RecvBuffers {
            data: vec![0; per * BATCH_SIZE].into_boxed_slice(),
            metas: [RecvMeta::default(); BATCH_SIZE],
        }
    }
}

/// Receive buffers, owned by the endpoint's task.
pub(super) struct RecvBuffers {
    data: Box<[u8]>,
    metas: [RecvMeta; BATCH_SIZE],
}

/// Gives path-MTU handling back to the kernel's defaults (see the module's note). A failure
/// only leaves quinn-udp's stricter settings, which suit packets within the MTU.
fn allow_fragments(socket: &std::net::UdpSocket, v6: bool) {
    let set = |level: libc::c_int, name: libc::c_int, value: libc::c_int| {
        // SAFETY: `value` is a live c_int and its size is what is passed; the kernel reads it.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                level,
                name,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            tracing::debug!(error = %io::Error::last_os_error(), level, name, "UDT socket option refused");
        }
    };
    set(
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_WANT,
    );
    if v6 {
        set(
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_WANT,
        );
        set(libc::IPPROTO_IPV6, libc::IPV6_DONTFRAG, 0);
    }
}
