//! The ferry GridFTP server: configuration, the accept loop, PI sessions and their in-process
//! DTPs, authentication and the transfer log.
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod accounts;
pub mod auth;
pub mod config;
mod daemon;
mod gsi;
mod metrics;
mod multicast;
mod prepare;
mod reload;
mod session;
mod striped;
mod translog;

pub use config::ServerConfig;
pub use daemon::{Drivers, Server, StartError};
pub use prepare::ConfigReport;
pub use reload::{Reloaded, Reloader};
pub use translog::TransferLogFormat;

/// The version string shown in the banner and `SITE VERSION`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
