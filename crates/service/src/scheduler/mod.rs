//! Takes files off the queue and runs them through the resumable copy API
//! ([`ferry_client::FileCopy`]): at most `max_active` at once, as many per link as its
//! optimizer allows ([`crate::optimizer`]), at most `endpoint_max` per server, most urgent
//! first. `link_max` and `endpoint_max` are counted in the queue, over every host that shares
//! it ([`Db::start_attempts_in`]); `max_active` and the optimizer's target are this host's
//! own. Every checkpoint a transfer reports is written to the database as it comes, so a
//! retry, or the service started again after a crash, sends only what the destination lacks.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_client::{
    CancellationToken, ClientError, Ends, FileCopy, FileCopyEvent, GsiOptions, GsiSetup, Location,
    Retry, Sessions, Verify,
};
use ferry_gsi::{Credential, TrustStore};
use ferry_metrics::ResultLabel;
use ferry_proto::RangeSet;
use ferry_storage::ChecksumAlgorithm;
use tokio::sync::{mpsc, Notify};

use crate::db::{endpoints_of, Db, DecisionRow, Ending, FileRow, JobRow, Room};
use crate::metrics::{LinkLabel, Metrics, StateLabel};
use crate::optimizer::{LinkOptimizer, Window};
use crate::submit::JobOptions;
use crate::{now, ServiceError};

mod attempt;
mod destination;
mod measure;
mod sessions;
mod sizing;
mod tune;

pub use attempt::verify_for;

/// How much runs at once.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Transfers at once, in all.
    pub max_active: usize,
    /// Transfers a link (source server → destination server) starts with and never goes below.
    pub link_min: usize,
    /// Transfers a link may reach when the optimizer finds more pay (over all the hosts of a
    /// shared queue; each host's optimizer moves its own share within it).
    pub link_max: usize,
    /// Transfers at once touching one server, over all its links (and all the hosts of a
    /// shared queue).
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

/// Most small files one pipeline takes at a time (it then claims the link's next ones in the
/// transaction that ends these). Each batch drains the pipeline and costs a transaction: 128
/// rather than 32 moved 10 000 small files from 0.77 to 0.82 of `ferry copy -r`'s rate
/// (bench, medians of 3 and 4 alternated runs), while a host that dies hands back at most
/// 128 files per slot, each resent whole (they are small).
const BATCH: usize = 128;

/// Pipelines' worth of READY files the dispatcher reads at a time.
const READ_PIPELINES: usize = 2;

/// Whether a waiting file may join a pipeline: whole, nothing stored, read from a server,
/// small or of a size not known yet (a pipeline lists its sources' directories first and
/// leaves the large ones to run alone).
fn batchable(f: &FileRow) -> bool {
    f.stored.is_empty()
        && f.filesize
            .is_none_or(|n| (0..crate::db::SMALL_FILE).contains(&n))
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
    /// This host's path cache, shared with `gcp` and `ferry copy --tune` (see `tune.rs`).
    path_cache: Option<ferry_client::path::PathCache>,
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

impl Scheduler {
    /// A scheduler over `db`; nothing runs until [`Scheduler::run`].
    pub fn new(
        db: Db,
        limits: Limits,
        trust: Arc<TrustStore>,
        metrics: Arc<Metrics>,
        path_cache: Option<ferry_client::path::PathCache>,
    ) -> Arc<Scheduler> {
        Arc::new(Scheduler {
            db,
            limits,
            trust,
            metrics,
            path_cache,
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

    /// Starts what the free slots allow. Candidates are read a few pipelines' worth at a time
    /// (reading every READY row a free slot might want, on every wake-up, cost more than the
    /// transfers of small files): links found with no room are left out of the next read,
    /// and reading stops when a read starts nothing or the queue has no more.
    async fn dispatch(self: Arc<Self>) -> Result<(), ServiceError> {
        let mut no_room: Vec<String> = Vec::new();
        loop {
            let (free, mut full) = {
                let s = self.state.lock().map_err(|_| poisoned())?;
                let full: Vec<String> = s
                    .per_link
                    .iter()
                    .filter(|(link, n)| **n >= self.target(&s, link))
                    .map(|(link, _)| link.clone())
                    .collect();
                (self.limits.max_active.saturating_sub(s.slots), full)
            };
            if free == 0 {
                return Ok(());
            }
            full.extend(
                no_room
                    .iter()
                    .filter(|l| !full.contains(l))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
            let limit = (free.min(READ_PIPELINES) * BATCH) as i64;
            let ready = self.db.ready_files_except(now(), limit, full).await?;
            let read = ready.len() as i64;
            let started = Arc::clone(&self).start_from(&ready, &mut no_room).await?;
            if started == 0 || read < limit {
                return Ok(());
            }
        }
    }

    /// Whether a pipeline of `link` that ends now may go on with the link's next files: the
    /// service runs, the link is not over its target (the optimizer may have lowered it), and
    /// no other link could want the slot: while every slot is taken, or one of the link's
    /// servers is at `--endpoint-max`, the pipeline ends and the dispatcher gives the slot to
    /// the most urgent file of any link, as when each pipeline ended.
    fn goes_on(&self, link: &str) -> bool {
        if self.shutdown.is_cancelled() {
            return false;
        }
        let Ok(s) = self.state.lock() else {
            return false;
        };
        let within = s.per_link.get(link).copied().unwrap_or(0) <= self.target(&s, link);
        let room = s.slots < self.limits.max_active
            && endpoints_of(link)
                .iter()
                .all(|e| s.per_endpoint.get(e).copied().unwrap_or(0) < self.limits.endpoint_max);
        within && room
    }

    /// How many transfers a link may run now: its optimizer's target, or the minimum before
    /// it has one.
    fn target(&self, s: &Running, link: &str) -> usize {
        s.optimizers
            .get(link)
            .map(|o| o.target() as usize)
            .unwrap_or(self.limits.link_min)
    }

    /// Starts pipelines and single transfers from `ready` while slots are free; the links
    /// found with no room go into `no_room`. The number started.
    async fn start_from(
        self: Arc<Self>,
        ready: &[FileRow],
        no_room: &mut Vec<String>,
    ) -> Result<usize, ServiceError> {
        let mut taken = std::collections::HashSet::new();
        let mut started = 0;
        for f in ready {
            if taken.contains(&f.file_id) || no_room.contains(&f.link) {
                continue;
            }
            {
                let s = self.state.lock().map_err(|_| poisoned())?;
                if s.slots >= self.limits.max_active {
                    break;
                }
                let at_target =
                    s.per_link.get(&f.link).copied().unwrap_or(0) >= self.target(&s, &f.link);
                let busy = endpoints_of(&f.link).iter().any(|e| {
                    s.per_endpoint.get(e).copied().unwrap_or(0) >= self.limits.endpoint_max
                });
                if at_target || busy {
                    no_room.push(f.link.clone());
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
            // The admin's caps on a link and on a server hold over every host of a shared
            // queue, so they are checked again where all hosts count: another host may hold
            // the room this one saw free. The optimizer's target (checked above) is this
            // host's own share of the link, judged from its own transfers.
            let room = Room {
                link: f.link.clone(),
                link_max: self.limits.link_max as i64,
                endpoint_max: self.limits.endpoint_max as i64,
                host_timeout: self.limits.host_timeout.as_secs() as i64,
            };
            let Some(rows) = self.db.start_attempts_in(ids, now(), room).await? else {
                no_room.push(f.link.clone());
                continue;
            };
            for row in &rows {
                self.register(row, &token);
            }
            if rows.is_empty() {
                continue;
            }
            started += 1;
            self.claim_slot(&f.link);
            let me = Arc::clone(&self);
            let link = f.link.clone();
            tokio::spawn(async move {
                if rows.len() == 1 {
                    let outcome = me.run_attempt(&rows[0], &job, &token).await;
                    me.conclude(&rows[0], &job, outcome).await;
                } else {
                    // A pipeline goes on with the link's next small files while its slot is
                    // still wanted: no wait for the dispatcher, no new sessions.
                    let (mut rows, mut job) = (rows, job);
                    while let Some((next_job, next)) = me.run_batch(rows, &job, &token).await {
                        for row in &next {
                            me.register(row, &token);
                        }
                        (rows, job) = (next, next_job);
                    }
                }
                me.release_slot(&link);
                if let Err(e) = me.db.end_slot(link).await {
                    // Counted until this host's next start, or until the others take it for
                    // dead: the link runs one fewer meanwhile, nothing runs twice.
                    tracing::warn!(error = %e, "could not give back a transfer slot");
                }
                me.wake();
            });
        }
        Ok(started)
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
