//! The DTP itself: sets up data connections, runs the transfer, emits markers.

mod connect;
mod markers;
mod transfer;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_gsi::{DataSecurity, PeerCheck};
use ferry_net::{DataProtection, Transports};
use ferry_proto::command::{Dcau, Protection, TransferMode};
use ferry_proto::stack::StackSpec;
use ferry_storage::{FileHandle, Storage};
use tokio::sync::mpsc;

use crate::channel::DataChannel;
use crate::disk_stack::{Access, DiskStacks, PreparedStack};
use crate::memory::MemoryFile;
use crate::polling::PollBudget;
use crate::pool::BufferPool;
use crate::{
    ChannelSecurity, ChannelSetup, Direction, DtpError, DtpEvent, TransferDescription,
    TransferOutcome, TransferSource,
};

pub(crate) use connect::secure;

/// One session's data transfer process.
#[derive(Debug)]
pub struct Dtp {
    storage: Arc<dyn Storage>,
    pool: Arc<BufferPool>,
    channel: DataChannel,
    read_only: bool,
    /// The credential data connections authenticate with (DCAU A/S), once a GSI login gave one.
    security: Option<Arc<DataSecurity>>,
    /// The credential the user delegated, when they delegated one (disk-stack drivers that act
    /// for them get it; `security` may be the server's own).
    delegated: Option<Arc<DataSecurity>>,
    /// DCAU/PROT of the cached connections: a change forgets them (as Globus).
    cached_security: ChannelSecurity,
    /// Reads the payload bytes the current (or last) transfer has moved, failed ones included.
    moved: Moved,
    /// Lets a lone receiving stream poll its socket before sleeping, within this budget
    /// (see `receive`).
    poll_budget: Option<Arc<PollBudget>>,
    /// The disk-stack drivers a description may name.
    disk_stacks: Arc<DiskStacks>,
    /// What the drivers of the session's chosen disk stack started before a transfer came.
    prepared: Option<(StackSpec, PreparedStack)>,
    /// The transports a description's net stack may name.
    transports: Arc<Transports>,
    /// The host at the other end of the last transfer's data channel.
    data_peer: Option<std::net::IpAddr>,
    /// What the kernel knew of the last transfer's data connections (MODE E).
    tcp: Option<ferry_net::TcpStats>,
    /// How many data connections a receiving transfer takes, and the server's permits.
    stream_limits: StreamLimits,
}

/// Bounds on the data connections a receiver takes: the peer chooses how many it opens, so
/// without them one upload can hold every descriptor of the server.
#[derive(Debug, Clone)]
pub struct StreamLimits {
    /// Most connections one transfer reads from; more are closed as they come.
    pub per_transfer: u32,
    /// Permits shared by every transfer of the process, one per connection being read.
    pub server: Option<Arc<tokio::sync::Semaphore>>,
}

/// Connections one receiving transfer takes unless the server sets another bound: above
/// any parallelism a client sends (Globus' tools go to 64).
pub const STREAMS_PER_TRANSFER: u32 = 128;

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits {
            per_transfer: STREAMS_PER_TRANSFER,
            server: None,
        }
    }
}

/// A reader of a transfer's byte counters, kept after the transfer ends.
#[derive(Clone)]
struct Moved(Arc<dyn Fn() -> u64 + Send + Sync>);

impl Moved {
    fn nothing() -> Moved {
        Moved(Arc::new(|| 0))
    }
}

impl std::fmt::Debug for Moved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Moved({})", (self.0)())
    }
}

impl Dtp {
    /// A DTP over `storage`, taking buffers from `pool`.
    pub fn new(storage: Arc<dyn Storage>, pool: Arc<BufferPool>, read_only: bool) -> Dtp {
        Dtp {
            storage,
            pool,
            channel: DataChannel::default(),
            read_only,
            security: None,
            delegated: None,
            cached_security: ChannelSecurity::default(),
            moved: Moved::nothing(),
            tcp: None,
            poll_budget: None,
            stream_limits: StreamLimits::default(),
            disk_stacks: Arc::new(DiskStacks::standard()),
            prepared: None,
            transports: Arc::new(Transports::standard()),
            data_peer: None,
        }
    }

    /// Reads and writes `storage` from now on; returns the storage it used until now.
    pub fn use_storage(&mut self, storage: Arc<dyn Storage>) -> Arc<dyn Storage> {
        std::mem::replace(&mut self.storage, storage)
    }

    /// Connects and listens with `transports` instead of this build's standard set.
    pub fn use_transports(&mut self, transports: Arc<Transports>) {
        self.transports = transports;
    }

    /// Builds descriptions' disk stacks from `stacks` instead of this build's standard set.
    pub fn use_disk_stacks(&mut self, stacks: Arc<DiskStacks>) {
        self.disk_stacks = stacks;
    }

    /// Lets a transfer's only receiving stream, once large, read on a thread of its own that
    /// polls its socket for a moment before it sleeps, while `budget` has permits left.
    pub fn poll_lone_streams(&mut self, budget: Option<Arc<PollBudget>>) {
        self.poll_budget = budget;
    }

    /// Bounds the data connections its receiving transfers take.
    pub fn limit_streams(&mut self, limits: StreamLimits) {
        self.stream_limits = limits;
    }

    /// Sets the credential the user delegated, which disk-stack drivers may act with.
    pub fn set_delegated(&mut self, delegated: Option<Arc<DataSecurity>>) {
        self.delegated = delegated;
    }

    /// Sets the credential for DCAU A/S data connections (the server: the delegated one; a
    /// client: its own proxy). Connections cached under another credential are dropped.
    pub fn set_security(&mut self, security: Option<Arc<DataSecurity>>) {
        self.channel.forget_cache();
        self.security = security;
    }

    /// How this transfer's data connections are authenticated and protected.
    fn protection(&self, desc: &TransferDescription) -> Result<Option<DataProtection>, DtpError> {
        let check = match &desc.security.dcau {
            Dcau::None => return Ok(None),
            Dcau::Self_ => PeerCheck::SameIdentity,
            Dcau::Subject(s) => PeerCheck::Subject(s.clone()),
        };
        let security = self.security.clone().ok_or_else(|| {
            DtpError::Unsupported(
                "data channel authentication (DCAU A/S) needs a GSI login; send DCAU N".into(),
            )
        })?;
        Ok(Some(DataProtection {
            security,
            check,
            protected: matches!(desc.security.prot, Protection::Safe | Protection::Private),
        }))
    }

    /// Payload bytes the last transfer moved, also when it failed or was aborted (for the
    /// transfer log and restart figures).
    pub fn bytes_moved(&self) -> u64 {
        (self.moved.0)()
    }

    /// The host at the other end of the last transfer's data channel, when known.
    pub fn data_peer(&self) -> Option<std::net::IpAddr> {
        self.data_peer
    }

    /// Whether a passive listener is open.
    pub fn is_listening(&self) -> bool {
        self.channel.listener().is_some()
    }

    /// Whether `desc` will run on cached connections (the PI answers 125 instead of 150).
    pub fn will_reuse(&self, desc: &TransferDescription) -> bool {
        desc.mode == TransferMode::Extended
            && self.cached_security == desc.security
            && self.channel.can_reuse(desc.direction, &desc.channel)
    }

    /// Runs one transfer to completion, sending markers to `events` as it goes.
    pub async fn run(
        &mut self,
        desc: &TransferDescription,
        events: &mpsc::Sender<DtpEvent>,
    ) -> Result<TransferOutcome, DtpError> {
        self.run_into(desc, events, None).await
    }

    /// Receives a transfer into memory instead of storage (listings fetched by a client), up
    /// to `limit` bytes; `desc.path` is ignored.
    pub async fn receive_to_memory(
        &mut self,
        desc: &TransferDescription,
        events: &mpsc::Sender<DtpEvent>,
        limit: usize,
    ) -> Result<(TransferOutcome, Vec<u8>), DtpError> {
        let mem = Arc::new(MemoryFile::new(limit));
        let handle: Arc<dyn FileHandle> = Arc::clone(&mem) as Arc<dyn FileHandle>;
        let outcome = self.run_into(desc, events, Some(handle)).await?;
        Ok((outcome, mem.take()))
    }

    async fn run_into(
        &mut self,
        desc: &TransferDescription,
        events: &mpsc::Sender<DtpEvent>,
        sink: Option<Arc<dyn FileHandle>>,
    ) -> Result<TransferOutcome, DtpError> {
        let started = Instant::now();
        let idle = Duration::from_millis(desc.idle_timeout_ms.max(1));
        self.moved = Moved::nothing();
        self.data_peer = None;
        self.tcp = None;
        if desc.ascii && desc.mode == TransferMode::Extended && desc.source == TransferSource::File
        {
            return Err(DtpError::Unsupported(
                "TYPE A is not supported in MODE E; send TYPE I".into(),
            ));
        }
        if self.cached_security != desc.security {
            self.channel.forget_cache();
            self.cached_security = desc.security.clone();
        }
        let reused = self.will_reuse(desc);
        let disk = self.disk_stacks.resolve(&desc.disk_stack)?;
        let result = match desc.direction {
            Direction::Send => self.run_send(desc, &disk, idle, events).await,
            Direction::Receive => self.run_receive(desc, &disk, idle, events, sink).await,
        };
        self.data_peer = match &desc.channel {
            ChannelSetup::Active(endpoints) => endpoints.first().map(|a| a.ip()),
            ChannelSetup::Passive => self.channel.listener().and_then(|l| l.last_peer()),
        };
        if result.is_err() {
            self.channel.forget_cache();
        }
        if desc.mode == TransferMode::Stream {
            // A stream-mode data channel serves one transfer (as in Globus): the next needs a
            // new PASV or PORT, and an idle session keeps no listener open.
            self.channel.forget();
        }
        let (bytes, streams, summed) = result?;
        Ok(TransferOutcome {
            bytes,
            streams,
            duration: started.elapsed(),
            reused,
            checksums: summed.taken,
            checksum_read_back: summed.read_back,
            tcp: self.tcp.take(),
        })
    }
}

/// What the disk stack's drivers are told about the file a transfer opens.
fn access<'a>(
    desc: &'a TransferDescription,
    delegated: &'a Option<Arc<DataSecurity>>,
    news: &'a crate::disk_stack::News,
) -> Access<'a> {
    Access {
        path: &desc.path,
        direction: desc.direction,
        restart: &desc.restart,
        whole: desc.section.file_offset == 0
            && desc.section.length.is_none()
            && desc.stripe.count <= 1,
        channel: &desc.security,
        delegated: delegated.as_ref(),
        news,
    }
}
