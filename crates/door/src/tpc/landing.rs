//! Where a pull in ranges lands: a temporary file beside the target, written at offsets by
//! each stream's writer, summed as the shares arrive; renamed over the target when whole and its
//! digests agree, kept for a retry when the pull fails and the source names its version
//! (`partial.rs`), removed otherwise.

use std::sync::{Arc, Mutex};

use ferry_dtp::digest::TransferDigest;
use ferry_proto::http::digest::DigestAlgorithm;
use ferry_proto::ranges::RangeSet;
use ferry_storage::{ChecksumAlgorithm, FileHandle, Storage, VirtualPath, WriteOptions};
use http::StatusCode;

use super::partial::{self, Claim, State};
use crate::context::DoorContext;
use crate::put::Outcome;
use crate::reply::{self, blocking, Reply};

/// The temporary file a ranged pull writes, beside its target.
pub(super) struct Landing {
    storage: Arc<dyn Storage>,
    pub(super) file: Arc<dyn FileHandle>,
    temp: VirtualPath,
    target: VirtualPath,
    pub(super) digest: Arc<TransferDigest>,
    expected: Vec<(DigestAlgorithm, Vec<u8>)>,
    /// A resumable landing's hold on its names, its record's path and what the record says of
    /// the source; `None`: nothing is kept if the pull fails.
    keep: Option<(Claim, VirtualPath, State)>,
    /// The byte ranges written (what an earlier pull left, and this one's).
    pub(super) stored: Arc<Mutex<RangeSet>>,
    /// One clone per stream's writer still running.
    pub(super) writers: Arc<()>,
}

impl Landing {
    /// Opens the temporary file for `target`, to be summed with the site's checksums and
    /// checked against `expected`. With `claim` on the target's resumable names and a source
    /// (`now`) that names its version, the landing is resumable; where `old`, the record of
    /// an earlier pull, is of the same file, its bytes are taken up again. The ranges still
    /// missing come back with it.
    pub(super) async fn open(
        ctx: &DoorContext,
        storage: Arc<dyn Storage>,
        target: VirtualPath,
        expected: Vec<(DigestAlgorithm, Vec<u8>)>,
        now: State,
        claim: Option<Claim>,
        old: Option<State>,
    ) -> Result<(Landing, RangeSet), Reply> {
        let Some(dir) = target.parent() else {
            return Err(reply::status(
                StatusCode::METHOD_NOT_ALLOWED,
                "the root is a collection, not a file",
            ));
        };
        let claim = claim.filter(|_| now.resumable());
        let (s, t, resumable) = (Arc::clone(&storage), target.clone(), claim.is_some());
        let reuse = old.filter(|o| o.same_file(&now));
        let (file, temp, record, stored) = blocking(move || {
            let (random, _) = crate::put::temp_beside(&*s, &dir, &t)?;
            let create = WriteOptions {
                create: true,
                truncate: true,
                create_new: true,
            };
            if !resumable {
                let file = s.open_write(&random, create)?;
                return Ok((file, random, None, RangeSet::new()));
            }
            let (temp, record) = partial::names(&t)?;
            if let Some(old) = reuse.filter(|_| s.stat(&temp).is_ok()) {
                let file = s.open_write(
                    &temp,
                    WriteOptions {
                        create: false,
                        truncate: false,
                        create_new: false,
                    },
                )?;
                return Ok((file, temp, Some(record), old.stored()));
            }
            partial::forget(&*s, &t);
            let file = s.open_write(&temp, create)?;
            Ok((file, temp, Some(record), RangeSet::new()))
        })
        .await
        .map_err(|e| reply::storage(&e))?;
        let missing = stored.complement_within(0, now.size);
        let algorithms: Vec<ChecksumAlgorithm> = crate::put::algorithms(ctx, &expected);
        let keep = match (claim, record) {
            (Some(c), Some(r)) => Some((c, r, now)),
            _ => None,
        };
        let landing = Landing {
            storage,
            file,
            temp,
            target,
            digest: TransferDigest::new(&algorithms),
            expected,
            keep,
            stored: Arc::new(Mutex::new(stored)),
            writers: Arc::new(()),
        };
        Ok((landing, missing))
    }

    /// After a failure: a resumable landing records what is on disk (once every writer has
    /// stopped, synced) for a retry; any other is removed.
    pub(super) async fn fail(self) {
        let Some((_claim, record, now)) = &self.keep else {
            return self.discard().await;
        };
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        while Arc::strong_count(&self.writers) > 1 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let stored: Vec<(u64, u64)> = self
            .stored
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .collect();
        let state = State {
            stored,
            ..now.clone()
        };
        let (s, file, record, temp) = (
            Arc::clone(&self.storage),
            Arc::clone(&self.file),
            record.clone(),
            self.temp.clone(),
        );
        let kept = blocking(move || {
            file.sync()?;
            partial::save(&*s, &record, &state)
        })
        .await;
        match kept {
            Ok(()) => tracing::info!(path = %temp, "a failed pull's bytes are kept for a retry"),
            Err(e) => {
                tracing::warn!(path = %temp, error = %e, "cannot keep a failed pull's bytes");
                self.discard().await;
            }
        }
    }

    /// Syncs the whole file of `size` bytes, joins its checksums and, if they agree with the
    /// source's digest, renames it over the target; otherwise removes it.
    pub(super) async fn seal(self, size: u64) -> Outcome {
        let done = blocking(move || {
            let outcome = (|| {
                self.file.sync()?;
                // What no stream summed (an earlier pull's bytes; for MD5 and the SHAs what
                // followed the first share) is read back, through a handle that can read.
                let reader = self.storage.open_read(&self.temp)?;
                let sums = self
                    .digest
                    .complete(&*reader, size)?
                    .into_iter()
                    .map(|t| (t.algorithm, t.value))
                    .collect();
                Ok(crate::put::seal(
                    &*self.storage,
                    &self.file,
                    &self.temp,
                    &self.target,
                    sums,
                    &self.expected,
                ))
            })()
            .unwrap_or_else(|e: ferry_storage::StorageError| {
                Outcome::Refused(reply::storage_status(&e), e.to_string())
            });
            if !matches!(outcome, Outcome::Stored { .. }) {
                let _ = self.storage.remove_file(&self.temp);
            }
            if let Some((_, record, _)) = &self.keep {
                let _ = self.storage.remove_file(record);
            }
            Ok(outcome)
        })
        .await;
        done.unwrap_or_else(|e| Outcome::Refused(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
    }

    /// Removes the temporary file (and a resumable landing's record).
    pub(super) async fn discard(self) {
        let record = self.keep.as_ref().map(|(_, r, _)| r.clone());
        let (s, temp) = (self.storage, self.temp);
        let removed = blocking(move || {
            if let Some(r) = record {
                let _ = s.remove_file(&r);
            }
            s.remove_file(&temp)
        })
        .await;
        if let Err(e) = removed {
            tracing::warn!(error = %e, "cannot remove a failed copy's temporary file");
        }
    }
}
