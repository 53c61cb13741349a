//! ferry's controller: a model of the path in the manner of BBR. It paces at the bottleneck
//! rate it measured and keeps about two bandwidth-delay products in flight, so random loss,
//! which says nothing about the path's capacity, costs only the retransmissions.
//!
//! Estimates:
//! - bottleneck rate: the largest delivery-rate sample of the last ten rounds; a sample is the
//!   packets acknowledged over at least one RTT, divided by the longer of the time the ACKs
//!   took and the time those packets took to send (first sending: BBR's guard, since a filled
//!   hole moves the ACK by a round trip's packets at once). Without selective ACKs neither
//!   span bounds a round with holes, so a sample is also held to the arrival rate the
//!   receiver reports, and a span where resends exceed [`RESENT_SHARE_LIMIT`] is not taken;
//! - minimum RTT: the smallest RTT sampled in the last ten seconds (the sender's own samples:
//!   the newest packet an ACK covers, sent when). The first sample replaces libudt's 100 ms
//!   guess whatever its size.
//!
//!   In start-up the rate doubles every round, and a window over the last round trip lags by
//!   half of it: there the arrival rate the receiver reports with each ACK (what reached it
//!   in its last ACK interval) is a sample too.
//!
//! The window counts the packets the network may hold: those sent (or resent) within the last
//! round trip, its variation and two ACK intervals, scaled to one round trip (the sender's own
//! RTT). Without selective ACKs, packets behind a
//! hole stay unacknowledged for a round trip or more although they arrived; counted as in
//! flight (libudt's rule, which CUDTCC keeps), they held the window shut on every lossy path
//! and made one start-up overshoot cost seconds.
//!
//! Phases: start-up (gain 2.89) until the rate stops growing by a quarter for three rounds or
//! loss passes the ceiling, drain, then probing in eight-phase cycles (1.25, 0.75, then six at
//! 1).
//!
//! Fair to TCP on a shared bottleneck: loss is congestion, not noise, above [`LOSS_CEILING`]
//! of a round's packets, or above [`LOSS_NOISE`] while a queue stands (the receiver's round
//! trip, ACK to ACK2, a quarter above the least). A paced flow loses few packets when a
//! CUBIC flow overflows the queue beside it, so the ceiling alone let ferry take three
//! quarters of the link; random loss comes with no queue, so a lossy path's 1 % stays noise.
//! Congestion caps what is in flight at [`LOSS_CUT`] of what was in flight then (never under
//! a product), and the cap grows back by [`REGROWTH`] per round without such loss.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{AckSample, CongestionControl, LossSample};

/// Start-up's gain: 2/ln 2, the least that doubles the delivery rate every round.
const STARTUP_GAIN: f64 = 2.885;
/// Start-up's in-flight allowance in products (BBRv3's): the path holds its product and its
/// queue, and what start-up puts in flight beyond that in the round that finds the bottleneck
/// is lost.
const STARTUP_WINDOW_GAIN: f64 = 2.0;
/// Probing cycle, one phase per minimum RTT.
const CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// In-flight allowance in bandwidth-delay products while probing.
const WINDOW_GAIN: f64 = 2.0;
/// Rounds the rate filter remembers.
const BW_ROUNDS: u64 = 10;
/// Packets a round carries at least, and a probing phase lasts at least: the receiver's rate
/// is the median of 16 packet gaps, so a phase of fewer packets would go unseen.
const MIN_ROUND_PACKETS: u64 = 16;
/// How long a minimum RTT stays good.
const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);
/// Share of a round's packets lost above which the loss is taken as congestion.
/// (BBRv2 takes 2 %; 1 % random loss each way, netlab's lossy path, must stay well below.)
pub(crate) const LOSS_CEILING: f64 = 0.03;
/// Loss above this share while a queue stands is the queue overflowing: a CUBIC flow filling
/// the queue beside us loses a few tenths of a percent of our packets per round, and the 1 %
/// of a lossy path comes with no queue.
const LOSS_NOISE: f64 = 0.001;
/// Round trip over the least one from which a queue stands.
const QUEUE_DELAY_RATIO: f64 = 1.25;
/// What is left in flight after a round of heavy loss (BBRv2's beta). At 0.85 and 5 % a cubic
/// flow sharing a 60 ms bottleneck got 0.32 of it, under the third asked.
const LOSS_CUT: f64 = 0.7;
/// After a cut the cap grows back by this share per round without heavy loss. Simulated
/// beside one CUBIC flow on a clean 60 ms bottleneck (`fairness_experiment`, 16 seeds), an
/// eighth left CUBIC 0.24-0.34 of the link; CUBIC's own regrowth curve left ferry as little
/// as 0.30 when it joined a full queue; a sixty-fourth leaves each at least 0.36.
const REGROWTH: f64 = 1.0 / 64.0;
/// Share of resent packets above which an ACK span's rate is not taken (random loss of a few
/// percent stays under it).
const RESENT_SHARE_LIMIT: f64 = 0.05;
/// Extra window for the receiver's ACK timer (it acknowledges every 10 ms).
const ACK_ALLOWANCE_US: f64 = 20_000.0;
/// The receiver's ACK interval.
const ACK_INTERVAL_US: f64 = 10_000.0;
/// Before any measurement: libudt's first window and RTT.
const INITIAL_WINDOW: f64 = 16.0;
const INITIAL_RTT_US: f64 = 100_000.0;
/// Packets acknowledged before the receiver's arrival rate means anything. libudt's comes
/// from the median of its last 16 arrival gaps, each set to one second when the connection
/// opens: until more than half are real its answer is one packet per second. Taken for the
/// path, that held a loopback transfer at a few packets per second for 2.5 s (and
/// globus-url-copy -udt from a ferry server at half of Globus' own). Twice the window, as
/// losses in the first flight leave gaps of their own.
const ARRIVALS_BEFORE_RATE: u64 = 32;
/// Pacing while the receiver's window bounds the sender: this much above the rate its reader
/// frees room (its buffer fills slowly, the window then holds the rest back, and what a
/// window update frees goes out paced instead of at once).
const DRAIN_GAIN: f64 = 1.25;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Startup,
    Drain,
    Probe { index: usize, since: Instant },
}

/// ferry's model-based controller.
#[derive(Debug)]
pub struct Bbr {
    phase: Phase,
    max_window: f64,
    /// (round, best sample of that round), oldest first.
    rates: VecDeque<(u64, f64)>,
    /// The smallest RTT sampled, or libudt's first guess until there is a sample (which
    /// replaces it whether larger or smaller: a 200 ms path kept at the guess for ten seconds
    /// would run at half its product).
    min_rtt_us: f64,
    min_rtt_at: Instant,
    rtt_known: bool,
    round: u64,
    round_ends_at: u64,
    /// Recent ACKs: (when, packets acknowledged, when the newest of them first went out,
    /// packets acknowledged that had been resent).
    acks: VecDeque<(Instant, u64, Instant, u64)>,
    full_rate: f64,
    flat_rounds: u32,
    /// Packets the network may hold (the ACK's `in_network`).
    in_flight: f64,
    ceiling: f64,
    round_sent_from: u64,
    round_in_flight: f64,
    round_lost: u64,
    /// The receiver's smoothed round trip (ACK to ACK2: no hole lengthens it, as one does
    /// the sender's own samples, and the ACK2 waits in the data's queue).
    recent_rtt_us: f64,
    /// A probing cycle has passed since start-up: its queue is gone, and with it the
    /// receiver's memory of it.
    settled: bool,
    capped_in_round: bool,
    round_app_limited: bool,
    /// The receiver's reader's pace while its window bounds us (the ACK's `receiver_drain`).
    drain: Option<f64>,
}

impl Bbr {
    /// Before anything is known.
    pub fn new(now: Instant, max_window: u32) -> Bbr {
        Bbr {
            phase: Phase::Startup,
            max_window: f64::from(max_window.max(16)),
            rates: VecDeque::new(),
            min_rtt_us: INITIAL_RTT_US,
            min_rtt_at: now,
            rtt_known: false,
            round: 0,
            round_ends_at: 0,
            acks: VecDeque::new(),
            full_rate: 0.0,
            flat_rounds: 0,
            in_flight: 0.0,
            ceiling: f64::INFINITY,
            round_sent_from: 0,
            round_in_flight: 0.0,
            round_lost: 0,
            recent_rtt_us: INITIAL_RTT_US,
            settled: false,
            capped_in_round: false,
            round_app_limited: false,
            drain: None,
        }
    }

    /// Bottleneck rate, packets per second (0 before a sample).
    pub fn bottleneck_rate(&self) -> f64 {
        self.rates.iter().map(|&(_, r)| r).fold(0.0, f64::max)
    }

    fn bdp(&self) -> f64 {
        self.bottleneck_rate() * self.min_rtt_us / 1e6
    }

    fn gains(&self) -> (f64, f64) {
        match self.phase {
            Phase::Startup => (STARTUP_GAIN, STARTUP_WINDOW_GAIN),
            Phase::Drain => (1.0 / STARTUP_GAIN, STARTUP_WINDOW_GAIN),
            Phase::Probe { index, .. } => (CYCLE[index], WINDOW_GAIN),
        }
    }

    /// A delivery-rate sample from this ACK, if it gives one.
    fn sample_rate(&mut self, now: Instant, ack: &AckSample) -> Option<f64> {
        let windowed = self.windowed_rate(now, ack);
        // In start-up the window lags half a doubling; what a ferry receiver counted arriving
        // in its last ACK interval does not (and is at most what the bottleneck passes).
        let arrived = (self.phase == Phase::Startup)
            .then(|| counted_rate(ack))
            .flatten();
        match (windowed, arrived) {
            (Some(w), Some(a)) => Some(w.max(a)),
            (w, a) => w.or(a),
        }
    }

    /// Packets acknowledged over the last minimum RTT, per second.
    fn windowed_rate(&mut self, now: Instant, ack: &AckSample) -> Option<f64> {
        let sent = ack.newest_first_sent_at?;
        self.acks
            .push_back((now, ack.acked, sent, ack.acked_resent));
        let span = Duration::from_micros(self.min_rtt_us.max(20_000.0) as u64);
        // Keep one entry at least `span` old: the window's start.
        while self.acks.len() > 2 && now.duration_since(self.acks[1].0) >= span {
            self.acks.pop_front();
        }
        let &(then, acked_then, sent_then, resent_then) = self.acks.front()?;
        let acked_for = now.duration_since(then).as_secs_f64();
        if acked_for < span.as_secs_f64() * 0.5 {
            return None;
        }
        // Delivered over the longer of the two spans: when a resend fills a hole the ACK jumps
        // by a round trip's packets at once, but those were sent over a round trip (their
        // first sending: a resend's time would shrink the span to nothing).
        let sent_for = sent.saturating_duration_since(sent_then).as_secs_f64();
        let over = acked_for.max(sent_for);
        let delivered = ack.acked.saturating_sub(acked_then);
        // Resent packets crossed the path later than their first sending: after a burst of
        // loss the packets they release look sent faster than the path carries. A span with
        // more resends than random loss explains measures nothing.
        let resent = ack.acked_resent.saturating_sub(resent_then);
        if resent as f64 > RESENT_SHARE_LIMIT * delivered as f64 {
            return None;
        }
        // Packets a hole held back arrive at the ACK all at once, and were first sent faster
        // than the path carries them in start-up: neither span then bounds the rate. What the
        // receiver saw arriving does, with a tenth for its clock.
        let arrived = arrival_bound(ack).map_or(f64::INFINITY, |r| r * 1.1);
        (over > 0.0).then(|| (delivered as f64 / over).min(arrived))
    }

    /// Heavy loss in this round (checked as losses come, since a congested round's ACKs
    /// stall): caps the window once per round.
    fn check_loss(&mut self, sent: u64) {
        let share = self.round_share(sent);
        if self.capped_in_round || share <= self.loss_limit() || self.round_lost < 8 {
            return;
        }
        self.capped_in_round = true;
        // Never below a product and the ACK timer's allowance: what is in flight may have
        // been cut short by a timeout, and on a short path the ACK interval is most of what is
        // in flight (a cap under it would shrink the rate every round). Beside a CUBIC flow
        // the product is of our share of the rate, and so is the floor.
        let floor =
            (self.bdp() + self.bottleneck_rate() * ACK_ALLOWANCE_US / 1e6).max(INITIAL_WINDOW);
        self.ceiling = (self.in_flight.min(self.ceiling) * LOSS_CUT).max(floor);
        if self.phase == Phase::Startup {
            self.phase = Phase::Drain;
        }
    }

    /// Share of the packets exposed to loss in this round that were lost.
    fn round_share(&self, sent: u64) -> f64 {
        // Losses reported in a round are mostly of packets sent in the one before: the share
        // is of those in flight when the round began and those sent since.
        let exposed = self.round_in_flight + sent.saturating_sub(self.round_sent_from) as f64;
        self.round_lost as f64 / exposed.max(1.0)
    }

    /// Loss share above which a round is congested: [`LOSS_CEILING`], or a few tenths of a
    /// percent while a queue stands (the round trip a quarter above its least): a queue
    /// overflowing loses few of a paced flow's packets, while a lossy path's random loss comes
    /// with no queue at all.
    fn loss_limit(&self) -> f64 {
        if self.settled && self.recent_rtt_us >= QUEUE_DELAY_RATIO * self.min_rtt_us {
            LOSS_NOISE
        } else {
            LOSS_CEILING
        }
    }

    fn end_round(&mut self, ack: &AckSample) {
        if !self.capped_in_round && self.ceiling.is_finite() {
            self.ceiling += (self.ceiling * REGROWTH).max(1.0);
            if self.ceiling > self.max_window {
                self.ceiling = f64::INFINITY;
            }
        }
        self.round += 1;
        self.round_ends_at = ack.sent;
        self.round_sent_from = ack.sent;
        self.round_in_flight = ack.sent.saturating_sub(ack.acked) as f64;
        self.round_lost = 0;
        self.capped_in_round = false;
        while self
            .rates
            .front()
            .is_some_and(|&(r, _)| r + BW_ROUNDS <= self.round)
        {
            self.rates.pop_front();
        }
        let app_limited = std::mem::take(&mut self.round_app_limited);
        if self.phase == Phase::Startup && !app_limited {
            let rate = self.bottleneck_rate();
            if rate >= self.full_rate * 1.25 {
                self.full_rate = rate;
                self.flat_rounds = 0;
            } else {
                self.flat_rounds += 1;
                if self.flat_rounds >= 3 {
                    self.phase = Phase::Drain;
                }
            }
        }
    }
}

/// What a ferry receiver counted arriving per second over its last ACK interval, once it is
/// of real arrivals. libudt's receivers send only their own figure, the mean of the last 16
/// gaps near their median: on a path that delivers in bursts (netem's timer, interrupt
/// coalescing) the gaps inside a burst make it several times the path, no rate to start on.
fn counted_rate(ack: &AckSample) -> Option<f64> {
    ack.counted_rate
        .filter(|&r| r > 0 && ack.acked >= ARRIVALS_BEFORE_RATE)
        .map(f64::from)
}

/// At least what reached the receiver per second: its count where it sends one, else libudt's
/// figure or its smoothed value, the higher (16 gaps may all be of resends while a hole holds
/// the window, a few hundred packets a second on a path that has not slowed).
fn arrival_bound(ack: &AckSample) -> Option<f64> {
    counted_rate(ack).or_else(|| {
        ack.receive_rate_sample
            .filter(|&r| r > 0 && ack.acked >= ARRIVALS_BEFORE_RATE)
            .map(|r| f64::from(r.max(ack.receive_rate)))
    })
}

impl CongestionControl for Bbr {
    fn name(&self) -> &'static str {
        "bbr"
    }

    fn on_ack(&mut self, now: Instant, ack: &AckSample) {
        self.in_flight = ack.in_network as f64;
        self.drain = ack.receiver_drain;
        let rtt = f64::from(ack.rtt_sample_us.max(1));
        // Only the sender's own samples: the figure an ACK carries starts at libudt's 100 ms
        // guess whatever the path.
        let own = ack.newest_sent_at.is_some();
        self.recent_rtt_us = f64::from(ack.rtt_us);
        if own
            && (!self.rtt_known
                || rtt <= self.min_rtt_us
                || now.duration_since(self.min_rtt_at) > MIN_RTT_WINDOW)
        {
            self.rtt_known = true;
            self.min_rtt_us = rtt;
            self.min_rtt_at = now;
        }
        if let Some(rate) = self.sample_rate(now, ack) {
            if ack.app_limited {
                self.round_app_limited = true;
            }
            if ack.app_limited && rate <= self.bottleneck_rate() {
                // Sending less than the path takes says nothing about the path.
            } else {
                match self.rates.back_mut() {
                    Some((r, best)) if *r == self.round => *best = best.max(rate),
                    _ => self.rates.push_back((self.round, rate)),
                }
            }
        }
        if ack.acked >= self.round_ends_at
            && ack.sent.saturating_sub(self.round_sent_from) >= MIN_ROUND_PACKETS
        {
            self.end_round(ack);
        }
        match self.phase {
            // The queue is gone when no more than a product is in flight, and the packets of
            // an ACK interval (on a short path they are most of what is in flight; without them
            // drain would never end there, and its slow pacing would wear the model down).
            Phase::Drain
                if self.in_flight
                    <= (self.bdp() + self.bottleneck_rate() * ACK_INTERVAL_US / 1e6)
                        .max(INITIAL_WINDOW) =>
            {
                self.phase = Phase::Probe {
                    index: 2,
                    since: now,
                }
            }
            Phase::Probe { index, since }
                if now.duration_since(since).as_secs_f64() * 1e6
                    >= self
                        .min_rtt_us
                        .max(MIN_ROUND_PACKETS as f64 * self.period_us()) =>
            {
                let index = (index + 1) % CYCLE.len();
                self.settled |= index == 0;
                self.phase = Phase::Probe { index, since: now }
            }
            _ => {}
        }
    }

    fn on_loss(&mut self, _now: Instant, loss: &LossSample) {
        self.round_lost += loss.newly_lost;
        self.in_flight = loss.in_network as f64;
        self.check_loss(loss.sent);
    }

    fn on_timeout(&mut self, _now: Instant) {}

    fn window_counts_network(&self) -> bool {
        true
    }

    fn period_us(&self) -> f64 {
        let rate = self.bottleneck_rate();
        let (gain, _) = self.gains();
        if rate <= 0.0 {
            return INITIAL_RTT_US.min(self.min_rtt_us) / (INITIAL_WINDOW * STARTUP_GAIN);
        }
        let paced = self
            .drain
            .map_or(rate * gain, |d| (rate * gain).min(d * DRAIN_GAIN));
        1e6 / paced
    }

    fn window(&self) -> f64 {
        let (_, gain) = self.gains();
        let rate = self.bottleneck_rate();
        let window = if rate <= 0.0 {
            INITIAL_WINDOW
        } else {
            (gain * self.bdp() + rate * ACK_ALLOWANCE_US / 1e6).max(INITIAL_WINDOW)
        };
        window.min(self.ceiling)
    }
}

#[cfg(test)]
mod tests;
