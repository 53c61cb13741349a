//! Takes files off the queue and runs them through the resumable copy API
//! ([`ferry_client::FileCopy`]): at most `max_active` at once, as many per link as its
//! optimizer allows ([`crate::optimizer`]), at most `endpoint_max` per server, most urgent
//! first. Every checkpoint a transfer reports is written to the database as it comes, so a
//! retry, or the service started again after a crash, sends only what the destination lacks.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_client::{
    CancellationToken, ClientError, FileCopy, FileCopyEvent, GsiOptions, GsiSetup, Location, Retry,
    Sessions, Verify,
};
use ferry_gsi::{Credential, TrustStore};
use ferry_proto::RangeSet;
use ferry_storage::ChecksumAlgorithm;
use tokio::sync::{mpsc, Notify};

use crate::db::{Db, DecisionRow, Ending, FileRow, JobRow};
use crate::metrics::{LinkLabel, Metrics, ResultLabel, StateLabel};
use crate::optimizer::{LinkOptimizer, Window};
use crate::submit::JobOptions;
use crate::{now, ServiceError};

/// How much runs at once.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Transfers at once, in all.
    pub max_active: usize,
    /// Transfers a link (source server → destination server) starts with and never goes below.
    pub link_min: usize,
    /// Transfers a link may reach when the optimizer finds more pay.
    pub link_max: usize,
    /// Transfers at once touching one server, over all its links.
    pub endpoint_max: usize,
    /// How often the optimizer judges each link.
    pub interval: Duration,
    /// A service host silent this long (shared queue) loses its transfers to the others.
    pub host_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_active: 64,
            // As many as ferry copy's workers: small files need several in flight from the start.
            link_min: 4,
            link_max: 16,
            endpoint_max: 32,
            interval: Duration::from_secs(10),
            host_timeout: Duration::from_secs(crate::db::HOST_TIMEOUT as u64),
        }
    }
}

/// Most small files one pipeline takes.
const BATCH: usize = 32;

/// Whether a waiting file may join a pipeline: whole, nothing stored, read from a server,
/// small or of a size not known yet (a pipeline lists its sources' directories first and
/// leaves the large ones to run alone).
fn batchable(f: &FileRow) -> bool {
    f.stored.is_empty()
        && f.filesize.is_none_or(|n| (0..16 << 20).contains(&n))
        && f.source.contains("://")
        && !f.source.starts_with("file://")
}

/// Seconds of throughput history kept for the dashboard (one sample a second).
pub const HISTORY: usize = 600;

/// A transfer running now, for the API and the dashboard.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Live {
    /// Bytes this attempt moved.
    pub bytes: u64,
    /// Seconds it has run.
    pub seconds: f64,
}

/// The scheduler, shared with the API (which wakes it and cancels through it).
pub struct Scheduler {
    db: Db,
    limits: Limits,
    trust: Arc<TrustStore>,
    wake: Notify,
    state: Mutex<Running>,
    metrics: Arc<Metrics>,
    /// Logged-in sessions between transfers, per (owner, link): the next file of a link goes
    /// on without a login, as `ferry copy`'s workers do.
    pool: Mutex<HashMap<(String, String), Vec<Pooled>>>,
    /// What destination directories held when a job first looked, per (job, directory URL):
    /// later pipelines of the job ask this instead of listing a directory it keeps filling.
    listed: Mutex<HashMap<(String, String), Listed>>,
    /// Source directories' file sizes per (job, directory URL), listed once by the first
    /// pipeline that needs them while the others wait.
    sized: tokio::sync::Mutex<HashMap<(String, String), Sized>>,
    /// Fires at shutdown: running attempts stop and go back to the queue.
    shutdown: CancellationToken,
}

/// Sessions waiting for the next file of their link.
struct Pooled {
    sessions: Sessions,
    /// When the credential they logged in with ends (unix seconds).
    until: i64,
    idle_since: Instant,
}

/// A source directory's file sizes, and when it was listed.
type Sized = (Instant, Arc<HashMap<String, u64>>);

/// What a destination directory held, and when it was listed.
type Listed = (Instant, Arc<std::collections::HashSet<String>>);

/// How long a job trusts what a destination directory held when it first looked.
const LISTED_FOR: Duration = Duration::from_secs(60);

/// Sessions idle longer than this are logged out.
const POOL_IDLE: Duration = Duration::from_secs(30);

struct Attempt {
    link: String,
    token: CancellationToken,
    /// Bytes this attempt has counted into its link so far.
    counted: u64,
}

#[derive(Default)]
struct Running {
    /// Transfers and pipelines running (each holds one slot of its link and servers).
    slots: usize,
    files: HashMap<i64, Attempt>,
    per_link: HashMap<String, usize>,
    per_endpoint: HashMap<String, usize>,
    canceled: std::collections::HashSet<i64>,
    live: HashMap<i64, Live>,
    optimizers: HashMap<String, LinkOptimizer>,
    /// Bytes moved per link since the start, and at the last window.
    link_bytes: HashMap<String, (u64, u64)>,
    /// Attempts ended per link since the last window: (finished, failed).
    link_ended: HashMap<String, (u64, u64)>,
    /// Bytes per second per link over the last window.
    link_throughput: HashMap<String, f64>,
    /// (unix seconds, bytes per second in all), one a second.
    history: VecDeque<(i64, f64)>,
    total_bytes: u64,
    history_mark: u64,
}

/// What the dashboard shows of the scheduler, beside what the database says.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Snapshot {
    /// Per link: (running, allowed, bytes per second over the last window).
    pub links: HashMap<String, (usize, u32, f64)>,
    /// (unix seconds, bytes per second).
    pub history: Vec<(i64, f64)>,
}

/// The two servers of a link (`A → B`).
fn endpoints_of(link: &str) -> [String; 2] {
    match link.split_once(" → ") {
        Some((a, b)) => [a.to_owned(), b.to_owned()],
        None => [link.to_owned(), link.to_owned()],
    }
}

impl Scheduler {
    /// A scheduler over `db`; nothing runs until [`Scheduler::run`].
    pub fn new(
        db: Db,
        limits: Limits,
        trust: Arc<TrustStore>,
        metrics: Arc<Metrics>,
    ) -> Arc<Scheduler> {
        Arc::new(Scheduler {
            db,
            limits,
            trust,
            metrics,
            pool: Mutex::new(HashMap::new()),
            listed: Mutex::new(HashMap::new()),
            sized: tokio::sync::Mutex::new(HashMap::new()),
            wake: Notify::new(),
            state: Mutex::new(Running::default()),
            shutdown: CancellationToken::new(),
        })
    }

    /// Something changed (a job came in): look at the queue now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Stops every running attempt; they go back to the queue with what they stored.
    pub fn shut_down(&self) {
        self.shutdown.cancel();
    }

    /// Stops these files' attempts as cancelled by their owner.
    pub fn cancel_files(&self, ids: &[i64]) {
        if let Ok(mut s) = self.state.lock() {
            for id in ids {
                s.canceled.insert(*id);
                if let Some(a) = s.files.get(id) {
                    a.token.cancel();
                }
            }
        }
    }

    /// Progress of the transfers running now.
    pub fn live(&self) -> HashMap<i64, Live> {
        self.state
            .lock()
            .map(|s| s.live.clone())
            .unwrap_or_default()
    }

    /// Links, their concurrency and throughput, and the throughput history.
    pub fn snapshot(&self) -> Snapshot {
        let Ok(s) = self.state.lock() else {
            return Snapshot::default();
        };
        let mut links = HashMap::new();
        for (link, o) in &s.optimizers {
            links.insert(
                link.clone(),
                (
                    s.per_link.get(link).copied().unwrap_or(0),
                    o.target(),
                    s.link_throughput.get(link).copied().unwrap_or(0.0),
                ),
            );
        }
        Snapshot {
            links,
            history: s.history.iter().copied().collect(),
        }
    }

    /// Puts attempts a stopped service left ACTIVE back in the queue, then dispatches until
    /// shutdown.
    pub async fn run(self: Arc<Self>) -> Result<(), ServiceError> {
        self.db.heartbeat(now()).await?;
        let timeout = self.limits.host_timeout.as_secs() as i64;
        let resumed = self.db.reclaim(now(), true, timeout).await?;
        if resumed > 0 {
            tracing::info!(
                resumed,
                "files that were moving when the service stopped go on from their stored ranges"
            );
        }
        let mut second = tokio::time::interval(Duration::from_secs(1));
        second.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut window = tokio::time::interval(self.limits.interval);
        window.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        window.tick().await;
        loop {
            if let Err(e) = Arc::clone(&self).dispatch().await {
                tracing::error!(error = %e, "the scheduler could not read the queue");
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => break,
                _ = self.wake.notified() => {}
                _ = second.tick() => self.sample().await,
                _ = window.tick() => self.optimize().await,
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
        // Let the attempts record how far they got.
        let deadline = Instant::now() + Duration::from_secs(10);
        while self
            .state
            .lock()
            .map(|s| !s.files.is_empty())
            .unwrap_or(false)
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    async fn dispatch(self: Arc<Self>) -> Result<(), ServiceError> {
        let (free, full) = {
            let s = self.state.lock().map_err(|_| poisoned())?;
            let full: Vec<String> = s
                .per_link
                .iter()
                .filter(|(link, n)| {
                    let target = s
                        .optimizers
                        .get(*link)
                        .map(|o| o.target() as usize)
                        .unwrap_or(self.limits.link_min);
                    **n >= target
                })
                .map(|(link, _)| link.clone())
                .collect();
            (self.limits.max_active.saturating_sub(s.slots), full)
        };
        if free == 0 {
            return Ok(());
        }
        // Enough candidates to fill the free slots with pipelines.
        let ready = self
            .db
            .ready_files_except(now(), (free * BATCH).max(64) as i64, full)
            .await?;
        let mut taken = std::collections::HashSet::new();
        for f in &ready {
            if taken.contains(&f.file_id) {
                continue;
            }
            {
                let s = self.state.lock().map_err(|_| poisoned())?;
                if s.slots >= self.limits.max_active {
                    break;
                }
                let target = s
                    .optimizers
                    .get(&f.link)
                    .map(|o| o.target() as usize)
                    .unwrap_or(self.limits.link_min);
                if s.per_link.get(&f.link).copied().unwrap_or(0) >= target {
                    continue;
                }
                let busy = endpoints_of(&f.link).iter().any(|e| {
                    s.per_endpoint.get(e).copied().unwrap_or(0) >= self.limits.endpoint_max
                });
                if busy {
                    continue;
                }
            }
            // Small whole files of one job and link go together as one pipeline in one slot.
            let mut members = vec![f];
            if batchable(f) {
                members.extend(
                    ready
                        .iter()
                        .filter(|g| {
                            g.file_id != f.file_id
                                && g.job_id == f.job_id
                                && g.link == f.link
                                && batchable(g)
                                && !taken.contains(&g.file_id)
                        })
                        .take(BATCH - 1),
                );
            }
            let Some(job) = self.db.job(f.job_id.clone()).await? else {
                continue;
            };
            let token = self.shutdown.child_token();
            let ids: Vec<i64> = members.iter().map(|m| m.file_id).collect();
            taken.extend(ids.iter().copied());
            let rows = self.db.start_attempts(ids, now()).await?;
            for row in &rows {
                self.register(row, &token);
            }
            if rows.is_empty() {
                continue;
            }
            self.claim_slot(&f.link);
            let me = Arc::clone(&self);
            let link = f.link.clone();
            tokio::spawn(async move {
                if rows.len() == 1 {
                    let outcome = me.run_attempt(&rows[0], &job, &token).await;
                    me.conclude(&rows[0], &job, outcome).await;
                } else {
                    me.run_batch(rows, &job, &token).await;
                }
                me.release_slot(&link);
                me.wake();
            });
        }
        Ok(())
    }

    /// A file whose attempt runs now: cancellable, its bytes counted into its link.
    fn register(&self, row: &FileRow, token: &CancellationToken) {
        if let Ok(mut s) = self.state.lock() {
            s.files.insert(
                row.file_id,
                Attempt {
                    link: row.link.clone(),
                    token: token.clone(),
                    counted: 0,
                },
            );
            s.live.insert(
                row.file_id,
                Live {
                    bytes: 0,
                    seconds: 0.0,
                },
            );
        }
    }

    /// One transfer (or pipeline) running on a link and its two servers.
    fn claim_slot(&self, link: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.slots += 1;
            for e in endpoints_of(link) {
                *s.per_endpoint.entry(e).or_default() += 1;
            }
            *s.per_link.entry(link.to_owned()).or_default() += 1;
            let (min, max) = (self.limits.link_min as u32, self.limits.link_max as u32);
            s.optimizers
                .entry(link.to_owned())
                .or_insert_with(|| LinkOptimizer::new(min, max));
        }
    }

    fn release_slot(&self, link: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.slots = s.slots.saturating_sub(1);
            for e in endpoints_of(link) {
                if let Some(n) = s.per_endpoint.get_mut(&e) {
                    *n = n.saturating_sub(1);
                }
            }
            s.per_endpoint.retain(|_, n| *n > 0);
            if let Some(n) = s.per_link.get_mut(link) {
                *n = n.saturating_sub(1);
            }
            s.per_link.retain(|_, n| *n > 0);
        }
    }

    /// Small files of one job and link as one pipeline; what it leaves runs one by one.
    async fn run_batch(&self, rows: Vec<FileRow>, job: &JobRow, token: &CancellationToken) {
        let options: JobOptions = serde_json::from_str(&job.options).unwrap_or_default();
        let mut copies = Vec::with_capacity(rows.len());
        let mut kept = Vec::with_capacity(rows.len());
        let (mut sessions, until) = match (
            Location::parse(&rows[0].source),
            Location::parse(&rows[0].dest),
        ) {
            (Ok(src), Ok(dst)) => match self.sessions_for(job, &rows[0].link, &src, &dst).await {
                Ok(s) => s,
                Err(e) => {
                    for row in &rows {
                        let failed = Outcome::Ended(Ending::Failed {
                            error: e.clone(),
                            retryable: false,
                        });
                        self.conclude(row, job, failed).await;
                    }
                    return;
                }
            },
            _ => (Sessions::new(), i64::MAX),
        };
        let rows = self.learn_sizes(job, rows, &mut sessions).await;
        let existing = self.existing(job, &rows, &mut sessions).await;
        for row in rows {
            match (Location::parse(&row.source), Location::parse(&row.dest)) {
                (Ok(src), Ok(dst)) => {
                    if !job.overwrite && row.attempts == 1 {
                        let known = existing.as_ref().and_then(|e| e.get(&row.file_id).copied());
                        let there = match known {
                            Some(b) => Ok(b),
                            None => exists(&mut sessions, &dst).await,
                        };
                        match there {
                            Ok(true) => {
                                let failed = Outcome::Ended(Ending::Failed {
                                    error: format!("the destination {} exists; submit with overwrite to replace it", row.dest),
                                    retryable: false,
                                });
                                self.conclude(&row, job, failed).await;
                                continue;
                            }
                            Ok(false) => {}
                            // The single attempt below says what is wrong.
                            Err(_) => {}
                        }
                    }
                    copies.push(self.copy_of(
                        &row,
                        job,
                        &options,
                        src,
                        dst,
                        row.filesize.map(|n| n as u64),
                    ));
                    kept.push(row);
                }
                (Err(e), _) | (_, Err(e)) => {
                    let failed = Outcome::Ended(Ending::Failed {
                        error: e.to_string(),
                        retryable: false,
                    });
                    self.conclude(&row, job, failed).await;
                }
            }
        }
        let mut results = Vec::new();
        let settled = ferry_client::run_pipelined(&copies, &mut sessions, token, &mut |k, r| {
            results.push((k, r))
        })
        .await;
        let mut ended = Vec::with_capacity(results.len());
        for (k, r) in results {
            let outcome = match r {
                Ok(done) => {
                    let alg = copies[k].verify.as_ref().map(|v| v.algorithm.name());
                    Outcome::Ended(finished_ending(&done, 0, alg))
                }
                Err(e) if e.retry() == Retry::Resume => {
                    self.after_error(job, &kept[k], e.error, e.stored)
                }
                Err(e) => Outcome::Ended(Ending::Failed {
                    error: e.error.to_string(),
                    retryable: false,
                }),
            };
            ended.push((&kept[k], outcome));
        }
        self.conclude_many(job, ended).await;
        if settled == kept.len() && !token.is_cancelled() {
            self.give_back(job, &kept[0].link, sessions, until);
        } else {
            drop(sessions);
        }
        // What the pipeline left: one at a time, as any file.
        for row in kept.iter().skip(settled) {
            let outcome = if token.is_cancelled() {
                Outcome::Stopped {
                    stored: row.stored.clone(),
                }
            } else {
                self.run_attempt(row, job, token).await
            };
            self.conclude(row, job, outcome).await;
        }
    }

    /// Sizes of files the job did not give, from one listing of each source directory (a
    /// round trip per directory, not per file), kept for the job's later pipelines too; the
    /// files that can go in a pipeline put first. A directory that cannot be listed leaves its
    /// files' sizes unknown: they run alone and say what is wrong.
    async fn learn_sizes(
        &self,
        job: &JobRow,
        mut rows: Vec<FileRow>,
        sessions: &mut Sessions,
    ) -> Vec<FileRow> {
        let mut dirs: HashMap<String, Vec<usize>> = HashMap::new();
        for (k, row) in rows.iter().enumerate() {
            if row.filesize.is_none() {
                if let Ok(Location::Remote(r)) = Location::parse(&row.source) {
                    dirs.entry(parent_of(&r.path)).or_default().push(k);
                }
            }
        }
        for (dir, members) in dirs {
            let Ok(Location::Remote(server)) = Location::parse(&rows[members[0]].source) else {
                continue;
            };
            let key = (job.job_id.clone(), format!("{}{dir}", server.authority()));
            let mut cache = self.sized.lock().await;
            cache.retain(|_, (t, _)| t.elapsed() < LISTED_FOR);
            let sizes = match cache.get(&key) {
                Some((_, sizes)) => Arc::clone(sizes),
                None => {
                    let Ok(sizes) = file_sizes(sessions, &server, &dir).await else {
                        continue;
                    };
                    let sizes = Arc::new(sizes);
                    cache.insert(key, (Instant::now(), Arc::clone(&sizes)));
                    // Stored in the background: the pipelines go on meanwhile.
                    let (db, id) = (self.db.clone(), job.job_id.clone());
                    let (all, server, dir) = ((*sizes).clone(), server.clone(), dir.clone());
                    tokio::spawn(async move {
                        if let Err(e) = db.set_sizes_in_dir(id, server, dir, all).await {
                            tracing::warn!(error = %e, "could not record files' sizes");
                        }
                    });
                    sizes
                }
            };
            drop(cache);
            for k in members {
                if let Ok(Location::Remote(r)) = Location::parse(&rows[k].source) {
                    let name = r.path.rsplit('/').next().unwrap_or("");
                    rows[k].filesize = sizes.get(name).map(|&n| n as i64);
                }
            }
        }
        // Small ones first: the pipeline takes a prefix.
        rows.sort_by_key(|r| r.filesize.is_none_or(|n| n >= 16 << 20));
        rows
    }

    /// For the files whose destination must not be replaced (first attempt, no overwrite),
    /// whether it is there, from one listing per destination directory; `None` where a
    /// directory could not be listed (each file is then asked on its own). A directory that
    /// does not exist holds nothing.
    async fn existing(
        &self,
        job: &JobRow,
        rows: &[FileRow],
        sessions: &mut Sessions,
    ) -> Option<HashMap<i64, bool>> {
        if job.overwrite {
            return None;
        }
        let mut out = HashMap::new();
        let mut listed: HashMap<String, Arc<std::collections::HashSet<String>>> = HashMap::new();
        for row in rows.iter().filter(|r| r.attempts == 1) {
            let Ok(Location::Remote(dst)) = Location::parse(&row.dest) else {
                return None;
            };
            let dir = parent_of(&dst.path);
            let key = (job.job_id.clone(), format!("{}{dir}", dst.authority()));
            if !listed.contains_key(&dir) {
                let cached = self.listed.lock().ok().and_then(|m| {
                    m.get(&key)
                        .filter(|(t, _)| t.elapsed() < LISTED_FOR)
                        .map(|(_, names)| Arc::clone(names))
                });
                if let Some(names) = cached {
                    listed.insert(dir.clone(), names);
                }
            }
            if !listed.contains_key(&dir) {
                let names: std::collections::HashSet<String> = match sessions.get(&dst).await {
                    Ok(s) => match s.list(&dir).await {
                        Ok(entries) => entries
                            .into_iter()
                            .map(|e| e.name.rsplit('/').next().unwrap_or(&e.name).to_owned())
                            .collect(),
                        Err(e) if e.class() == ferry_client::ErrorClass::NotFound => {
                            Default::default()
                        }
                        Err(_) => return None,
                    },
                    Err(_) => return None,
                };
                let names = Arc::new(names);
                if let Ok(mut m) = self.listed.lock() {
                    m.retain(|_, (t, _)| t.elapsed() < LISTED_FOR);
                    m.insert(key, (Instant::now(), Arc::clone(&names)));
                }
                listed.insert(dir.clone(), names);
            }
            let name = dst.path.rsplit('/').next().unwrap_or("");
            out.insert(row.file_id, listed[&dir].contains(name));
        }
        Some(out)
    }

    async fn conclude(&self, row: &FileRow, job: &JobRow, outcome: Outcome) {
        self.conclude_many(job, vec![(row, outcome)]).await;
    }

    /// [`Scheduler::conclude`] for several files of a job: one transaction.
    async fn conclude_many(&self, job: &JobRow, ended: Vec<(&FileRow, Outcome)>) {
        let mut endings = Vec::with_capacity(ended.len());
        let mut results = Vec::with_capacity(ended.len());
        for (row, outcome) in &ended {
            let file_id = row.file_id;
            let user_cancel = self
                .state
                .lock()
                .map(|s| s.canceled.contains(&file_id))
                .unwrap_or(false);
            let ending = match outcome {
                _ if user_cancel => Ending::Canceled,
                Outcome::Ended(e) => e.clone(),
                Outcome::Stopped { stored } => Ending::Retry {
                    error: "the service stopped during this attempt".into(),
                    stored: stored.clone(),
                    delay: 0,
                    counted: false,
                },
            };
            if let Ending::Failed { error, .. } | Ending::Retry { error, .. } = &ending {
                tracing::warn!(job = %job.job_id, file = file_id, source = %row.source, error = %error, "transfer failed");
            }
            let result = match &ending {
                Ending::Finished { bytes, moved, .. } => {
                    // A third-party copy moves nothing through the service: what the
                    // destination gained is what moved.
                    let resumed = RangeSet::parse(&row.stored).map(|r| r.total()).unwrap_or(0);
                    let gained = (*bytes as u64).saturating_sub(resumed).max(*moved as u64);
                    self.count_bytes(file_id, gained);
                    "finished"
                }
                Ending::Retry { counted: false, .. } => "stopped",
                Ending::Retry { .. } => "retry",
                Ending::Failed { .. } => "failed",
                Ending::Canceled => "canceled",
            };
            self.metrics
                .attempts
                .get_or_create(&ResultLabel { result })
                .inc();
            endings.push((file_id, ending));
            results.push(result);
        }
        match self.db.end_attempts(endings, now()).await {
            Ok(each) => {
                for ((row, _), r) in ended.iter().zip(each) {
                    if let Err(ServiceError::Conflict(why)) = r {
                        tracing::warn!(file = row.file_id, "{why}; another host runs it now");
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "could not record the end of attempts; they are resumed at the next start")
            }
        }
        if let Ok(mut s) = self.state.lock() {
            for ((row, _), result) in ended.iter().zip(results) {
                s.files.remove(&row.file_id);
                s.canceled.remove(&row.file_id);
                s.live.remove(&row.file_id);
                let e = s.link_ended.entry(row.link.clone()).or_default();
                match result {
                    "finished" => e.0 += 1,
                    "retry" | "failed" => e.1 += 1,
                    _ => {}
                }
            }
        }
    }

    /// Counts what an attempt has moved so far (its total) into its link and the service.
    fn count_bytes(&self, file_id: i64, total: u64) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        let Some(a) = s.files.get_mut(&file_id) else {
            return;
        };
        let delta = total.saturating_sub(a.counted);
        if delta == 0 {
            return;
        }
        a.counted = total;
        let link = a.link.clone();
        s.link_bytes.entry(link).or_default().0 += delta;
        s.total_bytes += delta;
        self.metrics.bytes.inc_by(delta);
    }

    /// Once a second: the heartbeat, cancels asked on other hosts, the throughput history
    /// and the gauges.
    async fn sample(&self) {
        self.sweep_pool();
        if let Err(e) = self.db.heartbeat(now()).await {
            tracing::warn!(error = %e, "heartbeat failed");
        }
        match self.db.canceled_here().await {
            Ok(ids) if !ids.is_empty() => self.cancel_files(&ids),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "could not look for cancelled jobs"),
        }
        if let Ok(mut s) = self.state.lock() {
            let rate = (s.total_bytes - s.history_mark) as f64;
            s.history_mark = s.total_bytes;
            s.history.push_back((now(), rate));
            while s.history.len() > HISTORY {
                s.history.pop_front();
            }
            for (link, o) in &s.optimizers {
                let label = LinkLabel { link: link.clone() };
                self.metrics
                    .link_active
                    .get_or_create(&label)
                    .set(s.per_link.get(link).copied().unwrap_or(0) as i64);
                self.metrics
                    .link_target
                    .get_or_create(&label)
                    .set(i64::from(o.target()));
            }
        }
        if let Ok(counts) = self.db.state_counts().await {
            for state in [
                "SUBMITTED",
                "READY",
                "ACTIVE",
                "FINISHED",
                "FAILED",
                "CANCELED",
            ] {
                let n = counts
                    .iter()
                    .find(|(s, _)| s == state)
                    .map_or(0, |(_, n)| *n);
                self.metrics
                    .files
                    .get_or_create(&StateLabel {
                        state: state.into(),
                    })
                    .set(n);
            }
        }
    }

    /// Once a window: the claims of hosts gone silent come back to the queue, and each
    /// link's optimizer judges what the link did.
    async fn optimize(&self) {
        if self.db.shared() {
            let timeout = self.limits.host_timeout.as_secs() as i64;
            match self.db.reclaim(now(), false, timeout).await {
                Ok(0) => {}
                Ok(n) => tracing::warn!(files = n, "took back the files of a service host that stopped; they resume from their stored ranges"),
                Err(e) => tracing::warn!(error = %e, "could not look for stopped hosts"),
            }
        }
        let Ok(counts) = self.db.link_counts().await else {
            return;
        };
        let secs = self.limits.interval.as_secs_f64().max(0.001);
        let mut decisions = Vec::new();
        if let Ok(mut s) = self.state.lock() {
            let links: Vec<String> = s.optimizers.keys().cloned().collect();
            for link in links {
                let waiting: i64 = counts
                    .iter()
                    .filter(|(l, st, _)| *l == link && (st == "READY" || st == "SUBMITTED"))
                    .map(|(_, _, n)| *n)
                    .sum();
                let (total, mark) = s.link_bytes.get(&link).copied().unwrap_or((0, 0));
                s.link_bytes.insert(link.clone(), (total, total));
                let throughput = (total - mark) as f64 / secs;
                s.link_throughput.insert(link.clone(), throughput);
                let (finished, failed) = s.link_ended.remove(&link).unwrap_or((0, 0));
                let active = s.per_link.get(&link).copied().unwrap_or(0) as u64;
                let window = Window {
                    throughput,
                    finished,
                    failed,
                    waiting: waiting.max(0) as u64,
                    active,
                };
                self.metrics
                    .link_throughput
                    .get_or_create(&LinkLabel { link: link.clone() })
                    .set(throughput);
                if let Some(o) = s.optimizers.get_mut(&link) {
                    if let Some(d) = o.evaluate(window) {
                        decisions.push(DecisionRow {
                            link: link.clone(),
                            time: now(),
                            from: i64::from(d.from),
                            to: i64::from(d.to),
                            throughput,
                            reason: d.reason,
                        });
                    }
                }
                // A link with nothing left forgets what it learnt (its next files may differ).
                if waiting == 0 && active == 0 {
                    s.optimizers.remove(&link);
                    s.link_throughput.remove(&link);
                }
            }
        }
        for d in decisions {
            tracing::info!(link = %d.link, from = d.from, to = d.to, reason = %d.reason, "optimizer");
            self.metrics.decisions.inc();
            if let Err(e) = self.db.insert_decision(d).await {
                tracing::warn!(error = %e, "could not record an optimizer decision");
            }
        }
        self.wake();
    }

    async fn run_attempt(&self, row: &FileRow, job: &JobRow, token: &CancellationToken) -> Outcome {
        let failed = |error: String| {
            Outcome::Ended(Ending::Failed {
                error,
                retryable: false,
            })
        };
        let (src, dst) = match (Location::parse(&row.source), Location::parse(&row.dest)) {
            (Ok(s), Ok(d)) => (s, d),
            (Err(e), _) | (_, Err(e)) => return failed(e.to_string()),
        };
        let options: JobOptions = serde_json::from_str(&job.options).unwrap_or_default();
        let stored = RangeSet::parse(&row.stored).unwrap_or_default();
        let (mut sessions, until) = match self.sessions_for(job, &row.link, &src, &dst).await {
            Ok(s) => s,
            Err(e) => return failed(e),
        };

        // FTS3's overwrite = false: a destination that is there before the first attempt
        // stays untouched. Later attempts resume into what earlier ones wrote.
        if !job.overwrite && row.attempts == 1 && stored.is_empty() {
            match exists(&mut sessions, &dst).await {
                Ok(true) => {
                    return failed(format!(
                        "the destination {} exists; submit with overwrite to replace it",
                        row.dest
                    ))
                }
                Ok(false) => {}
                Err(e) => return self.after_error(job, row, e, RangeSet::new()),
            }
        }

        // The size chooses the streams and says how much is there at the end (a third-party
        // copy moves nothing through the service to count).
        let size = match row.filesize {
            Some(n) => Some(n as u64),
            None => {
                let size = size_of(&mut sessions, &src).await;
                if let Some(n) = size {
                    if let Err(e) = self.db.set_filesize(row.file_id, n as i64).await {
                        tracing::warn!(file = row.file_id, error = %e, "could not record a file's size");
                    }
                }
                size
            }
        };
        let resumed = stored.total();
        let started = Instant::now();
        let copy = self.copy_of(row, job, &options, src, dst, size);

        // Checkpoints go to the database in order, off the transfer's path.
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let db = self.db.clone();
        let file_id = row.file_id;
        let writer = tokio::spawn(async move {
            while let Some(ranges) = rx.recv().await {
                if let Err(e) = db.store_ranges(file_id, ranges).await {
                    tracing::error!(file = file_id, error = %e, "could not store a checkpoint");
                }
            }
        });
        let live_state = &self.state;
        let mut on_event = |ev: FileCopyEvent| match ev {
            FileCopyEvent::Stored { ranges } => {
                let _ = tx.send(ranges.to_string());
                // A third-party copy's progress is what its destination holds.
                let gained = ranges.total().saturating_sub(resumed);
                if let Ok(mut s) = live_state.lock() {
                    let seconds = started.elapsed().as_secs_f64();
                    let live = s.live.entry(file_id).or_insert(Live { bytes: 0, seconds });
                    live.bytes = live.bytes.max(gained);
                    live.seconds = seconds;
                }
                self.count_bytes(file_id, gained);
            }
            FileCopyEvent::Performance { bytes, seconds } => {
                if let Ok(mut s) = live_state.lock() {
                    let live = s.live.entry(file_id).or_insert(Live { bytes, seconds });
                    live.bytes = live.bytes.max(bytes);
                    live.seconds = seconds;
                }
                self.count_bytes(file_id, bytes);
            }
            _ => {}
        };
        let run = copy.run(&mut sessions, token, &mut on_event);
        let result = match options.timeout {
            Some(t) => tokio::time::timeout(Duration::from_secs(t), run).await.ok(),
            None => Some(run.await),
        };
        drop(tx);
        let _ = writer.await;
        match result {
            None => {
                let now_stored = self
                    .db
                    .file(file_id)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|f| RangeSet::parse(&f.stored).ok())
                    .unwrap_or(stored);
                self.after_error(
                    job,
                    row,
                    ClientError::Network(format!(
                        "the attempt took longer than the job's timeout of {} s",
                        options.timeout.unwrap_or(0)
                    )),
                    now_stored,
                )
            }
            Some(Ok(done)) => {
                self.give_back(job, &row.link, sessions, until);
                let alg = copy.verify.as_ref().map(|v| v.algorithm.name());
                Outcome::Ended(finished_ending(&done, resumed, alg))
            }
            Some(Err(e)) if self.shutdown.is_cancelled() => Outcome::Stopped {
                stored: e.stored.to_string(),
            },
            Some(Err(e)) => match e.retry() {
                Retry::Resume => self.after_error(job, row, e.error, e.stored),
                Retry::FromScratch | Retry::No => failed(e.error.to_string()),
            },
        }
    }

    /// A transient failure: again after the job's delay while retries remain.
    fn after_error(
        &self,
        job: &JobRow,
        row: &FileRow,
        error: ClientError,
        stored: RangeSet,
    ) -> Outcome {
        if error.class() != ferry_client::ErrorClass::Network {
            return Outcome::Ended(Ending::Failed {
                error: error.to_string(),
                retryable: false,
            });
        }
        if row.failures < job.retry {
            Outcome::Ended(Ending::Retry {
                error: error.to_string(),
                stored: stored.to_string(),
                delay: job.retry_delay,
                counted: true,
            })
        } else {
            Outcome::Ended(Ending::Failed {
                error: match job.retry {
                    0 => error.to_string(),
                    n => format!("{error} (after {n} retries)"),
                },
                retryable: true,
            })
        }
    }

    /// Sessions that act as the job's owner (the proxy they delegated, for `gsiftp://` ends),
    /// from the pool when some wait for this link; with when their credential ends.
    async fn sessions_for(
        &self,
        job: &JobRow,
        link: &str,
        src: &Location,
        dst: &Location,
    ) -> Result<(Sessions, i64), String> {
        let key = (job.user_dn.clone(), link.to_owned());
        if let Ok(mut pool) = self.pool.lock() {
            if let Some(list) = pool.get_mut(&key) {
                while let Some(p) = list.pop() {
                    // A minute of credential left at least: a transfer should not outlive it.
                    if p.until > now() + 60 {
                        return Ok((p.sessions, p.until));
                    }
                }
            }
        }
        let gsi = [src, dst].iter().any(
            |l| matches!(l, Location::Remote(r) if r.scheme == ferry_client::url::Scheme::GsiFtp),
        );
        if !gsi {
            return Ok((Sessions::new(), i64::MAX));
        }
        let id = crate::delegation::id_for(&job.user_dn);
        let row = self.db.delegation(id).await.map_err(|e| e.to_string())?;
        let Some(proxy) = row.and_then(|r| r.proxy.map(|p| (p, r.termination))) else {
            return Err(format!(
                "no credential of {} is delegated to the service: delegate one (ferry submit does; fts-rest-delegate)",
                job.user_dn
            ));
        };
        let (pem, termination) = proxy;
        let until = termination.unwrap_or(0);
        if until <= now() {
            return Err(format!(
                "the credential {} delegated to the service has expired: delegate a new one",
                job.user_dn
            ));
        }
        let credential = Credential::from_proxy_pem(pem.as_bytes())
            .map_err(|e| format!("the delegated credential cannot be read: {e}"))?;
        let setup =
            GsiSetup::with_credential(GsiOptions::default(), credential, Arc::clone(&self.trust))
                .map_err(|e| e.to_string())?;
        Ok((Sessions::with_gsi(Arc::new(setup)), until))
    }

    /// Sessions whose transfer finished wait for the link's next file.
    fn give_back(&self, job: &JobRow, link: &str, sessions: Sessions, until: i64) {
        if let Ok(mut pool) = self.pool.lock() {
            let list = pool
                .entry((job.user_dn.clone(), link.to_owned()))
                .or_default();
            if list.len() < self.limits.link_max {
                list.push(Pooled {
                    sessions,
                    until,
                    idle_since: Instant::now(),
                });
            }
        }
    }

    /// Logs out sessions idle for [`POOL_IDLE`].
    fn sweep_pool(&self) {
        if let Ok(mut pool) = self.pool.lock() {
            for list in pool.values_mut() {
                list.retain(|p| p.idle_since.elapsed() < POOL_IDLE);
            }
            pool.retain(|_, l| !l.is_empty());
        }
    }
}

impl Scheduler {
    /// The copy of a file as its job asks.
    fn copy_of(
        &self,
        row: &FileRow,
        job: &JobRow,
        options: &JobOptions,
        src: Location,
        dst: Location,
        size: Option<u64>,
    ) -> FileCopy {
        let mut copy = FileCopy::new(src, dst);
        copy.size = size;
        copy.stored = RangeSet::parse(&row.stored).unwrap_or_default();
        copy.request.parallelism = options.nostreams.unwrap_or(0);
        copy.request.tcp_buffer = options.buffer_size;
        copy.verify = verify_for(&job.verify, row.checksum.as_deref());
        copy
    }
}

/// A finished copy as the database keeps it: its checksum as `ALG:VALUE`, its throughput from
/// what the destination gained (a third-party copy moves nothing through the service).
fn finished_ending(done: &ferry_client::FileCopied, resumed: u64, alg: Option<&str>) -> Ending {
    let gained = done.bytes.saturating_sub(resumed).max(done.moved);
    Ending::Finished {
        bytes: done.bytes as i64,
        moved: done.moved as i64,
        throughput: if done.seconds > 0.0 {
            gained as f64 / done.seconds
        } else {
            0.0
        },
        checksum: done.checksum.as_ref().map(|v| match alg {
            Some(a) => format!("{a}:{v}"),
            None => v.clone(),
        }),
    }
}

enum Outcome {
    Ended(Ending),
    /// The service is stopping: back to the queue with these ranges.
    Stopped {
        stored: String,
    },
}

fn poisoned() -> ServiceError {
    ServiceError::Database("the scheduler's state lock is poisoned".into())
}

/// How a job's checksum mode and a file's `ALG[:VALUE]` become the copy's verification.
/// `auto` (no mode given) is ferry's default: ADLER32 where both ends can answer.
pub fn verify_for(mode: &str, checksum: Option<&str>) -> Option<Verify> {
    let (alg, value) = match checksum {
        Some(c) => match c.split_once(':') {
            Some((a, v)) => (ChecksumAlgorithm::from_name(a), Some(v.to_owned())),
            None => (ChecksumAlgorithm::from_name(c), None),
        },
        None => (None, None),
    };
    match mode {
        "none" => None,
        "auto" if value.is_none() => Some(Verify {
            algorithm: alg.unwrap_or(ChecksumAlgorithm::Adler32),
            ..Verify::by_default()
        }),
        _ => Some(Verify {
            algorithm: alg.unwrap_or(ChecksumAlgorithm::Adler32),
            expected: value,
            required: true,
        }),
    }
}

/// The source's size, when it can be had; the copy itself reports a missing source.
async fn size_of(sessions: &mut Sessions, src: &Location) -> Option<u64> {
    match src {
        Location::Local(p) => std::fs::metadata(p).ok().map(|m| m.len()),
        Location::Remote(r) => sessions.get(r).await.ok()?.size(&r.path).await.ok(),
    }
}

/// The directory of a path (`/` for a file at the top).
fn parent_of(path: &str) -> String {
    match path.rfind('/') {
        Some(0) | None => "/".to_owned(),
        Some(i) => path[..i].to_owned(),
    }
}

/// The files of a directory with their sizes, from one listing.
async fn file_sizes(
    sessions: &mut Sessions,
    server: &ferry_client::RemoteUrl,
    dir: &str,
) -> Result<HashMap<String, u64>, ClientError> {
    let entries = sessions.get(server).await?.list(dir).await?;
    Ok(entries
        .into_iter()
        .filter(|e| e.kind == ferry_client::EntryKind::File)
        .filter_map(|e| {
            let name = e.name.rsplit('/').next().unwrap_or(&e.name).to_owned();
            e.size.map(|n| (name, n))
        })
        .collect())
}

/// Whether the destination is there.
async fn exists(sessions: &mut Sessions, dst: &Location) -> Result<bool, ClientError> {
    match dst {
        Location::Local(p) => Ok(p.exists()),
        Location::Remote(r) => match sessions.get(r).await?.stat(&r.path).await {
            Ok(_) => Ok(true),
            Err(e) if e.class() == ferry_client::ErrorClass::NotFound => Ok(false),
            Err(e) => Err(e),
        },
    }
}
