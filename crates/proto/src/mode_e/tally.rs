//! Receiver-side bookkeeping: ranges received and EOD counts across many connections.
//!
//! Each connection task keeps its own [`ConnectionTally`] (no lock per block); the transfer
//! merges them into a [`TransferTally`], which knows when the transfer is complete.

use crate::ranges::RangeSet;

#[cfg(test)]
mod tests;

/// What one connection has received during one transfer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectionTally {
    /// Byte ranges received and written.
    pub ranges: RangeSet,
    /// Payload bytes received (counts duplicates).
    pub bytes: u64,
    /// EOD blocks seen (0 or 1 per connection per transfer).
    pub eods: u64,
    /// EOD count announced by an EOF block, if this connection carried it.
    pub eof_count: Option<u64>,
}

impl ConnectionTally {
    /// Records a data block written at `[offset, offset + len)`.
    pub fn record_data(&mut self, offset: u64, len: u64) {
        self.ranges.insert(offset, offset.saturating_add(len));
        self.bytes = self.bytes.saturating_add(len);
    }

    /// Records an EOD (and, if the header had EOF, the announced count).
    pub fn record_eod(&mut self, eof_count: Option<u64>) {
        self.eods += 1;
        if eof_count.is_some() {
            self.eof_count = eof_count;
        }
    }

    /// Takes the ranges recorded since the last call (for incremental restart markers).
    pub fn take_ranges(&mut self) -> RangeSet {
        std::mem::take(&mut self.ranges)
    }
}

/// The whole transfer's view, merged from its connections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransferTally {
    /// All ranges received.
    pub ranges: RangeSet,
    /// Payload bytes received.
    pub bytes: u64,
    /// EODs received over all connections.
    pub eods: u64,
    /// The EOD count the sender announced (from its EOF block).
    pub expected_eods: Option<u64>,
}

/// Inconsistent EOF announcements.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("EOF blocks announce different EOD counts: {first} and {second}")]
pub struct TallyConflict {
    /// Count seen first.
    pub first: u64,
    /// Conflicting count.
    pub second: u64,
}

impl TransferTally {
    /// Merges one connection's tally.
    ///
    /// Counts add up, so merge each tally once (or merge deltas, e.g. after
    /// [`ConnectionTally::take_ranges`]). On a conflict nothing is merged.
    pub fn merge(&mut self, conn: &ConnectionTally) -> Result<(), TallyConflict> {
        if let (Some(first), Some(second)) = (self.expected_eods, conn.eof_count) {
            if first != second {
                return Err(TallyConflict { first, second });
            }
        }
        self.ranges.merge(&conn.ranges);
        self.bytes = self.bytes.saturating_add(conn.bytes);
        self.eods = self.eods.saturating_add(conn.eods);
        if conn.eof_count.is_some() {
            self.expected_eods = conn.eof_count;
        }
        Ok(())
    }

    /// Whether EOF has been reached: an EOF block was seen and as many EODs as it announced.
    pub fn is_complete(&self) -> bool {
        self.expected_eods.is_some_and(|n| self.eods >= n)
    }

    /// Whether more EODs arrived than announced (a protocol error).
    pub fn is_overrun(&self) -> bool {
        self.expected_eods.is_some_and(|n| self.eods > n)
    }
}
