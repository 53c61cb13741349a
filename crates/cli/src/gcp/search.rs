//! The streams of large files on a path: the first copy's rule, then the seed GridCopy's
//! "decrease streams" search (one fewer while throughput stays within 97 % of the best, then
//! hold), and an increase rule (a held path whose throughput moves by more than 15 % has
//! changed: a quarter more while each step gains 3 %), so a faster path is found again.

use serde::{Deserialize, Serialize};

use super::tune::{autotune_max, PathEntry};

/// Above this round trip large files start with at least 8 streams, else 4 (as `ferry copy`).
const WAN_RTT_MS: f64 = 20.0;
/// The most streams a first copy starts with.
const FIRST_MAX: u32 = 16;
/// The most streams the search goes to.
const MAX_STREAMS: u32 = 32;
/// The bandwidth the first copy on a path assumes for its bandwidth-delay product (the seed's).
const ASSUMED_BPS: f64 = 1e9;

/// Where the stream search is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Search {
    /// Fewer streams next time, while throughput holds.
    Decrease,
    /// Keep the best.
    Hold,
    /// More streams next time, while throughput grows.
    Increase,
}

/// Streams for large files: the search's next step, or the first copy's rule.
pub(super) fn choose_streams(e: &PathEntry, explained: &mut Vec<String>) -> u32 {
    let (Some(n), Some(best), Some(best_bps)) = (e.streams, e.best_streams, e.best_bps) else {
        let (n, why) = first_streams(e.rtt_ms, autotune_max());
        explained.push(format!(
            "streams: {n} for files of 16 MiB and more (first copy on this path: {why}; smaller \
             files: 1 stream, pipelined)"
        ));
        return n;
    };
    let (next, why) = match e.search {
        // The seed's step down: one stream at a time.
        Search::Decrease if n > 1 => (
            n - 1,
            format!(
                "trying fewer: {n} streams gave {:.0} Mbit/s, the best so far {:.0} with {best}",
                e.bps.unwrap_or(0.0) / 1e6,
                best_bps / 1e6
            ),
        ),
        // Back up faster: a changed path may need many more.
        Search::Increase if n < MAX_STREAMS => (
            (n + (n / 4).max(1)).min(MAX_STREAMS),
            format!(
                "trying more: the path changed; {n} streams gave {:.0} Mbit/s",
                e.bps.unwrap_or(0.0) / 1e6
            ),
        ),
        _ => (
            best,
            format!("the best found: {:.0} Mbit/s with {best}", best_bps / 1e6),
        ),
    };
    explained.push(format!(
        "streams: {next} for files of 16 MiB and more ({why})"
    ));
    next
}

/// The first copy's streams on a path of `rtt_ms`, where one socket's autotuning may buffer
/// `window` bytes: at least 8 on paths over 20 ms (4 on shorter ones), and enough to hold the
/// bandwidth-delay product at an assumed 1 Gbit/s (the seed's) when each socket's usable window
/// is half its buffer (the rest holds unacknowledged and unsent data), times the seed's
/// loss_factor of 2 (streams hit by a loss slow down while the others take up the rate); at most
/// 16. Measured at 200 ms with 0.1 % loss and Linux's default buffers (4 MiB): 8 streams 0.44
/// Gbit/s, 12 0.58, 16 0.65, 24 0.66.
pub(super) fn first_streams(rtt_ms: f64, window: Option<u64>) -> (u32, String) {
    let base = if rtt_ms > WAN_RTT_MS { 8 } else { 4 };
    let bdp = ASSUMED_BPS / 8.0 * rtt_ms / 1e3;
    let Some(window) = window.filter(|w| *w > 0) else {
        return (
            base,
            "this host's socket buffer limits cannot be read".into(),
        );
    };
    let needed = (4.0 * bdp / window as f64).ceil() as u32;
    let n = needed.clamp(base, FIRST_MAX.max(base));
    let why = format!(
        "bandwidth-delay product {} at an assumed 1 Gbit/s; a socket buffers up to {} here \
         (net.ipv4.tcp_rmem, tcp_wmem), half of it in flight, twice over for losses: {needed}, \
         within {base} to {FIRST_MAX}",
        crate::present::human_bytes(bdp as u64),
        crate::present::human_bytes(window)
    );
    (n, why)
}

/// One step of the stream search after a copy with `n` streams at `bps`; says what changed.
pub(super) fn step_search(e: &mut PathEntry, n: u32, bps: f64) -> String {
    e.runs += 1;
    e.streams = Some(n);
    e.bps = Some(bps);
    let (Some(best), Some(best_bps)) = (e.best_streams, e.best_bps) else {
        e.best_streams = Some(n);
        e.best_bps = Some(bps);
        e.search = if n > 1 {
            Search::Decrease
        } else {
            Search::Hold
        };
        return format!("next copy: {}", next_words(e));
    };
    match e.search {
        Search::Decrease => {
            if bps >= 0.97 * best_bps {
                e.best_streams = Some(n);
                e.best_bps = Some(bps.max(best_bps));
                if n <= 1 {
                    e.search = Search::Hold;
                }
            } else {
                e.search = Search::Hold;
            }
        }
        Search::Hold => {
            if n == best && (bps < 0.85 * best_bps || bps > 1.15 * best_bps) {
                // The path changed: search again from here, upwards.
                e.best_bps = Some(bps);
                e.search = Search::Increase;
            } else if n == best {
                e.best_bps = Some(best_bps.max(bps));
            }
        }
        Search::Increase => {
            if bps >= 1.03 * best_bps {
                e.best_streams = Some(n);
                e.best_bps = Some(bps);
                if n >= MAX_STREAMS {
                    e.search = Search::Hold;
                }
            } else {
                e.search = Search::Hold;
            }
        }
    }
    format!("next copy: {}", next_words(e))
}

fn next_words(e: &PathEntry) -> String {
    match e.search {
        Search::Decrease => "fewer streams, while throughput stays within 97 % of the best".into(),
        Search::Increase => "more streams, while each step gains 3 %".into(),
        Search::Hold => format!(
            "{} streams, the best found ({:.0} Mbit/s)",
            e.best_streams.unwrap_or(1),
            e.best_bps.unwrap_or(0.0) / 1e6
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcp::tune::tests::entry;

    #[test]
    fn the_first_copy_holds_the_bandwidth_delay_product_within_4_to_16_streams() {
        let linux = Some(4 << 20);
        assert_eq!(first_streams(4.0, linux).0, 4);
        assert_eq!(first_streams(60.0, linux).0, 8);
        assert_eq!(first_streams(75.0, linux).0, 9);
        assert_eq!(first_streams(200.0, linux).0, 16);
        // A DTN's 64 MiB buffers need no more than the floor.
        assert_eq!(first_streams(75.0, Some(64 << 20)).0, 8);
        assert_eq!(first_streams(75.0, None).0, 8);
    }

    #[test]
    fn the_stream_search_decreases_while_throughput_holds_then_holds_and_goes_up_when_the_path_changes(
    ) {
        let mut e = entry();
        let mut why = Vec::new();
        let first = first_streams(e.rtt_ms, autotune_max()).0;
        assert_eq!(choose_streams(&e, &mut why), first, "first copy at 75 ms");
        step_search(&mut e, 8, 800e6);
        assert_eq!(e.search, Search::Decrease);
        assert_eq!(choose_streams(&e, &mut why), 7, "one fewer, as the seed");
        step_search(&mut e, 7, 790e6); // within 97 %: fewer still
        assert_eq!(e.best_streams, Some(7));
        assert_eq!(choose_streams(&e, &mut why), 6);
        step_search(&mut e, 6, 600e6); // worse: back to the best and hold
        assert_eq!(e.search, Search::Hold);
        assert_eq!(choose_streams(&e, &mut why), 7);
        step_search(&mut e, 7, 805e6); // steady
        assert_eq!(e.search, Search::Hold);
        step_search(&mut e, 7, 500e6); // the path changed: search upwards
        assert_eq!(e.search, Search::Increase);
        assert_eq!(choose_streams(&e, &mut why), 8);
        step_search(&mut e, 8, 600e6); // gained: on, a quarter more
        assert_eq!((e.best_streams, e.search), (Some(8), Search::Increase));
        assert_eq!(choose_streams(&e, &mut why), 10);
        step_search(&mut e, 10, 601e6); // no gain: hold at 8
        assert_eq!(e.search, Search::Hold);
        assert_eq!(choose_streams(&e, &mut why), 8);
    }
}
