//! The queue on disk: SQLite (WAL; one service host, nothing to start) or PostgreSQL (several
//! service hosts sharing one queue). Every change is one transaction that commits before the
//! API answers or the scheduler acts on it; statements are written once for both
//! ([`sql`]), schema versions in [`schema`].
//!
//! Several hosts: each file an attempt runs is claimed by its host (`claimed_by`), atomically
//! (PostgreSQL: `FOR UPDATE SKIP LOCKED`, so hosts never wait on each other's rows); hosts
//! heartbeat, and a host whose heartbeat is older than [`HOST_TIMEOUT`] loses its claims: its
//! ACTIVE files go back to the queue with their stored ranges. An attempt's end is recorded
//! only by the host that still holds the claim.

mod schema;
pub(crate) mod sql;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use sql::{vals, Kind, Row, Store, Tx, V};

use crate::states::{FileState, JobState};
use crate::ServiceError;

/// A host that has not beaten its heart for this long is taken for dead (seconds), unless
/// the service is told otherwise (`--host-timeout`).
pub const HOST_TIMEOUT: i64 = 30;

/// The database, shared by the API and the scheduler.
#[derive(Clone)]
pub struct Db {
    conn: Arc<Mutex<Box<dyn Store>>>,
    kind: Kind,
    host: Arc<str>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("kind", &self.kind)
            .field("host", &self.host)
            .finish()
    }
}

/// A job as submitted, checked and ready to store.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// Its id (chosen by the client or made up).
    pub job_id: String,
    /// Who submitted it.
    pub user_dn: String,
    /// 1 (lowest) to 5.
    pub priority: i64,
    /// Retries after a transient failure.
    pub retry: i64,
    /// Seconds between them.
    pub retry_delay: i64,
    /// `none`, `source`, `target` or `both`, or `user` for a given value.
    pub verify: String,
    /// Replace an existing destination.
    pub overwrite: bool,
    /// The job's metadata as given (JSON).
    pub metadata: Option<String>,
    /// Fields accepted but not acted on.
    pub ignored: Vec<String>,
    /// Transfer settings ([`crate::submit::JobOptions`], JSON).
    pub options: String,
    /// SHA-1 of the submission, so a re-submission with the same id is recognised.
    pub body_hash: String,
    /// The files.
    pub files: Vec<NewFile>,
}

/// A file of a [`NewJob`].
#[derive(Debug, Clone)]
pub struct NewFile {
    /// Source URL.
    pub source: String,
    /// Destination URL.
    pub dest: String,
    /// `source host → destination host`, the queue it waits in.
    pub link: String,
    /// Size, when the client said.
    pub filesize: Option<i64>,
    /// `ALG` or `ALG:VALUE`.
    pub checksum: Option<String>,
    /// The file's metadata (JSON).
    pub metadata: Option<String>,
}

/// A job row.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JobRow {
    /// Id.
    pub job_id: String,
    /// Owner.
    pub user_dn: String,
    /// State.
    pub job_state: JobState,
    /// Priority.
    pub priority: i64,
    /// Unix seconds.
    pub submit_time: i64,
    /// Unix seconds, once terminal.
    pub finish_time: Option<i64>,
    /// Why it ended as it did.
    pub reason: Option<String>,
    /// Retries per file.
    pub retry: i64,
    /// Seconds between retries.
    pub retry_delay: i64,
    /// Checksum mode.
    pub verify: String,
    /// Replace destinations.
    pub overwrite: bool,
    /// Metadata (JSON text).
    pub metadata: Option<String>,
    /// Fields ignored at submission.
    pub ignored: Vec<String>,
    /// Whether a user cancelled it.
    pub canceled: bool,
    /// Transfer settings ([`crate::submit::JobOptions`], JSON).
    pub options: String,
}

/// A file row.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileRow {
    /// Id.
    pub file_id: i64,
    /// Its job.
    pub job_id: String,
    /// Position in the job.
    pub file_index: i64,
    /// Source URL.
    pub source: String,
    /// Destination URL.
    pub dest: String,
    /// Link queue.
    pub link: String,
    /// State.
    pub file_state: FileState,
    /// Size, when known.
    pub filesize: Option<i64>,
    /// `ALG` or `ALG:VALUE`.
    pub checksum: Option<String>,
    /// Metadata (JSON text).
    pub metadata: Option<String>,
    /// Why the last attempt failed.
    pub reason: Option<String>,
    /// Transient failures so far.
    pub failures: i64,
    /// Attempts started.
    pub attempts: i64,
    /// Ranges the destination holds (`REST` spelling).
    pub stored: String,
    /// Unix seconds before which it is not started.
    pub next_try: i64,
    /// When the last attempt started.
    pub start_time: Option<i64>,
    /// When it ended.
    pub finish_time: Option<i64>,
    /// Bytes at the destination when it finished.
    pub bytes: i64,
    /// Bytes per second of the last attempt.
    pub throughput: Option<f64>,
}

/// One attempt of a file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AttemptRow {
    /// 1, 2 …
    pub attempt: i64,
    /// Unix seconds.
    pub start_time: i64,
    /// Unix seconds.
    pub end_time: Option<i64>,
    /// Bytes already at the destination when it started.
    pub resumed_bytes: i64,
    /// Bytes it moved.
    pub moved: Option<i64>,
    /// Why it failed.
    pub error: Option<String>,
    /// Whether the failure was worth a retry.
    pub retryable: Option<bool>,
}

/// A delegation row.
#[derive(Debug, Clone)]
pub struct DelegationRow {
    /// Owner.
    pub user_dn: String,
    /// The key of an outstanding request (PEM).
    pub pending_key: Option<String>,
    /// The stored proxy (PEM: certificate, key, chain).
    pub proxy: Option<String>,
    /// Unix seconds when it expires.
    pub termination: Option<i64>,
}

/// How a file's attempt ended, for [`Db::end_attempt`].
#[derive(Debug, Clone)]
pub enum Ending {
    /// Done.
    Finished {
        /// Bytes at the destination.
        bytes: i64,
        /// Bytes moved by this attempt.
        moved: i64,
        /// Bytes per second.
        throughput: f64,
        /// The verified checksum.
        checksum: Option<String>,
    },
    /// Failed; try again after `delay` seconds from the stored ranges.
    Retry {
        /// Why.
        error: String,
        /// Ranges to resume from.
        stored: String,
        /// Seconds to wait.
        delay: i64,
        /// Whether this counts against the job's retries (a service stop does not).
        counted: bool,
    },
    /// Failed for good.
    Failed {
        /// Why.
        error: String,
        /// Whether it was transient (retries ran out).
        retryable: bool,
    },
    /// Cancelled by its owner.
    Canceled,
}

/// Which jobs a listing shows.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// Only this owner's (`None`: everyone's, for admins).
    pub user_dn: Option<String>,
    /// Only these states (empty: the unfinished ones, as FTS3 lists by default).
    pub states: Vec<JobState>,
    /// At most this many, newest first.
    pub limit: i64,
}

/// A decision of the optimizer, as kept.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DecisionRow {
    /// The link.
    pub link: String,
    /// Unix seconds.
    pub time: i64,
    /// Concurrency before.
    pub from: i64,
    /// After.
    pub to: i64,
    /// Bytes per second in the window it judged.
    pub throughput: f64,
    /// Why.
    pub reason: String,
}

const JOB_COLUMNS: &str = "job_id, user_dn, state, priority, submit_time, finish_time, reason, \
     retry, retry_delay, verify, overwrite, metadata, ignored, canceled, options";
const FILE_COLUMNS: &str = "file_id, job_id, file_index, source, dest, link, state, filesize, \
     checksum, metadata, reason, failures, attempts, stored, next_try, start_time, finish_time, \
     bytes, throughput";

/// [`FILE_COLUMNS`] of the table aliased `f`.
fn file_columns_of_f() -> String {
    FILE_COLUMNS
        .split(", ")
        .map(|c| format!("f.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn job_row(r: &Row) -> Result<JobRow, ServiceError> {
    let state = r.t(2)?;
    Ok(JobRow {
        job_id: r.t(0)?,
        user_dn: r.t(1)?,
        job_state: JobState::parse(&state).unwrap_or(JobState::Failed),
        priority: r.i(3)?,
        submit_time: r.i(4)?,
        finish_time: r.oi(5)?,
        reason: r.ot(6)?,
        retry: r.i(7)?,
        retry_delay: r.i(8)?,
        verify: r.t(9)?,
        overwrite: r.i(10)? != 0,
        metadata: r.ot(11)?,
        ignored: serde_json::from_str(&r.t(12)?).unwrap_or_default(),
        canceled: r.i(13)? != 0,
        options: r.t(14)?,
    })
}

fn file_row(r: &Row) -> Result<FileRow, ServiceError> {
    let state = r.t(6)?;
    Ok(FileRow {
        file_id: r.i(0)?,
        job_id: r.t(1)?,
        file_index: r.i(2)?,
        source: r.t(3)?,
        dest: r.t(4)?,
        link: r.t(5)?,
        file_state: FileState::parse(&state).unwrap_or(FileState::Failed),
        filesize: r.oi(7)?,
        checksum: r.ot(8)?,
        metadata: r.ot(9)?,
        reason: r.ot(10)?,
        failures: r.i(11)?,
        attempts: r.i(12)?,
        stored: r.t(13)?,
        next_try: r.i(14)?,
        start_time: r.oi(15)?,
        finish_time: r.oi(16)?,
        bytes: r.i(17)?,
        throughput: r.or(18)?,
    })
}

fn rows_of<T>(
    rows: Vec<Row>,
    f: fn(&Row) -> Result<T, ServiceError>,
) -> Result<Vec<T>, ServiceError> {
    rows.iter().map(f).collect()
}

/// `?start, ?start+1, …` for `n` values.
fn marks(start: usize, n: usize) -> String {
    (start..start + n)
        .map(|i| format!("?{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Db {
    /// Opens the queue: a `postgres://` (or `postgresql://`) URL, or the path of an SQLite file
    /// (created, mode 0600: delegated keys live in it). `host` names this service host in the
    /// queue (its claims and heartbeat). The schema is brought up to date. Blocking: call it
    /// off the async threads (`spawn_blocking`).
    pub fn open(spec: &str, host: &str) -> Result<Db, ServiceError> {
        if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
            let client = postgres::Client::connect(spec, postgres::NoTls).map_err(|e| {
                ServiceError::Database(format!("cannot connect to {}: {e}", redact(spec)))
            })?;
            return Db::setup(Box::new(sql::Pg(Some(client))), Kind::Postgres, host);
        }
        let path = Path::new(spec);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                ServiceError::Database(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        let conn = rusqlite::Connection::open(path)
            .map_err(|e| ServiceError::Database(format!("cannot open {}: {e}", path.display())))?;
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
        }
        Db::sqlite(conn, host)
    }

    /// An SQLite database in memory (tests).
    pub fn in_memory() -> Result<Db, ServiceError> {
        Db::sqlite(rusqlite::Connection::open_in_memory()?, "test-host")
    }

    fn sqlite(conn: rusqlite::Connection, host: &str) -> Result<Db, ServiceError> {
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        // Every statement the service runs stays prepared (the default keeps 16).
        conn.set_prepared_statement_cache_capacity(128);
        // WAL: readers never wait for the writer. NORMAL sync: every commit survives the
        // service's death (SIGKILL, a crash); what a client is told is stored (a job, a
        // delegation) is also synced before the answer ([`Store::set_durable`]), so it
        // survives a power cut too. A state change lost to a power cut only runs a file again
        // from its stored ranges.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        Db::setup(Box::new(conn), Kind::Sqlite, host)
    }

    fn setup(mut store: Box<dyn Store>, kind: Kind, host: &str) -> Result<Db, ServiceError> {
        schema::migrate(store.as_mut())?;
        Ok(Db {
            conn: Arc::new(Mutex::new(store)),
            kind,
            host: host.into(),
        })
    }

    /// Whether several hosts may share this queue (PostgreSQL).
    pub fn shared(&self) -> bool {
        self.kind == Kind::Postgres
    }

    /// This host's name in the queue.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Runs `f` in one transaction on a blocking thread; commits when it returns `Ok`.
    async fn tx<T, F>(&self, durable: bool, f: F) -> Result<T, ServiceError>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn Tx, Kind, &str) -> Result<T, ServiceError> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        let (kind, host) = (self.kind, Arc::clone(&self.host));
        tokio::task::spawn_blocking(move || {
            let mut c = conn
                .lock()
                .map_err(|_| ServiceError::Database("the database lock is poisoned".into()))?;
            if durable {
                c.set_durable(true)?;
            }
            let out = (|| {
                let mut tx = c.begin()?;
                let v = f(tx.as_mut(), kind, &host)?;
                tx.commit()?;
                Ok(v)
            })();
            if durable {
                c.set_durable(false)?;
            }
            out
        })
        .await
        .map_err(|e| ServiceError::Database(format!("database task failed: {e}")))?
    }

    /// Stores a job with its files, or finds the same job already stored (an idempotent
    /// re-submission). `Ok(false)` when the id was taken by the same submission. On the disk
    /// before it returns.
    pub async fn insert_job(&self, job: NewJob, now: i64) -> Result<bool, ServiceError> {
        self.tx(true, move |tx, _, _| {
            if let Some(r) = tx.row(
                "SELECT user_dn, body_hash FROM jobs WHERE job_id = ?1",
                vals![&job.job_id],
            )? {
                if r.t(0)? == job.user_dn && r.t(1)? == job.body_hash {
                    return Ok(false);
                }
                return Err(ServiceError::Conflict(format!(
                    "job id {} is taken by another submission",
                    job.job_id
                )));
            }
            tx.exec(
                "INSERT INTO jobs (job_id, user_dn, state, priority, submit_time, retry, retry_delay, \
                 verify, overwrite, metadata, ignored, options, body_hash) \
                 VALUES (?1, ?2, 'SUBMITTED', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                vals![
                    &job.job_id,
                    &job.user_dn,
                    job.priority,
                    now,
                    job.retry,
                    job.retry_delay,
                    &job.verify,
                    job.overwrite,
                    job.metadata.clone(),
                    serde_json::to_string(&job.ignored).unwrap_or_else(|_| "[]".into()),
                    &job.options,
                    &job.body_hash,
                ],
            )?;
            for (i, f) in job.files.iter().enumerate() {
                tx.exec(
                    "INSERT INTO files (job_id, file_index, source, dest, link, state, filesize, \
                     checksum, metadata, next_try) VALUES (?1, ?2, ?3, ?4, ?5, 'SUBMITTED', ?6, ?7, ?8, ?9)",
                    vals![
                        &job.job_id,
                        i as i64,
                        &f.source,
                        &f.dest,
                        &f.link,
                        f.filesize,
                        f.checksum.clone(),
                        f.metadata.clone(),
                        now
                    ],
                )?;
            }
            Ok(true)
        })
        .await
    }

    /// One job.
    pub async fn job(&self, job_id: String) -> Result<Option<JobRow>, ServiceError> {
        self.tx(false, move |tx, _, _| {
            tx.row(
                &format!("SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = ?1"),
                vals![job_id],
            )?
            .as_ref()
            .map(job_row)
            .transpose()
        })
        .await
    }

    /// Jobs by a filter, newest first.
    pub async fn jobs(&self, filter: JobFilter) -> Result<Vec<JobRow>, ServiceError> {
        self.tx(false, move |tx, _, _| {
            let states: Vec<V> = if filter.states.is_empty() {
                JobState::UNFINISHED
                    .iter()
                    .map(|s| V::from(s.as_str()))
                    .collect()
            } else {
                filter.states.iter().map(|s| V::from(s.as_str())).collect()
            };
            let mut sql = format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE state IN ({})",
                marks(1, states.len())
            );
            let mut args = states;
            if let Some(user) = filter.user_dn {
                args.push(V::from(user));
                sql.push_str(&format!(" AND user_dn = ?{}", args.len()));
            }
            args.push(V::from(filter.limit.max(1)));
            sql.push_str(&format!(
                " ORDER BY submit_time DESC, job_id DESC LIMIT ?{}",
                args.len()
            ));
            rows_of(tx.rows(&sql, &args)?, job_row)
        })
        .await
    }

    /// A job's files in order.
    pub async fn files(&self, job_id: String) -> Result<Vec<FileRow>, ServiceError> {
        self.tx(false, move |tx, _, _| {
            rows_of(
                tx.rows(
                    &format!(
                        "SELECT {FILE_COLUMNS} FROM files WHERE job_id = ?1 ORDER BY file_index"
                    ),
                    vals![job_id],
                )?,
                file_row,
            )
        })
        .await
    }

    /// One file.
    pub async fn file(&self, file_id: i64) -> Result<Option<FileRow>, ServiceError> {
        self.tx(false, move |tx, _, _| {
            tx.row(
                &format!("SELECT {FILE_COLUMNS} FROM files WHERE file_id = ?1"),
                vals![file_id],
            )?
            .as_ref()
            .map(file_row)
            .transpose()
        })
        .await
    }

    /// A file's attempts in order.
    pub async fn attempts(&self, file_id: i64) -> Result<Vec<AttemptRow>, ServiceError> {
        self.tx(false, move |tx, _, _| {
            tx.rows(
                "SELECT attempt, start_time, end_time, resumed_bytes, moved, error, retryable \
                 FROM attempts WHERE file_id = ?1 ORDER BY attempt",
                vals![file_id],
            )?
            .iter()
            .map(|r| {
                Ok(AttemptRow {
                    attempt: r.i(0)?,
                    start_time: r.i(1)?,
                    end_time: r.oi(2)?,
                    resumed_bytes: r.i(3)?,
                    moved: r.oi(4)?,
                    error: r.ot(5)?,
                    retryable: r.oi(6)?.map(|v| v != 0),
                })
            })
            .collect()
        })
        .await
    }

    /// Files waiting whose time has come become READY; the READY ones come back, most urgent
    /// first (priority, then submission order).
    pub async fn ready_files(&self, now: i64, limit: i64) -> Result<Vec<FileRow>, ServiceError> {
        self.ready_files_except(now, limit, Vec::new()).await
    }

    /// [`Db::ready_files`] leaving out the files of `full` links (no slot free there), so that
    /// a long queue on one busy link does not hide the files of the others.
    pub async fn ready_files_except(
        &self,
        now: i64,
        limit: i64,
        full: Vec<String>,
    ) -> Result<Vec<FileRow>, ServiceError> {
        self.tx(false, move |tx, _, _| {
            tx.exec(
                "UPDATE files SET state = 'READY' WHERE state = 'SUBMITTED' AND next_try <= ?1",
                vals![now],
            )?;
            // The unfinished jobs, most urgent first (few), then each one's READY files in
            // order through the (job_id, state) index: the cost follows `limit`, not the queue.
            let jobs = tx.rows(
                "SELECT job_id FROM jobs WHERE state IN ('SUBMITTED', 'ACTIVE') \
                 ORDER BY priority DESC, submit_time, job_id",
                &[],
            )?;
            let mut out = Vec::new();
            for j in jobs {
                let left = limit - out.len() as i64;
                if left <= 0 {
                    break;
                }
                let mut args = vec![V::from(j.t(0)?), V::from(left)];
                let skip = if full.is_empty() {
                    String::new()
                } else {
                    args.extend(full.iter().map(V::from));
                    format!(" AND link NOT IN ({})", marks(3, full.len()))
                };
                let rows = tx.rows(
                    &format!(
                        "SELECT {FILE_COLUMNS} FROM files WHERE job_id = ?1 AND state = 'READY'{skip} \
                         ORDER BY file_id LIMIT ?2"
                    ),
                    &args,
                )?;
                out.extend(rows_of(rows, file_row)?);
            }
            Ok(out)
        })
        .await
    }

    /// Claims a READY file for this host, moves it to ACTIVE and records its new attempt;
    /// `None` when it is no longer READY (cancelled, or another host took it).
    pub async fn start_attempt(
        &self,
        file_id: i64,
        now: i64,
    ) -> Result<Option<FileRow>, ServiceError> {
        Ok(self
            .start_attempts(vec![file_id], now)
            .await?
            .into_iter()
            .next())
    }

    /// [`Db::start_attempt`] for several files in one transaction; the ones it claimed.
    pub async fn start_attempts(
        &self,
        file_ids: Vec<i64>,
        now: i64,
    ) -> Result<Vec<FileRow>, ServiceError> {
        self.tx(false, move |tx, kind, host| {
            let mut rows = Vec::with_capacity(file_ids.len());
            for id in file_ids {
                if let Some(row) = start_one(tx, kind, host, id, now)? {
                    rows.push(row);
                }
            }
            let mut jobs: Vec<&str> = rows.iter().map(|r| r.job_id.as_str()).collect();
            jobs.sort_unstable();
            jobs.dedup();
            for j in jobs {
                refresh_job_state(tx, j, now)?;
            }
            Ok(rows)
        })
        .await
    }

    /// Sizes of a job's files whose size was not given, from a listing of one source
    /// directory (`dir` on the server of `server`, `sizes` by name), in one transaction: the
    /// job's later pipelines need not list it again.
    pub async fn set_sizes_in_dir(
        &self,
        job_id: String,
        server: ferry_client::RemoteUrl,
        dir: String,
        sizes: HashMap<String, u64>,
    ) -> Result<(), ServiceError> {
        self.tx(false, move |tx, _, _| {
            let unknown = tx.rows(
                "SELECT file_id, source FROM files WHERE job_id = ?1 AND filesize IS NULL",
                vals![job_id],
            )?;
            for r in unknown {
                let Ok(ferry_client::Location::Remote(src)) =
                    ferry_client::Location::parse(&r.t(1)?)
                else {
                    continue;
                };
                let Some((parent, name)) = src.path.rsplit_once('/') else {
                    continue;
                };
                let parent = if parent.is_empty() { "/" } else { parent };
                if !src.same_server(&server) || parent != dir {
                    continue;
                }
                if let Some(&n) = sizes.get(name) {
                    tx.exec(
                        "UPDATE files SET filesize = ?2 WHERE file_id = ?1",
                        vals![r.i(0)?, n as i64],
                    )?;
                }
            }
            Ok(())
        })
        .await
    }

    /// Records a file's size, once learnt from its source.
    pub async fn set_filesize(&self, file_id: i64, size: i64) -> Result<(), ServiceError> {
        self.tx(false, move |tx, _, _| {
            tx.exec(
                "UPDATE files SET filesize = ?2 WHERE file_id = ?1 AND filesize IS NULL",
                vals![file_id, size],
            )?;
            Ok(())
        })
        .await
    }

    /// Records a checkpoint: the ranges the destination holds now (while this host holds the
    /// file's claim).
    pub async fn store_ranges(&self, file_id: i64, ranges: String) -> Result<(), ServiceError> {
        self.tx(false, move |tx, _, host| {
            tx.exec(
                "UPDATE files SET stored = ?2 WHERE file_id = ?1 AND claimed_by = ?3",
                vals![file_id, ranges, host],
            )?;
            Ok(())
        })
        .await
    }

    /// Ends this host's running attempt of a file and moves the file (and its job) on. An
    /// attempt whose claim was taken back (this host was taken for dead) is not recorded:
    /// `Conflict`.
    pub async fn end_attempt(
        &self,
        file_id: i64,
        ending: Ending,
        now: i64,
    ) -> Result<(), ServiceError> {
        self.end_attempts(vec![(file_id, ending)], now)
            .await?
            .into_iter()
            .next()
            .unwrap_or(Ok(()))
    }

    /// [`Db::end_attempt`] for several files in one transaction; each file's own result.
    pub async fn end_attempts(
        &self,
        endings: Vec<(i64, Ending)>,
        now: i64,
    ) -> Result<Vec<Result<(), ServiceError>>, ServiceError> {
        self.tx(false, move |tx, _, host| {
            let mut out = Vec::with_capacity(endings.len());
            let mut jobs = Vec::new();
            for (file_id, ending) in endings {
                match end_one(tx, host, file_id, ending, now)? {
                    Ok(job) => {
                        jobs.push(job);
                        out.push(Ok(()));
                    }
                    Err(e) => out.push(Err(e)),
                }
            }
            jobs.sort_unstable();
            jobs.dedup();
            for j in jobs {
                refresh_job_state(tx, &j, now)?;
            }
            Ok(out)
        })
        .await
    }

    /// Cancels jobs of `user` (any user's for `None`, an admin): waiting files become CANCELED
    /// at once; the ACTIVE ones come back so the scheduler stops them (a host running files of a
    /// cancelled job also finds them itself, [`Db::canceled_here`]). An id that is not the
    /// caller's or does not exist is an error.
    pub async fn cancel(
        &self,
        job_ids: Vec<String>,
        user: Option<String>,
        now: i64,
    ) -> Result<Vec<i64>, ServiceError> {
        self.tx(false, move |tx, _, host| {
            let mut active = Vec::new();
            for id in &job_ids {
                let owner = tx
                    .row("SELECT user_dn FROM jobs WHERE job_id = ?1", vals![id])?
                    .map(|r| r.t(0))
                    .transpose()?;
                match (&owner, &user) {
                    (None, _) => return Err(ServiceError::NotFound(format!("no job {id}"))),
                    (Some(o), Some(u)) if o != u => {
                        return Err(ServiceError::NotFound(format!("no job {id}")))
                    }
                    _ => {}
                }
                tx.exec("UPDATE jobs SET canceled = 1 WHERE job_id = ?1", vals![id])?;
                tx.exec(
                    "UPDATE files SET state = 'CANCELED', reason = 'canceled by its owner', finish_time = ?2 \
                     WHERE job_id = ?1 AND state IN ('SUBMITTED', 'READY')",
                    vals![id, now],
                )?;
                for r in tx.rows(
                    "SELECT file_id FROM files WHERE job_id = ?1 AND state = 'ACTIVE' AND claimed_by = ?2",
                    vals![id, host],
                )? {
                    active.push(r.i(0)?);
                }
                refresh_job_state(tx, id, now)?;
            }
            Ok(active)
        })
        .await
    }

    /// The files this host runs whose job was cancelled (by a request to any host).
    pub async fn canceled_here(&self) -> Result<Vec<i64>, ServiceError> {
        self.tx(false, |tx, _, host| {
            tx.rows(
                "SELECT f.file_id FROM files f JOIN jobs j ON j.job_id = f.job_id \
                 WHERE j.canceled = 1 AND f.state = 'ACTIVE' AND f.claimed_by = ?1",
                vals![host],
            )?
            .iter()
            .map(|r| r.i(0))
            .collect()
        })
        .await
    }

    /// This host is alive.
    pub async fn heartbeat(&self, now: i64) -> Result<(), ServiceError> {
        self.tx(false, move |tx, _, host| {
            tx.exec(
                "INSERT INTO hosts (host_id, heartbeat) VALUES (?1, ?2) \
                 ON CONFLICT (host_id) DO UPDATE SET heartbeat = excluded.heartbeat",
                vals![host, now],
            )?;
            Ok(())
        })
        .await
    }

    /// Takes back the claims of hosts that stopped: this host's own from before it started
    /// (`own`), and those of hosts silent for `timeout` seconds; with SQLite, whose file has
    /// one host only, every claim. Their ACTIVE files go back to wait, resuming from their
    /// stored ranges; their attempts end without counting against their retries. How many.
    pub async fn reclaim(&self, now: i64, own: bool, timeout: i64) -> Result<usize, ServiceError> {
        self.tx(false, move |tx, kind, host| {
            let alive_since = match kind {
                // One host per SQLite file: nobody else holds a claim worth keeping.
                Kind::Sqlite => i64::MAX,
                Kind::Postgres => now - timeout,
            };
            let me = if own { host.to_owned() } else { String::new() };
            let lost = "f.state = 'ACTIVE' AND (f.claimed_by IS NULL OR f.claimed_by = ?1 OR \
                        f.claimed_by NOT IN (SELECT host_id FROM hosts WHERE heartbeat >= ?2))";
            let ids: Vec<(i64, String)> = tx
                .rows(
                    &format!("SELECT f.file_id, f.job_id FROM files f WHERE {lost}"),
                    vals![&me, alive_since],
                )?
                .iter()
                .map(|r| Ok((r.i(0)?, r.t(1)?)))
                .collect::<Result<_, ServiceError>>()?;
            for (file_id, _) in &ids {
                tx.exec(
                    "UPDATE attempts SET end_time = ?2, error = 'the service stopped during this attempt', \
                     retryable = 1 WHERE file_id = ?1 AND end_time IS NULL",
                    vals![*file_id, now],
                )?;
                tx.exec(
                    "UPDATE files SET state = 'SUBMITTED', next_try = ?2, claimed_by = NULL, \
                     reason = 'the service stopped during an attempt; resumed' WHERE file_id = ?1",
                    vals![*file_id, now],
                )?;
            }
            let mut jobs: Vec<&String> = ids.iter().map(|(_, j)| j).collect();
            jobs.sort();
            jobs.dedup();
            for j in jobs {
                refresh_job_state(tx, j, now)?;
            }
            Ok(ids.len())
        })
        .await
    }

    /// A delegation by id.
    pub async fn delegation(&self, id: String) -> Result<Option<DelegationRow>, ServiceError> {
        self.tx(false, move |tx, _, _| {
            tx.row(
                "SELECT user_dn, pending_key, proxy, termination FROM delegations WHERE delegation_id = ?1",
                vals![id],
            )?
            .map(|r| {
                Ok(DelegationRow {
                    user_dn: r.t(0)?,
                    pending_key: r.ot(1)?,
                    proxy: r.ot(2)?,
                    termination: r.oi(3)?,
                })
            })
            .transpose()
        })
        .await
    }

    /// Keeps the private key of a new delegation request (the proxy stored so far stays
    /// until the new one arrives).
    pub async fn set_pending_key(
        &self,
        id: String,
        user_dn: String,
        key_pem: String,
    ) -> Result<(), ServiceError> {
        self.tx(true, move |tx, _, _| {
            tx.exec(
                "INSERT INTO delegations (delegation_id, user_dn, pending_key) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (delegation_id) DO UPDATE SET pending_key = excluded.pending_key",
                vals![id, user_dn, key_pem],
            )?;
            Ok(())
        })
        .await
    }

    /// Stores a delegated proxy and forgets the request's key; on the disk before it returns.
    pub async fn set_proxy(
        &self,
        id: String,
        proxy_pem: String,
        termination: i64,
    ) -> Result<(), ServiceError> {
        self.tx(true, move |tx, _, _| {
            tx.exec(
                "UPDATE delegations SET proxy = ?2, termination = ?3, pending_key = NULL \
                 WHERE delegation_id = ?1",
                vals![id, proxy_pem, termination],
            )?;
            Ok(())
        })
        .await
    }

    /// Counts of files per link and state, for the dashboard and the scheduler.
    pub async fn link_counts(&self) -> Result<Vec<(String, String, i64)>, ServiceError> {
        self.tx(false, |tx, _, _| {
            tx.rows(
                "SELECT link, state, COUNT(*) FROM files GROUP BY link, state",
                &[],
            )?
            .iter()
            .map(|r| Ok((r.t(0)?, r.t(1)?, r.i(2)?)))
            .collect()
        })
        .await
    }

    /// Keeps a decision of the optimizer.
    pub async fn insert_decision(&self, d: DecisionRow) -> Result<(), ServiceError> {
        self.tx(false, move |tx, _, _| {
            tx.exec(
                "INSERT INTO decisions (link, time, from_active, to_active, throughput, reason) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                vals![d.link, d.time, d.from, d.to, d.throughput, d.reason],
            )?;
            Ok(())
        })
        .await
    }

    /// The newest decisions, newest first.
    pub async fn decisions(&self, limit: i64) -> Result<Vec<DecisionRow>, ServiceError> {
        self.tx(false, move |tx, _, _| {
            tx.rows(
                "SELECT link, time, from_active, to_active, throughput, reason FROM decisions \
                 ORDER BY id DESC LIMIT ?1",
                vals![limit],
            )?
            .iter()
            .map(|r| {
                Ok(DecisionRow {
                    link: r.t(0)?,
                    time: r.i(1)?,
                    from: r.i(2)?,
                    to: r.i(3)?,
                    throughput: r.r(4)?,
                    reason: r.t(5)?,
                })
            })
            .collect()
        })
        .await
    }

    /// The newest files of the jobs `user` may see (every job's for `None`), newest first.
    pub async fn recent_files(
        &self,
        user: Option<String>,
        limit: i64,
    ) -> Result<Vec<FileRow>, ServiceError> {
        self.tx(false, move |tx, _, _| {
            let (sql, args) = match user {
                Some(u) => (
                    format!(
                        "SELECT {} FROM files f JOIN jobs j ON j.job_id = f.job_id \
                         WHERE j.user_dn = ?1 ORDER BY f.file_id DESC LIMIT ?2",
                        file_columns_of_f()
                    ),
                    vec![V::from(u), V::from(limit)],
                ),
                None => (
                    format!("SELECT {FILE_COLUMNS} FROM files ORDER BY file_id DESC LIMIT ?1"),
                    vec![V::from(limit)],
                ),
            };
            rows_of(tx.rows(&sql, &args)?, file_row)
        })
        .await
    }

    /// The newest jobs `user` may see (every job's for `None`) with their files' counts per
    /// state, newest first.
    pub async fn job_summaries(
        &self,
        user: Option<String>,
        limit: i64,
    ) -> Result<Vec<(JobRow, Vec<(String, i64)>)>, ServiceError> {
        self.tx(false, move |tx, _, _| {
            let rows = match user {
                Some(u) => tx.rows(
                    &format!(
                        "SELECT {JOB_COLUMNS} FROM jobs WHERE user_dn = ?1 \
                         ORDER BY submit_time DESC, job_id DESC LIMIT ?2"
                    ),
                    vals![u, limit],
                )?,
                None => tx.rows(
                    &format!(
                        "SELECT {JOB_COLUMNS} FROM jobs ORDER BY submit_time DESC, job_id DESC LIMIT ?1"
                    ),
                    vals![limit],
                )?,
            };
            let mut out = Vec::with_capacity(rows.len());
            for j in rows_of(rows, job_row)? {
                let counts = tx
                    .rows(
                        "SELECT state, COUNT(*) FROM files WHERE job_id = ?1 GROUP BY state",
                        vals![&j.job_id],
                    )?
                    .iter()
                    .map(|r| Ok((r.t(0)?, r.i(1)?)))
                    .collect::<Result<Vec<_>, ServiceError>>()?;
                out.push((j, counts));
            }
            Ok(out)
        })
        .await
    }

    /// Counts of files per state in all.
    pub async fn state_counts(&self) -> Result<Vec<(String, i64)>, ServiceError> {
        self.tx(false, |tx, _, _| {
            tx.rows("SELECT state, COUNT(*) FROM files GROUP BY state", &[])?
                .iter()
                .map(|r| Ok((r.t(0)?, r.i(1)?)))
                .collect()
        })
        .await
    }
}

/// Ends one file's attempt (see [`Db::end_attempts`]); its job, or `Conflict` when this host
/// no longer holds the claim. The caller refreshes the jobs.
fn end_one(
    tx: &mut dyn Tx,
    host: &str,
    file_id: i64,
    ending: Ending,
    now: i64,
) -> Result<Result<String, ServiceError>, ServiceError> {
    let Some(r) = tx.row(
        "SELECT job_id, attempts FROM files WHERE file_id = ?1 AND state = 'ACTIVE' AND claimed_by = ?2",
        vals![file_id, host],
    )?
    else {
        return Ok(Err(ServiceError::Conflict(format!(
            "file {file_id} is no longer this host's: its claim was taken back"
        ))));
    };
    let (job_id, attempt) = (r.t(0)?, r.i(1)?);
    let (error, retryable, moved) = match &ending {
        Ending::Finished {
            bytes,
            moved,
            throughput,
            checksum,
        } => {
            tx.exec(
                "UPDATE files SET state = 'FINISHED', finish_time = ?2, bytes = ?3, \
                 throughput = ?4, reason = NULL, checksum = COALESCE(?5, checksum), \
                 stored = '', claimed_by = NULL WHERE file_id = ?1",
                vals![file_id, now, *bytes, *throughput, checksum.clone()],
            )?;
            (None, None, Some(*moved))
        }
        Ending::Retry {
            error,
            stored,
            delay,
            counted,
        } => {
            tx.exec(
                "UPDATE files SET state = 'SUBMITTED', reason = ?2, stored = ?3, \
                 next_try = ?4, failures = failures + ?5, claimed_by = NULL WHERE file_id = ?1",
                vals![file_id, error, stored, now + delay, *counted],
            )?;
            (Some(error.clone()), Some(true), None)
        }
        Ending::Failed { error, retryable } => {
            tx.exec(
                "UPDATE files SET state = 'FAILED', reason = ?2, finish_time = ?3, \
                 claimed_by = NULL WHERE file_id = ?1",
                vals![file_id, error, now],
            )?;
            (Some(error.clone()), Some(*retryable), None)
        }
        Ending::Canceled => {
            tx.exec(
                "UPDATE files SET state = 'CANCELED', reason = 'canceled by its owner', \
                 finish_time = ?2, claimed_by = NULL WHERE file_id = ?1",
                vals![file_id, now],
            )?;
            (Some("canceled".to_owned()), Some(false), None)
        }
    };
    tx.exec(
        "UPDATE attempts SET end_time = ?3, error = ?4, retryable = ?5, moved = ?6 \
         WHERE file_id = ?1 AND attempt = ?2",
        vals![file_id, attempt, now, error, retryable, moved],
    )?;
    Ok(Ok(job_id))
}

/// Claims one READY file (see [`Db::start_attempts`]); the caller refreshes its job. One
/// `UPDATE … RETURNING` claims and reads it (PostgreSQL: a row another host is claiming is
/// skipped, not waited for).
fn start_one(
    tx: &mut dyn Tx,
    kind: Kind,
    host: &str,
    file_id: i64,
    now: i64,
) -> Result<Option<FileRow>, ServiceError> {
    let which = match kind {
        Kind::Postgres => {
            "file_id = (SELECT file_id FROM files WHERE file_id = ?1 AND state = 'READY' \
             FOR UPDATE SKIP LOCKED)"
        }
        Kind::Sqlite => "file_id = ?1 AND state = 'READY'",
    };
    let Some(row) = tx
        .row(
            &format!(
                "UPDATE files SET state = 'ACTIVE', attempts = attempts + 1, start_time = ?2, \
                 claimed_by = ?3 WHERE {which} RETURNING {FILE_COLUMNS}"
            ),
            vals![file_id, now, host],
        )?
        .as_ref()
        .map(file_row)
        .transpose()?
    else {
        return Ok(None);
    };
    let resumed = ferry_proto::RangeSet::parse(&row.stored)
        .map(|r| r.total())
        .unwrap_or(0);
    tx.exec(
        "INSERT INTO attempts (file_id, attempt, start_time, resumed_bytes) VALUES (?1, ?2, ?3, ?4)",
        vals![file_id, row.attempts, now, resumed as i64],
    )?;
    Ok(Some(row))
}

/// Sets a job's state (and finish time) from its files' states. While the job runs this is
/// two index probes (`files(job_id, state)`), not a count of its files, so a job of many files
/// costs the same per transition as a job of one; the files are counted once, when it ends.
fn refresh_job_state(tx: &mut dyn Tx, job_id: &str, now: i64) -> Result<(), ServiceError> {
    let Some(job) = tx.row(
        "SELECT canceled, state FROM jobs WHERE job_id = ?1",
        vals![job_id],
    )?
    else {
        return Ok(());
    };
    let (canceled, current) = (job.i(0)? != 0, job.t(1)?);
    let any = |tx: &mut dyn Tx, states: &str| -> Result<bool, ServiceError> {
        Ok(tx
            .row(
                &format!("SELECT 1 FROM files WHERE job_id = ?1 AND state IN ({states}) LIMIT 1"),
                vals![job_id],
            )?
            .is_some())
    };
    if any(tx, "'SUBMITTED', 'READY', 'ACTIVE'")? {
        let started = any(tx, "'ACTIVE', 'FINISHED', 'FAILED', 'CANCELED'")?;
        let state = if started {
            JobState::Active
        } else {
            JobState::Submitted
        };
        if current != state.as_str() {
            tx.exec(
                "UPDATE jobs SET state = ?2, reason = NULL WHERE job_id = ?1",
                vals![job_id, state.as_str()],
            )?;
        }
        return Ok(());
    }
    let mut counts = crate::states::FileCounts::default();
    for r in tx.rows(
        "SELECT state, COUNT(*) FROM files WHERE job_id = ?1 GROUP BY state",
        vals![job_id],
    )? {
        if let Some(s) = FileState::parse(&r.t(0)?) {
            counts.add(s, r.i(1)?);
        }
    }
    let state = counts.job_state(canceled);
    let reason = counts.reason(canceled);
    tx.exec(
        "UPDATE jobs SET state = ?2, reason = ?3, finish_time = COALESCE(finish_time, ?4) WHERE job_id = ?1",
        vals![job_id, state.as_str(), reason, now],
    )?;
    Ok(())
}

/// A database URL without its password, for messages.
fn redact(spec: &str) -> String {
    match (spec.find("://"), spec.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let cred = &spec[s + 3..at];
            match cred.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &spec[..s + 3], &spec[at..]),
                None => spec.to_owned(),
            }
        }
        _ => spec.to_owned(),
    }
}

impl From<rusqlite::Error> for ServiceError {
    fn from(e: rusqlite::Error) -> Self {
        ServiceError::Database(e.to_string())
    }
}
