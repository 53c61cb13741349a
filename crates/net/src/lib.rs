//! Data-channel drivers and stacks, listeners in port ranges, socket tuning.
//!
//! A data connection is built from a [`StackSpec`] (Globus XIO's driver stack): a transport at
//! the bottom (TCP today; UDT and QUIC come later) under optional layers (TLS for DCAU/PROT).
//! The server admits only the drivers on its whitelist.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod conn;
mod error;
mod listener;
mod tls;
mod tuning;

pub use conn::{connect, DataConn, DetachedConn};
pub use error::NetError;
pub use listener::{bind_listener, DataListener, PortRange};
pub use tls::DataProtection;
pub use tuning::SocketTuning;

/// Whether this build has a data-channel driver of this name: the transport `tcp`, and `gsi`,
/// the layer DCAU and PROT put on a connection (globus-url-copy names it in the stacks it
/// sends, e.g. `SITE SETNETSTACK tcp,gsi`).
pub fn driver_exists(name: &str) -> bool {
    matches!(name, "tcp" | "gsi")
}
