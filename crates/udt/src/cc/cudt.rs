//! CUDTCC, libudt 4.11's controller (ccc.cpp), rule for rule: slow start on the window until
//! the first loss, then rate control once per 10 ms. The rate grows by a step taken from the
//! spare capacity the receiver measured; a NAK that opens a new congestion epoch stretches the
//! period by 1/8, and repeated NAKs within an epoch stretch it again at random intervals.
//! Only the random source differs from libudt's `rand()`.

use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use super::{AckSample, CongestionControl, LossSample};

/// Rate control runs at most once per SYN interval.
const RC_INTERVAL_US: f64 = 10_000.0;
/// libudt's floor on the increase, packets per SYN (raised from 1/MSS in 2012).
const MIN_INC: f64 = 0.01;

/// libudt's CUDTCC.
#[derive(Debug)]
pub struct Cudt {
    mss: f64,
    max_window: f64,
    last_rc: Instant,
    slow_start: bool,
    last_ack: u64,
    loss: bool,
    last_dec_seq: i64,
    last_dec_period: f64,
    avg_nak: i64,
    nak_count: i64,
    dec_count: i64,
    dec_random: i64,
    window: f64,
    period: f64,
    rtt: f64,
    receive_rate: f64,
    bandwidth: f64,
    sent: u64,
}

impl Cudt {
    /// As `CUDTCC::init` leaves it.
    pub fn new(now: Instant, mss: u32, max_window: u32) -> Cudt {
        Cudt {
            mss: f64::from(mss),
            max_window: f64::from(max_window),
            last_rc: now,
            slow_start: true,
            last_ack: 0,
            loss: false,
            last_dec_seq: -1,
            last_dec_period: 1.0,
            avg_nak: 0,
            nak_count: 0,
            dec_count: 0,
            dec_random: 1,
            window: 16.0,
            period: 1.0,
            rtt: 100_000.0,
            receive_rate: 16.0,
            bandwidth: 1.0,
            sent: 0,
        }
    }

    fn leave_slow_start(&mut self) {
        self.slow_start = false;
        self.period = if self.receive_rate > 0.0 {
            1_000_000.0 / self.receive_rate
        } else {
            (self.rtt + RC_INTERVAL_US) / self.window
        };
    }
}

impl CongestionControl for Cudt {
    fn name(&self) -> &'static str {
        "udt"
    }

    fn on_ack(&mut self, now: Instant, ack: &AckSample) {
        self.rtt = f64::from(ack.rtt_us);
        if ack.receive_rate > 0 {
            self.receive_rate = f64::from(ack.receive_rate);
        }
        if ack.bandwidth > 0 {
            self.bandwidth = f64::from(ack.bandwidth);
        }
        self.sent = ack.sent;
        if now.duration_since(self.last_rc) < Duration::from_micros(RC_INTERVAL_US as u64) {
            return;
        }
        self.last_rc = now;
        if self.slow_start {
            self.window += ack.acked.saturating_sub(self.last_ack) as f64;
            self.last_ack = ack.acked;
            if self.window > self.max_window {
                self.leave_slow_start();
            }
            return;
        }
        self.window = self.receive_rate / 1_000_000.0 * (self.rtt + RC_INTERVAL_US) + 16.0;
        if self.loss {
            self.loss = false;
            return;
        }
        let mut spare = (self.bandwidth - 1_000_000.0 / self.period).floor();
        if self.period > self.last_dec_period && self.bandwidth / 9.0 < spare {
            spare = (self.bandwidth / 9.0).floor();
        }
        let inc = if spare <= 0.0 {
            MIN_INC
        } else {
            (10f64.powf((spare * self.mss * 8.0).log10().ceil()) * 0.000_001_5 / self.mss)
                .max(MIN_INC)
        };
        self.period = (self.period * RC_INTERVAL_US) / (self.period * inc + RC_INTERVAL_US);
    }

    fn on_loss(&mut self, _now: Instant, loss: &LossSample) {
        if self.slow_start {
            let measured = self.receive_rate > 0.0;
            self.leave_slow_start();
            if measured {
                return;
            }
        }
        self.loss = true;
        let last_sent = loss.sent as i64 - 1;
        if loss.first as i64 > self.last_dec_seq {
            self.last_dec_period = self.period;
            self.period = (self.period * 1.125).ceil();
            self.avg_nak =
                (self.avg_nak as f64 * 0.875 + self.nak_count as f64 * 0.125).ceil() as i64;
            self.nak_count = 1;
            self.dec_count = 1;
            self.last_dec_seq = last_sent;
            let mut rng = rand::rngs::SmallRng::seed_from_u64(last_sent as u64);
            self.dec_random = ((self.avg_nak as f64 * rng.gen::<f64>()).ceil() as i64).max(1);
        } else {
            let count_ok = self.dec_count < 5;
            self.dec_count += 1;
            if count_ok {
                self.nak_count += 1;
                if self.nak_count % self.dec_random == 0 {
                    self.period = (self.period * 1.125).ceil();
                    self.last_dec_seq = last_sent;
                }
            }
        }
    }

    fn on_timeout(&mut self, _now: Instant) {
        if self.slow_start {
            self.leave_slow_start();
        }
    }

    fn period_us(&self) -> f64 {
        self.period
    }

    fn window(&self) -> f64 {
        self.window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(acked: u64, rate: u32) -> AckSample {
        AckSample {
            in_network: 0,
            acked,
            sent: acked,
            rtt_us: 10_000,
            rtt_sample_us: 10_000,
            receive_rate: rate,
            receive_rate_sample: Some(rate),
            counted_rate: None,
            bandwidth: 100_000,
            newest_sent_at: None,
            newest_first_sent_at: None,
            acked_resent: 0,
            app_limited: false,
            receiver_drain: None,
        }
    }

    #[test]
    fn slow_start_grows_the_window_then_a_loss_sets_the_rate_from_the_receiver() {
        let t0 = Instant::now();
        let mut cc = Cudt::new(t0, 1500, 25_600);
        cc.on_ack(t0 + Duration::from_millis(20), &ack(100, 10_000));
        assert_eq!(cc.window(), 116.0);
        cc.on_loss(
            t0,
            &LossSample {
                in_network: 0,
                first: 90,
                newly_lost: 1,
                sent: 120,
                acked: 100,
            },
        );
        assert_eq!(cc.period_us(), 100.0);
        // A NAK in a new epoch: the period grows by 1/8.
        cc.on_loss(
            t0,
            &LossSample {
                in_network: 0,
                first: 200,
                newly_lost: 1,
                sent: 300,
                acked: 150,
            },
        );
        assert_eq!(cc.period_us(), 113.0);
        // Rate increase after a quiet SYN interval: the period shrinks.
        cc.on_ack(t0 + Duration::from_millis(40), &ack(200, 10_000));
        cc.on_ack(t0 + Duration::from_millis(60), &ack(300, 10_000));
        assert!(cc.period_us() < 113.0);
    }
}
