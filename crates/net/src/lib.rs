//! Data-channel drivers and stacks, listeners in port ranges, socket tuning.
//!
//! A data connection is built from a net stack (Globus XIO's driver stack,
//! `ferry_proto::stack::StackSpec`): a [`Transport`] from the [`Transports`] registry at the
//! bottom (TCP and QUIC today; UDT comes later) under the GSI layer that DCAU/PROT add. The
//! server admits only the drivers on its whitelist.
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod conn;
mod error;
mod link;
mod listener;
mod tcpinfo;
mod tls;
mod transport;
mod tuning;

pub use conn::{connect, connect_tcp, DataConn, DetachedConn};
pub use error::NetError;
pub use link::{EstablishFuture, Established, TransportStream};
pub use listener::{bind_listener, DataListener, PortRange, TransportListener};
pub use tcpinfo::TcpStats;
pub use tls::DataProtection;
pub use transport::{Bind, ConnectFuture, Dial, Transport, Transports, GSI_LAYER};
pub use tuning::{autotune_max, Congestion, SocketTuning};
