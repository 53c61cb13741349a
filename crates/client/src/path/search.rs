//! The streams of large files on a path: the first copy's rule, then the seed GridCopy's
//! "decrease streams" search (one fewer while throughput stays within 97 % of the best, then
//! hold), and an increase rule (a held path whose throughput moves by more than 15 % has
//! changed: a quarter more while each step gains 3 %), so a faster path is found again.

use std::sync::Mutex;

use super::cache::{PathEntry, Search};
use super::congestion::Guard;
use super::window::Window;
use crate::{FirstSeconds, RetuneRule, Retuned};

/// Above this round trip large files start with at least 8 streams, else 4 (as `ferry copy`).
const WAN_RTT_MS: f64 = 20.0;
/// The most streams a first copy starts with.
const FIRST_MAX: u32 = 16;
/// The most streams the search goes to.
const MAX_STREAMS: u32 = 32;
/// The bandwidth the first copy on a path assumes for its bandwidth-delay product (the seed's).
const ASSUMED_BPS: f64 = 1e9;

/// Streams for large files: the search's next step, or the first copy's rule.
pub(super) fn choose_streams(e: &PathEntry, window: &Window, explained: &mut Vec<String>) -> u32 {
    let (Some(n), Some(best), Some(best_bps)) = (e.streams, e.best_streams, e.best_bps) else {
        let (n, why) = first_streams(e.rtt_ms, window);
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
pub(super) fn first_streams(rtt_ms: f64, window: &Window) -> (u32, String) {
    let base = if rtt_ms > WAN_RTT_MS { 8 } else { 4 };
    let bdp = ASSUMED_BPS / 8.0 * rtt_ms / 1e3;
    let Some(bytes) = window.bytes.filter(|w| *w > 0) else {
        return (base, "the socket buffer limits cannot be read".into());
    };
    let needed = (4.0 * bdp / bytes as f64).ceil() as u32;
    let n = needed.clamp(base, FIRST_MAX.max(base));
    let why = format!(
        "bandwidth-delay product {} at an assumed 1 Gbit/s; a socket buffers up to {} on this \
         path ({}), half of it in flight, twice over for losses: {needed}, within {base} to \
         {FIRST_MAX}",
        crate::human_bytes(bdp as u64),
        crate::human_bytes(bytes),
        window.from
    );
    (n, why)
}

/// How long a restart costs, about: a file with less than this left at the measured rate keeps
/// its streams (new connections start slowly again, and the logins cost round trips).
const RESTREAM_LEFT_S: f64 = 20.0;
/// A run whose streams moved this much of what their windows allow is held by the windows.
const WINDOW_BOUND: f64 = 0.75;

/// The rate of a run's first seconds, once they are measured.
struct FirstRate {
    /// bit/s.
    bps: f64,
    /// The round trip it was judged by, seconds.
    rtt: f64,
    /// What was measured, in words.
    measured: String,
}

/// The rate over `max(2 s, 10 RTTs)` once slow start is past (`max(2 s, 20 RTTs)` after the
/// data began); `None` until then. The round trip measured on the data connections stands in
/// for the control channels' `rtt_ms` when a server said one.
fn first_rate(first: &FirstSeconds, rtt_ms: f64) -> Option<FirstRate> {
    let (rtt_ms, by) = match first.data_rtt_ms {
        Some(ms) => (ms, "the data connections"),
        None => (rtt_ms, "the control channels"),
    };
    let rtt = (rtt_ms / 1e3).max(1e-4);
    let &(began, _) = first.samples.iter().find(|(_, b)| *b > 0)?;
    let ramp = (20.0 * rtt).max(2.0);
    let span = (10.0 * rtt).max(2.0);
    let &(t0, b0) = first.samples.iter().find(|(t, _)| *t >= began + ramp)?;
    let &(t1, b1) = first.samples.iter().find(|(t, _)| *t >= t0 + span)?;
    let bps = b1.saturating_sub(b0) as f64 * 8.0 / (t1 - t0);
    let measured = format!(
        "the first {:.0} s moved {:.0} Mbit/s on {} streams (round trip {rtt_ms:.1} ms on \
         {by}, bandwidth-delay product {})",
        t1 - began,
        bps / 1e6,
        first.streams.max(1),
        crate::human_bytes((bps / 8.0 * rtt) as u64)
    );
    Some(FirstRate { bps, rtt, measured })
}

/// The first copy's second look, from what the file's first seconds measured (the seed assumed
/// 1 Gbit/s; this measures instead). Once slow start is past (`max(2 s, 20 RTTs)` after the
/// data began), the rate over the next `max(2 s, 10 RTTs)` is the path's bandwidth when the
/// streams are not held by their windows (each moves at most half its buffer, `window / 2`,
/// per round trip): then the streams stay. When they are held (at least 3/4 of what the
/// windows allow), the path may carry more than they can take: the copy resumes with twice the
/// streams, at most 32, unless less than 20 s of it is left.
#[cfg(test)]
fn judge_first_seconds(first: &FirstSeconds, rtt_ms: f64, window: Option<u64>) -> Retuned {
    verdict(first, rtt_ms, window).0
}

/// [`judge_first_seconds`], and whether the streams were found held by their windows (whatever
/// was done about it). `rtt_ms` is the control channels' round trip; the round trip measured on
/// the data connections stands in for it when a server said one (a ferry server does in its
/// perf markers; a Globus server does not, and a third-party copy between Globus servers is
/// judged by the longer of the two control channels' round trips).
fn verdict(first: &FirstSeconds, rtt_ms: f64, window: Option<u64>) -> (Retuned, bool) {
    let Some(FirstRate { bps, rtt, measured }) = first_rate(first, rtt_ms) else {
        return (Retuned::Wait, false);
    };
    let n = first.streams.max(1);
    let Some(window) = window.filter(|w| *w > 0) else {
        let why = format!("{measured}; the socket buffer limits cannot be read: streams kept");
        return (Retuned::Keep(why), false);
    };
    let allowed = f64::from(n) * window as f64 / 2.0 / rtt * 8.0;
    if bps < WINDOW_BOUND * allowed {
        let why = format!(
            "{measured}, {:.0} % of what their windows allow ({:.0} Mbit/s): the path, not the \
             windows, sets the rate; streams kept",
            100.0 * bps / allowed,
            allowed / 1e6
        );
        return (Retuned::Keep(why), false);
    }
    if n >= MAX_STREAMS {
        let why = format!(
            "{measured}, held by their windows; already at the most streams ({MAX_STREAMS})"
        );
        return (Retuned::Keep(why), true);
    }
    let left_s = first.left.map_or(f64::INFINITY, |b| b as f64 * 8.0 / bps);
    if left_s < RESTREAM_LEFT_S {
        let why = format!(
            "{measured}, held by their windows; {left_s:.0} s left, too little to restart on more"
        );
        return (Retuned::Keep(why), true);
    }
    let more = (2 * n).min(MAX_STREAMS);
    let streams = Retuned::Streams(
        more,
        format!(
            "{measured}, {:.0} % of what their windows allow ({:.0} Mbit/s): the path carries \
             more; resuming the rest on {more} streams from the ranges stored",
            100.0 * bps / allowed,
            allowed / 1e6
        ),
    );
    (streams, true)
}

/// [`judge_first_seconds`] for the files of one copy, remembering the most streams it asked
/// for: later large files start there, and the cache learns it.
#[derive(Debug)]
pub(super) struct FirstSecondsRule {
    pub(super) rtt_ms: f64,
    pub(super) window: Option<u64>,
    /// Whether streams held by their windows restart on more (the first copy on a path).
    restream: bool,
    /// A copy on cubic that goes back to bbr when its first seconds are slow.
    guard: Option<Guard>,
    settled: Mutex<Option<u32>>,
    /// Some file's streams were held by their windows (restarted on more or not): the next
    /// copy searches upwards.
    held: std::sync::atomic::AtomicBool,
    /// The guard's rate when some file went back (bit/s): later files start there.
    fell_back: Mutex<Option<f64>>,
}

impl FirstSecondsRule {
    pub(super) fn new(
        rtt_ms: f64,
        window: Option<u64>,
        restream: bool,
        guard: Option<Guard>,
    ) -> FirstSecondsRule {
        FirstSecondsRule {
            rtt_ms,
            window,
            restream,
            guard,
            settled: Mutex::new(None),
            held: std::sync::atomic::AtomicBool::new(false),
            fell_back: Mutex::new(None),
        }
    }

    /// Whether some file's streams were found held by their windows.
    pub(super) fn found_held(&self) -> bool {
        self.held.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The guard, and the first seconds' rate, when some file went back on it.
    pub(super) fn fell_back(&self) -> Option<(Guard, f64)> {
        let rate = self.fell_back.lock().ok().and_then(|r| *r)?;
        self.guard.clone().map(|g| (g, rate))
    }
}

impl RetuneRule for FirstSecondsRule {
    fn judge(&self, first: &FirstSeconds) -> Retuned {
        let fell_back = self.fell_back().is_some();
        if let Some(g) = self.guard.as_ref().filter(|_| !fell_back) {
            let Some(r) = first_rate(first, self.rtt_ms) else {
                return Retuned::Wait;
            };
            if r.bps < g.floor_bps {
                if let Ok(mut f) = self.fell_back.lock() {
                    *f = Some(r.bps);
                }
                return Retuned::Sender(
                    g.back_to,
                    format!(
                        "{} on {}: under {:.0} Mbit/s, half of what {} moved on this path, so \
                         it drops packets {} cannot ride over: resuming the rest on {} from \
                         the ranges stored",
                        r.measured,
                        g.tried,
                        g.floor_bps / 1e6,
                        g.back_to,
                        g.tried,
                        g.back_to
                    ),
                );
            }
            if !self.restream {
                return Retuned::Keep(format!(
                    "{} on {}: at least half of what {} moved on this path; {} kept",
                    r.measured, g.tried, g.back_to, g.tried
                ));
            }
        }
        if !self.restream {
            // An earlier file went back already, and this one started there: nothing to say.
            return Retuned::Keep(String::new());
        }
        let (v, held) = verdict(first, self.rtt_ms, self.window);
        if held {
            self.held.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if let Retuned::Streams(n, _) = &v {
            if let Ok(mut s) = self.settled.lock() {
                *s = Some(s.map_or(*n, |m| m.max(*n)));
            }
        }
        v
    }

    fn settled(&self) -> Option<u32> {
        self.settled.lock().ok().and_then(|s| *s)
    }

    fn settled_sender(&self) -> Option<ferry_net::Congestion> {
        self.fell_back().map(|(g, _)| g.back_to)
    }
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
mod tests;
