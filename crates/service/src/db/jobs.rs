//! Jobs as users submit, read and cancel them, and the delegated credentials.

use super::*;

impl Db {
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
                "SELECT attempt, start_time, end_time, resumed_bytes, moved, error, retryable, host \
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
                    host: r.ot(7)?,
                })
            })
            .collect()
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
}
