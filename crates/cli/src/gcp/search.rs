//! The streams of large files on a path: the first copy's rule, then the seed GridCopy's
//! "decrease streams" search (one fewer while throughput stays within 97 % of the best, then
//! hold), and an increase rule (a held path whose throughput moves by more than 15 % has
//! changed: a quarter more while each step gains 3 %), so a faster path is found again.

use std::sync::Mutex;

use ferry_client::{FirstSeconds, RetuneRule, Retuned};
use serde::{Deserialize, Serialize};

use super::congestion::Guard;
use super::tune::PathEntry;
use super::window::Window;

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
        crate::present::human_bytes(bdp as u64),
        crate::present::human_bytes(bytes),
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
        crate::present::human_bytes((bps / 8.0 * rtt) as u64)
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
mod tests {
    use super::*;
    use crate::gcp::tune::tests::entry;

    fn window(bytes: Option<u64>) -> Window {
        Window {
            bytes,
            from: "test".into(),
        }
    }

    #[test]
    fn the_first_copy_holds_the_bandwidth_delay_product_within_4_to_16_streams() {
        let linux = window(Some(4 << 20));
        assert_eq!(first_streams(4.0, &linux).0, 4);
        assert_eq!(first_streams(60.0, &linux).0, 8);
        assert_eq!(first_streams(75.0, &linux).0, 9);
        assert_eq!(first_streams(200.0, &linux).0, 16);
        // A DTN's 64 MiB buffers need no more than the floor.
        assert_eq!(first_streams(75.0, &window(Some(64 << 20))).0, 8);
        assert_eq!(first_streams(75.0, &window(None)).0, 8);
        // Servers held to 64 KiB: as many as the first copy may take.
        assert_eq!(first_streams(62.0, &window(Some(64 << 10))).0, 16);
    }

    /// Samples every `every` seconds of a run that moves `mbit` Mbit/s from `start` on.
    fn run_at(streams: u32, mbit: f64, start: f64, every: f64, until: f64) -> FirstSeconds {
        let mut samples = Vec::new();
        let mut t = every;
        while t <= until {
            let bytes = ((t - start).max(0.0) * mbit * 1e6 / 8.0) as u64;
            samples.push((t, bytes));
            t += every;
        }
        FirstSeconds {
            streams,
            samples,
            left: Some(10 << 30),
            data_rtt_ms: None,
        }
    }

    /// A third-party copy whose client sits 34 ms from both servers, 63 ms apart: 16 streams
    /// with 64 KiB windows move 70 Mbit/s. By the control channels' round trip they could move
    /// 124 (57 %, kept); by the one a server measured on the data connections, 66: held, so
    /// they double.
    #[test]
    fn the_senders_data_round_trip_stands_in_for_the_control_channels() {
        let small = Some(64 << 10);
        let run = run_at(16, 70.0, 1.0, 1.0, 12.0);
        let Retuned::Keep(why) = judge_first_seconds(&run, 34.0, small) else {
            panic!("by the control channels the windows are not the limit");
        };
        assert!(
            why.contains("round trip 34.0 ms on the control channels"),
            "{why}"
        );
        let said = FirstSeconds {
            data_rtt_ms: Some(63.0),
            ..run
        };
        let Retuned::Streams(32, why) = judge_first_seconds(&said, 34.0, small) else {
            panic!("by the data connections' round trip the windows hold the streams");
        };
        assert!(
            why.contains("round trip 63.0 ms on the data connections"),
            "{why}"
        );
    }

    #[test]
    fn the_first_seconds_double_streams_held_by_their_windows_and_keep_the_others() {
        let small = Some(64 << 10);
        // Past slow start (2 s) and over 2 s more: not yet.
        let early = run_at(16, 130.0, 1.0, 0.25, 4.5);
        assert_eq!(judge_first_seconds(&early, 30.0, small), Retuned::Wait);
        // 16 streams of 32 KiB per 30 ms allow 140 Mbit/s: 130 is held by the windows.
        let held = run_at(16, 130.0, 1.0, 0.25, 6.0);
        let Retuned::Streams(32, why) = judge_first_seconds(&held, 30.0, small) else {
            panic!("16 window-bound streams should double");
        };
        assert!(why.contains("130 Mbit/s on 16 streams"), "{why}");
        // A third-party copy's markers come every 5 s: judged at the third.
        let tp = run_at(8, 100.0, 3.0, 5.0, 15.0);
        assert!(matches!(
            judge_first_seconds(&tp, 30.0, Some(32 << 10)),
            Retuned::Streams(16, _)
        ));
        // The same rate with Linux's 4 MiB buffers is the path's, not the windows'.
        let Retuned::Keep(why) = judge_first_seconds(&held, 30.0, Some(4 << 20)) else {
            panic!("streams far from their windows' limit stay");
        };
        assert!(why.contains("the path, not the windows"), "{why}");
        // Too little left to pay for a restart; already at the most; nothing to judge by.
        let ending = FirstSeconds {
            left: Some(100 << 20),
            ..held.clone()
        };
        assert!(matches!(
            judge_first_seconds(&ending, 30.0, small),
            Retuned::Keep(w) if w.contains("too little to restart")
        ));
        let most = FirstSeconds {
            streams: 32,
            ..run_at(32, 260.0, 1.0, 0.25, 6.0)
        };
        assert!(matches!(
            judge_first_seconds(&most, 30.0, small),
            Retuned::Keep(_)
        ));
        assert!(matches!(
            judge_first_seconds(&held, 30.0, None),
            Retuned::Keep(_)
        ));
        // Nothing moved yet.
        let idle = run_at(16, 0.0, 0.0, 0.25, 8.0);
        assert_eq!(judge_first_seconds(&idle, 30.0, small), Retuned::Wait);
        // Held but too little left to restart: the copy keeps its streams, and the next copy
        // searches upwards all the same; streams the path holds leave the search alone.
        let rule = FirstSecondsRule::new(30.0, small, true, None);
        assert!(matches!(rule.judge(&ending), Retuned::Keep(_)));
        assert!(rule.found_held() && rule.settled().is_none());
        let rule = FirstSecondsRule::new(30.0, Some(4 << 20), true, None);
        assert!(matches!(rule.judge(&held), Retuned::Keep(_)));
        assert!(!rule.found_held());
    }

    fn guard(floor_mbit: f64) -> Guard {
        let cc = |n| ferry_net::Congestion::new(n).unwrap();
        Guard {
            tried: cc("cubic"),
            back_to: cc("bbr"),
            floor_bps: floor_mbit * 1e6,
        }
    }

    #[test]
    fn a_cubic_copy_whose_first_seconds_are_slow_goes_back_to_bbr_once_for_the_whole_copy() {
        // 60 ms, 1 % loss: cubic's 8 streams move 17 Mbit/s where bbr's copy moved 800.
        let rule = FirstSecondsRule::new(60.0, Some(4 << 20), false, Some(guard(400.0)));
        assert_eq!(rule.judge(&run_at(8, 17.0, 0.5, 0.25, 3.0)), Retuned::Wait);
        let Retuned::Sender(cc, why) = rule.judge(&run_at(8, 17.0, 0.5, 0.25, 6.0)) else {
            panic!("a slow cubic goes back to bbr");
        };
        assert_eq!(cc.as_str(), "bbr");
        assert!(
            why.contains("17 Mbit/s on 8 streams") && why.contains("under 400"),
            "{why}"
        );
        let (g, rate) = rule.fell_back().expect("remembered for the cache");
        assert_eq!(g.tried.as_str(), "cubic");
        assert!((rate - 17e6).abs() < 1e6, "{rate}");
        // Later files of the copy start on bbr and are not judged again.
        assert_eq!(
            rule.settled_sender().map(|c| c.to_string()),
            Some("bbr".into())
        );
        assert_eq!(
            rule.judge(&run_at(8, 800.0, 0.5, 0.25, 6.0)),
            Retuned::Keep(String::new())
        );
    }

    #[test]
    fn a_cubic_copy_that_keeps_up_stays_on_cubic_and_a_first_copy_still_judges_its_streams() {
        let rule = FirstSecondsRule::new(15.0, Some(4 << 20), false, Some(guard(470.0)));
        let Retuned::Keep(why) = rule.judge(&run_at(1, 950.0, 0.2, 0.25, 6.0)) else {
            panic!("cubic at the link's rate stays");
        };
        assert!(why.contains("cubic kept"), "{why}");
        assert!(rule.fell_back().is_none() && rule.settled_sender().is_none());
        // With the stream search started again the same rule doubles held streams.
        let both = FirstSecondsRule::new(30.0, Some(64 << 10), true, Some(guard(50.0)));
        assert!(matches!(
            both.judge(&run_at(16, 130.0, 1.0, 0.25, 6.0)),
            Retuned::Streams(32, _)
        ));
    }

    #[test]
    fn a_copy_remembers_the_most_streams_its_files_asked_for() {
        let rule = FirstSecondsRule::new(30.0, Some(64 << 10), true, None);
        assert_eq!(rule.settled(), None);
        rule.judge(&run_at(16, 130.0, 1.0, 0.25, 6.0));
        assert_eq!(rule.settled(), Some(32));
        rule.judge(&run_at(8, 65.0, 1.0, 0.25, 6.0));
        assert_eq!(
            rule.settled(),
            Some(32),
            "a later file asking fewer does not lower it"
        );
    }

    #[test]
    fn the_stream_search_decreases_while_throughput_holds_then_holds_and_goes_up_when_the_path_changes(
    ) {
        let mut e = entry();
        let mut why = Vec::new();
        let here = window(crate::gcp::window::autotune_max());
        let first = first_streams(e.rtt_ms, &here).0;
        assert_eq!(
            choose_streams(&e, &here, &mut why),
            first,
            "first copy at 75 ms"
        );
        step_search(&mut e, 8, 800e6);
        assert_eq!(e.search, Search::Decrease);
        assert_eq!(
            choose_streams(&e, &here, &mut why),
            7,
            "one fewer, as the seed"
        );
        step_search(&mut e, 7, 790e6); // within 97 %: fewer still
        assert_eq!(e.best_streams, Some(7));
        assert_eq!(choose_streams(&e, &here, &mut why), 6);
        step_search(&mut e, 6, 600e6); // worse: back to the best and hold
        assert_eq!(e.search, Search::Hold);
        assert_eq!(choose_streams(&e, &here, &mut why), 7);
        step_search(&mut e, 7, 805e6); // steady
        assert_eq!(e.search, Search::Hold);
        step_search(&mut e, 7, 500e6); // the path changed: search upwards
        assert_eq!(e.search, Search::Increase);
        assert_eq!(choose_streams(&e, &here, &mut why), 8);
        step_search(&mut e, 8, 600e6); // gained: on, a quarter more
        assert_eq!((e.best_streams, e.search), (Some(8), Search::Increase));
        assert_eq!(choose_streams(&e, &here, &mut why), 10);
        step_search(&mut e, 10, 601e6); // no gain: hold at 8
        assert_eq!(e.search, Search::Hold);
        assert_eq!(choose_streams(&e, &here, &mut why), 8);
    }
}
