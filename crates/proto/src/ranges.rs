//! Byte-range sets: restart markers, REST range lists and receiver bookkeeping.

use std::fmt;

#[cfg(test)]
mod tests;

/// A set of half-open byte ranges `[start, end)`, kept sorted, disjoint and coalesced
/// (adjacent ranges merge). Serialises as the wire form `a-b,c-d`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
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
        let mut set = RangeSet::new();
        set.insert(start, end);
        set
    }

    /// Adds `[start, end)`, merging with what overlaps or touches it.
    pub fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        // First range whose end reaches `start` (touching counts), and first range that starts
        // beyond `end`: everything in between merges with the new range.
        let lo = self.ranges.partition_point(|&(_, e)| e < start);
        let hi = self.ranges.partition_point(|&(s, _)| s <= end);
        if lo == hi {
            self.ranges.insert(lo, (start, end));
            return;
        }
        let merged_start = start.min(self.ranges[lo].0);
        let merged_end = end.max(self.ranges[hi - 1].1);
        self.ranges[lo] = (merged_start, merged_end);
        self.ranges.drain(lo + 1..hi);
    }

    /// Adds every range of `other`.
    pub fn merge(&mut self, other: &RangeSet) {
        if other.ranges.len() <= 4 {
            for &(s, e) in &other.ranges {
                self.insert(s, e);
            }
            return;
        }
        let mut all = Vec::with_capacity(self.ranges.len() + other.ranges.len());
        all.extend_from_slice(&self.ranges);
        all.extend_from_slice(&other.ranges);
        *self = RangeSet::from_unsorted(all);
    }

    /// Removes every byte of `other`.
    pub fn subtract(&mut self, other: &RangeSet) {
        if other.is_empty() || self.is_empty() {
            return;
        }
        let mut out = Vec::with_capacity(self.ranges.len());
        let mut cut = other.ranges.iter().copied().peekable();
        for &(mut s, e) in &self.ranges {
            while let Some(&(cs, ce)) = cut.peek() {
                if ce <= s {
                    cut.next();
                    continue;
                }
                if cs >= e {
                    break;
                }
                if cs > s {
                    out.push((s, cs));
                }
                if ce >= e {
                    s = e;
                    break;
                }
                s = ce;
                cut.next();
            }
            if s < e {
                out.push((s, e));
            }
        }
        self.ranges = out;
    }

    /// The ranges of `[start, end)` not in this set, in order.
    pub fn complement_within(&self, start: u64, end: u64) -> RangeSet {
        let mut out = RangeSet::from_range(start, end);
        out.subtract(self);
        out
    }

    /// Whether every byte of `[start, end)` is in the set (true for an empty range).
    pub fn contains_range(&self, start: u64, end: u64) -> bool {
        if start >= end {
            return true;
        }
        let i = self.ranges.partition_point(|&(_, e)| e <= start);
        self.ranges
            .get(i)
            .is_some_and(|&(s, e)| s <= start && end <= e)
    }

    /// Total number of bytes covered.
    pub fn total(&self) -> u64 {
        // Disjoint ranges inside u64 cannot sum past u64::MAX.
        self.ranges.iter().map(|&(s, e)| e - s).sum()
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

    /// The bytes in both `self` and `other`.
    pub fn intersect(&self, other: &RangeSet) -> RangeSet {
        let mut out = Vec::new();
        let (mut a, mut b) = (
            self.ranges.iter().peekable(),
            other.ranges.iter().peekable(),
        );
        while let (Some(&&(s1, e1)), Some(&&(s2, e2))) = (a.peek(), b.peek()) {
            let (s, e) = (s1.max(s2), e1.min(e2));
            if s < e {
                out.push((s, e));
            }
            if e1 <= e2 {
                a.next();
            } else {
                b.next();
            }
        }
        RangeSet { ranges: out }
    }

    /// Parses `a-b,c-d` (whitespace around items allowed); ranges may overlap or be unordered.
    ///
    /// The empty (or all-blank) string is the empty set, so `parse(&set.to_string())` gives
    /// back `set` for every set. Empty ranges such as `5-5` are accepted and ignored.
    pub fn parse(s: &str) -> Result<RangeSet, RangeError> {
        parse_list(s, MAX_PARSED_RANGES)
    }

    /// The same set with every offset shifted by `-delta` (saturating at 0), for section-relative
    /// markers (ERET P / ESTO A).
    pub fn shifted_down(&self, delta: u64) -> RangeSet {
        let shifted = self
            .ranges
            .iter()
            .map(|&(s, e)| (s.saturating_sub(delta), e.saturating_sub(delta)))
            .collect();
        RangeSet::from_unsorted(shifted)
    }

    /// The same set with every offset shifted by `+delta` (saturating).
    pub fn shifted_up(&self, delta: u64) -> RangeSet {
        let shifted = self
            .ranges
            .iter()
            .map(|&(s, e)| (s.saturating_add(delta), e.saturating_add(delta)))
            .collect();
        RangeSet::from_unsorted(shifted)
    }

    /// Builds a normalised set from ranges in any order (empty ones dropped).
    fn from_unsorted(mut ranges: Vec<(u64, u64)>) -> RangeSet {
        ranges.retain(|&(s, e)| s < e);
        ranges.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (s, e) in ranges {
            match out.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => out.push((s, e)),
            }
        }
        RangeSet { ranges: out }
    }
}

/// Parses a range list holding at most `max` items.
fn parse_list(s: &str, max: usize) -> Result<RangeSet, RangeError> {
    if s.trim().is_empty() {
        return Ok(RangeSet::new());
    }
    let mut ranges = Vec::new();
    for item in s.split(',') {
        if ranges.len() == max {
            return Err(RangeError::TooMany);
        }
        let (a, b) = item.split_once('-').ok_or(RangeError::Malformed)?;
        let start = parse_u64(a.trim()).ok_or(RangeError::Malformed)?;
        let end = parse_u64(b.trim()).ok_or(RangeError::Malformed)?;
        if end < start {
            return Err(RangeError::Reversed);
        }
        ranges.push((start, end));
    }
    Ok(RangeSet::from_unsorted(ranges))
}

/// Decimal digits only (no sign, no blanks), within u64.
pub(crate) fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl fmt::Display for RangeSet {
    /// The wire form `a-b,c-d` (empty string for the empty set).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (s, e)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{s}-{e}")?;
        }
        Ok(())
    }
}

impl serde::Serialize for RangeSet {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for RangeSet {
    /// Reads the wire form; unlike [`RangeSet::parse`] it takes any number of ranges, as a
    /// serialised set comes from our own side (a journal, an IPC peer), not from a command line.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<RangeSet, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(deserializer)?;
        parse_list(&text, usize::MAX).map_err(serde::de::Error::custom)
    }
}
