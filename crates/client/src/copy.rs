//! Runs a plan: concurrent workers, each with its own sessions and cached data channels,
//! restarting interrupted files from their markers, skipping identical ones (`--sync`) and
//! verifying checksums on request.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::checks::{preserve, up_to_date};
use crate::job::{FileCopy, FileCopyEvent, Retry};
use crate::options::{
    finished, started, CopyEvent, CopyOptions, CopySummary, EventSink, SyncLevel,
};
use crate::pipeline::{run_pipeline, take_batch};
use crate::plan::{Job, Plan};
use crate::retune::{Retuned, Watch};
use crate::sessions::Sessions;
use crate::url::Location;
use crate::ClientError;

/// Plans and runs a copy of `sources` to `dest`.
pub async fn copy(
    sources: &[Location],
    dest: &Location,
    recursive: bool,
    opts: &CopyOptions,
    events: EventSink,
) -> Result<CopySummary, ClientError> {
    let gsi = std::sync::Arc::new(crate::GsiSetup::new(opts.gsi.clone()));
    copy_with_sessions(
        sources,
        dest,
        recursive,
        opts,
        events,
        Sessions::with_gsi(gsi),
    )
    .await
}

/// [`copy`] starting from `sessions` (logged in already, e.g. by a caller that measured the
/// path first): the planner and the first worker use them, so no login is repeated. Further
/// workers log in with the same GSI setup (`sessions.gsi()`), not `opts.gsi`.
pub async fn copy_with_sessions(
    sources: &[Location],
    dest: &Location,
    recursive: bool,
    opts: &CopyOptions,
    events: EventSink,
    sessions: Sessions,
) -> Result<CopySummary, ClientError> {
    let events = once_per_warning(events);
    let gsi = std::sync::Arc::clone(sessions.gsi());
    let mut planner_sessions = sessions;
    let plan = crate::plan::plan(sources, dest, recursive, &mut planner_sessions).await?;
    let bytes = plan.jobs.iter().filter_map(|j| j.size).sum();
    events(CopyEvent::Planned {
        files: plan.jobs.len(),
        bytes,
    });
    if recursive || opts.create_dirs {
        make_dirs(&plan, opts, &mut planner_sessions).await?;
    }
    let queue: Arc<Mutex<VecDeque<(usize, Job)>>> =
        Arc::new(Mutex::new(plan.jobs.into_iter().enumerate().collect()));
    let workers = opts
        .concurrency
        .max(1)
        .min(queue.lock().map(|q| q.len()).unwrap_or(1).max(1));
    let summary = Arc::new(Mutex::new(CopySummary::default()));
    let mut set = tokio::task::JoinSet::new();
    // The planner's sessions serve the first worker, so a single file needs one login.
    let mut first = Some(planner_sessions);
    for _ in 0..workers {
        let (queue, summary, events, opts) = (
            Arc::clone(&queue),
            Arc::clone(&summary),
            Arc::clone(&events),
            opts.clone(),
        );
        let sessions = first
            .take()
            .unwrap_or_else(|| Sessions::with_gsi(std::sync::Arc::clone(&gsi)));
        set.spawn(async move { worker(queue, sessions, summary, events, opts).await });
    }
    while set.join_next().await.is_some() {}
    let s = summary.lock().map(|s| s.clone()).unwrap_or_default();
    Ok(s)
}

/// The sink with each distinct warning passed on once: every file of a copy from a server
/// without MODE E finds the same reason.
fn once_per_warning(events: EventSink) -> EventSink {
    let seen = Mutex::new(std::collections::HashSet::new());
    Arc::new(move |ev: CopyEvent| {
        if let CopyEvent::Warning { message } | CopyEvent::Note { message } = &ev {
            let first = seen.lock().map(|mut s| s.insert(message.clone()));
            if !first.unwrap_or(true) {
                return;
            }
        }
        events(ev)
    })
}

async fn make_dirs(
    plan: &Plan,
    opts: &CopyOptions,
    sessions: &mut Sessions,
) -> Result<(), ClientError> {
    let mut parents: Vec<Location> = Vec::new();
    if opts.create_dirs {
        for j in &plan.jobs {
            if let Some(p) = parent(&j.dst) {
                if !parents.contains(&p) {
                    parents.push(p);
                }
            }
        }
    }
    for d in plan.dirs.iter().chain(parents.iter()) {
        match d {
            Location::Local(p) => std::fs::create_dir_all(p)?,
            Location::Remote(r) => sessions.get(r).await?.mkdir_all(&r.path).await?,
        }
    }
    Ok(())
}

fn parent(loc: &Location) -> Option<Location> {
    match loc {
        Location::Local(p) => p
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(|p| Location::Local(p.to_path_buf())),
        Location::Remote(r) => {
            let t = r.path.trim_end_matches('/');
            t.rsplit_once('/')
                .map(|(d, _)| Location::Remote(r.with_path(if d.is_empty() { "/" } else { d })))
        }
    }
}

async fn worker(
    queue: Arc<Mutex<VecDeque<(usize, Job)>>>,
    mut sessions: Sessions,
    summary: Arc<Mutex<CopySummary>>,
    events: EventSink,
    opts: CopyOptions,
) {
    loop {
        let batch = take_batch(&queue, &opts);
        let mut rest = batch.into_iter();
        let mut announced = 0;
        if rest.len() > 1 && !opts.cancel.is_cancelled() {
            let (done, began) =
                run_pipeline(rest.as_slice(), &mut sessions, &opts, &events, &summary).await;
            announced = began - done;
            if done > 0 {
                rest.nth(done - 1);
            }
        }
        // The single job, or what a pipeline left: one at a time, with retries.
        let mut any = false;
        for (i, job) in rest {
            any = true;
            if announced > 0 {
                announced -= 1;
            } else {
                started(&events, i, &job);
            }
            let r = copy_one(i, &job, &mut sessions, &opts, &events).await;
            finished(&summary, &events, i, r);
        }
        if !any && queue.lock().map(|q| q.is_empty()).unwrap_or(true) {
            break;
        }
    }
    sessions.close().await;
}

/// One file of the plan through the resumable copy API ([`FileCopy`]), retried from the ranges
/// the last attempt stored while the failure says a retry can help.
async fn copy_one(
    i: usize,
    job: &Job,
    sessions: &mut Sessions,
    opts: &CopyOptions,
    events: &EventSink,
) -> Result<CopyEvent, ClientError> {
    if opts.cancel.is_cancelled() {
        return Err(ClientError::Cancelled);
    }
    if opts.sync != SyncLevel::Off && up_to_date(job, sessions, opts).await? {
        return Ok(CopyEvent::Done {
            file: i,
            bytes: 0,
            moved: 0,
            seconds: 0.0,
            streams: 0,
            skipped: true,
            checksum: None,
            tcp: None,
        });
    }
    let mut file = FileCopy {
        src: job.src.clone(),
        dst: job.dst.clone(),
        size: job.size,
        request: opts.request.clone(),
        stored: opts.request.restart.clone(),
        verify: opts.verify.clone(),
    };
    let mut retune = opts.retune.as_ref();
    if let (Some(_), Some(n)) = (
        file.request.large_file_streams,
        retune.and_then(|r| r.0.settled()),
    ) {
        // An earlier file of this copy found that more streams move it faster.
        file.request.large_file_streams = Some(n);
    }
    if let Some(cc) = retune.and_then(|r| r.0.settled_sender()) {
        // An earlier file of this copy found the sender's congestion control wanting.
        file.request.congestion = Some(cc);
    }
    let started = Instant::now();
    let mut attempt = 1;
    loop {
        // The rule's decision stops this run (not the copy) to resume with other streams.
        let run_cancel = opts.cancel.child_token();
        let mut watch = retune.map(|r| Watch::new(r, job.size, file.stored.total()));
        let mut on_event = |ev: FileCopyEvent| match ev {
            FileCopyEvent::Performance { bytes, seconds } => {
                events(CopyEvent::Bytes { file: i, bytes });
                if watch.as_mut().is_some_and(|w| w.sample(seconds, bytes)) {
                    run_cancel.cancel();
                }
            }
            FileCopyEvent::Moving { streams } => {
                if let Some(w) = watch.as_mut() {
                    w.moving(streams);
                }
            }
            FileCopyEvent::DataRtt { rtt_us } => {
                if let Some(w) = watch.as_mut() {
                    w.data_rtt(rtt_us);
                }
            }
            FileCopyEvent::Stored { ranges } => events(CopyEvent::Stored {
                file: i,
                ranges: ranges.to_string(),
            }),
            FileCopyEvent::Warning { message } => events(CopyEvent::Warning { message }),
            FileCopyEvent::Note { message } => events(CopyEvent::Note { message }),
            FileCopyEvent::ForwardFailed(f) => events(CopyEvent::ForwardFailed {
                file: i,
                url: f.url,
                held: f.held.to_string(),
                error: f.error,
            }),
            _ => {}
        };
        let result = file.run(sessions, &run_cancel, &mut on_event).await;
        let verdict = watch.and_then(|w| w.verdict);
        if verdict.is_some() {
            retune = None;
        }
        let restream = match verdict {
            Some(Retuned::Keep(why)) => {
                if !why.is_empty() {
                    events(CopyEvent::Note { message: why });
                }
                None
            }
            Some(Retuned::Streams(n, why)) => Some((Some(n), None, why)),
            Some(Retuned::Sender(cc, why)) => Some((None, Some(cc), why)),
            _ => None,
        };
        match result {
            Ok(done) => {
                if opts.preserve {
                    if let Some(message) = preserve(&job.src, &job.dst, sessions).await? {
                        events(CopyEvent::Warning { message });
                    }
                }
                return Ok(CopyEvent::Done {
                    file: i,
                    bytes: done.bytes,
                    moved: done.moved,
                    seconds: started.elapsed().as_secs_f64(),
                    streams: done.streams,
                    skipped: false,
                    checksum: done.checksum,
                    tcp: done.tcp,
                });
            }
            Err(e)
                if matches!(e.error, ClientError::Cancelled)
                    && !opts.cancel.is_cancelled()
                    && restream.is_some() =>
            {
                let Some((streams, sender, why)) = restream else {
                    return Err(e.error);
                };
                events(CopyEvent::Note { message: why });
                if let Some(n) = streams {
                    file.request.parallelism = n;
                }
                if sender.is_some() {
                    file.request.congestion = sender;
                }
                file.stored = e.stored;
            }
            Err(e) if e.retry() == Retry::Resume && attempt <= opts.retries => {
                attempt += 1;
                file.stored = e.stored;
                events(CopyEvent::Retry {
                    file: i,
                    attempt,
                    resumed_bytes: file.stored.total(),
                    error: e.error.to_string(),
                });
                let wait = opts.retry_delay(attempt - 1);
                tokio::select! {
                    _ = opts.cancel.cancelled() => return Err(ClientError::Cancelled),
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            Err(e) => return Err(e.error),
        }
    }
}
