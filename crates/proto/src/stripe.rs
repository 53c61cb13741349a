//! Striping arithmetic (GFD.20 layouts, Globus' `globus_ftp_control_layout`): which receiving
//! stripe owns which bytes, and which sender serves which stripe. Pure functions, no I/O.
//!
//! Stripes are the receiver's addresses in SPAS order (the client passes them unchanged in
//! SPOR). A sending side with M nodes and N receiving stripes gives stripe `r` to node `r mod M`:
//! every receiving stripe then hears from exactly one sender, whose EOF block carries the count
//! of its own connections, so a receiver never has to add up EOD counts from several senders.

use serde::{Deserialize, Serialize};

use crate::ranges::RangeSet;

/// Globus' default stripe block size (`stripe_blocksize`), used when a striped transfer names
/// no layout.
pub const DEFAULT_STRIPE_BLOCK: u64 = 1 << 20;

/// How bytes map to stripes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Layout {
    /// Round robin in blocks: byte `o` belongs to stripe `(o / block) mod N`.
    Blocked {
        /// Block size in bytes (at least 1).
        block: u64,
    },
    /// One contiguous part per stripe: byte `o` belongs to stripe `o / part` (the last stripe
    /// takes what is left).
    Partitioned {
        /// Part size in bytes: the total divided by the stripe count, rounded up.
        part: u64,
    },
}

impl Layout {
    /// The partitioned layout of `total` bytes over `stripes` stripes (part = ⌈total / N⌉, as
    /// the Globus striped server rounds up).
    pub fn partitioned(total: u64, stripes: u32) -> Layout {
        let n = u64::from(stripes.max(1));
        Layout::Partitioned {
            part: total.div_ceil(n).max(1),
        }
    }

    /// The stripe (of `stripes`) that owns byte `offset`.
    pub fn stripe_of(&self, offset: u64, stripes: u32) -> u32 {
        let n = u64::from(stripes.max(1));
        let s = match *self {
            Layout::Blocked { block } => (offset / block.max(1)) % n,
            Layout::Partitioned { part } => (offset / part.max(1)).min(n - 1),
        };
        s as u32
    }

    /// The bytes of `within` that stripe `index` of `stripes` owns.
    pub fn owned(&self, within: &RangeSet, index: u32, stripes: u32) -> RangeSet {
        let n = u64::from(stripes.max(1));
        let i = u64::from(index);
        let mut out = RangeSet::new();
        if i >= n {
            return out;
        }
        for (start, end) in within.iter() {
            match *self {
                Layout::Blocked { block } => {
                    let block = block.max(1);
                    // The first block at or after `start` that stripe i owns, then every n-th.
                    let first = start / block;
                    let Some(mut k) = first.checked_add((i + n - first % n) % n) else {
                        continue;
                    };
                    while k.saturating_mul(block) < end {
                        let a = (k * block).max(start);
                        let b = k.saturating_add(1).saturating_mul(block).min(end);
                        if a < b {
                            out.insert(a, b);
                        }
                        k = match k.checked_add(n) {
                            Some(k) => k,
                            None => break,
                        };
                    }
                }
                Layout::Partitioned { part } => {
                    let part = part.max(1);
                    let a = i.saturating_mul(part);
                    let b = if i + 1 == n {
                        u64::MAX
                    } else {
                        (i + 1).saturating_mul(part)
                    };
                    let (a, b) = (a.max(start), b.min(end));
                    if a < b {
                        out.insert(a, b);
                    }
                }
            }
        }
        out
    }
}

/// The receiving stripes (of `receivers`) that sending node `sender` (of `senders`) serves:
/// stripe `r` goes to node `r mod senders`.
pub fn stripes_of_sender(sender: u32, senders: u32, receivers: u32) -> Vec<u32> {
    let m = senders.max(1);
    (0..receivers).filter(|r| r % m == sender).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn blocked_round_robin_as_globus_marks_it() {
        // The Globus striped receiver's range markers for 3 stripes, 1 MiB blocks.
        let mib = 1 << 20;
        let all = RangeSet::from_range(0, 7 * mib);
        let l = Layout::Blocked { block: mib };
        assert_eq!(
            l.owned(&all, 0, 3).to_string(),
            format!("0-{},{}-{},{}-{}", mib, 3 * mib, 4 * mib, 6 * mib, 7 * mib)
        );
        assert_eq!(l.stripe_of(mib, 3), 1);
        assert_eq!(l.stripe_of(5 * mib + 7, 3), 2);
    }

    #[test]
    fn blocks_at_the_top_of_the_offset_space_are_shared_without_overflow() {
        let top = RangeSet::from_range(u64::MAX - 10, u64::MAX);
        let l = Layout::Blocked { block: 1 };
        let mut all = RangeSet::new();
        for i in 0..3 {
            for (a, b) in l.owned(&top, i, 3).iter() {
                assert!((a..b).all(|o| l.stripe_of(o, 3) == i));
                all.insert(a, b);
            }
        }
        assert_eq!(all, top);
    }

    #[test]
    fn partitioned_rounds_the_part_up_and_the_last_stripe_takes_the_rest() {
        let l = Layout::partitioned(268_435_456, 3);
        assert_eq!(l, Layout::Partitioned { part: 89_478_486 });
        let all = RangeSet::from_range(0, 268_435_456);
        assert_eq!(l.owned(&all, 0, 3).to_string(), "0-89478486");
        assert_eq!(l.owned(&all, 2, 3).to_string(), "178956972-268435456");
    }

    #[test]
    fn senders_share_the_receiving_stripes() {
        assert_eq!(stripes_of_sender(0, 1, 3), vec![0, 1, 2]);
        assert_eq!(stripes_of_sender(1, 2, 3), vec![1]);
        assert_eq!(stripes_of_sender(2, 4, 3), vec![2]);
        assert!(stripes_of_sender(3, 4, 3).is_empty());
    }

    proptest! {
        #[test]
        fn every_byte_belongs_to_exactly_one_stripe(
            ranges in proptest::collection::vec((0u64..10_000, 1u64..3_000), 1..6),
            block in 1u64..700,
            n in 1u32..6,
            partitioned in any::<bool>(),
        ) {
            let mut within = RangeSet::new();
            for (a, len) in ranges {
                within.insert(a, a + len);
            }
            let l = if partitioned {
                Layout::partitioned(13_000, n)
            } else {
                Layout::Blocked { block }
            };
            let mut union = RangeSet::new();
            let mut total = 0;
            for i in 0..n {
                let owned = l.owned(&within, i, n);
                for (a, b) in owned.iter() {
                    prop_assert_eq!(l.stripe_of(a, n), i);
                    prop_assert_eq!(l.stripe_of(b - 1, n), i);
                }
                total += owned.total();
                union.merge(&owned);
            }
            prop_assert_eq!(&union, &within);
            prop_assert_eq!(total, within.total());
        }
    }
}
