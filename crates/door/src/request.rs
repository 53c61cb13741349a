//! One request: its path resolved beneath the root, its login, and the method's handler.

use std::net::SocketAddr;
use std::sync::Arc;

use ferry_proto::http::dav;
use ferry_storage::VirtualPath;
use http::{header, Request, StatusCode};
use hyper::body::Incoming;

use crate::context::DoorContext;
use crate::principal::ConnAuth;
use crate::reply::{self, Reply};
use crate::req::{Req, ALLOW};
use crate::zerocopy::Splicer;

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
    let principal = match crate::principal::principal(ctx, conn, &parts.headers).await {
        Ok(p) => p,
        Err(refused) => return Err(crate::req::refuse_unread(body, refused).await),
    };
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
        "POST" => crate::macaroon::post(ctx, &r, body).await,
        "DELETE" => crate::dav::delete(&r).await,
        "MKCOL" => crate::dav::mkcol(&r, body).await,
        "COPY" => match crate::tpc::third_party(&r)? {
            Some(c) => crate::tpc::copy(ctx, &r, c).await,
            None => crate::dav::copy_or_move(&r, false).await,
        },
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
