//! GET and HEAD: whole files, one range (206), several (`multipart/byteranges`), conditional
//! requests (`If-None-Match`, `If-Modified-Since`, `If-Range`), and digests (`Want-Digest`,
//! `Want-Repr-Digest`) answered from the checksum cache.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use ferry_dtp::{BufferPool, IO_CHUNK};
use ferry_proto::http::dates;
use ferry_proto::http::digest::{self, DigestAlgorithm};
use ferry_proto::http::range::{self, ByteRange, RangeRequest};
use ferry_storage::{ChecksumAlgorithm, FileHandle, FileKind, Metadata, Storage};
use ferry_token::Operation;
use http::{header, HeaderValue, Response, StatusCode};

use crate::body::Body;
use crate::context::{DoorContext, HttpTransfer};
use crate::reply::{self, blocking, Reply};
use crate::req::Req;
use crate::zerocopy::Job;

/// Buffers file data passes through (GET bodies read from storage, PUT bodies on their way to
/// it): the data path's size, which stays in a core's cache between the read and the copy (or
/// sealing) that follows; each goes back to the pool once written, so a transfer allocates and
/// clears no memory per chunk.
pub(crate) fn data_buffers() -> &'static Arc<BufferPool> {
    static POOL: OnceLock<Arc<BufferPool>> = OnceLock::new();
    POOL.get_or_init(|| BufferPool::new(IO_CHUNK, 64))
}

/// The storage's algorithm for a digest algorithm.
pub(crate) fn storage_algorithm(a: DigestAlgorithm) -> ChecksumAlgorithm {
    match a {
        DigestAlgorithm::Adler32 => ChecksumAlgorithm::Adler32,
        DigestAlgorithm::Crc32c => ChecksumAlgorithm::Crc32c,
        DigestAlgorithm::Md5 => ChecksumAlgorithm::Md5,
        DigestAlgorithm::Sha => ChecksumAlgorithm::Sha1,
        DigestAlgorithm::Sha256 => ChecksumAlgorithm::Sha256,
        DigestAlgorithm::Sha512 => ChecksumAlgorithm::Sha512,
    }
}

/// The entity tag of a file version.
pub(crate) fn etag(m: &Metadata) -> String {
    format!("\"{:x}-{:x}-{:x}\"", m.ino, m.size, m.mtime)
}

fn set(r: &mut Reply, name: header::HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        r.headers_mut().insert(name, v);
    }
}

/// Whether the client's copy is current: `If-None-Match` first, else `If-Modified-Since`.
fn not_modified(r: &Req, m: &Metadata, tag: &str) -> bool {
    if let Some(inm) = r.header(header::IF_NONE_MATCH) {
        return inm
            .split(',')
            .map(|t| t.trim().trim_start_matches("W/"))
            .any(|t| t == "*" || t == tag);
    }
    r.header(header::IF_MODIFIED_SINCE)
        .and_then(dates::parse_http_date)
        .is_some_and(|since| m.mtime <= since)
}

/// The digests the client asked for, as `Digest` and `Repr-Digest` values.
async fn digests(
    r: &Req,
    storage: &Arc<dyn Storage>,
) -> Result<(Option<String>, Option<String>), Reply> {
    let want = r
        .header("want-digest")
        .map(digest::parse_want_digest)
        .unwrap_or_default();
    let want_repr = r
        .header("want-repr-digest")
        .map(digest::parse_want_repr_digest)
        .unwrap_or_default();
    let mut rfc3230 = Vec::new();
    let mut rfc9530 = Vec::new();
    for (alg, list) in want
        .iter()
        .map(|a| (*a, 0))
        .chain(want_repr.iter().map(|a| (*a, 1)))
    {
        let (s, p) = (Arc::clone(storage), r.path.clone());
        let hex = blocking(move || s.checksum(&p, storage_algorithm(alg), 0, None))
            .await
            .map_err(|e| reply::storage(&e))?;
        let raw = hex::decode(&hex).map_err(|e| {
            reply::status(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("checksum {hex}: {e}"),
            )
        })?;
        if list == 0 {
            rfc3230.push(alg.rfc3230(&raw));
        } else {
            rfc9530.push(alg.rfc9530(&raw));
        }
    }
    // davix splits Digest on ',' without trimming: no spaces.
    Ok((
        (!rfc3230.is_empty()).then(|| rfc3230.join(",")),
        (!rfc9530.is_empty()).then(|| rfc9530.join(", ")),
    ))
}

/// GET (`head == false`) or HEAD.
pub(crate) async fn get(ctx: &Arc<DoorContext>, r: &Req, head: bool) -> Result<Reply, Reply> {
    // A HEAD says what a stat says; a GET reads the file or lists the collection.
    r.may(
        if head {
            Operation::Stat
        } else {
            Operation::Read
        },
        &r.path,
    )?;
    let storage = Arc::clone(&r.principal.storage);
    let (s, p) = (Arc::clone(&storage), r.path.clone());
    let m = blocking(move || s.stat(&p))
        .await
        .map_err(|e| reply::storage(&e))?;
    match m.kind {
        FileKind::File => {}
        FileKind::Dir => return listing(r, &storage, head).await,
        _ => {
            return Err(reply::status(
                StatusCode::FORBIDDEN,
                format!("{}: not a regular file", r.path),
            ))
        }
    }
    let tag = etag(&m);
    let modified = dates::http_date(m.mtime);
    if not_modified(r, &m, &tag) {
        let mut reply = reply::empty(StatusCode::NOT_MODIFIED);
        set(&mut reply, header::ETAG, &tag);
        set(&mut reply, header::LAST_MODIFIED, &modified);
        return Ok(reply);
    }
    let range_ok = r
        .header(header::IF_RANGE)
        .is_none_or(|v| v.trim() == tag || v.trim() == modified);
    let ranges = match r.header(header::RANGE).filter(|_| range_ok) {
        Some(h) => range::parse(h, m.size),
        None => RangeRequest::Full,
    };
    let mut reply = Response::new(Body::Empty);
    set(&mut reply, header::ETAG, &tag);
    set(&mut reply, header::LAST_MODIFIED, &modified);
    set(&mut reply, header::ACCEPT_RANGES, "bytes");
    let (status, parts, content_type, framing) = match ranges {
        RangeRequest::Unsatisfiable => {
            let mut refused = reply::status(
                StatusCode::RANGE_NOT_SATISFIABLE,
                format!("no requested range lies within the file's {} bytes", m.size),
            );
            set(
                &mut refused,
                header::CONTENT_RANGE,
                &format!("bytes */{}", m.size),
            );
            return Err(refused);
        }
        RangeRequest::Full => {
            let (d, rd) = digests(r, &storage).await?;
            if let Some(d) = d {
                set(&mut reply, header::HeaderName::from_static("digest"), &d);
            }
            if let Some(rd) = rd {
                set(
                    &mut reply,
                    header::HeaderName::from_static("repr-digest"),
                    &rd,
                );
            }
            let all = (m.size > 0).then_some(ByteRange {
                start: 0,
                end: m.size.saturating_sub(1),
            });
            (
                StatusCode::OK,
                all.into_iter().collect::<Vec<_>>(),
                "application/octet-stream".to_string(),
                None,
            )
        }
        RangeRequest::Parts(parts) if parts.len() == 1 => {
            set(
                &mut reply,
                header::CONTENT_RANGE,
                &parts[0].content_range(m.size),
            );
            (
                StatusCode::PARTIAL_CONTENT,
                parts,
                "application/octet-stream".to_string(),
                None,
            )
        }
        RangeRequest::Parts(parts) => {
            let boundary = format!("ferry-{:016x}", rand::random::<u64>());
            let framing = Multipart::new(&boundary, &parts, m.size);
            (
                StatusCode::PARTIAL_CONTENT,
                parts,
                format!("multipart/byteranges; boundary={boundary}"),
                Some(framing),
            )
        }
    };
    *reply.status_mut() = status;
    set(&mut reply, header::CONTENT_TYPE, &content_type);
    let len = match &framing {
        Some(f) => f.len(&parts),
        None => parts.iter().map(ByteRange::len).sum(),
    };
    set(&mut reply, header::CONTENT_LENGTH, &len.to_string());
    if head {
        return Ok(reply);
    }
    let (s, p) = (Arc::clone(&storage), r.path.clone());
    let file = blocking(move || s.open_read(&p))
        .await
        .map_err(|e| reply::storage(&e))?;
    let metrics = ctx.metrics.clone();
    let ctx = Arc::clone(ctx);
    let (user, peer, path) = (r.principal.user.clone(), r.peer, r.path.to_string());
    let logged = status == StatusCode::OK || parts.len() == 1;
    let started = std::time::Instant::now();
    let finish = move |sent: u64, failure: Option<String>| {
        ctx.metrics.sent(sent);
        if logged {
            ctx.log_transfer(&HttpTransfer {
                user: &user,
                peer,
                method: "GET",
                path: &path,
                bytes: sent,
                started,
                status: if failure.is_some() {
                    500
                } else {
                    status.as_u16()
                },
                result: failure.as_deref().unwrap_or("ok"),
                checksums: &[],
            });
        }
    };
    if let (Some(splicer), None, [part]) = (&r.splicer, &framing, parts.as_slice()) {
        if let Some(fd) = crate::zerocopy::spliceable(file.as_ref()) {
            // One stretch of a file on a clear connection: the connection sends it itself.
            let done = Box::new(move |sent, failure| {
                metrics.spliced(sent);
                finish(sent, failure);
            });
            let job = Job::new(Arc::clone(&file), fd, part.start, part.len(), done);
            *reply.body_mut() = Body::spliced(splicer.clone(), job, len);
            return Ok(reply);
        }
    }
    Ok(read_into_body(
        reply,
        file,
        parts,
        framing,
        len,
        Box::new(finish),
    ))
}

/// Sets `reply`'s body to `parts` of `file` (with `framing` around them), read by a blocking
/// task; `finish` hears how many bytes went out, and why they stopped.
fn read_into_body(
    mut reply: Reply,
    file: Arc<dyn FileHandle>,
    parts: Vec<ByteRange>,
    framing: Option<Multipart>,
    len: u64,
    finish: crate::zerocopy::Done,
) -> Reply {
    *reply.body_mut() = file_body(file, parts, framing, len, None, finish);
    reply
}

/// A body of `parts` of `file` (with `framing` around them), `len` bytes in all, read by a
/// blocking task; `progress` counts the file bytes handed on, and `finish` hears how many went
/// out, and why they stopped.
pub(crate) fn file_body(
    file: Arc<dyn FileHandle>,
    parts: Vec<ByteRange>,
    framing: Option<Multipart>,
    len: u64,
    progress: Option<Arc<std::sync::atomic::AtomicU64>>,
    finish: crate::zerocopy::Done,
) -> Body {
    let (tx, body) = Body::channel(Some(len));
    tokio::task::spawn_blocking(move || {
        let mut sent = 0u64;
        let mut failure: Option<String> = None;
        'parts: for (i, part) in parts.iter().enumerate() {
            if let Some(f) = &framing {
                if tx.blocking_send(Ok(f.head(i))).is_err() {
                    failure = Some("the client went away".into());
                    break;
                }
            }
            let mut at = part.start;
            while at <= part.end {
                let want = IO_CHUNK.min((part.end - at + 1) as usize);
                let mut buf = data_buffers().take();
                let n = match file.read_at(&mut buf[..want], at) {
                    Ok(0) => {
                        failure = Some("the file shrank while it was sent".into());
                        let _ = tx.blocking_send(Err(std::io::Error::other("file shrank")));
                        break 'parts;
                    }
                    Ok(n) => n,
                    Err(e) => {
                        failure = Some(e.to_string());
                        let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
                        break 'parts;
                    }
                };
                let mut chunk = Bytes::from_owner(buf);
                chunk.truncate(n);
                if tx.blocking_send(Ok(chunk)).is_err() {
                    failure = Some("the client went away".into());
                    break 'parts;
                }
                at += n as u64;
                sent += n as u64;
                if let Some(p) = &progress {
                    p.store(sent, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
        if failure.is_none() {
            if let Some(f) = &framing {
                let _ = tx.blocking_send(Ok(f.tail()));
            }
        }
        finish(sent, failure);
    });
    body
}

/// The text around each part of a `multipart/byteranges` body.
#[derive(Debug)]
pub(crate) struct Multipart {
    heads: Vec<Bytes>,
    tail: Bytes,
}

impl Multipart {
    fn new(boundary: &str, parts: &[ByteRange], size: u64) -> Multipart {
        let heads = parts
            .iter()
            .map(|p| {
                Bytes::from(format!(
                    "\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\nContent-Range: {}\r\n\r\n",
                    p.content_range(size)
                ))
            })
            .collect();
        Multipart {
            heads,
            tail: Bytes::from(format!("\r\n--{boundary}--\r\n")),
        }
    }

    fn head(&self, i: usize) -> Bytes {
        self.heads[i].clone()
    }

    fn tail(&self) -> Bytes {
        self.tail.clone()
    }

    fn len(&self, parts: &[ByteRange]) -> u64 {
        let heads: u64 = self.heads.iter().map(|h| h.len() as u64).sum();
        heads + parts.iter().map(ByteRange::len).sum::<u64>() + self.tail.len() as u64
    }
}

/// GET of a collection: its members' names, one per line (`/` after collections).
async fn listing(r: &Req, storage: &Arc<dyn Storage>, head: bool) -> Result<Reply, Reply> {
    let (s, p) = (Arc::clone(storage), r.path.clone());
    let entries = blocking(move || s.list(&p))
        .await
        .map_err(|e| reply::storage(&e))?;
    let mut text = String::new();
    for e in entries {
        text.push_str(&e.name);
        if e.metadata.kind == FileKind::Dir {
            text.push('/');
        }
        text.push('\n');
    }
    let len = text.len();
    let mut reply = Response::new(if head { Body::Empty } else { Body::text(text) });
    set(
        &mut reply,
        header::CONTENT_TYPE,
        "text/plain; charset=utf-8",
    );
    set(&mut reply, header::CONTENT_LENGTH, &len.to_string());
    Ok(reply)
}
