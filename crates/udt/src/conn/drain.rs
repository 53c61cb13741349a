//! How fast the receiver frees room: the right edge of the flow window it offers (the ACK
//! point plus the packets it has room for), per second, over the last few full ACKs.
//!
//! While that window bounds the sender, the receiver's reader sets the pace, not the path:
//! a libudt reader on a busy host takes 2-3 Gbit/s where loopback carries far more. A sender
//! pacing at the path's rate meets a full window, waits for the next ACK (10 ms), then sends
//! what it freed at once: bursts that overflow the receiver's socket buffer, and holes
//! behind which libudt's reader may read nothing until the resends arrive.
//!
//! A window full of packets behind an unrepaired hole is not a slow reader: it does not
//! count as bounding the sender (on a lossy path, where holes are always open, the sender
//! paces as it would without this). The edge, which stands still behind a hole too, is
//! measured through it: left out (tried), the bursts came back against libudt on loopback.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The span the rate is measured over: a few of the receiver's 10 ms ACK intervals.
const SPAN: Duration = Duration::from_millis(40);
/// How long after the window last bounded the sender its rate still counts.
const RECENT: Duration = Duration::from_millis(100);

/// The receiver's window edges and when the window last bounded the sender.
#[derive(Debug, Default)]
pub(crate) struct Drain {
    /// (when, right edge), oldest first, one at least [`SPAN`] old kept as the start.
    edges: VecDeque<(Instant, u64)>,
    bound_at: Option<Instant>,
    /// The first packet past the last one reported lost, and the ACK point.
    hole_end: u64,
    acked: u64,
}

impl Drain {
    /// A full ACK: packets acknowledged in all, and the room the receiver offers beyond.
    pub(crate) fn ack(&mut self, now: Instant, acked: u64, available: u64) {
        self.acked = self.acked.max(acked);
        let edge = acked + available;
        // A receiver may offer less than before (libudt's buffer fills behind a hole): the
        // edge then stands still for the rate, it does not go back.
        let edge = self.edges.back().map_or(edge, |&(_, e)| e.max(edge));
        self.edges.push_back((now, edge));
        while self.edges.len() > 2 && now.duration_since(self.edges[1].0) >= SPAN {
            self.edges.pop_front();
        }
    }

    /// Packets up to `last` were reported lost.
    pub(crate) fn loss(&mut self, last: u64) {
        self.hole_end = self.hole_end.max(last + 1);
    }

    /// The flow window stopped a packet. Not while a reported loss is unrepaired: packets
    /// behind the hole fill the window then, not a slow reader (a lossy path's sender meets
    /// the window so, and paces as it would without this).
    pub(crate) fn bound(&mut self, now: Instant) {
        if self.acked >= self.hole_end {
            self.bound_at = Some(now);
        }
    }

    /// Packets per second the receiver frees, while its window recently bounded the sender.
    pub(crate) fn rate(&self, now: Instant) -> Option<f64> {
        self.bound_at.filter(|&t| now.duration_since(t) <= RECENT)?;
        let (&(t0, e0), &(t1, e1)) = (self.edges.front()?, self.edges.back()?);
        let span = t1.duration_since(t0);
        (span >= SPAN / 2 && e1 > e0).then(|| (e1 - e0) as f64 / span.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_of_the_edge_and_only_while_the_window_binds() {
        let t0 = Instant::now();
        let mut d = Drain::default();
        // A reader taking 100 000 packets a second, ACKs every 10 ms, 5 000 packets of room.
        for i in 0..10u64 {
            d.ack(t0 + Duration::from_millis(10 * i), 1_000 * i, 5_000);
        }
        let at = t0 + Duration::from_millis(90);
        assert_eq!(d.rate(at), None, "the window never bound");
        d.bound(at);
        let rate = d.rate(at).unwrap();
        assert!((rate - 100_000.0).abs() < 1.0, "{rate}");
        assert_eq!(d.rate(at + RECENT + Duration::from_millis(1)), None);
        // Room offered shrinks (a hole): the edge holds, it does not run backwards.
        d.ack(at + Duration::from_millis(10), 9_000, 1_000);
        assert!(d.rate(at + Duration::from_millis(10)).unwrap() > 0.0);
    }

    #[test]
    fn a_window_full_behind_a_hole_is_not_a_slow_reader() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut d = Drain::default();
        for i in 0..5u64 {
            d.ack(ms(10 * i), 1_000 * i, 5_000);
        }
        d.loss(4_500);
        d.bound(ms(40));
        assert_eq!(d.rate(ms(40)), None, "bound behind a hole");
        d.ack(ms(50), 5_000, 5_000);
        d.bound(ms(50));
        assert!(d.rate(ms(50)).is_some(), "the hole repaired");
    }
}
