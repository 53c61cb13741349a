//! The resumable copy API: one file's copy as a value a program can store, run, cancel and run
//! again. Each run is one attempt; the caller keeps the ranges it reports and decides whether
//! and when to try again, so a queue (the transfer service) or a command (`ferry copy`, gcp)
//! resumes without sending a stored byte twice.

use std::path::Path;
use std::time::{Duration, Instant};

use ferry_proto::RangeSet;
use tokio_util::sync::CancellationToken;

use crate::checks::{verify, Checked};
use crate::drive::Progress;
use crate::options::Verify;
use crate::request::{auto_parallelism, is_small, FileRequest};
use crate::sessions::Sessions;
use crate::url::Location;
use crate::{third_party, ClientError, ErrorClass};

mod event;
pub use event::FileCopyEvent;

/// One file to copy. The value never changes while it runs: what the destination holds after
/// a run comes back in the outcome, the error or the [`FileCopyEvent::Stored`] checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileCopy {
    /// Where the file is read.
    pub src: Location,
    /// Where it is written.
    pub dst: Location,
    /// Its size, when known (chooses the stream count and completes partial-range lengths).
    pub size: Option<u64>,
    /// How to move it; `parallelism == 0` chooses by size and round-trip time. Its `restart`
    /// is not read: `stored` is what the destination holds.
    pub request: FileRequest,
    /// Ranges (relative to `request.offset`) the destination already holds, as an earlier
    /// run reported them: none of these bytes is sent again.
    pub stored: RangeSet,
    /// How to compare both ends once the data is there (`None`: not at all).
    pub verify: Option<Verify>,
}

/// A run that finished: the whole requested range is at the destination.
#[derive(Debug, Clone, PartialEq)]
pub struct FileCopied {
    /// Payload bytes at the destination (the file, or the requested range).
    pub bytes: u64,
    /// Bytes this run moved (less than `bytes` when it resumed).
    pub moved: u64,
    /// Parallel streams used (0 for a local copy).
    pub streams: u32,
    /// Seconds the run took.
    pub seconds: f64,
    /// The verified checksum, when the job asked for one.
    pub checksum: Option<String>,
    /// What the kernel knew of the client's data connections (MODE E over TCP).
    pub tcp: Option<ferry_net::TcpStats>,
}

/// Whether trying the same job again can succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// The connection or the peer failed: run again with the ranges in the error.
    Resume,
    /// The destination's bytes are wrong (checksums differ): run again from nothing.
    FromScratch,
    /// Refused, missing, cancelled or a local problem: the same run would fail the same way.
    No,
}

/// A run that stopped before the file was complete.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct FileCopyError {
    /// What went wrong.
    pub error: ClientError,
    /// What the destination holds now (the job's ranges and the checkpoints of this run);
    /// empty when the destination's bytes are not to be trusted.
    pub stored: RangeSet,
}

impl FileCopyError {
    /// Whether and how to try again.
    pub fn retry(&self) -> Retry {
        match self.error.class() {
            ErrorClass::Network => Retry::Resume,
            ErrorClass::Verification => Retry::FromScratch,
            _ => Retry::No,
        }
    }
}

impl FileCopy {
    /// A whole-file copy with default settings and nothing stored yet.
    pub fn new(src: Location, dst: Location) -> FileCopy {
        FileCopy {
            src,
            dst,
            size: None,
            request: FileRequest {
                parallelism: 0,
                ..FileRequest::default()
            },
            stored: RangeSet::new(),
            verify: Some(Verify::by_default()),
        }
    }

    /// Runs one attempt on `sessions` (connecting as needed) until the file is there, it fails
    /// or `cancel` fires. A cancelled or failed run drops the sessions it used, since they may
    /// be mid-transfer; closing the control connection makes the servers abort.
    pub async fn run(
        &self,
        sessions: &mut Sessions,
        cancel: &CancellationToken,
        on_event: &mut (dyn FnMut(FileCopyEvent) + Send),
    ) -> Result<FileCopied, FileCopyError> {
        let started = Instant::now();
        let mut stored = self.stored.clone();
        let mut stream_put = false;
        let result = tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(ClientError::Cancelled),
            r = self.attempt(sessions, &mut stored, &mut stream_put, started, on_event) => r,
        };
        match result {
            Ok(copied) => Ok(copied),
            Err(error) => {
                let network = error.class() == ErrorClass::Network;
                if network || matches!(error, ClientError::Cancelled) {
                    self.forget_sessions(sessions);
                }
                if network && stream_put {
                    stored = self.stored_by_stream_server(sessions).await;
                }
                if error.class() == ErrorClass::Verification {
                    stored = RangeSet::new();
                }
                Err(FileCopyError { error, stored })
            }
        }
    }

    /// What a server without MODE E (no restart markers) holds of this copy's interrupted upload:
    /// its file's size, asked anew; none when it cannot say, or says more than the source has.
    async fn stored_by_stream_server(&self, sessions: &mut Sessions) -> RangeSet {
        let Location::Remote(dst) = &self.dst else {
            return RangeSet::new();
        };
        let ask = async { sessions.get(dst).await?.size(&dst.path).await };
        match tokio::time::timeout(Duration::from_secs(30), ask).await {
            Ok(Ok(n)) if n > 0 && self.size.is_none_or(|size| n <= size) => {
                RangeSet::from_range(0, n)
            }
            _ => RangeSet::new(),
        }
    }

    /// The remote ends of this copy that do not offer MODE E.
    async fn stream_only_ends(&self, sessions: &mut Sessions) -> Result<Vec<String>, ClientError> {
        let mut ends = Vec::new();
        for loc in [&self.src, &self.dst] {
            if let Location::Remote(r) = loc {
                if !sessions.get(r).await?.offers_mode_e().await? {
                    ends.push(r.authority());
                }
            }
        }
        Ok(ends)
    }

    /// One stream where an end has no MODE E: a warning when more were asked for, or the
    /// refusal `--require-parallel` wants, before any byte moves.
    fn fall_back_to_one_stream(
        &self,
        ends: &[String],
        req: &mut FileRequest,
        on_event: &mut (dyn FnMut(FileCopyEvent) + Send),
    ) -> Result<(), ClientError> {
        let asked = self.request.parallelism;
        if asked > 1 {
            let reason = format!(
                "{} {} not offer MODE E (extended block mode), which parallel streams need",
                ends.join(" and "),
                if ends.len() == 1 { "does" } else { "do" }
            );
            if self.request.require_parallel {
                return Err(ClientError::Unsupported(format!(
                    "{reason}; not copying with one stream, as --require-parallel asks"
                )));
            }
            on_event(FileCopyEvent::Warning {
                message: format!("{reason}: copying with 1 stream in stream mode, not {asked}"),
            });
        }
        req.parallelism = 1;
        Ok(())
    }

    async fn attempt(
        &self,
        sessions: &mut Sessions,
        stored: &mut RangeSet,
        stream_put: &mut bool,
        started: Instant,
        on_event: &mut (dyn FnMut(FileCopyEvent) + Send),
    ) -> Result<FileCopied, ClientError> {
        let mut req = self.request.clone();
        let stream_only = self.stream_only_ends(sessions).await?;
        let stream_dst = !stream_only.is_empty() && matches!(self.dst, Location::Remote(_));
        if !stream_only.is_empty() {
            self.fall_back_to_one_stream(&stream_only, &mut req, on_event)?;
        }
        // Whether the server's file is this copy's, so that its size says what it holds: once
        // the server has answered STOR or APPE with 150 it has opened (STOR: truncated) it;
        // an earlier run's ranges say the same.
        *stream_put = stream_dst && !self.stored.is_empty();
        if req.offset > 0 && req.length.is_none() {
            // `ERET P <offset> -1` makes globus-gridftp-server drop the control connection; an
            // explicit length means the same (to the end) to every server.
            req.length = self.size.map(|size| size.saturating_sub(req.offset));
        }
        if req.parallelism == 0 {
            req.parallelism = match req.large_file_streams {
                Some(n) if !is_small(self.size) => n.max(1),
                _ => auto_parallelism(self.size, self.rtt(sessions).await),
            };
        }
        if let Some(choice) =
            crate::choose::choose(&self.src, &self.dst, &req, self.size, sessions).await?
        {
            req.transport = choice.transport;
            on_event(FileCopyEvent::Note {
                message: choice.why,
            });
        }
        req.restart = stored.clone();
        req.checksums = self.verify.iter().map(|v| v.algorithm).collect();
        let over_tcp = req.transport.as_deref().is_none_or(|t| t == "tcp");
        let local = matches!(
            (&self.src, &self.dst),
            (Location::Local(_), Location::Local(_))
        );
        if stream_only.is_empty() && over_tcp && !local {
            on_event(FileCopyEvent::Moving {
                streams: req.parallelism,
            });
        }
        let mut on_progress = |p: Progress| match p {
            Progress::Bytes(bytes) => on_event(FileCopyEvent::Performance {
                bytes,
                seconds: started.elapsed().as_secs_f64(),
            }),
            Progress::Opened => *stream_put |= stream_dst,
            Progress::StartedOver => {
                *stored = RangeSet::new();
                on_event(FileCopyEvent::Stored {
                    ranges: RangeSet::new(),
                });
            }
            Progress::ForwardFailed(f) => on_event(FileCopyEvent::ForwardFailed(f)),
            Progress::DataRtt(rtt_us) => on_event(FileCopyEvent::DataRtt { rtt_us }),
            Progress::Stored(r) => {
                let before = stored.total();
                stored.merge(&r);
                if stored.total() != before {
                    on_event(FileCopyEvent::Stored {
                        ranges: stored.clone(),
                    });
                }
            }
        };
        let moving = Instant::now();
        let (moved, streams, local_sums, tcp) = self
            .transfer(sessions, &req, &mut on_progress)
            .await
            .inspect_err(|e| {
                for f in crate::drive::forward_report(e) {
                    on_event(FileCopyEvent::ForwardFailed(f));
                }
            })?;
        if req.transport.is_none() && self.request.transport.as_deref() == Some(crate::choose::AUTO)
        {
            crate::choose::learn(
                &self.src,
                &self.dst,
                tcp.as_ref(),
                moved,
                moving.elapsed(),
                sessions,
            )
            .await;
        }
        if !stream_only.is_empty() {
            self.check_stream_size(sessions).await?;
        }
        let wanted = self
            .verify
            .as_ref()
            .filter(|v| v.required || v.expected.is_some() || self.verified_by_default(&req));
        let checksum = match wanted {
            Some(v) => match verify(&self.src, &self.dst, sessions, v, &req, &local_sums).await? {
                Checked::Same(value) => {
                    on_event(FileCopyEvent::Checksum {
                        algorithm: v.algorithm.name().to_string(),
                        value: value.clone(),
                    });
                    Some(value)
                }
                Checked::Unverified(message) => {
                    on_event(FileCopyEvent::Warning { message });
                    None
                }
            },
            None => None,
        };
        // The whole file (or range) is there now, whatever this run moved.
        let payload = self.size.map(|size| {
            size.saturating_sub(req.offset)
                .min(req.length.unwrap_or(u64::MAX))
        });
        Ok(FileCopied {
            bytes: payload.unwrap_or(moved).max(moved),
            moved,
            streams,
            seconds: started.elapsed().as_secs_f64(),
            checksum,
            tcp,
        })
    }

    /// Whether the default verification applies: a whole file that crossed a network, between
    /// regular files where the ends are local. Two local files are not read again (nothing
    /// crossed a network, and it would double the copy's cost); a range (`--offset`,
    /// `--length`: ERET/ESTO pieces, memory-to-memory runs from /dev/zero) has no kept value to
    /// compare; a device or pipe cannot be read back. `--checksum` verifies them all.
    fn verified_by_default(&self, req: &FileRequest) -> bool {
        let regular = |loc: &Location| match loc {
            Location::Local(p) => std::fs::metadata(p).is_ok_and(|m| m.is_file()),
            Location::Remote(_) => true,
        };
        let local_only = matches!(
            (&self.src, &self.dst),
            (Location::Local(_), Location::Local(_))
        );
        !local_only && !req.is_partial() && regular(&self.src) && regular(&self.dst)
    }

    /// The round-trip time to the first remote end, for choosing streams.
    async fn rtt(&self, sessions: &mut Sessions) -> Duration {
        match (&self.src, &self.dst) {
            (Location::Remote(r), _) | (_, Location::Remote(r)) => {
                sessions.get(r).await.map(|s| s.rtt()).unwrap_or_default()
            }
            _ => Duration::ZERO,
        }
    }

    /// Moves the file; returns the bytes moved, the streams, and the checksums the client's
    /// own end took (none in a third-party or local copy).
    async fn transfer(
        &self,
        sessions: &mut Sessions,
        req: &FileRequest,
        on_progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<
        (
            u64,
            u32,
            Vec<ferry_dtp::digest::Taken>,
            Option<ferry_net::TcpStats>,
        ),
        ClientError,
    > {
        let o = match (&self.src, &self.dst) {
            (Location::Remote(s), Location::Local(d)) => {
                sessions
                    .get(s)
                    .await?
                    .get(&s.path, d, req, on_progress)
                    .await?
            }
            (Location::Local(s), Location::Remote(d)) => {
                sessions
                    .get(d)
                    .await?
                    .put(s, &d.path, req, on_progress)
                    .await?
            }
            (Location::Remote(s), Location::Remote(d)) => {
                let (a, b) = sessions.pair(s, d).await?;
                third_party(a, &s.path, b, &d.path, req, on_progress).await?
            }
            (Location::Local(s), Location::Local(d)) => {
                let (n, streams) = local_copy(s, d, req).await?;
                return Ok((n, streams, Vec::new(), None));
            }
        };
        Ok((o.bytes, o.streams, o.checksums, o.tcp))
    }

    /// In stream mode the end of the data is the close of its connection, which a server that
    /// dies also causes: where the size is known, the destination must have all of it.
    async fn check_stream_size(&self, sessions: &mut Sessions) -> Result<(), ClientError> {
        let Some(expected) = self.size.filter(|_| !self.request.is_partial()) else {
            return Ok(());
        };
        let held = match &self.dst {
            Location::Local(p) => Some(std::fs::metadata(p)?.len()),
            Location::Remote(d) => sessions.get(d).await?.size(&d.path).await.ok(),
        };
        match held {
            Some(n) if n != expected => Err(ClientError::Network(format!(
                "{}: {n} of {expected} bytes arrived before the data connection closed",
                crate::plan::display(&self.dst)
            ))),
            _ => Ok(()),
        }
    }

    fn forget_sessions(&self, sessions: &mut Sessions) {
        for loc in [&self.src, &self.dst] {
            if let Location::Remote(r) = loc {
                sessions.drop_server(r);
            }
        }
    }
}

impl FileCopy {
    /// Whether this copy may run in a pipeline with others ([`run_pipelined`]): a whole small
    /// file (one stream) read from a server, nothing of it stored yet.
    pub fn pipelinable(&self) -> bool {
        let r = &self.request;
        matches!(self.src, Location::Remote(_))
            && is_small(self.size)
            && r.parallelism <= 1
            && r.offset == 0
            && r.length.is_none()
            && r.stripe.is_none()
            && self.stored.is_empty()
    }

    /// Whether two copies have the same two ends (servers, or local disk).
    fn same_ends(&self, other: &FileCopy) -> bool {
        let same = |x: &Location, y: &Location| match (x, y) {
            (Location::Remote(x), Location::Remote(y)) => x.same_server(y),
            (Location::Local(_), Location::Local(_)) => true,
            _ => false,
        };
        same(&self.src, &other.src) && same(&self.dst, &other.dst)
    }
}

/// Runs whole small files between the same two ends as one pipeline of transfer commands
/// (globus-url-copy's `-pp`) on `sessions`, with the first file's request and verification,
/// so each server starts the next file the moment the previous one ends. `on_done` hears of
/// each file as it settles (verified, when asked). Returns how many settled: always a prefix
/// of `files`; the rest must run one by one with [`FileCopy::run`] (a pipeline stops at its
/// first failure, and a copy that is not [`FileCopy::pipelinable`] or has other ends is not
/// taken at all). A cancelled run drops the sessions it used.
pub async fn run_pipelined(
    files: &[FileCopy],
    sessions: &mut Sessions,
    cancel: &CancellationToken,
    on_done: &mut (dyn FnMut(usize, Result<FileCopied, FileCopyError>) + Send),
) -> usize {
    let Some(first) = files.first() else {
        return 0;
    };
    let take = files
        .iter()
        .take_while(|f| f.pipelinable() && f.same_ends(first))
        .count();
    if take < 2 {
        return 0;
    }
    let files = &files[..take];
    let pairs: Vec<(&Location, &Location)> = files.iter().map(|f| (&f.src, &f.dst)).collect();
    let mut settled = 0;
    let mut on_start = |_: usize| {};
    let mut on_result = |k: usize, r: crate::pipeline::Piped| {
        settled = k + 1;
        let f = &files[k];
        on_done(
            k,
            match r {
                Ok((o, checksum)) => Ok(FileCopied {
                    bytes: f.size.unwrap_or(o.bytes).max(o.bytes),
                    moved: o.bytes,
                    streams: 1,
                    seconds: o.duration.as_secs_f64(),
                    checksum,
                    tcp: o.tcp.clone(),
                }),
                Err(error) => Err(FileCopyError {
                    // The bytes are there but differ, or could not be compared: the caller
                    // decides by the class; nothing stored is to be trusted after a mismatch.
                    error,
                    stored: RangeSet::new(),
                }),
            },
        );
    };
    let mut on_warning = |message: String| tracing::warn!("{message}");
    let run = crate::pipeline::run_pairs(
        &pairs,
        sessions,
        &first.request,
        first.verify.as_ref(),
        &mut on_start,
        &mut on_result,
        &mut on_warning,
    );
    let done = tokio::select! {
        biased;
        _ = cancel.cancelled() => None,
        r = run => Some(r),
    };
    if done.is_none() {
        first.forget_sessions(sessions);
    }
    settled
}

/// A copy between two local paths: the whole file, or the requested range written at the same
/// offset, skipping nothing (restart markers belong to network transfers).
async fn local_copy(src: &Path, dst: &Path, req: &FileRequest) -> Result<(u64, u32), ClientError> {
    if !req.is_partial() {
        return Ok((tokio::fs::copy(src, dst).await?, 0));
    }
    use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
    let mut from = tokio::fs::File::open(src).await?;
    let mut to = tokio::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(dst)
        .await?;
    from.seek(std::io::SeekFrom::Start(req.offset)).await?;
    to.seek(std::io::SeekFrom::Start(req.offset)).await?;
    let mut limited = from.take(req.length.unwrap_or(u64::MAX));
    let n = tokio::io::copy(&mut limited, &mut to).await?;
    to.flush().await?;
    Ok((n, 0))
}
