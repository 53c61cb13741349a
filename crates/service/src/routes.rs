//! Every path the service answers: FTS3's REST API (`api.rs`) and the dashboard
//! (`dashboard.rs`), behind the cross-site guard and the body limit.

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::{get, post, put};
use axum::Router;

use crate::api::{self, AppState};
use crate::dashboard;
use crate::extract::MAX_BODY;

/// The routes.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", get(api::root))
        .route("/whoami", get(api::whoami))
        .route("/delegation/{id}", get(api::delegation_get))
        .route("/delegation/{id}/request", get(api::delegation_request))
        .route(
            "/delegation/{id}/credential",
            put(api::delegation_credential).post(api::delegation_credential),
        )
        .route("/jobs", post(api::submit).get(api::list_jobs))
        .route("/jobs/{ids}", get(api::get_jobs).delete(api::cancel_jobs))
        .route("/jobs/{id}/files", get(api::job_files))
        .route("/jobs/{id}/files/{file_id}/retries", get(api::file_retries))
        .route("/jobs/{id}/dm", get(api::job_dm))
        .route("/openapi.json", get(api::openapi))
        .route("/dashboard", get(dashboard::page))
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/dashboard/session", post(dashboard::session))
        .route("/dashboard/state", get(dashboard::state))
        .route("/dashboard/events", get(dashboard::events))
        .layer(axum::middleware::from_fn(crate::cross_site::guard))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}
