//! A TCP flow with CUBIC's window (RFC 9438, as Linux grows it) sharing the simulated
//! bottleneck with the UDT connection: what the fairness bar is measured against on netlab
//! (one iperf3 flow), at a cost of microseconds per packet.
//!
//! Modelled: slow start, CUBIC's growth with its Reno-friendly floor and fast convergence, one
//! cut (beta 0.7) per window of loss seen from the next packet's ACK (three duplicate ACKs come
//! within a packet time of each other at these rates), and a retransmission timeout when a
//! whole window is lost. ACKs come back after the one-way delay unqueued (the reverse path
//! carries only ACKs). Lost segments are not resent: the window, not the bytes, is what
//! shares the bottleneck.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// CUBIC's constant and multiplicative decrease (RFC 9438, 4.1 and 4.6).
const C: f64 = 0.4;
const BETA: f64 = 0.7;
/// Linux's minimum retransmission timeout.
const MIN_RTO: Duration = Duration::from_millis(200);

pub(super) struct Cubic {
    pub(super) cwnd: f64,
    ssthresh: f64,
    w_max: f64,
    /// Start of the current growth epoch, its K (seconds) and the window it grows towards.
    epoch: Option<(Instant, f64, f64)>,
    /// Reno's estimate since the epoch began.
    w_est: f64,
    next_seq: u64,
    in_flight: u64,
    /// ACKs on their way back: (when they arrive, serial) -> (segment, when it was sent).
    acks: BTreeMap<(Instant, u64), (u64, Instant)>,
    dropped: BTreeSet<u64>,
    /// Losses of segments below this belong to the window already cut.
    recover: u64,
    min_rtt: Option<Duration>,
    last_progress: Instant,
    /// Segments delivered so far.
    pub(super) delivered: u64,
    serial: u64,
}

impl Cubic {
    pub(super) fn new(now: Instant) -> Cubic {
        Cubic {
            cwnd: 10.0,
            ssthresh: f64::INFINITY,
            w_max: 0.0,
            epoch: None,
            w_est: 0.0,
            next_seq: 0,
            in_flight: 0,
            acks: BTreeMap::new(),
            dropped: BTreeSet::new(),
            recover: 0,
            min_rtt: None,
            last_progress: now,
            delivered: 0,
            serial: 0,
        }
    }

    fn rto(&self) -> Duration {
        MIN_RTO + self.min_rtt.unwrap_or(Duration::from_secs(1))
    }

    /// When the flow next has something to do.
    pub(super) fn next_due(&self) -> Option<Instant> {
        let ack = self.acks.keys().next().map(|k| k.0);
        let timeout = (self.in_flight > 0).then(|| self.last_progress + self.rto());
        ack.into_iter().chain(timeout).min()
    }

    /// Segment `seq`, sent at `sent`, reached the receiver at `now`; its ACK comes back
    /// after `one_way`.
    pub(super) fn arrived(&mut self, now: Instant, seq: u64, sent: Instant, one_way: Duration) {
        self.serial += 1;
        self.acks.insert((now + one_way, self.serial), (seq, sent));
    }

    /// Takes the ACKs due, grows or cuts the window, and sends what it allows through
    /// `send`, which says whether the bottleneck took the segment.
    pub(super) fn poll(&mut self, now: Instant, mut send: impl FnMut(u64) -> bool) {
        let later = self.acks.split_off(&(now, u64::MAX));
        for (seq, sent) in std::mem::replace(&mut self.acks, later).into_values() {
            self.in_flight -= 1;
            self.delivered += 1;
            self.last_progress = now;
            let rtt = now.duration_since(sent);
            self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
            let lost: Vec<u64> = self.dropped.range(..seq).copied().collect();
            for l in &lost {
                self.dropped.remove(l);
                self.in_flight -= 1;
            }
            if lost.iter().any(|&l| l >= self.recover) {
                self.cut(BETA);
            } else if lost.is_empty() {
                self.grow(now);
            }
        }
        if self.in_flight > 0 && now >= self.last_progress + self.rto() {
            // Every segment in flight was lost.
            self.in_flight -= self.dropped.len() as u64;
            self.dropped.clear();
            self.cut(BETA);
            self.cwnd = 1.0;
            self.last_progress = now;
        }
        while (self.in_flight as f64) < self.cwnd.floor() {
            let seq = self.next_seq;
            self.next_seq += 1;
            self.in_flight += 1;
            if !send(seq) {
                self.dropped.insert(seq);
            }
        }
    }

    fn cut(&mut self, beta: f64) {
        // Fast convergence: a flow whose window fell since the last cut leaves room.
        self.w_max = if self.cwnd < self.w_max {
            self.cwnd * (1.0 + beta) / 2.0
        } else {
            self.cwnd
        };
        self.cwnd = (self.cwnd * beta).max(2.0);
        self.ssthresh = self.cwnd;
        self.epoch = None;
        self.recover = self.next_seq;
    }

    fn grow(&mut self, now: Instant) {
        if self.cwnd < self.ssthresh {
            self.cwnd += 1.0;
            return;
        }
        let rtt = self
            .min_rtt
            .unwrap_or(Duration::from_millis(100))
            .as_secs_f64();
        if self.epoch.is_none() {
            self.w_est = self.cwnd;
            self.epoch = Some(if self.cwnd < self.w_max {
                (now, ((self.w_max - self.cwnd) / C).cbrt(), self.w_max)
            } else {
                (now, 0.0, self.cwnd)
            });
        }
        let Some((start, k, origin)) = self.epoch else {
            return;
        };
        let t = now.duration_since(start).as_secs_f64() + rtt;
        let target = origin + C * (t - k).powi(3);
        // Reno's growth (RFC 9438, 4.3), per ACK.
        self.w_est += 3.0 * (1.0 - BETA) / (1.0 + BETA) / self.cwnd;
        let target = target.max(self.w_est);
        // Linux grows at most half a segment per ACK.
        self.cwnd += if target > self.cwnd {
            ((target - self.cwnd) / self.cwnd).min(0.5)
        } else {
            0.01 / self.cwnd
        };
    }
}
