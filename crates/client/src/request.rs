//! What one file transfer asks for, and the description the client's DTP runs for it.

use std::path::Path;
use std::time::Duration;

use ferry_dtp::{
    ChannelSecurity, ChannelSetup, Direction, MarkerIntervals, Section, StripeInfo,
    TransferDescription, TransferSource,
};
use ferry_net::SocketTuning;
use ferry_proto::command::{Eret, Esto, Restart, TransferMode};
use ferry_proto::stack::StackSpec;
use ferry_proto::Command;
use ferry_proto::RangeSet;
use ferry_storage::VirtualPath;

use crate::ClientError;

/// How to move one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRequest {
    /// Parallel data connections (MODE E); 0 chooses by file size and round-trip time.
    pub parallelism: u32,
    /// With `parallelism == 0`: the streams of files of 16 MiB and more, as a tuner chose
    /// them for the path (smaller files keep one); `None`: by round-trip time.
    pub large_file_streams: Option<u32>,
    /// MODE E block size in bytes when this side sends (`None`: by stream count, see
    /// `ferry_dtp::auto_block_size`).
    pub block_size: Option<u32>,
    /// TCP buffer size for data connections (`None`: the kernel's autotuning).
    pub tcp_buffer: Option<u32>,
    /// TCP congestion control of the sending side's data connections: the client's own when it
    /// sends, asked of a ferry server that sends (`SITE SETNETSTACK tcp:congestion=NAME`,
    /// where its FEAT offers it). `None`: each side's default.
    pub congestion: Option<ferry_net::Congestion>,
    /// The data channel's transport as a net-stack entry (`quic`, `quic:congestion=cubic`),
    /// asked of both servers with `SITE SETNETSTACK`; `None`: TCP, the servers' default.
    /// `auto` ([`crate::choose::AUTO`]): QUIC or TCP by the path, decided per file by
    /// [`crate::FileCopy::run`] (elsewhere, TCP).
    pub transport: Option<String>,
    /// The destination server's disk stack (`SITE SETDISKSTACK`), e.g. the
    /// `file,gridftp_multicast:…` that makes it forward to further servers; `None`: its default.
    pub disk_stack: Option<String>,
    /// First byte to transfer (partial transfer; the destination is written at the same offset).
    pub offset: u64,
    /// Bytes to transfer from `offset` (`None`: to the end).
    pub length: Option<u64>,
    /// Ranges (relative to `offset`) the destination already holds: a restart.
    pub restart: RangeSet,
    /// Abort when no data moves for this long.
    pub idle_timeout_s: u64,
    /// Third party and puts: stripe over every address the destination offers (`SPAS`) with this
    /// layout; `None` uses one address (`PASV`/`PORT`).
    pub stripe: Option<ferry_dtp::LayoutSpec>,
    /// Fail, rather than copy with one stream in stream mode, when `parallelism > 1` was asked
    /// of a server that does not offer MODE E (`--require-parallel`).
    pub require_parallel: bool,
    /// Checksums the client's own end takes while the bytes move (a whole file), for
    /// verification without reading the local file again.
    pub checksums: Vec<ferry_storage::ChecksumAlgorithm>,
}

impl FileRequest {
    /// The transport asked for, `None` for TCP; `auto` not decided by now is TCP.
    pub fn explicit_transport(&self) -> Option<&str> {
        self.transport
            .as_deref()
            .filter(|t| *t != crate::choose::AUTO)
    }
}

impl Default for FileRequest {
    fn default() -> Self {
        FileRequest {
            parallelism: 4,
            large_file_streams: None,
            block_size: None,
            tcp_buffer: None,
            congestion: None,
            transport: None,
            disk_stack: None,
            offset: 0,
            length: None,
            restart: RangeSet::new(),
            idle_timeout_s: 600,
            stripe: None,
            require_parallel: false,
            checksums: Vec::new(),
        }
    }
}

impl FileRequest {
    /// Whether this is a partial transfer (ERET/ESTO rather than RETR/STOR).
    pub fn is_partial(&self) -> bool {
        self.offset > 0 || self.length.is_some()
    }

    /// The socket tuning for the client's own data connections when it receives: buffers
    /// only. The congestion control is the sender's; setting it here would only risk a kernel
    /// that does not let this user choose it.
    pub(crate) fn tuning(&self) -> SocketTuning {
        SocketTuning {
            send_buffer: self.tcp_buffer,
            recv_buffer: self.tcp_buffer,
            congestion: None,
        }
    }

    /// The tuning of the client's own data connections in `direction`: with the congestion
    /// control when it sends.
    pub(crate) fn tuning_for(&self, direction: Direction) -> SocketTuning {
        SocketTuning {
            congestion: match direction {
                Direction::Send => self.congestion,
                Direction::Receive => None,
            },
            ..self.tuning()
        }
    }

    /// The server command that sends the file: `RETR`, or `ERET P` for a section. A section
    /// to the end of a file needs the file's size: `ERET P` has no "to the end" that every
    /// server takes (globus-gridftp-server drops the connection on `-1`).
    pub(crate) fn retrieve_command(
        &self,
        path: &str,
        size: Option<u64>,
    ) -> Result<Command, ClientError> {
        if !self.is_partial() {
            return Ok(Command::Retr(path.into()));
        }
        let length = match (self.length, size) {
            (Some(l), _) => l,
            (None, Some(size)) => size.saturating_sub(self.offset),
            (None, None) => {
                return Err(ClientError::Usage(format!(
                    "a partial retrieve of {path} from byte {} needs a length or the file's size",
                    self.offset
                )))
            }
        };
        Ok(Command::Eret(Eret::Partial {
            offset: self.offset,
            length,
            path: path.into(),
        }))
    }

    /// Whether [`FileRequest::retrieve_command`] needs the file's size.
    pub(crate) fn needs_size(&self) -> bool {
        self.is_partial() && self.length.is_none()
    }

    /// The server command that stores the file.
    pub(crate) fn store_command(&self, path: &str) -> Command {
        if self.is_partial() {
            Command::Esto(Esto::Adjusted {
                offset: self.offset,
                path: path.into(),
            })
        } else {
            Command::Stor(path.into())
        }
    }

    /// The `REST` command for a restart, if any.
    pub(crate) fn rest_command(&self) -> Option<Command> {
        (!self.restart.is_empty()).then(|| Command::Rest(Restart::Ranges(self.restart.clone())))
    }

    /// The description the client's DTP runs for its end of a two-party transfer.
    pub(crate) fn local_description(
        &self,
        direction: Direction,
        local: &Path,
        channel: ChannelSetup,
    ) -> Result<TransferDescription, ClientError> {
        Ok(TransferDescription {
            id: 0,
            direction,
            source: TransferSource::File,
            path: local_path(local)?,
            mode: TransferMode::Extended,
            ascii: false,
            section: Section {
                file_offset: self.offset,
                length: self.length,
            },
            restart: self.restart.clone(),
            truncate: !self.is_partial(),
            create_new: false,
            parallelism: self.parallelism.max(1),
            block_size: self.block_size,
            tuning: self.tuning_for(direction),
            channel,
            stack: StackSpec::default_net(),
            disk_stack: StackSpec::default_disk(),
            markers: MarkerIntervals {
                restart_ms: Some(1000),
                perf_ms: Some(250),
            },
            stripe: StripeInfo::default(),
            layout: Default::default(),
            security: ChannelSecurity::default(),
            idle_timeout_ms: self.idle_timeout_s.saturating_mul(1000),
            checksums: self.checksums.clone(),
        })
    }
}

/// A local path as the client's storage (rooted at `/`) names it.
pub(crate) fn local_path(p: &Path) -> Result<VirtualPath, ClientError> {
    let abs = std::path::absolute(p)?;
    Ok(VirtualPath::resolve(
        &VirtualPath::root(),
        &abs.to_string_lossy(),
    )?)
}

/// Files that go over one stream when the user did not say: below 16 MiB, more streams
/// cost more in setup than they gain.
pub(crate) fn is_small(size: Option<u64>) -> bool {
    size.is_some_and(|s| s < 16 << 20)
}

/// Streams for a file of `size` bytes when the user did not say.
pub(crate) fn auto_parallelism(size: Option<u64>, rtt: Duration) -> u32 {
    match size {
        _ if is_small(size) => 1,
        _ if rtt > Duration::from_millis(20) => 8,
        _ => 4,
    }
}
