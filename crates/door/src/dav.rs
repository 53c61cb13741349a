//! WebDAV's namespace methods within the door (RFC 4918 §9): OPTIONS, DELETE, MKCOL, and COPY
//! and MOVE to a `Destination` on this server.

use std::sync::Arc;

use ferry_proto::http::dav::{self, Depth};
use ferry_storage::{FileKind, Storage, StorageError, VirtualPath, WriteOptions};
use ferry_token::Operation;
use http::{header, HeaderValue, StatusCode};
use hyper::body::Incoming;

use crate::reply::{self, blocking, Reply};
use crate::req::{Req, ALLOW};

/// OPTIONS: WebDAV class 1 (no locks), the methods, byte ranges.
pub(crate) fn options() -> Reply {
    let mut r = reply::empty(StatusCode::OK);
    let h = r.headers_mut();
    h.insert("dav", HeaderValue::from_static("1"));
    h.insert(header::ALLOW, HeaderValue::from_static(ALLOW));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    r
}

/// The collection `path` goes into; a missing parent (or a file in its place) is
/// `NotADirectory`, which answers 409 as RFC 4918 asks.
pub(crate) fn parent_collection(
    s: &dyn Storage,
    path: &VirtualPath,
) -> Result<VirtualPath, StorageError> {
    let parent = path.parent().unwrap_or_else(VirtualPath::root);
    match s.stat(&parent) {
        Ok(m) if m.kind == FileKind::Dir => Ok(parent),
        Ok(_) | Err(StorageError::NotFound(_)) => Err(StorageError::NotADirectory(format!(
            "{parent} (the parent collection does not exist)"
        ))),
        Err(e) => Err(e),
    }
}

/// DELETE: a file, or a collection and everything in it.
pub(crate) async fn delete(r: &Req) -> Result<Reply, Reply> {
    r.writable()?;
    match dav::depth(r.header("depth")) {
        Ok(None | Some(Depth::Infinity)) => {}
        _ => {
            return Err(reply::status(
                StatusCode::BAD_REQUEST,
                "DELETE takes Depth: infinity or none",
            ))
        }
    }
    if r.path.is_root() {
        return Err(reply::status(
            StatusCode::FORBIDDEN,
            "the root is not deleted",
        ));
    }
    r.may(Operation::Delete, &r.path)?;
    let (s, p) = (Arc::clone(&r.principal.storage), r.path.clone());
    blocking(move || {
        let m = s.symlink_metadata(&p)?;
        if m.kind == FileKind::Dir {
            s.remove_tree(&p)
        } else {
            s.remove_file(&p)
        }
    })
    .await
    .map_err(|e| reply::storage(&e))?;
    Ok(reply::empty(StatusCode::NO_CONTENT))
}

/// MKCOL: one collection, whose parent must exist; no body.
pub(crate) async fn mkcol(r: &Req, body: Incoming) -> Result<Reply, Reply> {
    r.writable()?;
    r.may(Operation::Mkdir, &r.path)?;
    let has_body = r.headers.contains_key(header::TRANSFER_ENCODING)
        || r.header(header::CONTENT_LENGTH)
            .is_some_and(|l| l.trim() != "0");
    if has_body {
        // Read (a little of) it so the connection stays usable, then refuse.
        let _ = crate::req::small_body(body, 64 * 1024).await;
        return Err(reply::status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "MKCOL with a body is not supported",
        ));
    }
    let (s, p) = (Arc::clone(&r.principal.storage), r.path.clone());
    blocking(move || {
        if s.symlink_metadata(&p).is_ok() {
            return Err(StorageError::AlreadyExists(p.to_string()));
        }
        parent_collection(&*s, &p)?;
        s.mkdir(&p)
    })
    .await
    .map_err(|e| reply::storage(&e))?;
    Ok(reply::empty(StatusCode::CREATED))
}

/// COPY (`is_move == false`) or MOVE to a `Destination` on this server.
pub(crate) async fn copy_or_move(r: &Req, is_move: bool) -> Result<Reply, Reply> {
    r.writable()?;
    let method = if is_move { "MOVE" } else { "COPY" };
    let dest = r
        .header("destination")
        .ok_or_else(|| {
            reply::status(
                StatusCode::BAD_REQUEST,
                format!("{method} needs a Destination"),
            )
        })
        .and_then(|d| {
            dav::target(d)
                .map_err(|e| reply::status(StatusCode::BAD_REQUEST, format!("Destination: {e}")))
        })?;
    if dest.authority.as_deref().is_some_and(|a| a != r.authority) {
        return Err(reply::status(
            StatusCode::BAD_GATEWAY,
            format!(
                "Destination {} is on another server: this server copies only within itself",
                dest.authority.as_deref().unwrap_or_default()
            ),
        ));
    }
    let overwrite = dav::overwrite(r.header("overwrite"))
        .map_err(|e| reply::status(StatusCode::BAD_REQUEST, e))?;
    let depth = dav::depth(r.header("depth"))
        .map_err(|e| reply::status(StatusCode::BAD_REQUEST, e))?
        .unwrap_or(Depth::Infinity);
    if is_move && depth != Depth::Infinity || depth == Depth::One {
        return Err(reply::status(
            StatusCode::BAD_REQUEST,
            format!("{method} takes Depth: infinity (or 0 for a COPY)"),
        ));
    }
    let to =
        VirtualPath::resolve(&VirtualPath::root(), &dest.path).map_err(|e| reply::storage(&e))?;
    let from = r.path.clone();
    if to == from {
        return Err(reply::status(
            StatusCode::FORBIDDEN,
            "the source and the destination are the same",
        ));
    }
    if to.as_str().starts_with(&format!("{}/", from.as_str())) || from.is_root() {
        return Err(reply::status(
            StatusCode::FORBIDDEN,
            "a collection cannot be copied or moved into itself",
        ));
    }
    if is_move {
        r.may(Operation::Rename, &from)?;
        r.may(Operation::Rename, &to)?;
    } else {
        r.may(Operation::Read, &from)?;
    }
    r.may_write(&to).await?;
    let s = Arc::clone(&r.principal.storage);
    let replaced = blocking(move || {
        let src = s.symlink_metadata(&from)?;
        parent_collection(&*s, &to)?;
        let replaced = match s.symlink_metadata(&to) {
            Ok(m) => {
                if !overwrite {
                    return Err(StorageError::AlreadyExists(to.to_string()));
                }
                if m.kind == FileKind::Dir {
                    s.remove_tree(&to)?;
                } else {
                    s.remove_file(&to)?;
                }
                true
            }
            Err(StorageError::NotFound(_)) => false,
            Err(e) => return Err(e),
        };
        if is_move {
            s.rename(&from, &to)?;
        } else if src.kind == FileKind::Dir {
            copy_tree(&*s, &from, &to, depth == Depth::Infinity)?;
        } else {
            copy_file(&*s, &from, &to)?;
        }
        Ok(replaced)
    })
    .await
    .map_err(|e| match e {
        // Overwrite: F onto something that exists.
        StorageError::AlreadyExists(p) => reply::status(
            StatusCode::PRECONDITION_FAILED,
            format!("{p} exists and Overwrite is F"),
        ),
        e => reply::storage(&e),
    })?;
    Ok(reply::empty(if replaced {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    }))
}

fn copy_file(s: &dyn Storage, from: &VirtualPath, to: &VirtualPath) -> Result<(), StorageError> {
    let src = s.open_read(from)?;
    let dst = s.open_write(
        to,
        WriteOptions {
            create: true,
            truncate: true,
            create_new: false,
        },
    )?;
    let mut buf = vec![0u8; ferry_dtp::IO_CHUNK];
    let mut at = 0u64;
    loop {
        let n = src.read_at(&mut buf, at)?;
        if n == 0 {
            break;
        }
        dst.write_all_at(&buf[..n], at)?;
        at += n as u64;
    }
    dst.sync()?;
    copy_properties(s, from, to)
}

/// The dead properties go with a copy (a rename keeps them by itself).
fn copy_properties(
    s: &dyn Storage,
    from: &VirtualPath,
    to: &VirtualPath,
) -> Result<(), StorageError> {
    match s.dead_properties(from)? {
        Some(v) => s.set_dead_properties(to, Some(&v)),
        None => Ok(()),
    }
}

fn copy_tree(
    s: &dyn Storage,
    from: &VirtualPath,
    to: &VirtualPath,
    members: bool,
) -> Result<(), StorageError> {
    s.mkdir(to)?;
    copy_properties(s, from, to)?;
    if !members {
        return Ok(());
    }
    for e in s.list(from)? {
        let (f, t) = (from.join(&e.name)?, to.join(&e.name)?);
        match e.metadata.kind {
            FileKind::Dir => copy_tree(s, &f, &t, true)?,
            FileKind::File => copy_file(s, &f, &t)?,
            // Links and special files are not copied, as GridFTP's recursive copies skip them.
            _ => {}
        }
    }
    Ok(())
}
