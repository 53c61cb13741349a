//! Comparing the two ends of a copy: checksums after a transfer (`--verify-checksum`) and the
//! `--sync` rules that skip a destination already up to date.

use std::path::Path;

use ferry_storage::{ChecksumAlgorithm, PosixStorage, Storage};

use crate::options::{CopyOptions, Ends, SyncLevel, Verify};
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

/// What verification found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Checked {
    /// Both ends have this value.
    Same(String),
    /// An end cannot answer: why, for a warning.
    Unverified(String),
}

/// Lower case, and the 32-bit sums at their full 8 digits, so `1a2b3c` and `001A2B3C` agree.
pub(crate) fn normalize(alg: ChecksumAlgorithm, value: &str) -> String {
    let v = value.trim().to_ascii_lowercase();
    match alg {
        ChecksumAlgorithm::Adler32 | ChecksumAlgorithm::Crc32c if v.len() < 8 => {
            format!("{v:0>8}")
        }
        _ => v,
    }
}

/// Compares the checksums of the requested range at both ends, using `local` (what the
/// client's own end summed while the bytes moved) for a local end and asking both servers of a
/// third-party copy at once. On a mismatch the destination is removed (a whole file) and the
/// error names both values.
pub(crate) async fn verify(
    src: &Location,
    dst: &Location,
    sessions: &mut Sessions,
    v: &Verify,
    req: &FileRequest,
    local: &[ferry_dtp::digest::Taken],
) -> Result<Checked, ClientError> {
    let alg = v.algorithm;
    let (ask_src, ask_dst) = ends_asked(v);
    let (a, b) = match (src, dst) {
        (Location::Remote(s), Location::Remote(d)) if ask_src && ask_dst => {
            let (x, y) = sessions.pair(s, d).await?;
            let (a, b) = tokio::join!(
                x.checksum(&s.path, alg.name(), req.offset, req.length),
                y.checksum(&d.path, alg.name(), req.offset, req.length)
            );
            (Some(a), Some(b))
        }
        _ => {
            let a = answer(src, ask_src, None, local, sessions, alg, req).await;
            (
                a,
                answer(dst, ask_dst, None, local, sessions, alg, req).await,
            )
        }
    };
    judge(src, dst, sessions, v, req, a, b).await
}

/// [`verify`] for a pipeline's files, all between the same two ends: each server is asked for
/// every file's checksum in one pipelined exchange (both servers of a third-party copy at once),
/// not a round trip per file. Falls back to [`verify`] file by file where a server's session
/// fails part way.
pub(crate) async fn verify_all(
    items: &[(&Location, &Location, &[ferry_dtp::digest::Taken])],
    sessions: &mut Sessions,
    v: &Verify,
    req: &FileRequest,
) -> Vec<Result<Checked, ClientError>> {
    let mut out = Vec::with_capacity(items.len());
    if items.is_empty() {
        return out;
    }
    let asked = match asked_all(items, sessions, v, req).await {
        Ok(asked) => asked,
        Err(e) => {
            tracing::debug!("pipelined CKSM failed ({e}); asking file by file");
            for (src, dst, local) in items {
                out.push(verify(src, dst, sessions, v, req, local).await);
            }
            return out;
        }
    };
    for ((src, dst, _), (a, b)) in items.iter().zip(asked) {
        out.push(judge(src, dst, sessions, v, req, a, b).await);
    }
    out
}

/// One end's answer, where it was asked.
type Answer = Option<Result<String, ClientError>>;

/// Every item's source and destination checksums (where the mode asks them): local ends from
/// what the client summed (or the file), remote ends in one pipelined `CKSM` exchange per server.
async fn asked_all<'a>(
    items: &[(&'a Location, &'a Location, &[ferry_dtp::digest::Taken])],
    sessions: &mut Sessions,
    v: &Verify,
    req: &FileRequest,
) -> Result<Vec<(Answer, Answer)>, ClientError> {
    let alg = v.algorithm;
    let (ask_src, ask_dst) = ends_asked(v);
    let remote = |src: bool| {
        let urls: Vec<&'a crate::url::RemoteUrl> = items
            .iter()
            .filter_map(|i| match if src { i.0 } else { i.1 } {
                Location::Remote(r) => Some(r),
                Location::Local(_) => None,
            })
            .collect();
        let one_server = urls.windows(2).all(|w| w[0].same_server(w[1]));
        (!urls.is_empty() && urls.len() == items.len() && one_server).then_some(urls)
    };
    let (src_urls, dst_urls) = (remote(true), remote(false));
    let paths = |urls: &Option<Vec<&'a crate::url::RemoteUrl>>| -> Vec<&'a str> {
        urls.iter().flatten().map(|u| u.path.as_str()).collect()
    };
    let (sp, dp) = (paths(&src_urls), paths(&dst_urls));
    let (name, offset, length) = (alg.name(), req.offset, req.length);
    let (mut a, mut b): (Option<Vec<_>>, Option<Vec<_>>) = (None, None);
    match (&src_urls, &dst_urls) {
        (Some(s), Some(d)) if ask_src && ask_dst => {
            let (x, y) = sessions.pair(s[0], d[0]).await?;
            let (ra, rb) = tokio::join!(
                x.checksums(&sp, name, offset, length),
                y.checksums(&dp, name, offset, length)
            );
            (a, b) = (Some(ra?), Some(rb?));
        }
        _ => {
            for (urls, asked, paths, out) in [
                (&src_urls, ask_src, &sp, &mut a),
                (&dst_urls, ask_dst, &dp, &mut b),
            ] {
                if let (Some(u), true) = (urls, asked) {
                    let session = sessions.get(u[0]).await?;
                    *out = Some(session.checksums(paths, name, offset, length).await?);
                }
            }
        }
    }
    let (mut a, mut b) = (a.map(Vec::into_iter), b.map(Vec::into_iter));
    let mut out = Vec::with_capacity(items.len());
    for (src, dst, local) in items {
        let (pa, pb) = (
            a.as_mut().and_then(Iterator::next),
            b.as_mut().and_then(Iterator::next),
        );
        let sa = answer(src, ask_src, pa, local, sessions, alg, req).await;
        let sb = answer(dst, ask_dst, pb, local, sessions, alg, req).await;
        out.push((sa, sb));
    }
    Ok(out)
}

/// One end's checksum where it is asked: as the pipeline answered, else as the client summed
/// it while the bytes moved, else asked on its own.
async fn answer(
    loc: &Location,
    asked: bool,
    piped: Answer,
    local: &[ferry_dtp::digest::Taken],
    sessions: &mut Sessions,
    alg: ChecksumAlgorithm,
    req: &FileRequest,
) -> Answer {
    if !asked || piped.is_some() {
        return piped.filter(|_| asked);
    }
    Some(match known(loc, local, alg, req) {
        Some(value) => Ok(value),
        None => checksum_of(loc, sessions, alg, req.offset, req.length).await,
    })
}

/// Which ends a verification asks: both, unless FTS3's mode names one and a value is given.
fn ends_asked(v: &Verify) -> (bool, bool) {
    match (v.ends, &v.expected) {
        (Ends::Source, Some(_)) => (true, false),
        (Ends::Destination, Some(_)) => (false, true),
        _ => (true, true),
    }
}

/// What the client's own end summed while the bytes moved (a whole-file copy's local end).
fn known(
    loc: &Location,
    local: &[ferry_dtp::digest::Taken],
    alg: ChecksumAlgorithm,
    req: &FileRequest,
) -> Option<String> {
    match loc {
        Location::Local(_) if !req.is_partial() => local
            .iter()
            .find(|t| t.algorithm == alg)
            .map(|t| t.value.clone()),
        _ => None,
    }
}

/// Compares what the ends answered (and the expected value); on a mismatch removes the
/// destination (a whole file) and names both values.
async fn judge(
    src: &Location,
    dst: &Location,
    sessions: &mut Sessions,
    v: &Verify,
    req: &FileRequest,
    a: Answer,
    b: Answer,
) -> Result<Checked, ClientError> {
    let alg = v.algorithm;
    let a = match a {
        Some(Ok(a)) => Some(normalize(alg, &a)),
        Some(Err(e)) => return unanswered(src, e, v),
        None => None,
    };
    let b = match b {
        Some(Ok(b)) => Some(normalize(alg, &b)),
        Some(Err(e)) => return unanswered(dst, e, v),
        None => None,
    };
    let name = alg.name();
    let expected = v.expected.as_deref().map(|e| normalize(alg, e));
    let problem = match (&a, &b, &expected) {
        (Some(a), _, Some(e)) if a != e => Some(format!(
            "{name} of the source {} is {a}, not the expected {e}",
            display(src)
        )),
        (Some(a), Some(b), Some(_)) if a != b => Some(format!(
            "{name} checksum mismatch: {} has {b}, the expected value (and the source's) is {a}",
            display(dst)
        )),
        (None, Some(b), Some(e)) if b != e => Some(format!(
            "{name} checksum mismatch: {} has {b}, the expected value is {e}",
            display(dst)
        )),
        (Some(a), Some(b), None) if a != b => Some(format!(
            "{name} checksum mismatch: {} has {a}, {} has {b}",
            display(src),
            display(dst)
        )),
        _ => None,
    };
    // One end at least was summed (both, or the one the mode names).
    let a = a.or(b).unwrap_or_default();
    match problem {
        None => Ok(Checked::Same(a)),
        Some(p) => Err(ClientError::Verification(format!(
            "{p}; {}",
            discard(dst, sessions, req).await
        ))),
    }
}

/// A failed `CKSM`: an error, or with the default verification and a server that does not
/// know the command or the algorithm, the reason for a warning.
fn unanswered(loc: &Location, e: ClientError, v: &Verify) -> Result<Checked, ClientError> {
    match (&e, loc) {
        (ClientError::Refused { reply, .. }, Location::Remote(r))
            if !v.required && reply.code >= 500 =>
        {
            Ok(Checked::Unverified(format!(
                "{} does not answer CKSM {} ({} {}): copies with it are not verified",
                r.authority(),
                v.algorithm.name(),
                reply.code,
                reply.text().trim()
            )))
        }
        _ => Err(e),
    }
}

/// Removes a destination whose bytes are wrong, so no file that looks complete is left; says
/// what became of it. A partial copy's destination holds other data and is kept.
async fn discard(dst: &Location, sessions: &mut Sessions, req: &FileRequest) -> String {
    if req.is_partial() {
        return format!("the range at {} is wrong; copy it again", display(dst));
    }
    let removed = match dst {
        // Only a regular file is ever removed (never a device a copy was pointed at).
        Location::Local(p) if !std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()) => {
            return format!("{} is not a regular file and was left alone", p.display());
        }
        Location::Remote(r) if r.path.starts_with("/dev/") => {
            return format!("{} was left alone", display(dst));
        }
        Location::Local(p) => std::fs::remove_file(p).map_err(ClientError::from),
        Location::Remote(r) => match sessions.get(r).await {
            Ok(s) => s.remove(&r.path, false).await,
            Err(e) => Err(e),
        },
    };
    match removed {
        Ok(()) => format!("removed {}; copy it again", display(dst)),
        Err(e) => format!("could not remove {} ({e}): do not use it", display(dst)),
    }
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
    let alg = opts
        .verify
        .as_ref()
        .map_or(ChecksumAlgorithm::Adler32, |v| v.algorithm);
    let a = checksum_of(&job.src, sessions, alg, 0, None).await?;
    let b = checksum_of(&job.dst, sessions, alg, 0, None).await?;
    Ok(a == b)
}

/// A file's modification time (seconds since the epoch) and permission bits, as `--preserve`
/// carries them from the source to the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Attributes {
    mtime: Option<i64>,
    mode: Option<u32>,
}

async fn attributes_of(loc: &Location, sessions: &mut Sessions) -> Result<Attributes, ClientError> {
    match loc {
        Location::Local(p) => {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(p)?;
            Ok(Attributes {
                mtime: Some(m.mtime()),
                mode: Some(m.mode() & 0o7777),
            })
        }
        Location::Remote(r) => {
            let e = sessions.get(r).await?.stat(&r.path).await?;
            Ok(Attributes {
                mtime: e
                    .modify
                    .as_deref()
                    .and_then(ferry_proto::civil::parse_timestamp),
                mode: e
                    .mode
                    .as_deref()
                    .and_then(|m| u32::from_str_radix(m, 8).ok())
                    .map(|m| m & 0o7777),
            })
        }
    }
}

/// Gives the destination the source's modification time and permission bits (scp's `-p`):
/// `MFMT` and `SITE CHMOD` on a server, `utimes` and `chmod` locally. What an end cannot say
/// or set comes back as a sentence for a warning; the copy itself stands.
pub(crate) async fn preserve(
    src: &Location,
    dst: &Location,
    sessions: &mut Sessions,
) -> Result<Option<String>, ClientError> {
    let a = attributes_of(src, sessions).await?;
    let mut missing = Vec::new();
    match dst {
        Location::Local(p) => {
            if let Some(t) = a.mtime {
                let when = std::time::UNIX_EPOCH
                    + std::time::Duration::from_secs(u64::try_from(t).unwrap_or(0));
                std::fs::File::options()
                    .write(true)
                    .open(p)?
                    .set_modified(when)?;
            }
            if let Some(m) = a.mode {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(m))?;
            }
        }
        Location::Remote(r) => {
            let s = sessions.get(r).await?;
            if let Some(mtime) = a.mtime {
                let cmd = ferry_proto::Command::Mfmt {
                    mtime,
                    path: r.path.clone(),
                };
                if s.expect_ok(&cmd).await.is_err() {
                    missing.push("its modification time (MFMT refused)");
                }
            }
            if let Some(mode) = a.mode {
                let cmd = ferry_proto::Command::Site(ferry_proto::site::SiteCommand::Chmod {
                    mode,
                    path: r.path.clone(),
                });
                if s.expect_ok(&cmd).await.is_err() {
                    missing.push("its mode (SITE CHMOD refused)");
                }
            }
        }
    }
    if a.mtime.is_none() {
        missing.push("the source's modification time (not given)");
    }
    if a.mode.is_none() {
        missing.push("the source's mode (not given)");
    }
    Ok((!missing.is_empty()).then(|| {
        format!(
            "{}: could not preserve {}",
            display(dst),
            missing.join(", ")
        )
    }))
}
