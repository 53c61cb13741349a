//! A pull in several streams: the source's first answer goes on carrying the file's first
//! share, and range requests (`Range: bytes=a-b`, with `If-Match` on the source's entity tag,
//! so every share is of one version) carry the others at once, each written where it belongs
//! by its own blocking writer. The site's checksums and the source's digest are taken as the
//! shares arrive and joined at the end (`ferry_dtp::digest`: ADLER32 and CRC32C combine; MD5
//! and the SHAs read back what followed the first share). A long path's window limits one TCP
//! connection; several fill it, as GridFTP's parallel streams do.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ferry_dtp::digest::StreamDigest;
use ferry_proto::http::tpc::Copy;
use ferry_proto::ranges::RangeSet;
use ferry_storage::FileHandle;
use http::{header, Method, StatusCode};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::landing::Landing;
use super::partial::State;
use super::{client, Job};
use crate::body::Body;
use crate::put::Outcome;

/// The smallest share one stream fetches.
const MIN_SHARE: u64 = 4 << 20;
/// Files below this go in one stream unless the client asks for more.
const SMALL: u64 = 16 << 20;
/// Streams ferry uses when the client leaves the choice to it (`X-Number-Of-Streams: 0`), as
/// its GridFTP client chooses them: more on a long path, where one window is too small.
const DEFAULT_STREAMS: u32 = 4;
const LONG_PATH_STREAMS: u32 = 8;
/// A round trip above this is a long path.
const LONG_PATH: std::time::Duration = std::time::Duration::from_millis(20);
/// Bytes a stream gathers before its writer writes them.
const CHUNK: usize = 1 << 20;

/// The size and stream count of a pull whose first answer is `parts`, where more than one
/// stream is worth it and the source does not refuse range requests; `None`: the answer's body
/// alone.
pub(super) fn plan(
    c: &Copy,
    parts: &http::response::Parts,
    rtt: std::time::Duration,
) -> Option<(u64, u32)> {
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
    let n = streams_for(c.streams, size, rtt);
    // One stream too for a large file: its landing is kept if the pull fails part way.
    (n > 1 || size >= SMALL).then_some((size, n))
}

/// Streams for `size` bytes over a path of round trip `rtt` where the client asked for `asked`
/// (0: ferry's choice).
pub(super) fn streams_for(asked: u32, size: u64, rtt: std::time::Duration) -> u32 {
    let wanted = match asked {
        0 if size >= SMALL && rtt > LONG_PATH => LONG_PATH_STREAMS,
        0 if size >= SMALL => DEFAULT_STREAMS,
        0 => 1,
        n => n,
    };
    wanted
        .min(u32::try_from((size / MIN_SHARE).max(1)).unwrap_or(u32::MAX))
        .max(1)
}

/// What the source's answer `parts` says of the version of `source`, `size` bytes long.
pub(super) fn version(source: &str, size: u64, parts: &http::response::Parts) -> State {
    let text = |h: header::HeaderName| {
        parts
            .headers
            .get(h)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    State {
        source: source.to_owned(),
        size,
        // A weak tag cannot be matched byte for byte.
        etag: text(header::ETAG).filter(|t| !t.starts_with("W/")),
        last_modified: text(header::LAST_MODIFIED),
        digest: text(header::HeaderName::from_static("digest")),
        stored: Vec::new(),
    }
}

/// The size of the file a `206` answer with `Content-Range: bytes a-b/size` for exactly
/// `share` comes from.
pub(super) fn ranged_size(parts: &http::response::Parts, share: (u64, u64)) -> Option<u64> {
    if parts.status != StatusCode::PARTIAL_CONTENT {
        return None;
    }
    let range = parts.headers.get(header::CONTENT_RANGE)?.to_str().ok()?;
    let rest = range.strip_prefix(&format!("bytes {}-{}/", share.0, share.1))?;
    rest.trim().parse().ok()
}

/// The range requests' destination: the URL that answered the first GET, its headers, and
/// the source's entity tag.
pub(super) struct Source {
    pub(super) tls: client::Outgoing,
    pub(super) url: String,
    pub(super) headers: Vec<(String, String)>,
}

impl Source {
    /// The source `now`, asked again at `url` with `headers`.
    pub(super) fn new(
        tls: client::Outgoing,
        url: String,
        mut headers: Vec<(String, String)>,
        now: &State,
    ) -> Source {
        headers.retain(|(n, _)| {
            !n.eq_ignore_ascii_case("want-digest") && !n.eq_ignore_ascii_case("range")
        });
        // Every share of one version.
        if let Some(tag) = &now.etag {
            headers.push(("If-Match".into(), tag.clone()));
        } else if let Some(date) = &now.last_modified {
            headers.push(("If-Unmodified-Since".into(), date.clone()));
        }
        Source { tls, url, headers }
    }
}

impl Job {
    /// Pulls the shares of `plan` (inclusive byte ranges of a file of `size` bytes): the
    /// first from `first`, the body of the source's first answer (which starts there), the
    /// others by range requests to `source`. `fresh`: the first answer was for the whole file,
    /// and whether the source takes ranges is still to be seen.
    pub(super) async fn pull_ranged(
        self,
        first: Incoming,
        source: Source,
        landing: Landing,
        size: u64,
        plan: Vec<(u64, u64)>,
        fresh: bool,
    ) {
        let moved = Arc::new(AtomicU64::new(0));
        let source = Arc::new(source);
        let run = async {
            let mut plan = plan;
            let mut bodies = vec![Some(first)];
            if fresh {
                // The second share's request says whether the source takes ranges; where it
                // does not, the first answer carries the whole file.
                let second = match plan.get(1) {
                    Some(&share) => probe(&source, share).await,
                    None => Err(String::new()),
                };
                match second {
                    Ok(body) => bodies.push(Some(body)),
                    Err(why) => {
                        if plan.len() > 1 {
                            tracing::info!(remote = %self.remote, "the source takes no range requests ({why}): one stream");
                        }
                        plan = vec![(0, size.saturating_sub(1))];
                    }
                }
            }
            tracing::info!(path = %self.path, remote = %self.remote, size, missing = plan.iter().map(|(a, b)| b + 1 - a).sum::<u64>(), "third-party copy pulls in {} streams", plan.len());
            let mut workers = JoinSet::new();
            for (k, share) in plan.into_iter().enumerate() {
                let body = bodies.get_mut(k).and_then(Option::take);
                let (source, moved) = (Arc::clone(&source), Arc::clone(&moved));
                let to = Written {
                    file: Arc::clone(&landing.file),
                    digest: landing.digest.stream(),
                    stored: Arc::clone(&landing.stored),
                    alive: Arc::clone(&landing.writers),
                };
                workers.spawn(fetch(share, body, source, to, moved));
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
                landing.fail().await;
                Err(why)
            }
            Ok(()) => match landing.seal(size).await {
                Outcome::Stored { .. } => Ok(()),
                Outcome::Refused(_, why) => Err(why),
            },
        };
        self.end("COPY-PULL", moved_now, result).await;
    }
}

/// Where a stream's bytes go: the file, the digest, the record of what is written, and a
/// token held while its writer runs.
struct Written {
    file: Arc<dyn FileHandle>,
    digest: StreamDigest,
    stored: Arc<Mutex<RangeSet>>,
    alive: Arc<()>,
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
    to: Written,
    moved: Arc<AtomicU64>,
) -> Result<(), String> {
    let (first, last) = share;
    let mut body = match body {
        Some(b) => b,
        None => probe(&source, share).await?,
    };
    let (tx, mut rx) = mpsc::channel::<(u64, Bytes)>(crate::body::CHANNEL_DEPTH);
    let writer = tokio::task::spawn_blocking(move || {
        let Written {
            file,
            mut digest,
            stored,
            alive,
        } = to;
        while let Some((at, data)) = rx.blocking_recv() {
            file.write_all_at(&data, at)?;
            digest.feed(at, &data);
            stored
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(at, at + data.len() as u64);
        }
        drop(alive);
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
    // What arrived before a break is kept too: a retry need not fetch it again.
    if !buf.is_empty() {
        let _ = tx.send((buf_at, Bytes::from(buf))).await;
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

    fn answer(length: u64, ranges: Option<&str>) -> http::response::Parts {
        let mut b = http::Response::builder()
            .status(200)
            .header("Content-Length", length);
        if let Some(r) = ranges {
            b = b.header("Accept-Ranges", r);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn plan_at(c: &Copy, parts: &http::response::Parts) -> Option<(u64, u32)> {
        plan(c, parts, std::time::Duration::from_millis(1))
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
        assert_eq!(
            plan_at(&copy(0), &answer(big, Some("bytes"))),
            Some((big, 4))
        );
        assert_eq!(
            plan_at(&copy(8), &answer(big, Some("bytes"))),
            Some((big, 8))
        );
        // One stream of a large file lands where a retry can take it up.
        assert_eq!(
            plan_at(&copy(1), &answer(big, Some("bytes"))),
            Some((big, 1))
        );
        // XRootD says nothing and takes ranges; a server that says "none" is believed.
        assert_eq!(plan_at(&copy(4), &answer(big, None)), Some((big, 4)));
        assert_eq!(plan_at(&copy(4), &answer(big, Some("none"))), None);
        // Eight on a long path, as ferry's GridFTP client chooses.
        assert_eq!(
            plan(
                &copy(0),
                &answer(big, None),
                std::time::Duration::from_millis(75)
            ),
            Some((big, 8))
        );
        // Shares are at least MIN_SHARE long.
        assert_eq!(
            plan_at(&copy(16), &answer(10 << 20, Some("bytes"))),
            Some((10 << 20, 2))
        );
        assert_eq!(plan_at(&copy(0), &answer(10 << 20, Some("bytes"))), None);
        assert_eq!(plan_at(&copy(4), &answer(1 << 20, Some("bytes"))), None);
    }
}
