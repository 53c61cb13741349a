//! The transfer description: one plain, serialisable value that says everything a DTP needs.
//! No sockets, no file handles: a striped frontend sends the same value to remote data nodes.

use std::net::SocketAddr;

use ferry_net::SocketTuning;
use ferry_proto::command::{Dcau, Protection, TransferMode};
use ferry_proto::stack::StackSpec;
use ferry_proto::RangeSet;
use ferry_storage::VirtualPath;
use serde::{Deserialize, Serialize};

/// Which way data flows, seen from the DTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Direction {
    /// Storage → data channel (RETR, ERET, listings).
    Send,
    /// Data channel → storage (STOR, ESTO, APPE, STOU).
    Receive,
}

/// What a listing transfer lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ListKind {
    /// `LIST`: `ls -l` lines.
    List,
    /// `NLST`: names.
    Nlst,
    /// `MLSD`: fact lines.
    Mlsd,
}

/// Where sent bytes come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TransferSource {
    /// A file (or device) in storage.
    File,
    /// A directory listing generated from storage.
    Listing {
        /// Format.
        kind: ListKind,
        /// Lower-cased MLSx facts to show (empty = default set).
        facts: Vec<String>,
    },
}

/// The part of the file a transfer covers, and how wire offsets map to file offsets:
/// `file offset = wire offset + file_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Section {
    /// File offset of wire offset 0 (ERET P offset, ESTO A offset, APPE size, 0 otherwise).
    pub file_offset: u64,
    /// Bytes to send (`None`: to end of file). Ignored when receiving.
    pub length: Option<u64>,
}

/// How the data connections are set up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChannelSetup {
    /// Connect to these endpoints (PORT/EPRT/SPOR), `parallelism` connections to each.
    Active(Vec<SocketAddr>),
    /// Accept on the listener opened by the last PASV/EPSV/SPAS.
    Passive,
}

/// Marker intervals in milliseconds; `None` = no markers of that kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkerIntervals {
    /// 111 restart markers (receiving side).
    pub restart_ms: Option<u64>,
    /// 112 performance markers.
    pub perf_ms: Option<u64>,
}

/// This DTP's place in a striped transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StripeInfo {
    /// Index of this stripe.
    pub index: u32,
    /// Number of stripes.
    pub count: u32,
}

impl Default for StripeInfo {
    fn default() -> Self {
        StripeInfo { index: 0, count: 1 }
    }
}

/// Data-channel authentication and protection, as `DCAU` and `PROT` set them. The credential
/// they use is the DTP's (see `Dtp::set_security`), not part of the description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelSecurity {
    /// Who must be at the other end of each data connection (`DCAU N` = nobody checks).
    pub dcau: Dcau,
    /// Clear, integrity-protected or private data (PROT C/S/P).
    pub prot: Protection,
}

impl Default for ChannelSecurity {
    fn default() -> Self {
        ChannelSecurity {
            dcau: Dcau::None,
            prot: Protection::Clear,
        }
    }
}

/// How a send to several receiving stripes (SPOR) spreads the bytes over them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LayoutSpec {
    /// `StripeLayout=Blocked;BlockSize=N;` (Globus' default: 1 MiB blocks).
    Blocked(u64),
    /// `StripeLayout=Partitioned;`: one contiguous part per stripe.
    Partitioned,
}

impl Default for LayoutSpec {
    fn default() -> Self {
        LayoutSpec::Blocked(ferry_proto::stripe::DEFAULT_STRIPE_BLOCK)
    }
}

impl LayoutSpec {
    /// The layout a striped copy asks for (`None` when it is not striped): blocks of `block`
    /// bytes, partitioned for 0, Globus' default when not given.
    pub fn asked(striped: bool, block: Option<u64>) -> Option<LayoutSpec> {
        striped.then(|| match block {
            Some(0) => LayoutSpec::Partitioned,
            Some(n) => LayoutSpec::Blocked(n),
            None => LayoutSpec::default(),
        })
    }
}

impl LayoutSpec {
    /// The layout for `total` bytes over `stripes` stripes.
    pub fn resolve(self, total: u64, stripes: u32) -> ferry_proto::stripe::Layout {
        match self {
            LayoutSpec::Blocked(block) => ferry_proto::stripe::Layout::Blocked {
                block: block.max(1),
            },
            LayoutSpec::Partitioned => ferry_proto::stripe::Layout::partitioned(total, stripes),
        }
    }
}

/// Everything one transfer needs, as a plain value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferDescription {
    /// Identifier for logs and events.
    pub id: u64,
    /// Which way the data flows.
    pub direction: Direction,
    /// What is sent (ignored when receiving).
    pub source: TransferSource,
    /// The file or directory, already resolved.
    pub path: VirtualPath,
    /// Stream or extended block mode.
    pub mode: TransferMode,
    /// TYPE A: convert line ends (stream mode only).
    pub ascii: bool,
    /// Section and offset mapping.
    pub section: Section,
    /// Wire ranges the other side already holds (REST); they are not sent again, and a receive
    /// with a non-empty restart does not truncate.
    pub restart: RangeSet,
    /// Receiving: truncate the file before writing.
    pub truncate: bool,
    /// Receiving: fail if the file exists (STOU).
    pub create_new: bool,
    /// Data connections per endpoint when sending in MODE E.
    pub parallelism: u32,
    /// MODE E block size when sending, in bytes; `None` lets the DTP choose by the number of
    /// streams ([`crate::auto_block_size`]).
    pub block_size: Option<u32>,
    /// Socket buffers.
    pub tuning: SocketTuning,
    /// Connection setup.
    pub channel: ChannelSetup,
    /// Driver stack of the data channel (`SITE SETNETSTACK`), transport first.
    pub stack: StackSpec,
    /// Driver stack between the DTP and storage (`SITE SETDISKSTACK`), file system first.
    pub disk_stack: StackSpec,
    /// DCAU and PROT.
    pub security: ChannelSecurity,
    /// Marker intervals.
    pub markers: MarkerIntervals,
    /// Stripe position.
    pub stripe: StripeInfo,
    /// Sending to several receiving stripes: which bytes go to which.
    pub layout: LayoutSpec,
    /// Abort when no data moves for this long (milliseconds).
    pub idle_timeout_ms: u64,
    /// Checksums to take while the bytes move, of the whole file at this end (both ends of a
    /// transfer can take them): only for a whole regular file in TYPE I through the plain
    /// disk stack, on one stripe; otherwise none are taken.
    #[serde(default)]
    pub checksums: Vec<ferry_storage::ChecksumAlgorithm>,
}

impl TransferDescription {
    /// A whole-file MODE E transfer of `path` over `channel` with every other setting at its
    /// default (one stream, clear, no restart and no markers, the default stacks, a 10 minute
    /// idle timeout); callers set the rest field by field.
    pub fn new(direction: Direction, path: VirtualPath, channel: ChannelSetup) -> Self {
        TransferDescription {
            id: 0,
            direction,
            source: TransferSource::File,
            path,
            mode: TransferMode::Extended,
            ascii: false,
            section: Section {
                file_offset: 0,
                length: None,
            },
            restart: RangeSet::new(),
            truncate: false,
            create_new: false,
            parallelism: 1,
            block_size: None,
            tuning: SocketTuning::default(),
            channel,
            stack: StackSpec::default_net(),
            disk_stack: StackSpec::default_disk(),
            security: ChannelSecurity::default(),
            markers: MarkerIntervals::default(),
            stripe: StripeInfo::default(),
            layout: LayoutSpec::default(),
            idle_timeout_ms: 600_000,
            checksums: Vec::new(),
        }
    }
}
