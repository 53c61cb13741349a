//! Third-party copies whose other party is a GridFTP or FTP server (`gsiftp://`, `ftp://`):
//! the door runs ferry's own GridFTP client (parallel MODE E streams, GSI with the credential
//! the admin gives the door for it) with its DTP writing into, or reading from, the
//! requester's storage. A site moving off GridFTP pulls from its old servers in one `COPY`.
//!
//! A pull lands under a temporary name beside the target, summed as it arrives; it is renamed
//! over the target only when it is whole and its ADLER32 matches the source's `CKSM`. A push
//! is compared the same way with the destination's `CKSM`, and removed there on a mismatch.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use ferry_client::url::Scheme;
use ferry_client::RemoteUrl;
use ferry_client::{ClientError, ErrorClass, FileRequest, GsiSetup, Progress, RemoteSession};
use ferry_proto::http::tpc::{Copy, Mode};
use ferry_storage::{ChecksumAlgorithm, FileKind, FileVersion, StorageError, VirtualPath};
use ferry_token::Operation;
use http::StatusCode;

use super::{Job, Slot};
use crate::context::DoorContext;
use crate::reply::{self, blocking, Reply};
use crate::req::Req;

/// The checksum both ends are asked for: every GridFTP server answers `CKSM ADLER32`.
const VERIFY: ChecksumAlgorithm = ChecksumAlgorithm::Adler32;

/// Runs `c`, whose remote party is a GridFTP or FTP server.
pub(super) async fn copy(
    ctx: &Arc<DoorContext>,
    r: &Req,
    c: Copy,
    slot: Slot,
) -> Result<Reply, Reply> {
    let url = RemoteUrl::parse(&c.remote)
        .map_err(|e| reply::status(StatusCode::BAD_REQUEST, format!("{}: {e}", c.remote)))?;
    let gsi = setup(ctx, &url)?;
    match c.mode {
        Mode::Pull => pull(ctx, r, c, url, gsi, slot).await,
        Mode::Push => push(ctx, r, c, url, gsi, slot).await,
    }
}

/// The GSI setup for a session with `url`'s server: the one the admin configured for
/// `gsiftp://`; none is needed for `ftp://`.
fn setup(ctx: &DoorContext, url: &RemoteUrl) -> Result<Arc<GsiSetup>, Reply> {
    if url.scheme != Scheme::GsiFtp {
        static PLAIN: OnceLock<Arc<GsiSetup>> = OnceLock::new();
        return Ok(Arc::clone(PLAIN.get_or_init(Default::default)));
    }
    ctx.gsiftp.clone().ok_or_else(|| {
        reply::status(
            StatusCode::BAD_REQUEST,
            "gsiftp:// peers are off on this server: its admin lends the door a credential for \
             them with [https] tpc-gsiftp-credential = \"host\"",
        )
    })
}

/// The failure line's words for `e`, as FTS3 and gfal2 sort them (not found, permission
/// denied and checksum mismatch are final; the rest is worth a retry).
fn words(e: &ClientError) -> String {
    match e.class() {
        ErrorClass::NotFound => format!("No such file or directory: {e}"),
        ErrorClass::Auth => format!("Permission denied: {e}"),
        ErrorClass::Verification => format!("checksum mismatch: {e}"),
        _ => e.to_string(),
    }
}

/// `e` answered before the copy begins: 404, 403 or 502 with its failure line.
fn refused(e: &ClientError, remote: &str) -> Reply {
    let status = match e.class() {
        ErrorClass::NotFound => StatusCode::NOT_FOUND,
        ErrorClass::Auth => StatusCode::FORBIDDEN,
        ErrorClass::Usage => StatusCode::BAD_REQUEST,
        _ => StatusCode::BAD_GATEWAY,
    };
    reply::status(
        status,
        ferry_proto::http::tpc::failure(&format!("{}, remote={remote}", words(e))).trim_end(),
    )
}

async fn connect(url: &RemoteUrl, gsi: &GsiSetup) -> Result<RemoteSession, ClientError> {
    tokio::time::timeout(
        super::client::CONNECT_TIMEOUT,
        RemoteSession::connect(url, gsi),
    )
    .await
    .map_err(|_| {
        ClientError::Network(format!(
            "{}: no login in {} s",
            url.authority(),
            super::client::CONNECT_TIMEOUT.as_secs()
        ))
    })?
}

/// The transfer's request: `X-Number-Of-Streams` streams, or ferry's choice for the size and
/// the path's round trip.
fn request(c: &Copy, session: &RemoteSession, size: u64) -> FileRequest {
    FileRequest {
        parallelism: match c.streams {
            0 => session.auto_streams(Some(size)),
            n => n,
        },
        ..FileRequest::default()
    }
}

fn counter(moved: &Arc<AtomicU64>) -> impl FnMut(Progress) + Send + 'static {
    let moved = Arc::clone(moved);
    move |p| {
        if let Progress::Bytes(n) = p {
            moved.store(n, Ordering::Relaxed);
        }
    }
}

async fn pull(
    ctx: &Arc<DoorContext>,
    r: &Req,
    c: Copy,
    url: RemoteUrl,
    gsi: Arc<GsiSetup>,
    slot: Slot,
) -> Result<Reply, Reply> {
    r.writable()?;
    r.may_write(&r.path).await?;
    let storage = Arc::clone(&r.principal.storage);
    super::refuse_existing(&storage, &r.path, c.overwrite).await?;
    let Some(dir) = r.path.parent() else {
        return Err(reply::status(
            StatusCode::METHOD_NOT_ALLOWED,
            "the root is a collection",
        ));
    };
    let (s, t) = (Arc::clone(&storage), r.path.clone());
    let (temp, _) = blocking(move || crate::put::temp_beside(&*s, &dir, &t))
        .await
        .map_err(|e| reply::storage(&e))?;
    let mut session = connect(&url, &gsi)
        .await
        .map_err(|e| refused(&e, &c.remote))?;
    let size = session
        .size(&url.path)
        .await
        .map_err(|e| refused(&e, &c.remote))?;
    let mut req = request(&c, &session, size);
    req.checksums = ctx.transfer_checksums.clone();
    if !req.checksums.contains(&VERIFY) {
        req.checksums.push(VERIFY);
    }
    session.use_storage(Arc::clone(&storage));
    let (job, reply) = Job::new(ctx, r, &c.remote, Some(session.peer()), slot);
    let target = r.path.clone();
    tokio::spawn(async move {
        let moved = Arc::new(AtomicU64::new(0));
        let mut count = counter(&moved);
        let local = Path::new(temp.as_str()).to_path_buf();
        let get = session.get(&url.path, &local, &req, &mut count);
        let get = async { get.await.map_err(|e| words(&e)) };
        let Some(result) = job.watch("COPY-PULL", &moved, get).await else {
            discard(&storage, temp).await;
            return;
        };
        let result = match result {
            Ok(outcome) => {
                let verify = c.verify_checksum != Some(false);
                let sums: Vec<(ChecksumAlgorithm, String)> = outcome
                    .checksums
                    .iter()
                    .map(|t| (t.algorithm, t.value.clone()))
                    .collect();
                match check_source(&mut session, &url.path, &sums, verify).await {
                    Ok(()) => keep(&storage, &temp, &target, size, sums).await,
                    Err(why) => Err(why),
                }
            }
            Err(why) => Err(why),
        };
        if result.is_err() {
            discard(&storage, temp).await;
        }
        conclude(job, session, "COPY-PULL", size, &moved, result).await;
    });
    Ok(reply)
}

/// Ends a copy of `size` bytes: the session closed, then the copy's last marker and line
/// (with what `moved` counted where it failed).
async fn conclude(
    job: Job,
    session: RemoteSession,
    method: &str,
    size: u64,
    moved: &AtomicU64,
    result: Result<(), String>,
) {
    session.close().await;
    let bytes = if result.is_ok() {
        size
    } else {
        moved.load(Ordering::Relaxed)
    };
    job.end(method, bytes, result).await;
}

/// Whether the source's ADLER32 is the one the bytes arrived with; a source that cannot say
/// fails the copy only where the client required the check.
async fn check_source(
    session: &mut RemoteSession,
    path: &str,
    sums: &[(ChecksumAlgorithm, String)],
    required: bool,
) -> Result<(), String> {
    let here = sums.iter().find(|(a, _)| *a == VERIFY).map(|(_, v)| v);
    match (session.checksum(path, VERIFY.name(), 0, None).await, here) {
        (Ok(there), Some(here)) if there.eq_ignore_ascii_case(here) => Ok(()),
        (Ok(there), Some(here)) => Err(format!(
            "checksum mismatch: the source's adler32 is {there}, the bytes that arrived have {here}"
        )),
        (Ok(_), None) => Err("the bytes that arrived could not be summed".into()),
        (Err(e), _) if required => Err(format!(
            "the source gave no adler32 to verify the copy with: {e}"
        )),
        (Err(_), _) => Ok(()),
    }
}

/// Renames the whole `temp` (of `size` bytes) over `target` and keeps its checksums.
async fn keep(
    storage: &Arc<dyn ferry_storage::Storage>,
    temp: &VirtualPath,
    target: &VirtualPath,
    size: u64,
    sums: Vec<(ChecksumAlgorithm, String)>,
) -> Result<(), String> {
    let (s, temp, target) = (Arc::clone(storage), temp.clone(), target.clone());
    let got = blocking(move || {
        let got = s.stat(&temp)?.size;
        if got == size {
            let file = s.open_read(&temp)?;
            let version = FileVersion::of(&*file);
            file.sync()?;
            s.rename(&temp, &target)?;
            if let Some(v) = version {
                s.remember_checksums(&file, v, &sums);
            }
        }
        Ok(got)
    })
    .await
    .map_err(|e| e.to_string())?;
    if got != size {
        return Err(format!("the source sent {got} of its {size} bytes"));
    }
    Ok(())
}

async fn discard(storage: &Arc<dyn ferry_storage::Storage>, temp: VirtualPath) {
    let s = Arc::clone(storage);
    let _ = blocking(move || match s.remove_file(&temp) {
        Err(StorageError::NotFound(_)) => Ok(()),
        other => other,
    })
    .await
    .inspect_err(|e| tracing::warn!(error = %e, "cannot remove a failed copy's temporary file"));
}

async fn push(
    ctx: &Arc<DoorContext>,
    r: &Req,
    c: Copy,
    url: RemoteUrl,
    gsi: Arc<GsiSetup>,
    slot: Slot,
) -> Result<Reply, Reply> {
    r.may(Operation::Read, &r.path)?;
    let storage = Arc::clone(&r.principal.storage);
    let (s, p) = (Arc::clone(&storage), r.path.clone());
    let size = blocking(move || {
        let m = s.stat(&p)?;
        if m.kind != FileKind::File {
            return Err(StorageError::IsADirectory(p.to_string()));
        }
        Ok(m.size)
    })
    .await
    .map_err(|e| reply::storage(&e))?;
    let mut session = connect(&url, &gsi)
        .await
        .map_err(|e| refused(&e, &c.remote))?;
    if !c.overwrite && session.size(&url.path).await.is_ok() {
        return Err(reply::status(
            StatusCode::PRECONDITION_FAILED,
            format!("{}: File exists, and Overwrite is F", c.remote),
        ));
    }
    let req = request(&c, &session, size);
    session.use_storage(Arc::clone(&storage));
    let (job, reply) = Job::new(ctx, r, &c.remote, Some(session.peer()), slot);
    let source = r.path.clone();
    tokio::spawn(async move {
        let moved = Arc::new(AtomicU64::new(0));
        let mut count = counter(&moved);
        let local = Path::new(source.as_str()).to_path_buf();
        let put = session.put(&local, &url.path, &req, &mut count);
        let put = async { put.await.map_err(|e| words(&e)) };
        let Some(result) = job.watch("COPY-PUSH", &moved, put).await else {
            return;
        };
        let result = match result {
            Ok(_) if c.verify_checksum == Some(false) => Ok(()),
            Ok(_) => check_destination(&storage, &source, &mut session, &url.path).await,
            Err(why) => Err(why),
        };
        conclude(job, session, "COPY-PUSH", size, &moved, result).await;
    });
    Ok(reply)
}

/// Whether the destination's ADLER32 is this file's; a mismatched copy is removed there.
async fn check_destination(
    storage: &Arc<dyn ferry_storage::Storage>,
    local: &VirtualPath,
    session: &mut RemoteSession,
    path: &str,
) -> Result<(), String> {
    let (s, p) = (Arc::clone(storage), local.clone());
    let here = blocking(move || s.checksum(&p, VERIFY, 0, None))
        .await
        .map_err(|e| format!("cannot sum the file sent: {e}"))?;
    match session.checksum(path, VERIFY.name(), 0, None).await {
        Ok(there) if there.eq_ignore_ascii_case(&here) => Ok(()),
        Ok(there) => {
            let _ = session.remove(path, false).await;
            Err(format!(
                "checksum mismatch: the file's adler32 is {here}, the destination's {there}; removed there"
            ))
        }
        // A destination without CKSM (a plain FTP server) is taken at its word.
        Err(_) => Ok(()),
    }
}
