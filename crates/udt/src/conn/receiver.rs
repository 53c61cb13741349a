//! The receiving half: packets into a ring in sequence order, losses found and reported,
//! ACKs on the SYN timer and every 64 packets, RTT from ACK2.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::loss_list::LossList;
use super::ring::Ring;
use crate::packet::{Ack, AckInfo};
use crate::stats::ArrivalWindow;

/// ACKs remembered for their ACK2 (libudt's CACKWindow holds 1024).
const ACK_HISTORY: usize = 1024;
/// The flow window offered whatever the path (four times libudt's default receive buffer):
/// a sender in start-up must not meet it before the path's own limit, or it stops growing
/// early. Ring memory follows use, not this figure.
const MIN_WINDOW: u64 = 32_768;
/// The flow window in bandwidth-delay products of what arrives: in flight by ACK count is
/// about twice the product on a lossy path (packets behind a hole wait a round trip).
const WINDOW_PRODUCTS: u64 = 8;
/// A light ACK goes every this many packets.
const LIGHT_ACK_EVERY: u32 = 64;

/// Packets received and waiting for the application.
#[derive(Debug)]
pub(crate) struct Receiver {
    /// Packets by count modulo the flow window; it grows only where packets land.
    ring: Ring,
    /// First packet the application has not finished reading, and bytes of it already read.
    pub(crate) base: u64,
    read_offset: usize,
    /// First packet not received: everything before it is in order.
    pub(crate) contiguous: u64,
    /// One past the highest packet received.
    pub(crate) highest: u64,
    /// Missing packets and when each was last reported.
    losses: LossList,
    pub(crate) arrivals: ArrivalWindow,
    ack_number: u32,
    acks: VecDeque<(u32, u64, Instant)>,
    last_ack: u64,
    /// The highest ACK the sender confirmed with an ACK2.
    last_ack_acked: u64,
    last_full_ack: Option<Instant>,
    since_ack: u32,
    light_acks: u32,
    /// Bytes delivered to the application.
    pub(crate) delivered_bytes: u64,
    /// Packets received in all, and at the last rate measurement.
    received: u64,
    rate_mark: (Instant, u64),
    /// Packets per second arriving: the largest rate of the last few ACK intervals.
    arrival_rate: f64,
}

impl Receiver {
    pub(crate) fn new(now: Instant, capacity: usize) -> Receiver {
        Receiver {
            ring: Ring::new(capacity as u64),
            base: 0,
            read_offset: 0,
            contiguous: 0,
            highest: 0,
            losses: LossList::default(),
            arrivals: ArrivalWindow::new(),
            ack_number: 0,
            acks: VecDeque::new(),
            last_ack: 0,
            last_ack_acked: 0,
            last_full_ack: None,
            since_ack: 0,
            light_acks: 1,
            delivered_bytes: 0,
            received: 0,
            rate_mark: (now, 0),
            arrival_rate: 0.0,
        }
    }

    fn capacity(&self) -> u64 {
        self.ring.capacity()
    }

    /// Whether packet `count` falls within the flow window offered (counted from the first
    /// packet not read, as the ring holds them).
    pub(crate) fn within_window(&self, count: u64) -> bool {
        count < self.base + self.capacity()
    }

    /// Counts packets over an ACK interval (10 ms or more): the arrival rate, which decays
    /// by a tenth per interval so a slower path is followed within a fraction of a second.
    fn measure_rate(&mut self, now: Instant) {
        let (then, count) = self.rate_mark;
        let elapsed = now.saturating_duration_since(then).as_secs_f64();
        if elapsed < 0.01 {
            return;
        }
        let rate = self.received.saturating_sub(count) as f64 / elapsed;
        self.arrival_rate = rate.max(self.arrival_rate * 0.9);
        self.rate_mark = (now, self.received);
    }

    /// Packets per second arriving (0 before a measurement).
    pub(crate) fn arrival_rate(&self) -> u32 {
        self.arrival_rate as u32
    }

    /// The arrival rate reported to the sender, packets per second (for logs).
    pub(crate) fn reported_rate(&self) -> u32 {
        self.arrivals.receive_rate()
    }

    /// The link capacity the packet pairs measure, in packets per second (for logs).
    pub(crate) fn pair_bandwidth(&self) -> u32 {
        self.arrivals.bandwidth()
    }

    /// Free packets to advertise: the ring's room, held to [`WINDOW_PRODUCTS`]
    /// bandwidth-delay products of what arrives (at least [`MIN_WINDOW`]), so memory follows
    /// the path.
    pub(crate) fn available(&self, rtt_us: u32) -> u32 {
        let rate = self.arrival_rate as u64;
        let bdp = rate * u64::from(rtt_us) / 1_000_000;
        // A flight flag below the floor (libudt's default is 25 600) is the limit itself.
        let cap = self.capacity();
        let window = (WINDOW_PRODUCTS * bdp).clamp(MIN_WINDOW.min(cap), cap);
        let used = self.contiguous - self.base;
        u32::try_from(window.saturating_sub(used + 1))
            .unwrap_or(u32::MAX)
            .max(2)
    }

    /// Stores packet `count`. Returns the newly found gap `[from, to]` to report at once.
    pub(crate) fn insert(
        &mut self,
        now: Instant,
        count: u64,
        payload: &[u8],
    ) -> Option<(u64, u64)> {
        self.received += 1;
        if count < self.contiguous || !self.within_window(count) {
            return None;
        }
        if !self.ring.store(count, payload) {
            return None;
        }
        self.since_ack += 1;
        let mut gap = None;
        if count > self.highest {
            self.losses.push(self.highest, count - 1, Some(now));
            gap = Some((self.highest, count - 1));
            self.highest = count + 1;
        } else if count == self.highest {
            self.highest = count + 1;
        } else {
            self.losses.remove(count);
        }
        self.contiguous = self.losses.first().unwrap_or(self.highest);
        gap
    }

    /// Copies in-order bytes into `out`; 0 when none are ready.
    pub(crate) fn read(&mut self, out: &mut [u8]) -> usize {
        let mut n = 0;
        while n < out.len() && self.base < self.contiguous {
            let packet = self.ring.get(self.base);
            let rest = packet.get(self.read_offset..).unwrap_or_default();
            let take = rest.len().min(out.len() - n);
            out[n..n + take].copy_from_slice(&rest[..take]);
            n += take;
            self.read_offset += take;
            if self.read_offset >= packet.len() {
                self.ring.release(self.base);
                self.read_offset = 0;
                self.base += 1;
            }
        }
        self.delivered_bytes += n as u64;
        n
    }

    /// Bytes received and not read, those behind a hole included.
    pub(crate) fn buffered_bytes(&self) -> usize {
        self.ring.held() - self.read_offset
    }

    /// Heap bytes the ring and the loss list use, roughly.
    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        // A B-tree entry: two counts and a time, and its share of the node.
        self.ring.footprint() + self.losses.runs() * 64
    }

    /// Runs of missing packets held.
    #[cfg(test)]
    pub(crate) fn loss_entries(&self) -> usize {
        self.losses.runs()
    }

    /// Whether bytes are waiting for the application.
    pub(crate) fn readable(&self) -> bool {
        self.base < self.contiguous
    }

    /// Whether packets are missing below the highest one received.
    pub(crate) fn has_gaps(&self) -> bool {
        !self.losses.is_empty()
    }

    /// A light ACK once 64 packets more arrived since the last ACK.
    pub(crate) fn light_ack_due(&mut self) -> Option<u64> {
        if self.since_ack >= LIGHT_ACK_EVERY * self.light_acks
            && self.contiguous > self.last_ack_acked
        {
            self.light_acks += 1;
            return Some(self.contiguous);
        }
        None
    }

    /// Lets the next [`Receiver::full_ack`] repeat an unconfirmed ACK at once (before a
    /// shutdown), instead of waiting a round trip for its ACK2.
    pub(crate) fn ack_again(&mut self) {
        self.last_full_ack = None;
    }

    /// The full ACK the SYN timer sends, if one is owed (libudt's rules).
    pub(crate) fn full_ack(&mut self, now: Instant, rtt: u32, rtt_var: u32) -> Option<(u64, Ack)> {
        self.measure_rate(now);
        self.since_ack = 0;
        self.light_acks = 1;
        let ack = self.contiguous;
        // libudt's rules, kept exactly: nothing while the ACK point is stuck behind a hole
        // the sender already confirmed. A libudt sender only resumes after a stall (a full
        // flow window) from a NAK or its retransmission timer, and every packet it hears
        // restarts that timer: an ACK repeated to show liveness would stall it for good.
        if ack == self.last_ack_acked {
            return None;
        }
        if ack == self.last_ack {
            let wait = Duration::from_micros(u64::from(rtt) + 4 * u64::from(rtt_var));
            if self
                .last_full_ack
                .is_some_and(|t| now.duration_since(t) < wait)
            {
                return None;
            }
        } else if ack < self.last_ack {
            return None;
        }
        if ack < self.last_ack_acked {
            return None;
        }
        self.last_ack = ack;
        let with_rates = self
            .last_full_ack
            .is_none_or(|t| now.duration_since(t) > crate::conn::SYN);
        let info = AckInfo {
            rtt,
            rtt_var,
            available: self.available(rtt),
            receive_rate: with_rates.then(|| self.arrivals.receive_rate()),
            bandwidth: with_rates.then(|| self.arrivals.bandwidth()),
            counted_rate: with_rates.then(|| self.arrival_rate()),
        };
        if with_rates {
            self.last_full_ack = Some(now);
        }
        Some((ack, self.numbered(now, ack, info)))
    }

    /// A full ACK of what arrived, whatever the rules: a question the peer answers with ACK2.
    pub(crate) fn ping(&mut self, now: Instant, rtt: u32, rtt_var: u32) -> (u64, Ack) {
        let info = AckInfo {
            rtt,
            rtt_var,
            available: self.available(rtt),
            receive_rate: None,
            bandwidth: None,
            counted_rate: None,
        };
        (self.contiguous, self.numbered(now, self.contiguous, info))
    }

    /// `info` as the next ACK, remembered for its ACK2.
    fn numbered(&mut self, now: Instant, ack: u64, info: AckInfo) -> Ack {
        self.ack_number = (self.ack_number + 1) & crate::seq::MAX_SEQ;
        if self.ack_number == 0 {
            self.ack_number = 1;
        }
        if self.acks.len() == ACK_HISTORY {
            self.acks.pop_front();
        }
        self.acks.push_back((self.ack_number, ack, now));
        Ack {
            number: self.ack_number,
            ack: 0,
            full: Some(info),
        }
    }

    /// An ACK2 for ACK `number`: the RTT it took, in microseconds.
    pub(crate) fn ack2(&mut self, now: Instant, number: u32) -> Option<u32> {
        let at = self.acks.iter().position(|&(n, _, _)| n == number)?;
        let (_, ack, sent) = self.acks[at];
        self.acks.drain(..=at);
        self.last_ack_acked = self.last_ack_acked.max(ack);
        u32::try_from(now.duration_since(sent).as_micros())
            .ok()
            .filter(|&rtt| rtt > 0)
    }

    /// The first `limit` losses not reported within `interval`, as runs in order.
    pub(crate) fn overdue_losses(
        &mut self,
        now: Instant,
        interval: Duration,
        limit: u64,
    ) -> Vec<(u64, u64)> {
        self.losses.overdue(now, interval, limit)
    }

    /// Packets missing now.
    pub(crate) fn loss_count(&self) -> u64 {
        self.losses.missing()
    }
}
