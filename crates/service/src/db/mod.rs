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

mod claims;
mod jobs;
mod rows;
mod schema;
mod slots;
pub(crate) mod sql;
mod tls;
mod views;

pub use rows::*;
pub use slots::{endpoints_of, Room};

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use sql::{vals, Kind, Store, Tx, V};

use crate::states::{FileState, JobState};
use crate::ServiceError;

/// A host that has not beaten its heart for this long is taken for dead (seconds), unless
/// the service is told otherwise (`--host-timeout`).
pub const HOST_TIMEOUT: i64 = 30;

/// Files smaller than this (bytes) may go in a pipeline with others.
pub const SMALL_FILE: i64 = 16 << 20;

/// The database, shared by the API and the scheduler.
#[derive(Clone)]
pub struct Db {
    conn: Arc<Mutex<Box<dyn Store>>>,
    kind: Kind,
    host: Arc<str>,
    /// The links of each unfinished job (fixed at submission), read once per job: the
    /// dispatcher's reads skip jobs whose links are all full and read each open link alone.
    job_links: Arc<Mutex<JobLinks>>,
}

/// Each unfinished job's links.
type JobLinks = HashMap<String, Arc<[String]>>;

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("kind", &self.kind)
            .field("host", &self.host)
            .finish()
    }
}

impl Db {
    /// Opens the queue: a `postgres://` (or `postgresql://`) URL, or the path of an SQLite file
    /// (created, mode 0600: delegated keys live in it). `host` names this service host in the
    /// queue (its claims and heartbeat). The schema is brought up to date. Blocking: call it
    /// off the async threads (`spawn_blocking`).
    pub fn open(spec: &str, host: &str) -> Result<Db, ServiceError> {
        if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
            let client = tls::connect(spec)?;
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
        // Checkpoints every 8192 pages (32 MiB of WAL) rather than 1000: a busy queue
        // rewrites the same few pages (the ACTIVE rows, their index entries) over and over,
        // and a checkpoint copies each page once however often it changed.
        conn.pragma_update(None, "wal_autocheckpoint", 8192)?;
        conn.pragma_update(None, "journal_size_limit", 64i64 << 20)?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        Db::setup(Box::new(conn), Kind::Sqlite, host)
    }

    fn setup(mut store: Box<dyn Store>, kind: Kind, host: &str) -> Result<Db, ServiceError> {
        schema::migrate(store.as_mut())?;
        Ok(Db {
            conn: Arc::new(Mutex::new(store)),
            kind,
            host: host.into(),
            job_links: Arc::default(),
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
}

/// [`refresh_job_state`] for each of `jobs` once (they may repeat).
fn refresh_jobs(tx: &mut dyn Tx, mut jobs: Vec<&str>, now: i64) -> Result<(), ServiceError> {
    jobs.sort_unstable();
    jobs.dedup();
    for j in jobs {
        refresh_job_state(tx, j, now)?;
    }
    Ok(())
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
    let spec = match (spec.find("://"), spec.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let cred = &spec[s + 3..at];
            match cred.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &spec[..s + 3], &spec[at..]),
                None => spec.to_owned(),
            }
        }
        _ => spec.to_owned(),
    };
    // A password may also come as a parameter (`?password=…`, as libpq allows).
    let Some(q) = spec.find('?') else {
        return spec;
    };
    let params: Vec<String> = spec[q + 1..]
        .split('&')
        .map(|p| match p.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => p.to_owned(),
        })
        .collect();
    format!("{}?{}", &spec[..q], params.join("&"))
}

impl From<rusqlite::Error> for ServiceError {
    fn from(e: rusqlite::Error) -> Self {
        ServiceError::Database(e.to_string())
    }
}
