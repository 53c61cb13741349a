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
    /// A stack names a driver this build does not have.
    #[error("{0} driver not available")]
    DriverNotAllowed(String),
    /// A driver refused its options, or sits where it cannot.
    #[error("{driver} driver: {why}")]
    DriverOptions {
        /// The driver.
        driver: String,
        /// What is wrong.
        why: String,
    },
    /// The GSI handshake or peer check of a data connection failed (DCAU).
    #[error("data channel authentication failed: {0}")]
    Security(String),
    /// Any other socket error.
    #[error(transparent)]
    Io(#[from] io::Error),
}
