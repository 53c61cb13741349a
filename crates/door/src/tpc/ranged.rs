//! A pull in several streams: the source's first answer goes on carrying the file's first
//! share, and range requests (`Range: bytes=a-b`, with `If-Match` on the source's entity tag,
//! so every share is of one version) carry the others at once, each written where it belongs
//! by its own blocking writer. The site's checksums and the source's digest are taken as the
//! shares arrive and joined at the end (`ferry_dtp::digest`: ADLER32 and CRC32C combine; MD5
//! and the SHAs read back what followed the first share). A long path's window limits one TCP
//! connection; several fill it, as GridFTP's parallel streams do.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use ferry_dtp::digest::{StreamDigest, TransferDigest};
use ferry_proto::http::digest::DigestAlgorithm;
use ferry_proto::http::tpc::Copy;
use ferry_storage::{ChecksumAlgorithm, FileHandle, Storage, VirtualPath, WriteOptions};
use http::{header, Method, StatusCode};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use openssl::ssl::SslConnector;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::{client, Job};
use crate::body::Body;
use crate::context::DoorContext;
use crate::put::Outcome;
use crate::reply::{self, blocking, Reply};

/// The smallest share one stream fetches.
const MIN_SHARE: u64 = 4 << 20;
/// Files below this go in one stream unless the client asks for more.
const SMALL: u64 = 16 << 20;
/// Streams ferry uses when the client leaves the choice to it (`X-Number-Of-Streams: 0`).
const DEFAULT_STREAMS: u32 = 4;
/// Bytes a stream gathers before its writer writes them.
const CHUNK: usize = 1 << 20;

/// The size and stream count of a pull whose first answer is `parts`, where more than one
/// stream is worth it and the source does not refuse range requests; `None`: the answer's body
/// alone.
pub(super) fn plan(c: &Copy, parts: &http::response::Parts) -> Option<(u64, u32)> {
    if parts.status != StatusCode::OK {
        return None;
    }
    let size = parts
        .headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?;
    // XRootD 5 takes ranges without saying so: only a server that says it does not is
    // believed. Whether one really does, the first range request tells (see `probe`).
    let refused = parts
        .headers
        .get(header::ACCEPT_RANGES)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("none"));
    if refused {
        return None;
    }
    let wanted = match c.streams {
        0 if size >= SMALL => DEFAULT_STREAMS,
        0 => 1,
        n => n,
    };
    let n = wanted.min(u32::try_from((size / MIN_SHARE).max(1)).unwrap_or(u32::MAX));
    (n > 1).then_some((size, n))
}

/// `[0, size)` in `n` contiguous shares, as inclusive `(first, last)` byte ranges.
fn shares(size: u64, n: u32) -> Vec<(u64, u64)> {
    let n = u64::from(n.max(1));
    (0..n)
        .map(|k| (size * k / n, size * (k + 1) / n))
        .filter(|(a, b)| b > a)
        .map(|(a, b)| (a, b - 1))
        .collect()
}

/// The range requests' destination: the URL that answered the first GET, its headers, and
/// the source's entity tag.
pub(super) struct Source {
    pub(super) tls: SslConnector,
    pub(super) url: String,
    pub(super) headers: Vec<(String, String)>,
}

impl Source {
    /// The source of the first answer `parts`, asked again at `url` with `headers`.
    pub(super) fn new(
        tls: SslConnector,
        url: String,
        mut headers: Vec<(String, String)>,
        parts: &http::response::Parts,
    ) -> Source {
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case("want-digest"));
        // A strong tag pins the version; a weak one cannot be matched byte for byte.
        if let Some(tag) = parts
            .headers
            .get(header::ETAG)
            .and_then(|v| v.to_str().ok())
            .filter(|t| !t.starts_with("W/"))
        {
            headers.push(("If-Match".into(), tag.to_owned()));
        } else if let Some(date) = parts
            .headers
            .get(header::LAST_MODIFIED)
            .and_then(|v| v.to_str().ok())
        {
            headers.push(("If-Unmodified-Since".into(), date.to_owned()));
        }
        Source { tls, url, headers }
    }
}

/// The temporary file a ranged pull writes, beside its target.
pub(super) struct Landing {
    storage: Arc<dyn Storage>,
    file: Arc<dyn FileHandle>,
    temp: VirtualPath,
    target: VirtualPath,
    digest: Arc<TransferDigest>,
    expected: Vec<(DigestAlgorithm, Vec<u8>)>,
}

impl Landing {
    /// Opens a temporary file for `target`, to be summed with the site's checksums and
    /// checked against `expected`.
    pub(super) async fn open(
        ctx: &DoorContext,
        storage: Arc<dyn Storage>,
        target: VirtualPath,
        expected: Vec<(DigestAlgorithm, Vec<u8>)>,
    ) -> Result<Landing, Reply> {
        let Some(dir) = target.parent() else {
            return Err(reply::status(
                StatusCode::METHOD_NOT_ALLOWED,
                "the root is a collection, not a file",
            ));
        };
        let (s, t) = (Arc::clone(&storage), target.clone());
        let (file, temp) = blocking(move || {
            let (temp, _) = crate::put::temp_beside(&*s, &dir, &t)?;
            let file = s.open_write(
                &temp,
                WriteOptions {
                    create: true,
                    truncate: true,
                    create_new: true,
                },
            )?;
            Ok((file, temp))
        })
        .await
        .map_err(|e| reply::storage(&e))?;
        let algorithms: Vec<ChecksumAlgorithm> = crate::put::algorithms(ctx, &expected);
        Ok(Landing {
            storage,
            file,
            temp,
            target,
            digest: TransferDigest::new(&algorithms),
            expected,
        })
    }

    /// Syncs the whole file of `size` bytes, joins its checksums and, if they agree with the
    /// source's digest, renames it over the target; otherwise removes it.
    async fn seal(self, size: u64) -> Outcome {
        let done = blocking(move || {
            let outcome = (|| {
                self.file.sync()?;
                let sums = self
                    .digest
                    .complete(&*self.file, size)?
                    .into_iter()
                    .map(|t| (t.algorithm, t.value))
                    .collect();
                Ok(crate::put::seal(
                    &*self.storage,
                    &self.file,
                    &self.temp,
                    &self.target,
                    sums,
                    &self.expected,
                ))
            })()
            .unwrap_or_else(|e: ferry_storage::StorageError| {
                Outcome::Refused(reply::storage_status(&e), e.to_string())
            });
            if !matches!(outcome, Outcome::Stored { .. }) {
                let _ = self.storage.remove_file(&self.temp);
            }
            Ok(outcome)
        })
        .await;
        done.unwrap_or_else(|e| Outcome::Refused(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
    }

    /// Removes the temporary file.
    async fn discard(self) {
        let (s, temp) = (self.storage, self.temp);
        if let Err(e) = blocking(move || s.remove_file(&temp)).await {
            tracing::warn!(error = %e, "cannot remove a failed copy's temporary file");
        }
    }
}

impl Job {
    /// Pulls `size` bytes in `streams` shares: the first from `first` (the body of the
    /// source's first answer), the others by range requests to `source`.
    pub(super) async fn pull_ranged(
        self,
        first: Incoming,
        source: Source,
        landing: Landing,
        size: u64,
        streams: u32,
    ) {
        let moved = Arc::new(AtomicU64::new(0));
        let source = Arc::new(source);
        let run = async {
            let mut plan = shares(size, streams);
            // The second share's request says whether the source takes ranges; where it does
            // not, the first answer carries the whole file.
            let second = match plan.get(1) {
                Some(&share) => probe(&source, share).await,
                None => Err(String::new()),
            };
            let mut bodies = vec![Some(first)];
            match second {
                Ok(body) => bodies.push(Some(body)),
                Err(why) => {
                    tracing::info!(remote = %self.remote, "the source takes no range requests ({why}): one stream");
                    plan = vec![(0, size.saturating_sub(1))];
                }
            }
            tracing::info!(path = %self.path, remote = %self.remote, size, "third-party copy pulls in {} streams", plan.len());
            let mut workers = JoinSet::new();
            for (k, share) in plan.into_iter().enumerate() {
                let body = bodies.get_mut(k).and_then(Option::take);
                let (source, moved) = (Arc::clone(&source), Arc::clone(&moved));
                let (file, digest) = (Arc::clone(&landing.file), landing.digest.stream());
                workers.spawn(fetch(share, body, source, file, digest, moved));
            }
            // Dropped (the client left, a stall), the set aborts the streams still running.
            while let Some(done) = workers.join_next().await {
                match done {
                    Ok(Ok(())) => {}
                    Ok(Err(why)) => return Err(why),
                    Err(e) => return Err(format!("a stream of the copy failed: {e}")),
                }
            }
            Ok(())
        };
        let Some(result) = self.watch("COPY-PULL", &moved, run).await else {
            landing.discard().await;
            return;
        };
        let moved_now = moved.load(Ordering::Relaxed);
        let result = match result {
            Err(why) => {
                landing.discard().await;
                Err(why)
            }
            Ok(()) => match landing.seal(size).await {
                Outcome::Stored { .. } => Ok(()),
                Outcome::Refused(_, why) => Err(why),
            },
        };
        if result.is_ok() {
            self.marker(moved_now).await;
        }
        self.end("COPY-PULL", moved_now, result).await;
    }
}

/// The body of a range request for the inclusive byte range `share`, where the source
/// answers it with exactly that range.
async fn probe(source: &Source, share: (u64, u64)) -> Result<Incoming, String> {
    let (first, last) = share;
    let mut headers = source.headers.clone();
    headers.push(("Range".into(), format!("bytes={first}-{last}")));
    let answer = client::send(
        &source.tls,
        Method::GET,
        &source.url,
        &headers,
        Body::Empty,
        None,
    )
    .await?;
    let status = answer.response.status();
    let range = answer
        .response
        .headers()
        .get(header::CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if status == StatusCode::PRECONDITION_FAILED {
        return Err("the source's file changed during the copy".into());
    }
    if status != StatusCode::PARTIAL_CONTENT
        || !range.starts_with(&format!("bytes {first}-{last}/"))
    {
        return Err(format!(
            "the source answered the range request for bytes {first}-{last} with {status} {range}"
        ));
    }
    Ok(answer.response.into_body())
}

/// Fetches the inclusive byte range `share` into `file`: from `body` where it is the first
/// answer's (which starts at byte 0), else by a range request.
async fn fetch(
    share: (u64, u64),
    body: Option<Incoming>,
    source: Arc<Source>,
    file: Arc<dyn FileHandle>,
    digest: StreamDigest,
    moved: Arc<AtomicU64>,
) -> Result<(), String> {
    let (first, last) = share;
    let mut body = match body {
        Some(b) => b,
        None => probe(&source, share).await?,
    };
    let (tx, mut rx) = mpsc::channel::<(u64, Bytes)>(crate::body::CHANNEL_DEPTH);
    let writer = tokio::task::spawn_blocking(move || {
        let mut digest = digest;
        while let Some((at, data)) = rx.blocking_recv() {
            file.write_all_at(&data, at)?;
            digest.feed(at, &data);
        }
        Ok::<(), ferry_storage::StorageError>(())
    });
    let end = last + 1;
    let (mut at, mut buf_at) = (first, first);
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK);
    let mut broke = None;
    while at < end {
        match body.frame().await {
            Some(Ok(f)) => {
                let Ok(data) = f.into_data() else { continue };
                let take = data
                    .len()
                    .min(usize::try_from(end - at).unwrap_or(usize::MAX));
                buf.extend_from_slice(&data[..take]);
                at += take as u64;
                moved.fetch_add(take as u64, Ordering::Relaxed);
                if buf.len() >= CHUNK || at == end {
                    let full = std::mem::replace(&mut buf, Vec::with_capacity(CHUNK));
                    if tx.send((buf_at, Bytes::from(full))).await.is_err() {
                        break;
                    }
                    buf_at = at;
                }
            }
            Some(Err(e)) => {
                broke = Some(format!("the source's answer broke off at byte {at}: {e}"));
                break;
            }
            None => {
                broke = Some(format!(
                    "the source's answer ended at byte {at}, before {end}"
                ));
                break;
            }
        }
    }
    drop(tx);
    let written = writer
        .await
        .map_err(|e| format!("a stream's writer failed: {e}"))?;
    if let Err(e) = written {
        return Err(e.to_string());
    }
    broke.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_file_once_in_order() {
        for (size, n) in [(10u64, 3u32), (1, 4), (100 << 20, 4), (7, 7), (5, 1)] {
            let s = shares(size, n);
            assert_eq!(s.first().map(|r| r.0), Some(0), "{size} {n}");
            assert_eq!(s.last().map(|r| r.1), Some(size - 1), "{size} {n}");
            for w in s.windows(2) {
                assert_eq!(w[0].1 + 1, w[1].0, "{size} {n}: {s:?}");
            }
            assert!(s.len() <= n as usize);
        }
    }

    fn answer(length: u64, ranges: Option<&str>) -> http::response::Parts {
        let mut b = http::Response::builder()
            .status(200)
            .header("Content-Length", length);
        if let Some(r) = ranges {
            b = b.header("Accept-Ranges", r);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn copy(streams: u32) -> Copy {
        Copy {
            mode: ferry_proto::http::tpc::Mode::Pull,
            peer: ferry_proto::http::tpc::Peer::Http,
            remote: "https://a/x".into(),
            headers: Vec::new(),
            streams,
            overwrite: true,
            verify_checksum: None,
        }
    }

    #[test]
    fn several_streams_unless_the_source_refuses_ranges_or_the_file_is_small() {
        let big = 64 << 20;
        assert_eq!(plan(&copy(0), &answer(big, Some("bytes"))), Some((big, 4)));
        assert_eq!(plan(&copy(8), &answer(big, Some("bytes"))), Some((big, 8)));
        assert_eq!(plan(&copy(1), &answer(big, Some("bytes"))), None);
        // XRootD says nothing and takes ranges; a server that says "none" is believed.
        assert_eq!(plan(&copy(4), &answer(big, None)), Some((big, 4)));
        assert_eq!(plan(&copy(4), &answer(big, Some("none"))), None);
        // Shares are at least MIN_SHARE long.
        assert_eq!(
            plan(&copy(16), &answer(10 << 20, Some("bytes"))),
            Some((10 << 20, 2))
        );
        assert_eq!(plan(&copy(0), &answer(10 << 20, Some("bytes"))), None);
        assert_eq!(plan(&copy(4), &answer(1 << 20, Some("bytes"))), None);
    }
}
