//! Prometheus metrics for ferry's long-running programs (the server, and the transfer service
//! when it lands): one registry per program, the process metrics Prometheus' own clients export,
//! and one HTTP endpoint serving `/metrics` (OpenMetrics text) and `/healthz`.
//!
//! The metric families themselves belong to the program that counts them; this crate holds
//! only what several programs count alike (a listener's connections, common labels), and
//! encodes and serves them all, so every program's scrape looks alike.

mod connections;
mod labels;
mod process;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

pub use connections::{Connections, ConnectionsHelp};
pub use labels::{DirectionLabel, ResultLabel};
pub use process::ProcessCollector;
pub use prometheus_client;

/// What `/healthz` answers: 200 when `ok`, else 503, with `body` as JSON.
#[derive(Debug, Clone)]
pub struct Health {
    /// Whether the program is serving.
    pub ok: bool,
    /// Figures monitoring may want beside the verdict (sessions, transfers, uptime …).
    pub body: serde_json::Value,
}

/// Computes the health answer at each poll.
pub type HealthCheck = Arc<dyn Fn() -> Health + Send + Sync>;

/// A bound metrics endpoint, ready to serve.
pub struct Endpoint {
    listener: TcpListener,
    registry: Arc<Registry>,
    health: HealthCheck,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("listener", &self.listener.local_addr().ok())
            .finish_non_exhaustive()
    }
}

/// The content type of what [`encode`] writes: the OpenMetrics text format (Prometheus
/// scrapes it natively; `# EOF` ends it and counters are typed by family, `_total` samples).
pub const TEXT_FORMAT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

impl Endpoint {
    /// Binds `addr` (port 0 picks a free port) for `registry` and `health`.
    pub async fn bind(
        addr: SocketAddr,
        registry: Arc<Registry>,
        health: HealthCheck,
    ) -> std::io::Result<Endpoint> {
        let listener = TcpListener::bind(addr).await?;
        Ok(Endpoint {
            listener,
            registry,
            health,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves `/metrics` and `/healthz` until the task is dropped.
    pub async fn serve(self) -> std::io::Result<()> {
        let registry = self.registry;
        let health = self.health;
        let app = Router::new()
            .route(
                "/metrics",
                get(move || {
                    let registry = Arc::clone(&registry);
                    async move { metrics(&registry) }
                }),
            )
            .route(
                "/healthz",
                get(move || {
                    let health = Arc::clone(&health);
                    async move { healthz(&health) }
                }),
            );
        axum::serve(self.listener, app).await
    }
}

/// The registry in the OpenMetrics text format.
pub fn encode(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut text = String::with_capacity(8192);
    prometheus_client::encoding::text::encode(&mut text, registry)?;
    Ok(text)
}

fn metrics(registry: &Registry) -> Response {
    match encode(registry) {
        Ok(text) => ([(header::CONTENT_TYPE, TEXT_FORMAT)], text).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "cannot encode the metrics\n",
        )
            .into_response(),
    }
}

fn healthz(health: &HealthCheck) -> Response {
    let h = health();
    let code = if h.ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{}\n", h.body),
    )
        .into_response()
}
