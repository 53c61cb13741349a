//! The two rates libudt's receiver reports in its ACKs (window.cpp), measured the same way:
//! the arrival rate from the gaps between the last 16 packets, and the link capacity from the
//! gaps of the last 64 packet pairs (each packet numbered 0 mod 16 and its successor leave the
//! sender back to back), both median-filtered.
//!
//! A libudt sender's CUDTCC holds its window to the arrival rate reported times the round
//! trip, so the figure must be libudt's: a count over each ACK interval (which ferry keeps for
//! its own flow window, `Receiver::arrival_rate`) includes the sender's pauses and runs lower.

use std::time::Instant;

const PAIRS: usize = 64;
/// Arrival gaps kept (libudt's `m_iAWSize`).
const GAPS: usize = 16;

/// Arrival gaps and packet-pair gaps.
#[derive(Debug, Clone)]
pub(crate) struct ArrivalWindow {
    pairs: [u32; PAIRS],
    pair_at: usize,
    probe: Option<Instant>,
    gaps: [u32; GAPS],
    gap_at: usize,
    /// The last arrival time, the gap before it, and how many packets arrived at it.
    run: Option<(Instant, Option<u32>, u32)>,
}

fn micros(from: Instant, to: Instant) -> u32 {
    u32::try_from(to.saturating_duration_since(from).as_micros()).unwrap_or(u32::MAX)
}

impl ArrivalWindow {
    pub(crate) fn new() -> ArrivalWindow {
        ArrivalWindow {
            pairs: [1_000; PAIRS],
            pair_at: 0,
            probe: None,
            // libudt starts from a second each: no rate until most are real.
            gaps: [1_000_000; GAPS],
            gap_at: 0,
            run: None,
        }
    }

    /// A data packet numbered `seq` arrived.
    pub(crate) fn arrived(&mut self, now: Instant, seq: u32) {
        self.time_arrival(now);
        match seq & 0xF {
            0 => self.probe = Some(now),
            1 => {
                // A pair that arrived within the same microsecond was coalesced (GRO) or
                // timed together: its gap is not measured, and zeros in the window made the
                // median 0, so the capacity reported was 0 (libudt's own arithmetic would
                // divide by it).
                if let Some(gap) = self.probe.take().map(|first| micros(first, now)) {
                    if gap > 0 {
                        self.pairs[self.pair_at] = gap;
                        self.pair_at = (self.pair_at + 1) % PAIRS;
                    }
                }
            }
            _ => {}
        }
    }

    /// Datagrams the kernel coalesced (GRO) carry one receive time: the gap before such a run
    /// is shared by its packets, recorded when the run ends.
    fn time_arrival(&mut self, now: Instant) {
        if let Some((at, _, count)) = &mut self.run {
            if micros(*at, now) == 0 {
                *count += 1;
                return;
            }
        }
        let gap = match self.run.take() {
            Some((at, gap, count)) => {
                if let Some(gap) = gap {
                    let each = (gap / count).max(1);
                    for _ in 0..count.min(GAPS as u32) {
                        self.gaps[self.gap_at] = each;
                        self.gap_at = (self.gap_at + 1) % GAPS;
                    }
                }
                Some(micros(at, now))
            }
            None => None,
        };
        self.run = Some((now, gap, 1));
    }

    /// Packets per second arriving, from the mean of the arrival gaps near their median; 0
    /// until more than half the gaps are near it (libudt's `getPktRcvSpeed`).
    pub(crate) fn receive_rate(&self) -> u32 {
        let median = median(&self.gaps);
        let (upper, lower) = (median.saturating_mul(8), median / 8);
        let (count, sum) = self
            .gaps
            .iter()
            .filter(|&&g| g < upper && g > lower)
            .fold((0u64, 0u64), |(c, s), &g| (c + 1, s + u64::from(g)));
        if count <= GAPS as u64 / 2 || sum == 0 {
            return 0;
        }
        (1_000_000.0 / (sum as f64 / count as f64)).ceil() as u32
    }

    /// Link capacity in packets per second from packet pairs.
    pub(crate) fn bandwidth(&self) -> u32 {
        let median = median(&self.pairs);
        let (upper, lower) = (median.saturating_mul(8), median / 8);
        let (count, sum) = self
            .pairs
            .iter()
            .filter(|&&g| g < upper && g > lower)
            .fold((1u64, u64::from(median)), |(c, s), &g| {
                (c + 1, s + u64::from(g))
            });
        if sum == 0 {
            return 0;
        }
        (1_000_000.0 / (sum as f64 / count as f64)).ceil() as u32
    }
}

fn median<const N: usize>(values: &[u32; N]) -> u32 {
    let mut copy = *values;
    let (_, m, _) = copy.select_nth_unstable(N / 2);
    *m
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn steady_pairs_give_the_link_rate() {
        let t0 = Instant::now();
        let mut w = ArrivalWindow::new();
        for i in 1..=2_000u32 {
            w.arrived(t0 + Duration::from_micros(u64::from(i) * 100), i);
        }
        assert_eq!(w.bandwidth(), 10_000);
    }

    #[test]
    fn pairs_timed_together_are_not_measurements() {
        let t0 = Instant::now();
        let mut w = ArrivalWindow::new();
        // Two pairs in three share their arrival time (one GRO message, say); the rest are
        // 100 µs apart, a 10 000 packets/s link.
        for round in 0..300u32 {
            let at = t0 + Duration::from_millis(u64::from(round));
            w.arrived(at, round * 16);
            let gap = if round % 3 == 0 { 100 } else { 0 };
            w.arrived(at + Duration::from_micros(gap), round * 16 + 1);
        }
        assert_eq!(w.bandwidth(), 10_000);
    }

    #[test]
    fn steady_arrivals_report_their_rate_once_most_gaps_are_real() {
        let t0 = Instant::now();
        let mut w = ArrivalWindow::new();
        for i in 1..=10u32 {
            w.arrived(t0 + Duration::from_micros(u64::from(i) * 100), i);
        }
        // Eight gaps recorded (one waits for the next arrival): libudt says 0 until nine.
        assert_eq!(w.receive_rate(), 0);
        for i in 11..=40u32 {
            w.arrived(t0 + Duration::from_micros(u64::from(i) * 100), i);
        }
        assert_eq!(w.receive_rate(), 10_000);
    }

    #[test]
    fn a_pause_is_filtered_out_of_the_arrival_rate() {
        let t0 = Instant::now();
        let mut w = ArrivalWindow::new();
        let mut at = t0;
        for i in 1..=40u32 {
            at += Duration::from_micros(if i == 30 { 1_000_000 } else { 100 });
            w.arrived(at, i);
        }
        assert_eq!(w.receive_rate(), 10_000);
    }

    #[test]
    fn datagrams_coalesced_into_one_read_share_the_gap_before_them() {
        // GRO hands four datagrams over with one receive time every 400 µs: 10 000 packets/s,
        // not four gaps of 0 and one of 400 (a median of 0, so no rate at all).
        let t0 = Instant::now();
        let mut w = ArrivalWindow::new();
        for run in 1..=20u32 {
            let at = t0 + Duration::from_micros(u64::from(run) * 400);
            for k in 0..4 {
                w.arrived(at, run * 4 + k);
            }
        }
        assert_eq!(w.receive_rate(), 10_000);
    }
}
