//! Network errors.

use std::io;
use std::net::SocketAddr;

/// What went wrong setting up or using a data channel.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// No port in the configured range could be bound.
    #[error("no free port in range {lo}-{hi}")]
    NoFreePort {
        /// Range start.
        lo: u16,
        /// Range end.
        hi: u16,
    },
    /// Connecting to a data endpoint failed.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Where.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// A stack names a driver this build or this server does not allow.
    #[error("driver '{0}' is not available or not allowed")]
    DriverNotAllowed(String),
    /// The GSI handshake or peer check of a data connection failed (DCAU).
    #[error("data channel authentication failed: {0}")]
    Security(String),
    /// Any other socket error.
    #[error(transparent)]
    Io(#[from] io::Error),
}
