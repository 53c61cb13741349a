//! `112-Perf Marker` multi-line replies.

use crate::reply::Reply;

/// One performance sample of one stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerfMarker {
    /// Unix time in tenths of a second (formatted `sec.tenth`).
    pub timestamp_tenths: u64,
    /// Index of the stripe this sample is for.
    pub stripe_index: u32,
    /// Bytes the stripe has moved so far.
    pub stripe_bytes: u64,
    /// Number of stripes in the transfer.
    pub total_stripes: u32,
}

impl PerfMarker {
    /// The 112 multi-line reply in the Globus server's exact format (ends `112 End.`).
    pub fn to_reply(&self) -> Reply {
        todo!()
    }

    /// Reads a 112 reply (accepts `112 End` with or without the period); `None` if malformed.
    pub fn from_reply(reply: &Reply) -> Option<PerfMarker> {
        let _ = reply;
        todo!()
    }
}
