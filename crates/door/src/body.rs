//! Response bodies: whole ones, and ones a blocking task fills chunk by chunk (file data, long
//! listings) through a bounded channel, so a slow client holds back the reader, never memory.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::mpsc;

use crate::zerocopy::{Job, Splicer, STAND_IN};

/// Chunks in flight between a body's producer and the connection.
pub(crate) const CHANNEL_DEPTH: usize = 4;

/// A response body.
#[derive(Debug)]
pub(crate) enum Body {
    /// Nothing.
    Empty,
    /// One buffer.
    Full(Option<Bytes>),
    /// Chunks from a producer; `len` when known (Content-Length).
    Channel {
        rx: mpsc::Receiver<std::io::Result<Bytes>>,
        len: Option<u64>,
    },
    /// Part of a file that the connection sends itself (`sendfile`): `job` is queued on the
    /// connection's splicer when the body is first polled, then `remaining` bytes of stand-ins
    /// hold its place (see [`crate::zerocopy`]).
    Spliced {
        splicer: Splicer,
        job: Option<Job>,
        remaining: u64,
    },
}

impl Body {
    pub(crate) fn text(s: impl Into<String>) -> Body {
        Body::Full(Some(Bytes::from(s.into())))
    }

    /// A body fed by the other end of the returned sender.
    pub(crate) fn channel(len: Option<u64>) -> (mpsc::Sender<std::io::Result<Bytes>>, Body) {
        let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
        (tx, Body::Channel { rx, len })
    }

    /// A body of `len` bytes that `splicer`'s connection sends from `job`'s file.
    pub(crate) fn spliced(splicer: Splicer, job: Job, len: u64) -> Body {
        Body::Spliced {
            splicer,
            job: Some(job),
            remaining: len,
        }
    }
}

impl HttpBody for Body {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.get_mut() {
            Body::Empty => Poll::Ready(None),
            Body::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Body::Channel { rx, .. } => match rx.poll_recv(cx) {
                Poll::Ready(Some(Ok(b))) => Poll::Ready(Some(Ok(Frame::data(b)))),
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
            Body::Spliced {
                splicer,
                job,
                remaining,
            } => {
                if let Some(job) = job.take() {
                    splicer.push(job);
                }
                if *remaining == 0 {
                    return Poll::Ready(None);
                }
                let n = (*remaining).min(STAND_IN.len() as u64) as usize;
                *remaining -= n as u64;
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&STAND_IN[..n])))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Empty => true,
            Body::Full(b) => b.is_none(),
            Body::Channel { .. } => false,
            Body::Spliced { job, remaining, .. } => job.is_none() && *remaining == 0,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Empty => SizeHint::with_exact(0),
            Body::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Body::Channel { len: Some(n), .. } => SizeHint::with_exact(*n),
            Body::Channel { len: None, .. } => SizeHint::default(),
            Body::Spliced { remaining, .. } => SizeHint::with_exact(*remaining),
        }
    }
}
