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
        let known = Arc::clone(&self.job_links);
        self.tx(false, move |tx, _, _| {
            // The unfinished jobs, most urgent first (few), then each one's READY files of
            // each link with room, in order, through the (job_id, state, link) index: the cost
            // follows `limit`, not the queue, also when a full link holds most of it.
            let jobs = ready_jobs(tx, now)?;
            let mut known = lock_links(&known, &jobs)?;
            let mut out: Vec<FileRow> = Vec::new();
            for job in jobs {
                let left = limit - out.len() as i64;
                if left <= 0 {
                    break;
                }
                let links = links_of(tx, &mut known, &job)?;
                let mut mine = Vec::new();
                for link in links.iter().filter(|l| !full.contains(l)) {
                    let rows = tx.rows(
                        &format!(
                            "SELECT {FILE_COLUMNS} FROM files WHERE job_id = ?1 AND state = 'READY' \
                             AND link = ?2 ORDER BY file_id LIMIT ?3"
                        ),
                        vals![&job, link, left],
                    )?;
                    mine.extend(rows_of(rows, file_row)?);
                }
                // Several links: the job's order across them.
                mine.sort_by_key(|f| f.file_id);
                mine.truncate(left as usize);
                out.extend(mine);
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
            let rows = start_many(tx, kind, host, &file_ids, now)?;
            refresh_jobs(tx, rows.iter().map(|r| r.job_id.as_str()).collect(), now)?;
            Ok(rows)
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

    /// Records that these files' destinations were found absent, before their copies begin
    /// (see [`FileRow::dest_own`]); the ones recorded, those this host still holds.
    pub async fn own_destinations(&self, file_ids: Vec<i64>) -> Result<Vec<i64>, ServiceError> {
        self.tx(false, move |tx, _, host| {
            let mut out = Vec::with_capacity(file_ids.len());
            for chunk in file_ids.chunks(CLAIM_CHUNK) {
                let mut args = vec![V::from(host)];
                args.extend(chunk.iter().map(|&id| V::from(id)));
                for r in tx.rows(
                    &format!(
                        "UPDATE files SET dest_own = 1 WHERE file_id IN ({}) AND claimed_by = ?1 \
                         RETURNING file_id",
                        marks(2, chunk.len())
                    ),
                    &args,
                )? {
                    out.push(r.i(0)?);
                }
            }
            Ok(out)
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
        Ok(self.end_attempts_then_claim(endings, now, None).await?.0)
    }

    /// [`Db::end_attempts`], then, in the same transaction, claims the next pipeline of
    /// `next` = (link, most files): the READY small whole files of one job on that link,
    /// the most urgent job first, with that job. A pipeline that goes on this way keeps its
    /// slot and sessions, and its files' ends and its successors' claims share one commit.
    pub async fn end_attempts_then_claim(
        &self,
        endings: Vec<(i64, Ending)>,
        now: i64,
        next: Option<(String, usize)>,
    ) -> Result<
        (
            Vec<Result<(), ServiceError>>,
            Option<(JobRow, Vec<FileRow>)>,
        ),
        ServiceError,
    > {
        let known = Arc::clone(&self.job_links);
        self.tx(false, move |tx, kind, host| {
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
            refresh_jobs(tx, jobs.iter().map(String::as_str).collect(), now)?;
            let Some((link, most)) = next else {
                return Ok((out, None));
            };
            let ready = ready_jobs(tx, now)?;
            let mut known = lock_links(&known, &ready)?;
            for job in ready {
                if !links_of(tx, &mut known, &job)?.contains(&link) {
                    continue;
                }
                let ids = tx
                    .rows(
                        "SELECT file_id FROM files WHERE job_id = ?1 AND state = 'READY' AND link = ?2 \
                         AND stored = '' AND (filesize IS NULL OR (filesize >= 0 AND filesize < ?3)) \
                         AND source LIKE '%://%' AND source NOT LIKE 'file://%' \
                         ORDER BY file_id LIMIT ?4",
                        vals![&job, &link, SMALL_FILE, most as i64],
                    )?
                    .iter()
                    .map(|r| r.i(0))
                    .collect::<Result<Vec<_>, _>>()?;
                if ids.is_empty() {
                    continue;
                }
                let rows = start_many(tx, kind, host, &ids, now)?;
                if rows.is_empty() {
                    continue;
                }
                refresh_job_state(tx, &job, now)?;
                let Some(job_row) = tx
                    .row(
                        &format!("SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = ?1"),
                        vals![&job],
                    )?
                    .as_ref()
                    .map(job_row)
                    .transpose()?
                else {
                    continue;
                };
                return Ok((out, Some((job_row, rows))));
            }
            Ok((out, None))
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
            // Their slots go with them: the transfers they counted no longer run.
            tx.exec(
                "DELETE FROM slots WHERE host_id = ?1 OR host_id NOT IN \
                 (SELECT host_id FROM hosts WHERE heartbeat >= ?2)",
                vals![&me, alive_since],
            )?;
            refresh_jobs(tx, ids.iter().map(|(_, j)| j.as_str()).collect(), now)?;
            Ok(ids.len())
        })
        .await
    }
}

/// Waiting files whose time has come become READY; the unfinished jobs, most urgent first.
fn ready_jobs(tx: &mut dyn Tx, now: i64) -> Result<Vec<String>, ServiceError> {
    tx.exec(
        "UPDATE files SET state = 'READY' WHERE state = 'SUBMITTED' AND next_try <= ?1",
        vals![now],
    )?;
    tx.rows(
        "SELECT job_id FROM jobs WHERE state IN ('SUBMITTED', 'ACTIVE') \
         ORDER BY priority DESC, submit_time, job_id",
        &[],
    )?
    .iter()
    .map(|r| r.t(0))
    .collect()
}

/// The links cache, keeping only the jobs still unfinished.
fn lock_links<'a>(
    known: &'a Mutex<JobLinks>,
    jobs: &[String],
) -> Result<std::sync::MutexGuard<'a, JobLinks>, ServiceError> {
    let mut known = known
        .lock()
        .map_err(|_| ServiceError::Database("the links cache lock is poisoned".into()))?;
    known.retain(|id, _| jobs.contains(id));
    Ok(known)
}

/// A job's links, read once (they are fixed at submission).
fn links_of(
    tx: &mut dyn Tx,
    known: &mut JobLinks,
    job: &str,
) -> Result<Arc<[String]>, ServiceError> {
    if let Some(l) = known.get(job) {
        return Ok(Arc::clone(l));
    }
    let l: Arc<[String]> = tx
        .rows(
            "SELECT DISTINCT link FROM files WHERE job_id = ?1 ORDER BY link",
            vals![job],
        )?
        .iter()
        .map(|r| r.t(0))
        .collect::<Result<Vec<_>, _>>()?
        .into();
    known.insert(job.to_owned(), Arc::clone(&l));
    Ok(l)
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
    // The file's new state and the claim check in one statement: `?1` the file, `?2` this
    // host, then each ending's own values (every one referenced: PostgreSQL types them).
    let (set, mut args, error, retryable, moved) = match &ending {
        Ending::Finished {
            bytes,
            moved,
            throughput,
            checksum,
        } => (
            "state = 'FINISHED', finish_time = ?3, bytes = ?4, filesize = COALESCE(filesize, ?4), \
             throughput = ?5, reason = NULL, checksum = COALESCE(?6, checksum), stored = ''",
            vec![
                V::from(now),
                V::from(*bytes),
                V::from(*throughput),
                V::from(checksum.clone()),
            ],
            None,
            None,
            Some(*moved),
        ),
        Ending::Retry {
            error,
            stored,
            delay,
            counted,
        } => (
            "state = 'SUBMITTED', reason = ?3, stored = ?4, next_try = ?5, failures = failures + ?6",
            vec![
                V::from(error.as_str()),
                V::from(stored.as_str()),
                V::from(now + delay),
                V::from(*counted),
            ],
            Some(error.clone()),
            Some(true),
            None,
        ),
        Ending::Failed { error, retryable } => (
            "state = 'FAILED', reason = ?3, finish_time = ?4",
            vec![V::from(error.as_str()), V::from(now)],
            Some(error.clone()),
            Some(*retryable),
            None,
        ),
        Ending::Canceled => (
            "state = 'CANCELED', reason = 'canceled by its owner', finish_time = ?3",
            vec![V::from(now)],
            Some("canceled".to_owned()),
            Some(false),
            None,
        ),
    };
    args.splice(0..0, [V::from(file_id), V::from(host)]);
    let Some(r) = tx.row(
        &format!(
            "UPDATE files SET {set}, claimed_by = NULL \
             WHERE file_id = ?1 AND state = 'ACTIVE' AND claimed_by = ?2 RETURNING job_id, attempts"
        ),
        &args,
    )?
    else {
        return Ok(Err(ServiceError::Conflict(format!(
            "file {file_id} is no longer this host's: its claim was taken back"
        ))));
    };
    let (job_id, attempt) = (r.t(0)?, r.i(1)?);
    tx.exec(
        "UPDATE attempts SET end_time = ?3, error = ?4, retryable = ?5, moved = ?6 \
         WHERE file_id = ?1 AND attempt = ?2",
        vals![file_id, attempt, now, error, retryable, moved],
    )?;
    Ok(Ok(job_id))
}

/// Claims the READY ones of `file_ids` (see [`Db::start_attempts`]), in order; the caller
/// refreshes their jobs. A pipeline's files are claimed and their attempts recorded by two
/// statements, not two per file: one `UPDATE … RETURNING` (PostgreSQL: rows another host is
/// claiming are skipped, not waited for) and one `INSERT` of many rows.
pub(super) fn start_many(
    tx: &mut dyn Tx,
    kind: Kind,
    host: &str,
    file_ids: &[i64],
    now: i64,
) -> Result<Vec<FileRow>, ServiceError> {
    let mut out = Vec::with_capacity(file_ids.len());
    for chunk in file_ids.chunks(CLAIM_CHUNK) {
        let ids = marks(3, chunk.len());
        let which = match kind {
            Kind::Postgres => format!(
                "file_id IN (SELECT file_id FROM files WHERE file_id IN ({ids}) AND state = 'READY' \
                 FOR UPDATE SKIP LOCKED)"
            ),
            // `+state`: by rowid; SQLite would otherwise walk the READY entries of the
            // state index, the whole queue.
            Kind::Sqlite => format!("file_id IN ({ids}) AND +state = 'READY'"),
        };
        let mut args = vec![V::from(now), V::from(host)];
        args.extend(chunk.iter().map(|&id| V::from(id)));
        let mut rows = rows_of(
            tx.rows(
                &format!(
                    "UPDATE files SET state = 'ACTIVE', attempts = attempts + 1, start_time = ?1, \
                     claimed_by = ?2 WHERE {which} RETURNING {FILE_COLUMNS}"
                ),
                &args,
            )?,
            file_row,
        )?;
        if rows.is_empty() {
            continue;
        }
        rows.sort_by_key(|r| r.file_id);
        let mut args = Vec::with_capacity(rows.len() * 5);
        let mut tuples = Vec::with_capacity(rows.len());
        for (k, row) in rows.iter().enumerate() {
            let resumed = ferry_proto::RangeSet::parse(&row.stored)
                .map(|r| r.total())
                .unwrap_or(0);
            tuples.push(format!("({})", marks(k * 5 + 1, 5)));
            args.extend([
                V::from(row.file_id),
                V::from(row.attempts),
                V::from(now),
                V::from(resumed as i64),
                V::from(host),
            ]);
        }
        tx.exec(
            &format!(
                "INSERT INTO attempts (file_id, attempt, start_time, resumed_bytes, host) VALUES {}",
                tuples.join(", ")
            ),
            &args,
        )?;
        out.extend(rows);
    }
    Ok(out)
}

/// Files one claiming statement takes at most (bound parameters stay well under the
/// databases' limits).
const CLAIM_CHUNK: usize = 64;
