//! The GSI layer of a data connection (DCAU A/S, PROT C/S/P): the handshake on the socket and,
//! under PROT S/P, the protected byte stream. The protocol is `ferry_gsi`'s sans-IO context;
//! this module only moves its bytes.
//!
//! Each data connection has its own context and is read and written by the task that runs
//! the stream, so parallel streams encrypt on as many cores as the runtime has.

use std::io;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use ferry_gsi::{DataSecurity, GsiError, PeerCheck, RecordLayer, SecurityContext, Step};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadBuf};

use crate::link::Link;
use crate::NetError;

/// Largest TLS record on the wire (TLS 1.2 allows 2^14 + 2048 of ciphertext).
const MAX_RECORD: usize = 5 + (1 << 14) + 2048;

/// Plaintext sealed per write call, and ciphertext read per socket read.
const CHUNK: usize = 256 * 1024;

/// How the data connections of a transfer are protected.
#[derive(Debug, Clone)]
pub struct DataProtection {
    /// The session's credential and trusted CAs.
    pub security: Arc<DataSecurity>,
    /// Who must be on the other end (DCAU A or S).
    pub check: PeerCheck,
    /// PROT S or P: every byte in TLS records. `false` (PROT C): authenticate, then clear.
    pub protected: bool,
}

/// Who seals and opens the records of a protected connection.
enum Engine {
    /// OpenSSL, through the context's memory buffers (TLS 1.2, suites `ring` lacks).
    OpenSsl(Box<SecurityContext>),
    /// Our TLS 1.3 record layer on `ring` (about twice OpenSSL 3.0's AES-GCM rate here).
    Records(Box<RecordLayer>),
}

impl Engine {
    fn seal(&mut self, plain: &[u8]) -> Result<(), GsiError> {
        match self {
            Engine::OpenSsl(c) => c.seal(plain),
            Engine::Records(r) => r.seal(plain),
        }
    }
    fn unsent(&self) -> &[u8] {
        match self {
            Engine::OpenSsl(c) => c.unsent(),
            Engine::Records(r) => r.unsent(),
        }
    }
    fn mark_sent(&mut self, n: usize) {
        match self {
            Engine::OpenSsl(c) => c.mark_sent(n),
            Engine::Records(r) => r.mark_sent(n),
        }
    }
    fn receive_with(
        &mut self,
        max: usize,
        fill: impl FnOnce(&mut [u8]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        match self {
            Engine::OpenSsl(c) => c.receive_with(max, fill),
            Engine::Records(r) => r.receive_with(max, fill),
        }
    }
    fn open(&mut self, out: &mut [u8]) -> Result<Option<usize>, GsiError> {
        match self {
            Engine::OpenSsl(c) => c.open(out),
            Engine::Records(r) => r.open(out),
        }
    }
    fn close(&mut self) -> Result<(), GsiError> {
        match self {
            Engine::OpenSsl(c) => c.close(),
            Engine::Records(r) => r.close(),
        }
    }
}

/// Whether protected TLS 1.3 connections use `ring` records (`FERRY_TLS_RECORDS=openssl`
/// keeps OpenSSL's, for comparison and as a fallback).
fn own_records() -> bool {
    std::env::var("FERRY_TLS_RECORDS").map_or(true, |v| v != "openssl")
}

/// A protected connection's state beside its socket.
pub(crate) struct TlsState {
    ctx: Engine,
    /// Plaintext bytes sealed by a write that has not returned yet (its records still going
    /// out): the count that write reports once they are all in the kernel.
    pending_plain: usize,
    /// Our close_notify is queued.
    closing: bool,
}

impl std::fmt::Debug for TlsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsState")
            .field("pending_plain", &self.pending_plain)
            .finish_non_exhaustive()
    }
}

/// Runs the GSI handshake on `stream` (`initiator`: we connected) and checks the peer.
/// Returns the context to keep when the connection is protected (PROT S/P), `None` when the
/// data that follows is clear (PROT C).
pub(crate) async fn handshake(
    stream: &mut Link,
    initiator: bool,
    prot: &DataProtection,
) -> Result<Option<TlsState>, NetError> {
    let fail = |e: GsiError| NetError::Security(e.to_string());
    let (mut ctx, first) = prot
        .security
        .context(initiator, &prot.check, prot.protected)
        .map_err(fail)?;
    if let Some(first) = first {
        stream.write_all(&first).await?;
    }
    let mut record = Vec::with_capacity(MAX_RECORD);
    let mut authorized = false;
    loop {
        // One record at a time: under PROT C the bytes after the handshake are clear data
        // and must stay in the socket.
        read_record(stream, &mut record).await?;
        let step = ctx.step(&record);
        // Who the peer is, as soon as its chain is verified (before the GSI tail): a stranger
        // is refused by name whatever else it gets wrong.
        if !authorized {
            if let Some(peer) = ctx.peer() {
                prot.security.authorize(&prot.check, peer).map_err(fail)?;
                authorized = true;
            }
        }
        match step.map_err(fail)? {
            Step::Continue(out) => stream.write_all(&out).await?,
            Step::NeedMore => {}
            Step::Done(out) => {
                if let Some(out) = out {
                    stream.write_all(&out).await?;
                }
                break;
            }
        }
    }
    if !authorized {
        let peer = ctx
            .peer()
            .ok_or_else(|| NetError::Security("the peer presented no credential".into()))?;
        prot.security.authorize(&prot.check, peer).map_err(fail)?;
    }
    if !prot.protected {
        if !ctx.take_unconsumed().is_empty() {
            return Err(NetError::Security(
                "bytes after the handshake inside a TLS record".into(),
            ));
        }
        return Ok(None);
    }
    let engine = match ctx.traffic_secrets().filter(|_| own_records()) {
        Some(secrets) => {
            let mut records = RecordLayer::new(&secrets).map_err(fail)?;
            let rest = ctx.take_unconsumed();
            if !rest.is_empty() {
                records
                    .receive_with(rest.len(), |b| {
                        b[..rest.len()].copy_from_slice(&rest);
                        Ok::<usize, ()>(rest.len())
                    })
                    .map_err(|_| NetError::Security("buffering early records".into()))?;
            }
            Engine::Records(Box::new(records))
        }
        None => Engine::OpenSsl(Box::new(ctx)),
    };
    Ok(Some(TlsState {
        ctx: engine,
        pending_plain: 0,
        closing: false,
    }))
}

async fn read_record(stream: &mut Link, record: &mut Vec<u8>) -> Result<(), NetError> {
    record.resize(5, 0);
    stream.read_exact(&mut record[..5]).await.map_err(eof)?;
    if !(20..=24).contains(&record[0]) || record[1] != 3 {
        return Err(NetError::Security(format!(
            "not a TLS record (first bytes {:02x} {:02x}): is the peer using DCAU N?",
            record[0], record[1]
        )));
    }
    let len = usize::from(u16::from_be_bytes([record[3], record[4]]));
    if 5 + len > MAX_RECORD {
        return Err(NetError::Security(format!("TLS record of {len} bytes")));
    }
    record.resize(5 + len, 0);
    stream.read_exact(&mut record[5..]).await.map_err(eof)?;
    Ok(())
}

fn eof(e: io::Error) -> NetError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        NetError::Security("the peer closed the data connection during the handshake".into())
    } else {
        NetError::Io(e)
    }
}

fn other(e: GsiError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

impl TlsState {
    /// Sends queued ciphertext until none is left.
    fn poll_send(&mut self, link: &mut Link, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.ctx.unsent().is_empty() {
            match ready!(link.poll_write_some(cx, self.ctx.unsent()))? {
                0 => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                n => self.ctx.mark_sent(n),
            }
        }
        Poll::Ready(Ok(()))
    }

    pub(crate) fn poll_read(
        &mut self,
        link: &mut Link,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if let Some(n) = self.ctx.open(buf.initialize_unfilled()).map_err(other)? {
                buf.advance(n);
                return Poll::Ready(Ok(()));
            }
            let fill = |b: &mut [u8]| match link.poll_read_into(cx, b) {
                Poll::Ready(r) => r,
                // The link registered the wake-up; nothing was read.
                Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
            };
            match self.ctx.receive_with(CHUNK, fill) {
                // The peer closed TCP without a close_notify: Globus peers may do so, and a
                // stream-mode transfer then ends here (MODE E counts its bytes itself).
                Ok(0) => return Poll::Ready(Ok(())),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    pub(crate) fn poll_write_vectored(
        &mut self,
        link: &mut Link,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.pending_plain == 0 {
            let mut total = 0;
            for b in bufs.iter().filter(|b| !b.is_empty()) {
                let n = b.len().min(CHUNK - total);
                self.ctx.seal(&b[..n]).map_err(other)?;
                total += n;
                if total == CHUNK {
                    break;
                }
            }
            if total == 0 {
                return Poll::Ready(Ok(0));
            }
            self.pending_plain = total;
        }
        ready!(self.poll_send(link, cx))?;
        Poll::Ready(Ok(std::mem::take(&mut self.pending_plain)))
    }

    pub(crate) fn poll_flush(
        &mut self,
        link: &mut Link,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        self.poll_send(link, cx)
    }

    /// Queues our close_notify and sends it; the caller then shuts the socket down.
    pub(crate) fn poll_close(
        &mut self,
        link: &mut Link,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.closing {
            self.ctx.close().map_err(other)?;
            self.closing = true;
        }
        self.poll_send(link, cx)
    }
}
