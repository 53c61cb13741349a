//! Checksums taken while the bytes move (issue 21): each data stream sums what it carries where
//! it lands, without a lock per block, and the transfer joins the pieces at the end.
//!
//! - ADLER32 and CRC32C digests of neighbouring ranges combine ([`Joinable`]), so every run a
//!   stream carried is kept as `(start, digest)` and merged with its neighbours as they arrive,
//!   in whatever order the parallel streams deliver them. Only ranges no stream carried (a
//!   restart's ranges, which the receiver already holds) are read back from the file.
//! - MD5 and the SHAs do not combine: the stream that carries the file's first bytes hashes
//!   them for as long as they stay in order (the prefix), and everything after the prefix is
//!   read back from the file at the end.
//!
//! The engine touches no socket: the DTP feeds it and calls [`TransferDigest::complete`] with
//! the file when the transfer is done.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ferry_storage::{ChecksumAlgorithm, Checksummer, FileHandle, Joinable, StorageError};

/// Bytes read per call while reading ranges back.
const READ_BACK_CHUNK: usize = 1 << 20;

/// One algorithm's value for a whole file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The algorithm.
    pub algorithm: ChecksumAlgorithm,
    /// Lowercase hex, as CKSM answers it.
    pub value: String,
}

/// A contiguous range one or more streams carried, with its joinable digests.
#[derive(Debug, Clone)]
struct Run {
    len: u64,
    /// One per joinable algorithm of the transfer, in its order.
    digests: Vec<Joinable>,
}

/// The in-order start of the file, hashed for the algorithms that do not combine.
#[derive(Debug)]
struct Prefix {
    len: u64,
    hashers: Vec<Checksummer>,
}

/// What one transfer sums: shared by its streams, completed once.
#[derive(Debug)]
pub struct TransferDigest {
    joinable: Vec<ChecksumAlgorithm>,
    sequential: Vec<ChecksumAlgorithm>,
    /// Runs by start offset; neighbours are merged as they arrive.
    runs: Mutex<BTreeMap<u64, Run>>,
    prefix: Mutex<Option<Prefix>>,
    /// Some bytes were summed twice (overlapping runs): the runs cannot be trusted.
    spoiled: std::sync::atomic::AtomicBool,
    /// Bytes read back from the file by [`TransferDigest::complete`].
    read_back: AtomicU64,
}

impl TransferDigest {
    /// A digest of `algorithms` (duplicates ignored).
    pub fn new(algorithms: &[ChecksumAlgorithm]) -> Arc<TransferDigest> {
        let mut joinable = Vec::new();
        let mut sequential = Vec::new();
        for &alg in algorithms {
            let list = if Joinable::supports(alg) {
                &mut joinable
            } else {
                &mut sequential
            };
            if !list.contains(&alg) {
                list.push(alg);
            }
        }
        Arc::new(TransferDigest {
            joinable,
            sequential,
            runs: Mutex::new(BTreeMap::new()),
            prefix: Mutex::new(None),
            spoiled: std::sync::atomic::AtomicBool::new(false),
            read_back: AtomicU64::new(0),
        })
    }

    /// A feeder for one stream.
    pub fn stream(self: &Arc<TransferDigest>) -> StreamDigest {
        StreamDigest {
            shared: Arc::clone(self),
            run: None,
        }
    }

    /// Bytes [`TransferDigest::complete`] read back from the file.
    pub fn read_back(&self) -> u64 {
        self.read_back.load(Ordering::Relaxed)
    }

    fn empty_digests(&self) -> Vec<Joinable> {
        self.joinable
            .iter()
            .filter_map(|&a| Joinable::empty(a))
            .collect()
    }

    /// Adds a finished run, merged with the runs it touches. A run that overlaps one already
    /// held (bytes sent twice) spoils the runs: `complete` then reads the file.
    fn add_run(&self, start: u64, run: Run) {
        if run.len == 0 {
            return;
        }
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        let (mut start, mut run) = (start, run);
        let end = start.saturating_add(run.len);
        let before = runs
            .range(..=start)
            .next_back()
            .map(|(&s, r)| (s, s + r.len));
        let after = runs.range(start..).next().map(|(&s, _)| s);
        if before.is_some_and(|(_, e)| e > start) || after.is_some_and(|s| s < end) {
            self.spoiled.store(true, Ordering::Relaxed);
            return;
        }
        if let Some((s, e)) = before {
            if e == start {
                if let Some(b) = runs.remove(&s) {
                    run = join_runs(b, run);
                    start = s;
                }
            }
        }
        if after == Some(end) {
            if let Some(a) = runs.remove(&end) {
                run = join_runs(run, a);
            }
        }
        runs.insert(start, run);
    }

    fn set_prefix(&self, prefix: Prefix) {
        let mut p = self.prefix.lock().unwrap_or_else(|e| e.into_inner());
        if p.as_ref().is_none_or(|old| old.len < prefix.len) {
            *p = Some(prefix);
        }
    }

    /// The digests of the whole file, `len` bytes of `file` (the destination after a receive,
    /// the source after a send), reading back only what no stream summed. Streams must have
    /// flushed (dropped) first.
    pub fn complete(&self, file: &dyn FileHandle, len: u64) -> Result<Vec<Taken>, StorageError> {
        let mut out = Vec::new();
        if !self.joinable.is_empty() {
            let runs = std::mem::take(&mut *self.runs.lock().unwrap_or_else(|e| e.into_inner()));
            let mut acc = self.empty_digests();
            let mut pos = 0u64;
            // Runs past the end mean the file is not what was moved: sum the file itself.
            let consistent = !self.spoiled.load(Ordering::Relaxed)
                && runs
                    .iter()
                    .all(|(&s, r)| s.checked_add(r.len).is_some_and(|e| e <= len));
            if consistent {
                for (start, run) in runs {
                    if start > pos {
                        let gap = self.read_joinable(file, pos, start)?;
                        acc = join_all(acc, gap);
                    }
                    acc = join_all(acc, run.digests);
                    pos = start + run.len;
                }
            }
            if pos < len {
                let gap = self.read_joinable(file, pos, len)?;
                acc = join_all(acc, gap);
            }
            out.extend(acc.iter().map(|d| Taken {
                algorithm: d.algorithm(),
                value: d.hex(),
            }));
        }
        if !self.sequential.is_empty() {
            let prefix = self.prefix.lock().unwrap_or_else(|e| e.into_inner()).take();
            let (pos, mut hashers) = match prefix {
                Some(p) if p.len <= len => (p.len, p.hashers),
                _ => (
                    0,
                    self.sequential
                        .iter()
                        .map(|&a| Checksummer::new(a))
                        .collect(),
                ),
            };
            self.read_range(file, pos, len, |chunk| {
                for h in &mut hashers {
                    h.update(chunk);
                }
            })?;
            out.extend(hashers.into_iter().map(|h| Taken {
                algorithm: h.algorithm(),
                value: h.finish_hex(),
            }));
        }
        Ok(out)
    }

    /// The joinable digests of `[from, to)` of `file`, read back.
    fn read_joinable(
        &self,
        file: &dyn FileHandle,
        from: u64,
        to: u64,
    ) -> Result<Vec<Joinable>, StorageError> {
        let mut digests = self.empty_digests();
        self.read_range(file, from, to, |chunk| {
            for d in &mut digests {
                d.update(chunk);
            }
        })?;
        Ok(digests)
    }

    /// Reads `[from, to)` of `file` back in chunks, handing each to `sum` and counting it.
    fn read_range(
        &self,
        file: &dyn FileHandle,
        from: u64,
        to: u64,
        mut sum: impl FnMut(&[u8]),
    ) -> Result<(), StorageError> {
        let cap = usize::try_from(to.saturating_sub(from))
            .map_or(READ_BACK_CHUNK, |n| n.min(READ_BACK_CHUNK));
        let mut buf = vec![0u8; cap];
        let mut pos = from;
        while pos < to {
            let want = usize::try_from(to - pos).map_or(buf.len(), |n| n.min(buf.len()));
            let n = file.read_at(&mut buf[..want], pos)?;
            if n == 0 {
                return Err(short_file(pos, to));
            }
            sum(&buf[..n]);
            self.read_back.fetch_add(n as u64, Ordering::Relaxed);
            pos += n as u64;
        }
        Ok(())
    }
}

fn short_file(at: u64, want: u64) -> StorageError {
    StorageError::Invalid(format!(
        "the file ends at {at} bytes, before the {want} the transfer moved; it changed during the checksum"
    ))
}

fn join_all(acc: Vec<Joinable>, next: Vec<Joinable>) -> Vec<Joinable> {
    acc.into_iter().zip(next).map(|(a, b)| a.join(b)).collect()
}

fn join_runs(a: Run, b: Run) -> Run {
    Run {
        len: a.len + b.len,
        digests: join_all(a.digests, b.digests),
    }
}

/// One stream's feeder: extends its current run while the bytes it is given follow on, and
/// hands the run to the transfer when they jump (or when it is dropped).
#[derive(Debug)]
pub struct StreamDigest {
    shared: Arc<TransferDigest>,
    run: Option<StreamRun>,
}

#[derive(Debug)]
struct StreamRun {
    start: u64,
    run: Run,
    /// Hashers of the sequential algorithms while this run is the file's prefix.
    prefix: Option<Vec<Checksummer>>,
}

impl StreamDigest {
    /// Sums `data`, the bytes at `offset` of the file.
    pub fn feed(&mut self, offset: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let follows = self
            .run
            .as_ref()
            .is_some_and(|r| r.start + r.run.len == offset);
        if !follows {
            self.flush();
            let prefix = (offset == 0 && !self.shared.sequential.is_empty()).then(|| {
                self.shared
                    .sequential
                    .iter()
                    .map(|&a| Checksummer::new(a))
                    .collect()
            });
            self.run = Some(StreamRun {
                start: offset,
                run: Run {
                    len: 0,
                    digests: self.shared.empty_digests(),
                },
                prefix,
            });
        }
        if let Some(r) = self.run.as_mut() {
            for d in &mut r.run.digests {
                d.update(data);
            }
            if let Some(p) = r.prefix.as_mut() {
                for h in p {
                    h.update(data);
                }
            }
            r.run.len += data.len() as u64;
        }
    }

    /// Hands the current run to the transfer.
    pub fn flush(&mut self) {
        if let Some(r) = self.run.take() {
            if let Some(hashers) = r.prefix {
                self.shared.set_prefix(Prefix {
                    len: r.run.len,
                    hashers,
                });
            }
            if !self.shared.joinable.is_empty() {
                self.shared.add_run(r.start, r.run);
            }
        }
    }
}

impl Drop for StreamDigest {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The file as the receiver holds it, in memory.
    fn mem_file(data: Vec<u8>) -> crate::memory::MemoryFile {
        let file = crate::memory::MemoryFile::new(data.len());
        file.write_all_at(&data, 0).expect("fits");
        file
    }

    fn one_shot(alg: ChecksumAlgorithm, data: &[u8]) -> String {
        let mut c = Checksummer::new(alg);
        c.update(data);
        c.finish_hex()
    }

    /// Splits `len` bytes into blocks of `block`, deals them round robin to `streams` streams
    /// (as MODE E senders do), leaves out the blocks in `restart` (held already), and feeds
    /// each stream's blocks in its order, the streams interleaved by `order`.
    fn transfer(
        data: &[u8],
        algs: &[ChecksumAlgorithm],
        block: usize,
        streams: usize,
        skipped: &[bool],
        order: &[usize],
    ) -> Arc<TransferDigest> {
        let digest = TransferDigest::new(algs);
        let mut feeders: Vec<StreamDigest> = (0..streams).map(|_| digest.stream()).collect();
        let mut queues: Vec<Vec<usize>> = vec![Vec::new(); streams];
        for (i, _) in data.chunks(block).enumerate() {
            if !skipped.get(i).copied().unwrap_or(false) {
                queues[i % streams].push(i);
            }
        }
        let mut next = vec![0usize; streams];
        let mut turn = 0;
        loop {
            let live: Vec<usize> = (0..streams)
                .filter(|&s| next[s] < queues[s].len())
                .collect();
            if live.is_empty() {
                break;
            }
            let s = live[order.get(turn).copied().unwrap_or(0) % live.len()];
            turn += 1;
            let b = queues[s][next[s]];
            next[s] += 1;
            let start = b * block;
            let end = (start + block).min(data.len());
            // A block arrives in pieces, as reads from a socket do.
            let mid = start + (end - start) / 3;
            feeders[s].feed(start as u64, &data[start..mid]);
            feeders[s].feed(mid as u64, &data[mid..end]);
        }
        drop(feeders);
        digest
    }

    proptest! {
        /// Whatever the streams, the order blocks arrive in and the ranges a restart left out,
        /// every algorithm's value equals the one-shot digest of the file.
        #[test]
        fn values_equal_the_digest_of_the_whole_file(
            data in proptest::collection::vec(any::<u8>(), 0..60_000),
            block in 1usize..9_000,
            streams in 1usize..6,
            skipped in proptest::collection::vec(any::<bool>(), 0..40),
            order in proptest::collection::vec(any::<usize>(), 0..200),
        ) {
            let algs = ChecksumAlgorithm::all();
            let digest = transfer(&data, algs, block, streams, &skipped, &order);
            let file = mem_file(data.clone());
            let got = digest.complete(&file, data.len() as u64).expect("complete");
            prop_assert_eq!(got.len(), algs.len());
            for t in &got {
                prop_assert_eq!(&t.value, &one_shot(t.algorithm, &data), "{}", t.algorithm);
            }
        }
    }

    #[test]
    fn joinable_algorithms_read_back_only_the_restart_ranges() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        // 4 streams, blocks of 1000, blocks 10..20 held already (a restart).
        let skipped: Vec<bool> = (0..100).map(|i| (10..20).contains(&i)).collect();
        let order: Vec<usize> = (0..400).map(|i| i * 7 + 3).collect();
        let algs = [ChecksumAlgorithm::Adler32, ChecksumAlgorithm::Crc32c];
        let digest = transfer(&data, &algs, 1000, 4, &skipped, &order);
        let got = digest
            .complete(&mem_file(data.clone()), data.len() as u64)
            .expect("complete");
        assert_eq!(digest.read_back(), 10_000, "only the ten held blocks");
        for t in got {
            assert_eq!(t.value, one_shot(t.algorithm, &data));
        }
    }

    #[test]
    fn one_stream_in_order_reads_nothing_back_for_any_algorithm() {
        let data: Vec<u8> = (0..50_000u32).map(|i| (i * 13 % 256) as u8).collect();
        let digest = transfer(&data, ChecksumAlgorithm::all(), 4096, 1, &[], &[]);
        let got = digest
            .complete(&mem_file(data.clone()), data.len() as u64)
            .expect("complete");
        assert_eq!(digest.read_back(), 0);
        assert_eq!(got.len(), ChecksumAlgorithm::all().len());
        for t in got {
            assert_eq!(t.value, one_shot(t.algorithm, &data));
        }
    }

    #[test]
    fn a_file_shorter_than_the_transfer_is_an_error_not_a_value() {
        let data = vec![7u8; 10_000];
        let skipped = vec![true, false];
        let digest = transfer(&data, &[ChecksumAlgorithm::Md5], 5000, 2, &skipped, &[]);
        let err = digest.complete(&mem_file(data[..3000].to_vec()), 10_000);
        assert!(err.is_err(), "{err:?}");
    }

    #[test]
    fn bytes_sent_twice_fall_back_to_reading_the_file() {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 97) as u8).collect();
        let digest = TransferDigest::new(&[ChecksumAlgorithm::Adler32]);
        let mut a = digest.stream();
        let mut b = digest.stream();
        a.feed(0, &data[..12_000]);
        b.feed(8_000, &data[8_000..]);
        drop((a, b));
        let got = digest
            .complete(&mem_file(data.clone()), data.len() as u64)
            .expect("complete");
        assert_eq!(got[0].value, one_shot(ChecksumAlgorithm::Adler32, &data));
        assert_eq!(digest.read_back(), data.len() as u64);
    }
}
