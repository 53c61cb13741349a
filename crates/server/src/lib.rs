//! The ferry GridFTP server: configuration, the accept loop, PI sessions and their in-process
//! DTPs, authentication and the transfer log.
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod config;
mod daemon;
mod gsi;
mod https;
mod metrics;
mod multicast;
mod prepare;
mod reload;
mod session;
mod striped;

pub use config::ServerConfig;
pub use daemon::{Drivers, Server, StartError};
pub use ferry_site::passwords as auth;
pub use ferry_site::TransferLogFormat;
pub use prepare::ConfigReport;
pub use reload::{stop_signal, Reloaded, Reloader};

/// The version string shown in the banner and `SITE VERSION`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
