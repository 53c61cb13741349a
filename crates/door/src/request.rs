//! One request: its path resolved beneath the root, its login, and the method's handler.

use std::net::SocketAddr;
use std::sync::Arc;

use ferry_proto::http::dav;
use ferry_storage::VirtualPath;
use http::{header, HeaderMap, Method, Request, StatusCode};
use hyper::body::Incoming;

use crate::context::DoorContext;
use crate::principal::{ConnAuth, Principal};
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

/// Answers one request.
pub(crate) async fn handle(
    ctx: Arc<DoorContext>,
    conn: Arc<ConnAuth>,
    splicer: Option<Splicer>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Reply {
    let method = req.method().clone();
    let started = std::time::Instant::now();
    let reply = match dispatch(&ctx, &conn, splicer, peer, req).await {
        Ok(r) | Err(r) => r,
    };
    ctx.metrics
        .request(method.as_str(), reply.status().as_u16());
    tracing::debug!(%peer, method = %method, status = reply.status().as_u16(), elapsed_ms = started.elapsed().as_millis() as u64, "http request");
    reply
}

async fn dispatch(
    ctx: &Arc<DoorContext>,
    conn: &ConnAuth,
    splicer: Option<Splicer>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Result<Reply, Reply> {
    // A body length given two ways never reaches here as such: hyper frames the request by
    // Transfer-Encoding alone and closes the connection after the answer (RFC 9112 §6.3), so
    // nothing behind the body is read as a request.
    let (parts, body) = req.into_parts();
    let (path, trailing_slash) = dav::decode_path(parts.uri.path()).map_err(|e| {
        reply::status(
            StatusCode::BAD_REQUEST,
            format!("{}: {e}", parts.uri.path()),
        )
    })?;
    let path = VirtualPath::resolve(&VirtualPath::root(), &path).map_err(|e| reply::storage(&e))?;
    let authority = parts
        .uri
        .authority()
        .map(|a| a.to_string())
        .or_else(|| {
            parts
                .headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
        })
        .unwrap_or_else(|| "localhost".into())
        .to_ascii_lowercase();
    let principal = crate::principal::principal(ctx, conn, &parts.headers).await?;
    let r = Req {
        method: parts.method,
        path,
        trailing_slash,
        headers: parts.headers,
        authority,
        scheme: if conn.is_clear() { "http" } else { "https" },
        principal,
        peer,
        splicer,
    };
    match r.method.as_str() {
        "GET" => crate::get::get(ctx, &r, false).await,
        "HEAD" => crate::get::get(ctx, &r, true).await,
        "PUT" => crate::put::put(ctx, &r, body).await,
        "OPTIONS" => Ok(crate::dav::options()),
        "DELETE" => crate::dav::delete(&r).await,
        "MKCOL" => crate::dav::mkcol(&r, body).await,
        "COPY" => crate::dav::copy_or_move(&r, false).await,
        "MOVE" => crate::dav::copy_or_move(&r, true).await,
        "PROPFIND" => crate::propfind::propfind(&r, body).await,
        "PROPPATCH" => crate::propfind::proppatch(&r, body).await,
        other => {
            let mut reply = reply::status(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{other} is not supported here"),
            );
            reply
                .headers_mut()
                .insert(header::ALLOW, header::HeaderValue::from_static(ALLOW));
            Ok(reply)
        }
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
