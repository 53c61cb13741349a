//! Running one transfer: sending a source over its stripes' connections, or receiving into a
//! file, with markers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_net::DataConn;
use ferry_proto::clock;
use ferry_proto::command::TransferMode;
use ferry_proto::RangeSet;
use ferry_storage::{FileHandle, FileVersion, Storage, WriteOptions};
use tokio::sync::mpsc;

use super::connect::{connect_all, secure};
use super::markers::{begin, Markers, Stack};
use super::{access, Dtp, Moved};
use crate::digest::{Taken, TransferDigest};
use crate::disk_stack::News;
use crate::disk_stack::{DiskStack, Opened};
use crate::pool::auto_block_size;
use crate::receive::{receive_mode_e, receive_stream, RecvJob};
use crate::send::{send_mode_e, send_stream, BlockClaimer, Counters, SendJob};
use crate::source::Source;
use crate::{
    listing, ChannelSetup, Direction, DtpError, DtpEvent, TransferDescription, TransferSource,
};

impl Dtp {
    pub(super) async fn run_send(
        &mut self,
        desc: &TransferDescription,
        disk: &DiskStack,
        idle: Duration,
        events: &mpsc::Sender<DtpEvent>,
    ) -> Result<(u64, u32, Summed), DtpError> {
        let mut read_back = None;
        let mut opened = None;
        let source = match &desc.source {
            TransferSource::File => {
                // A file read through the stack goes nowhere else: nobody hears its news.
                let (news, _) = News::channel();
                let o = disk.wrap(
                    self.storage.open_read(&desc.path)?,
                    access(desc, &self.delegated, &news),
                )?;
                let file = Arc::clone(&o.file);
                opened = Some(o);
                read_back = Some(Arc::clone(&file));
                Source::file(file)?
            }
            TransferSource::Listing { kind, facts } => {
                let bytes = listing::render(
                    &*self.storage,
                    &desc.path,
                    *kind,
                    facts,
                    self.read_only,
                    clock::unix_now(),
                )?;
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
        let bounded = desc.section.length.is_some() || source.known_len().is_some();
        let block = match (desc.mode, desc.block_size) {
            (TransferMode::Extended, Some(size)) => u64::from(size.max(4096)),
            (TransferMode::Extended, None) if bounded => auto_block_size(conns.len(), total),
            // Data that arrives as it is sent (a multicast node's buffer, a pipe) goes out in
            // the smallest blocks, so every stream takes its share of what has come; with
            // large blocks the first stream's claim waits for the data and the others for
            // theirs behind it, one stream sending at a time.
            (TransferMode::Extended, None) => auto_block_size(1, total),
            (TransferMode::Stream, _) => self.pool.buffer_size() as u64,
        };
        let stripes = plan.mine.len();
        if stripes == 0 {
            // A data node with no receiving stripe of its own in this transfer.
            return Ok((0, 0, Summed::default()));
        }
        let mut digest = (plan.total == 1 && source.known_len().is_some())
            .then(|| digest_for(desc))
            .flatten();
        // A file whose values are already kept for its current version is not summed again:
        // sending it stays free (no read-back after sendfile), and the outcome reports them.
        let mut kept = Vec::new();
        if let (Some(_), Some(file), Some(cache)) =
            (&digest, &read_back, self.storage.checksum_cache())
        {
            let valid = cache.kept(&**file, &desc.checksums);
            let all: Option<Vec<Taken>> = desc
                .checksums
                .iter()
                .map(|alg| {
                    valid.iter().find(|(a, _)| a == alg).map(|(a, v)| Taken {
                        algorithm: *a,
                        value: v.clone(),
                    })
                })
                .collect();
            if let Some(all) = all {
                digest = None;
                kept = all;
            }
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
                digest: digest.clone(),
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
        // What the kernel measured on the way to the receiver (MODE E), for the client's
        // judgement of the streams (a third party's client sees neither server's data path).
        let data_rtt_us = match desc.mode {
            TransferMode::Extended => groups
                .iter()
                .flatten()
                .filter_map(|c| c.path_rtt_us())
                .max(),
            TransferMode::Stream => None,
        };
        let data_rtt_us = AtomicU32::new(data_rtt_us.unwrap_or(0));
        let mut markers = Markers {
            desc,
            events,
            bytes: &total_bytes,
            take_written: &RangeSet::new,
            data_rtt_us: &data_rtt_us,
            stack: Stack::default(),
        };
        match desc.mode {
            TransferMode::Extended => {
                let mut conns = markers.drive(send_stripes(groups, jobs)).await?;
                self.tcp = ferry_net::TcpStats::of_all(&mut conns);
                self.channel.put_back(Direction::Send, &desc.channel, conns);
            }
            TransferMode::Stream => {
                let conn = groups
                    .into_iter()
                    .flatten()
                    .next()
                    .ok_or(DtpError::NoDataChannel)?;
                let job = jobs.into_iter().next().ok_or(DtpError::NoDataChannel)?;
                markers.drive(send_stream(conn, job, desc.ascii)).await?;
            }
        }
        if let Some(o) = opened {
            finish_stack(o).await?;
        }
        let taken = match (digest, read_back) {
            (Some(d), Some(file)) => complete_digest(d, file, &self.storage, None).await,
            _ => Summed {
                taken: kept,
                read_back: 0,
            },
        };
        Ok((total_bytes(), streams, taken))
    }

    pub(super) async fn run_receive(
        &mut self,
        desc: &TransferDescription,
        disk: &DiskStack,
        idle: Duration,
        events: &mpsc::Sender<DtpEvent>,
        sink: Option<Arc<dyn FileHandle>>,
    ) -> Result<(u64, u32, Summed), DtpError> {
        // What was received is summed from the file this transfer wrote, read as the session
        // reads; a sink in memory (listings) takes no checksums.
        let digest = if sink.is_none()
            && desc.stripe.count <= 1
            && StripePlan::of(desc).targets.len() <= 1
        {
            digest_for(desc)
        } else {
            None
        };
        let mut opened = None;
        let (news, news_rx) = News::channel();
        let mut stack = Stack::default();
        stack.news = Some(news_rx);
        let file = match sink {
            Some(f) => f,
            None => {
                let opts = WriteOptions {
                    create: true,
                    truncate: desc.truncate && desc.restart.is_empty(),
                    create_new: desc.create_new,
                };
                // A relaying stack (multicast with local_write=n) leaves no file behind.
                let bottom: Arc<dyn FileHandle> = if disk.stores() {
                    self.storage.open_write(&desc.path, opts)?
                } else {
                    Arc::new(crate::disk_stack::Nowhere)
                };
                // What the stack's drivers started when the session chose it, if this is it.
                let prepared = self
                    .prepared
                    .take()
                    .filter(|(stack, _)| *stack == desc.disk_stack)
                    .map(|(_, p)| p);
                let o = disk.wrap_with(bottom, access(desc, &self.delegated, &news), prepared)?;
                stack.beyond.clone_from(&o.beyond);
                let file = Arc::clone(&o.file);
                opened = Some(o);
                file
            }
        };
        // A device (/dev/null) keeps nothing to sum or read back.
        let digest = digest.filter(|_| file.is_regular());
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
            digest: digest.clone(),
            data_rtt_us: Arc::new(AtomicU32::new(0)),
            limits: self.stream_limits.clone(),
        });
        let data_rtt = Arc::clone(&job.data_rtt_us);
        let total_bytes = {
            let b = Arc::clone(&job.bytes);
            move || b.load(Ordering::Relaxed)
        };
        self.moved = Moved(Arc::new(total_bytes.clone()));
        let take_written = {
            let j = Arc::clone(&job);
            move || j.take_written()
        };
        let mut markers = Markers {
            desc,
            events,
            bytes: &total_bytes,
            take_written: &take_written,
            data_rtt_us: &data_rtt,
            stack,
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
                let (mut conns, used) = markers.drive(fut).await?;
                self.tcp = ferry_net::TcpStats::of_all(&mut conns);
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
                markers
                    .drive(receive_stream(conn, &job, start, desc.ascii))
                    .await?;
                1
            }
        };
        drop(job);
        if let Some(o) = opened {
            // A forwarder's children may go on well after the last byte came in: markers go
            // on too, with what they store and any hop that fails.
            markers.drive(finish_stack(o)).await?;
        }
        let taken = match digest {
            Some(d) => match self.storage.open_read(&desc.path) {
                Ok(file) => complete_digest(d, file, &self.storage, Some(&desc.path)).await,
                Err(e) => {
                    tracing::debug!(path = %desc.path, "no checksum taken: cannot read the file back: {e}");
                    Summed::default()
                }
            },
            None => Summed::default(),
        };
        Ok((total_bytes(), streams, taken))
    }
}

/// Waits for the disk-stack drivers' own work (a forwarder's children), whose failure is the
/// transfer's: 451, as a local error in processing.
async fn finish_stack(opened: Opened) -> Result<(), DtpError> {
    opened
        .finish()
        .await
        .map_err(|message| DtpError::Remote { code: 451, message })
}

/// The digest a transfer takes while its bytes move, if its description asks for checksums
/// and they can be taken there: a whole file (no ERET/ESTO section), TYPE I, through the
/// plain disk stack (a transforming driver makes the file's bytes differ from the wire's).
fn digest_for(desc: &TransferDescription) -> Option<Arc<TransferDigest>> {
    let whole = desc.section.file_offset == 0 && desc.section.length.is_none();
    let plain = desc.disk_stack == ferry_proto::stack::StackSpec::default_disk();
    (!desc.checksums.is_empty()
        && desc.source == TransferSource::File
        && !desc.ascii
        && whole
        && plain)
        .then(|| TransferDigest::new(&desc.checksums))
}

/// Joins what the streams summed and reads back what they did not (restart ranges; for MD5
/// and the SHAs what came after the in-order start), on the blocking pool, and gives the
/// values to the storage to keep for `CKSM` (when the file did not change meanwhile). A
/// failure costs the checksums, not the transfer: it is logged and nothing is reported.
async fn complete_digest(
    digest: Arc<TransferDigest>,
    file: Arc<dyn FileHandle>,
    storage: &Arc<dyn Storage>,
    path: Option<&ferry_storage::VirtualPath>,
) -> Summed {
    let storage = Arc::clone(storage);
    let done = tokio::task::spawn_blocking(move || {
        let at = FileVersion::of(&*file);
        let len = file.size()?;
        let taken = digest.complete(&*file, len)?;
        if let Some(at) = at.filter(|v| v.size() == len) {
            let sums: Vec<_> = taken
                .iter()
                .map(|t| (t.algorithm, t.value.clone()))
                .collect();
            storage.remember_checksums(&file, at, &sums);
        }
        Ok::<_, ferry_storage::StorageError>((taken, digest.read_back()))
    })
    .await;
    match done {
        Ok(Ok((taken, read_back))) => Summed { taken, read_back },
        Ok(Err(e)) => {
            tracing::warn!(path = ?path.map(|p| p.to_string()), "no checksum taken: {e}");
            Summed::default()
        }
        Err(e) => {
            tracing::warn!("checksum task failed: {e}");
            Summed::default()
        }
    }
}

/// What a transfer's digest gave: the values, and the bytes read back to complete them.
#[derive(Debug, Default)]
pub(super) struct Summed {
    pub(super) taken: Vec<Taken>,
    pub(super) read_back: u64,
}

/// Which stripes of a transfer this DTP serves and the addresses it connects to.
pub(super) struct StripePlan {
    /// Stripes on the other side (the layout is over this many).
    pub(super) total: u32,
    /// This DTP's stripes among them.
    pub(super) mine: Vec<u32>,
    /// Their addresses, when this side connects (empty when it listens).
    pub(super) targets: Vec<SocketAddr>,
}

impl StripePlan {
    /// The plan for `desc`.
    pub(super) fn of(desc: &TransferDescription) -> StripePlan {
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
