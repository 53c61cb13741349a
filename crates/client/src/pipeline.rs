//! Pipelining for `ferry copy`: runs of whole small files between the same two ends go as one
//! pipeline of transfer commands (globus-url-copy's `-pp`), so each file starts the moment the
//! one before it ends instead of a round trip later.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use crate::checks::{verify_all, Checked};
use crate::options::{
    finished, started, CopyEvent, CopyOptions, CopySummary, EventSink, SyncLevel,
};
use crate::plan::{display, Job};
use crate::request::auto_parallelism;
use crate::sessions::Sessions;
use crate::third_party_pipelined;
use crate::url::Location;
use crate::ClientError;
use ferry_dtp::TransferOutcome;

/// Most files one pipeline takes from the queue, and most RETRs outstanding on it.
const PIPELINE_BATCH: usize = 128;
const PIPELINE_WINDOW: usize = 8;

/// The next job, or a run of up to [`PIPELINE_BATCH`] whole small files between the same two
/// ends (a server and local disk, or two servers) that can be pipelined.
pub(crate) fn take_batch(
    queue: &Mutex<VecDeque<(usize, Job)>>,
    opts: &CopyOptions,
) -> Vec<(usize, Job)> {
    let Ok(mut q) = queue.lock() else {
        return Vec::new();
    };
    let Some(first) = q.pop_front() else {
        return Vec::new();
    };
    let mut batch = vec![first];
    if !pipelinable(&batch[0].1, opts) {
        return batch;
    }
    while batch.len() < PIPELINE_BATCH {
        match q.front() {
            Some((_, next)) if pipelinable(next, opts) && same_ends(next, &batch[0].1) => {
                batch.extend(q.pop_front());
            }
            _ => break,
        }
    }
    batch
}

/// Whole-file gets and third-party copies of files small enough for one stream, with no skip
/// rule to check before each (verification runs after the pipeline).
fn pipelinable(job: &Job, opts: &CopyOptions) -> bool {
    let r = &opts.request;
    matches!(job.src, Location::Remote(_))
        && job
            .size
            .is_some_and(|s| auto_parallelism(Some(s), Duration::ZERO) == 1)
        && r.parallelism <= 1
        && r.offset == 0
        && r.length.is_none()
        && opts.sync == SyncLevel::Off
        && !opts.preserve
}

fn same_ends(a: &Job, b: &Job) -> bool {
    let same = |x: &Location, y: &Location| match (x, y) {
        (Location::Remote(x), Location::Remote(y)) => x.same_server(y),
        (Location::Local(_), Location::Local(_)) => true,
        _ => false,
    };
    same(&a.src, &b.src) && same(&a.dst, &b.dst)
}

/// Runs a batch as one pipeline; returns how many of its files completed and how many were
/// announced as started (the rest are left to the caller). Failures are not reported here:
/// the caller retries those files one by one.
pub(crate) async fn run_pipeline(
    batch: &[(usize, Job)],
    sessions: &mut Sessions,
    opts: &CopyOptions,
    events: &EventSink,
    summary: &Mutex<CopySummary>,
) -> (usize, usize) {
    let pairs: Vec<(&Location, &Location)> = batch.iter().map(|(_, j)| (&j.src, &j.dst)).collect();
    let mut on_start = |k: usize| started(events, batch[k].0, &batch[k].1);
    let mut on_result = |k: usize, r: Result<(TransferOutcome, Option<String>), ClientError>| {
        let (i, job) = &batch[k];
        finished(
            summary,
            events,
            *i,
            r.map(|(o, c)| done_event(*i, job, &o, c)),
        );
    };
    let mut on_warning = |message: String| events(CopyEvent::Warning { message });
    run_pairs(
        &pairs,
        sessions,
        &opts.request,
        opts.verify.as_ref(),
        &mut on_start,
        &mut on_result,
        &mut on_warning,
    )
    .await
}

/// A file's result in a pipeline: its transfer and the checksum both ends agreed on.
pub(crate) type Piped = Result<(TransferOutcome, Option<String>), ClientError>;

/// The pipeline itself, for `ferry copy` and the resumable copy API: whole files between the
/// same two ends (a server to local disk, or two servers). `on_result` hears of each completed
/// file (at once, or once verified when `verify` asks); returns how many completed (a prefix)
/// and how many were started; the rest go one by one.
pub(crate) async fn run_pairs(
    pairs: &[(&Location, &Location)],
    sessions: &mut Sessions,
    request: &crate::request::FileRequest,
    verify_with: Option<&crate::options::Verify>,
    on_start: &mut (dyn FnMut(usize) + Send),
    on_result: &mut (dyn FnMut(usize, Piped) + Send),
    on_warning: &mut (dyn FnMut(String) + Send),
) -> (usize, usize) {
    if pairs.is_empty() {
        return (0, 0);
    }
    let mut req = request.clone();
    req.parallelism = 1;
    req.checksums = verify_with.iter().map(|v| v.algorithm).collect();
    let (mut done, mut began) = (0, 0);
    // With verification, files are reported once both ends' checksums agree.
    let mut to_verify: Vec<(usize, TransferOutcome)> = Vec::new();
    let mut on_start_k = |k: usize| {
        began = k + 1;
        on_start(k);
    };
    let mut on_done = |k: usize, o: TransferOutcome| {
        done = k + 1;
        if verify_with.is_some() {
            to_verify.push((k, o));
            return;
        }
        on_result(k, Ok((o, None)));
    };
    let r = match pairs[0] {
        (Location::Remote(server), Location::Local(_)) => {
            let files: Vec<(&str, &Path)> = pairs
                .iter()
                .filter_map(|(s, d)| match (s, d) {
                    (Location::Remote(s), Location::Local(d)) => {
                        Some((s.path.as_str(), d.as_path()))
                    }
                    _ => None,
                })
                .collect();
            match sessions.get(server).await {
                Ok(session) => {
                    // Stream mode has no channel to keep between files: one by one.
                    if !session.offers_mode_e().await.unwrap_or(false) {
                        return (0, 0);
                    }
                    session
                        .get_pipelined(&files, &req, PIPELINE_WINDOW, &mut on_start_k, &mut on_done)
                        .await
                }
                Err(e) => Err((0, e)),
            }
        }
        (Location::Remote(a), Location::Remote(b)) => {
            let files: Vec<(&str, &str)> = pairs
                .iter()
                .filter_map(|(s, d)| match (s, d) {
                    (Location::Remote(s), Location::Remote(d)) => {
                        Some((s.path.as_str(), d.path.as_str()))
                    }
                    _ => None,
                })
                .collect();
            match sessions.pair(a, b).await {
                Ok((src, dst)) => {
                    if !src.offers_mode_e().await.unwrap_or(false)
                        || !dst.offers_mode_e().await.unwrap_or(false)
                    {
                        return (0, 0);
                    }
                    third_party_pipelined(
                        src,
                        dst,
                        &files,
                        &req,
                        PIPELINE_WINDOW,
                        &mut on_start_k,
                        &mut on_done,
                    )
                    .await
                }
                Err(e) => Err((0, e)),
            }
        }
        _ => return (0, 0),
    };
    if let Err((k, e)) = r {
        let at = display(pairs[k.min(pairs.len() - 1)].0);
        tracing::debug!("pipeline stopped at {at}: {e}; going on one file at a time");
    }
    if let Some(v) = verify_with {
        let items: Vec<_> = to_verify
            .iter()
            .map(|(k, o)| (pairs[*k].0, pairs[*k].1, o.checksums.as_slice()))
            .collect();
        let checked = verify_all(&items, sessions, v, &req).await;
        for ((k, o), r) in to_verify.into_iter().zip(checked) {
            let r = match r {
                Ok(Checked::Same(value)) => Ok((o, Some(value))),
                Ok(Checked::Unverified(message)) => {
                    on_warning(message);
                    Ok((o, None))
                }
                Err(e) => Err(e),
            };
            on_result(k, r);
        }
    }
    (done, began)
}

fn done_event(i: usize, job: &Job, o: &TransferOutcome, checksum: Option<String>) -> CopyEvent {
    CopyEvent::Done {
        file: i,
        bytes: job.size.unwrap_or(o.bytes).max(o.bytes),
        moved: o.bytes,
        seconds: o.duration.as_secs_f64(),
        streams: 1,
        skipped: false,
        checksum,
        tcp: o.tcp.clone(),
    }
}
