//! File bodies sent with `sendfile` on clear-text connections, through hyper.
//!
//! hyper writes a body's bytes to the connection itself and has no way to splice a file. So a
//! file body here is a [`Job`] (which file, from where, how much) queued on the connection's
//! [`Splicer`], followed by stand-in frames of the same length whose bytes all lie in
//! [`STAND_IN`]. hyper frames the response by Content-Length and queues body frames as they
//! are (vectored writes, never copied into its own buffer), so they reach [`ClearIo`] in
//! order, after the head. When a write starts inside `STAND_IN`, `ClearIo` sends the same
//! number of bytes of the front job's file with `sendfile` instead: the bytes on the wire are
//! the file's, in the place hyper put the stand-ins. Anything else is written as it is.
//!
//! Every clear connection gets this, loopback included. The GridFTP data channel splices only to
//! other hosts, because globus-url-copy receiving spliced pages over loopback spent 2-8x the
//! CPU per GB; curl receiving this door's spliced GETs over loopback spent about 10 % more
//! while the door spent a third less, and a 2 GiB GET went at 2.8-3.8 GB/s against 2.1-2.3
//! read and written (XRootD's clear door, which splices too: 3.0).
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use ferry_storage::FileHandle;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// What stand-in frames point into; a frame is at most this long.
pub(crate) static STAND_IN: [u8; 1 << 20] = [0; 1 << 20];

fn is_stand_in(b: &[u8]) -> bool {
    let (p, s) = (b.as_ptr() as usize, STAND_IN.as_ptr() as usize);
    !b.is_empty() && p >= s && p < s + STAND_IN.len()
}

/// How a finished (or abandoned) job reports: bytes sent, and why it stopped short.
pub(crate) type Done = Box<dyn FnOnce(u64, Option<String>) + Send>;

/// Part of a file to send.
pub(crate) struct Job {
    /// Held so that `fd` stays open.
    _file: Arc<dyn FileHandle>,
    fd: RawFd,
    offset: u64,
    remaining: u64,
    sent: u64,
    done: Option<Done>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("fd", &self.fd)
            .field("offset", &self.offset)
            .field("remaining", &self.remaining)
            .finish_non_exhaustive()
    }
}

/// The descriptor to splice `file` from: regular files that have one.
pub(crate) fn spliceable(file: &dyn FileHandle) -> Option<RawFd> {
    file.raw_fd().filter(|_| file.is_regular())
}

impl Job {
    /// `len` bytes of `file` (whose descriptor is `fd`) from `offset`.
    pub(crate) fn new(
        file: Arc<dyn FileHandle>,
        fd: RawFd,
        offset: u64,
        len: u64,
        done: Done,
    ) -> Job {
        Job {
            _file: file,
            fd,
            offset,
            remaining: len,
            sent: 0,
            done: Some(done),
        }
    }

    fn finish(&mut self, failure: Option<String>) {
        if let Some(done) = self.done.take() {
            done(self.sent, failure);
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        self.finish(Some("the connection ended before the file was sent".into()));
    }
}

/// A connection's queue of file jobs, shared by its bodies and its [`ClearIo`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Splicer {
    jobs: Arc<Mutex<VecDeque<Job>>>,
}

impl Splicer {
    /// Queues `job`; its bytes go out where the body's stand-ins are written.
    pub(crate) fn push(&self, job: Job) {
        self.lock().push_back(job);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Job>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A clear TCP connection that turns stand-in bytes into `sendfile`.
#[derive(Debug)]
pub(crate) struct ClearIo {
    stream: TcpStream,
    splicer: Splicer,
}

impl ClearIo {
    pub(crate) fn new(stream: TcpStream, splicer: Splicer) -> ClearIo {
        ClearIo { stream, splicer }
    }

    /// The socket itself.
    pub(crate) fn tcp_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Sends up to `want` bytes of the front job.
    fn poll_splice(&mut self, cx: &mut Context<'_>, want: usize) -> Poll<io::Result<usize>> {
        let mut jobs = self.splicer.lock();
        let Some(job) = jobs.front_mut() else {
            return Poll::Ready(Err(io::Error::other(
                "a file body's bytes arrived with no file queued",
            )));
        };
        let want = (want as u64).min(job.remaining) as usize;
        let sock = self.stream.as_raw_fd();
        loop {
            if let Err(e) = ready!(self.stream.poll_write_ready(cx)) {
                return Poll::Ready(Err(e));
            }
            let mut off = job.offset as libc::off_t;
            let r = self.stream.try_io(Interest::WRITABLE, || {
                // SAFETY: both descriptors stay open for the call (`self.stream`, and the job
                // holds its file); `off` is a local the kernel advances.
                let n = unsafe { libc::sendfile(sock, job.fd, &mut off, want) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match r {
                Ok(0) => {
                    let mut job = jobs.pop_front().expect("front job");
                    job.finish(Some("the file shrank while it was sent".into()));
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the file shrank while it was sent",
                    )));
                }
                Ok(n) => {
                    job.offset += n as u64;
                    job.sent += n as u64;
                    job.remaining -= n as u64;
                    if job.remaining == 0 {
                        jobs.pop_front().expect("front job").finish(None);
                    }
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => {
                    jobs.pop_front()
                        .expect("front job")
                        .finish(Some(e.to_string()));
                    return Poll::Ready(Err(e));
                }
            }
        }
    }
}

impl AsyncRead for ClearIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for ClearIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if is_stand_in(buf) {
            return this.poll_splice(cx, buf.len());
        }
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let bufs = match bufs.iter().position(|b| !b.is_empty()) {
            Some(i) => &bufs[i..],
            None => return Poll::Ready(Ok(0)),
        };
        if is_stand_in(&bufs[0]) {
            return this.poll_splice(cx, bufs[0].len());
        }
        // The real bytes up to the first stand-in.
        let real = bufs
            .iter()
            .position(|b| is_stand_in(b))
            .unwrap_or(bufs.len());
        Pin::new(&mut this.stream).poll_write_vectored(cx, &bufs[..real])
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_slices_of_the_stand_in_are_stand_ins() {
        assert!(is_stand_in(&STAND_IN[..]));
        assert!(is_stand_in(&STAND_IN[STAND_IN.len() - 1..]));
        assert!(!is_stand_in(&STAND_IN[..0]));
        let zeros = vec![0u8; 16];
        assert!(!is_stand_in(&zeros));
    }
}
