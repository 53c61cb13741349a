//! UDT4 packets on the wire: a 16-byte header of big-endian words, then the data or the
//! control information (also big-endian words; data bytes go as they are).

use crate::error::PacketError;
use crate::handshake::Handshake;

/// Bytes of every packet's header.
pub const HEADER: usize = 16;
/// IP and UDP headers, which libudt counts in its MSS.
pub const IP_UDP: usize = 28;

/// The message word ferry writes on every data packet: a whole message (both boundary bits),
/// not in order, number 1. libudt's stream receiver ignores it.
pub const SOLO_MESSAGE: u32 = 0xC000_0001;

/// A parsed packet; data borrows from the datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet<'a> {
    /// Payload with its sequence number.
    Data {
        /// The 31-bit sequence number.
        seq: u32,
        /// Boundary, order and message number.
        message: u32,
        /// Microseconds since the sender's connection started.
        timestamp: u32,
        /// The receiving socket's id.
        dst: u32,
        /// The bytes.
        payload: &'a [u8],
    },
    /// A control packet.
    Control {
        /// Microseconds since the sender's connection started.
        timestamp: u32,
        /// The receiving socket's id (0: a listener).
        dst: u32,
        /// What it says.
        body: Control,
    },
}

/// What a control packet says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Connection set-up (type 0).
    Handshake(Handshake),
    /// Still here (type 1).
    KeepAlive,
    /// Everything before `ack` arrived (type 2); `number` is 0 on a light ACK.
    Ack(Ack),
    /// Sequence numbers lost, ranges with the high bit on their first word (type 3).
    Nak(Vec<u32>),
    /// Delay is rising (type 4); libudt slows down by 1/8.
    CongestionWarning,
    /// The peer closed (type 5).
    Shutdown,
    /// ACK `number` arrived (type 6), for the receiver's RTT.
    Ack2 {
        /// The ACK's own number.
        number: u32,
    },
    /// A message the sender gave up on (type 7): never sent in stream mode.
    DropRequest {
        /// Message number.
        message: u32,
        /// First and last sequence number of it.
        first: u32,
        /// Last sequence number.
        last: u32,
    },
    /// The peer's application failed (type 8), e.g. its disk.
    PeerError {
        /// libudt's code (4000: file error).
        code: u32,
    },
    /// Types this core does not use (0x7FFF user-defined, unknown types): ignored.
    Other {
        /// The 15-bit type.
        kind: u16,
    },
}

/// An acknowledgement. A light ACK (every 64 packets) carries only `ack`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ack {
    /// The ACK's number, echoed by ACK2 (0 on a light ACK).
    pub number: u32,
    /// The first sequence number not received.
    pub ack: u32,
    /// The full form's fields, absent on a light ACK.
    pub full: Option<AckInfo>,
}

/// The receiver's measurements in a full ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckInfo {
    /// Round-trip time, microseconds.
    pub rtt: u32,
    /// Its variance, microseconds.
    pub rtt_var: u32,
    /// Free receive buffer, packets.
    pub available: u32,
    /// Packets per second arriving, when measured (every SYN interval).
    pub receive_rate: Option<u32>,
    /// Link capacity from packet pairs, packets per second, sent with `receive_rate`.
    pub bandwidth: Option<u32>,
    /// ferry's extension, a seventh word after the rates: packets per second counted over the
    /// ACK interval. libudt reads six words of an ACK and ignores the rest (core.cpp,
    /// `processCtrl`), and never sends it.
    pub counted_rate: Option<u32>,
}

fn word(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}

fn words(b: &[u8]) -> impl Iterator<Item = u32> + '_ {
    b.chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
}

impl<'a> Packet<'a> {
    /// Parses one datagram.
    pub fn parse(datagram: &'a [u8]) -> Result<Packet<'a>, PacketError> {
        if datagram.len() < HEADER {
            return Err(PacketError::Short(datagram.len()));
        }
        let (w0, w1, timestamp, dst) = (
            word(datagram, 0),
            word(datagram, 1),
            word(datagram, 2),
            word(datagram, 3),
        );
        let rest = &datagram[HEADER..];
        if w0 & 0x8000_0000 == 0 {
            return Ok(Packet::Data {
                seq: w0,
                message: w1,
                timestamp,
                dst,
                payload: rest,
            });
        }
        let kind = ((w0 >> 16) & 0x7FFF) as u16;
        let body = match kind {
            0 => Control::Handshake(Handshake::parse(rest)?),
            1 => Control::KeepAlive,
            2 => Control::Ack(parse_ack(w1, rest)?),
            3 => {
                if rest.is_empty() || rest.len() % 4 != 0 {
                    return Err(PacketError::BadLength {
                        kind,
                        len: rest.len(),
                    });
                }
                Control::Nak(words(rest).collect())
            }
            4 => Control::CongestionWarning,
            5 => Control::Shutdown,
            6 => Control::Ack2 { number: w1 },
            7 => {
                if rest.len() < 8 {
                    return Err(PacketError::BadLength {
                        kind,
                        len: rest.len(),
                    });
                }
                Control::DropRequest {
                    message: w1,
                    first: word(rest, 0),
                    last: word(rest, 1),
                }
            }
            8 => Control::PeerError { code: w1 },
            other => Control::Other { kind: other },
        };
        Ok(Packet::Control {
            timestamp,
            dst,
            body,
        })
    }
}

fn parse_ack(number: u32, rest: &[u8]) -> Result<Ack, PacketError> {
    let bad = || PacketError::BadLength {
        kind: 2,
        len: rest.len(),
    };
    match rest.len() {
        4 => Ok(Ack {
            number: 0,
            ack: word(rest, 0),
            full: None,
        }),
        n if n >= 16 && n % 4 == 0 => {
            let rates = n >= 24;
            Ok(Ack {
                number,
                ack: word(rest, 0),
                full: Some(AckInfo {
                    rtt: word(rest, 1),
                    rtt_var: word(rest, 2),
                    available: word(rest, 3),
                    receive_rate: rates.then(|| word(rest, 4)),
                    bandwidth: rates.then(|| word(rest, 5)),
                    counted_rate: (n >= 28).then(|| word(rest, 6)),
                }),
            })
        }
        _ => Err(bad()),
    }
}

/// Writes a data packet's header into `out[..HEADER]`; the payload follows it.
pub fn write_data_header(out: &mut [u8], seq: u32, timestamp: u32, dst: u32) {
    out[0..4].copy_from_slice(&(seq & crate::seq::MAX_SEQ).to_be_bytes());
    out[4..8].copy_from_slice(&SOLO_MESSAGE.to_be_bytes());
    out[8..12].copy_from_slice(&timestamp.to_be_bytes());
    out[12..16].copy_from_slice(&dst.to_be_bytes());
}

/// Words appended after a header.
struct Words<'a> {
    out: &'a mut [u8],
    n: usize,
}

impl Words<'_> {
    fn put(&mut self, w: u32) {
        self.out[self.n..self.n + 4].copy_from_slice(&w.to_be_bytes());
        self.n += 4;
    }
}

/// Writes a control packet into `out`, returning its length. `out` holds at least an MSS.
pub fn write_control(out: &mut [u8], timestamp: u32, dst: u32, body: &Control) -> usize {
    let mut w = Words { out, n: HEADER };
    let (kind, info) = match body {
        Control::Handshake(hs) => {
            hs.words().into_iter().for_each(|x| w.put(x));
            (0, 0)
        }
        Control::KeepAlive => (1, 0),
        Control::Ack(a) => {
            w.put(a.ack);
            if let Some(f) = a.full {
                [f.rtt, f.rtt_var, f.available]
                    .into_iter()
                    .for_each(|x| w.put(x));
                if let (Some(r), Some(b)) = (f.receive_rate, f.bandwidth) {
                    w.put(r);
                    w.put(b);
                    if let Some(c) = f.counted_rate {
                        w.put(c);
                    }
                }
            }
            (2, a.number)
        }
        Control::Nak(list) => {
            list.iter().for_each(|&x| w.put(x));
            (3, 0)
        }
        Control::CongestionWarning => (4, 0),
        Control::Shutdown => (5, 0),
        Control::Ack2 { number } => (6, *number),
        Control::DropRequest {
            message,
            first,
            last,
        } => {
            w.put(*first);
            w.put(*last);
            (7, *message)
        }
        Control::PeerError { code } => (8, *code),
        Control::Other { kind } => (*kind, 0),
    };
    // libudt always sends at least one word of control information (writev needs two parts).
    if w.n == HEADER {
        w.put(0);
    }
    let n = w.n;
    out[0..4].copy_from_slice(&(0x8000_0000 | u32::from(kind) << 16).to_be_bytes());
    out[4..8].copy_from_slice(&info.to_be_bytes());
    out[8..12].copy_from_slice(&timestamp.to_be_bytes());
    out[12..16].copy_from_slice(&dst.to_be_bytes());
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(body: Control) {
        let mut buf = [0u8; 1500];
        let n = write_control(&mut buf, 77, 9, &body);
        let parsed = Packet::parse(&buf[..n]).unwrap();
        assert_eq!(
            parsed,
            Packet::Control {
                timestamp: 77,
                dst: 9,
                body
            }
        );
    }

    #[test]
    fn control_packets_round_trip() {
        round_trip(Control::KeepAlive);
        round_trip(Control::Shutdown);
        round_trip(Control::Ack2 { number: 3 });
        round_trip(Control::Nak(vec![0x8000_0005, 9, 12]));
        round_trip(Control::Ack(Ack {
            number: 0,
            ack: 42,
            full: None,
        }));
        // libudt's six words, and ferry's seventh after them.
        for counted_rate in [None, Some(900)] {
            round_trip(Control::Ack(Ack {
                number: 8,
                ack: 42,
                full: Some(AckInfo {
                    rtt: 100,
                    rtt_var: 50,
                    available: 8000,
                    receive_rate: Some(1000),
                    bandwidth: Some(2000),
                    counted_rate,
                }),
            }));
        }
        round_trip(Control::PeerError { code: 4000 });
    }

    #[test]
    fn a_keep_alive_is_libudts_twenty_bytes() {
        let mut buf = [0u8; 64];
        let n = write_control(&mut buf, 1, 2, &Control::KeepAlive);
        assert_eq!(n, 20);
        assert_eq!(&buf[..4], &[0x80, 0x01, 0, 0]);
    }

    #[test]
    fn short_and_misshapen_packets_are_refused() {
        assert!(Packet::parse(&[0; 15]).is_err());
        let mut buf = [0u8; 64];
        let n = write_control(&mut buf, 1, 2, &Control::Nak(vec![1]));
        assert!(Packet::parse(&buf[..n - 2]).is_err());
        let n = write_control(&mut buf, 1, 2, &Control::Ack2 { number: 1 });
        buf[1] = 2; // an ACK with one word of 4 bytes is light: fine; with 8 it is not
        assert!(Packet::parse(&buf[..n + 4]).is_err());
    }

    proptest! {
        #[test]
        fn any_datagram_parses_or_is_refused(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Packet::parse(&bytes);
        }
    }
}
