//! One control connection: the sans-IO protocol interpreter (`pi/`: lines in; replies and
//! requests out) and the async driver (`driver.rs`) that runs it on the socket and carries out
//! its requests on storage and the data mover. The PI never touches a socket, the clock or
//! file data.

mod driver;
pub(crate) mod pi;
mod text;

use std::borrow::Cow;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

use ferry_proto::command::MAX_COMMAND_LINE;
use ferry_proto::line::{LineEvent, LineFramer};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use crate::daemon::ServerContext;

/// Commands a client may send ahead of a running transfer before we stop reading.
const MAX_PENDING: usize = 1024;

/// The control connection's reading side: bytes → lines, plus lines queued during transfers.
pub(crate) struct ControlReader {
    rd: OwnedReadHalf,
    framer: LineFramer,
    pending: VecDeque<LineEvent>,
    eof: bool,
    /// Set once GSI is established: lines off the wire are unwrapped into `plain`.
    security: Option<crate::gsi::Shared>,
    plain: LineFramer,
}

impl std::fmt::Debug for ControlReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlReader")
            .field("pending", &self.pending.len())
            .field("eof", &self.eof)
            .field("protected", &self.security.is_some())
            .finish_non_exhaustive()
    }
}

/// The control connection's writing side: replies go out as they are, or wrapped line by
/// line once GSI protects the session. Replies to commands a client pipelined may be held
/// (see [`ControlWriter::hold`]) and leave together in one write.
pub(crate) struct ControlWriter {
    wr: OwnedWriteHalf,
    security: Option<crate::gsi::Shared>,
    /// Reply bytes (wrapped where protected) not written yet.
    held: Vec<u8>,
}

impl std::fmt::Debug for ControlWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlWriter")
            .field("protected", &self.security.is_some())
            .field("held", &self.held.len())
            .finish_non_exhaustive()
    }
}

impl ControlWriter {
    /// Writes reply bytes now, after any held ones.
    pub(crate) async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.hold(bytes)?;
        self.flush().await
    }

    /// Keeps reply bytes (wrapped at once, so a later change of protection cannot touch them)
    /// for the next [`ControlWriter::flush`]: the driver holds replies while more commands are
    /// already buffered, so a pipeline's replies cost the client one wake-up, not one each.
    pub(crate) fn hold(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match &self.security {
            None => self.held.extend_from_slice(bytes),
            Some(s) => {
                let wrapped = crate::gsi::wrap_reply(s, bytes)?;
                self.held.extend_from_slice(&wrapped);
            }
        }
        Ok(())
    }

    /// Whether replies are held.
    pub(crate) fn holds(&self) -> bool {
        !self.held.is_empty()
    }

    /// Writes the held replies.
    pub(crate) async fn flush(&mut self) -> std::io::Result<()> {
        if self.held.is_empty() {
            return Ok(());
        }
        let r = self.wr.write_all(&self.held).await;
        self.held.clear();
        r
    }
}

impl ControlReader {
    /// Reads more bytes into the framer; false at end of stream. Cancel-safe.
    ///
    /// Reads with `readable` + `try_read` rather than `AsyncRead`: tokio's `read` takes a short
    /// read as proof the socket is drained and waits for the next edge, but Linux also stops a
    /// read at the urgent mark. A client that sends Telnet Synch as urgent data before `ABOR`
    /// (as the Globus control library does) would leave `ABOR` unread until it sent more,
    /// which it never does while it waits for the abort's reply. `try_read` only forgets
    /// readiness on `WouldBlock`.
    pub(crate) async fn fill(&mut self) -> std::io::Result<bool> {
        let mut buf = [0u8; 2048];
        let n = loop {
            self.rd.readable().await?;
            match self.rd.try_read(&mut buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            self.eof = true;
            return Ok(false);
        }
        self.framer.feed(&buf[..n]);
        Ok(true)
    }

    /// The next complete line event already buffered, if any.
    pub(crate) fn next_buffered(&mut self) -> Option<LineEvent> {
        self.pending.pop_front().or_else(|| self.next_from_wire())
    }

    /// The next line read off the wire (not from the queue), unwrapped when protected.
    pub(crate) fn next_from_wire(&mut self) -> Option<LineEvent> {
        match &self.security {
            None => self.framer.next_event(),
            Some(s) => {
                let framer = &mut self.framer;
                crate::gsi::next_plain(s, &mut || framer.next_event(), &mut self.plain)
            }
        }
    }
}

/// Runs one control connection to its end.
pub(crate) async fn run(stream: TcpStream, peer: SocketAddr, ctx: Arc<ServerContext>) {
    let local = match stream.local_addr() {
        Ok(a) => a,
        Err(_) => return,
    };
    let (rd, wr) = stream.into_split();
    let reader = ControlReader {
        rd,
        framer: LineFramer::new(MAX_COMMAND_LINE),
        pending: VecDeque::new(),
        eof: false,
        security: None,
        plain: LineFramer::new(MAX_COMMAND_LINE),
    };
    let writer = ControlWriter {
        wr,
        security: None,
        held: Vec::new(),
    };
    let mut pi = pi::Pi::new(Arc::clone(&ctx), peer, local);
    let started = std::time::Instant::now();
    tracing::info!(peer = %peer, "session opened");
    let mut driver = driver::Driver::new(ctx, reader, writer);
    driver.run(&mut pi).await;
    tracing::info!(
        peer = %peer,
        user = pi.user_name(),
        secs = started.elapsed().as_secs_f64(),
        transfers = driver.transfers,
        bytes = driver.bytes,
        "session closed"
    );
}

/// Removes Telnet commands (RFC 854) from a control line. RFC 959 has clients send Telnet IP
/// and Synch before ABOR, and the Globus control library does: `IAC IP` in band, then
/// `IAC DM` as urgent data, so the DM byte is taken out of band and its IAC arrives alone in
/// front of `ABOR`. `IAC IAC` stays a literal 0xFF; `IAC WILL|WONT|DO|DONT <option>` and
/// `IAC <command>` are dropped, and so is an IAC followed by anything else.
pub(crate) fn strip_telnet(line: &[u8]) -> Cow<'_, [u8]> {
    const IAC: u8 = 0xff;
    if !line.contains(&IAC) {
        return Cow::Borrowed(line);
    }
    let mut out = Vec::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        if line[i] != IAC {
            out.push(line[i]);
            i += 1;
            continue;
        }
        i += match line.get(i + 1) {
            Some(&IAC) => {
                out.push(IAC);
                2
            }
            // WILL, WONT, DO, DONT carry an option byte.
            Some(251..=254) => 3,
            Some(240..=250) => 2,
            _ => 1,
        };
    }
    Cow::Owned(out)
}

/// Queues a line read while a transfer runs; false if the queue is full.
pub(crate) fn queue_line(reader: &mut ControlReader, ev: LineEvent) -> bool {
    if reader.pending.len() >= MAX_PENDING {
        return false;
    }
    reader.pending.push_back(ev);
    true
}

#[cfg(test)]
mod tests {
    use super::strip_telnet;

    #[test]
    fn telnet_commands_are_removed_from_control_lines() {
        // What the Globus client sends for ABOR once the Synch's DM byte went out of band.
        assert_eq!(&*strip_telnet(b"\xff\xf4\xffABOR"), b"ABOR");
        assert_eq!(&*strip_telnet(b"\xff\xf4\xff\xf2ABOR"), b"ABOR");
        assert_eq!(&*strip_telnet(b"\xff\xfb\x01NOOP"), b"NOOP");
        assert_eq!(&*strip_telnet(b"RETR a\xff\xffb"), b"RETR a\xffb");
        assert_eq!(&*strip_telnet(b"NOOP\xff"), b"NOOP");
        assert!(matches!(
            strip_telnet(b"NOOP"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
