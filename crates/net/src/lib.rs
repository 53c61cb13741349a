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
mod stack;
mod tls;
mod tuning;

pub use conn::{connect, DataConn, DetachedConn};
pub use error::NetError;
pub use listener::{bind_listener, DataListener, PortRange};
pub use stack::{DriverSpec, StackSpec, Whitelist};
pub use tls::DataProtection;
pub use tuning::SocketTuning;
