//! The data transfer process (DTP): executes a [`TransferDescription`] (storage → processing →
//! data channel, or back) and reports progress as [`DtpEvent`]s. It never parses FTP.
//!
//! A single-node server runs it in-process beside the PI; a striped frontend will send the same
//! description to remote data nodes. The client uses it for its own end of two-party transfers.
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod ascii;
mod channel;
mod description;
pub mod digest;
pub mod disk_stack;
mod dtp;
mod error;
mod events;
mod listing;
mod memory;
mod mover;
mod polling;
mod pool;
mod receive;
mod relay;
mod send;
mod source;
mod zerocopy;

pub use description::{
    ChannelSecurity, ChannelSetup, Direction, LayoutSpec, ListKind, MarkerIntervals, Section,
    StripeInfo, TransferDescription, TransferSource,
};
pub use dtp::{Dtp, StreamLimits, STREAMS_PER_TRANSFER};
pub use error::DtpError;
pub use events::{DtpEvent, TransferOutcome};
pub use listing::perm_letters;
pub use mover::{DataMover, MoverFuture, PassiveRequest};
pub use polling::PollBudget;
pub use pool::{auto_block_size, BufferPool, IO_CHUNK};
pub use relay::{marker_reply, relay, RelaySink, Relayed, Watch};
