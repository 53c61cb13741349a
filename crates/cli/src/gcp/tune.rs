//! gcp's tuning: what the path between the two ends is (the round trip of the control
//! channels, the congestion controls the sending side offers, what earlier copies measured)
//! and what gcp chooses from it: the sending side's TCP congestion control and the streams of
//! large files. Buffers stay with the kernel's autotuning, which on Linux reaches further than
//! an explicit buffer may (`net.core.rmem_max` caps `SO_RCVBUF`, 208 KiB by default, where
//! autotuning goes to the third `net.ipv4.tcp_rmem` value, 6 MiB or more); streams cover
//! what one socket's window cannot.
//!
//! What a copy learns is kept per (source, destination) in `~/.cache/ferry/gcp-paths.json`
//! (`$XDG_CACHE_HOME`): the probe (round trip, offered congestion controls), and the seed
//! GridCopy's "decrease streams" search: after a measured copy the next one tries fewer
//! streams (a quarter less) while throughput stays within 97 % of the best, then holds. A
//! held path whose throughput moves by more than 15 % either way has changed, and the search
//! goes up again (a quarter more while each step gains 3 %), so a faster path is found again.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use ferry_client::{GsiOptions, GsiSetup, Location, RemoteSession, RemoteUrl};
use ferry_net::Congestion;
use serde::{Deserialize, Serialize};

/// Round trips from this up are long: there one loss costs cubic seconds of halved rate.
const LONG_RTT_MS: f64 = 10.0;
/// Above this round trip large files start with 8 streams, else 4 (as `ferry copy`).
const WAN_RTT_MS: f64 = 20.0;
/// Copies moving less than this do not measure the path (logins and small files dominate).
const MEASURE_BYTES: u64 = 64 << 20;
/// A cached probe is trusted this long.
const PROBE_TTL_S: u64 = 7 * 86_400;
/// The most streams the search goes to.
const MAX_STREAMS: u32 = 32;
/// The bandwidth the first copy on a path assumes for its bandwidth-delay product (the seed's).
const ASSUMED_BPS: f64 = 1e9;

/// Where the stream search is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Search {
    /// Fewer streams next time, while throughput holds.
    Decrease,
    /// Keep the best.
    Hold,
    /// More streams next time, while throughput grows.
    Increase,
}

/// What gcp knows of one (source, destination) path.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PathEntry {
    /// Control-channel round trip, ms (the larger end's in a third-party copy).
    rtt_ms: f64,
    /// Congestion controls the sending side offers.
    offered: Vec<String>,
    /// What sends: "this host", or the source server.
    sender: String,
    /// When it was probed (seconds since the epoch).
    probed_at: u64,
    /// Streams of large files in the last measured copy, and its throughput (bit/s).
    streams: Option<u32>,
    bps: Option<f64>,
    /// The fewest streams that gave the best throughput so far, and that throughput.
    best_streams: Option<u32>,
    best_bps: Option<f64>,
    search: Search,
    /// The congestion control of the last measured copy (`None`: the sender's default).
    congestion: Option<String>,
    /// What the client's own data connections saw in it.
    data_rtt_ms: Option<f64>,
    retransmitted: Option<f64>,
    /// Measured copies.
    runs: u32,
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

/// One end of the copy.
fn end_name(loc: &Location) -> String {
    match loc {
        Location::Local(_) => "this host".into(),
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

fn now_s() -> u64 {
    ferry_proto::clock::now_since_epoch().as_secs()
}

/// The congestion controls this host lets this process give its sockets.
fn offered_here() -> Vec<String> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|n| Congestion::new(n).ok())
        .filter(|c| c.check().is_ok())
        .map(|c| c.to_string())
        .collect()
}

/// The largest window one socket's autotuning reaches here (`net.ipv4.tcp_rmem`'s third value).
fn autotune_max() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem")
        .ok()?
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

/// Logs in to `url` and reads its round trip and offered congestion controls.
async fn probe_server(url: &RemoteUrl, gsi: &GsiSetup) -> Result<(Duration, Vec<String>), String> {
    let session = RemoteSession::connect(url, gsi)
        .await
        .map_err(|e| e.to_string())?;
    Ok((session.rtt(), session.congestion_offered()))
}

/// Probes the path: (round trip, what the sender offers, who sends, what was done).
fn probe(src: &Location, dst: &Location, gsi: &GsiOptions) -> Result<PathEntry, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let setup = GsiSetup::new(gsi.clone());
    rt.block_on(async {
        let (rtt, offered, sender) = match (src, dst) {
            (Location::Local(_), Location::Remote(d)) => {
                let (rtt, _) = probe_server(d, &setup).await?;
                (rtt, offered_here(), "this host".to_string())
            }
            (Location::Remote(s), Location::Local(_)) => {
                let (rtt, offered) = probe_server(s, &setup).await?;
                (rtt, offered, s.authority())
            }
            (Location::Remote(s), Location::Remote(d)) => {
                let ((a, offered), (b, _)) =
                    tokio::try_join!(probe_server(s, &setup), probe_server(d, &setup))?;
                (a.max(b), offered, s.authority())
            }
            (Location::Local(_), Location::Local(_)) => return Err("a local copy".to_string()),
        };
        Ok(PathEntry {
            rtt_ms: rtt.as_secs_f64() * 1e3,
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
        })
    })
}

impl Tuning {
    /// No tuning: what `--no-tune` and local copies get.
    pub(crate) fn none(why: &str) -> Tuning {
        Tuning {
            large_file_streams: None,
            congestion: None,
            explained: vec![format!("tuning: none ({why})")],
            learning: None,
        }
    }

    /// Chooses the settings for copying `sources` to `dest`.
    pub(crate) fn choose(
        sources: &[Location],
        dest: &Location,
        gsi: &GsiOptions,
        asked: &Asked,
    ) -> Tuning {
        let Some(src) = sources.first() else {
            return Tuning::none("nothing to copy");
        };
        if matches!((src, dest), (Location::Local(_), Location::Local(_))) {
            return Tuning::none("both ends are on this host");
        }
        let key = format!("{} -> {}", end_name(src), end_name(dest));
        let file = cache_file();
        let mut cache = file.as_ref().map(load).unwrap_or_default();
        let mut explained = Vec::new();
        let cached = cache
            .paths
            .remove(&key)
            .filter(|e| now_s().saturating_sub(e.probed_at) < PROBE_TTL_S);
        let entry = match cached {
            Some(e) => {
                explained.push(format!(
                    "path {key}: from the cache ({} measured copies), round trip {:.1} ms",
                    e.runs, e.rtt_ms
                ));
                e
            }
            None => match probe(src, dest, gsi) {
                Ok(e) => {
                    explained.push(format!(
                        "path {key}: probed, control-channel round trip {:.1} ms{}",
                        e.rtt_ms,
                        if sources.len() > 1 {
                            " (the first source's)"
                        } else {
                            ""
                        }
                    ));
                    e
                }
                Err(why) => {
                    return Tuning::none(&format!("could not probe {key}: {why}"));
                }
            },
        };
        let congestion = choose_congestion(&entry, asked.congestion, &mut explained);
        let streams = match asked.streams {
            Some(n) => {
                explained.push(format!("streams: {n}, as -n says"));
                None
            }
            None => Some(choose_streams(&entry, &mut explained)),
        };
        Tuning {
            large_file_streams: streams,
            congestion,
            explained,
            learning: file.map(|file| Learning {
                key,
                entry,
                file,
                streams,
            }),
        }
    }

    /// Learns from a finished copy (`bytes` in `elapsed`, the client's data connections'
    /// `tcp`), keeps it in the cache, and says what was measured and what comes next.
    pub(crate) fn learn(
        self,
        bytes: u64,
        elapsed: Duration,
        failed: bool,
        tcp: Option<&ferry_net::TcpStats>,
    ) -> Vec<String> {
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
        l.entry.congestion = self.congestion.map(|c| c.to_string());
        if failed || bytes < MEASURE_BYTES {
            said.push(format!(
                "measured: {} in {secs:.2} s; not used for the stream search ({})",
                crate::present::human_bytes(bytes),
                if failed {
                    "files failed".to_string()
                } else {
                    format!("under {}", crate::present::human_bytes(MEASURE_BYTES))
                }
            ));
        } else if let Some(n) = l.streams {
            said.push(format!(
                "measured: {:.0} Mbit/s with {n} streams for large files",
                bps / 1e6
            ));
            said.push(step_search(&mut l.entry, n, bps));
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

/// Streams for large files: the search's next step, or the first copy's rule.
fn choose_streams(e: &PathEntry, explained: &mut Vec<String>) -> u32 {
    let step = |n: u32| (n / 4).max(1);
    let (Some(n), Some(best), Some(best_bps)) = (e.streams, e.best_streams, e.best_bps) else {
        let n = if e.rtt_ms > WAN_RTT_MS { 8 } else { 4 };
        let bdp = ASSUMED_BPS / 8.0 * e.rtt_ms / 1e3;
        let window = autotune_max().map_or("?".into(), crate::present::human_bytes);
        explained.push(format!(
            "streams: {n} for files of 16 MiB and more (first copy on this path: \
             bandwidth-delay product {} at an assumed 1 Gbit/s, one socket's autotuned window \
             up to {window} here; smaller files: 1 stream, pipelined)",
            crate::present::human_bytes(bdp as u64)
        ));
        return n;
    };
    let (next, why) = match e.search {
        Search::Decrease if n > 1 => (
            n - step(n),
            format!(
                "trying fewer: {n} streams gave {:.0} Mbit/s, the best so far {:.0} with {best}",
                e.bps.unwrap_or(0.0) / 1e6,
                best_bps / 1e6
            ),
        ),
        Search::Increase if n < MAX_STREAMS => (
            (n + step(n)).min(MAX_STREAMS),
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

/// One step of the stream search after a copy with `n` streams at `bps`; says what changed.
fn step_search(e: &mut PathEntry, n: u32, bps: f64) -> String {
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

/// What the client's own data connections saw.
fn describe_tcp(t: &ferry_net::TcpStats) -> String {
    let mut s = format!(
        "data connections: {} over {}, round trip {:.1} ms",
        t.connections,
        if t.congestion.is_empty() {
            "TCP"
        } else {
            &t.congestion
        },
        f64::from(t.rtt_us) / 1e3
    );
    if t.min_rtt_us > 0 {
        s.push_str(&format!(" (least {:.1} ms)", f64::from(t.min_rtt_us) / 1e3));
    }
    if t.bytes_sent > 0 {
        s.push_str(&format!(
            ", {:.3} % of the bytes sent again",
            t.retransmit_ratio() * 100.0
        ));
    } else {
        s.push_str(&format!(
            ", {} packets arrived out of order",
            t.out_of_order
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> PathEntry {
        PathEntry {
            rtt_ms: 75.0,
            offered: vec!["reno".into(), "cubic".into(), "bbr".into()],
            sender: "this host".into(),
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
    fn the_stream_search_decreases_while_throughput_holds_then_holds_and_goes_up_when_the_path_changes(
    ) {
        let mut e = entry();
        let mut why = Vec::new();
        assert_eq!(choose_streams(&e, &mut why), 8, "first copy at 75 ms");
        step_search(&mut e, 8, 800e6);
        assert_eq!(e.search, Search::Decrease);
        assert_eq!(choose_streams(&e, &mut why), 6);
        step_search(&mut e, 6, 790e6); // within 97 %: fewer still
        assert_eq!(e.best_streams, Some(6));
        assert_eq!(choose_streams(&e, &mut why), 5);
        step_search(&mut e, 5, 600e6); // worse: back to the best and hold
        assert_eq!(e.search, Search::Hold);
        assert_eq!(choose_streams(&e, &mut why), 6);
        step_search(&mut e, 6, 805e6); // steady
        assert_eq!(e.search, Search::Hold);
        step_search(&mut e, 6, 500e6); // the path changed: search upwards
        assert_eq!(e.search, Search::Increase);
        assert_eq!(choose_streams(&e, &mut why), 7);
        step_search(&mut e, 7, 600e6); // gained: on
        assert_eq!((e.best_streams, e.search), (Some(7), Search::Increase));
        assert_eq!(choose_streams(&e, &mut why), 8);
        step_search(&mut e, 8, 601e6); // no gain: hold at 7
        assert_eq!(e.search, Search::Hold);
        assert_eq!(choose_streams(&e, &mut why), 7);
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
