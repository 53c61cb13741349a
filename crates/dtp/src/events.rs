//! What a DTP reports while and after it runs.

use std::time::Duration;

use ferry_proto::RangeSet;
use serde::{Deserialize, Serialize};

/// Progress reported during a transfer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DtpEvent {
    /// The file is open (or the listing made) and the data channel is next: the transfer can
    /// start, so the PI sends its preliminary reply (150 or 125). A transfer that fails before
    /// this event gets its error reply alone, as in Globus.
    Begin,
    /// Wire ranges written to storage since the last restart event (receiving side).
    Restart(RangeSet),
    /// Bytes moved so far by this stripe.
    Perf {
        /// Stripe index.
        stripe_index: u32,
        /// Stripe count.
        stripe_count: u32,
        /// Bytes moved so far.
        bytes: u64,
        /// Unix time in tenths of a second.
        timestamp_tenths: u64,
        /// Lines the disk stack reported since the last marker (see
        /// [`crate::disk_stack::News`]), sent as further lines of this one.
        #[serde(default)]
        news: Vec<String>,
        /// The data connections' round trip, µs, once this end's kernel measured it (see
        /// [`ferry_proto::markers::data_rtt_line`]): the marker says it on a line of its own.
        #[serde(default)]
        data_rtt_us: Option<u32>,
    },
}

/// The result of a completed transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferOutcome {
    /// Payload bytes moved.
    pub bytes: u64,
    /// Data connections used.
    pub streams: u32,
    /// Wall time.
    pub duration: Duration,
    /// Whether cached data connections were reused.
    pub reused: bool,
    /// The checksums the description asked for, taken while the bytes moved (empty when it
    /// asked for none, or when they could not be taken; see
    /// [`crate::TransferDescription::checksums`]).
    pub checksums: Vec<crate::digest::Taken>,
    /// Bytes read back from the file to complete `checksums` (what no stream carried: restart
    /// ranges; for MD5 and the SHAs what followed the in-order start).
    pub checksum_read_back: u64,
    /// What the kernel knew of the data connections' path at the end (`TCP_INFO`, summed over
    /// them): MODE E over TCP only; `None` otherwise.
    pub tcp: Option<ferry_net::TcpStats>,
}
