//! The GridFTP client: a control-channel client and two-party transfers that run the same DTP
//! as the server. (`ferry copy` and the transfer planner build on this.)
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod control;
mod error;
mod transfer;

pub use control::ControlClient;
pub use error::ClientError;
pub use transfer::{get, put, TransferOptions};
