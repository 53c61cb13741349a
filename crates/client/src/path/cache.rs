//! What copies learnt of each path, kept in one file that every mover of a user reads and
//! writes: gcp and `ferry copy --tune` today, and any program that tunes through
//! [`Tuning`](super::Tuning).
//!
//! The file is JSON: `{"paths": {KEY: ENTRY, ...}}`. A KEY is `SOURCE -> DESTINATION`, each end
//! `scheme://host:port` or, for a local end, `this host (HOSTNAME)` (a home directory, and the
//! cache in it, may be shared by the nodes of a cluster, whose paths and kernels differ). An
//! ENTRY is a [`PathEntry`], its fields as named there. Entries whose last probe is older than
//! 30 days are dropped when the file is next written. A file that does not parse is started
//! afresh: the cache only ever speeds a copy up.
//!
//! Where: `$FERRY_PATH_CACHE`, else `$XDG_CACHE_HOME/ferry/gcp-paths.json`, else
//! `~/.cache/ferry/gcp-paths.json` (one name for the file gcp has always kept). Writers take an exclusive `flock` on `FILE.lock` around read, change and
//! write, and write a temporary file renamed over the old one, so two copies finishing at once
//! both land and a reader never sees half a file.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What copies learnt of a path is kept this long after its last probe.
const KEPT_S: u64 = 30 * 86_400;

/// Where the stream search is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Search {
    /// Fewer streams next time, while throughput holds.
    Decrease,
    /// Keep the best.
    Hold,
    /// More streams next time, while throughput grows.
    Increase,
}

/// What is known of one (source, destination) path.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PathEntry {
    /// Control-channel round trip, ms (the larger end's in a third-party copy).
    pub rtt_ms: f64,
    /// Congestion controls the sending side offers.
    pub offered: Vec<String>,
    /// What sends: "this host", or the source server.
    pub sender: String,
    /// When it was probed (seconds since the epoch).
    pub probed_at: u64,
    /// Streams of large files in the last measured copy.
    pub streams: Option<u32>,
    /// That copy's throughput (bit/s).
    pub bps: Option<f64>,
    /// The fewest streams that gave the best throughput so far.
    pub best_streams: Option<u32>,
    /// That throughput (bit/s).
    pub best_bps: Option<f64>,
    /// Where the stream search stands.
    pub search: Search,
    /// The congestion control of the last measured copy (`None`: the sender's default).
    pub congestion: Option<String>,
    /// The round trip the client's own data connections saw in it (ms).
    pub data_rtt_ms: Option<f64>,
    /// The share of the bytes they sent again.
    pub retransmitted: Option<f64>,
    /// Measured copies.
    pub runs: u32,
    /// What the last measured copy on each congestion control moved (bit/s), by its name:
    /// what the congestion choice weighs. Kept when the stream search starts again.
    #[serde(default)]
    pub by_congestion: BTreeMap<String, f64>,
}

impl PathEntry {
    /// A path just probed, with nothing measured on it yet.
    pub fn probed(rtt_ms: f64, offered: Vec<String>, sender: String) -> PathEntry {
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
            by_congestion: BTreeMap::new(),
        }
    }
}

/// The file as written.
#[derive(Debug, Default, Serialize, Deserialize)]
struct CacheFile {
    paths: BTreeMap<String, PathEntry>,
}

/// The path cache of this host (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathCache {
    file: PathBuf,
}

pub(crate) fn now_s() -> u64 {
    ferry_proto::clock::now_since_epoch().as_secs()
}

impl PathCache {
    /// The cache in `file`.
    pub fn at(file: impl Into<PathBuf>) -> PathCache {
        PathCache { file: file.into() }
    }

    /// The cache this process uses: `$FERRY_PATH_CACHE`, else the user's cache directory;
    /// `None` with neither a variable nor a home directory.
    pub fn default_for_user() -> Option<PathCache> {
        if let Some(f) = std::env::var_os("FERRY_PATH_CACHE").filter(|f| !f.is_empty()) {
            return Some(PathCache::at(f));
        }
        std::env::var_os("XDG_CACHE_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|d| PathCache::at(d.join("ferry/gcp-paths.json")))
    }

    /// The file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// What is kept of `key`, unless it is older than 30 days.
    pub fn get(&self, key: &str) -> Option<PathEntry> {
        let now = now_s();
        self.read()
            .paths
            .remove(key)
            .filter(|e| now.saturating_sub(e.probed_at) < KEPT_S)
    }

    /// Keeps `entry` for `key`, under the lock, dropping entries past 30 days.
    pub fn put(&self, key: &str, entry: PathEntry) -> std::io::Result<()> {
        let dir = self.file.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let _lock = self.lock()?;
        let mut cache = self.read();
        let now = now_s();
        cache
            .paths
            .retain(|_, e| now.saturating_sub(e.probed_at) < KEPT_S);
        cache.paths.insert(key.to_string(), entry);
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        serde_json::to_writer_pretty(&mut tmp, &cache)?;
        tmp.persist(&self.file).map_err(|e| e.error)?;
        Ok(())
    }

    fn read(&self) -> CacheFile {
        std::fs::read(&self.file)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// The writers' lock, held until the file it returns is dropped.
    fn lock(&self) -> std::io::Result<File> {
        let mut name = self.file.clone().into_os_string();
        name.push(".lock");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(name)?;
        rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)?;
        Ok(f)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A path of 75 ms probed just now, whose sender offers reno, cubic and bbr.
    pub(crate) fn entry() -> PathEntry {
        let offered = vec!["reno".into(), "cubic".into(), "bbr".into()];
        PathEntry::probed(75.0, offered, "this host".into())
    }

    #[test]
    fn the_cache_survives_a_round_trip_through_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let cache = PathCache::at(dir.path().join("ferry/gcp-paths.json"));
        cache.put("a -> b", entry()).unwrap();
        assert_eq!(cache.get("a -> b").unwrap().rtt_ms, 75.0);
        std::fs::write(cache.file(), "not json").unwrap();
        assert!(
            cache.get("a -> b").is_none(),
            "a damaged cache is started again"
        );
    }

    #[test]
    fn entries_past_thirty_days_are_neither_used_nor_kept() {
        let dir = tempfile::tempdir().unwrap();
        let cache = PathCache::at(dir.path().join("paths.json"));
        let old = PathEntry {
            probed_at: now_s() - KEPT_S - 1,
            ..entry()
        };
        cache.put("old", old).unwrap();
        assert!(cache.get("old").is_none());
        cache.put("new", entry()).unwrap();
        let text = std::fs::read_to_string(cache.file()).unwrap();
        assert!(!text.contains("\"old\""), "{text}");
    }

    /// Writers on many threads (as gcp, ferry copy and the service would be, in processes)
    /// each keep their own entry: none is lost to another's read-change-write.
    #[test]
    fn writers_at_once_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let cache = PathCache::at(dir.path().join("paths.json"));
        std::thread::scope(|s| {
            for i in 0..16 {
                let cache = cache.clone();
                s.spawn(move || cache.put(&format!("path {i}"), entry()).unwrap());
            }
        });
        for i in 0..16 {
            assert!(
                cache.get(&format!("path {i}")).is_some(),
                "path {i} was lost"
            );
        }
    }
}
