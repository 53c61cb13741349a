//! UDT4 without I/O: the protocol libudt 4.11 speaks (and Globus' UDT driver through it),
//! as a state machine fed datagrams and time, in the manner of quinn-proto.
//!
//! - [`packet`]: the wire format; [`handshake`]: connection set-up and SYN cookies;
//! - [`Connection`]: reliability (ACK, light ACK, ACK2, NAK, retransmission), keep-alive,
//!   shutdown and timers;
//! - [`cc`]: congestion control behind a trait: libudt's own CUDTCC, and ferry's model-based
//!   controller that does not take random loss for congestion.
//!
//! The tokio driver lives in `ferry-net` (transport `udt`).

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod cc;
mod conn;
mod error;
pub mod handshake;
pub mod packet;
pub mod seq;
mod stats;

pub use conn::{Config, Connection, ReadOutcome, Stats, MAX_RECEIVE_BUFFER, SYN};
pub use error::{ConnError, PacketError};
