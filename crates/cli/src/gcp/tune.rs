//! gcp's tuning: what the path between the two ends is (the round trip of the control
//! channels, the congestion controls the sending side offers, what earlier copies measured)
//! and what gcp chooses from it: the sending side's TCP congestion control and the streams of
//! large files. Buffers stay with the kernel's autotuning, which on Linux reaches further than
//! an explicit buffer may (`net.core.rmem_max` caps `SO_RCVBUF`, 208 KiB by default, where
//! autotuning goes to the third `net.ipv4.tcp_rmem` value, 6 MiB or more); streams cover
//! what one socket's window cannot.
//!
//! What a copy learns is kept per (source, destination) in `~/.cache/ferry/gcp-paths.json`
//! (`$XDG_CACHE_HOME`): the last probe (round trip, offered congestion controls; taken afresh
//! by every copy's own logins), and where the stream search (`search.rs`) stands.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use ferry_client::{ClientError, Location, Sessions};
use ferry_net::Congestion;
use serde::{Deserialize, Serialize};

use super::search::{choose_streams, step_search, FirstSecondsRule, Search};
use super::window::Window;

/// Round trips from this up are long: there one loss costs cubic seconds of halved rate.
const LONG_RTT_MS: f64 = 10.0;
/// Copies moving less than this do not measure the path (logins and small files dominate).
const MEASURE_BYTES: u64 = 64 << 20;
/// What copies learnt of a path is kept this long after the last one.
const KEPT_S: u64 = 30 * 86_400;

/// What gcp knows of one (source, destination) path.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct PathEntry {
    /// Control-channel round trip, ms (the larger end's in a third-party copy).
    pub(super) rtt_ms: f64,
    /// Congestion controls the sending side offers.
    pub(super) offered: Vec<String>,
    /// What sends: "this host", or the source server.
    pub(super) sender: String,
    /// When it was probed (seconds since the epoch).
    pub(super) probed_at: u64,
    /// Streams of large files in the last measured copy, and its throughput (bit/s).
    pub(super) streams: Option<u32>,
    pub(super) bps: Option<f64>,
    /// The fewest streams that gave the best throughput so far, and that throughput.
    pub(super) best_streams: Option<u32>,
    pub(super) best_bps: Option<f64>,
    pub(super) search: Search,
    /// The congestion control of the last measured copy (`None`: the sender's default).
    pub(super) congestion: Option<String>,
    /// What the client's own data connections saw in it.
    pub(super) data_rtt_ms: Option<f64>,
    pub(super) retransmitted: Option<f64>,
    /// Measured copies.
    pub(super) runs: u32,
}

/// The cache file.
#[derive(Debug, Default, Serialize, Deserialize)]
struct CacheFile {
    paths: BTreeMap<String, PathEntry>,
}

/// `--congestion`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CongestionArg {
    /// Chosen from the path.
    Auto,
    /// The sender's default.
    System,
    /// This one.
    Named(Congestion),
}

impl std::str::FromStr for CongestionArg {
    type Err = String;
    fn from_str(s: &str) -> Result<CongestionArg, String> {
        match s {
            "auto" => Ok(CongestionArg::Auto),
            "system" | "default" => Ok(CongestionArg::System),
            name => Congestion::new(name).map(CongestionArg::Named),
        }
    }
}

/// What the user fixed on the command line.
pub(crate) struct Asked {
    pub(crate) streams: Option<u32>,
    pub(crate) congestion: CongestionArg,
}

/// gcp's choice for one copy, and what it learns from it.
pub(crate) struct Tuning {
    /// Streams of files of 16 MiB and more (`None`: the user's `-n`, or nothing to tune).
    pub(crate) large_file_streams: Option<u32>,
    /// The sending side's congestion control (`None`: its default).
    pub(crate) congestion: Option<Congestion>,
    /// The measurements, the choices and the reasons, for `--explain`.
    pub(crate) explained: Vec<String>,
    /// The first copy on a path looks again once its first seconds are measured.
    first_seconds: Option<std::sync::Arc<FirstSecondsRule>>,
    learning: Option<Learning>,
}

/// What is needed to learn from the copy.
struct Learning {
    key: String,
    entry: PathEntry,
    file: PathBuf,
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

/// The cache file: `$XDG_CACHE_HOME/ferry/gcp-paths.json`, else `~/.cache/ferry/…`.
fn cache_file() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|d| d.join("ferry/gcp-paths.json"))
}

fn load(file: &PathBuf) -> CacheFile {
    std::fs::read(file)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

pub(super) fn now_s() -> u64 {
    ferry_proto::clock::now_since_epoch().as_secs()
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

impl PathEntry {
    /// A path just probed, with nothing measured on it yet.
    pub(super) fn probed(rtt_ms: f64, offered: Vec<String>, sender: String) -> PathEntry {
        PathEntry {
            rtt_ms,
            offered,
            sender,
            probed_at: now_s(),
            streams: None,
            bps: None,
            best_streams: None,
            best_bps: None,
            search: Search::Decrease,
            congestion: None,
            data_rtt_ms: None,
            retransmitted: None,
            runs: 0,
        }
    }
}

impl Tuning {
    /// The rule that re-chooses streams from a file's first seconds, when this copy has one.
    pub(crate) fn retune(&self) -> Option<ferry_client::Retune> {
        self.first_seconds
            .as_ref()
            .map(|r| ferry_client::Retune(std::sync::Arc::clone(r) as std::sync::Arc<_>))
    }

    /// No tuning: what `--no-tune` and local copies get.
    pub(crate) fn none(why: &str) -> Tuning {
        Tuning {
            large_file_streams: None,
            congestion: None,
            explained: vec![format!("tuning: none ({why})")],
            first_seconds: None,
            learning: None,
        }
    }

    /// Chooses the settings for copying `sources` to `dest`; a probe logs in over `sessions`,
    /// which the copy then goes on with. A login that fails is the copy's failure: it is
    /// returned, not tried again by the copy.
    pub(crate) async fn choose(
        sources: &[Location],
        dest: &Location,
        sessions: &mut Sessions,
        asked: &Asked,
    ) -> Result<Tuning, ClientError> {
        let Some(src) = sources.first() else {
            return Ok(Tuning::none("nothing to copy"));
        };
        if matches!((src, dest), (Location::Local(_), Location::Local(_))) {
            return Ok(Tuning::none("both ends are on this host"));
        }
        let key = format!("{} -> {}", end_name(src), end_name(dest));
        let file = cache_file();
        let mut cache = file.as_ref().map(load).unwrap_or_default();
        let mut explained = Vec::new();
        // The probe is the logins the copy needs anyway (it goes on over the same sessions), so
        // the path is measured afresh every time; the cache keeps what copies learnt.
        let (probed, window) = probe(src, dest, sessions).await?;
        let first = if sources.len() > 1 {
            " (the first source's)"
        } else {
            ""
        };
        let kept = cache
            .paths
            .remove(&key)
            .filter(|e| now_s().saturating_sub(e.probed_at) < KEPT_S);
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
        let congestion = choose_congestion(&entry, asked.congestion, &mut explained);
        let streams = match asked.streams {
            Some(n) => {
                explained.push(format!("streams: {n}, as -n says"));
                None
            }
            None => Some(choose_streams(&entry, &window, &mut explained)),
        };
        // With nothing measured on the path yet, the first seconds of the copy measure it.
        let first_seconds = (streams.is_some() && entry.best_streams.is_none()).then(|| {
            explained.push(
                "then: the first seconds of each large file measure the path; streams held by \
                 their windows double (see the notes with -v)"
                    .into(),
            );
            std::sync::Arc::new(FirstSecondsRule::new(entry.rtt_ms, window.bytes))
        });
        Ok(Tuning {
            large_file_streams: streams,
            congestion,
            explained,
            first_seconds,
            learning: file.map(|file| Learning {
                key,
                entry,
                file,
                streams,
            }),
        })
    }

    /// Learns from a finished copy (`bytes` in `elapsed`, the client's data connections'
    /// `tcp`), keeps it in the cache, and says what was measured and what comes next.
    pub(crate) fn learn(
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
        let congestion = self.congestion.map(|c| c.to_string());
        if l.entry.runs > 0 && l.entry.congestion != congestion {
            // Throughput under another congestion control says nothing of the streams.
            said.push(format!(
                "the congestion control changed ({} -> {}): the stream search starts again",
                l.entry.congestion.as_deref().unwrap_or("default"),
                congestion.as_deref().unwrap_or("default")
            ));
            l.entry = PathEntry::probed(l.entry.rtt_ms, l.entry.offered, l.entry.sender);
        }
        l.entry.congestion = congestion;
        let restreamed = self.first_seconds.as_ref().and_then(|r| {
            use ferry_client::RetuneRule;
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
        } else if bytes < MEASURE_BYTES {
            Some(format!(
                "under {}",
                crate::present::human_bytes(MEASURE_BYTES)
            ))
        } else if l.streams.is_some() && !large {
            Some("no file went over the chosen streams".to_string())
        } else {
            None
        };
        if let Some(why) = skip {
            said.push(format!(
                "measured: {} in {secs:.2} s; not used for the stream search ({why})",
                crate::present::human_bytes(bytes),
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
        let mut cache = load(&l.file);
        cache.paths.insert(l.key, l.entry);
        if let Err(e) = save(&l.file, &cache) {
            said.push(format!(
                "cannot keep what was learnt in {}: {e}",
                l.file.display()
            ));
        }
        said
    }
}

fn save(file: &PathBuf, cache: &CacheFile) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    serde_json::to_writer_pretty(&mut tmp, cache)?;
    tmp.persist(file).map_err(|e| e.error)?;
    Ok(())
}

/// The sending side's congestion control.
fn choose_congestion(
    e: &PathEntry,
    asked: CongestionArg,
    explained: &mut Vec<String>,
) -> Option<Congestion> {
    let offered = |name: &str| e.offered.iter().any(|o| o == name);
    let list = if e.offered.is_empty() {
        "none".to_string()
    } else {
        e.offered.join(" ")
    };
    match asked {
        CongestionArg::System => {
            explained.push("congestion control: the sender's default, as --congestion says".into());
            None
        }
        CongestionArg::Named(cc) if offered(cc.as_str()) => {
            explained.push(format!("congestion control: {cc}, as --congestion says"));
            Some(cc)
        }
        CongestionArg::Named(cc) => {
            explained.push(format!(
                "congestion control: the sender's default; {} does not offer {cc} (offers: {list})",
                e.sender
            ));
            None
        }
        CongestionArg::Auto if e.rtt_ms < LONG_RTT_MS => {
            explained.push(format!(
                "congestion control: the sender's default (a {:.1} ms round trip recovers from \
                 a loss within milliseconds)",
                e.rtt_ms
            ));
            None
        }
        CongestionArg::Auto if offered("bbr") => {
            explained.push(format!(
                "congestion control: bbr on {}'s data connections ({:.0} ms round trip: cubic \
                 halves its window at every loss and takes seconds to grow back, bbr paces at \
                 the measured bottleneck rate; --congestion system keeps the default)",
                e.sender, e.rtt_ms
            ));
            Congestion::new("bbr").ok()
        }
        CongestionArg::Auto => {
            explained.push(format!(
                "congestion control: the sender's default; {} offers no bbr (offers: {list}{})",
                e.sender,
                if e.sender == "this host" {
                    ", net.ipv4.tcp_allowed_congestion_control"
                } else {
                    "; a ferry server lists what it offers in FEAT, other servers choose none"
                }
            ));
            None
        }
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
pub(super) mod tests {
    use super::*;

    pub(in crate::gcp) fn entry() -> PathEntry {
        let offered = vec!["reno".into(), "cubic".into(), "bbr".into()];
        PathEntry::probed(75.0, offered, "this host".into())
    }

    #[test]
    fn long_paths_get_bbr_where_the_sender_offers_it_and_short_ones_keep_the_default() {
        let mut why = Vec::new();
        let e = entry();
        assert_eq!(
            choose_congestion(&e, CongestionArg::Auto, &mut why).map(|c| c.to_string()),
            Some("bbr".into())
        );
        let short = PathEntry {
            rtt_ms: 0.3,
            ..entry()
        };
        assert!(choose_congestion(&short, CongestionArg::Auto, &mut why).is_none());
        let globus = PathEntry {
            offered: vec![],
            sender: "dtn:2811".into(),
            ..entry()
        };
        assert!(choose_congestion(&globus, CongestionArg::Auto, &mut why).is_none());
        assert!(why.last().unwrap().contains("offers no bbr"), "{why:?}");
        let named = CongestionArg::Named(Congestion::new("cubic").unwrap());
        assert_eq!(
            choose_congestion(&e, named, &mut why).map(|c| c.to_string()),
            Some("cubic".into())
        );
        assert!(choose_congestion(&e, CongestionArg::System, &mut why).is_none());
    }

    #[test]
    fn the_cache_survives_a_round_trip_through_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ferry/gcp-paths.json");
        let mut c = CacheFile::default();
        c.paths.insert("a -> b".into(), entry());
        save(&file, &c).unwrap();
        let back = load(&file);
        assert_eq!(back.paths["a -> b"].rtt_ms, 75.0);
        std::fs::write(&file, "not json").unwrap();
        assert!(
            load(&file).paths.is_empty(),
            "a damaged cache is started again"
        );
    }
}
