//! Comparing the two ends of a copy: checksums after a transfer (`--verify-checksum`) and the
//! `--sync` rules that skip a destination already up to date.

use std::path::Path;

use ferry_storage::{ChecksumAlgorithm, PosixStorage, Storage};

use crate::copy::{CopyOptions, SyncLevel};
use crate::plan::{display, local, Job};
use crate::request::{local_path, FileRequest};
use crate::sessions::Sessions;
use crate::url::Location;
use crate::ClientError;

/// A checksum of one end of a job.
async fn checksum_of(
    loc: &Location,
    sessions: &mut Sessions,
    alg: ChecksumAlgorithm,
    offset: u64,
    length: Option<u64>,
) -> Result<String, ClientError> {
    match loc {
        Location::Remote(r) => {
            sessions
                .get(r)
                .await?
                .checksum(&r.path, alg.name(), offset, length)
                .await
        }
        Location::Local(p) => {
            let vp = local_path(p)?;
            tokio::task::spawn_blocking(move || {
                let storage = PosixStorage::open(Path::new("/"), true)?;
                storage.checksum(&vp, alg, offset, length)
            })
            .await
            .map_err(|e| ClientError::Network(format!("checksum task failed: {e}")))?
            .map_err(ClientError::from)
        }
    }
}

/// Compares the checksums of the requested range at both ends; the value when they match.
pub(crate) async fn verify(
    src: &Location,
    dst: &Location,
    sessions: &mut Sessions,
    alg: ChecksumAlgorithm,
    req: &FileRequest,
) -> Result<String, ClientError> {
    let a = checksum_of(src, sessions, alg, req.offset, req.length).await?;
    let b = checksum_of(dst, sessions, alg, req.offset, req.length).await?;
    if a != b {
        return Err(ClientError::Verification(format!(
            "{} checksum mismatch: {} has {a}, {} has {b}; the destination is corrupt, copy it again",
            alg.name(),
            display(src),
            display(dst)
        )));
    }
    Ok(a)
}

/// Whether `--sync` finds the destination already up to date.
pub(crate) async fn up_to_date(
    job: &Job,
    sessions: &mut Sessions,
    opts: &CopyOptions,
) -> Result<bool, ClientError> {
    let size_of = |loc: &Location| -> Option<u64> {
        local(loc)
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
    };
    let dst_size = match &job.dst {
        Location::Local(_) => size_of(&job.dst),
        Location::Remote(r) => sessions.get(r).await?.size(&r.path).await.ok(),
    };
    let Some(dst_size) = dst_size else {
        return Ok(false);
    };
    if opts.sync == SyncLevel::Exists {
        return Ok(true);
    }
    let src_size = match (&job.src, job.size) {
        (_, Some(s)) => Some(s),
        (Location::Local(_), None) => size_of(&job.src),
        (Location::Remote(r), None) => sessions.get(r).await?.size(&r.path).await.ok(),
    };
    if src_size != Some(dst_size) {
        return Ok(false);
    }
    if opts.sync == SyncLevel::Size {
        return Ok(true);
    }
    let alg = opts.verify.unwrap_or(ChecksumAlgorithm::Adler32);
    let a = checksum_of(&job.src, sessions, alg, 0, None).await?;
    let b = checksum_of(&job.dst, sessions, alg, 0, None).await?;
    Ok(a == b)
}
