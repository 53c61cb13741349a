//! What goes wrong.

/// A datagram that is not a UDT packet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PacketError {
    /// Shorter than a header.
    #[error("a UDT packet needs 16 bytes of header, got {0}")]
    Short(usize),
    /// Control information of the wrong size for its type.
    #[error("UDT control packet type {kind} with {len} bytes of information")]
    BadLength {
        /// The control type.
        kind: u16,
        /// Bytes after the header.
        len: usize,
    },
}

/// Why a connection ended other than by both sides closing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnError {
    /// The listener refused (libudt's 1002: another UDT version or socket type).
    #[error("the UDT peer refused the connection")]
    Refused,
    /// No answer to the handshake.
    #[error("no UDT handshake answer in {0} s")]
    HandshakeTimeout(u64),
    /// The listener answered with another ISN than ours: not our connection.
    #[error("the UDT peer answered with a foreign sequence number")]
    ForeignAnswer,
    /// Nothing heard from the peer for too long.
    #[error("the UDT peer fell silent ({0} s without a packet)")]
    PeerSilent(u64),
    /// The peer closed while data was still owed in one direction.
    #[error("the UDT peer closed the connection with {0}")]
    PeerClosed(&'static str),
    /// The peer signalled an error of its application (libudt 4000: its file failed).
    #[error("the UDT peer reported error {0}")]
    PeerError(u32),
    /// This side gave up: closed with data unsent, or aborted.
    #[error("the UDT connection was aborted: {0}")]
    Aborted(&'static str),
}
