//! What every handler gets: the request with its path resolved beneath the root and its
//! login, and the helpers the handlers share. `request.rs` makes one and hands it to the
//! method's handler.

use std::net::SocketAddr;
use std::sync::Arc;

use ferry_proto::http::dav;
use ferry_storage::VirtualPath;
use ferry_token::Operation;
use http::{header, HeaderMap, Method, StatusCode};
use hyper::body::Incoming;

use crate::principal::Principal;
use crate::reply::{self, Reply};
use crate::zerocopy::Splicer;

/// Methods this door answers, for `Allow`.
pub(crate) const ALLOW: &str =
    "OPTIONS, GET, HEAD, PUT, DELETE, MKCOL, MOVE, COPY, PROPFIND, PROPPATCH";

/// What every handler gets.
#[derive(Debug)]
pub(crate) struct Req {
    pub(crate) method: Method,
    /// The path, beneath the root.
    pub(crate) path: VirtualPath,
    /// The request named a collection (`…/`).
    pub(crate) trailing_slash: bool,
    pub(crate) headers: HeaderMap,
    /// `host[:port]` the client addressed (for `href`s and same-server checks).
    pub(crate) authority: String,
    /// `https`, or `http` on the clear-text listener.
    pub(crate) scheme: &'static str,
    pub(crate) principal: Arc<Principal>,
    pub(crate) peer: SocketAddr,
    /// Where file bodies can go by `sendfile` (clear-text HTTP/1.1 connections).
    pub(crate) splicer: Option<Splicer>,
}

impl Req {
    /// A header's value, if it is there and text.
    pub(crate) fn header(&self, name: impl header::AsHeaderName) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The URL of `path` for an `href` (collections end in `/`).
    pub(crate) fn href(&self, path: &VirtualPath, collection: bool) -> String {
        let mut p = dav::encode_path(path.as_str());
        if collection && !p.ends_with('/') {
            p.push('/');
        }
        format!("{}://{}{p}", self.scheme, self.authority)
    }

    /// Refuses with 403 what the login's bearer token does not grant: `op` on `path`.
    /// Certificate, password and anonymous logins are decided by their account alone.
    pub(crate) fn may(&self, op: Operation, path: &VirtualPath) -> Result<(), Reply> {
        let Some(token) = &self.principal.token else {
            return Ok(());
        };
        token.may(op, path.as_str()).map_err(|needs| {
            reply::status(
                StatusCode::FORBIDDEN,
                format!("the token does not grant {needs} on {path}"),
            )
        })
    }

    /// [`Req::may`] for writing `path`: creating it, or overwriting it where it is there.
    pub(crate) async fn may_write(&self, path: &VirtualPath) -> Result<(), Reply> {
        if self.principal.token.is_none() {
            return Ok(());
        }
        let (s, p) = (Arc::clone(&self.principal.storage), path.clone());
        let exists = tokio::task::spawn_blocking(move || s.symlink_metadata(&p).is_ok())
            .await
            .unwrap_or(true);
        self.may(
            if exists {
                Operation::Overwrite
            } else {
                Operation::Create
            },
            path,
        )
    }

    /// Refuses a write by a read-only login.
    pub(crate) fn writable(&self) -> Result<(), Reply> {
        if self.principal.read_only {
            return Err(reply::status(
                StatusCode::FORBIDDEN,
                "this login is read-only",
            ));
        }
        Ok(())
    }
}

/// Answers `refusal` to a request whose body was not read, reading (and dropping) what the
/// client has already sent of it, up to 1 MiB or 2 s: a client that sent its body at once then
/// reads the answer, where an unread body would have made HTTP/2 reset the stream (and HTTP/1.1
/// close the connection) under it. A larger body is left to the connection's close.
pub(crate) async fn refuse_unread(body: Incoming, refusal: Reply) -> Reply {
    let drained = small_body(body, 1 << 20);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), drained).await;
    refusal
}

/// Reads a small request body (XML), refusing one over `limit` bytes with 413.
pub(crate) async fn small_body(body: Incoming, limit: usize) -> Result<bytes::Bytes, Reply> {
    use http_body_util::BodyExt as _;
    let limited = http_body_util::Limited::new(body, limit);
    match limited.collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(reply::status(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request bodies here are at most {limit} bytes"),
            ))
        }
        Err(e) => Err(reply::status(StatusCode::BAD_REQUEST, e)),
    }
}
