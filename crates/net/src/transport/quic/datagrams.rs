//! Datagram sizes: how large the UDP datagrams a connection sends may grow, and a socket that
//! keeps quinn's send batches within what the kernel takes in one call.
//!
//! Why larger datagrams: quinn's cost is mostly per packet (header protection, a frame, an
//! entry in the sent-packet map, its acknowledgement), so the bytes one core carries grow with
//! the packet size. Loopback and the jumbo-frame networks of data transfer nodes take far more
//! than Ethernet's 1500 bytes: measured on loopback (2 cores, both ends), one transfer went
//! from 0.43–0.51 GB/s at quinn's 1452-byte bound to 0.70–0.78 GB/s at 6550.
//!
//! The bound is only an upper limit: quinn starts at 1200 bytes and probes upwards (RFC 8899
//! PLPMTUD, probes with the don't-fragment bit set), settling on what the path carries; a
//! 1500-byte path ends at 1452 as before. The receiving endpoint advertises the same bound
//! (`max_udp_payload_size`), so both ends of a stack need it to go past 1472.
//!
//! Why the socket: quinn hands the socket up to ten datagrams of one size for one `sendmsg`
//! (UDP GSO), and the kernel refuses a batch of more than 65,507 bytes with `EMSGSIZE`, which
//! quinn-udp drops silently, taking it for a lost MTU probe (quinn-rs/quinn#2199). Above
//! 6,550 bytes a batch of ten passes that; every batch is lost, the connection's loss detector
//! calls the path a black hole and falls back to 1200-byte packets for good (measured with a
//! bound of 8952: 0.42 GB/s, 1200-byte packets, `black_holes_detected: 1`). [`Batched`] asks
//! quinn for no more datagrams per batch than fit.
//!
//! It also sizes the receive buffers. quinn gives each of the 32 datagrams one `recvmmsg`
//! reads room for 64 of the largest datagrams (UDP GRO's most segments), 18 MiB an endpoint at
//! 8952 bytes, every page of it written (measured: a server's resident memory grew by 125 MB
//! for 8 connections). The kernel coalesces received datagrams up to 64 KiB (`GRO_MAX_SIZE`)
//! only, as one GSO send is, so room for 64 KiB a datagram holds all a read can bring: 2.3 MiB
//! an endpoint, less than quinn's 3 MiB at 1472.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};

/// The bound without `mtu=`: IPv6's payload in a 9000-byte jumbo frame (9000 − 40 − 8), which
/// an IPv4 jumbo frame also carries. Batches of 7 (62,664 bytes).
pub(super) const DEFAULT_MAX_PAYLOAD: u16 = 8952;
/// QUIC's smallest (RFC 9000 §14).
pub(super) const MIN_PAYLOAD: u16 = 1200;
/// The largest UDP payload of one IPv4 datagram, and of one GSO batch (65,535 − 20 − 8).
pub(super) const MAX_BATCH: usize = 65_507;

/// The most bytes one received (coalesced) datagram carries: the kernel's `GRO_MAX_SIZE`.
const MAX_COALESCED: usize = 65_536;

/// How many datagrams of up to `max_payload` bytes fit one `sendmsg`.
pub(super) fn segments(max_payload: u16) -> usize {
    (MAX_BATCH / usize::from(max_payload.max(MIN_PAYLOAD))).max(1)
}

/// How many datagrams of `max_payload` bytes hold one coalesced datagram.
pub(super) fn receive_segments(max_payload: u16) -> usize {
    MAX_COALESCED.div_ceil(usize::from(max_payload.max(MIN_PAYLOAD)))
}

/// A UDP socket whose send batches stay within [`MAX_BATCH`] bytes for datagrams of up to
/// `max_payload`, and whose receive buffers hold what the kernel coalesces, no more.
pub(super) struct Batched {
    inner: Arc<dyn AsyncUdpSocket>,
    segments: usize,
    receive_segments: usize,
}

impl Batched {
    pub(super) fn new(inner: Arc<dyn AsyncUdpSocket>, max_payload: u16) -> Batched {
        Batched {
            inner,
            segments: segments(max_payload),
            receive_segments: receive_segments(max_payload),
        }
    }
}

impl fmt::Debug for Batched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batched")
            .field("segments", &self.segments)
            .field("receive_segments", &self.receive_segments)
            .finish_non_exhaustive()
    }
}

impl AsyncUdpSocket for Batched {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Arc::clone(&self.inner).create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [io::IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments().min(self.segments)
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments().min(self.receive_segments)
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_of_the_largest_datagrams_fits_one_sendmsg() {
        for payload in [1200, 1452, 6550, 6551, 8952, 9000, 16_000, 65_507] {
            let n = segments(payload);
            assert!(n * usize::from(payload) <= MAX_BATCH, "{payload} × {n}");
            assert!(
                (n + 1) * usize::from(payload) > MAX_BATCH,
                "{payload}: {n} is not the most"
            );
        }
        // quinn's own limit is ten a batch: the default bound asks for fewer.
        assert_eq!(segments(1452), 45);
        assert_eq!(segments(DEFAULT_MAX_PAYLOAD), 7);
    }

    #[test]
    fn a_receive_buffer_holds_a_coalesced_datagram_and_not_much_more() {
        for payload in [1200, 1452, 6550, 8952, 16_000, 65_507] {
            let room = receive_segments(payload) * usize::from(payload);
            assert!(room >= MAX_COALESCED, "{payload}: {room}");
            assert!(
                room < MAX_COALESCED + usize::from(payload),
                "{payload}: {room}"
            );
        }
    }
}
