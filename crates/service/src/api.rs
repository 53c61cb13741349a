//! The REST API, in FTS3's paths and JSON so FTS3's own command-line client works unchanged
//! (`../shared/reference/fts3-rest.md` has what it asks, call by call).

use std::sync::Arc;

use axum::extract::{FromRequestParts, State};

pub use crate::extract::{Body, JsonBody, Path, Query};
use axum::http::{header, request::Parts, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json, Router};
use serde_json::{json, Value};

use crate::auth::{Auth, Identity, Peer, Via};
use crate::db::{Db, FileRow, JobFilter, JobRow};
use crate::scheduler::Scheduler;
use crate::states::JobState;
use crate::submit::Defaults;
use crate::{delegation, now, ServiceError};

/// The FTS3 REST API version ferry answers as (its client checks only that it is there).
const API_VERSION: (u32, u32, u32) = (3, 12, 0);
pub use crate::extract::MAX_BODY;

/// What every handler shares.
pub struct AppState {
    /// The queue.
    pub db: Db,
    /// Runs it.
    pub scheduler: Arc<Scheduler>,
    /// Who may ask.
    pub auth: Arc<Auth>,
    /// Job settings a submission leaves out.
    pub defaults: Defaults,
    /// Whether jobs may name files on the service's host.
    pub allow_local: bool,
}

pub(crate) type Shared = State<Arc<AppState>>;

/// Errors as FTS3 spells them: `{"status": "400 Bad Request", "message": …}`.
impl IntoResponse for ServiceError {
    fn into_response(self) -> Response {
        let status = match &self {
            ServiceError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ServiceError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ServiceError::Forbidden(_) => StatusCode::FORBIDDEN,
            ServiceError::NotFound(_) => StatusCode::NOT_FOUND,
            ServiceError::Conflict(_) => StatusCode::CONFLICT,
            ServiceError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ServiceError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %self, "request failed");
        }
        let body = json!({"status": status.to_string(), "message": self.to_string()});
        (status, Json(body)).into_response()
    }
}

/// The caller of a request: its connection's certificate, or else a bearer token.
pub struct Caller(pub Identity);

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ServiceError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<Peer>()
            .cloned()
            .unwrap_or(Peer::Anonymous);
        let auth = parts.extensions.get::<Arc<Auth>>().cloned();
        if let Peer::Verified(id) = &peer {
            return Ok(Caller(id.clone()));
        }
        // A connection whose request proves who it is leaves the share of those that have not.
        let proven = |id: Identity| {
            if let Some(a) = parts.extensions.get::<Arc<crate::Admission>>() {
                a.authenticated();
            }
            Caller(id)
        };
        if let Some(id) = session_cookie(parts).and_then(|c| auth.as_ref()?.session(&c)) {
            return Ok(proven(id));
        }
        if let Some(value) = parts.headers.get(header::AUTHORIZATION) {
            let token = value
                .to_str()
                .ok()
                .and_then(|v| {
                    v.strip_prefix("Bearer ")
                        .or_else(|| v.strip_prefix("bearer "))
                })
                .map(str::trim)
                .ok_or_else(|| {
                    ServiceError::Unauthorized("Authorization must be 'Bearer TOKEN'".into())
                })?;
            let Some(auth) = auth else {
                return Err(ServiceError::Unauthorized(
                    "the bearer token is not known".into(),
                ));
            };
            return match auth.token(token).await {
                Ok(id) => Ok(proven(id)),
                Err(why) => Err(ServiceError::Unauthorized(why)),
            };
        }
        Err(ServiceError::Unauthorized(match peer {
            Peer::Refused(why) => why,
            _ => "present an X.509 certificate or proxy, or a bearer token".into(),
        }))
    }
}

/// The dashboard's session cookie, if the request has one.
fn session_cookie(parts: &Parts) -> Option<String> {
    parts
        .headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix("ferry_session=").map(str::to_owned))
}

pub(crate) async fn root() -> Json<Value> {
    let (major, minor, patch) = API_VERSION;
    Json(json!({
        "api": {"major": major, "minor": minor, "patch": patch},
        "schema": {"major": 1, "minor": 0, "patch": 0},
        "server": format!("ferry {}", env!("CARGO_PKG_VERSION")),
    }))
}

pub(crate) async fn whoami(Caller(id): Caller) -> Json<Value> {
    let delegation_id = delegation::id_for(&id.dn);
    Json(json!({
        "dn": [id.dn],
        "user_dn": id.dn,
        "vos": [],
        "vos_id": [],
        "voms_cred": [],
        "roles": [],
        "delegation_id": delegation_id,
        "base_id": delegation_id,
        "method": match id.via { Via::Certificate => "certificate", Via::Token => "token" },
        "is_root": id.admin,
        "level": {"transfer": if id.admin { "all" } else { "own" }},
    }))
}

/// A delegation id must be the caller's own.
fn own_delegation(id: &str, caller: &Identity) -> Result<(), ServiceError> {
    if id == delegation::id_for(&caller.dn) {
        Ok(())
    } else {
        Err(ServiceError::Forbidden(format!(
            "delegation {id} is not yours (yours is {})",
            delegation::id_for(&caller.dn)
        )))
    }
}

pub(crate) async fn delegation_get(
    State(st): Shared,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ServiceError> {
    own_delegation(&id, &caller)?;
    let row = st.db.delegation(id).await?;
    Ok(Json(match row.and_then(|r| r.termination) {
        Some(t) => {
            json!({"termination_time": timestamp(t), "delegation_id": delegation::id_for(&caller.dn)})
        }
        None => Value::Null,
    }))
}

pub(crate) async fn delegation_request(
    State(st): Shared,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> Result<Response, ServiceError> {
    own_delegation(&id, &caller)?;
    let (key, request) = tokio::task::spawn_blocking(delegation::new_request)
        .await
        .map_err(|e| ServiceError::Tls(e.to_string()))??;
    st.db.set_pending_key(id, caller.dn, key).await?;
    Ok(([(header::CONTENT_TYPE, "application/x-pem-file")], request).into_response())
}

pub(crate) async fn delegation_credential(
    State(st): Shared,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body,
) -> Result<Response, ServiceError> {
    own_delegation(&id, &caller)?;
    let row = st.db.delegation(id.clone()).await?;
    let Some(key) = row.and_then(|r| r.pending_key) else {
        return Err(ServiceError::BadRequest(format!(
            "no request is outstanding for delegation {id}: GET /delegation/{id}/request first"
        )));
    };
    let trust = Arc::clone(st.auth.trust());
    let dn = caller.dn.clone();
    let accepted =
        tokio::task::spawn_blocking(move || delegation::accept(&body, &key, &dn, &trust))
            .await
            .map_err(|e| ServiceError::Tls(e.to_string()))??;
    st.db
        .set_proxy(id, accepted.proxy_pem, accepted.termination)
        .await?;
    tracing::info!(user = %caller.dn, until = accepted.termination, "credential delegated");
    Ok(StatusCode::CREATED.into_response())
}

pub(crate) async fn submit(
    State(st): Shared,
    Caller(caller): Caller,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ServiceError> {
    let (job, _) = crate::submit::parse_body(&body, &caller.dn, st.defaults, st.allow_local)?;
    let id = job.job_id.clone();
    let files = job.files.len();
    let new = st.db.insert_job(job, now()).await?;
    if new {
        tracing::info!(job = %id, user = %caller.dn, files, "job submitted");
        st.scheduler.wake();
    }
    Ok(Json(json!({"job_id": id})))
}

#[derive(serde::Deserialize)]
pub(crate) struct ListQuery {
    state_in: Option<String>,
    user_dn: Option<String>,
    limit: Option<i64>,
}

pub(crate) async fn list_jobs(
    State(st): Shared,
    Caller(caller): Caller,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, ServiceError> {
    let states = match q.state_in.as_deref() {
        None | Some("") => Vec::new(),
        Some(s) => s
            .split(',')
            .map(|x| {
                JobState::parse(x.trim()).ok_or_else(|| {
                    ServiceError::BadRequest(format!("state_in: unknown state '{x}'"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    let user_dn = match (caller.admin, q.user_dn) {
        (true, u) => u,
        (false, Some(u)) if !ferry_gsi::dn::same(&u, &caller.dn) => {
            return Err(ServiceError::Forbidden(
                "only an admin lists other users' jobs".into(),
            ))
        }
        (false, _) => Some(caller.dn.clone()),
    };
    let jobs = st
        .db
        .jobs(JobFilter {
            user_dn,
            states,
            limit: q.limit.unwrap_or(1000).clamp(1, 100_000),
        })
        .await?;
    Ok(Json(Value::Array(jobs.iter().map(job_json).collect())))
}

/// A job the caller may see, or 404 (never "forbidden", which would tell it exists).
async fn visible_job(st: &AppState, caller: &Identity, id: &str) -> Result<JobRow, ServiceError> {
    match st.db.job(id.to_owned()).await? {
        Some(j) if caller.admin || j.user_dn == caller.dn => Ok(j),
        _ => Err(ServiceError::NotFound(format!("no job {id}"))),
    }
}

/// The ids of a `/jobs/{ids}` path (comma-separated).
fn id_list(ids: &str) -> Vec<String> {
    ids.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The jobs of `ids` as the caller sees them: one object for one id, else a list (FTS3's
/// answer).
async fn jobs_answer(
    st: &AppState,
    caller: &Identity,
    ids: &[String],
) -> Result<Json<Value>, ServiceError> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let row = visible_job(st, caller, id).await?;
        let ended = !matches!(row.job_state, JobState::Submitted | JobState::Active);
        let mut job = job_json(&row);
        // ferry's own: progress without the file list (FTS3's client shows them as given).
        let (counts, bytes) = st.db.job_progress(id.clone(), ended).await?;
        job["files_by_state"] = counts.into_iter().map(|(s, n)| (s, json!(n))).collect();
        if let Some(b) = bytes {
            job["bytes_transferred"] = json!(b);
        }
        out.push(job);
    }
    Ok(Json(match (ids.len(), out.pop()) {
        (1, Some(one)) => one,
        (_, last) => {
            out.extend(last);
            Value::Array(out)
        }
    }))
}

pub(crate) async fn get_jobs(
    State(st): Shared,
    Caller(caller): Caller,
    Path(ids): Path<String>,
) -> Result<Json<Value>, ServiceError> {
    jobs_answer(&st, &caller, &id_list(&ids)).await
}

pub(crate) async fn cancel_jobs(
    State(st): Shared,
    Caller(caller): Caller,
    Path(ids): Path<String>,
) -> Result<Json<Value>, ServiceError> {
    let list = id_list(&ids);
    let user = (!caller.admin).then(|| caller.dn.clone());
    let active = st.db.cancel(list.clone(), user, now()).await?;
    st.scheduler.cancel_files(&active);
    jobs_answer(&st, &caller, &list).await
}

pub(crate) async fn job_files(
    State(st): Shared,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ServiceError> {
    visible_job(&st, &caller, &id).await?;
    let live = st.scheduler.live();
    let files = st.db.files(id).await?;
    Ok(Json(Value::Array(
        files
            .iter()
            .map(|f| file_json(f, live.get(&f.file_id)))
            .collect(),
    )))
}

pub(crate) async fn file_retries(
    State(st): Shared,
    Caller(caller): Caller,
    Path((id, file_id)): Path<(String, i64)>,
) -> Result<Json<Value>, ServiceError> {
    visible_job(&st, &caller, &id).await?;
    let file = match st.db.file(file_id).await? {
        Some(f) if f.job_id == id => f,
        _ => {
            return Err(ServiceError::NotFound(format!(
                "no file {file_id} in job {id}"
            )))
        }
    };
    let mut attempts = st.db.attempts(file_id).await?;
    for a in &mut attempts {
        if let Some(e) = &a.error {
            a.error = Some(crate::redact::text(e, &[&file.source, &file.dest]));
        }
    }
    Ok(Json(serde_json::to_value(attempts).unwrap_or(Value::Null)))
}

pub(crate) async fn job_dm(
    State(st): Shared,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ServiceError> {
    visible_job(&st, &caller, &id).await?;
    // ferry has no data-management operations (deletions, staging) in jobs.
    Ok(Json(json!([])))
}

pub(crate) async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], crate::OPENAPI).into_response()
}

/// FTS3's time format (UTC, no zone).
pub fn timestamp(unix: i64) -> String {
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");
    time::OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| t.format(&fmt).ok())
        .unwrap_or_default()
}

fn metadata(text: &Option<String>) -> Value {
    text.as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null)
}

/// A job as FTS3 shows it, with ferry's additions under their own names.
pub fn job_json(j: &JobRow) -> Value {
    json!({
        "job_id": j.job_id,
        "job_state": j.job_state,
        "user_dn": j.user_dn,
        "cred_id": delegation::id_for(&j.user_dn),
        "vo_name": "",
        "reason": j.reason,
        "submit_time": timestamp(j.submit_time),
        "job_finished": j.finish_time.map(timestamp),
        "priority": j.priority,
        "retry": j.retry,
        "retry_delay": j.retry_delay,
        "verify_checksum": j.verify,
        "overwrite_flag": j.overwrite,
        "cancel_job": j.canceled,
        "job_metadata": metadata(&j.metadata),
        "ignored_fields": j.ignored,
        "job_type": "N",
    })
}

/// A file as FTS3 shows it (`throughput` in MB/s), with ferry's stored ranges and attempts; the
/// passwords of `ftp://user:pw@` URLs (kept for the transfer) as `***`, to its owner as to
/// admins, in its URLs and in its reason.
pub fn file_json(f: &FileRow, live: Option<&crate::scheduler::Live>) -> Value {
    json!({
        "file_id": f.file_id,
        "job_id": f.job_id,
        "file_index": f.file_index,
        "file_state": f.file_state,
        "source_surl": crate::redact::url(&f.source),
        "dest_surl": crate::redact::url(&f.dest),
        "link": f.link,
        "filesize": f.filesize,
        "checksum": f.checksum,
        "reason": f.reason.as_deref().map(|r| crate::redact::text(r, &[&f.source, &f.dest])),
        "retry": f.failures,
        "attempts": f.attempts,
        "start_time": f.start_time.map(timestamp),
        "finish_time": f.finish_time.map(timestamp),
        "transferred": if f.file_state == crate::states::FileState::Finished { Some(f.bytes) } else { live.map(|l| l.bytes as i64) },
        "throughput": f.throughput.map(|t| t / 1e6),
        "stored_ranges": f.stored,
        "file_metadata": metadata(&f.metadata),
    })
}

/// Makes [`Extension`] usable from `lib.rs` without naming axum there: what the connection's
/// handshake proved, the rules, and the connection's place at the gate (which a request that
/// authenticates moves out of the unauthenticated share).
pub fn with_peer(
    router: Router,
    peer: Peer,
    auth: Arc<Auth>,
    admission: Arc<crate::Admission>,
) -> Router {
    router
        .layer(Extension(peer))
        .layer(Extension(auth))
        .layer(Extension(admission))
}

/// FTS3's client asks for `endpoint + "/" + "/whoami"`: repeated slashes in a path count as one.
pub fn collapse_slashes<B>(mut req: axum::http::Request<B>) -> axum::http::Request<B> {
    let uri = req.uri();
    if !uri.path().contains("//") {
        return req;
    }
    let mut path = String::with_capacity(uri.path().len());
    for c in uri.path().chars() {
        if !(c == '/' && path.ends_with('/')) {
            path.push(c);
        }
    }
    let pq = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    let mut parts = uri.clone().into_parts();
    if let Ok(p) = pq.parse() {
        parts.path_and_query = Some(p);
        if let Ok(u) = axum::http::Uri::from_parts(parts) {
            *req.uri_mut() = u;
        }
    }
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_slashes_in_a_path_count_as_one() {
        let req = axum::http::Request::builder()
            .uri("//whoami?x=1")
            .body(())
            .unwrap();
        assert_eq!(collapse_slashes(req).uri().to_string(), "/whoami?x=1");
    }
}
