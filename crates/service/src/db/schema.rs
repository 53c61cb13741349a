//! Schema versions, one script per version, written once where the two databases differ only
//! in their column types and once for each where they differ more. A database is brought
//! forward from whatever version it has, each step in its own transaction; a newer database is
//! refused.
//! SQLite keeps its version in `PRAGMA user_version`; PostgreSQL in `ferry_schema`, changed
//! under an advisory lock so that service hosts starting together migrate once.

use std::borrow::Cow;

use super::sql::{Kind, Store};
use crate::ServiceError;

/// Version 1, in SQLite's types (PostgreSQL's are spelled from them, see [`Step::script`]):
/// jobs, their files, the files' attempts, and delegated proxies.
const JOBS: &str = r#"
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
"#;

/// Version 2, in SQLite's types: the optimizer's decisions.
const DECISIONS: &str = r#"
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
"#;

/// Version 3, in SQLite's types: the hosts sharing a queue, and which one claimed a file.
const HOSTS: &str = r#"
ALTER TABLE files ADD COLUMN claimed_by TEXT;
CREATE TABLE hosts (
    host_id       TEXT PRIMARY KEY,
    heartbeat     INTEGER NOT NULL
);
"#;

/// Version 4, the same in both dialects: files by job and state.
const INDEX_JOB_STATE: &str = r#"
CREATE INDEX files_job_state ON files(job_id, state);
"#;

/// Version 5, the same in both dialects: which host ran an attempt, and one index on files
/// by job, state and link that makes the two before it redundant.
const INDEX_JOB_STATE_LINK: &str = r#"
ALTER TABLE attempts ADD COLUMN host TEXT;
CREATE INDEX files_job_state_link ON files(job_id, state, link);
DROP INDEX files_job_state;
DROP INDEX files_job;
"#;

/// Version 6, the same in both dialects: the transfers each host runs per link, so that link
/// and server limits hold across every host of a shared queue, not per host.
const SLOTS: &str = r#"
CREATE TABLE slots (
    host_id       TEXT NOT NULL,
    link          TEXT NOT NULL,
    n             BIGINT NOT NULL,
    PRIMARY KEY (host_id, link)
);
"#;

/// Version 7: files per link and state, kept as the files change rather than counted over
/// the whole history each time the dashboard, the optimizer or the metrics ask. Triggers
/// append one delta row per change (no row is updated in place, so hosts changing files at
/// once never wait on a shared counter, nor lock counters in two orders), and
/// [`super::Db::fold_counts`] folds the deltas into `link_states` once a second. The
/// count is `link_states` plus the deltas not folded yet. The tables are the same in both
/// dialects; each has its own triggers.
macro_rules! counts_tables {
    () => {
        r#"
CREATE TABLE link_states (
    link          TEXT NOT NULL,
    state         TEXT NOT NULL,
    n             BIGINT NOT NULL,
    PRIMARY KEY (link, state)
);
CREATE TABLE link_state_deltas (
    link          TEXT NOT NULL,
    state         TEXT NOT NULL,
    d             BIGINT NOT NULL
);
INSERT INTO link_states (link, state, n) SELECT link, state, COUNT(*) FROM files GROUP BY link, state;
"#
    };
}

/// Version 7 for SQLite.
const SQLITE_COUNTS: &str = concat!(
    counts_tables!(),
    r#"
CREATE TRIGGER files_counted_in AFTER INSERT ON files BEGIN
    INSERT INTO link_state_deltas (link, state, d) VALUES (new.link, new.state, 1);
END;
CREATE TRIGGER files_counted_move AFTER UPDATE OF state ON files WHEN old.state <> new.state BEGIN
    INSERT INTO link_state_deltas (link, state, d) VALUES (old.link, old.state, -1), (new.link, new.state, 1);
END;
CREATE TRIGGER files_counted_out AFTER DELETE ON files BEGIN
    INSERT INTO link_state_deltas (link, state, d) VALUES (old.link, old.state, -1);
END;
"#
);

/// Version 7 for PostgreSQL.
const POSTGRES_COUNTS: &str = concat!(
    counts_tables!(),
    r#"
CREATE FUNCTION ferry_count_files() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO link_state_deltas (link, state, d) VALUES (OLD.link, OLD.state, -1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO link_state_deltas (link, state, d) VALUES (NEW.link, NEW.state, 1);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER files_counted AFTER INSERT OR DELETE ON files
    FOR EACH ROW EXECUTE FUNCTION ferry_count_files();
CREATE TRIGGER files_counted_move AFTER UPDATE OF state ON files
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION ferry_count_files();
"#
);

/// Version 8, the same in both dialects: whether a file's destination was found absent before
/// a copy of it began (a job that must not overwrite then resumes into what is there, its own,
/// and asks again only while no attempt has had that answer).
const DEST_OWN: &str = r#"
ALTER TABLE files ADD COLUMN dest_own BIGINT NOT NULL DEFAULT 0;
"#;

/// One version's script: written once where the dialects differ only in their types, or once
/// per dialect.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// The same text in both.
    Same(&'static str),
    /// SQLite's text; PostgreSQL runs it in its own types.
    SqliteTypes(&'static str),
    /// A text for each.
    Each {
        sqlite: &'static str,
        postgres: &'static str,
    },
}

impl Step {
    /// The step's script for a `kind` database.
    fn script(self, kind: Kind) -> Cow<'static, str> {
        match (self, kind) {
            (Step::Same(sql), _) | (Step::SqliteTypes(sql), Kind::Sqlite) => Cow::Borrowed(sql),
            (Step::SqliteTypes(sql), Kind::Postgres) => Cow::Owned(
                sql.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
                    .replace("INTEGER", "BIGINT")
                    .replace("REAL", "DOUBLE PRECISION"),
            ),
            (Step::Each { sqlite, .. }, Kind::Sqlite) => Cow::Borrowed(sqlite),
            (Step::Each { postgres, .. }, Kind::Postgres) => Cow::Borrowed(postgres),
        }
    }
}

/// Index N takes a database from version N to N + 1.
const STEPS: &[Step] = &[
    Step::SqliteTypes(JOBS),
    Step::SqliteTypes(DECISIONS),
    Step::SqliteTypes(HOSTS),
    Step::Same(INDEX_JOB_STATE),
    Step::Same(INDEX_JOB_STATE_LINK),
    Step::Same(SLOTS),
    Step::Each {
        sqlite: SQLITE_COUNTS,
        postgres: POSTGRES_COUNTS,
    },
    Step::Same(DEST_OWN),
];

/// The newest version this ferry knows.
pub(crate) const VERSION: i64 = STEPS.len() as i64;

/// Brings the database's schema up to [`VERSION`].
pub(crate) fn migrate(store: &mut dyn Store) -> Result<(), ServiceError> {
    let kind = store.kind();
    loop {
        let mut tx = store.begin()?;
        let version = match kind {
            Kind::Sqlite => tx
                .row("PRAGMA user_version", &[])?
                .map(|r| r.i(0))
                .transpose()?
                .unwrap_or(0),
            Kind::Postgres => {
                // One host migrates; the others wait here and then find it done.
                tx.rows("SELECT pg_advisory_xact_lock(7305469)::TEXT", &[])?;
                tx.exec(
                    "CREATE TABLE IF NOT EXISTS ferry_schema (version BIGINT NOT NULL)",
                    &[],
                )?;
                match tx.row("SELECT version FROM ferry_schema", &[])? {
                    Some(r) => r.i(0)?,
                    None => {
                        tx.exec("INSERT INTO ferry_schema (version) VALUES (0)", &[])?;
                        0
                    }
                }
            }
        };
        if version > VERSION {
            return Err(ServiceError::Database(format!(
                "the database has schema version {version}, newer than this ferry knows ({VERSION}): use a newer ferry"
            )));
        }
        let Some(step) = STEPS.get(version as usize) else {
            return Ok(());
        };
        tx.script(&step.script(kind))?;
        match kind {
            Kind::Sqlite => {
                tx.exec(&format!("PRAGMA user_version = {}", version + 1), &[])?;
            }
            Kind::Postgres => {
                tx.exec(
                    "UPDATE ferry_schema SET version = ?1",
                    super::sql::vals![version + 1],
                )?;
            }
        }
        tx.commit()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_spells_the_sqlite_typed_versions_in_its_own_types() {
        let jobs = Step::SqliteTypes(JOBS).script(Kind::Postgres);
        assert!(jobs.contains("file_id       BIGSERIAL PRIMARY KEY,"));
        assert!(jobs.contains("throughput    DOUBLE PRECISION\n"));
        for step in STEPS {
            let sql = step.script(Kind::Postgres);
            for sqlite_only in ["INTEGER", "REAL", "AUTOINCREMENT"] {
                assert!(!sql.contains(sqlite_only), "{sqlite_only} in {sql}");
            }
        }
        assert_eq!(Step::SqliteTypes(JOBS).script(Kind::Sqlite), JOBS);
    }
}
