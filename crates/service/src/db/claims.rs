//! Claims: which files run now, on which host, and how their attempts end; hosts' heartbeats
//! and the claims of hosts that stopped.

use super::*;

impl Db {
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
