//! The rows and records the queue stores and gives back, and how rows are read.

use super::sql::Row;
use crate::states::{FileState, JobState};
use crate::ServiceError;

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
    /// Whether an attempt found the destination absent before its copy began: what is there
    /// now is this file's own, so a job that must not overwrite resumes into it.
    pub dest_own: bool,
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
    /// The service host that ran it (`--host-id`).
    pub host: Option<String>,
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

pub(super) const JOB_COLUMNS: &str =
    "job_id, user_dn, state, priority, submit_time, finish_time, reason, \
     retry, retry_delay, verify, overwrite, metadata, ignored, canceled, options";
pub(super) const FILE_COLUMNS: &str =
    "file_id, job_id, file_index, source, dest, link, state, filesize, \
     checksum, metadata, reason, failures, attempts, stored, next_try, start_time, finish_time, \
     bytes, throughput, dest_own";

/// [`FILE_COLUMNS`] of the table aliased `f`.
pub(super) fn file_columns_of_f() -> String {
    FILE_COLUMNS
        .split(", ")
        .map(|c| format!("f.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn job_row(r: &Row) -> Result<JobRow, ServiceError> {
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

pub(super) fn file_row(r: &Row) -> Result<FileRow, ServiceError> {
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
        dest_own: r.i(19)? != 0,
    })
}

pub(super) fn rows_of<T>(
    rows: Vec<Row>,
    f: fn(&Row) -> Result<T, ServiceError>,
) -> Result<Vec<T>, ServiceError> {
    rows.iter().map(f).collect()
}

/// `?start, ?start+1, …` for `n` values.
pub(super) fn marks(start: usize, n: usize) -> String {
    (start..start + n)
        .map(|i| format!("?{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}
