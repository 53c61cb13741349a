//! The sending half: bytes packed into packets, kept until acknowledged, resent from the loss
//! list first, paced by the controller.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use super::drain::Drain;

/// When a packet went out: last (for RTT samples) and first (for rate samples: a resend's
/// time would make the packets a filled hole releases look sent in no time at all).
#[derive(Debug, Clone, Copy)]
struct SendState {
    at: Instant,
    first_at: Instant,
    /// A loss report named it.
    reported: bool,
}

/// Most packets the buffer grows to (the largest flow window a receiver offers here).
const MAX_PACKETS: usize = 131_072;
/// Transmissions within this much of each other share one mark of the recent ones.
const MARK_GRAIN: Duration = Duration::from_micros(200);

/// How long a transmission counts as in the network (`span`: a round trip, its variation
/// and the ACK interval), and the round trip the count is scaled to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Horizon {
    pub(crate) span: Duration,
    pub(crate) rtt: Duration,
}

/// Packets written and not yet acknowledged.
#[derive(Debug)]
pub(crate) struct Sender {
    /// Packets from `una` on; those from `next` on are not sent yet (the last may still grow).
    packets: VecDeque<Vec<u8>>,
    /// When each packet from `una` to `next` last went out, and what was known then.
    sent_at: VecDeque<SendState>,
    spare: Vec<Vec<u8>>,
    payload: usize,
    limit_packets: usize,
    /// First packet not acknowledged.
    pub(crate) una: u64,
    /// First packet no full ACK covered. A light ACK frees packets (libudt's sender moves its
    /// window on one too) but is no delivery: libudt's receiver makes data readable only as
    /// its timer's full ACK goes out, and after a shutdown it sends none, so what only a light
    /// ACK covered would never reach its reader.
    pub(crate) confirmed: u64,
    /// Next new packet to send.
    pub(crate) next: u64,
    /// Packets the peer reported lost (or the timer gave up on), to resend first.
    pub(crate) losses: BTreeSet<u64>,
    /// Packets the peer can take in flight, from its last ACK.
    pub(crate) flow_window: u64,
    /// Bytes acknowledged.
    pub(crate) acked_bytes: u64,
    /// Packets acknowledged that had been resent.
    pub(crate) acked_resent: u64,
    /// Transmissions in all, new and resent.
    transmissions: u64,
    /// (when, transmissions before then) of the recent ones, one mark per [`MARK_GRAIN`]:
    /// what went out within the last round trip is what the network may still hold.
    marks: VecDeque<(Instant, u64)>,
    /// The last [`Horizon`]'s `rtt / span`.
    scale: f64,
    /// How fast the receiver frees room.
    pub(crate) drain: Drain,
}

impl Sender {
    pub(crate) fn new(payload: usize, buffer_bytes: usize, flow_window: u64) -> Sender {
        Sender {
            packets: VecDeque::new(),
            sent_at: VecDeque::new(),
            spare: Vec::new(),
            payload,
            limit_packets: (buffer_bytes / payload).max(32),
            una: 0,
            confirmed: 0,
            next: 0,
            losses: BTreeSet::new(),
            flow_window,
            acked_bytes: 0,
            acked_resent: 0,
            transmissions: 0,
            marks: VecDeque::new(),
            scale: 1.0,
            drain: Drain::default(),
        }
    }

    /// Takes as many bytes of `data` as the buffer has room for.
    pub(crate) fn write(&mut self, data: &[u8]) -> usize {
        let mut taken = 0;
        while taken < data.len() {
            let unsent = (self.una + self.packets.len() as u64) > self.next;
            let last_open = unsent && self.packets.back().is_some_and(|p| p.len() < self.payload);
            if !last_open {
                if self.packets.len() >= self.limit_packets {
                    break;
                }
                let fresh = self.spare.pop().unwrap_or_default();
                self.packets.push_back(fresh);
            }
            let Some(packet) = self.packets.back_mut() else {
                break;
            };
            let take = (self.payload - packet.len()).min(data.len() - taken);
            packet.extend_from_slice(&data[taken..taken + take]);
            taken += take;
        }
        taken
    }

    /// Lets the buffer hold what `window` packets in flight need, and a quarter more to send
    /// next: a fixed buffer smaller than the path's product would cap the rate. It never
    /// shrinks below what the configuration asked, nor grows past the largest flow window.
    pub(crate) fn grow_to(&mut self, window: f64) {
        let want = (window * 1.25) as usize;
        if want > self.limit_packets {
            self.limit_packets = want.min(MAX_PACKETS);
        }
    }

    /// Whether the buffer has room for more bytes.
    pub(crate) fn writable(&self) -> bool {
        self.packets.len() < self.limit_packets
            || self.packets.back().is_some_and(|p| {
                p.len() < self.payload && self.una + self.packets.len() as u64 > self.next
            })
    }

    /// Packets sent and not acknowledged.
    pub(crate) fn in_flight(&self) -> u64 {
        self.next - self.una
    }

    /// Whether a packet was written and not sent yet.
    pub(crate) fn has_unsent(&self) -> bool {
        self.una + (self.packets.len() as u64) > self.next
    }

    /// Whether everything written was acknowledged, the last of it by a full ACK.
    pub(crate) fn all_acked(&self) -> bool {
        self.packets.is_empty() && self.confirmed >= self.una
    }

    /// The bytes of packet `count`, if still held.
    pub(crate) fn packet(&self, count: u64) -> Option<&[u8]> {
        let index = count.checked_sub(self.una)?;
        self.packets
            .get(usize::try_from(index).ok()?)
            .map(Vec::as_slice)
    }

    /// When the newest packet `ack` covers went out, if it is still held and went out once
    /// (Karn's rule: an ACK after a resend cannot say which sending it answers, and taking
    /// the resend's time once set a 200 ms path's minimum RTT to a few milliseconds).
    pub(crate) fn sent_time(&self, ack: u64) -> Option<Instant> {
        let index = ack.checked_sub(self.una + 1)?;
        self.sent_at
            .get(usize::try_from(index).ok()?)
            .filter(|s| s.at == s.first_at)
            .map(|s| s.at)
    }

    /// When the newest packet `ack` covers first went out, if it is still held.
    pub(crate) fn first_sent_time(&self, ack: u64) -> Option<Instant> {
        let index = ack.checked_sub(self.una + 1)?;
        self.sent_at
            .get(usize::try_from(index).ok()?)
            .map(|s| s.first_at)
    }

    /// Notes that a loss report named `[from, to]`. Returns whether it named one of them
    /// before: libudt's receivers report a loss once, ferry's repeat theirs.
    pub(crate) fn note_reported(&mut self, from: u64, to: u64) -> bool {
        let from = from.max(self.una);
        let mut again = false;
        for c in from..=to {
            let Some(s) = usize::try_from(c - self.una)
                .ok()
                .and_then(|i| self.sent_at.get_mut(i))
            else {
                break;
            };
            again |= s.reported;
            s.reported = true;
        }
        again
    }

    /// Everything before `ack` arrived: frees it. Returns packets newly acknowledged.
    pub(crate) fn acknowledge(&mut self, ack: u64) -> u64 {
        if ack <= self.una || ack > self.next {
            return 0;
        }
        let count = ack - self.una;
        for _ in 0..count {
            if self.sent_at.pop_front().is_some_and(|s| s.at != s.first_at) {
                self.acked_resent += 1;
            }
            if let Some(mut p) = self.packets.pop_front() {
                self.acked_bytes += p.len() as u64;
                p.clear();
                if self.spare.len() < 1024 {
                    self.spare.push(p);
                }
            }
        }
        self.una = ack;
        self.losses = self.losses.split_off(&ack);
        count
    }

    /// The next packet to send: a lost one first, else a new one within `window` packets in
    /// flight. Returns its count and whether it is resent.
    ///
    /// `window` bounds the packets unacknowledged, or with a `horizon` those sent within it
    /// (see [`Sender::in_network`]); the receiver's flow window always bounds those
    /// unacknowledged.
    pub(crate) fn next_to_send(
        &mut self,
        now: Instant,
        window: u64,
        horizon: Option<Horizon>,
    ) -> Option<(u64, bool)> {
        while let Some(lost) = self.losses.pop_first() {
            if lost >= self.una && lost < self.next {
                if let Some(s) = self.sent_at.get_mut((lost - self.una) as usize) {
                    s.at = now;
                }
                self.note_transmission(now);
                return Some((lost, true));
            }
        }
        let held = match horizon {
            Some(h) => self.in_network(now, h),
            None => self.in_flight(),
        };
        if self.has_unsent() && held < window && self.in_flight() < self.flow_window {
            self.note_transmission(now);
            let count = self.next;
            self.next += 1;
            self.sent_at.push_back(SendState {
                at: now,
                first_at: now,
                reported: false,
            });
            return Some((count, false));
        }
        None
    }

    fn note_transmission(&mut self, now: Instant) {
        if self
            .marks
            .back()
            .is_none_or(|&(t, _)| now.saturating_duration_since(t) >= MARK_GRAIN)
        {
            self.marks.push_back((now, self.transmissions));
        }
        self.transmissions += 1;
    }

    /// Packets in flight, counted by what was sent (or resent) within the horizon's span of
    /// `now` and scaled to one round trip: what the network may still hold. Without selective
    /// ACKs the packets behind a hole stay unacknowledged for a round trip or more although
    /// they arrived; counted as in flight they would hold the window shut on any path with
    /// random loss. A packet older than a round trip and its ACK interval was delivered or
    /// lost, and a loss is reported (and the resend counted again).
    pub(crate) fn in_network(&mut self, now: Instant, horizon: Horizon) -> u64 {
        if let Some(since) = now.checked_sub(horizon.span) {
            while self.marks.front().is_some_and(|&(t, _)| t < since) {
                self.marks.pop_front();
            }
        }
        self.scale = (horizon.rtt.as_secs_f64() / horizon.span.as_secs_f64().max(1e-6)).min(1.0);
        self.in_network_before()
    }

    /// [`Sender::in_network`] as of its last call.
    pub(crate) fn in_network_before(&self) -> u64 {
        self.marks.front().map_or(0, |&(_, before)| {
            ((self.transmissions - before) as f64 * self.scale).ceil() as u64
        })
    }

    /// When the oldest recent transmission leaves the horizon.
    pub(crate) fn in_network_falls_at(&self, horizon: Duration) -> Option<Instant> {
        self.marks.front().map(|&(t, _)| t + horizon)
    }

    /// Marks lost the oldest outstanding packet and every one a loss report named, when last
    /// sent before `before`: a resend lost again is found so, and the packets a receiver
    /// holds behind its holes are not sent twice. Returns how many were marked.
    pub(crate) fn lose_reported_older_than(&mut self, before: Instant) -> u64 {
        let mut marked = 0;
        for (i, s) in self.sent_at.iter().enumerate() {
            if (i == 0 || s.reported) && s.at < before && self.losses.insert(self.una + i as u64) {
                marked += 1;
            }
        }
        marked
    }

    /// Marks lost every outstanding packet last sent before `before`: the timer's guess,
    /// which spares packets that have not had a round trip's time yet.
    pub(crate) fn lose_older_than(&mut self, before: Instant) {
        for (i, s) in self.sent_at.iter().enumerate() {
            if s.at < before {
                self.losses.insert(self.una + i as u64);
            }
        }
    }

    /// Marks `[from, to]` lost (clipped to what is outstanding), except packets resent after
    /// `resent_after` (a report older than their resend). Returns how many are new.
    pub(crate) fn lose(&mut self, from: u64, to: u64, resent_after: Option<Instant>) -> u64 {
        let from = from.max(self.una);
        let to = to.min(self.next.saturating_sub(1));
        let mut new = 0;
        let mut c = from;
        while c <= to && self.next > 0 {
            let stale = resent_after.is_some_and(|after| {
                self.sent_at
                    .get((c - self.una) as usize)
                    .is_some_and(|s| s.at != s.first_at && s.at > after)
            });
            if !stale && self.losses.insert(c) {
                new += 1;
            }
            c += 1;
        }
        new
    }
}
