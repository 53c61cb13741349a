//! PUT: the body streams to a temporary name beside the target, with the checksums the site
//! keeps and those the client sent (`Digest`, `Repr-Digest`, `Content-MD5`) taken as the bytes
//! arrive; only a whole body whose digests agree is renamed over the target. A client that
//! vanishes, a full disk or a mismatch leaves the old file (or none), never a short one.

use std::sync::Arc;

use bytes::Bytes;
use ferry_proto::http::digest::{self, DigestAlgorithm};
use ferry_storage::{
    ChecksumAlgorithm, Checksummer, FileHandle, FileKind, FileVersion, Storage, StorageError,
    VirtualPath, WriteOptions,
};
use http::{header, StatusCode};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use tokio::sync::{mpsc, oneshot};

use crate::context::{DoorContext, HttpTransfer};
use crate::get::{data_buffers, storage_algorithm};
use crate::reply::{self, blocking, Reply};
use crate::req::Req;

/// Prefix of the temporary names uploads are written under.
pub(crate) const TEMP_PREFIX: &str = ".ferry-put-";

/// What the client said the body's digests are.
fn expected_digests(r: &Req) -> Result<Vec<(DigestAlgorithm, Vec<u8>)>, Reply> {
    let bad = |e: digest::DigestError| reply::status(StatusCode::BAD_REQUEST, e);
    let mut out = Vec::new();
    if let Some(h) = r.header("digest") {
        out.extend(digest::parse_digest(h).map_err(bad)?);
    }
    if let Some(h) = r.header("repr-digest") {
        out.extend(digest::parse_repr_digest(h).map_err(bad)?);
    }
    if let Some(h) = r.header("content-md5") {
        out.push((
            DigestAlgorithm::Md5,
            digest::parse_content_md5(h).map_err(bad)?,
        ));
    }
    Ok(out)
}

pub(crate) enum Chunk {
    Data(Bytes),
    End,
}

/// How an upload ended.
pub(crate) enum Outcome {
    /// Stored, with the checksums taken.
    Stored {
        sums: Vec<(ChecksumAlgorithm, String)>,
    },
    /// Not stored, and why.
    Refused(StatusCode, String),
}

/// Writes what arrives to `temp`; at `End`, checks the digests and renames it over `target`.
/// If the channel closes first (the client went away), `temp` is removed.
struct Writer {
    storage: Arc<dyn Storage>,
    file: Arc<dyn FileHandle>,
    temp: VirtualPath,
    target: VirtualPath,
    sums: Vec<Checksummer>,
    expected: Vec<(DigestAlgorithm, Vec<u8>)>,
}

impl Writer {
    fn run(mut self, mut rx: mpsc::Receiver<Chunk>) -> Outcome {
        let mut at = 0u64;
        let outcome = loop {
            match rx.blocking_recv() {
                Some(Chunk::Data(b)) => {
                    if let Err(e) = self.file.write_all_at(&b, at) {
                        break Outcome::Refused(reply::storage_status(&e), e.to_string());
                    }
                    for s in &mut self.sums {
                        s.update(&b);
                    }
                    at += b.len() as u64;
                }
                Some(Chunk::End) => break self.finish(),
                None => {
                    break Outcome::Refused(
                        StatusCode::BAD_REQUEST,
                        "the upload stopped before its end".into(),
                    )
                }
            }
        };
        if !matches!(outcome, Outcome::Stored { .. }) {
            if let Err(e) = self.storage.remove_file(&self.temp) {
                tracing::warn!(path = %self.temp, error = %e, "cannot remove a failed upload");
            }
        }
        outcome
    }

    fn finish(&mut self) -> Outcome {
        if let Err(e) = self.file.sync() {
            return Outcome::Refused(reply::storage_status(&e), e.to_string());
        }
        let sums: Vec<(ChecksumAlgorithm, String)> = std::mem::take(&mut self.sums)
            .into_iter()
            .map(|s| (s.algorithm(), s.finish_hex()))
            .collect();
        seal(
            &*self.storage,
            &self.file,
            &self.temp,
            &self.target,
            sums,
            &self.expected,
        )
    }
}

/// The checksums an upload takes: the site's and those the client's digests name.
pub(crate) fn algorithms(
    ctx: &DoorContext,
    expected: &[(DigestAlgorithm, Vec<u8>)],
) -> Vec<ChecksumAlgorithm> {
    let mut algorithms: Vec<ChecksumAlgorithm> = ctx.transfer_checksums.clone();
    for (a, _) in expected {
        let a = storage_algorithm(*a);
        if !algorithms.contains(&a) {
            algorithms.push(a);
        }
    }
    algorithms
}

/// Ends a whole upload written (and synced) to `temp`: compares `sums` with `expected`, then
/// renames `temp` over `target` and keeps the sums. Refused, `temp` is the caller's to remove.
pub(crate) fn seal(
    storage: &dyn Storage,
    file: &Arc<dyn FileHandle>,
    temp: &VirtualPath,
    target: &VirtualPath,
    sums: Vec<(ChecksumAlgorithm, String)>,
    expected: &[(DigestAlgorithm, Vec<u8>)],
) -> Outcome {
    for (alg, want) in expected {
        let storage_alg = storage_algorithm(*alg);
        let got = sums.iter().find(|(a, _)| *a == storage_alg).map(|(_, h)| h);
        let got_raw = got.and_then(|h| hex::decode(h).ok()).unwrap_or_default();
        if &got_raw != want {
            return Outcome::Refused(
                StatusCode::BAD_REQUEST,
                format!(
                    "CHECKSUM MISMATCH: the request said {} {}, the bytes that arrived have {}; not stored",
                    alg.rfc3230_name(),
                    hex::encode(want),
                    got.map_or("none", String::as_str)
                ),
            );
        }
    }
    let version = FileVersion::of(&**file);
    if let Err(e) = storage.rename(temp, target) {
        return Outcome::Refused(reply::storage_status(&e), e.to_string());
    }
    if let Some(v) = version {
        storage.remember_checksums(file, v, &sums);
    }
    Outcome::Stored { sums }
}

/// A temporary name in `dir` for writing `target` (a file or nothing yet, in an existing
/// collection), and whether the target is there now.
pub(crate) fn temp_beside(
    s: &dyn Storage,
    dir: &VirtualPath,
    target: &VirtualPath,
) -> Result<(VirtualPath, bool), StorageError> {
    crate::dav::parent_collection(s, target)?;
    let existed = match s.stat(target) {
        Ok(m) if m.kind == FileKind::Dir => {
            return Err(StorageError::IsADirectory(target.to_string()))
        }
        Ok(_) => true,
        Err(StorageError::NotFound(_)) => false,
        Err(e) => return Err(e),
    };
    let temp = dir.join(&format!("{TEMP_PREFIX}{:016x}", rand::random::<u64>()))?;
    Ok((temp, existed))
}

/// An upload in progress: what is sent goes to a temporary name beside its target, renamed over
/// it by [`Upload::finish`] when whole and its digests agree; dropped or abandoned, it leaves
/// the old file (or none).
pub(crate) struct Upload {
    tx: mpsc::Sender<Chunk>,
    done: oneshot::Receiver<Outcome>,
    /// Whether the target was there before.
    pub(crate) existed: bool,
}

impl Upload {
    /// Opens the temporary file for `target` on `storage` (whose parent must exist), to be
    /// checked against `expected` and summed with the site's checksums.
    pub(crate) async fn begin(
        ctx: &DoorContext,
        storage: Arc<dyn Storage>,
        target: VirtualPath,
        expected: Vec<(DigestAlgorithm, Vec<u8>)>,
    ) -> Result<Upload, Reply> {
        let Some(dir) = target.parent() else {
            return Err(reply::status(
                StatusCode::METHOD_NOT_ALLOWED,
                "the root is a collection, not a file",
            ));
        };
        let (s, t) = (Arc::clone(&storage), target.clone());
        let (file, temp, existed) = blocking(move || {
            let (temp, existed) = temp_beside(&*s, &dir, &t)?;
            let file = s.open_write(
                &temp,
                WriteOptions {
                    create: true,
                    truncate: true,
                    create_new: true,
                },
            )?;
            Ok((file, temp, existed))
        })
        .await
        .map_err(|e| reply::storage(&e))?;
        let algorithms = algorithms(ctx, &expected);
        let writer = Writer {
            storage,
            file,
            temp,
            target,
            sums: algorithms.into_iter().map(Checksummer::new).collect(),
            expected,
        };
        let (tx, rx) = mpsc::channel(crate::body::CHANNEL_DEPTH);
        let (done_tx, done) = oneshot::channel();
        tokio::task::spawn_blocking(move || {
            let _ = done_tx.send(writer.run(rx));
        });
        Ok(Upload { tx, done, existed })
    }

    /// Queues `data`; `false` when the writer has stopped (a write failed: see the outcome).
    pub(crate) async fn send(&self, data: Bytes) -> bool {
        self.tx.send(Chunk::Data(data)).await.is_ok()
    }

    /// Ends the upload: stored when whole and its digests agree.
    pub(crate) async fn finish(self) -> Outcome {
        let _ = self.tx.send(Chunk::End).await;
        self.outcome().await
    }

    /// Gives the upload up: nothing is stored.
    pub(crate) async fn abandon(self) -> Outcome {
        self.outcome().await
    }

    async fn outcome(self) -> Outcome {
        drop(self.tx);
        self.done.await.unwrap_or(Outcome::Refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the upload's writer stopped".into(),
        ))
    }
}

/// PUT.
pub(crate) async fn put(ctx: &Arc<DoorContext>, r: &Req, body: Incoming) -> Result<Reply, Reply> {
    let allowed = match r.writable() {
        Ok(()) => r.may_write(&r.path).await,
        Err(refused) => Err(refused),
    };
    if let Err(refused) = allowed {
        return Err(crate::req::refuse_unread(body, refused).await);
    }
    if r.trailing_slash || r.path.parent().is_none() {
        return Err(reply::status(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{}: a PUT names a file, not a collection", r.path),
        ));
    }
    let expected = expected_digests(r)?;
    let upload = Upload::begin(
        ctx,
        Arc::clone(&r.principal.storage),
        r.path.clone(),
        expected,
    )
    .await?;
    let existed = upload.existed;

    let started = std::time::Instant::now();
    let mut received = 0u64;
    let mut body = body;
    // Frames are gathered into pooled buffers (no allocation, no page faults per chunk); the
    // writer hands each back by dropping it.
    let mut buf = data_buffers().take();
    let mut filled = 0;
    let mut stopped: Option<String> = None;
    'body: while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                let Ok(data) = f.into_data() else { continue };
                received += data.len() as u64;
                let mut data = &data[..];
                while !data.is_empty() {
                    let n = data.len().min(buf.len() - filled);
                    buf[filled..filled + n].copy_from_slice(&data[..n]);
                    (filled, data) = (filled + n, &data[n..]);
                    if filled == buf.len() {
                        let full = std::mem::replace(&mut buf, data_buffers().take());
                        filled = 0;
                        if !upload.send(Bytes::from_owner(full)).await {
                            break 'body;
                        }
                    }
                }
            }
            Err(e) => {
                stopped = Some(format!("the upload stopped: {e}"));
                break;
            }
        }
    }
    let outcome = if stopped.is_none() {
        if filled > 0 {
            let mut last = Bytes::from_owner(buf);
            last.truncate(filled);
            upload.send(last).await;
        }
        upload.finish().await
    } else {
        upload.abandon().await
    };
    ctx.metrics.received(received);
    let (status, result, sums) = match &outcome {
        Outcome::Stored { sums } => (
            if existed {
                StatusCode::NO_CONTENT
            } else {
                StatusCode::CREATED
            },
            "ok".to_string(),
            sums.iter()
                .map(|(a, h)| (a.name(), h.clone()))
                .collect::<Vec<_>>(),
        ),
        Outcome::Refused(s, why) => (
            *s,
            stopped.clone().unwrap_or_else(|| why.clone()),
            Vec::new(),
        ),
    };
    ctx.log_transfer(&HttpTransfer {
        user: &r.principal.user,
        peer: r.peer,
        method: "PUT",
        path: r.path.as_str(),
        bytes: received,
        started,
        status: status.as_u16(),
        result: &result,
        checksums: &sums,
    });
    match outcome {
        Outcome::Stored { .. } => {
            let mut reply = reply::empty(status);
            if status == StatusCode::CREATED {
                if let Ok(v) = header::HeaderValue::from_str(&r.href(&r.path, false)) {
                    reply.headers_mut().insert(header::LOCATION, v);
                }
            }
            Ok(reply)
        }
        Outcome::Refused(s, why) => Err(reply::status(s, why)),
    }
}
