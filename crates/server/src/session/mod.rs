//! One control connection: the protocol interpreter (PI). It parses commands, keeps session
//! state and turns transfer commands into transfer descriptions for its DTP. It never touches
//! file data.

mod dispatch;
mod fileops;
mod text;
mod transfer;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferry_dtp::{ChannelSetup, Dtp};
use ferry_net::{SocketTuning, StackSpec};
use ferry_proto::command::{
    Dcau, Protection, Restart, TransferMode, TransferType, MAX_COMMAND_LINE,
};
use ferry_proto::line::{LineEvent, LineFramer};
use ferry_proto::Reply;
use ferry_storage::{Storage, VirtualPath};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
    pub(crate) dtp: Dtp,
}

/// The control connection's reading side: bytes → lines, plus lines queued during transfers.
#[derive(Debug)]
pub(crate) struct ControlReader {
    rd: OwnedReadHalf,
    framer: LineFramer,
    pending: VecDeque<LineEvent>,
    eof: bool,
}

impl ControlReader {
    /// Reads more bytes into the framer; false at end of stream.
    pub(crate) async fn fill(&mut self) -> std::io::Result<bool> {
        let mut buf = [0u8; 2048];
        let n = self.rd.read(&mut buf).await?;
        if n == 0 {
            self.eof = true;
            return Ok(false);
        }
        self.framer.feed(&buf[..n]);
        Ok(true)
    }

    /// The next complete line event already buffered, if any.
    pub(crate) fn next_buffered(&mut self) -> Option<LineEvent> {
        self.pending
            .pop_front()
            .or_else(|| self.framer.next_event())
    }
}

/// Session state. Settings apply to the next transfer whenever they are sent (RFC 959).
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) ctx: Arc<ServerContext>,
    pub(crate) peer: SocketAddr,
    pub(crate) local: SocketAddr,
    pub(crate) wr: OwnedWriteHalf,
    pub(crate) user: Option<String>,
    pub(crate) login: Option<Login>,
    pub(crate) cwd: VirtualPath,
    pub(crate) transfer_type: TransferType,
    pub(crate) mode: TransferMode,
    pub(crate) parallelism: u32,
    pub(crate) tuning: SocketTuning,
    pub(crate) restart: Option<Restart>,
    pub(crate) rename_from: Option<VirtualPath>,
    pub(crate) symlink_from: Option<String>,
    pub(crate) channel: Option<ChannelSetup>,
    pub(crate) restart_interval_s: u32,
    pub(crate) perf_interval_s: u32,
    pub(crate) retr_markers_s: Option<u32>,
    pub(crate) dcau: Dcau,
    pub(crate) prot: Protection,
    pub(crate) allo: Option<u64>,
    pub(crate) net_stack: StackSpec,
    pub(crate) mlst_facts: Vec<String>,
    pub(crate) quit: bool,
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
    };
    let mut s = Session {
        ctx,
        peer,
        local,
        wr,
        user: None,
        login: None,
        cwd: VirtualPath::root(),
        transfer_type: TransferType::Ascii,
        mode: TransferMode::Stream,
        parallelism: 1,
        tuning: SocketTuning::default(),
        restart: None,
        rename_from: None,
        symlink_from: None,
        channel: None,
        restart_interval_s: 5,
        perf_interval_s: 5,
        retr_markers_s: None,
        dcau: Dcau::None,
        prot: Protection::Clear,
        allo: None,
        net_stack: StackSpec::default(),
        mlst_facts: Vec::new(),
        quit: false,
    };
    let banner = match &s.ctx.config.banner {
        Some(b) => b.clone(),
        None => format!("ferry GridFTP Server {} ready.", crate::VERSION),
    };
    if s.send(&Reply::new(220, banner)).await.is_err() {
        return;
    }
    let mut bad_lines = 0u32;
    while !s.quit {
        let event = match reader.next_buffered() {
            Some(ev) => ev,
            None => {
                reader.framer.shrink();
                let timeout = if s.login.is_some() {
                    s.ctx.config.control_idle_timeout
                } else {
                    s.ctx.config.control_preauth_timeout
                };
                match tokio::time::timeout(Duration::from_secs(timeout.max(1)), reader.fill()).await
                {
                    Ok(Ok(true)) => continue,
                    Ok(Ok(false)) | Ok(Err(_)) => break,
                    Err(_) => {
                        let _ = s
                            .send(&Reply::new(
                                421,
                                "Idle timeout; closing control connection.",
                            ))
                            .await;
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
                let (result, good) = s.handle_line(&line, &mut reader).await;
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
    let _ = s.wr.shutdown().await;
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

    /// Resolves a client path against the working directory.
    pub(crate) fn resolve(&self, path: &str) -> Result<VirtualPath, ferry_storage::StorageError> {
        VirtualPath::resolve(&self.cwd, path)
    }

    /// The user name for logs.
    pub(crate) fn user_name(&self) -> &str {
        self.login.as_ref().map(|l| l.name.as_str()).unwrap_or("-")
    }
}

/// Queues a line read while a transfer runs; false if the queue is full.
pub(crate) fn queue_line(reader: &mut ControlReader, ev: LineEvent) -> bool {
    if reader.pending.len() >= MAX_PENDING {
        return false;
    }
    reader.pending.push_back(ev);
    true
}
