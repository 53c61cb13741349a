//! One attempt of a file, or a pipeline of small ones, and how it ended.

use super::destination::MayWrite;
use super::*;

impl Scheduler {
    /// Small files of one job and link as one pipeline; what it leaves runs one by one.
    /// Runs `rows` (small whole files of `job` on one link) as one pipeline and records how
    /// each ended; when all settled and the slot is still wanted, the next pipeline of the
    /// link, claimed in the same transaction, and its job.
    pub(super) async fn run_batch(
        &self,
        rows: Vec<FileRow>,
        job: &JobRow,
        token: &CancellationToken,
    ) -> Option<(JobRow, Vec<FileRow>)> {
        let options: JobOptions = serde_json::from_str(&job.options).unwrap_or_default();
        let mut copies = Vec::with_capacity(rows.len());
        let mut kept = Vec::with_capacity(rows.len());
        let (mut sessions, until) = match (
            Location::parse(&rows[0].source),
            Location::parse(&rows[0].dest),
        ) {
            (Ok(src), Ok(dst)) => match self.sessions_for(job, &rows[0].link, &src, &dst).await {
                Ok(s) => s,
                Err(e) => {
                    for row in &rows {
                        let failed = Outcome::Ended(Ending::Failed {
                            error: e.clone(),
                            retryable: false,
                        });
                        self.conclude(row, job, failed).await;
                    }
                    return None;
                }
            },
            _ => (Sessions::new(), i64::MAX),
        };
        let rows = self.learn_sizes(job, rows, &mut sessions).await;
        let known = self.existing(job, &rows, &mut sessions).await;
        let mut parsed = Vec::with_capacity(rows.len());
        let mut refused = Vec::new();
        for row in rows {
            match (Location::parse(&row.source), Location::parse(&row.dest)) {
                (Ok(src), Ok(dst)) => parsed.push((row, src, dst)),
                (Err(e), _) | (_, Err(e)) => {
                    let failed = Outcome::Ended(Ending::Failed {
                        error: e.to_string(),
                        retryable: false,
                    });
                    refused.push((row, failed));
                }
            }
        }
        let cleared = {
            let asked: Vec<(&FileRow, &Location)> =
                parsed.iter().map(|(row, _, dst)| (row, dst)).collect();
            self.clearances(job, &asked, &known, &mut sessions).await
        };
        for ((mut row, src, dst), may) in parsed.into_iter().zip(cleared) {
            match may {
                Ok(may) => {
                    // Found absent and recorded: the files the pipeline leaves run alone in
                    // this same attempt, into what it may have begun.
                    if Self::must_ask(job, &row) {
                        row.dest_own = true;
                    }
                    let size = row.filesize.map(|n| n as u64);
                    copies.push(self.copy_of(&row, job, &options, src, dst, size, may));
                    kept.push(row);
                }
                Err(refusal) => {
                    let outcome = self.refused(job, &row, refusal);
                    refused.push((row, outcome));
                }
            }
        }
        if !refused.is_empty() {
            let (rows, outcomes): (Vec<FileRow>, Vec<Outcome>) = refused.into_iter().unzip();
            self.conclude_many_then(job, rows.iter().zip(outcomes).collect(), None)
                .await;
        }
        let mut results = Vec::new();
        let settled = ferry_client::run_pipelined(&copies, &mut sessions, token, &mut |k, r| {
            results.push((k, r))
        })
        .await;
        let mut ended = Vec::with_capacity(results.len());
        for (k, r) in results {
            let outcome = match r {
                Ok(done) => {
                    let alg = copies[k].verify.as_ref().map(|v| v.algorithm.name());
                    Outcome::Ended(finished_ending(&done, 0, alg))
                }
                Err(e) if e.retry() == Retry::Resume => {
                    self.after_error(job, &kept[k], e.error, e.stored)
                }
                Err(e) => Outcome::Ended(Ending::Failed {
                    error: e.error.to_string(),
                    retryable: false,
                }),
            };
            ended.push((&kept[k], outcome));
        }
        let link = kept.first().map(|r| r.link.clone());
        let all_settled = settled == kept.len() && !token.is_cancelled();
        let then = link
            .clone()
            .filter(|l| all_settled && self.goes_on(l))
            .map(|l| (l, BATCH));
        let next = self.conclude_many_then(job, ended, then).await;
        match link {
            Some(l) if all_settled => self.give_back(job, &l, sessions, until),
            _ => drop(sessions),
        }
        // What the pipeline left: one at a time, as any file.
        for row in kept.iter().skip(settled) {
            let outcome = if token.is_cancelled() {
                Outcome::Stopped {
                    stored: row.stored.clone(),
                }
            } else {
                self.run_attempt(row, job, token).await
            };
            self.conclude(row, job, outcome).await;
        }
        next
    }

    pub(super) async fn conclude(&self, row: &FileRow, job: &JobRow, outcome: Outcome) {
        self.conclude_many_then(job, vec![(row, outcome)], None)
            .await;
    }

    /// [`Scheduler::conclude`] for several files of a job, in one transaction that also
    /// claims the next pipeline of `then` = (link, most files) (see
    /// [`Db::end_attempts_then_claim`]); that pipeline and its job.
    pub(super) async fn conclude_many_then(
        &self,
        job: &JobRow,
        ended: Vec<(&FileRow, Outcome)>,
        then: Option<(String, usize)>,
    ) -> Option<(JobRow, Vec<FileRow>)> {
        let mut endings = Vec::with_capacity(ended.len());
        let mut results = Vec::with_capacity(ended.len());
        for (row, outcome) in &ended {
            let file_id = row.file_id;
            let user_cancel = self
                .state
                .lock()
                .map(|s| s.canceled.contains(&file_id))
                .unwrap_or(false);
            let ending = match outcome {
                _ if user_cancel => Ending::Canceled,
                Outcome::Ended(e) => e.clone(),
                Outcome::Stopped { stored } => Ending::Retry {
                    error: "the service stopped during this attempt".into(),
                    stored: stored.clone(),
                    delay: 0,
                    counted: false,
                },
            };
            // Kept and logged without the passwords of `ftp://user:pw@` URLs, wherever an
            // error holds one.
            let ending = masked(ending, row);
            if let Ending::Failed { error, .. } | Ending::Retry { error, .. } = &ending {
                tracing::warn!(job = %job.job_id, file = file_id, source = %crate::redact::url(&row.source), error = %error, "transfer failed");
            }
            let result = match &ending {
                Ending::Finished { bytes, moved, .. } => {
                    // A third-party copy moves nothing through the service: what the
                    // destination gained is what moved.
                    let resumed = RangeSet::parse(&row.stored).map(|r| r.total()).unwrap_or(0);
                    let gained = (*bytes as u64).saturating_sub(resumed).max(*moved as u64);
                    self.count_bytes(file_id, gained);
                    "finished"
                }
                Ending::Retry { counted: false, .. } => "stopped",
                Ending::Retry { .. } => "retry",
                Ending::Failed { .. } => "failed",
                Ending::Canceled => "canceled",
            };
            self.metrics
                .attempts
                .get_or_create(&ResultLabel { result })
                .inc();
            endings.push((file_id, ending));
            results.push(result);
        }
        let next = match self.db.end_attempts_then_claim(endings, now(), then).await {
            Ok((each, next)) => {
                for ((row, _), r) in ended.iter().zip(each) {
                    if let Err(ServiceError::Conflict(why)) = r {
                        tracing::warn!(file = row.file_id, "{why}; another host runs it now");
                    }
                }
                next
            }
            Err(e) => {
                tracing::error!(error = %e, "could not record the end of attempts; they are resumed at the next start");
                None
            }
        };
        if let Ok(mut s) = self.state.lock() {
            for ((row, _), result) in ended.iter().zip(results) {
                s.files.remove(&row.file_id);
                s.canceled.remove(&row.file_id);
                s.live.remove(&row.file_id);
                let e = s.link_ended.entry(row.link.clone()).or_default();
                match result {
                    "finished" => e.0 += 1,
                    "retry" | "failed" => e.1 += 1,
                    _ => {}
                }
            }
        }
        next
    }

    pub(super) async fn run_attempt(
        &self,
        row: &FileRow,
        job: &JobRow,
        token: &CancellationToken,
    ) -> Outcome {
        let failed = |error: String| {
            Outcome::Ended(Ending::Failed {
                error,
                retryable: false,
            })
        };
        let (src, dst) = match (Location::parse(&row.source), Location::parse(&row.dest)) {
            (Ok(s), Ok(d)) => (s, d),
            (Err(e), _) | (_, Err(e)) => return failed(e.to_string()),
        };
        let options: JobOptions = serde_json::from_str(&job.options).unwrap_or_default();
        let stored = RangeSet::parse(&row.stored).unwrap_or_default();
        let (mut sessions, until) = match self.sessions_for(job, &row.link, &src, &dst).await {
            Ok(s) => s,
            Err(e) => return failed(e),
        };

        // FTS3's overwrite = false, asked on every attempt until one had a clear answer.
        let may = match self.clearance(job, row, &mut sessions, &dst).await {
            Ok(may) => may,
            Err(refusal) => return self.refused(job, row, refusal),
        };

        // The size chooses the streams and says how much is there at the end (a third-party
        // copy moves nothing through the service to count).
        let size = match row.filesize {
            Some(n) => Some(n as u64),
            None => {
                let size = size_of(&mut sessions, &src).await;
                if let Some(n) = size {
                    if let Err(e) = self.db.set_filesize(row.file_id, n as i64).await {
                        tracing::warn!(file = row.file_id, error = %e, "could not record a file's size");
                    }
                }
                size
            }
        };
        let resumed = stored.total();
        let started = Instant::now();
        let mut copy = self.copy_of(row, job, &options, src, dst, size, may);
        let tuning = self
            .tuned(options.nostreams, &mut copy, &mut sessions)
            .await;

        // Checkpoints go to the database in order, off the transfer's path.
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let db = self.db.clone();
        let file_id = row.file_id;
        let writer = tokio::spawn(async move {
            while let Some(ranges) = rx.recv().await {
                if let Err(e) = db.store_ranges(file_id, ranges).await {
                    tracing::error!(file = file_id, error = %e, "could not store a checkpoint");
                }
            }
        });
        let live_state = &self.state;
        let mut on_event = |ev: FileCopyEvent| match ev {
            FileCopyEvent::Stored { ranges } => {
                let _ = tx.send(ranges.to_string());
                // A third-party copy's progress is what its destination holds.
                let gained = ranges.total().saturating_sub(resumed);
                if let Ok(mut s) = live_state.lock() {
                    let seconds = started.elapsed().as_secs_f64();
                    let live = s.live.entry(file_id).or_insert(Live { bytes: 0, seconds });
                    live.bytes = live.bytes.max(gained);
                    live.seconds = seconds;
                }
                self.count_bytes(file_id, gained);
            }
            FileCopyEvent::Performance { bytes, seconds } => {
                if let Ok(mut s) = live_state.lock() {
                    let live = s.live.entry(file_id).or_insert(Live { bytes, seconds });
                    live.bytes = live.bytes.max(bytes);
                    live.seconds = seconds;
                }
                self.count_bytes(file_id, bytes);
            }
            _ => {}
        };
        let run = copy.run(&mut sessions, token, &mut on_event);
        let result = match options.timeout {
            Some(t) => tokio::time::timeout(Duration::from_secs(t), run).await.ok(),
            None => Some(run.await),
        };
        drop(tx);
        let _ = writer.await;
        match result {
            None => {
                let now_stored = self
                    .db
                    .file(file_id)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|f| RangeSet::parse(&f.stored).ok())
                    .unwrap_or(stored);
                self.after_error(
                    job,
                    row,
                    ClientError::Network(format!(
                        "the attempt took longer than the job's timeout of {} s",
                        options.timeout.unwrap_or(0)
                    )),
                    now_stored,
                )
            }
            Some(Ok(done)) => {
                self.give_back(job, &row.link, sessions, until);
                super::tune::learn(tuning, &done, resumed);
                let alg = copy.verify.as_ref().map(|v| v.algorithm.name());
                Outcome::Ended(finished_ending(&done, resumed, alg))
            }
            Some(Err(e)) if self.shutdown.is_cancelled() => Outcome::Stopped {
                stored: e.stored.to_string(),
            },
            Some(Err(e)) => match e.retry() {
                Retry::Resume => self.after_error(job, row, e.error, e.stored),
                Retry::FromScratch | Retry::No => failed(e.error.to_string()),
            },
        }
    }

    /// A transient failure: again after the job's delay while retries remain.
    pub(super) fn after_error(
        &self,
        job: &JobRow,
        row: &FileRow,
        error: ClientError,
        stored: RangeSet,
    ) -> Outcome {
        if error.class() != ferry_client::ErrorClass::Network {
            return Outcome::Ended(Ending::Failed {
                error: error.to_string(),
                retryable: false,
            });
        }
        self.transient(job, row, error.to_string(), stored)
    }

    /// A failure worth another attempt: again after the job's delay while retries remain.
    pub(super) fn transient(
        &self,
        job: &JobRow,
        row: &FileRow,
        error: String,
        stored: RangeSet,
    ) -> Outcome {
        if row.failures < job.retry {
            Outcome::Ended(Ending::Retry {
                error,
                stored: stored.to_string(),
                delay: job.retry_delay,
                counted: true,
            })
        } else {
            Outcome::Ended(Ending::Failed {
                error: match job.retry {
                    0 => error,
                    n => format!("{error} (after {n} retries)"),
                },
                retryable: true,
            })
        }
    }
}

impl Scheduler {
    /// The copy of a file as its job asks, once its destination may be written.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn copy_of(
        &self,
        row: &FileRow,
        job: &JobRow,
        options: &JobOptions,
        src: Location,
        dst: Location,
        size: Option<u64>,
        _may: MayWrite,
    ) -> FileCopy {
        let mut copy = FileCopy::new(src, dst);
        copy.size = size;
        copy.stored = RangeSet::parse(&row.stored).unwrap_or_default();
        copy.request.parallelism = options.nostreams.unwrap_or(0);
        copy.request.tcp_buffer = options.buffer_size;
        copy.verify = verify_for(&job.verify, row.checksum.as_deref());
        copy
    }
}

/// `ending` with the passwords of the file's URLs, and of any URL in its error, masked.
fn masked(ending: Ending, row: &FileRow) -> Ending {
    let mask = |error: String| crate::redact::text(&error, &[&row.source, &row.dest]);
    match ending {
        Ending::Failed { error, retryable } => Ending::Failed {
            error: mask(error),
            retryable,
        },
        Ending::Retry {
            error,
            stored,
            delay,
            counted,
        } => Ending::Retry {
            error: mask(error),
            stored,
            delay,
            counted,
        },
        other => other,
    }
}

/// A finished copy as the database keeps it: its checksum as `ALG:VALUE`, its throughput from
/// what the destination gained (a third-party copy moves nothing through the service).
fn finished_ending(done: &ferry_client::FileCopied, resumed: u64, alg: Option<&str>) -> Ending {
    let gained = done.bytes.saturating_sub(resumed).max(done.moved);
    Ending::Finished {
        bytes: done.bytes as i64,
        moved: done.moved as i64,
        throughput: if done.seconds > 0.0 {
            gained as f64 / done.seconds
        } else {
            0.0
        },
        checksum: done.checksum.as_ref().map(|v| match alg {
            Some(a) => format!("{a}:{v}"),
            None => v.clone(),
        }),
    }
}

/// How a job's checksum mode and a file's `ALG[:VALUE]` become the copy's verification.
/// `auto` (no mode given) is ferry's default: ADLER32 where both ends can answer.
pub fn verify_for(mode: &str, checksum: Option<&str>) -> Option<Verify> {
    let (alg, value) = match checksum {
        Some(c) => match c.split_once(':') {
            Some((a, v)) => (ChecksumAlgorithm::from_name(a), Some(v.to_owned())),
            None => (ChecksumAlgorithm::from_name(c), None),
        },
        None => (None, None),
    };
    match mode {
        "none" => None,
        "auto" if value.is_none() => Some(Verify {
            algorithm: alg.unwrap_or(ChecksumAlgorithm::Adler32),
            ..Verify::by_default()
        }),
        _ => Some(Verify {
            algorithm: alg.unwrap_or(ChecksumAlgorithm::Adler32),
            expected: value,
            required: true,
            // FTS3's modes: `source` and `target` sum that end alone against the user's
            // value (without a value, both ends are compared).
            ends: match mode {
                "source" => Ends::Source,
                "target" => Ends::Destination,
                _ => Ends::Both,
            },
        }),
    }
}

/// The source's size, when it can be had; the copy itself reports a missing source.
async fn size_of(sessions: &mut Sessions, src: &Location) -> Option<u64> {
    match src {
        Location::Local(p) => std::fs::metadata(p).ok().map(|m| m.len()),
        Location::Remote(r) => sessions.get(r).await.ok()?.size(&r.path).await.ok(),
    }
}
