//! HTTP third-party copy, the active side: a `COPY` with `Source` (pull: this door GETs the
//! remote file into the request's path) or with a `Destination` on another server (push: it
//! PUTs the request's file there). The answer is `202` at once, then a performance marker
//! every 5 s and a last line `success: Created` or `failure: …`, as XRootD, dCache and StoRM
//! write them (`ferry_proto::http::tpc`). A client that goes away cancels the copy; a pull
//! that does not end whole, or whose bytes do not match the digest the source gave, keeps
//! nothing.

mod client;
mod gridftp;
mod landing;
mod partial;
mod ranged;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferry_proto::http::digest;
use ferry_proto::http::range::ByteRange;
use ferry_proto::http::tpc::{self, Copy, Mode, Peer};
use ferry_proto::ranges::RangeSet;
use ferry_storage::{FileKind, StorageError};
use ferry_token::Operation;
use http::{header, HeaderValue, Method, StatusCode};
use http_body_util::BodyExt as _;
use tokio::sync::mpsc;

use crate::body::Body;
use crate::context::{DoorContext, HttpTransfer};
use crate::put::{Outcome, Upload};
use crate::reply::{self, blocking, Reply};
use crate::req::Req;

/// Seconds between performance markers.
const MARKER_EVERY: Duration = Duration::from_secs(5);

/// Third-party copies running now, server-wide (reloads keep counting them).
static RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One running copy's place among [`RUNNING`], given back when dropped.
struct Slot;

impl Slot {
    fn take(max: usize) -> Option<Slot> {
        use std::sync::atomic::Ordering;
        let was = RUNNING.fetch_add(1, Ordering::AcqRel);
        if was >= max {
            RUNNING.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The third-party copy `r` asks for, if it is one.
pub(crate) fn third_party(r: &Req) -> Result<Option<Copy>, Reply> {
    let headers = r
        .headers
        .iter()
        .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)));
    tpc::parse(headers, &r.authority).map_err(|e| reply::status(StatusCode::BAD_REQUEST, e))
}

/// Runs the copy `c` that `r` asked for.
pub(crate) async fn copy(ctx: &Arc<DoorContext>, r: &Req, c: Copy) -> Result<Reply, Reply> {
    if r.trailing_slash || r.path.parent().is_none() {
        return Err(reply::status(
            StatusCode::METHOD_NOT_ALLOWED,
            format!(
                "{}: a third-party copy names a file, not a collection",
                r.path
            ),
        ));
    }
    let Some(slot) = Slot::take(ctx.https.tpc_max) else {
        let mut refused = reply::status(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "{} third-party copies are running, the most this server runs at once: try again later",
                ctx.https.tpc_max
            ),
        );
        refused
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("30"));
        return Err(refused);
    };
    let tls = client::connector(ctx.ca_dir.as_deref(), &ctx.https.tpc_deny_networks)
        .map_err(|e| reply::status(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    // The other party's addresses, before anything is sent (a redirect is checked again).
    let (host, port) = peer_address(&c)?;
    tls.resolve(&host, port)
        .await
        .map_err(|e| reply::status(StatusCode::FORBIDDEN, tpc::failure(&e).trim_end()))?;
    if c.peer == Peer::GridFtp {
        return gridftp::copy(ctx, r, c, slot).await;
    }
    match c.mode {
        Mode::Pull => pull(ctx, r, c, tls, slot).await,
        Mode::Push => push(ctx, r, c, tls, slot).await,
    }
}

/// The other party's host and port.
fn peer_address(c: &Copy) -> Result<(String, u16), Reply> {
    let bad = |why: String| reply::status(StatusCode::BAD_REQUEST, why);
    if c.peer == Peer::GridFtp {
        let url = ferry_client::RemoteUrl::parse(&c.remote)
            .map_err(|e| bad(format!("{}: {e}", c.remote)))?;
        return Ok((url.host, url.port));
    }
    let uri: http::Uri = c
        .remote
        .parse()
        .map_err(|e| bad(format!("{}: {e}", c.remote)))?;
    let host = uri
        .host()
        .ok_or_else(|| bad(format!("{}: no host", c.remote)))?;
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    Ok((
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned(),
        port,
    ))
}

/// The passive server's refusal, relayed: its 4xx as they are (404 stays "not found" for
/// FTS3 and gfal2), anything else as 502.
fn remote_refused(status: StatusCode, url: &str, text: &str) -> Reply {
    let relayed = if status.is_client_error() {
        status
    } else {
        StatusCode::BAD_GATEWAY
    };
    let text: String = text.chars().take(200).collect();
    reply::status(
        relayed,
        tpc::failure(&format!(
            "Remote side failed with status code {}; error message: \"{}\", remote={url}",
            status.as_u16(),
            text.trim()
        ))
        .trim_end(),
    )
}

async fn short_text(body: hyper::body::Incoming) -> String {
    let limited = http_body_util::Limited::new(body, 4096);
    match tokio::time::timeout(Duration::from_secs(5), limited.collect()).await {
        Ok(Ok(b)) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
        _ => String::new(),
    }
}

fn marker_stream() -> (mpsc::Sender<std::io::Result<Bytes>>, Reply) {
    let (tx, body) = Body::channel(None);
    let mut reply = http::Response::new(body);
    *reply.status_mut() = StatusCode::ACCEPTED;
    reply.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/perf-marker-stream"),
    );
    (tx, reply)
}

fn unix_now() -> u64 {
    ferry_proto::clock::now_since_epoch().as_secs()
}

async fn pull(
    ctx: &Arc<DoorContext>,
    r: &Req,
    c: Copy,
    tls: client::Outgoing,
    slot: Slot,
) -> Result<Reply, Reply> {
    r.writable()?;
    r.may_write(&r.path).await?;
    let storage = Arc::clone(&r.principal.storage);
    refuse_existing(&storage, &r.path, c.overwrite).await?;
    let mut headers = c.headers.clone();
    if !headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("want-digest"))
    {
        // adler32 only: a source without it cached reads the file once more to answer.
        headers.push(("Want-Digest".into(), "adler32".into()));
    }
    // What an earlier pull of the same source into this target left, if this copy is the
    // only one of it now.
    let claim = partial::Claim::take(&r.path);
    let mut old = match &claim {
        Some(_) => {
            let (s, t, source) = (Arc::clone(&storage), r.path.clone(), c.remote.clone());
            blocking(move || {
                let (_, record) = partial::names(&t)?;
                Ok(partial::load(&*s, &record).filter(|o| o.source == source))
            })
            .await
            .unwrap_or(None)
        }
        None => None,
    };
    loop {
        // A resumed pull asks at once for the first share of what is missing.
        let resume = old.as_ref().and_then(|o| {
            let missing = o.stored().complement_within(0, o.size);
            let streams = ranged::streams_for(c.streams, o.size, Duration::ZERO);
            let plan = partial::shares_of(&missing, streams);
            (!plan.is_empty()).then_some(plan)
        });
        let mut asked = headers.clone();
        if let Some(&(a, b)) = resume.as_ref().and_then(|p| p.first()) {
            asked.push(("Range".into(), format!("bytes={a}-{b}")));
        }
        let answer = client::send(&tls, Method::GET, &c.remote, &asked, Body::Empty, None)
            .await
            .map_err(|e| {
                reply::status(
                    StatusCode::BAD_GATEWAY,
                    tpc::failure(&format!("{e}, remote={}", c.remote)).trim_end(),
                )
            })?;
        let client::Answer {
            response,
            peer,
            rtt,
            url,
            headers: sent,
        } = answer;
        let (parts, body) = response.into_parts();
        let (now, kept, plan, fresh, expected) = if let (Some(plan), Some(o)) = (resume, old.take())
        {
            let now = ranged::ranged_size(&parts, plan[0])
                .map(|size| ranged::version(&c.remote, size, &parts))
                .filter(|now| o.same_file(now));
            let Some(mut now) = now else {
                // Another version, or no range: the pull starts over.
                tracing::info!(path = %r.path, remote = %c.remote, "the source changed since the pull that failed: starting over");
                let (s, t) = (Arc::clone(&storage), r.path.clone());
                let _ = blocking(move || {
                    partial::forget(&*s, &t);
                    Ok(())
                })
                .await;
                continue;
            };
            now.digest = o.digest.clone();
            let expected = expected_digest(&c, now.digest.as_deref());
            (now, Some(o), plan, false, expected)
        } else {
            if !parts.status.is_success() {
                return Err(remote_refused(
                    parts.status,
                    &c.remote,
                    &short_text(body).await,
                ));
            }
            let digest_header = parts
                .headers
                .get("digest")
                .and_then(|d| d.to_str().ok())
                .map(str::to_owned);
            let expected = expected_digest(&c, digest_header.as_deref());
            let Some((size, streams)) = ranged::plan(&c, &parts, rtt) else {
                let length = parts
                    .headers
                    .get(header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
                let upload = Upload::begin(ctx, storage, r.path.clone(), expected).await?;
                let (job, reply) = Job::new(ctx, r, &c.remote, Some(peer), slot);
                tokio::spawn(job.pull(body, upload, length));
                return Ok(reply);
            };
            let now = ranged::version(&c.remote, size, &parts);
            let plan = partial::shares_of(&RangeSet::from_range(0, size), streams);
            (now, None, plan, true, expected)
        };
        let size = now.size;
        let (landing, _) = landing::Landing::open(
            ctx,
            storage,
            r.path.clone(),
            expected,
            now.clone(),
            claim,
            kept,
        )
        .await?;
        let source = ranged::Source::new(tls, url, sent, &now);
        let (job, reply) = Job::new(ctx, r, &c.remote, Some(peer), slot);
        tokio::spawn(job.pull_ranged(body, source, landing, size, plan, fresh));
        return Ok(reply);
    }
}

/// The digest the source's `Digest` header gives, to check the bytes against, unless the
/// client said not to.
fn expected_digest(c: &Copy, header: Option<&str>) -> Vec<(digest::DigestAlgorithm, Vec<u8>)> {
    match (c.verify_checksum, header) {
        (Some(false), _) | (_, None) => Vec::new(),
        (_, Some(d)) => digest::parse_digest(d).unwrap_or_default(),
    }
}

/// 412 for a target that is there when the client said `Overwrite: F`.
async fn refuse_existing(
    storage: &Arc<dyn ferry_storage::Storage>,
    path: &ferry_storage::VirtualPath,
    overwrite: bool,
) -> Result<(), Reply> {
    if overwrite {
        return Ok(());
    }
    let (s, p) = (Arc::clone(storage), path.clone());
    if blocking(move || Ok(s.symlink_metadata(&p).is_ok()))
        .await
        .unwrap_or(false)
    {
        return Err(reply::status(
            StatusCode::PRECONDITION_FAILED,
            format!("{path}: File exists, and Overwrite is F"),
        ));
    }
    Ok(())
}

/// A running copy: what its markers, its last line and the transfer log need.
struct Job {
    ctx: Arc<DoorContext>,
    user: String,
    peer: std::net::SocketAddr,
    path: String,
    remote: String,
    /// The passive server's address, once known (`RemoteConnections`).
    remote_addr: Option<std::net::SocketAddr>,
    tx: mpsc::Sender<std::io::Result<Bytes>>,
    started: Instant,
    /// How long the copy may move nothing once started (twice that before its first byte).
    stall: Duration,
    /// Its place among the copies running, until it ends.
    _slot: Slot,
}

impl Job {
    /// The copy of `r` with `remote`, and the `202` whose body its markers go to.
    fn new(
        ctx: &Arc<DoorContext>,
        r: &Req,
        remote: &str,
        remote_addr: Option<std::net::SocketAddr>,
        slot: Slot,
    ) -> (Job, Reply) {
        let (tx, reply) = marker_stream();
        let job = Job {
            ctx: Arc::clone(ctx),
            user: r.principal.user.clone(),
            peer: r.peer,
            path: r.path.to_string(),
            remote: remote.to_owned(),
            remote_addr,
            tx,
            started: Instant::now(),
            stall: Duration::from_secs(ctx.https.tpc_stall_timeout.max(1)),
            _slot: slot,
        };
        (job, reply)
    }

    /// Sends a marker; `false` when the client has gone (the copy is then cancelled).
    async fn marker(&self, bytes: u64) -> bool {
        let remote: Vec<std::net::SocketAddr> = self.remote_addr.into_iter().collect();
        let m = tpc::perf_marker(unix_now(), bytes, &remote);
        self.tx.send(Ok(Bytes::from(m))).await.is_ok()
    }

    /// Ends the copy: a last marker of its `bytes` when it succeeded, then its last line, its
    /// metrics and its transfer-log line.
    async fn end(self, method: &str, bytes: u64, result: Result<(), String>) {
        if result.is_ok() {
            self.marker(bytes).await;
        }
        let line = match &result {
            Ok(()) => tpc::SUCCESS.to_string(),
            Err(why) => tpc::failure(&format!("{why}, remote={}", self.remote)),
        };
        let _ = self.tx.send(Ok(Bytes::from(line))).await;
        if method == "COPY-PULL" {
            self.ctx.metrics.received(bytes);
        } else {
            self.ctx.metrics.sent(bytes);
        }
        let result_text = match &result {
            Ok(()) => "ok".to_string(),
            Err(why) => why.clone(),
        };
        self.log(
            method,
            bytes,
            if result.is_ok() { 201 } else { 500 },
            &result_text,
        );
        tracing::info!(path = %self.path, remote = %self.remote, bytes, result = %result_text, "third-party copy ended");
    }

    /// Runs `transfer` while sending markers of the bytes `moved` counts, until it ends
    /// (`Some` of its result), the client leaves (`None`: the copy is logged as cancelled and
    /// `transfer` dropped) or nothing moves for too long (`Some(Err)`).
    async fn watch<T>(
        &self,
        method: &str,
        moved: &AtomicU64,
        transfer: impl std::future::Future<Output = Result<T, String>>,
    ) -> Option<Result<T, String>> {
        tokio::pin!(transfer);
        // The first marker at once: the client sees the copy has begun.
        let mut next_marker = tokio::time::Instant::now();
        let (mut seen, mut last_byte) = (0u64, Instant::now());
        loop {
            tokio::select! {
                done = &mut transfer => return Some(done),
                _ = tokio::time::sleep_until(next_marker) => {
                    next_marker += MARKER_EVERY;
                    let now = moved.load(Ordering::Relaxed);
                    if !self.marker(now).await {
                        self.cancelled(method, now);
                        return None;
                    }
                    if now > seen {
                        (seen, last_byte) = (now, Instant::now());
                    }
                    let allowed = if seen == 0 { 2 * self.stall } else { self.stall };
                    if last_byte.elapsed() >= allowed {
                        return Some(Err(format!(
                            "Transfer failed because no bytes have moved ({method}) in {} seconds",
                            last_byte.elapsed().as_secs()
                        )));
                    }
                }
            }
        }
    }

    async fn pull(self, mut body: hyper::body::Incoming, upload: Upload, length: Option<u64>) {
        let moved = AtomicU64::new(0);
        let receive = async {
            loop {
                match body.frame().await {
                    Some(Ok(f)) => {
                        let Ok(data) = f.into_data() else { continue };
                        moved.fetch_add(data.len() as u64, Ordering::Relaxed);
                        if !upload.send(data).await {
                            // The writer stopped (a full disk, a write error): its outcome says.
                            return Ok(());
                        }
                    }
                    Some(Err(e)) => {
                        return Err(format!(
                            "the source's answer broke off after {} bytes: {e}",
                            moved.load(Ordering::Relaxed)
                        ))
                    }
                    None => return Ok(()),
                }
            }
        };
        let result = self.watch("COPY-PULL", &moved, receive).await;
        drop(body);
        let moved = moved.load(Ordering::Relaxed);
        let Some(result) = result else {
            upload.abandon().await;
            return;
        };
        let short = length.filter(|&n| n != moved);
        let result = match (result, short) {
            (Err(why), _) => {
                upload.abandon().await;
                Err(why)
            }
            (Ok(()), Some(n)) => {
                upload.abandon().await;
                Err(format!("the source sent {moved} of its {n} bytes"))
            }
            (Ok(()), None) => match upload.finish().await {
                Outcome::Stored { .. } => Ok(()),
                Outcome::Refused(_, why) => Err(why),
            },
        };
        self.end("COPY-PULL", moved, result).await;
    }

    /// The copy's line in the site's transfer log.
    fn log(&self, method: &str, bytes: u64, status: u16, result: &str) {
        self.ctx.log_transfer(&HttpTransfer {
            user: &self.user,
            peer: self.peer,
            method,
            path: &self.path,
            bytes,
            started: self.started,
            status,
            result,
            checksums: &[],
        });
    }

    fn cancelled(&self, method: &str, bytes: u64) {
        self.log(method, bytes, 499, "cancelled: the client went away");
        tracing::info!(path = %self.path, remote = %self.remote, bytes, "third-party copy cancelled: the client went away");
    }
}

async fn push(
    ctx: &Arc<DoorContext>,
    r: &Req,
    c: Copy,
    tls: client::Outgoing,
    slot: Slot,
) -> Result<Reply, Reply> {
    r.may(Operation::Read, &r.path)?;
    let (s, p) = (Arc::clone(&r.principal.storage), r.path.clone());
    let (file, size) = blocking(move || {
        let m = s.stat(&p)?;
        if m.kind != FileKind::File {
            return Err(StorageError::IsADirectory(p.to_string()));
        }
        Ok((s.open_read(&p)?, m.size))
    })
    .await
    .map_err(|e| reply::storage(&e))?;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let parts = if size == 0 {
        Vec::new()
    } else {
        vec![ByteRange {
            start: 0,
            end: size - 1,
        }]
    };
    let progress = Arc::new(AtomicU64::new(0));
    let body = crate::get::file_body(
        file,
        parts,
        None,
        size,
        Some(Arc::clone(&progress)),
        Box::new(move |sent, failure| {
            let _ = done_tx.send((sent, failure));
        }),
    );
    let headers = c.headers.clone();
    if !c.overwrite {
        // A PUT has no create-only form: ask first.
        let head = client::send(&tls, Method::HEAD, &c.remote, &headers, Body::Empty, None).await;
        if head.is_ok_and(|a| a.response.status().is_success()) {
            return Err(reply::status(
                StatusCode::PRECONDITION_FAILED,
                format!("{}: File exists, and Overwrite is F", c.remote),
            ));
        }
    }
    let (job, reply) = Job::new(ctx, r, &c.remote, None, slot);
    tokio::spawn(async move {
        let put = client::send(&tls, Method::PUT, &c.remote, &headers, body, Some(size));
        let Some(answer) = job.watch("COPY-PUSH", &progress, put).await else {
            return;
        };
        let sent = match done_rx.await {
            Ok((sent, None)) => Ok(sent),
            Ok((sent, Some(why))) => Err((sent, why)),
            Err(_) => Ok(size),
        };
        let moved = match &sent {
            Ok(n) | Err((n, _)) => *n,
        };
        let result = match answer {
            Err(e) => Err(e),
            Ok(a) => {
                let status = a.response.status();
                if status.is_success() {
                    match sent {
                        Ok(_) => Ok(()),
                        Err((_, why)) => Err(why),
                    }
                } else {
                    let text = short_text(a.response.into_body()).await;
                    Err(format!(
                        "Remote side failed with status code {}; error message: \"{}\"",
                        status.as_u16(),
                        text.trim().chars().take(200).collect::<String>()
                    ))
                }
            }
        };
        job.end("COPY-PUSH", moved, result).await;
    });
    Ok(reply)
}
