//! Sans-IO GridFTP protocol core.
//!
//! Everything here turns bytes into typed values and back, with bounded sizes and typed errors:
//! no sockets, no async, no clock reads in the protocol logic (`clock` is the workspace's one
//! seam for the wall clock, for callers to use). The server PI, the client and the fuzz targets
//! all drive it.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod args;
pub mod civil;
pub mod client_pi;
pub mod clock;
pub mod command;
pub mod data_address;
pub mod dirlist;
pub mod frame;
pub mod hostport;
pub mod http;
pub mod line;
pub mod markers;
pub mod mode_e;
pub mod multicast;
pub mod opts;
pub mod ranges;
pub mod reply;
pub mod site;
pub mod stack;
pub mod stripe;

pub use client_pi::ClientPi;
pub use command::{Command, CommandError};
pub use hostport::HostPort;
pub use line::{LineEvent, LineFramer};
pub use markers::{PerfMarker, RestartMarker};
pub use ranges::RangeSet;
pub use reply::{Reply, ReplyParser};
