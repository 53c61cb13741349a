//! One direction of an emulated link, as arithmetic on times: when a packet leaves, or that
//! it is dropped. No clock and no I/O, so it is tested exactly.

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::topology::{LinkParams, SPARSE_MAX};

/// The state of one link direction: when its wire is next free and when its last packet
/// left (so jitter never reorders).
#[derive(Debug)]
pub struct Shaper {
    params: LinkParams,
    wire_free: Option<Instant>,
    last_departure: Option<Instant>,
    /// When the last small packet served ahead of the queue left (`sparse_first`).
    last_sparse: Option<Instant>,
    rng: SmallRng,
}

/// What happened to a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It leaves the far end at this time.
    Depart(Instant),
    /// Random loss.
    Lost,
    /// The queue was full (tail drop).
    QueueFull,
}

impl Shaper {
    /// A shaper for `params`, its random loss and jitter drawn from `seed`.
    pub fn new(params: LinkParams, seed: u64) -> Shaper {
        Shaper {
            params,
            wire_free: None,
            last_departure: None,
            last_sparse: None,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// Admits a packet of `len` bytes arriving at `at`.
    pub fn admit(&mut self, at: Instant, len: usize) -> Verdict {
        if self.params.loss > 0.0 && self.rng.gen::<f64>() < self.params.loss {
            return Verdict::Lost;
        }
        let sparse = self.params.sparse_first && len <= SPARSE_MAX;
        let sent = match self.params.rate_bps {
            Some(rate) if sparse => {
                // Ahead of the queue: on the wire at once, and what waits, waits that long more.
                let wire = Duration::from_secs_f64(len as f64 * 8.0 / rate as f64);
                self.wire_free = Some(self.wire_free.map_or(at, |f| f.max(at)) + wire);
                at + wire
            }
            Some(rate) => {
                let start = self.wire_free.map_or(at, |f| f.max(at));
                let waiting = start.saturating_duration_since(at).as_secs_f64() * rate as f64 / 8.0;
                if waiting + len as f64 > self.params.queue_bytes as f64 {
                    return Verdict::QueueFull;
                }
                let done = start + Duration::from_secs_f64(len as f64 * 8.0 / rate as f64);
                self.wire_free = Some(done);
                done
            }
            None => at,
        };
        let mut delay = self.params.delay;
        if !self.params.jitter.is_zero() {
            let j = self.params.jitter.as_secs_f64();
            let d = delay.as_secs_f64() + self.rng.gen_range(-j..=j);
            delay = Duration::from_secs_f64(d.max(0.0));
        }
        let mut leave = sent + delay;
        if sparse {
            // Overtakes the queued bulk of other flows; keeps the order of other small ones.
            if let Some(last) = self.last_sparse {
                leave = leave.max(last);
            }
            self.last_sparse = Some(leave);
            return Verdict::Depart(leave);
        }
        if let Some(last) = self.last_departure {
            leave = leave.max(last);
        }
        self.last_departure = Some(leave);
        Verdict::Depart(leave)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(rate: Option<u64>, delay_ms: u64, loss: f64, queue: u64) -> LinkParams {
        LinkParams {
            rate_bps: rate,
            delay: Duration::from_millis(delay_ms),
            jitter: Duration::ZERO,
            loss,
            queue_bytes: queue,
            mtu: 1500,
            sparse_first: false,
        }
    }

    #[test]
    fn with_sparse_first_a_small_packet_overtakes_the_queue_and_delays_it_by_its_own_time() {
        let mut p = params(Some(8_000_000), 10, 0.0, 1 << 20);
        p.sparse_first = true;
        let mut s = Shaper::new(p, 1);
        let t0 = Instant::now();
        // Ten 1000-byte packets queue for 10 ms of wire.
        for i in 1..=10u64 {
            assert_eq!(
                s.admit(t0, 1000),
                Verdict::Depart(t0 + Duration::from_millis(10 + i))
            );
        }
        // An ACK of 100 bytes (0.1 ms) leaves at once, the bulk behind it 0.1 ms later.
        assert_eq!(
            s.admit(t0, 100),
            Verdict::Depart(t0 + Duration::from_micros(10_100))
        );
        assert_eq!(
            s.admit(t0, 1000),
            Verdict::Depart(t0 + Duration::from_micros(21_100))
        );
        // Without it, the ACK waits for the queue.
        let mut fifo = Shaper::new(params(Some(8_000_000), 10, 0.0, 1 << 20), 1);
        for _ in 0..10 {
            fifo.admit(t0, 1000);
        }
        assert_eq!(
            fifo.admit(t0, 100),
            Verdict::Depart(t0 + Duration::from_micros(20_100))
        );
    }

    #[test]
    fn packets_leave_after_their_serialisation_time_plus_the_delay() {
        let mut s = Shaper::new(params(Some(8_000_000), 10, 0.0, 1 << 20), 1);
        let t0 = Instant::now();
        // 1000 bytes at 8 Mbit/s take 1 ms on the wire.
        assert_eq!(
            s.admit(t0, 1000),
            Verdict::Depart(t0 + Duration::from_millis(11))
        );
        // A second packet at the same moment waits for the first.
        assert_eq!(
            s.admit(t0, 1000),
            Verdict::Depart(t0 + Duration::from_millis(12))
        );
    }

    #[test]
    fn a_full_queue_drops_at_the_tail_and_a_drained_one_admits_again() {
        let mut s = Shaper::new(params(Some(8_000_000), 0, 0.0, 3000), 1);
        let t0 = Instant::now();
        let verdicts: Vec<_> = (0..5).map(|_| s.admit(t0, 1000)).collect();
        assert_eq!(
            verdicts
                .iter()
                .filter(|v| **v == Verdict::QueueFull)
                .count(),
            2
        );
        assert!(matches!(
            s.admit(t0 + Duration::from_millis(10), 1000),
            Verdict::Depart(_)
        ));
    }

    #[test]
    fn the_loss_rate_matches_the_setting_over_many_packets() {
        let mut s = Shaper::new(params(None, 0, 0.01, 1 << 20), 7);
        let t0 = Instant::now();
        let lost = (0..100_000)
            .filter(|_| s.admit(t0, 1500) == Verdict::Lost)
            .count();
        assert!((800..=1200).contains(&lost), "lost {lost} of 100000");
    }

    #[test]
    fn jitter_never_reorders_packets() {
        let mut p = params(None, 20, 0.0, 1 << 20);
        p.jitter = Duration::from_millis(5);
        let mut s = Shaper::new(p, 3);
        let t0 = Instant::now();
        let mut last = t0;
        for i in 0..10_000u64 {
            let Verdict::Depart(t) = s.admit(t0 + Duration::from_micros(i * 10), 100) else {
                panic!("no loss configured");
            };
            assert!(t >= last);
            assert!(t <= t0 + Duration::from_micros(i * 10) + Duration::from_millis(25));
            last = t;
        }
    }
}
