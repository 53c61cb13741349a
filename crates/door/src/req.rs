//! What every handler gets: the request with its path resolved beneath the root and its
//! login, and the helpers the handlers share. `request.rs` makes one and hands it to the
//! method's handler.

use std::net::SocketAddr;
use std::sync::Arc;

use ferry_proto::http::dav;
use ferry_storage::VirtualPath;
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
