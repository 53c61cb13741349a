//! The receiver's missing packets, as runs: a gap costs one entry however long it is, so
//! memory follows the packets that arrived, not the sequence numbers a peer names.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Missing packets and when each was last reported.
#[derive(Debug, Default)]
pub(crate) struct LossList {
    /// First packet of each run: its last packet, and when the run was last reported.
    runs: BTreeMap<u64, (u64, Option<Instant>)>,
    /// Packets missing in all.
    missing: u64,
}

impl LossList {
    /// Adds `[from, to]`, reported `at`: a gap found past every packet received, so past
    /// every run held.
    pub(crate) fn push(&mut self, from: u64, to: u64, at: Option<Instant>) {
        debug_assert!(from <= to && self.runs.last_key_value().is_none_or(|(_, r)| r.0 < from));
        self.runs.insert(from, (to, at));
        self.missing += to - from + 1;
    }

    /// Takes packet `count` off the list (it arrived), splitting its run.
    pub(crate) fn remove(&mut self, count: u64) {
        let Some((&from, &(to, at))) = self.runs.range(..=count).next_back() else {
            return;
        };
        if count > to {
            return;
        }
        self.runs.remove(&from);
        if from < count {
            self.runs.insert(from, (count - 1, at));
        }
        if count < to {
            self.runs.insert(count + 1, (to, at));
        }
        self.missing -= 1;
    }

    /// The first packet missing.
    pub(crate) fn first(&self) -> Option<u64> {
        self.runs.keys().next().copied()
    }

    /// Whether no packet is missing.
    pub(crate) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Packets missing.
    pub(crate) fn missing(&self) -> u64 {
        self.missing
    }

    /// Entries held.
    #[cfg(test)]
    pub(crate) fn runs(&self) -> usize {
        self.runs.len()
    }

    /// The first `limit` packets not reported within `interval`, as runs in order; they count
    /// as reported `now`. A run only partly taken is split, its tail keeping its time.
    pub(crate) fn overdue(
        &mut self,
        now: Instant,
        interval: Duration,
        limit: u64,
    ) -> Vec<(u64, u64)> {
        let mut due = Vec::new();
        let mut left = limit;
        let mut tail = None;
        for (&from, (to, last)) in self.runs.iter_mut() {
            if left == 0 {
                break;
            }
            if last.is_some_and(|t| now.duration_since(t) < interval) {
                continue;
            }
            if *to - from + 1 > left {
                tail = Some((from + left, (*to, *last)));
                *to = from + left - 1;
            }
            *last = Some(now);
            left -= *to - from + 1;
            due.push((from, *to));
        }
        if let Some((from, run)) = tail {
            self.runs.insert(from, run);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// What the list replaced: one entry per missing packet.
    #[derive(Default)]
    struct EachPacket(BTreeMap<u64, Option<Instant>>);

    impl EachPacket {
        fn overdue(&mut self, now: Instant, interval: Duration, limit: u64) -> Vec<u64> {
            let mut due = Vec::new();
            for (&count, last) in self.0.iter_mut() {
                if due.len() as u64 >= limit {
                    break;
                }
                if last.is_none_or(|t| now.duration_since(t) >= interval) {
                    *last = Some(now);
                    due.push(count);
                }
            }
            due
        }
    }

    #[derive(Debug, Clone)]
    enum Step {
        Gap { skip: u64, len: u64, reported: bool },
        Arrive(u64),
        Report { later_ms: u64, limit: u64 },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u64..5, 1u64..50, any::<bool>()).prop_map(|(skip, len, reported)| Step::Gap {
                skip,
                len,
                reported
            }),
            (0u64..400).prop_map(Step::Arrive),
            (0u64..40, 1u64..30).prop_map(|(later_ms, limit)| Step::Report { later_ms, limit }),
        ]
    }

    proptest! {
        #[test]
        fn runs_report_exactly_what_a_list_of_single_packets_would(
            steps in proptest::collection::vec(step(), 1..80),
        ) {
            let interval = Duration::from_millis(20);
            let mut now = Instant::now();
            let (mut runs, mut each) = (LossList::default(), EachPacket::default());
            let mut end = 0;
            for step in steps {
                match step {
                    Step::Gap { skip, len, reported } => {
                        let (from, to) = (end + skip, end + skip + len - 1);
                        let at = reported.then_some(now);
                        runs.push(from, to, at);
                        each.0.extend((from..=to).map(|c| (c, at)));
                        end = to + 1;
                    }
                    Step::Arrive(count) => {
                        runs.remove(count);
                        each.0.remove(&count);
                    }
                    Step::Report { later_ms, limit } => {
                        now += Duration::from_millis(later_ms);
                        let got: Vec<u64> = runs
                            .overdue(now, interval, limit)
                            .into_iter()
                            .flat_map(|(from, to)| from..=to)
                            .collect();
                        prop_assert_eq!(got, each.overdue(now, interval, limit));
                    }
                }
                prop_assert_eq!(runs.missing(), each.0.len() as u64);
                prop_assert_eq!(runs.first(), each.0.keys().next().copied());
            }
        }
    }
}
