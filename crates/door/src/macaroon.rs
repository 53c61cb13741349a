//! `POST` with `Content-Type: application/macaroon-request`: a token for the request's path that
//! the asker hands to another server in a third-party copy (gfal2 and FTS3 ask each end for one
//! when they hold only an X.509 proxy). The asker must hold every right it hands on; the token
//! is `ferry_token::site_issued`'s, signed with the door's secret, and only this door (or doors
//! sharing its secret) accepts it.

use std::sync::Arc;

use ferry_token::site_issued::{self, Activity, Issued};
use ferry_token::Operation;
use http::{header, HeaderValue, StatusCode};
use hyper::body::Incoming;

use crate::context::DoorContext;
use crate::reply::{self, Reply};
use crate::req::Req;

/// What an activity lets its bearer do, checked against the asker's own rights.
fn operations(a: Activity) -> &'static [Operation] {
    match a {
        Activity::Download => &[Operation::Read],
        Activity::Upload => &[Operation::Create],
        Activity::Manage => &[Operation::Overwrite, Operation::Delete, Operation::Mkdir],
        Activity::Delete => &[Operation::Delete],
        Activity::List | Activity::ReadMetadata => &[Operation::Stat],
        Activity::UpdateMetadata => &[Operation::Overwrite],
    }
}

/// POST.
pub(crate) async fn post(ctx: &Arc<DoorContext>, r: &Req, body: Incoming) -> Result<Reply, Reply> {
    let kind = r.header(header::CONTENT_TYPE).unwrap_or_default();
    let media = kind.split(';').next().unwrap_or_default().trim();
    if !media.eq_ignore_ascii_case("application/macaroon-request") {
        return Err(crate::req::refuse_unread(
            body,
            reply::status(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "POST takes only application/macaroon-request here",
            ),
        )
        .await);
    }
    if r.scheme == "http" {
        return Err(crate::req::refuse_unread(
            body,
            reply::status(
                StatusCode::FORBIDDEN,
                "tokens are not issued over clear-text HTTP",
            ),
        )
        .await);
    }
    if r.principal.user == "anonymous" {
        return Err(crate::req::refuse_unread(
            body,
            reply::status(
                StatusCode::FORBIDDEN,
                "anonymous users are not issued tokens: log in with a certificate, a password or a token",
            ),
        )
        .await);
    }
    let bytes = crate::req::small_body(body, site_issued::MAX_REQUEST).await?;
    let request = site_issued::parse_request(&bytes)
        .map_err(|e| reply::status(StatusCode::BAD_REQUEST, e))?;
    for a in &request.activities {
        for op in operations(*a) {
            let writes = !matches!(op, Operation::Read | Operation::Stat | Operation::List);
            if writes {
                r.writable()?;
            }
            r.may(*op, &r.path)?;
        }
    }
    let now = ferry_proto::clock::now_since_epoch().as_secs() as i64;
    let issued = Issued {
        user: r.principal.user.clone(),
        account: r.principal.account.clone(),
        path: r.path.to_string(),
        activities: request.activities,
        exp: now + request.validity_s,
        id: hex::encode(rand::random::<[u8; 8]>()),
    };
    tracing::info!(user = %issued.user, path = %issued.path, id = %issued.id, activities = ?issued.activities, "token issued");
    let token = site_issued::issue(&ctx.site_secret, &issued);
    let body = serde_json::json!({"macaroon": token, "expires_in": request.validity_s}).to_string();
    let mut reply = reply::status(StatusCode::OK, "");
    *reply.body_mut() = crate::body::Body::text(body);
    reply.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(reply)
}
