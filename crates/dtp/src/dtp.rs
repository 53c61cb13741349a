//! The DTP itself: sets up data connections, runs the transfer, emits markers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferry_gsi::{DataSecurity, PeerCheck};
use ferry_net::{DataConn, DataProtection, Transports};
use ferry_proto::command::{Dcau, Protection, TransferMode};
use ferry_proto::RangeSet;
use ferry_storage::{FileHandle, Storage, WriteOptions};

use crate::memory::MemoryFile;
use tokio::sync::mpsc;

use crate::channel::DataChannel;
use crate::disk_stack::{Access, DiskStack, DiskStacks};
use crate::mover::{DataMover, MoverFuture, PassiveRequest};
use crate::polling::PollBudget;
use crate::pool::{auto_block_size, BufferPool};
use crate::receive::{receive_mode_e, receive_stream, RecvJob};
use crate::send::{send_mode_e, send_stream, BlockClaimer, Counters, SendJob};
use crate::source::Source;
use crate::{
    listing, ChannelSecurity, ChannelSetup, Direction, DtpError, DtpEvent, TransferDescription,
    TransferOutcome, TransferSource,
};

/// One session's data transfer process.
#[derive(Debug)]
pub struct Dtp {
    storage: Arc<dyn Storage>,
    pool: Arc<BufferPool>,
    channel: DataChannel,
    read_only: bool,
    /// The credential data connections authenticate with (DCAU A/S), once a GSI login gave one.
    security: Option<Arc<DataSecurity>>,
    /// DCAU/PROT of the cached connections: a change forgets them (as Globus).
    cached_security: ChannelSecurity,
    /// Reads the payload bytes the current (or last) transfer has moved, failed ones included.
    moved: Moved,
    /// Lets a lone receiving stream poll its socket before sleeping, within this budget
    /// (see `receive`).
    poll_budget: Option<Arc<PollBudget>>,
    /// The disk-stack drivers a description may name.
    disk_stacks: Arc<DiskStacks>,
    /// The transports a description's net stack may name.
    transports: Arc<Transports>,
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
            cached_security: ChannelSecurity::default(),
            moved: Moved::nothing(),
            poll_budget: None,
            disk_stacks: Arc::new(DiskStacks::standard()),
            transports: Arc::new(Transports::standard()),
        }
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
        self.moved = Moved::nothing();
        let disk = self.disk_stacks.resolve(&desc.disk_stack)?;
        let result = match desc.direction {
            Direction::Send => self.run_send(desc, &disk, idle, events).await,
            Direction::Receive => self.run_receive(desc, &disk, idle, events, sink).await,
        };
        if result.is_err() {
            self.channel.forget_cache();
        }
        if desc.mode == TransferMode::Stream {
            // A stream-mode data channel serves one transfer (as in Globus): the next needs a
            // new PASV or PORT, and an idle session keeps no listener open.
            self.channel.forget();
        }
        let (bytes, streams) = result?;
        Ok(TransferOutcome {
            bytes,
            streams,
            duration: started.elapsed(),
            reused,
        })
    }

    async fn run_send(
        &mut self,
        desc: &TransferDescription,
        disk: &DiskStack,
        idle: Duration,
        events: &mpsc::Sender<DtpEvent>,
    ) -> Result<(u64, u32), DtpError> {
        let source = match &desc.source {
            TransferSource::File => {
                let file = self.storage.open_read(&desc.path)?;
                Source::file(disk.wrap(file, access(desc))?)?
            }
            TransferSource::Listing { kind, facts } => {
                let bytes =
                    listing::render(&*self.storage, &desc.path, *kind, facts, self.read_only)?;
                Source::Memory(bytes.into())
            }
        };
        self.protection(desc)?;
        begin(events).await;
        let total = match (desc.section.length, source.known_len()) {
            (Some(len), Some(size)) => len.min(size.saturating_sub(desc.section.file_offset)),
            (Some(len), None) => len,
            (None, Some(size)) => size.saturating_sub(desc.section.file_offset),
            (None, None) => u64::MAX - desc.section.file_offset,
        };
        let mut ranges = RangeSet::from_range(0, total);
        ranges.subtract(&desc.restart);
        // Several receiving stripes (SPOR with more than one address): each stripe gets only the
        // bytes the layout gives it, over its own connections, with its own EOF. A data node of
        // a striped server (stripe j of M) serves the receiving stripes r with r mod M = j, so
        // each receiving stripe hears from one sender.
        let plan = StripePlan::of(desc);
        let conns = self.send_connections(desc, &plan.targets, idle).await?;
        let streams = conns.len() as u32;
        let block = match (desc.mode, desc.block_size) {
            (TransferMode::Extended, Some(size)) => u64::from(size.max(4096)),
            (TransferMode::Extended, None) => auto_block_size(conns.len(), total),
            (TransferMode::Stream, _) => self.pool.buffer_size() as u64,
        };
        let bounded = desc.section.length.is_some() || source.known_len().is_some();
        let stripes = plan.mine.len();
        if stripes == 0 {
            // A data node with no receiving stripe of its own in this transfer.
            return Ok((0, 0));
        }
        let layout = desc.layout.resolve(total, plan.total);
        // Connection i goes to this node's stripe i mod stripes (see send_connections).
        let mut groups: Vec<Vec<DataConn>> = (0..stripes).map(|_| Vec::new()).collect();
        for (i, c) in conns.into_iter().enumerate() {
            groups[i % stripes].push(c);
        }
        let mut jobs = Vec::with_capacity(stripes);
        for (g, group) in groups.iter().enumerate() {
            let owned = if plan.total == 1 {
                ranges.clone()
            } else {
                layout.owned(&ranges, plan.mine[g], plan.total)
            };
            jobs.push(SendJob {
                bounded,
                source: source.clone(),
                claimer: Arc::new(BlockClaimer::with_streams(&owned, block, group.len())),
                file_offset: desc.section.file_offset,
                pool: Arc::clone(&self.pool),
                counters: Arc::new((0..group.len()).map(|_| AtomicU64::new(0)).collect()),
                idle,
            });
        }
        let all_counters: Vec<Counters> = jobs.iter().map(|j| Arc::clone(&j.counters)).collect();
        let total_bytes = move || {
            all_counters
                .iter()
                .flat_map(|c| c.iter())
                .map(|a| a.load(Ordering::Relaxed))
                .sum::<u64>()
        };
        self.moved = Moved(Arc::new(total_bytes.clone()));
        match desc.mode {
            TransferMode::Extended => {
                let fut = send_stripes(groups, jobs);
                let conns = with_markers(fut, desc, events, &total_bytes, &RangeSet::new).await?;
                self.channel.put_back(Direction::Send, &desc.channel, conns);
            }
            TransferMode::Stream => {
                let conn = groups
                    .into_iter()
                    .flatten()
                    .next()
                    .ok_or(DtpError::NoDataChannel)?;
                let job = jobs.into_iter().next().ok_or(DtpError::NoDataChannel)?;
                let fut = send_stream(conn, job, desc.ascii);
                with_markers(fut, desc, events, &total_bytes, &RangeSet::new).await?;
            }
        }
        Ok((total_bytes(), streams))
    }

    async fn send_connections(
        &mut self,
        desc: &TransferDescription,
        addrs: &[SocketAddr],
        idle: Duration,
    ) -> Result<Vec<DataConn>, DtpError> {
        match (&desc.channel, desc.mode) {
            (ChannelSetup::Active(_), TransferMode::Extended) if addrs.is_empty() => {
                self.channel.forget_cache();
                Ok(Vec::new())
            }
            (ChannelSetup::Active(_), TransferMode::Extended) => {
                let mut conns = self.channel.take_cached(Direction::Send, &desc.channel);
                let wanted = addrs.len() * desc.parallelism.max(1) as usize;
                let mut next = conns.len();
                let mut pending = Vec::new();
                while next < wanted {
                    pending.push(addrs[next % addrs.len()]);
                    next += 1;
                }
                let prot = self.protection(desc)?;
                conns.extend(connect_all(&self.transports, &pending, desc, prot, idle).await?);
                Ok(conns)
            }
            (ChannelSetup::Active(_), TransferMode::Stream) => {
                self.channel.forget_cache();
                let first = addrs.first().copied().ok_or(DtpError::NoDataChannel)?;
                connect_all(
                    &self.transports,
                    &[first],
                    desc,
                    self.protection(desc)?,
                    idle,
                )
                .await
            }
            (ChannelSetup::Passive, mode) => {
                let mut conns = if mode == TransferMode::Extended {
                    self.channel.take_cached(Direction::Send, &desc.channel)
                } else {
                    self.channel.forget_cache();
                    Vec::new()
                };
                if conns.is_empty() {
                    let prot = self.protection(desc)?;
                    let l = self.channel.listener().ok_or(DtpError::NoDataChannel)?;
                    let c = tokio::time::timeout(idle, l.accept())
                        .await
                        .map_err(|_| DtpError::IdleTimeout(idle.as_secs()))?
                        .map_err(DtpError::Connect)?;
                    conns.push(secure(c, false, prot.as_ref(), idle).await?);
                }
                Ok(conns)
            }
        }
    }

    async fn run_receive(
        &mut self,
        desc: &TransferDescription,
        disk: &DiskStack,
        idle: Duration,
        events: &mpsc::Sender<DtpEvent>,
        sink: Option<Arc<dyn FileHandle>>,
    ) -> Result<(u64, u32), DtpError> {
        let file = match sink {
            Some(f) => f,
            None => {
                let opts = WriteOptions {
                    create: true,
                    truncate: desc.truncate && desc.restart.is_empty(),
                    create_new: desc.create_new,
                };
                disk.wrap(self.storage.open_write(&desc.path, opts)?, access(desc))?
            }
        };
        self.protection(desc)?;
        begin(events).await;
        let job = Arc::new(RecvJob {
            file,
            file_offset: desc.section.file_offset,
            pool: Arc::clone(&self.pool),
            bytes: Arc::new(AtomicU64::new(0)),
            written: Arc::new(Mutex::new(Vec::new())),
            idle,
            poll: self.poll_budget.clone(),
            readers: AtomicUsize::new(0),
        });
        let total_bytes = {
            let b = Arc::clone(&job.bytes);
            move || b.load(Ordering::Relaxed)
        };
        self.moved = Moved(Arc::new(total_bytes.clone()));
        let take_written = {
            let j = Arc::clone(&job);
            move || j.take_written()
        };
        let streams = match desc.mode {
            TransferMode::Extended => {
                let prot = self.protection(desc)?;
                let (cached, listener) = match &desc.channel {
                    ChannelSetup::Passive => {
                        let cached = self.channel.take_cached(Direction::Receive, &desc.channel);
                        (cached, self.channel.listener())
                    }
                    ChannelSetup::Active(_) => {
                        self.channel.forget_cache();
                        let pending: Vec<SocketAddr> = StripePlan::of(desc)
                            .targets
                            .iter()
                            .flat_map(|a| std::iter::repeat_n(*a, desc.parallelism.max(1) as usize))
                            .collect();
                        (
                            connect_all(&self.transports, &pending, desc, prot.clone(), idle)
                                .await?,
                            None,
                        )
                    }
                };
                let fut = receive_mode_e(cached, listener, prot, Arc::clone(&job));
                let (conns, used) =
                    with_markers(fut, desc, events, &total_bytes, &take_written).await?;
                self.channel
                    .put_back(Direction::Receive, &desc.channel, conns);
                used
            }
            TransferMode::Stream => {
                self.channel.forget_cache();
                let prot = self.protection(desc)?;
                let conn = match &desc.channel {
                    ChannelSetup::Passive => {
                        let l = self.channel.listener().ok_or(DtpError::NoDataChannel)?;
                        let c = tokio::time::timeout(idle, l.accept())
                            .await
                            .map_err(|_| DtpError::IdleTimeout(idle.as_secs()))?
                            .map_err(DtpError::Connect)?;
                        secure(c, false, prot.as_ref(), idle).await?
                    }
                    ChannelSetup::Active(addrs) => {
                        let first = addrs.first().copied().ok_or(DtpError::NoDataChannel)?;
                        connect_all(&self.transports, &[first], desc, prot, idle)
                            .await?
                            .remove(0)
                    }
                };
                if let Ok(mut w) = job.written.lock() {
                    w.push(Arc::new(Mutex::new(RangeSet::new())));
                }
                let start = stream_restart_offset(&desc.restart);
                let fut = receive_stream(conn, &job, start, desc.ascii);
                with_markers(fut, desc, events, &total_bytes, &take_written).await?;
                1
            }
        };
        Ok((total_bytes(), streams))
    }
}

impl DataMover for Dtp {
    fn open_passive(
        &mut self,
        req: PassiveRequest,
    ) -> MoverFuture<'_, Result<Vec<SocketAddr>, DtpError>> {
        let opened = self
            .channel
            .open_passive(&self.transports, &req.stack, req.ip, req.ports, req.tuning)
            .map(|a| vec![a])
            .map_err(DtpError::Listen);
        Box::pin(std::future::ready(opened))
    }

    fn set_active<'a>(
        &'a mut self,
        _endpoints: &'a [SocketAddr],
    ) -> MoverFuture<'a, Result<(), DtpError>> {
        // The endpoints arrive with each transfer's description; only the old channel goes.
        self.channel.forget();
        Box::pin(std::future::ready(Ok(())))
    }

    fn forget(&mut self) {
        self.channel.forget();
    }

    fn forget_cache(&mut self) {
        self.channel.forget_cache();
    }

    fn will_reuse(&self, desc: &TransferDescription) -> bool {
        Dtp::will_reuse(self, desc)
    }

    fn run<'a>(
        &'a mut self,
        desc: &'a TransferDescription,
        events: &'a mpsc::Sender<DtpEvent>,
    ) -> MoverFuture<'a, Result<TransferOutcome, DtpError>> {
        Box::pin(Dtp::run(self, desc, events))
    }

    fn bytes_moved(&self) -> u64 {
        Dtp::bytes_moved(self)
    }
}

/// What the disk stack's drivers are told about the file a transfer opens.
fn access(desc: &TransferDescription) -> Access<'_> {
    Access {
        path: &desc.path,
        direction: desc.direction,
    }
}

/// Which stripes of a transfer this DTP serves and the addresses it connects to.
struct StripePlan {
    /// Stripes on the other side (the layout is over this many).
    total: u32,
    /// This DTP's stripes among them.
    mine: Vec<u32>,
    /// Their addresses, when this side connects (empty when it listens).
    targets: Vec<SocketAddr>,
}

impl StripePlan {
    fn of(desc: &TransferDescription) -> StripePlan {
        match &desc.channel {
            ChannelSetup::Active(addrs) if desc.mode == TransferMode::Extended => {
                let total = addrs.len().max(1) as u32;
                let mine = ferry_proto::stripe::stripes_of_sender(
                    desc.stripe.index,
                    desc.stripe.count,
                    total,
                );
                let targets = mine
                    .iter()
                    .filter_map(|r| addrs.get(*r as usize).copied())
                    .collect();
                StripePlan {
                    total,
                    mine,
                    targets,
                }
            }
            ChannelSetup::Active(addrs) => StripePlan {
                total: 1,
                mine: vec![0],
                targets: addrs.iter().take(1).copied().collect(),
            },
            ChannelSetup::Passive => StripePlan {
                total: 1,
                mine: vec![0],
                targets: Vec::new(),
            },
        }
    }
}

/// Where a stream-mode receive resumes: the end of the range that starts at 0.
fn stream_restart_offset(restart: &RangeSet) -> u64 {
    match restart.iter().next() {
        Some((0, end)) => end,
        _ => 0,
    }
}

/// Sends every stripe's share on its own connections (one stripe: on this task, as before;
/// several: a task each) and returns the connections in their original order, connection `i`
/// being stripe `i mod N`'s, so a reuse maps them to the same addresses.
async fn send_stripes(
    groups: Vec<Vec<DataConn>>,
    jobs: Vec<SendJob>,
) -> Result<Vec<DataConn>, DtpError> {
    if groups.len() == 1 {
        let (group, job) = groups
            .into_iter()
            .zip(jobs)
            .next()
            .ok_or(DtpError::NoDataChannel)?;
        return send_mode_e(group, job).await;
    }
    let n = groups.len();
    let sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
    let mut set = tokio::task::JoinSet::new();
    for (r, (group, job)) in groups.into_iter().zip(jobs).enumerate() {
        set.spawn(async move { send_mode_e(group, job).await.map(|c| (r, c)) });
    }
    let mut slots: Vec<Option<DataConn>> = (0..sizes.iter().sum()).map(|_| None).collect();
    let mut complete = true;
    while let Some(joined) = set.join_next().await {
        let (r, conns) =
            joined.map_err(|e| DtpError::Connection(format!("stripe task failed: {e}")))??;
        // A stripe that closed a connection loses the order: then nothing is kept.
        complete &= conns.len() == sizes[r];
        for (k, c) in conns.into_iter().enumerate() {
            if let Some(slot) = slots.get_mut(r + k * n) {
                *slot = Some(c);
            }
        }
    }
    Ok(if complete {
        slots.into_iter().flatten().collect()
    } else {
        Vec::new()
    })
}

/// Runs the GSI handshake and peer check on a new data connection when DCAU asks for one
/// (`initiator`: we connected).
pub(crate) async fn secure(
    conn: DataConn,
    initiator: bool,
    prot: Option<&DataProtection>,
    idle: Duration,
) -> Result<DataConn, DtpError> {
    let Some(prot) = prot else {
        return Ok(conn);
    };
    tokio::time::timeout(idle, conn.secure(initiator, prot))
        .await
        .map_err(|_| DtpError::IdleTimeout(idle.as_secs()))?
        .map_err(DtpError::Connect)
}

/// Connects to every address at once (each handshake on its own task).
async fn connect_all(
    transports: &Arc<Transports>,
    addrs: &[SocketAddr],
    desc: &TransferDescription,
    prot: Option<DataProtection>,
    idle: Duration,
) -> Result<Vec<DataConn>, DtpError> {
    let mut set = tokio::task::JoinSet::new();
    let prot = prot.map(Arc::new);
    for (i, a) in addrs.iter().enumerate() {
        let (a, tuning, prot) = (*a, desc.tuning, prot.clone());
        let (transports, stack) = (Arc::clone(transports), desc.stack.clone());
        set.spawn(async move {
            let conn = async {
                let c = transports
                    .connect(&stack, a, tuning)
                    .await
                    .map_err(DtpError::Connect)?;
                secure(c, true, prot.as_deref(), idle).await
            };
            (i, conn.await)
        });
    }
    let mut out: Vec<Option<DataConn>> = (0..addrs.len()).map(|_| None).collect();
    let all = async {
        while let Some(r) = set.join_next().await {
            let (i, c) =
                r.map_err(|e| DtpError::Connection(format!("connect task failed: {e}")))?;
            out[i] = Some(c?);
        }
        Ok::<(), DtpError>(())
    };
    tokio::time::timeout(idle, all)
        .await
        .map_err(|_| DtpError::IdleTimeout(idle.as_secs()))??;
    Ok(out.into_iter().flatten().collect())
}

/// Tells the PI the transfer can start. Sent with back-pressure (unlike markers, which may be
/// dropped when the PI lags): the PI must see it before any marker.
async fn begin(events: &mpsc::Sender<DtpEvent>) {
    let _ = events.send(DtpEvent::Begin).await;
}

/// Drives `fut` while emitting restart and perf markers at the description's intervals.
async fn with_markers<T>(
    fut: impl std::future::Future<Output = Result<T, DtpError>>,
    desc: &TransferDescription,
    events: &mpsc::Sender<DtpEvent>,
    bytes: &(dyn Fn() -> u64 + Sync),
    take_written: &(dyn Fn() -> RangeSet + Sync),
) -> Result<T, DtpError> {
    tokio::pin!(fut);
    let mut restart = desc.markers.restart_ms.map(ticker);
    let mut perf = desc.markers.perf_ms.map(ticker);
    loop {
        tokio::select! {
            r = &mut fut => {
                if desc.direction == Direction::Receive && restart.is_some() {
                    let done = take_written();
                    if !done.is_empty() {
                        let _ = events.try_send(DtpEvent::Restart(done));
                    }
                }
                return r;
            }
            _ = tick(&mut restart) => {
                let done = take_written();
                if !done.is_empty() {
                    let _ = events.try_send(DtpEvent::Restart(done));
                }
            }
            _ = tick(&mut perf) => {
                let _ = events.try_send(DtpEvent::Perf {
                    stripe_index: desc.stripe.index,
                    stripe_count: desc.stripe.count,
                    bytes: bytes(),
                    timestamp_tenths: now_tenths(),
                });
            }
        }
    }
}

fn ticker(ms: u64) -> tokio::time::Interval {
    let period = Duration::from_millis(ms.max(100));
    tokio::time::interval_at(tokio::time::Instant::now() + period, period)
}

async fn tick(t: &mut Option<tokio::time::Interval>) {
    match t {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending::<()>().await,
    }
}

fn now_tenths() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64 / 100)
        .unwrap_or(0)
}
