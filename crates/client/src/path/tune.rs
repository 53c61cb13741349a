//! The tuning of one copy: what the path between the two ends is (the round trip of the control
//! channels, the congestion controls the sending side offers, what earlier copies measured)
//! and what is chosen from it: the sending side's TCP congestion control and the streams of
//! large files. Buffers stay with the kernel's autotuning, which on Linux reaches further than
//! an explicit buffer may (`net.core.rmem_max` caps `SO_RCVBUF`, 208 KiB by default, where
//! autotuning goes to the third `net.ipv4.tcp_rmem` value, 6 MiB or more); streams cover
//! what one socket's window cannot.
//!
//! What a copy learns is kept per (source, destination) in the path cache (`cache.rs`): the
//! last probe (round trip, offered congestion controls; taken afresh by every copy's own
//! logins), and where the stream search (`search.rs`) stands.

use std::time::Duration;

use ferry_net::Congestion;

use super::cache::{PathCache, PathEntry, Search};
use super::congestion::{self, CongestionArg};
use super::search::{choose_streams, step_search, FirstSecondsRule};
use super::window::Window;
use crate::{ClientError, Location, Sessions};

/// Copies moving less than this do not measure the path (logins and small files dominate).
const MEASURE_BYTES: u64 = 64 << 20;

/// What the user fixed (gcp's `-n` and `--congestion`).
#[derive(Debug, Clone, Copy)]
pub struct Asked {
    /// Streams of every file, not tuned.
    pub streams: Option<u32>,
    /// The sending side's congestion control, or how to choose it.
    pub congestion: CongestionArg,
}

/// The choice for one copy, and what it learns from it.
#[derive(Debug)]
pub struct Tuning {
    /// Streams of files of 16 MiB and more (`None`: the user's `-n`, or nothing to tune).
    pub large_file_streams: Option<u32>,
    /// The sending side's congestion control (`None`: its default).
    pub congestion: Option<Congestion>,
    /// The data channels stay on TCP (a copy that tries cubic measures TCP's cubic, where
    /// `--transport auto` would take a loss-based sender on a long path to QUIC).
    pub tcp_only: bool,
    /// The measurements, the choices and the reasons, for `--explain`.
    pub explained: Vec<String>,
    /// The first copy on a path looks again once its first seconds are measured.
    first_seconds: Option<std::sync::Arc<FirstSecondsRule>>,
    learning: Option<Learning>,
}

/// What is needed to learn from the copy.
#[derive(Debug)]
struct Learning {
    key: String,
    entry: PathEntry,
    cache: PathCache,
    /// Streams that large files got (none when the user fixed them).
    streams: Option<u32>,
}

/// One end of the copy. A local end names the host: a home directory (and its cache) may be
/// shared by the nodes of a cluster, whose paths and kernels differ.
fn end_name(loc: &Location) -> String {
    match loc {
        Location::Local(_) => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            format!("this host ({})", host.trim())
        }
        Location::Remote(r) => format!("{}://{}", r.scheme.name(), r.authority()),
    }
}

/// The congestion controls this host lets this process give its sockets, by name.
fn offered_here() -> Vec<String> {
    Congestion::offered_here()
        .iter()
        .map(|c| c.to_string())
        .collect()
}

/// Probes the path over `sessions` (the logins the copy then uses): the round trip, what the
/// sender offers, and who sends.
async fn probe(
    src: &Location,
    dst: &Location,
    sessions: &mut Sessions,
) -> Result<(PathEntry, Window), ClientError> {
    let (rtt, offered, sender, window) = match (src, dst) {
        (Location::Remote(s), Location::Local(_)) => {
            let session = sessions.get(s).await?;
            let send = session.autotune_max_offered().1;
            let window = Window::of(
                send,
                ferry_net::autotune_max(true),
                &s.authority(),
                "this host",
            );
            (
                session.rtt(),
                session.congestion_offered(),
                s.authority(),
                window,
            )
        }
        (Location::Remote(s), Location::Remote(d)) => {
            let (a, b) = sessions.pair(s, d).await?;
            let (send, receive) = (a.autotune_max_offered().1, b.autotune_max_offered().0);
            let window = Window::of(send, receive, &s.authority(), &d.authority());
            (
                a.rtt().max(b.rtt()),
                a.congestion_offered(),
                s.authority(),
                window,
            )
        }
        (Location::Local(_), Location::Remote(d)) => {
            let s = sessions.get(d).await?;
            let receive = s.autotune_max_offered().0;
            let window = Window::of(
                ferry_net::autotune_max(false),
                receive,
                "this host",
                &d.authority(),
            );
            (s.rtt(), offered_here(), "this host".to_string(), window)
        }
        // Not probed: `choose` tunes no local copy.
        (Location::Local(_), Location::Local(_)) => (
            Duration::ZERO,
            Vec::new(),
            String::new(),
            Window::of(None, None, "", ""),
        ),
    };
    Ok((
        PathEntry::probed(rtt.as_secs_f64() * 1e3, offered, sender),
        window,
    ))
}

impl Tuning {
    /// The rule that re-chooses streams from a file's first seconds, when this copy has one.
    pub fn retune(&self) -> Option<crate::Retune> {
        self.first_seconds
            .as_ref()
            .map(|r| crate::Retune(std::sync::Arc::clone(r) as std::sync::Arc<_>))
    }

    /// Sets the choice on a copy's `options`: large files' streams, the rule of their first
    /// seconds, the sender's congestion control, and TCP where the choice keeps to it.
    pub fn apply(&self, options: &mut crate::CopyOptions) {
        self.apply_to_file(&mut options.request);
        options.retune = self.retune();
    }

    /// [`Tuning::apply`] for one file's request, which runs without the first-seconds rule.
    pub fn apply_to_file(&self, request: &mut crate::FileRequest) {
        request.large_file_streams = self.large_file_streams;
        request.congestion = self.congestion;
        if self.tcp_only {
            request.transport = None;
        }
    }

    /// [`Tuning::learn`] from a copy's summary.
    pub fn learn_from(self, summary: &crate::CopySummary, elapsed: Duration) -> Vec<String> {
        let files = (summary.done, summary.failed);
        self.learn(summary.bytes, elapsed, files, summary.tcp.as_ref())
    }

    /// No tuning: what `--no-tune` and local copies get.
    pub fn none(why: &str) -> Tuning {
        Tuning {
            large_file_streams: None,
            congestion: None,
            tcp_only: false,
            explained: vec![format!("tuning: none ({why})")],
            first_seconds: None,
            learning: None,
        }
    }

    /// Chooses the settings for copying `sources` to `dest` from what `cache` holds of the
    /// path (nothing is kept where it is `None`); a probe logs in over `sessions`, which the
    /// copy then goes on with. A login that fails is the copy's failure: it is returned, not
    /// tried again by the copy.
    pub async fn choose(
        sources: &[Location],
        dest: &Location,
        sessions: &mut Sessions,
        asked: &Asked,
        cache: Option<PathCache>,
    ) -> Result<Tuning, ClientError> {
        let Some(src) = sources.first() else {
            return Ok(Tuning::none("nothing to copy"));
        };
        if matches!((src, dest), (Location::Local(_), Location::Local(_))) {
            return Ok(Tuning::none("both ends are on this host"));
        }
        let key = format!("{} -> {}", end_name(src), end_name(dest));
        let mut explained = Vec::new();
        // The probe is the logins the copy needs anyway (it goes on over the same sessions), so
        // the path is measured afresh every time; the cache keeps what copies learnt.
        let (probed, window) = probe(src, dest, sessions).await?;
        let first = if sources.len() > 1 {
            " (the first source's)"
        } else {
            ""
        };
        let kept = cache.as_ref().and_then(|c| c.get(&key));
        let entry = match kept {
            Some(e) => {
                explained.push(format!(
                    "path {key}: control-channel round trip {:.1} ms{first}; {} measured copies \
                     in the cache",
                    probed.rtt_ms, e.runs
                ));
                PathEntry {
                    rtt_ms: probed.rtt_ms,
                    offered: probed.offered,
                    sender: probed.sender,
                    probed_at: probed.probed_at,
                    ..e
                }
            }
            None => {
                explained.push(format!(
                    "path {key}: control-channel round trip {:.1} ms{first}; nothing in the cache",
                    probed.rtt_ms
                ));
                probed
            }
        };
        let choice = congestion::choose(&entry, asked.congestion, &mut explained);
        let streams = match asked.streams {
            Some(n) => {
                explained.push(format!("streams: {n}, as -n says"));
                None
            }
            None => Some(choose_streams(&entry, &window, &mut explained)),
        };
        // With nothing measured on the path yet, the first seconds of the copy measure it.
        let restream = streams.is_some() && entry.best_streams.is_none();
        if restream {
            explained.push(
                "then: the first seconds of each large file measure the path; streams held by \
                 their windows double (see the notes with -v)"
                    .into(),
            );
        }
        let tcp_only = choice.guard.is_some();
        let first_seconds = (restream || tcp_only).then(|| {
            std::sync::Arc::new(FirstSecondsRule::new(
                entry.rtt_ms,
                window.bytes,
                restream,
                choice.guard,
            ))
        });
        Ok(Tuning {
            large_file_streams: streams,
            congestion: choice.congestion,
            tcp_only,
            explained,
            first_seconds,
            learning: cache.map(|cache| Learning {
                key,
                entry,
                cache,
                streams,
            }),
        })
    }

    /// Learns from a finished copy (`bytes` in `elapsed`, the client's data connections'
    /// `tcp`), keeps it in the cache, and says what was measured and what comes next.
    pub fn learn(
        self,
        bytes: u64,
        elapsed: Duration,
        files: (usize, usize),
        tcp: Option<&ferry_net::TcpStats>,
    ) -> Vec<String> {
        let (done, failed) = files;
        let Some(mut l) = self.learning else {
            return Vec::new();
        };
        let mut said = Vec::new();
        let secs = elapsed.as_secs_f64().max(1e-6);
        let bps = bytes as f64 * 8.0 / secs;
        if let Some(t) = tcp {
            l.entry.data_rtt_ms = (t.rtt_us > 0).then(|| f64::from(t.rtt_us) / 1e3);
            l.entry.retransmitted = (t.bytes_sent > 0).then(|| t.retransmit_ratio());
            said.push(describe_tcp(t));
        }
        let mut congestion = self.congestion.map(|c| c.to_string());
        let fell_back = self.first_seconds.as_ref().and_then(|r| r.fell_back());
        if let Some((guard, rate)) = &fell_back {
            // The copy ended on bbr: its throughput is neither's, but cubic's first seconds say
            // enough to keep to bbr on this path.
            l.entry.by_congestion.insert(guard.tried.to_string(), *rate);
            said.push(format!(
                "{} moved {:.0} Mbit/s in its first seconds, under half of {}'s last copy: the \
                 next copies go on {}",
                guard.tried,
                rate / 1e6,
                guard.back_to,
                guard.back_to
            ));
            congestion = Some(guard.back_to.to_string());
        }
        if l.entry.runs > 0 && l.entry.congestion != congestion {
            // Throughput under another congestion control says nothing of the streams.
            said.push(format!(
                "the congestion control changed ({} -> {}): the stream search starts again",
                l.entry.congestion.as_deref().unwrap_or("default"),
                congestion.as_deref().unwrap_or("default")
            ));
            let by_congestion = std::mem::take(&mut l.entry.by_congestion);
            l.entry = PathEntry::probed(l.entry.rtt_ms, l.entry.offered, l.entry.sender);
            l.entry.by_congestion = by_congestion;
        }
        l.entry.congestion = congestion.clone();
        let restreamed = self.first_seconds.as_ref().and_then(|r| {
            use crate::RetuneRule;
            r.settled()
        });
        if let Some(n) = restreamed {
            // The first seconds showed the streams held by their windows: the copy ended on
            // more, and the search goes on upwards from there.
            l.streams = Some(n);
        }
        // The search learns from copies whose large files had the chosen streams: what the data
        // connections show (the most any file had), or a single file where no figures came.
        let large = match (tcp, l.streams) {
            (Some(t), Some(n)) => t.connections == n,
            (None, Some(_)) => done == 1,
            _ => false,
        };
        let skip = if failed > 0 {
            Some("files failed".to_string())
        } else if fell_back.is_some() {
            Some("the congestion control changed during it".to_string())
        } else if bytes < MEASURE_BYTES {
            Some(format!("under {}", crate::human_bytes(MEASURE_BYTES)))
        } else if l.streams.is_some() && !large {
            Some("no file went over the chosen streams".to_string())
        } else {
            None
        };
        if let (None, Some(cc)) = (&skip, &congestion) {
            l.entry.by_congestion.insert(cc.clone(), bps);
        }
        if let Some(why) = skip {
            said.push(format!(
                "measured: {} in {secs:.2} s; not used for the stream search ({why})",
                crate::human_bytes(bytes),
            ));
        } else if let Some(n) = l.streams {
            said.push(format!(
                "measured: {:.0} Mbit/s with {n} streams for large files",
                bps / 1e6
            ));
            let next = step_search(&mut l.entry, n, bps);
            let held = self.first_seconds.as_ref().is_some_and(|r| r.found_held());
            if restreamed.is_some() || held {
                l.entry.search = Search::Increase;
                said.push(
                    "next copy: more streams, while each step gains 3 % (the first seconds \
                     found the streams held by their windows)"
                        .into(),
                );
            } else {
                said.push(next);
            }
        } else {
            said.push(format!("measured: {:.0} Mbit/s", bps / 1e6));
        }
        if let Err(e) = l.cache.put(&l.key, l.entry) {
            said.push(format!(
                "cannot keep what was learnt in {}: {e}",
                l.cache.file().display()
            ));
        }
        said
    }
}

/// What the client's own data connections saw.
fn describe_tcp(t: &ferry_net::TcpStats) -> String {
    let cc = if t.congestion.is_empty() {
        "TCP"
    } else {
        &t.congestion
    };
    if t.bytes_sent == 0 {
        // A receiving side's round-trip estimate says little: its loss shows as reordering.
        return format!(
            "data connections (receiving): {} over {cc}, {} packets arrived out of order",
            t.connections, t.out_of_order
        );
    }
    let mut s = format!(
        "data connections (sending): {} over {cc}, round trip {:.1} ms",
        t.connections,
        f64::from(t.rtt_us) / 1e3
    );
    if t.min_rtt_us > 0 {
        s.push_str(&format!(" (least {:.1} ms)", f64::from(t.min_rtt_us) / 1e3));
    }
    s.push_str(&format!(
        ", {:.3} % of the bytes sent again",
        t.retransmit_ratio() * 100.0
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::super::cache::tests::entry;
    use super::*;

    #[test]
    fn a_copy_on_cubic_is_learnt_whether_it_kept_up_or_went_back_to_bbr() {
        use crate::RetuneRule;
        let dir = tempfile::tempdir().unwrap();
        let cache = PathCache::at(dir.path().join("ferry/gcp-paths.json"));
        let on_bbr = PathEntry {
            streams: Some(8),
            bps: Some(800e6),
            best_streams: Some(8),
            best_bps: Some(800e6),
            search: Search::Hold,
            congestion: Some("bbr".into()),
            runs: 3,
            by_congestion: [("bbr".to_string(), 800e6)].into(),
            ..entry()
        };
        let cc = |n| Congestion::new(n).ok();
        let guard = || super::congestion::Guard {
            tried: Congestion::new("cubic").unwrap(),
            back_to: Congestion::new("bbr").unwrap(),
            floor_bps: 400e6,
        };
        let copy = |rule: &std::sync::Arc<FirstSecondsRule>| Tuning {
            large_file_streams: Some(8),
            congestion: cc("cubic"),
            tcp_only: true,
            explained: Vec::new(),
            first_seconds: Some(std::sync::Arc::clone(rule)),
            learning: Some(Learning {
                key: "k".into(),
                entry: on_bbr.clone(),
                cache: cache.clone(),
                streams: Some(8),
            }),
        };
        // Kept up: 1 GiB in 9 s. cubic's figure is kept beside bbr's; its stream search
        // starts again from this copy.
        let rule = std::sync::Arc::new(FirstSecondsRule::new(75.0, None, false, Some(guard())));
        copy(&rule).learn(1 << 30, Duration::from_secs(9), (1, 0), None);
        let e = cache.get("k").unwrap();
        assert_eq!(e.congestion.as_deref(), Some("cubic"));
        assert_eq!(e.by_congestion["bbr"], 800e6);
        assert!((e.by_congestion["cubic"] - 954e6).abs() < 1e6, "{e:?}");
        assert_eq!((e.runs, e.streams), (1, Some(8)));

        // Went back: 8 streams moved 17 Mbit/s in the first seconds.
        let rule = std::sync::Arc::new(FirstSecondsRule::new(75.0, None, false, Some(guard())));
        let samples = (1..=40u32)
            .map(|i| (f64::from(i) * 0.25, u64::from(i) * 531_250))
            .collect();
        let slow = crate::FirstSeconds {
            streams: 8,
            samples,
            left: Some(1 << 30),
            data_rtt_ms: None,
        };
        assert!(matches!(rule.judge(&slow), crate::Retuned::Sender(..)));
        let said = copy(&rule).learn(1 << 30, Duration::from_secs(30), (1, 0), None);
        let e = cache.get("k").unwrap();
        assert!(
            said.iter().any(|s| s.contains("next copies go on bbr")),
            "{said:?}"
        );
        assert_eq!(e.congestion.as_deref(), Some("bbr"));
        assert!((e.by_congestion["cubic"] - 17e6).abs() < 1e6, "{e:?}");
        assert_eq!(
            e.by_congestion["bbr"], 800e6,
            "a mixed copy measures neither"
        );
        assert_eq!(
            (e.runs, e.best_streams),
            (3, Some(8)),
            "bbr's search goes on"
        );
    }
}
