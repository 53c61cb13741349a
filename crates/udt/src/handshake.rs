//! The handshake: its 48 bytes, and the listener's SYN cookie.
//!
//! A client sends a request (type 1) to socket id 0; the listener answers with the same
//! handshake carrying a cookie; the client repeats it as type -1 with the cookie; the listener
//! then makes the connection and answers with its own handshake (type -1), whose ISN must be
//! the client's. libudt keeps no state for an unanswered request, nor does ferry.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::error::PacketError;

/// The only UDT version there is.
pub const VERSION: u32 = 4;
/// `SOCK_STREAM`: a byte stream, what GridFTP uses.
pub const STREAM: u32 = 1;
/// A first request, or the listener's cookie answer to one.
pub const REQUEST: i32 = 1;
/// A request repeated with its cookie, or the listener's acceptance.
pub const RESPONSE: i32 = -1;
/// libudt's refusal (version or socket type mismatch).
pub const REFUSED: i32 = 1002;
/// How long a cookie stays good (libudt: the current and the previous minute).
const COOKIE_PERIOD: Duration = Duration::from_secs(60);

/// The handshake's control information, as libudt lays it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Handshake {
    /// UDT version (4).
    pub version: u32,
    /// Socket type (1: stream).
    pub socket_type: u32,
    /// Initial sequence number; both directions of a connection start from the client's.
    pub isn: u32,
    /// Largest packet, IP and UDP headers included.
    pub mss: u32,
    /// Flow window: packets the sender of this handshake can take in flight.
    pub flight_flag: u32,
    /// 1, -1, 1002 … (see the constants).
    pub request_type: i32,
    /// The sender's socket id.
    pub id: u32,
    /// The listener's SYN cookie.
    pub cookie: u32,
    /// The address the sender sees its peer at, in libudt's word order.
    pub peer_ip: [u32; 4],
}

impl Handshake {
    /// Bytes of control information.
    pub const SIZE: usize = 48;

    pub(crate) fn parse(b: &[u8]) -> Result<Handshake, PacketError> {
        if b.len() < Self::SIZE {
            return Err(PacketError::BadLength {
                kind: 0,
                len: b.len(),
            });
        }
        let w = |i: usize| u32::from_be_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
        Ok(Handshake {
            version: w(0),
            socket_type: w(1),
            isn: w(2),
            mss: w(3),
            flight_flag: w(4),
            request_type: w(5) as i32,
            id: w(6),
            cookie: w(7),
            peer_ip: [w(8), w(9), w(10), w(11)],
        })
    }

    pub(crate) fn words(&self) -> [u32; 12] {
        let ip = self.peer_ip;
        [
            self.version,
            self.socket_type,
            self.isn,
            self.mss,
            self.flight_flag,
            self.request_type as u32,
            self.id,
            self.cookie,
            ip[0],
            ip[1],
            ip[2],
            ip[3],
        ]
    }
}

/// An address as libudt writes it into a handshake: each group of four bytes read as a
/// little-endian word (it copies `s_addr` as a host integer), then sent big-endian.
pub fn ip_words(ip: IpAddr) -> [u32; 4] {
    let mut out = [0u32; 4];
    match ip {
        IpAddr::V4(v4) => out[0] = u32::from_le_bytes(v4.octets()),
        IpAddr::V6(v6) => {
            for (w, c) in out.iter_mut().zip(v6.octets().chunks_exact(4)) {
                *w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
    }
    out
}

/// What a listener does with a handshake addressed to socket id 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listening {
    /// Send this back (to the request's socket id): a cookie, or a refusal.
    Reply(Handshake),
    /// A request with a good cookie: make (or find) the connection it asks for.
    Accept(Handshake),
    /// A bad cookie, a wrong size or type: say nothing.
    Ignore,
}

/// The stateless half of a listening socket: cookies and the checks before a connection.
#[derive(Debug, Clone)]
pub struct CookieJar {
    secret: [u8; 32],
    start: Instant,
}

impl CookieJar {
    /// A jar with a fresh random secret.
    pub fn new(now: Instant) -> CookieJar {
        CookieJar {
            secret: rand::random(),
            start: now,
        }
    }

    fn cookie(&self, peer: SocketAddr, period: u64) -> u32 {
        let mut h = Sha256::new();
        h.update(self.secret);
        h.update(peer.to_string().as_bytes());
        h.update(period.to_be_bytes());
        let d = h.finalize();
        u32::from_be_bytes([d[0], d[1], d[2], d[3]])
    }

    /// Answers a handshake from `peer` to the listening socket.
    pub fn handle(&self, now: Instant, peer: SocketAddr, hs: &Handshake) -> Listening {
        let period = now.duration_since(self.start).as_secs() / COOKIE_PERIOD.as_secs();
        if hs.request_type == REQUEST {
            return Listening::Reply(Handshake {
                cookie: self.cookie(peer, period),
                ..*hs
            });
        }
        let good = hs.cookie == self.cookie(peer, period)
            || (period > 0 && hs.cookie == self.cookie(peer, period - 1));
        if !good || hs.request_type != RESPONSE {
            return Listening::Ignore;
        }
        if hs.version != VERSION || hs.socket_type != STREAM {
            return Listening::Reply(Handshake {
                request_type: REFUSED,
                ..*hs
            });
        }
        Listening::Accept(*hs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Handshake {
        Handshake {
            version: VERSION,
            socket_type: STREAM,
            isn: 1234,
            mss: 1500,
            flight_flag: 25600,
            request_type: REQUEST,
            id: 77,
            cookie: 0,
            peer_ip: ip_words("127.0.0.1".parse().unwrap()),
        }
    }

    #[test]
    fn a_request_gets_a_cookie_and_only_the_cookie_opens() {
        let now = Instant::now();
        let jar = CookieJar::new(now);
        let peer: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let Listening::Reply(answer) = jar.handle(now, peer, &request()) else {
            panic!("no cookie");
        };
        let mut again = Handshake {
            request_type: RESPONSE,
            ..answer
        };
        assert_eq!(jar.handle(now, peer, &again), Listening::Accept(again));
        let elsewhere: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        assert_eq!(jar.handle(now, elsewhere, &again), Listening::Ignore);
        assert_eq!(
            jar.handle(now + Duration::from_secs(90), peer, &again),
            Listening::Accept(again)
        );
        assert_eq!(
            jar.handle(now + Duration::from_secs(150), peer, &again),
            Listening::Ignore
        );
        again.socket_type = 2;
        assert!(matches!(
            jar.handle(now, peer, &again),
            Listening::Reply(Handshake {
                request_type: REFUSED,
                ..
            })
        ));
    }

    #[test]
    fn addresses_are_written_as_libudt_writes_them() {
        assert_eq!(
            ip_words("10.0.0.1".parse().unwrap()),
            [0x0100_000a, 0, 0, 0]
        );
        assert_eq!(ip_words("::1".parse().unwrap())[3], 0x0100_0000);
    }
}
