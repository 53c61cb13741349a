//! Batched UDP I/O for a UDT endpoint: `recvmmsg` with GRO on the way in, one `sendmsg` of
//! up to [`MAX_BATCH_BYTES`] of equal-sized packets with GSO on the way out. Per-datagram
//! system calls cost most of a UDT transfer's CPU before this. quinn-udp (made for exactly
//! this, and already QUIC's) sets the socket up and sends.
//!
//! Reading goes through nix's `recvmmsg` instead, because each datagram needs the time the
//! kernel received it (`SO_TIMESTAMPNS`), which quinn-udp does not hand out. The endpoint
//! reads in batches, so the time of reading says nothing of the gap between two arrivals:
//! timed that way, the packet pairs behind the link capacity a receiver reports to a libudt
//! sender (whose CUDTCC sizes its rate increases by it) measured 0 µs, or a few µs.
//!
//! quinn-udp also forbids fragmentation, as QUIC needs. UDT does not: libudt's packets fill
//! the MSS it negotiated (1500 by default, IP and UDP headers counted as for IPv4), so over
//! IPv6, or with a large `mss`, they may exceed the path's MTU and must be fragmented as a
//! plain socket would. The socket's path-MTU settings go back to the kernel's defaults
//! afterwards; neither socket2 nor rustix sets `IPV6_DONTFRAG`, hence the one `unsafe` call.
#![allow(unsafe_code)]

use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant, SystemTime};

use nix::sys::socket::{
    recvmmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrStorage,
};
use nix::sys::time::TimeSpec;
use quinn_udp::{Transmit, UdpSocketState, BATCH_SIZE};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Bytes one GSO send carries at most (the kernel takes 64 KiB less headers).
pub(super) const MAX_BATCH_BYTES: usize = 65_000;
/// Largest datagram read alone (any MSS a peer may ask).
const DATAGRAM: usize = 65_536;
/// Room for one message's control data: the receive time, GRO's segment size, and the
/// packet information and TOS quinn-udp asks of the socket.
const CONTROL: usize = 256;
/// A receive time older than this is taken as a clock step, not an arrival: the time of
/// reading stands instead.
const STALE: Duration = Duration::from_secs(1);

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
        if let Err(e) = setsockopt(socket, sockopt::ReceiveTimestampns, &true) {
            // Arrivals are then timed when read, as before.
            tracing::debug!(error = %e, "UDT socket gives no receive times");
        }
        Ok(Batching { state })
    }

    /// Packets one send may carry.
    pub(super) fn max_segments(&self) -> usize {
        self.state.max_gso_segments().max(1)
    }

    /// Reads what is waiting, up to [`BATCH_SIZE`] messages (each maybe several coalesced
    /// datagrams), and hands every datagram to `each` with the time the kernel received it
    /// (coalesced ones share it). Returns the datagrams read; `WouldBlock` when none was
    /// waiting.
    pub(super) fn recv(
        &self,
        socket: &UdpSocket,
        bufs: &mut RecvBuffers,
        mut each: impl FnMut(SocketAddr, Instant, &[u8]),
    ) -> io::Result<usize> {
        let RecvBuffers { data, metas } = bufs;
        let chunk = data.len() / BATCH_SIZE;
        let n = socket.try_io(Interest::READABLE, || {
            let mut iovs: Vec<[IoSliceMut<'_>; 1]> = data
                .chunks_mut(chunk)
                .map(|c| [IoSliceMut::new(c)])
                .collect();
            // Fresh headers each call: the kernel shortens each header's control length to
            // what it wrote, and nix's recvmmsg does not restore it, so a reused header
            // truncates a later message's control data (GRO's segment size among it).
            let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(
                BATCH_SIZE,
                Some(Vec::with_capacity(CONTROL)),
            );
            let got = recvmmsg(
                socket.as_raw_fd(),
                &mut headers,
                iovs.iter_mut(),
                MsgFlags::MSG_DONTWAIT,
                None,
            )?;
            let clocks = (SystemTime::now(), Instant::now());
            let mut n = 0;
            for msg in got {
                let meta = &mut metas[n];
                n += 1;
                meta.addr = msg.address.as_ref().and_then(socket_addr);
                meta.len = msg.bytes;
                meta.stride = msg.bytes;
                meta.at = clocks.1;
                // Truncated control data (ENOBUFS) leaves the defaults.
                for c in msg.cmsgs().into_iter().flatten() {
                    match c {
                        ControlMessageOwned::UdpGroSegments(size) => {
                            // A zero (never seen) would split nothing; the whole message
                            // then stands as one datagram, as quinn-udp took it.
                            meta.stride = usize::try_from(size)
                                .ok()
                                .filter(|&s| s > 0)
                                .unwrap_or(msg.bytes);
                        }
                        ControlMessageOwned::ScmTimestampns(ts) => {
                            meta.at = arrival(ts, clocks);
                        }
                        _ => {}
                    }
                }
            }
            Ok(n)
        })?;
        let mut datagrams = 0;
        for (meta, buf) in metas.iter().zip(data.chunks(chunk)).take(n) {
            let Some(addr) = meta.addr else { continue };
            for d in buf[..meta.len].chunks(meta.stride.max(1)) {
                datagrams += 1;
                each(addr, meta.at, d);
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
            metas: [Meta::default(); BATCH_SIZE],
        }
    }
}

/// Receive buffers, owned by the endpoint's task.
pub(super) struct RecvBuffers {
    data: Box<[u8]>,
    metas: [Meta; BATCH_SIZE],
}

/// One message read: who sent it, its length, the size of the datagrams coalesced in it,
/// when the kernel received it.
#[derive(Debug, Clone, Copy)]
struct Meta {
    addr: Option<SocketAddr>,
    len: usize,
    stride: usize,
    at: Instant,
}

impl Default for Meta {
    fn default() -> Meta {
        Meta {
            addr: None,
            len: 0,
            stride: 0,
            at: Instant::now(),
        }
    }
}

fn socket_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::V4(SocketAddrV4::from(*v4)));
    }
    a.as_sockaddr_in6()
        .map(|v6| SocketAddr::V6(SocketAddrV6::from(*v6)))
}

/// The kernel's receive time `ts` (the wall clock) on the monotonic clock, by its age at
/// `clocks` (wall, monotonic, read together); the reading's own time when the age is
/// negative or over [`STALE`], as after a step of the wall clock.
fn arrival(ts: TimeSpec, clocks: (SystemTime, Instant)) -> Instant {
    let at = SystemTime::UNIX_EPOCH + Duration::from(ts);
    match clocks.0.duration_since(at) {
        Ok(age) if age <= STALE => clocks.1.checked_sub(age).unwrap_or(clocks.1),
        _ => clocks.1,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receive_time_is_its_age_before_the_reading() {
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mono = Instant::now() + Duration::from_secs(10);
        let ago =
            |d: Duration| TimeSpec::from(wall.duration_since(SystemTime::UNIX_EPOCH).unwrap() - d);
        let ms = Duration::from_millis;
        assert_eq!(arrival(ago(ms(5)), (wall, mono)), mono - ms(5));
        // From the future, or older than a clock step explains: the reading's time.
        assert_eq!(
            arrival(
                TimeSpec::from(Duration::from_secs(1_800_000_001)),
                (wall, mono)
            ),
            mono
        );
        assert_eq!(arrival(ago(ms(1_500)), (wall, mono)), mono);
    }

    #[tokio::test]
    async fn datagrams_read_together_keep_the_times_they_arrived() {
        let std_socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        std_socket.set_nonblocking(true).unwrap();
        let batching = Batching::new(&std_socket).unwrap();
        let socket = UdpSocket::from_std(std_socket).unwrap();
        let to = socket.local_addr().unwrap();
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut bufs = batching.buffers();
        // The kernel turns receive timestamps on through deferred work, so the first
        // datagrams after the option may be stamped only when read: a few tries.
        let mut gaps = Vec::new();
        for _ in 0..5 {
            peer.send_to(b"first", to).unwrap();
            std::thread::sleep(Duration::from_millis(30));
            peer.send_to(b"second", to).unwrap();
            std::thread::sleep(Duration::from_millis(5));
            socket.readable().await.unwrap();
            let mut got = Vec::new();
            let n = batching
                .recv(&socket, &mut bufs, |from, at, d| {
                    got.push((from, at, d.to_vec()))
                })
                .unwrap();
            assert_eq!(n, 2, "both datagrams in one read");
            assert_eq!(got[0].0, peer.local_addr().unwrap());
            assert_eq!(
                (got[0].2.as_slice(), got[1].2.as_slice()),
                (&b"first"[..], &b"second"[..])
            );
            gaps.push(got[1].1.duration_since(got[0].1));
            if gaps.last().is_some_and(|&g| g >= Duration::from_millis(25)) {
                return;
            }
        }
        panic!("read in one call, sent 30 ms apart, timed {gaps:?} apart");
    }

    #[tokio::test]
    async fn coalesced_datagrams_split_on_every_read_not_only_the_first() {
        let open = || {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.set_nonblocking(true).unwrap();
            let b = Batching::new(&s).unwrap();
            (b, UdpSocket::from_std(s).unwrap())
        };
        let (rx_batching, rx) = open();
        let (tx_batching, tx) = open();
        let to = rx.local_addr().unwrap();
        let most = tx_batching.max_segments().min(8);
        let mut bufs = rx_batching.buffers();
        // A lone datagram first (no GRO message), then coalesced ones: a header the first
        // read shortened would cut their segment size off.
        for round in 0..3u8 {
            let segments = if round == 0 { 1 } else { most };
            let contents: Vec<u8> = (0..segments * 100)
                .map(|i| (i / 100) as u8 + round)
                .collect();
            tx.writable().await.unwrap();
            tx_batching.send(&tx, to, &contents, 100).unwrap();
            let mut got = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(2), async {
                while got.len() < segments {
                    rx.readable().await.unwrap();
                    match rx_batching.recv(&rx, &mut bufs, |_, _, d| got.push(d.to_vec())) {
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            })
            .await;
            assert_eq!(
                got.len(),
                segments,
                "round {round}: {:?}",
                got.iter().map(Vec::len).collect::<Vec<_>>()
            );
            for (i, d) in got.iter().enumerate() {
                assert_eq!(
                    d.as_slice(),
                    &[i as u8 + round; 100][..],
                    "round {round} datagram {i}"
                );
            }
        }
    }
}
