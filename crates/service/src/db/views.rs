//! What the dashboard, the optimizer and the metrics read: counts, recent files and jobs,
//! decisions.

use super::*;

impl Db {
    /// Counts of files per link and state, for the dashboard and the scheduler: the counts
    /// the triggers keep (schema 7), not a count of every file ever queued.
    pub async fn link_counts(&self) -> Result<Vec<(String, String, i64)>, ServiceError> {
        self.tx(false, |tx, _, _| {
            tx.rows(
                &format!(
                    "SELECT link, state, CAST(SUM(n) AS BIGINT) FROM {COUNTED} \
                     GROUP BY link, state HAVING SUM(n) <> 0"
                ),
                &[],
            )?
            .iter()
            .map(|r| Ok((r.t(0)?, r.t(1)?, r.i(2)?)))
            .collect()
        })
        .await
    }

    /// [`Db::link_counts`] of one user's files: those of their unfinished jobs and of their
    /// `recent` newest ones (what their dashboard shows), counted through the
    /// `(job_id, state, link)` index.
    pub async fn link_counts_of(
        &self,
        user: String,
        recent: i64,
    ) -> Result<Vec<(String, String, i64)>, ServiceError> {
        self.tx(false, move |tx, _, _| {
            tx.rows(
                "SELECT link, state, COUNT(*) FROM files WHERE job_id IN ( \
                     SELECT job_id FROM jobs WHERE user_dn = ?1 AND state IN ('SUBMITTED', 'ACTIVE') \
                     UNION SELECT job_id FROM (SELECT job_id FROM jobs WHERE user_dn = ?1 \
                         ORDER BY submit_time DESC, job_id DESC LIMIT ?2) newest) \
                 GROUP BY link, state",
                vals![user, recent],
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

    /// The newest decisions, newest first: on every link (`None`), or on these.
    pub async fn decisions(
        &self,
        links: Option<Vec<String>>,
        limit: i64,
    ) -> Result<Vec<DecisionRow>, ServiceError> {
        self.tx(false, move |tx, _, _| {
            let (which, mut args) = match &links {
                None => (String::new(), Vec::new()),
                Some(l) if l.is_empty() => return Ok(Vec::new()),
                Some(l) => (
                    format!("WHERE link IN ({})", marks(2, l.len())),
                    l.iter().map(|x| V::from(x.as_str())).collect(),
                ),
            };
            args.insert(0, V::from(limit));
            tx.rows(
                &format!(
                    "SELECT link, time, from_active, to_active, throughput, reason FROM decisions \
                     {which} ORDER BY id DESC LIMIT ?1"
                ),
                &args,
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

    /// One job's files per state (from the `(job_id, state, link)` index alone, so a client
    /// may ask often), and, once the job has ended, the bytes its files moved.
    pub async fn job_progress(
        &self,
        job_id: String,
        ended: bool,
    ) -> Result<(Vec<(String, i64)>, Option<i64>), ServiceError> {
        self.tx(false, move |tx, _, _| {
            let counts = tx
                .rows(
                    "SELECT state, COUNT(*) FROM files WHERE job_id = ?1 GROUP BY state ORDER BY state",
                    vals![&job_id],
                )?
                .iter()
                .map(|r| Ok((r.t(0)?, r.i(1)?)))
                .collect::<Result<Vec<_>, ServiceError>>()?;
            let bytes = if ended {
                tx.row(
                    "SELECT CAST(COALESCE(SUM(bytes), 0) AS BIGINT) FROM files WHERE job_id = ?1",
                    vals![&job_id],
                )?
                .map(|r| r.i(0))
                .transpose()?
            } else {
                None
            };
            Ok((counts, bytes))
        })
        .await
    }

    /// Counts of files per state in all (as [`Db::link_counts`], from the kept counts).
    pub async fn state_counts(&self) -> Result<Vec<(String, i64)>, ServiceError> {
        self.tx(false, |tx, _, _| {
            tx.rows(
                &format!(
                    "SELECT state, CAST(SUM(n) AS BIGINT) FROM {COUNTED} \
                     GROUP BY state HAVING SUM(n) <> 0"
                ),
                &[],
            )?
            .iter()
            .map(|r| Ok((r.t(0)?, r.i(1)?)))
            .collect()
        })
        .await
    }

    /// Folds the count deltas the triggers appended into `link_states` (once a second: the
    /// readers add the deltas not folded yet, so this bounds their work, not their truth).
    /// PostgreSQL: hosts fold one at a time, and rows appended meanwhile wait for the next
    /// fold.
    pub async fn fold_counts(&self) -> Result<(), ServiceError> {
        self.tx(false, |tx, kind, _| {
            match kind {
                Kind::Sqlite => {
                    // `WHERE true`: SQLite's parser needs it before an upsert's ON CONFLICT.
                    tx.exec(
                        "INSERT INTO link_states (link, state, n) SELECT link, state, SUM(d) \
                         FROM link_state_deltas WHERE true GROUP BY link, state \
                         ON CONFLICT (link, state) DO UPDATE SET n = link_states.n + excluded.n",
                        &[],
                    )?;
                    tx.exec("DELETE FROM link_state_deltas", &[])?;
                }
                Kind::Postgres => {
                    tx.rows("SELECT pg_advisory_xact_lock(7305471)::TEXT", &[])?;
                    tx.exec(
                        "WITH moved AS (DELETE FROM link_state_deltas RETURNING link, state, d) \
                         INSERT INTO link_states (link, state, n) SELECT link, state, SUM(d) \
                         FROM moved GROUP BY link, state \
                         ON CONFLICT (link, state) DO UPDATE SET n = link_states.n + excluded.n",
                        &[],
                    )?;
                }
            }
            // A link's emptied states (its files all went on) need no row.
            tx.exec("DELETE FROM link_states WHERE n = 0", &[])?;
            Ok(())
        })
        .await
    }
}

/// The kept counts and the deltas not folded into them yet, as one relation (link, state, n).
const COUNTED: &str = "(SELECT link, state, n FROM link_states \
                       UNION ALL SELECT link, state, d FROM link_state_deltas) counted";
