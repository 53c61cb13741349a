//! A congestion controller's window held to a multiple of the path's measured
//! bandwidth-delay product.
//!
//! Why: quinn's receiver closes a connection whose stream has more than 1024 gaps waiting for
//! retransmissions (its bound against memory exhaustion by tiny frames). BBR's start-up sends
//! at nearly three times the bottleneck rate until it sees the rate stop growing; once the
//! bottleneck's queue is full, a paced sender loses about two packets of every three, each
//! survivor its own island, and on a 200 ms path at 1 Gbit/s that is thousands of gaps
//! (measured on netlab's 200 ms / 0.1 % path: 1 transfer of 600 MiB in 7 failed with a 64 MiB
//! window, every one with 128 MiB). Holding what is in flight to [`GAIN`] times the delivered
//! rate over the minimum round trip keeps the bottleneck's queue at half a bandwidth-delay
//! product at most, so it does not overflow in bursts, while start-up still grows the window
//! by [`GAIN`] each round trip (the delivered rate grows with what is sent). Measured on the
//! same path: with a gain of 2 (a queue of one product, the size of netlab's) 2 transfers in 15
//! still failed; with 1.5, none of 10, at the same rate (450 Mbit/s for 600 MiB, start-up
//! included).

use std::any::Any;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::congestion::{Controller, ControllerFactory, ControllerMetrics};
use quinn_proto::RttEstimator;

/// In flight at most this many bandwidth-delay products.
pub(super) const GAIN: f64 = 1.5;
/// The cap never goes below this: on a short path (loopback, a LAN) acknowledgement delays
/// dwarf the round trip and the product underestimates what must be in flight, while this
/// many bytes cannot leave more than about 450 gaps however the losses fall (under quinn's
/// 1024).
const FLOOR: u64 = 1 << 20;
/// Rate samples are kept this many minimum round trips (the bandwidth filter's length).
const FILTER_ROUNDS: u32 = 10;

/// Builds [`Bounded`] controllers around another factory's.
pub(super) struct BoundedFactory(pub(super) Arc<dyn ControllerFactory + Send + Sync>);

impl ControllerFactory for BoundedFactory {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(Bounded {
            inner: Arc::clone(&self.0).build(now, current_mtu),
            meter: Meter::default(),
        })
    }
}

/// Another controller, its window capped at [`GAIN`] × max delivery rate × minimum RTT.
pub(super) struct Bounded {
    inner: Box<dyn Controller>,
    meter: Meter,
}

/// The path's delivery rate and minimum round trip, from acknowledgements.
#[derive(Debug, Clone, Default)]
struct Meter {
    /// Bytes acknowledged in all.
    delivered: u64,
    /// `(when, delivered)` at the end of each batch of acknowledgements, one round trip back.
    marks: VecDeque<(Instant, u64)>,
    /// `(when, bytes per second)` samples not limited by the application, newest last, each
    /// above every later one (a sample below a later one can never be the maximum again): the
    /// front is the maximum of the filter's window.
    rates: VecDeque<(Instant, f64)>,
    min_rtt: Option<Duration>,
    /// The cap as of the last batch: quinn asks for the window at every packet it sends.
    cap: Option<u64>,
}

impl Meter {
    fn acked(&mut self, bytes: u64, min_rtt: Duration) {
        self.delivered += bytes;
        self.min_rtt = Some(min_rtt);
    }

    /// A batch of acknowledgements ended: a rate sample over the last round trip.
    fn end_batch(&mut self, now: Instant, app_limited: bool) {
        let Some(rtt) = self.min_rtt.filter(|r| !r.is_zero()) else {
            return;
        };
        self.marks.push_back((now, self.delivered));
        // Keep one mark at least a round trip old: the base of the rate over that round trip.
        while self.marks.len() > 2 && now.duration_since(self.marks[1].0) >= rtt {
            self.marks.pop_front();
        }
        let (then, base) = self.marks[0];
        let span = now.duration_since(then);
        if !app_limited && span >= rtt {
            let rate = (self.delivered - base) as f64 / span.as_secs_f64();
            while self.rates.back().is_some_and(|(_, r)| *r <= rate) {
                self.rates.pop_back();
            }
            self.rates.push_back((now, rate));
        }
        while self
            .rates
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > rtt * FILTER_ROUNDS)
        {
            self.rates.pop_front();
        }
        self.cap = self
            .rates
            .front()
            .filter(|(_, rate)| *rate > 0.0)
            .map(|(_, rate)| (rate * rtt.as_secs_f64() * GAIN) as u64);
    }

    /// The cap, once a round trip and a rate have been measured.
    fn cap(&self) -> Option<u64> {
        self.cap
    }
}

impl Controller for Bounded {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        self.inner.on_sent(now, bytes, last_packet_number);
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.inner.on_ack(now, sent, bytes, app_limited, rtt);
        self.meter.acked(bytes, rtt.min());
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        largest_packet_num_acked: Option<u64>,
    ) {
        self.inner
            .on_end_acks(now, in_flight, app_limited, largest_packet_num_acked);
        self.meter.end_batch(now, app_limited);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.inner
            .on_congestion_event(now, sent, is_persistent_congestion, lost_bytes);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.inner.on_mtu_update(new_mtu);
    }

    fn window(&self) -> u64 {
        let inner = self.inner.window();
        match self.meter.cap() {
            Some(cap) => inner.min(cap.max(FLOOR).max(self.inner.initial_window())),
            None => inner,
        }
    }

    fn metrics(&self) -> ControllerMetrics {
        self.inner.metrics()
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Bounded {
            inner: self.inner.clone_box(),
            meter: self.meter.clone(),
        })
    }

    fn initial_window(&self) -> u64 {
        self.inner.initial_window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Acknowledgements of `per_ms` bytes each millisecond for `ms`, on a path of `rtt`.
    fn feed(m: &mut Meter, t0: Instant, from_ms: u32, ms: u32, per_ms: u64, rtt: Duration) {
        for k in from_ms..from_ms + ms {
            m.acked(per_ms, rtt);
            m.end_batch(t0 + MS * k, false);
        }
    }

    #[test]
    fn the_cap_is_one_and_a_half_times_the_delivered_rate_over_the_minimum_round_trip() {
        let t0 = Instant::now();
        let mut m = Meter::default();
        assert_eq!(m.cap(), None);
        // 125 MB/s (1 Gbit/s) delivered on a 200 ms path: a 25 MB product, capped at 37.5 MB.
        feed(&mut m, t0, 0, 600, 125_000, 200 * MS);
        let cap = m.cap().unwrap() as f64;
        assert!((cap / 37.5e6 - 1.0).abs() < 0.02, "{cap}");
    }

    #[test]
    fn application_limited_samples_do_not_lower_it_and_old_peaks_expire() {
        let t0 = Instant::now();
        let mut m = Meter::default();
        feed(&mut m, t0, 0, 300, 100_000, 100 * MS);
        let peak = m.cap().unwrap();
        // The sender ran out of data: those slow samples are no measure of the path.
        for k in 300..600 {
            m.acked(1_000, 100 * MS);
            m.end_batch(t0 + MS * k, true);
        }
        assert_eq!(m.cap().unwrap(), peak);
        // The path really slowed: after ten round trips the old peak is gone.
        feed(&mut m, t0, 600, 1_500, 10_000, 100 * MS);
        let now = m.cap().unwrap() as f64;
        assert!(
            (now / (peak as f64 / 10.0) - 1.0).abs() < 0.05,
            "{now} vs {peak}"
        );
    }
}
