//! The queue on disk: SQLite in WAL mode, one connection behind a mutex, every change in a
//! transaction that commits before the API answers or the scheduler acts on it.
//!
//! Schema versions live in `PRAGMA user_version`; [`MIGRATIONS`] holds one script per version
//! and a database is brought forward from whatever version it has, never backwards.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::{params, Connection, OptionalExtension};

use crate::states::{FileState, JobState};
use crate::ServiceError;

/// One script per schema version; index N takes a database from version N to N + 1.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE jobs (
    job_id        TEXT PRIMARY KEY,
    user_dn       TEXT NOT NULL,
    state         TEXT NOT NULL,
    priority      INTEGER NOT NULL,
    submit_time   INTEGER NOT NULL,
    finish_time   INTEGER,
    reason        TEXT,
    canceled      INTEGER NOT NULL DEFAULT 0,
    retry         INTEGER NOT NULL,
    retry_delay   INTEGER NOT NULL,
    verify        TEXT NOT NULL,
    overwrite     INTEGER NOT NULL,
    metadata      TEXT,
    ignored       TEXT NOT NULL,
    options       TEXT NOT NULL,
    body_hash     TEXT NOT NULL
);
CREATE INDEX jobs_user ON jobs(user_dn, state);
CREATE TABLE files (
    file_id       INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id        TEXT NOT NULL REFERENCES jobs(job_id),
    file_index    INTEGER NOT NULL,
    source        TEXT NOT NULL,
    dest          TEXT NOT NULL,
    link          TEXT NOT NULL,
    state         TEXT NOT NULL,
    filesize      INTEGER,
    checksum      TEXT,
    metadata      TEXT,
    reason        TEXT,
    failures      INTEGER NOT NULL DEFAULT 0,
    attempts      INTEGER NOT NULL DEFAULT 0,
    stored        TEXT NOT NULL DEFAULT '',
    next_try      INTEGER NOT NULL,
    start_time    INTEGER,
    finish_time   INTEGER,
    bytes         INTEGER NOT NULL DEFAULT 0,
    throughput    REAL
);
CREATE INDEX files_state ON files(state, next_try);
CREATE INDEX files_job ON files(job_id);
CREATE TABLE attempts (
    file_id       INTEGER NOT NULL REFERENCES files(file_id),
    attempt       INTEGER NOT NULL,
    start_time    INTEGER NOT NULL,
    end_time      INTEGER,
    resumed_bytes INTEGER NOT NULL,
    moved         INTEGER,
    error         TEXT,
    retryable     INTEGER,
    PRIMARY KEY (file_id, attempt)
);
CREATE TABLE delegations (
    delegation_id TEXT PRIMARY KEY,
    user_dn       TEXT NOT NULL,
    pending_key   TEXT,
    proxy         TEXT,
    termination   INTEGER
);
"#,
    // 2: the optimizer's decisions, each with its reason.
    r#"
CREATE TABLE decisions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    link          TEXT NOT NULL,
    time          INTEGER NOT NULL,
    from_active   INTEGER NOT NULL,
    to_active     INTEGER NOT NULL,
    throughput    REAL NOT NULL,
    reason        TEXT NOT NULL
);
CREATE INDEX decisions_time ON decisions(time);
"#,
];

/// The database, shared by the API and the scheduler.
#[derive(Clone)]
pub struct Db {
    conn: Arc<Mutex<Connection>>,
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

const JOB_COLUMNS: &str = "job_id, user_dn, state, priority, submit_time, finish_time, reason, \
     retry, retry_delay, verify, overwrite, metadata, ignored, canceled, options";
const FILE_COLUMNS: &str = "file_id, job_id, file_index, source, dest, link, state, filesize, \
     checksum, metadata, reason, failures, attempts, stored, next_try, start_time, finish_time, \
     bytes, throughput";

fn job_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<JobRow> {
    let state: String = r.get(2)?;
    let ignored: String = r.get(12)?;
    Ok(JobRow {
        job_id: r.get(0)?,
        user_dn: r.get(1)?,
        job_state: JobState::parse(&state).unwrap_or(JobState::Failed),
        priority: r.get(3)?,
        submit_time: r.get(4)?,
        finish_time: r.get(5)?,
        reason: r.get(6)?,
        retry: r.get(7)?,
        retry_delay: r.get(8)?,
        verify: r.get(9)?,
        overwrite: r.get::<_, i64>(10)? != 0,
        metadata: r.get(11)?,
        ignored: serde_json::from_str(&ignored).unwrap_or_default(),
        canceled: r.get::<_, i64>(13)? != 0,
        options: r.get(14)?,
    })
}

fn file_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<FileRow> {
    let state: String = r.get(6)?;
    Ok(FileRow {
        file_id: r.get(0)?,
        job_id: r.get(1)?,
        file_index: r.get(2)?,
        source: r.get(3)?,
        dest: r.get(4)?,
        link: r.get(5)?,
        file_state: FileState::parse(&state).unwrap_or(FileState::Failed),
        filesize: r.get(7)?,
        checksum: r.get(8)?,
        metadata: r.get(9)?,
        reason: r.get(10)?,
        failures: r.get(11)?,
        attempts: r.get(12)?,
        stored: r.get(13)?,
        next_try: r.get(14)?,
        start_time: r.get(15)?,
        finish_time: r.get(16)?,
        bytes: r.get(17)?,
        throughput: r.get(18)?,
    })
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

impl Db {
    /// Opens (creating) the database at `path`, readable by its owner only, in WAL mode, and
    /// brings its schema up to date.
    pub fn open(path: &Path) -> Result<Db, ServiceError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                ServiceError::Database(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        let conn = Connection::open(path)
            .map_err(|e| ServiceError::Database(format!("cannot open {}: {e}", path.display())))?;
        {
            use std::os::unix::fs::PermissionsExt;
            // Delegated keys live here.
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
        }
        Db::setup(conn)
    }

    /// A database in memory (tests).
    pub fn in_memory() -> Result<Db, ServiceError> {
        Db::setup(Connection::open_in_memory()?)
    }

    fn setup(mut conn: Connection) -> Result<Db, ServiceError> {
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        // WAL: readers never wait for the writer. NORMAL sync: every commit survives the
        // service's death (SIGKILL, a crash); what a client is told is stored (a job, a
        // delegation) is also synced to the disk before the answer (`durable`), so it survives
        // a power cut too. A state change lost to a power cut only runs a file again from its
        // stored ranges.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let known = MIGRATIONS.len() as i64;
        if version > known {
            return Err(ServiceError::Database(format!(
                "the database has schema version {version}, newer than this ferry knows ({known}): use a newer ferry"
            )));
        }
        for (i, script) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let tx = conn.transaction()?;
            tx.execute_batch(script)?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)?;
            tx.commit()?;
        }
        Ok(Db {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Runs `f` on the connection on a blocking thread.
    pub async fn call<T, F>(&self, f: F) -> Result<T, ServiceError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, ServiceError> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let mut c = conn
                .lock()
                .map_err(|_| ServiceError::Database("the database lock is poisoned".into()))?;
            f(&mut c)
        })
        .await
        .map_err(|e| ServiceError::Database(format!("database task failed: {e}")))?
    }

    /// Stores a job with its files, or finds the same job already stored (an idempotent
    /// re-submission). `Ok(false)` when the id was taken by the same submission. On the disk
    /// before it returns.
    pub async fn insert_job(&self, job: NewJob, now: i64) -> Result<bool, ServiceError> {
        self.call(move |c| durably(c, |c| {
            let tx = c.transaction()?;
            let existing: Option<(String, String)> = tx
                .query_row(
                    "SELECT user_dn, body_hash FROM jobs WHERE job_id = ?1",
                    [&job.job_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            if let Some((user, hash)) = existing {
                if user == job.user_dn && hash == job.body_hash {
                    return Ok(false);
                }
                return Err(ServiceError::Conflict(format!(
                    "job id {} is taken by another submission",
                    job.job_id
                )));
            }
            tx.execute(
                "INSERT INTO jobs (job_id, user_dn, state, priority, submit_time, retry, retry_delay, \
                 verify, overwrite, metadata, ignored, options, body_hash) \
                 VALUES (?1, ?2, 'SUBMITTED', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![
                    job.job_id,
                    job.user_dn,
                    job.priority,
                    now,
                    job.retry,
                    job.retry_delay,
                    job.verify,
                    job.overwrite as i64,
                    job.metadata,
                    serde_json::to_string(&job.ignored).unwrap_or_else(|_| "[]".into()),
                    job.options,
                    job.body_hash,
                ],
            )?;
            {
                let mut ins = tx.prepare(
                    "INSERT INTO files (job_id, file_index, source, dest, link, state, filesize, \
                     checksum, metadata, next_try) VALUES (?1, ?2, ?3, ?4, ?5, 'SUBMITTED', ?6, ?7, ?8, ?9)",
                )?;
                for (i, f) in job.files.iter().enumerate() {
                    ins.execute(params![
                        job.job_id,
                        i as i64,
                        f.source,
                        f.dest,
                        f.link,
                        f.filesize,
                        f.checksum,
                        f.metadata,
                        now
                    ])?;
                }
            }
            tx.commit()?;
            Ok(true)
        }))
        .await
    }

    /// One job.
    pub async fn job(&self, job_id: String) -> Result<Option<JobRow>, ServiceError> {
        self.call(move |c| {
            Ok(c.query_row(
                &format!("SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = ?1"),
                [job_id],
                job_row,
            )
            .optional()?)
        })
        .await
    }

    /// Jobs by a filter, newest first.
    pub async fn jobs(&self, filter: JobFilter) -> Result<Vec<JobRow>, ServiceError> {
        self.call(move |c| {
            let states: Vec<String> = if filter.states.is_empty() {
                JobState::UNFINISHED
                    .iter()
                    .map(|s| s.as_str().to_owned())
                    .collect()
            } else {
                filter
                    .states
                    .iter()
                    .map(|s| s.as_str().to_owned())
                    .collect()
            };
            let marks = vec!["?"; states.len()].join(",");
            let mut sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE state IN ({marks})");
            let mut args: Vec<rusqlite::types::Value> = states
                .into_iter()
                .map(rusqlite::types::Value::Text)
                .collect();
            if let Some(user) = filter.user_dn {
                sql.push_str(" AND user_dn = ?");
                args.push(rusqlite::types::Value::Text(user));
            }
            sql.push_str(" ORDER BY submit_time DESC, rowid DESC LIMIT ?");
            args.push(rusqlite::types::Value::Integer(filter.limit.max(1)));
            let mut st = c.prepare(&sql)?;
            let rows = st
                .query_map(rusqlite::params_from_iter(args), job_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// A job's files in order.
    pub async fn files(&self, job_id: String) -> Result<Vec<FileRow>, ServiceError> {
        self.call(move |c| {
            let mut st = c.prepare(&format!(
                "SELECT {FILE_COLUMNS} FROM files WHERE job_id = ?1 ORDER BY file_index"
            ))?;
            let rows = st
                .query_map([job_id], file_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// One file.
    pub async fn file(&self, file_id: i64) -> Result<Option<FileRow>, ServiceError> {
        self.call(move |c| {
            Ok(c.query_row(
                &format!("SELECT {FILE_COLUMNS} FROM files WHERE file_id = ?1"),
                [file_id],
                file_row,
            )
            .optional()?)
        })
        .await
    }

    /// A file's attempts in order.
    pub async fn attempts(&self, file_id: i64) -> Result<Vec<AttemptRow>, ServiceError> {
        self.call(move |c| {
            let mut st = c.prepare(
                "SELECT attempt, start_time, end_time, resumed_bytes, moved, error, retryable \
                 FROM attempts WHERE file_id = ?1 ORDER BY attempt",
            )?;
            let rows = st
                .query_map([file_id], |r| {
                    Ok(AttemptRow {
                        attempt: r.get(0)?,
                        start_time: r.get(1)?,
                        end_time: r.get(2)?,
                        resumed_bytes: r.get(3)?,
                        moved: r.get(4)?,
                        error: r.get(5)?,
                        retryable: r.get::<_, Option<i64>>(6)?.map(|v| v != 0),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// Files waiting whose time has come become READY; the READY ones come back, most urgent
    /// first (priority, then submission order).
    pub async fn ready_files(&self, now: i64, limit: i64) -> Result<Vec<FileRow>, ServiceError> {
        self.call(move |c| {
            let tx = c.transaction()?;
            tx.execute(
                "UPDATE files SET state = 'READY' WHERE state = 'SUBMITTED' AND next_try <= ?1",
                [now],
            )?;
            let rows = {
                let mut st = tx.prepare(&format!(
                    "SELECT {} FROM files f JOIN jobs j ON j.job_id = f.job_id \
                     WHERE f.state = 'READY' ORDER BY j.priority DESC, j.submit_time, f.file_id LIMIT ?1",
                    FILE_COLUMNS
                        .split(", ")
                        .map(|c| format!("f.{}", c.trim()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))?;
                let rows = st
                    .query_map([limit], file_row)?
                    .collect::<Result<Vec<_>, _>>()?;
                rows
            };
            tx.commit()?;
            Ok(rows)
        })
        .await
    }

    /// Moves a READY file to ACTIVE and records its new attempt; `None` when it is no longer
    /// READY (cancelled meanwhile).
    pub async fn start_attempt(
        &self,
        file_id: i64,
        now: i64,
    ) -> Result<Option<FileRow>, ServiceError> {
        self.call(move |c| {
            let tx = c.transaction()?;
            let n = tx.execute(
                "UPDATE files SET state = 'ACTIVE', attempts = attempts + 1, start_time = ?2 \
                 WHERE file_id = ?1 AND state = 'READY'",
                params![file_id, now],
            )?;
            if n == 0 {
                return Ok(None);
            }
            let row = tx.query_row(
                &format!("SELECT {FILE_COLUMNS} FROM files WHERE file_id = ?1"),
                [file_id],
                file_row,
            )?;
            let resumed = ferry_proto::RangeSet::parse(&row.stored)
                .map(|r| r.total())
                .unwrap_or(0);
            tx.execute(
                "INSERT INTO attempts (file_id, attempt, start_time, resumed_bytes) VALUES (?1, ?2, ?3, ?4)",
                params![file_id, row.attempts, now, resumed as i64],
            )?;
            let job_id = row.job_id.clone();
            refresh_job_state(&tx, &job_id, now)?;
            tx.commit()?;
            Ok(Some(row))
        })
        .await
    }

    /// Records a file's size, once learnt from its source.
    pub async fn set_filesize(&self, file_id: i64, size: i64) -> Result<(), ServiceError> {
        self.call(move |c| {
            c.execute(
                "UPDATE files SET filesize = ?2 WHERE file_id = ?1 AND filesize IS NULL",
                params![file_id, size],
            )?;
            Ok(())
        })
        .await
    }

    /// Records a checkpoint: the ranges the destination holds now.
    pub async fn store_ranges(&self, file_id: i64, ranges: String) -> Result<(), ServiceError> {
        self.call(move |c| {
            c.execute(
                "UPDATE files SET stored = ?2 WHERE file_id = ?1",
                params![file_id, ranges],
            )?;
            Ok(())
        })
        .await
    }

    /// Ends the running attempt of a file and moves the file (and its job) on.
    pub async fn end_attempt(
        &self,
        file_id: i64,
        ending: Ending,
        now: i64,
    ) -> Result<(), ServiceError> {
        self.call(move |c| {
            let tx = c.transaction()?;
            let (job_id, attempt): (String, i64) = tx.query_row(
                "SELECT job_id, attempts FROM files WHERE file_id = ?1",
                [file_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            let (error, retryable, moved) = match &ending {
                Ending::Finished {
                    bytes,
                    moved,
                    throughput,
                    checksum,
                } => {
                    tx.execute(
                        "UPDATE files SET state = 'FINISHED', finish_time = ?2, bytes = ?3, \
                         throughput = ?4, reason = NULL, \
                         checksum = COALESCE(?5, checksum), stored = '' WHERE file_id = ?1",
                        params![file_id, now, bytes, throughput, checksum],
                    )?;
                    (None, None, Some(*moved))
                }
                Ending::Retry {
                    error,
                    stored,
                    delay,
                    counted,
                } => {
                    tx.execute(
                        "UPDATE files SET state = 'SUBMITTED', reason = ?2, stored = ?3, \
                         next_try = ?4, failures = failures + ?5 WHERE file_id = ?1",
                        params![file_id, error, stored, now + delay, *counted as i64],
                    )?;
                    (Some(error.clone()), Some(true), None)
                }
                Ending::Failed { error, retryable } => {
                    tx.execute(
                        "UPDATE files SET state = 'FAILED', reason = ?2, finish_time = ?3 WHERE file_id = ?1",
                        params![file_id, error, now],
                    )?;
                    (Some(error.clone()), Some(*retryable), None)
                }
                Ending::Canceled => {
                    tx.execute(
                        "UPDATE files SET state = 'CANCELED', reason = 'canceled by its owner', \
                         finish_time = ?2 WHERE file_id = ?1",
                        params![file_id, now],
                    )?;
                    (Some("canceled".to_owned()), Some(false), None)
                }
            };
            tx.execute(
                "UPDATE attempts SET end_time = ?3, error = ?4, retryable = ?5, moved = ?6 \
                 WHERE file_id = ?1 AND attempt = ?2",
                params![file_id, attempt, now, error, retryable.map(|b| b as i64), moved],
            )?;
            refresh_job_state(&tx, &job_id, now)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// Cancels jobs of `user` (any user's for an admin): waiting files become CANCELED at
    /// once; the ACTIVE ones come back so the scheduler stops them. Errors name ids that are
    /// not the caller's or do not exist.
    pub async fn cancel(
        &self,
        job_ids: Vec<String>,
        user: Option<String>,
        now: i64,
    ) -> Result<Vec<i64>, ServiceError> {
        self.call(move |c| {
            let tx = c.transaction()?;
            let mut active = Vec::new();
            for id in &job_ids {
                let owner: Option<String> = tx
                    .query_row("SELECT user_dn FROM jobs WHERE job_id = ?1", [id], |r| {
                        r.get(0)
                    })
                    .optional()?;
                match (&owner, &user) {
                    (None, _) => return Err(ServiceError::NotFound(format!("no job {id}"))),
                    (Some(o), Some(u)) if o != u => {
                        return Err(ServiceError::NotFound(format!("no job {id}")))
                    }
                    _ => {}
                }
                tx.execute("UPDATE jobs SET canceled = 1 WHERE job_id = ?1", [id])?;
                tx.execute(
                    "UPDATE files SET state = 'CANCELED', reason = 'canceled by its owner', finish_time = ?2 \
                     WHERE job_id = ?1 AND state IN ('SUBMITTED', 'READY')",
                    params![id, now],
                )?;
                let mut st = tx.prepare(
                    "SELECT file_id FROM files WHERE job_id = ?1 AND state = 'ACTIVE'",
                )?;
                for f in st.query_map([id], |r| r.get::<_, i64>(0))? {
                    active.push(f?);
                }
                drop(st);
                refresh_job_state(&tx, id, now)?;
            }
            tx.commit()?;
            Ok(active)
        })
        .await
    }

    /// After a stop or crash: every ACTIVE file goes back to wait, resuming from its stored
    /// ranges; its attempt is closed without counting against its retries.
    pub async fn recover(&self, now: i64) -> Result<usize, ServiceError> {
        self.call(move |c| {
            let tx = c.transaction()?;
            tx.execute(
                "UPDATE attempts SET end_time = ?1, error = 'the service stopped during this attempt', \
                 retryable = 1 WHERE end_time IS NULL",
                [now],
            )?;
            let jobs: Vec<String> = {
                let mut st =
                    tx.prepare("SELECT DISTINCT job_id FROM files WHERE state = 'ACTIVE'")?;
                let v = st
                    .query_map([], |r| r.get(0))?
                    .collect::<Result<Vec<String>, _>>()?;
                v
            };
            let n = tx.execute(
                "UPDATE files SET state = 'SUBMITTED', next_try = ?1, \
                 reason = 'the service stopped during an attempt; resumed' WHERE state = 'ACTIVE'",
                [now],
            )?;
            for j in jobs {
                refresh_job_state(&tx, &j, now)?;
            }
            tx.commit()?;
            Ok(n)
        })
        .await
    }

    /// A delegation by id.
    pub async fn delegation(&self, id: String) -> Result<Option<DelegationRow>, ServiceError> {
        self.call(move |c| {
            Ok(c.query_row(
                "SELECT user_dn, pending_key, proxy, termination FROM delegations WHERE delegation_id = ?1",
                [id],
                |r| {
                    Ok(DelegationRow {
                        user_dn: r.get(0)?,
                        pending_key: r.get(1)?,
                        proxy: r.get(2)?,
                        termination: r.get(3)?,
                    })
                },
            )
            .optional()?)
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
        self.call(move |c| {
            c.execute(
                "INSERT INTO delegations (delegation_id, user_dn, pending_key) VALUES (?1, ?2, ?3) \
                 ON CONFLICT(delegation_id) DO UPDATE SET pending_key = excluded.pending_key",
                params![id, user_dn, key_pem],
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
        self.call(move |c| {
            durably(c, |c| {
                c.execute(
                    "UPDATE delegations SET proxy = ?2, termination = ?3, pending_key = NULL \
                 WHERE delegation_id = ?1",
                    params![id, proxy_pem, termination],
                )?;
                Ok(())
            })
        })
        .await
    }

    /// Counts of files per link and state, for the dashboard and the scheduler.
    pub async fn link_counts(&self) -> Result<Vec<(String, String, i64)>, ServiceError> {
        self.call(|c| {
            let mut st =
                c.prepare("SELECT link, state, COUNT(*) FROM files GROUP BY link, state")?;
            let rows = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }
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

impl Db {
    /// Keeps a decision of the optimizer.
    pub async fn insert_decision(&self, d: DecisionRow) -> Result<(), ServiceError> {
        self.call(move |c| {
            c.execute(
                "INSERT INTO decisions (link, time, from_active, to_active, throughput, reason) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![d.link, d.time, d.from, d.to, d.throughput, d.reason],
            )?;
            Ok(())
        })
        .await
    }

    /// The newest decisions, newest first.
    pub async fn decisions(&self, limit: i64) -> Result<Vec<DecisionRow>, ServiceError> {
        self.call(move |c| {
            let mut st = c.prepare(
                "SELECT link, time, from_active, to_active, throughput, reason FROM decisions \
                 ORDER BY id DESC LIMIT ?1",
            )?;
            let rows = st
                .query_map([limit], |r| {
                    Ok(DecisionRow {
                        link: r.get(0)?,
                        time: r.get(1)?,
                        from: r.get(2)?,
                        to: r.get(3)?,
                        throughput: r.get(4)?,
                        reason: r.get(5)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// The newest files of the jobs `user` may see (every job's for `None`), newest first.
    pub async fn recent_files(
        &self,
        user: Option<String>,
        limit: i64,
    ) -> Result<Vec<FileRow>, ServiceError> {
        self.call(move |c| {
            let cols = FILE_COLUMNS
                .split(", ")
                .map(|c| format!("f.{}", c.trim()))
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!(
                "SELECT {cols} FROM files f JOIN jobs j ON j.job_id = f.job_id \
                 WHERE (?1 IS NULL OR j.user_dn = ?1) ORDER BY f.file_id DESC LIMIT ?2"
            );
            let mut st = c.prepare(&sql)?;
            let rows = st
                .query_map(params![user, limit], file_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
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
        self.call(move |c| {
            let jobs = {
                let mut st = c.prepare(&format!(
                    "SELECT {JOB_COLUMNS} FROM jobs WHERE (?1 IS NULL OR user_dn = ?1) \
                     ORDER BY submit_time DESC, rowid DESC LIMIT ?2"
                ))?;
                let rows = st
                    .query_map(params![user, limit], job_row)?
                    .collect::<Result<Vec<_>, _>>()?;
                rows
            };
            let mut st =
                c.prepare("SELECT state, COUNT(*) FROM files WHERE job_id = ?1 GROUP BY state")?;
            let mut out = Vec::with_capacity(jobs.len());
            for j in jobs {
                let counts = st
                    .query_map([&j.job_id], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<Vec<_>, _>>()?;
                out.push((j, counts));
            }
            Ok(out)
        })
        .await
    }

    /// Counts of files per state in all.
    pub async fn state_counts(&self) -> Result<Vec<(String, i64)>, ServiceError> {
        self.call(|c| {
            let mut st = c.prepare("SELECT state, COUNT(*) FROM files GROUP BY state")?;
            let rows = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }
}

/// Runs `f` with commits synced to the disk (`synchronous = FULL`), then back to NORMAL.
fn durably<T>(
    c: &mut Connection,
    f: impl FnOnce(&mut Connection) -> Result<T, ServiceError>,
) -> Result<T, ServiceError> {
    c.pragma_update(None, "synchronous", "FULL")?;
    let out = f(c);
    c.pragma_update(None, "synchronous", "NORMAL")?;
    out
}

/// Sets a job's state (and finish time) from its files' states.
fn refresh_job_state(
    tx: &rusqlite::Transaction<'_>,
    job_id: &str,
    now: i64,
) -> Result<(), ServiceError> {
    let canceled: i64 = tx.query_row(
        "SELECT canceled FROM jobs WHERE job_id = ?1",
        [job_id],
        |r| r.get(0),
    )?;
    let mut counts = crate::states::FileCounts::default();
    {
        let mut st =
            tx.prepare("SELECT state, COUNT(*) FROM files WHERE job_id = ?1 GROUP BY state")?;
        for row in st.query_map([job_id], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
        })? {
            let (state, n) = row?;
            if let Some(s) = FileState::parse(&state) {
                counts.add(s, n);
            }
        }
    }
    let state = counts.job_state(canceled != 0);
    let reason = counts.reason(canceled != 0);
    if state.is_terminal() {
        tx.execute(
            "UPDATE jobs SET state = ?2, reason = ?3, finish_time = COALESCE(finish_time, ?4) WHERE job_id = ?1",
            params![job_id, state.as_str(), reason, now],
        )?;
    } else {
        tx.execute(
            "UPDATE jobs SET state = ?2, reason = NULL WHERE job_id = ?1",
            params![job_id, state.as_str()],
        )?;
    }
    Ok(())
}

impl From<rusqlite::Error> for ServiceError {
    fn from(e: rusqlite::Error) -> Self {
        ServiceError::Database(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, files: usize) -> NewJob {
        NewJob {
            job_id: id.into(),
            user_dn: "/CN=alice".into(),
            priority: 3,
            retry: 2,
            retry_delay: 5,
            verify: "auto".into(),
            overwrite: false,
            metadata: None,
            ignored: vec!["params.spacetoken".into()],
            options: "{}".into(),
            body_hash: format!("hash-{id}"),
            files: (0..files)
                .map(|i| NewFile {
                    source: format!("gsiftp://a/{i}"),
                    dest: format!("gsiftp://b/{i}"),
                    link: "gsiftp://a:2811 → gsiftp://b:2811".into(),
                    filesize: Some(10),
                    checksum: None,
                    metadata: None,
                })
                .collect(),
        }
    }

    async fn state(db: &Db, id: &str) -> JobState {
        db.job(id.into()).await.unwrap().unwrap().job_state
    }

    #[tokio::test]
    async fn a_file_goes_through_retry_and_resume_and_its_job_follows() {
        let db = Db::in_memory().unwrap();
        assert!(db.insert_job(job("j1", 2), 100).await.unwrap());
        // The same submission again is the same job; another body under its id is refused.
        assert!(!db.insert_job(job("j1", 2), 101).await.unwrap());
        let mut other = job("j1", 2);
        other.body_hash = "else".into();
        assert!(matches!(
            db.insert_job(other, 101).await,
            Err(ServiceError::Conflict(_))
        ));
        assert_eq!(state(&db, "j1").await, JobState::Submitted);

        let ready = db.ready_files(100, 10).await.unwrap();
        assert_eq!(ready.len(), 2);
        assert!(ready.iter().all(|f| f.file_state == FileState::Ready));
        let f = db
            .start_attempt(ready[0].file_id, 101)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((f.file_state, f.attempts), (FileState::Active, 1));
        assert!(
            db.start_attempt(ready[0].file_id, 101)
                .await
                .unwrap()
                .is_none(),
            "only once"
        );
        assert_eq!(state(&db, "j1").await, JobState::Active);

        db.store_ranges(f.file_id, "0-4".into()).await.unwrap();
        db.end_attempt(
            f.file_id,
            Ending::Retry {
                error: "lost".into(),
                stored: "0-4".into(),
                delay: 5,
                counted: true,
            },
            102,
        )
        .await
        .unwrap();
        let back = db.file(f.file_id).await.unwrap().unwrap();
        assert_eq!(
            (back.file_state, back.failures, back.next_try),
            (FileState::Submitted, 1, 107)
        );
        assert_eq!(back.stored, "0-4");
        // Not due before its delay.
        assert!(db
            .ready_files(106, 10)
            .await
            .unwrap()
            .iter()
            .all(|r| r.file_id != f.file_id));
        assert!(db
            .ready_files(107, 10)
            .await
            .unwrap()
            .iter()
            .any(|r| r.file_id == f.file_id));
        let again = db.start_attempt(f.file_id, 108).await.unwrap().unwrap();
        assert_eq!(again.attempts, 2);
        let attempts = db.attempts(f.file_id).await.unwrap();
        assert_eq!(attempts.len(), 2);
        assert_eq!(attempts[0].error.as_deref(), Some("lost"));
        assert_eq!(attempts[1].resumed_bytes, 4);

        // A crash: the ACTIVE file waits again with its ranges, and the crash is not a failure.
        assert_eq!(db.recover(200).await.unwrap(), 1);
        let back = db.file(f.file_id).await.unwrap().unwrap();
        assert_eq!(
            (back.file_state, back.failures, back.stored.as_str()),
            (FileState::Submitted, 1, "0-4")
        );

        for file in db.ready_files(200, 10).await.unwrap() {
            db.start_attempt(file.file_id, 201).await.unwrap().unwrap();
            db.end_attempt(
                file.file_id,
                Ending::Finished {
                    bytes: 10,
                    moved: 6,
                    throughput: 1.0,
                    checksum: Some("ADLER32:1".into()),
                },
                202,
            )
            .await
            .unwrap();
        }
        let j = db.job("j1".into()).await.unwrap().unwrap();
        assert_eq!(
            (j.job_state, j.finish_time),
            (JobState::Finished, Some(202))
        );
        assert_eq!(j.ignored, vec!["params.spacetoken".to_owned()]);
    }

    #[tokio::test]
    async fn cancel_stops_waiting_files_and_names_active_ones_only_for_the_owner() {
        let db = Db::in_memory().unwrap();
        db.insert_job(job("j2", 3), 100).await.unwrap();
        let ready = db.ready_files(100, 10).await.unwrap();
        db.start_attempt(ready[0].file_id, 100).await.unwrap();
        assert!(matches!(
            db.cancel(vec!["j2".into()], Some("/CN=mallory".into()), 101)
                .await,
            Err(ServiceError::NotFound(_))
        ));
        assert!(matches!(
            db.cancel(vec!["nope".into()], None, 101).await,
            Err(ServiceError::NotFound(_))
        ));
        let active = db
            .cancel(vec!["j2".into()], Some("/CN=alice".into()), 101)
            .await
            .unwrap();
        assert_eq!(active, vec![ready[0].file_id]);
        assert_eq!(
            state(&db, "j2").await,
            JobState::Active,
            "one file still moving"
        );
        db.end_attempt(ready[0].file_id, Ending::Canceled, 102)
            .await
            .unwrap();
        assert_eq!(state(&db, "j2").await, JobState::Canceled);
        // Listing: unfinished by default, by state when asked, only the owner's.
        let listed = |states: Vec<JobState>, user: Option<&str>| {
            db.jobs(JobFilter {
                user_dn: user.map(str::to_owned),
                states,
                limit: 10,
            })
        };
        assert!(listed(vec![], Some("/CN=alice")).await.unwrap().is_empty());
        assert_eq!(
            listed(vec![JobState::Canceled], Some("/CN=alice"))
                .await
                .unwrap()
                .len(),
            1
        );
        assert!(listed(vec![JobState::Canceled], Some("/CN=bob"))
            .await
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn a_file_database_is_migrated_once_and_refused_when_newer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q/queue.db");
        {
            let db = Db::open(&path).unwrap();
            db.insert_job(job("j3", 1), 1).await.unwrap();
        }
        let db = Db::open(&path).unwrap();
        assert!(
            db.job("j3".into()).await.unwrap().is_some(),
            "kept across opens"
        );
        drop(db);
        let c = Connection::open(&path).unwrap();
        c.pragma_update(None, "user_version", 99).unwrap();
        drop(c);
        let e = Db::open(&path).err().unwrap();
        assert!(e.to_string().contains("newer than this ferry knows"), "{e}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
