//! Byte-range sets: restart markers, REST range lists and receiver bookkeeping.

use std::fmt;

/// A set of half-open byte ranges `[start, end)`, kept sorted, disjoint and coalesced
/// (adjacent ranges merge). Serialises as the wire form `a-b,c-d`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct RangeSet {
    ranges: Vec<(u64, u64)>,
}

/// Why a range list is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RangeError {
    /// Not `a-b[,c-d...]` with decimal numbers.
    #[error("malformed range list")]
    Malformed,
    /// A range whose end is below its start.
    #[error("range end before start")]
    Reversed,
    /// More ranges than a line can reasonably carry (bounded to keep memory bounded).
    #[error("too many ranges")]
    TooMany,
}

/// Most ranges a parsed list may hold.
pub const MAX_PARSED_RANGES: usize = 4096;

impl RangeSet {
    /// The empty set.
    pub fn new() -> RangeSet {
        RangeSet { ranges: Vec::new() }
    }

    /// A set holding one range (empty if `start >= end`).
    pub fn from_range(start: u64, end: u64) -> RangeSet {
        let _ = (start, end);
        todo!()
    }

    /// Adds `[start, end)`, merging with what overlaps or touches it.
    pub fn insert(&mut self, start: u64, end: u64) {
        let _ = (start, end);
        todo!()
    }

    /// Adds every range of `other`.
    pub fn merge(&mut self, other: &RangeSet) {
        let _ = other;
        todo!()
    }

    /// Removes every byte of `other`.
    pub fn subtract(&mut self, other: &RangeSet) {
        let _ = other;
        todo!()
    }

    /// The ranges of `[start, end)` not in this set, in order.
    pub fn complement_within(&self, start: u64, end: u64) -> RangeSet {
        let _ = (start, end);
        todo!()
    }

    /// Whether every byte of `[start, end)` is in the set (true for an empty range).
    pub fn contains_range(&self, start: u64, end: u64) -> bool {
        let _ = (start, end);
        todo!()
    }

    /// Total number of bytes covered.
    pub fn total(&self) -> u64 {
        todo!()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The ranges, sorted and disjoint.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().copied()
    }

    /// Number of disjoint ranges.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Parses `a-b,c-d` (whitespace around items allowed); ranges may overlap or be unordered.
    pub fn parse(s: &str) -> Result<RangeSet, RangeError> {
        let _ = s;
        todo!()
    }

    /// The same set with every offset shifted by `-delta` (saturating at 0), for section-relative
    /// markers (ERET P / ESTO A).
    pub fn shifted_down(&self, delta: u64) -> RangeSet {
        let _ = delta;
        todo!()
    }

    /// The same set with every offset shifted by `+delta` (saturating).
    pub fn shifted_up(&self, delta: u64) -> RangeSet {
        let _ = delta;
        todo!()
    }
}

impl fmt::Display for RangeSet {
    /// The wire form `a-b,c-d` (empty string for the empty set).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let _ = f;
        todo!()
    }
}
