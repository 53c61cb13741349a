//! Flow-control windows that follow the path instead of capping it. Without `window=` or a
//! buffer size, a connection starts with [`DEFAULT_WINDOW`](super::DEFAULT_WINDOW) each way and
//! grows it, never shrinks it, as the path shows it needs more, up to [`MAX_WINDOW`]:
//! - receiving: twice the bytes one round trip delivered (the bandwidth-delay product measured
//!   at the receiver, as Linux's receive-buffer autotuning does and as UDT sizes its flow
//!   window from arrival rate × RTT);
//! - sending: twice the congestion window (itself held to 1.5× the measured BDP, `bounded`),
//!   so the bytes quinn buffers for a stream stay in proportion to what the path carries.
//!
//! 64 MiB holds 2.5 Gbit/s at 200 ms; a 10 Gbit/s, 200 ms path grows it to about 500 MB.

use std::time::{Duration, Instant};

/// The most a window grows to.
pub(super) const MAX_WINDOW: u64 = 1 << 30;
/// How often the windows are looked at, at most (and at least once a round trip).
const LONGEST_TICK: Duration = Duration::from_secs(1);
const SHORTEST_TICK: Duration = Duration::from_millis(10);

/// The receive window after `bytes` arrived in `elapsed` on a path of round trip `rtt`: twice a
/// round trip's worth, never less than `window`, at most [`MAX_WINDOW`].
pub(super) fn grown(window: u64, bytes: u64, elapsed: Duration, rtt: Duration) -> u64 {
    if elapsed.is_zero() {
        return window;
    }
    let per_round_trip = bytes as f64 * rtt.as_secs_f64() / elapsed.as_secs_f64();
    ((2.0 * per_round_trip) as u64).clamp(window, MAX_WINDOW.max(window))
}

/// Grows `conn`'s windows from `start` while it lives.
pub(super) async fn follow(conn: quinn::Connection, start: u64) {
    let (mut receive, mut send) = (start, start);
    let mut last = (Instant::now(), conn.stats().udp_rx.bytes);
    loop {
        let tick = conn.rtt().clamp(SHORTEST_TICK, LONGEST_TICK);
        tokio::select! {
            _ = conn.closed() => return,
            _ = tokio::time::sleep(tick) => {}
        }
        let stats = conn.stats();
        let now = Instant::now();
        let arrived = stats.udp_rx.bytes.saturating_sub(last.1);
        let r = grown(receive, arrived, now - last.0, stats.path.rtt);
        if r > receive {
            receive = r;
            conn.set_receive_window(quinn::VarInt::from_u64(r).unwrap_or(quinn::VarInt::MAX));
        }
        let s = stats
            .path
            .cwnd
            .saturating_mul(2)
            .clamp(send, MAX_WINDOW.max(send));
        if s > send {
            send = s;
            conn.set_send_window(s);
        }
        last = (now, stats.udp_rx.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_grow_to_twice_a_round_trip_and_never_shrink_or_pass_the_cap() {
        let ms = Duration::from_millis;
        let w = 64 << 20;
        // 1.25 GB/s (10 Gbit/s) for 200 ms at 200 ms: 250 MB a round trip, 500 MB window.
        assert_eq!(grown(w, 250_000_000, ms(200), ms(200)), 500_000_000);
        // The same rate measured over 50 ms.
        assert_eq!(grown(w, 62_500_000, ms(50), ms(200)), 500_000_000);
        // 1 Gbit/s at 200 ms needs 50 MB: the 64 MiB start holds it, no change.
        assert_eq!(grown(w, 25_000_000, ms(200), ms(200)), w);
        // A quiet moment shrinks nothing; a huge burst stops at the cap.
        assert_eq!(grown(500_000_000, 0, ms(200), ms(200)), 500_000_000);
        assert_eq!(grown(w, 10_000_000_000, ms(100), ms(200)), MAX_WINDOW);
        assert_eq!(grown(w, 1, Duration::ZERO, ms(200)), w);
    }
}
