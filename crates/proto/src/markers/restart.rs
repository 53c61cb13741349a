//! `111 Range Marker a-b,c-d`.

use crate::ranges::RangeSet;
use crate::reply::Reply;

/// Ranges the receiver has written since the last marker (end exclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartMarker(pub RangeSet);

/// The text before the range list.
const PREFIX: &str = "Range Marker";

impl RestartMarker {
    /// The single-line 111 reply; `None` for an empty set (never sent empty).
    pub fn to_reply(&self) -> Option<Reply> {
        if self.0.is_empty() {
            return None;
        }
        Some(Reply::new(111, format!("{PREFIX} {}", self.0)))
    }

    /// Reads a 111 reply; `None` if it is not a range marker (or carries no range).
    pub fn from_reply(reply: &Reply) -> Option<RestartMarker> {
        if reply.code != 111 {
            return None;
        }
        let text = reply.lines.first()?.trim_start();
        let list = text.strip_prefix(PREFIX)?;
        if !list.starts_with(' ') {
            return None;
        }
        let ranges = RangeSet::parse(list).ok()?;
        (!ranges.is_empty()).then_some(RestartMarker(ranges))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_marker_is_a_single_111_line() {
        let mut set = RangeSet::from_range(20, 30);
        set.insert(0, 10);
        let reply = RestartMarker(set.clone()).to_reply().expect("non-empty");
        assert_eq!(reply.to_bytes(), b"111 Range Marker 0-10,20-30\r\n");
        assert_eq!(RestartMarker::from_reply(&reply), Some(RestartMarker(set)));
    }

    #[test]
    fn empty_restart_marker_is_never_sent() {
        assert_eq!(RestartMarker(RangeSet::new()).to_reply(), None);
    }

    #[test]
    fn other_replies_are_not_restart_markers() {
        assert_eq!(
            RestartMarker::from_reply(&Reply::new(112, "Range Marker 0-1")),
            None
        );
        assert_eq!(
            RestartMarker::from_reply(&Reply::new(111, "Range Markers 0-1")),
            None
        );
        assert_eq!(
            RestartMarker::from_reply(&Reply::new(111, "Range Marker x-1")),
            None
        );
        assert_eq!(
            RestartMarker::from_reply(&Reply::new(111, "Range Marker 5-5")),
            None
        );
    }
}
