//! The blocks a multicast node receives, held until every child's forwarding transfer has
//! read them: the node's own transfer writes (in any order, from any stream), each child reads
//! at the offsets its DTP claims, and a block leaves memory once every live child has it.
//!
//! Memory is bounded: a write waits while the limit or more is held, except a write at or
//! below the lowest offset some child still waits for (and bytes every child has read already
//! are not held again). A sender's streams carry rising offsets,
//! so the block a child waits for is never queued behind a write that waits for memory.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use ferry_dtp::disk_stack::Beyond;
use ferry_proto::RangeSet;
use ferry_storage::{FileHandle, StorageError};

/// How many bytes a multicast transfer holds for its children before writes wait.
pub(super) const HELD_LIMIT: usize = 64 << 20;

/// How much a child's read waits to find in one piece (up to its buffer), so that it wakes
/// once per batch rather than once per piece its parent's streams deliver.
const READ_BATCH: u64 = 1 << 20;

/// The longest a read waits for a fuller batch before taking what there is.
const BATCH_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// The shared buffer between a node's transfer and its children.
#[derive(Debug)]
pub(super) struct Tee {
    state: Mutex<State>,
    changed: Condvar,
    limit: usize,
    /// Wakes the node's restart markers when a child's subtree stored more.
    confirmed_more: Arc<tokio::sync::Notify>,
}

#[derive(Debug)]
struct State {
    /// Blocks by offset that some live child has not read in full.
    blocks: BTreeMap<u64, Arc<[u8]>>,
    held: usize,
    /// Per child: what it has read, or `None` once it stopped (failed).
    readers: Vec<Option<RangeSet>>,
    /// Per child: what every destination of its subtree has stored (its restart markers),
    /// kept as it was when the child stopped.
    confirmed: Vec<RangeSet>,
    /// Set when the node's transfer received everything: the data's length.
    end: Option<u64>,
    /// One past the highest byte written.
    high: u64,
    /// The node's transfer failed: children stop.
    aborted: bool,
    /// Writes waiting for memory: readers then take what there is at once.
    writers_waiting: usize,
}

impl State {
    /// The lowest offset a live child has not read.
    fn frontier(&self) -> Option<u64> {
        self.readers
            .iter()
            .flatten()
            .map(|r| match r.iter().next() {
                Some((0, end)) => end,
                _ => 0,
            })
            .min()
    }

    /// Bytes held in one piece from `offset` on.
    fn contiguous(&self, offset: u64) -> u64 {
        let mut at = offset;
        let start = self
            .blocks
            .range(..=offset)
            .next_back()
            .filter(|(&b, d)| offset < b + d.len() as u64)
            .map(|(&b, _)| b);
        let Some(start) = start else { return 0 };
        for (&b, d) in self.blocks.range(start..) {
            if b > at {
                break;
            }
            at = at.max(b + d.len() as u64);
        }
        at - offset
    }

    /// Child `child`'s first run of bytes held and not yet read (lowest offset first, across
    /// adjacent blocks, at most `cap` long), and how many unread bytes it could have now (up
    /// to `cap`).
    fn unread(&self, child: usize, cap: u64) -> (Option<(u64, u64)>, u64) {
        let Some(Some(read)) = self.readers.get(child) else {
            return (None, 0);
        };
        // Past the blocks below the child's first gap (held for slower children) at once.
        let from = match read.iter().next() {
            Some((0, end)) => end,
            _ => 0,
        };
        let first = self
            .blocks
            .range(..=from)
            .next_back()
            .map_or(from, |(&b, _)| b);
        let (mut run, mut total) = (None::<(u64, u64)>, 0u64);
        for (&at, block) in self.blocks.range(first..) {
            let end = at + block.len() as u64;
            if read.contains_range(at, end) {
                continue;
            }
            for (a, b) in read.complement_within(at, end).iter() {
                total += b - a;
                run = match run {
                    None => Some((a, (b - a).min(cap))),
                    Some((s, len)) if s + len == a && len < cap => {
                        Some((s, (len + b - a).min(cap)))
                    }
                    keep => keep,
                };
                if total >= cap {
                    return (run, total);
                }
            }
        }
        (run, total)
    }

    fn read_by_all(&self, start: u64, end: u64) -> bool {
        self.readers
            .iter()
            .flatten()
            .all(|r| r.contains_range(start, end))
    }

    /// Drops the blocks every live child has read.
    fn release(&mut self) {
        self.release_within(0, u64::MAX);
    }

    /// Drops the blocks starting in `[from, to)` that every live child has read.
    fn release_within(&mut self, from: u64, to: u64) {
        let done: Vec<u64> = self
            .blocks
            .range(from..to)
            .filter(|(&at, b)| self.read_by_all(at, at + b.len() as u64))
            .map(|(&at, _)| at)
            .collect();
        for at in done {
            if let Some(b) = self.blocks.remove(&at) {
                self.held -= b.len();
            }
        }
    }
}

impl Tee {
    /// A buffer for `children` readers, who need none of the bytes in `restart` (what every
    /// destination holds already).
    pub(super) fn new(children: usize, limit: usize, restart: &RangeSet) -> Tee {
        Tee {
            state: Mutex::new(State {
                blocks: BTreeMap::new(),
                held: 0,
                readers: vec![Some(restart.clone()); children],
                confirmed: vec![RangeSet::new(); children],
                end: None,
                high: 0,
                aborted: false,
                writers_waiting: 0,
            }),
            changed: Condvar::new(),
            limit,
            confirmed_more: Arc::new(tokio::sync::Notify::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits on the condition variable (at most `limit`) without holding up a worker thread of
    /// the caller's runtime: its other tasks, among them the ones that end this wait, move on.
    /// A plain wait would strand whatever that worker had queued (tokio's next-task slot is
    /// not stolen): a forwarder's control channel then went unread, its restart markers with
    /// it, until the transfer's end.
    fn wait<'a>(
        &self,
        guard: MutexGuard<'a, State>,
        limit: Option<std::time::Duration>,
    ) -> MutexGuard<'a, State> {
        let wait = || match limit {
            None => self.changed.wait(guard).unwrap_or_else(|p| p.into_inner()),
            Some(t) => {
                self.changed
                    .wait_timeout(guard, t)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(wait)
            }
            _ => wait(),
        }
    }

    /// Holds a copy of `data` at `offset` for the children, once memory allows.
    pub(super) fn write(&self, data: &[u8], offset: u64) -> Result<(), StorageError> {
        let mut s = self.lock();
        loop {
            if s.aborted {
                return Err(gone());
            }
            let Some(frontier) = s.frontier() else {
                // Every child stopped: nothing to hold (their failures are reported at the end).
                return Ok(());
            };
            if s.held < self.limit || offset <= frontier {
                break;
            }
            s.writers_waiting += 1;
            s = self.wait(s, None);
            s.writers_waiting -= 1;
        }
        let end = offset.saturating_add(data.len() as u64);
        if s.read_by_all(offset, end) {
            // A repeat of bytes every child already has: nothing to hold.
            return Ok(());
        }
        let block: Arc<[u8]> = Arc::from(data);
        if let Some(old) = s.blocks.insert(offset, block) {
            s.held -= old.len();
        }
        s.held += data.len();
        s.high = s.high.max(end);
        drop(s);
        self.changed.notify_all();
        Ok(())
    }

    /// Child `child` reads at `offset`: waits for the bytes, 0 at the end of the data.
    pub(super) fn read(
        &self,
        child: usize,
        buf: &mut [u8],
        offset: u64,
    ) -> Result<usize, StorageError> {
        let mut s = self.lock();
        loop {
            // Aborted, or this child has left (its own transfer failed): its streams stop.
            if s.aborted || !matches!(s.readers.get(child), Some(Some(_))) {
                return Err(gone());
            }
            let want = READ_BATCH.min(buf.len() as u64);
            let have = s.contiguous(offset);
            if have > 0 && have < want && s.end.is_none() && s.writers_waiting == 0 {
                // A fuller batch is on its way; wait a little for it (never while a write
                // waits for memory: that write may be waiting for this read).
                s = self.wait(s, Some(BATCH_WAIT));
                if s.aborted || !matches!(s.readers.get(child), Some(Some(_))) {
                    return Err(gone());
                }
            }
            let found = s
                .blocks
                .range(..=offset)
                .next_back()
                .filter(|(&at, b)| offset < at + b.len() as u64)
                .map(|(&at, b)| (at, Arc::clone(b)));
            if let Some((at, block)) = found {
                let from = (offset - at) as usize;
                let n = buf.len().min(block.len() - from);
                buf[..n].copy_from_slice(&block[from..from + n]);
                if let Some(Some(r)) = s.readers.get_mut(child) {
                    r.insert(offset, offset + n as u64);
                }
                let whole = (at, at + block.len() as u64);
                if s.read_by_all(whole.0, whole.1) {
                    s.blocks.remove(&at);
                    s.held -= block.len();
                    drop(s);
                    self.changed.notify_all();
                }
                return Ok(n);
            }
            match s.end {
                Some(end) if offset >= end => return Ok(0),
                Some(_) => {
                    return Err(StorageError::Invalid(format!(
                        "multicast: no data at offset {offset}"
                    )))
                }
                None => s = self.wait(s, None),
            }
        }
    }

    /// Child `child`'s next piece: the lowest bytes held that it has not read, whatever came
    /// before them still missing, into the front of `buf` (see `FileHandle::next_piece`).
    /// Waits for some; `None` once the data ended and it read all.
    pub(super) fn next_piece(
        &self,
        child: usize,
        buf: &mut [u8],
    ) -> Result<Option<(u64, usize)>, StorageError> {
        let want = READ_BATCH.min(buf.len() as u64);
        let mut batched = false;
        let mut s = self.lock();
        loop {
            if s.aborted || !matches!(s.readers.get(child), Some(Some(_))) {
                return Err(gone());
            }
            let (run, unread) = s.unread(child, buf.len() as u64);
            let Some((at, len)) = run else {
                if s.end.is_some() {
                    return Ok(None);
                }
                s = self.wait(s, None);
                continue;
            };
            if !batched && unread < want && s.end.is_none() && s.writers_waiting == 0 {
                // A fuller batch is on its way (as in `read`).
                batched = true;
                s = self.wait(s, Some(BATCH_WAIT));
                continue;
            }
            let end = at + len;
            let first = s.blocks.range(..=at).next_back().map_or(at, |(&b, _)| b);
            for (&b, block) in s.blocks.range(first..end) {
                let (from, to) = (at.max(b), end.min(b + block.len() as u64));
                if from < to {
                    buf[(from - at) as usize..(to - at) as usize]
                        .copy_from_slice(&block[(from - b) as usize..(to - b) as usize]);
                }
            }
            if let Some(Some(r)) = s.readers.get_mut(child) {
                r.insert(at, end);
            }
            let before = s.held;
            // Only the blocks this piece came from can have been read by all just now.
            s.release_within(first, end);
            let freed = s.held < before;
            drop(s);
            if freed {
                self.changed.notify_all();
            }
            return Ok(Some((at, len as usize)));
        }
    }

    /// The node's transfer received everything: children read to the end.
    pub(super) fn complete(&self) {
        let mut s = self.lock();
        s.end = Some(s.high);
        drop(s);
        self.changed.notify_all();
    }

    /// The node's transfer failed: children stop with an error.
    pub(super) fn abort(&self) {
        self.lock().aborted = true;
        self.changed.notify_all();
    }

    /// Child `child`'s subtree has stored `ranges` as well.
    pub(super) fn confirm(&self, child: usize, ranges: &RangeSet) {
        if let Some(c) = self.lock().confirmed.get_mut(child) {
            c.merge(ranges);
        }
        self.confirmed_more.notify_one();
    }

    /// What child `child`'s subtree has stored.
    pub(super) fn confirmed(&self, child: usize) -> RangeSet {
        self.lock()
            .confirmed
            .get(child)
            .cloned()
            .unwrap_or_default()
    }

    /// Child `child` stopped: nothing more is held for it.
    pub(super) fn leave(&self, child: usize) {
        let mut s = self.lock();
        if let Some(r) = s.readers.get_mut(child) {
            *r = None;
        }
        s.release();
        drop(s);
        self.changed.notify_all();
    }
}

impl Beyond for Tee {
    /// What every child's subtree has stored of `written` (a child that stopped counts with
    /// what it had: its subtree holds no more).
    fn held(&self, written: &RangeSet) -> RangeSet {
        let s = self.lock();
        s.confirmed
            .iter()
            .fold(written.clone(), |held, c| held.intersect(c))
    }

    fn changed(&self) -> Option<Arc<tokio::sync::Notify>> {
        Some(Arc::clone(&self.confirmed_more))
    }
}

fn gone() -> StorageError {
    StorageError::Io {
        path: "multicast".into(),
        source: std::io::Error::new(
            std::io::ErrorKind::BrokenPipe,
            "the transfer being forwarded failed",
        ),
    }
}

/// The file a multicast node's transfer writes: the local file (unless `local_write=n`), and
/// the children's buffer. It offers no raw descriptor: every byte must pass `write_all_at`,
/// so nothing is spliced to the file beneath.
#[derive(Debug)]
pub(super) struct TeeFile {
    pub(super) local: Option<Arc<dyn FileHandle>>,
    pub(super) below: Arc<dyn FileHandle>,
    pub(super) tee: Arc<Tee>,
}

impl FileHandle for TeeFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, StorageError> {
        self.below.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<(), StorageError> {
        if let Some(local) = &self.local {
            local.write_all_at(buf, offset)?;
        }
        self.tee.write(buf, offset)
    }
    fn size(&self) -> Result<u64, StorageError> {
        self.below.size()
    }
    fn is_regular(&self) -> bool {
        self.below.is_regular()
    }
    fn sync(&self) -> Result<(), StorageError> {
        self.below.sync()
    }
    fn set_len(&self, len: u64) -> Result<(), StorageError> {
        match &self.local {
            Some(local) => local.set_len(len),
            None => Ok(()),
        }
    }
}

/// What one child's forwarding transfer sends from: the buffer, read as that child. Not a
/// file of known size, so the forwarding transfer sends until the data ends.
#[derive(Debug)]
pub(super) struct ChildView {
    pub(super) tee: Arc<Tee>,
    pub(super) child: usize,
}

impl FileHandle for ChildView {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, StorageError> {
        self.tee.read(self.child, buf, offset)
    }
    fn offers_pieces(&self) -> bool {
        true
    }
    fn next_piece(&self, buf: &mut [u8]) -> Result<Option<(u64, usize)>, StorageError> {
        self.tee.next_piece(self.child, buf)
    }
    fn write_all_at(&self, _buf: &[u8], _offset: u64) -> Result<(), StorageError> {
        Err(StorageError::PermissionDenied("multicast source".into()))
    }
    fn size(&self) -> Result<u64, StorageError> {
        Ok(0)
    }
    fn sync(&self) -> Result<(), StorageError> {
        Ok(())
    }
    fn set_len(&self, _len: u64) -> Result<(), StorageError> {
        Err(StorageError::PermissionDenied("multicast source".into()))
    }
}

#[cfg(test)]
mod tests;
