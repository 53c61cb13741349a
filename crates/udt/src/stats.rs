//! The link capacity libudt's receiver reports in its ACKs (window.cpp): from the gaps of
//! the last 64 packet pairs, median-filtered (each packet numbered 0 mod 16 and its successor
//! leave the sender back to back). The arrival rate it reports beside it ferry counts per ACK
//! interval instead (`Receiver::arrival_rate`).

use std::time::Instant;

const PAIRS: usize = 64;

/// Packet-pair gaps.
#[derive(Debug, Clone)]
pub(crate) struct ArrivalWindow {
    pairs: [u32; PAIRS],
    pair_at: usize,
    probe: Option<Instant>,
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
        }
    }

    /// A data packet numbered `seq` arrived.
    pub(crate) fn arrived(&mut self, now: Instant, seq: u32) {
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
}
