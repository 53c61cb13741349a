//! One control connection: the protocol interpreter (PI). It parses commands, keeps session
//! state and turns transfer commands into transfer descriptions for its DTP. It never touches
//! file data.

mod dispatch;
mod fileops;
mod stacks;
mod text;
mod transfer;

use std::borrow::Cow;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferry_dtp::{ChannelSetup, DataMover};
use ferry_net::SocketTuning;
use ferry_proto::command::{
    Dcau, Protection, Restart, TransferMode, TransferType, MAX_COMMAND_LINE,
};
use ferry_proto::line::{LineEvent, LineFramer};
use ferry_proto::stack::StackSpec;
use ferry_proto::Reply;
use ferry_storage::{Storage, VirtualPath};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use crate::daemon::ServerContext;

/// Consecutive unparseable lines after which a connection is dropped.
const MAX_BAD_LINES: u32 = 32;
/// Commands a client may send ahead of a running transfer before we stop reading.
const MAX_PENDING: usize = 1024;

/// A logged-in user.
#[derive(Debug)]
pub(crate) struct Login {
    pub(crate) name: String,
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) read_only: bool,
    /// What moves the session's data: its own DTP, or (striped frontend) DTPs on the data
    /// nodes. The PI builds the same transfer description for both and asks nothing else.
    pub(crate) dtp: Box<dyn DataMover>,
}

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
/// line once GSI protects the session.
pub(crate) struct ControlWriter {
    wr: OwnedWriteHalf,
    security: Option<crate::gsi::Shared>,
}

impl std::fmt::Debug for ControlWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlWriter")
            .field("protected", &self.security.is_some())
            .finish_non_exhaustive()
    }
}

impl ControlWriter {
    /// Writes reply bytes, wrapped when the session is protected.
    pub(crate) async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match &self.security {
            None => self.wr.write_all(bytes).await,
            Some(s) => {
                let wrapped = crate::gsi::wrap_reply(s, bytes)?;
                self.wr.write_all(&wrapped).await
            }
        }
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

/// Session state. Settings apply to the next transfer whenever they are sent (RFC 959).
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) ctx: Arc<ServerContext>,
    pub(crate) peer: SocketAddr,
    pub(crate) local: SocketAddr,
    pub(crate) wr: ControlWriter,
    pub(crate) user: Option<String>,
    pub(crate) login: Option<Login>,
    pub(crate) cwd: VirtualPath,
    pub(crate) transfer_type: TransferType,
    pub(crate) mode: TransferMode,
    pub(crate) parallelism: u32,
    pub(crate) tuning: SocketTuning,
    /// MODE E block size the client asked for (`SITE BLOCKSIZE`); `None`: the configured one.
    pub(crate) block_size: Option<u32>,
    pub(crate) restart: Option<Restart>,
    pub(crate) rename_from: Option<VirtualPath>,
    pub(crate) symlink_from: Option<String>,
    pub(crate) channel: Option<ChannelSetup>,
    pub(crate) restart_interval_s: u32,
    pub(crate) perf_interval_s: u32,
    pub(crate) retr_markers_s: Option<u32>,
    /// Stripe layout for sends to several receiving stripes (`OPTS RETR StripeLayout=`).
    pub(crate) layout: ferry_dtp::LayoutSpec,
    pub(crate) dcau: Dcau,
    pub(crate) prot: Protection,
    pub(crate) allo: Option<u64>,
    /// `SITE SETNETSTACK`: the data channel's drivers.
    pub(crate) net_stack: StackSpec,
    /// `SITE SETDISKSTACK`: the drivers between the DTP and storage.
    pub(crate) disk_stack: StackSpec,
    pub(crate) mlst_facts: Vec<String>,
    pub(crate) quit: bool,
    /// `EPSV ALL` was sent: other data-connection setup commands are refused (RFC 2428).
    pub(crate) epsv_all: bool,
    /// AUTH GSSAPI accepted and ADAT tokens under way.
    pub(crate) gss: Option<Box<ferry_gsi::SecurityContext>>,
    /// The verified GSI identity once the security exchange is done.
    pub(crate) gsi_identity: Option<String>,
    /// The credential the client delegated, for third-party data channels.
    pub(crate) delegated: Option<ferry_gsi::Credential>,
    /// The local account the grid-mapfile gave at USER, waiting for PASS.
    pub(crate) gsi_user: Option<String>,
}

/// Runs one control connection to its end.
pub(crate) async fn run(stream: TcpStream, peer: SocketAddr, ctx: Arc<ServerContext>) {
    let local = match stream.local_addr() {
        Ok(a) => a,
        Err(_) => return,
    };
    let (rd, wr) = stream.into_split();
    let mut reader = ControlReader {
        rd,
        framer: LineFramer::new(MAX_COMMAND_LINE),
        pending: VecDeque::new(),
        eof: false,
        security: None,
        plain: LineFramer::new(MAX_COMMAND_LINE),
    };
    let mut s = Session {
        ctx,
        peer,
        local,
        wr: ControlWriter { wr, security: None },
        user: None,
        login: None,
        cwd: VirtualPath::root(),
        transfer_type: TransferType::Ascii,
        mode: TransferMode::Stream,
        parallelism: 1,
        tuning: SocketTuning::default(),
        block_size: None,
        restart: None,
        rename_from: None,
        symlink_from: None,
        channel: None,
        restart_interval_s: 5,
        perf_interval_s: 5,
        retr_markers_s: None,
        layout: ferry_dtp::LayoutSpec::default(),
        dcau: Dcau::None,
        prot: Protection::Clear,
        allo: None,
        net_stack: StackSpec::default_net(),
        disk_stack: StackSpec::default_disk(),
        mlst_facts: Vec::new(),
        quit: false,
        epsv_all: false,
        gss: None,
        gsi_identity: None,
        delegated: None,
        gsi_user: None,
    };
    let banner = match &s.ctx.config.banner {
        Some(b) => b.clone(),
        None => format!("ferry GridFTP Server {} ready.", crate::VERSION),
    };
    if s.send(&Reply::new(220, banner)).await.is_err() {
        return;
    }
    // The login timeout counts from the connection, not from the last byte: a client that
    // trickles bytes (or NOOPs) without logging in must not hold its connection forever.
    let login_deadline = tokio::time::Instant::now()
        + Duration::from_secs(s.ctx.config.control_preauth_timeout.max(1));
    let mut bad_lines = 0u32;
    while !s.quit {
        let event = match reader.next_buffered() {
            Some(ev) => ev,
            None => {
                reader.framer.shrink();
                let (deadline, why) = if s.login.is_some() {
                    let idle = Duration::from_secs(s.ctx.config.control_idle_timeout.max(1));
                    (tokio::time::Instant::now() + idle, "Idle timeout")
                } else {
                    (login_deadline, "Login timeout")
                };
                match tokio::time::timeout_at(deadline, reader.fill()).await {
                    Ok(Ok(true)) => continue,
                    Ok(Ok(false)) | Ok(Err(_)) => break,
                    Err(_) => {
                        let text = format!("{why}; closing control connection.");
                        let _ = s.send(&Reply::new(421, text)).await;
                        break;
                    }
                }
            }
        };
        let ok = match event {
            LineEvent::TooLong => {
                bad_lines += 1;
                s.send(&Reply::new(500, "Command line too long.")).await
            }
            LineEvent::Line(line) => {
                let (result, good) = s.handle_line(&strip_telnet(&line), &mut reader).await;
                bad_lines = if good { 0 } else { bad_lines + 1 };
                result
            }
        };
        if ok.is_err() || bad_lines >= MAX_BAD_LINES {
            if bad_lines >= MAX_BAD_LINES {
                let _ = s
                    .send(&Reply::new(
                        421,
                        "Too many bad commands; closing control connection.",
                    ))
                    .await;
            }
            break;
        }
        if reader.eof && reader.pending.is_empty() && reader.framer.buffered() == 0 {
            break;
        }
    }
    let _ = s.wr.wr.shutdown().await;
}

impl Session {
    /// Writes one reply.
    pub(crate) async fn send(&mut self, reply: &Reply) -> std::io::Result<()> {
        self.wr.write_all(&reply.to_bytes()).await
    }

    /// Writes a single-line reply.
    pub(crate) async fn reply(
        &mut self,
        code: u16,
        text: impl Into<String>,
    ) -> std::io::Result<()> {
        self.send(&Reply::new(code, text)).await
    }

    /// Protects the session from the next line on: commands are unwrapped, replies wrapped.
    pub(crate) fn protect(&mut self, reader: &mut ControlReader, ctx: ferry_gsi::SecurityContext) {
        let shared = std::sync::Arc::new(std::sync::Mutex::new(ctx));
        reader.security = Some(std::sync::Arc::clone(&shared));
        self.wr.security = Some(shared);
    }

    /// Resolves a client path against the working directory.
    pub(crate) fn resolve(&self, path: &str) -> Result<VirtualPath, ferry_storage::StorageError> {
        VirtualPath::resolve(&self.cwd, path)
    }

    /// The user name for logs.
    pub(crate) fn user_name(&self) -> &str {
        self.login.as_ref().map(|l| l.name.as_str()).unwrap_or("-")
    }
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
