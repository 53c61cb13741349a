//! The web dashboard: one page built into the binary (no CDN, no build step), fed by
//! server-sent events that carry the whole picture once a second: links with their queues,
//! concurrency, success rate and throughput, jobs and files with their errors and retries, the
//! optimizer's decisions and the throughput over the last ten minutes.
//!
//! A browser proves who it is with its client certificate, or once with a bearer token
//! (`/dashboard#token=…`, posted to `/dashboard/session`), which gets it an HttpOnly session
//! cookie; the token never goes into a URL the server sees.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use futures_util::stream::Stream;
use serde_json::{json, Value};

use crate::api::{file_json, timestamp, AppState, Caller, Shared};
use crate::auth::SESSION_SECONDS;
use crate::ServiceError;

const PAGE: &str = include_str!("dashboard.html");

/// The page itself (its data needs a caller).
pub(crate) async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // Everything the page needs is in it: nothing from elsewhere may load or run.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
                 frame-ancestors 'none'",
            ),
        ],
        Html(PAGE),
    )
        .into_response()
}

/// Trades a caller (token or certificate) for a session cookie the page's event stream sends.
pub(crate) async fn session(State(st): Shared, Caller(who): Caller) -> Response {
    let value = st.auth.new_session(who.clone());
    let cookie = format!(
        "ferry_session={value}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age={SESSION_SECONDS}"
    );
    (
        [(header::SET_COOKIE, cookie)],
        axum::Json(json!({"user": who.dn, "admin": who.admin})),
    )
        .into_response()
}

/// The picture once.
pub(crate) async fn state(
    State(st): Shared,
    Caller(who): Caller,
) -> Result<axum::Json<Value>, ServiceError> {
    Ok(axum::Json(picture(&st, &who).await?))
}

/// The picture once a second, as server-sent events.
pub(crate) async fn events(
    State(st): Shared,
    Caller(who): Caller,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let stream = futures_util::stream::unfold((st, who, true), |(st, who, first)| async move {
        if !first {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let event = match picture(&st, &who).await {
            Ok(v) => Event::default().event("state").data(v.to_string()),
            Err(e) => Event::default().event("failure").data(e.to_string()),
        };
        Some((Ok(event), (st, who, false)))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// How many of a user's newest jobs their dashboard shows (with their links).
const JOBS_SHOWN: i64 = 50;

/// What `who` may see: everything for an admin; for anyone else their own jobs, files and
/// links (those their files take, with their files' counts), and the optimizer's decisions on
/// those links only. A link's concurrency target and throughput are the link's, shared by all
/// who use it.
async fn picture(st: &Arc<AppState>, who: &crate::auth::Identity) -> Result<Value, ServiceError> {
    let user = (!who.admin).then(|| who.dn.clone());
    let snapshot = st.scheduler.snapshot();
    let live = st.scheduler.live();
    let counts = match &user {
        None => st.db.link_counts().await?,
        Some(u) => st.db.link_counts_of(u.clone(), JOBS_SHOWN).await?,
    };
    let mut links: BTreeMap<String, BTreeMap<&str, Value>> = BTreeMap::new();
    for (link, state, n) in &counts {
        let row = links.entry(link.clone()).or_default();
        let key = match state.as_str() {
            "SUBMITTED" | "READY" => "queued",
            "ACTIVE" => "active",
            "FINISHED" => "finished",
            "FAILED" => "failed",
            _ => "canceled",
        };
        let sum = row.get(key).and_then(Value::as_i64).unwrap_or(0) + n;
        row.insert(key, json!(sum));
    }
    let seen: Vec<String> = links.keys().cloned().collect();
    let links: Vec<Value> = links
        .into_iter()
        .map(|(link, row)| {
            let n = |k: &str| row.get(k).and_then(Value::as_i64).unwrap_or(0);
            let (running, target, throughput) =
                snapshot.links.get(&link).copied().unwrap_or((0, 0, 0.0));
            // Everyone's transfers on the link for an admin; a user's own are in their counts.
            let active = if user.is_none() {
                n("active").max(running as i64)
            } else {
                n("active")
            };
            let ended = n("finished") + n("failed");
            json!({
                "link": link,
                "queued": n("queued"),
                "active": active,
                "target": target,
                "finished": n("finished"),
                "failed": n("failed"),
                "canceled": n("canceled"),
                "success_rate": (ended > 0).then(|| n("finished") as f64 / ended as f64),
                "throughput": throughput,
            })
        })
        .collect();
    let jobs: Vec<Value> = st
        .db
        .job_summaries(user.clone(), JOBS_SHOWN)
        .await?
        .into_iter()
        .map(|(j, c)| {
            let n = |s: &str| c.iter().find(|(k, _)| k == s).map_or(0, |(_, n)| *n);
            json!({
                "job_id": j.job_id,
                "job_state": j.job_state,
                "user_dn": j.user_dn,
                "submit_time": timestamp(j.submit_time),
                "reason": j.reason,
                "files": c.iter().map(|(_, n)| n).sum::<i64>(),
                "finished": n("FINISHED"),
                "failed": n("FAILED"),
                "active": n("ACTIVE"),
            })
        })
        .collect();
    let files: Vec<Value> = st
        .db
        .recent_files(user.clone(), 100)
        .await?
        .iter()
        .map(|f| file_json(f, live.get(&f.file_id)))
        .collect();
    let decisions = st.db.decisions(user.map(|_| seen), 20).await?;
    Ok(json!({
        "now": crate::now(),
        "user": who.dn,
        "admin": who.admin,
        "links": links,
        "jobs": jobs,
        "files": files,
        "decisions": decisions,
        "history": snapshot.history,
    }))
}
