//! `111 Range Marker a-b,c-d`.

use crate::ranges::RangeSet;
use crate::reply::Reply;

/// Ranges the receiver has written since the last marker (end exclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartMarker(pub RangeSet);

impl RestartMarker {
    /// The single-line 111 reply; `None` for an empty set (never sent empty).
    pub fn to_reply(&self) -> Option<Reply> {
        todo!()
    }

    /// Reads a 111 reply; `None` if it is not a range marker.
    pub fn from_reply(reply: &Reply) -> Option<RestartMarker> {
        let _ = reply;
        todo!()
    }
}
