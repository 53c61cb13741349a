//! ferry's reliable transfer service: a queue of copy jobs kept in SQLite, FTS3's REST API
//! over HTTPS (X.509 certificates and proxies, or bearer tokens), delegation so the service
//! acts as each user, and a scheduler that runs files through the resumable copy API and
//! keeps their restart ranges, so nothing stored is sent twice after any failure.
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod admission;
pub mod api;
pub mod auth;
pub mod client;
mod cross_site;
pub mod dashboard;
pub mod db;
pub mod delegation;
pub mod extract;
pub mod metrics;
pub mod optimizer;
pub mod redact;
mod routes;
pub mod scheduler;
pub mod states;
pub mod submit;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ferry_gsi::{Credential, TrustStore};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use admission::{Admission, ConnectionLimits};
pub use scheduler::Limits;
pub use submit::Defaults;

/// The OpenAPI document of the REST API, served at `/openapi.json`.
pub const OPENAPI: &str = include_str!("openapi.json");

/// What goes wrong, each kind its own HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Malformed or wrong request (400).
    #[error("{0}")]
    BadRequest(String),
    /// No or bad credentials (401).
    #[error("{0}")]
    Unauthorized(String),
    /// Not allowed for this caller (403).
    #[error("{0}")]
    Forbidden(String),
    /// No such thing, or not the caller's (404).
    #[error("{0}")]
    NotFound(String),
    /// Taken by something else (409).
    #[error("{0}")]
    Conflict(String),
    /// A request body over the limit (413).
    #[error("{0}")]
    TooLarge(String),
    /// A request body of a type the endpoint does not take (415).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The database.
    #[error("database: {0}")]
    Database(String),
    /// TLS or key handling.
    #[error("TLS: {0}")]
    Tls(String),
    /// The service's own settings.
    #[error("{0}")]
    Config(String),
    /// Talking to a service (the client side).
    #[error("{0}")]
    Http(String),
}

impl ServiceError {
    /// The kind of failure, as a copy's failures are told apart (a client's exit code).
    pub fn class(&self) -> ferry_client::ErrorClass {
        use ferry_client::ErrorClass;
        match self {
            ServiceError::BadRequest(_)
            | ServiceError::Config(_)
            | ServiceError::Conflict(_)
            | ServiceError::TooLarge(_)
            | ServiceError::UnsupportedMediaType(_) => ErrorClass::Usage,
            ServiceError::Unauthorized(_) | ServiceError::Forbidden(_) | ServiceError::Tls(_) => {
                ErrorClass::Auth
            }
            ServiceError::NotFound(_) => ErrorClass::NotFound,
            ServiceError::Http(_) => ErrorClass::Network,
            ServiceError::Database(_) => ErrorClass::Other,
        }
    }
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// How `ferry service` is set up.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where HTTPS listens.
    pub listen: SocketAddr,
    /// The queue: an SQLite file, or a `postgres://` URL that several service hosts share.
    pub database: String,
    /// This host's name in a shared queue (its claims and heartbeat); the same after a
    /// restart, so it takes back its own claims at once.
    pub host_id: String,
    /// The service's certificate (host certificate).
    pub host_cert: PathBuf,
    /// Its key.
    pub host_key: PathBuf,
    /// Trusted CAs (`/etc/grid-security/certificates`).
    pub cert_dir: PathBuf,
    /// `TOKEN IDENTITY` lines.
    pub token_file: Option<PathBuf>,
    /// Issuers whose JSON Web Tokens (WLCG, SciTokens) may call the API, as the door trusts
    /// them (`[[tokens.issuer]]`); empty: none.
    pub token_issuers: ferry_site::TokensConfig,
    /// DNs (or token identities) that see every job.
    pub admins: Vec<String>,
    /// Concurrency.
    pub limits: Limits,
    /// Job defaults.
    pub defaults: Defaults,
    /// Whether jobs may name paths on this host.
    pub allow_local: bool,
    /// Where Prometheus scrapes `/metrics` and `/healthz` (plain HTTP), if anywhere.
    pub metrics: Option<SocketAddr>,
    /// The path cache that large files' streams are chosen from and that learns from them,
    /// shared with `gcp` and `ferry copy --tune` (`None`: streams by size and round trip).
    pub path_cache: Option<PathBuf>,
}

impl Config {
    /// A host's name in a shared queue when none is given: the host name and the port.
    pub fn default_host_id(port: u16) -> String {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "localhost".into());
        format!("{host}:{port}")
    }
}

/// A service bound to its port, not yet serving.
pub struct Service {
    listener: TcpListener,
    metrics_endpoint: Option<ferry_metrics::Endpoint>,
    state: Arc<api::AppState>,
    acceptor: openssl::ssl::SslAcceptor,
    connections: ConnectionLimits,
}

impl Service {
    /// Opens the database, loads the credential and CAs and binds the port.
    pub async fn bind(config: &Config) -> Result<Service, ServiceError> {
        let host = Credential::load_cert_key(&config.host_cert, &config.host_key, None)
            .map_err(|e| ServiceError::Config(format!("the service's certificate: {e}")))?;
        let trust = Arc::new(TrustStore::load(&config.cert_dir).map_err(|e| {
            ServiceError::Config(format!(
                "the CA directory {}: {e}",
                config.cert_dir.display()
            ))
        })?);
        let issuers = ferry_site::TokenAuthority::new(&config.token_issuers)
            .map_err(|e| ServiceError::Config(format!("token issuers: {e}")))?;
        if let Some(issuers) = &issuers {
            issuers.spawn_refresher();
        }
        let auth = Arc::new(
            auth::Auth::new(
                Arc::clone(&trust),
                config.token_file.as_deref(),
                config.admins.clone(),
            )?
            .with_issuers(issuers),
        );
        let acceptor = auth::acceptor(&host)?;
        let database = config.database.clone();
        let host_id = config.host_id.clone();
        let db = tokio::task::spawn_blocking(move || db::Db::open(&database, &host_id))
            .await
            .map_err(|e| ServiceError::Database(e.to_string()))??;
        let metrics = Arc::new(metrics::Metrics::default());
        let path_cache = config
            .path_cache
            .clone()
            .map(ferry_client::path::PathCache::at);
        let scheduler = scheduler::Scheduler::new(
            db.clone(),
            config.limits,
            trust,
            Arc::clone(&metrics),
            path_cache,
        );
        let metrics_endpoint = match config.metrics {
            Some(addr) => {
                let mut registry = ferry_metrics::prometheus_client::registry::Registry::default();
                metrics.register(&mut registry);
                registry.register_collector(Box::new(ferry_metrics::ProcessCollector));
                let health: ferry_metrics::HealthCheck = Arc::new(|| ferry_metrics::Health {
                    ok: true,
                    body: serde_json::json!({"service": "ferry transfer service"}),
                });
                Some(
                    ferry_metrics::Endpoint::bind(addr, Arc::new(registry), health)
                        .await
                        .map_err(|e| {
                            ServiceError::Config(format!(
                                "cannot listen on {addr} for metrics: {e}"
                            ))
                        })?,
                )
            }
            None => None,
        };
        let listener = TcpListener::bind(config.listen).await.map_err(|e| {
            ServiceError::Config(format!("cannot listen on {}: {e}", config.listen))
        })?;
        Ok(Service {
            listener,
            acceptor,
            connections: ConnectionLimits::default(),
            metrics_endpoint,
            state: Arc::new(api::AppState {
                db,
                scheduler,
                auth,
                defaults: config.defaults,
                allow_local: config.allow_local,
            }),
        })
    }

    /// The same service with other connection limits than [`ConnectionLimits::default`].
    pub fn with_connection_limits(mut self, limits: ConnectionLimits) -> Service {
        self.connections = limits;
        self
    }

    /// Where it listens.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Where `/metrics` is served, when it is.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_endpoint
            .as_ref()
            .and_then(|m| m.local_addr().ok())
    }

    /// Serves until `stop` fires, then lets running transfers record how far they got.
    pub async fn serve(mut self, stop: CancellationToken) -> Result<(), ServiceError> {
        if let Some(m) = self.metrics_endpoint.take() {
            tokio::spawn(m.serve());
        }
        let scheduler = Arc::clone(&self.state.scheduler);
        let sched_task = tokio::spawn(Arc::clone(&scheduler).run());
        let router = routes::router(Arc::clone(&self.state));
        let acceptor = Arc::new(self.acceptor);
        let gate = admission::Gate::new(self.connections);
        loop {
            let slot = tokio::select! {
                _ = stop.cancelled() => break,
                s = gate.slot() => s.map_err(|e| ServiceError::Config(e.to_string()))?,
            };
            let (tcp, from) = tokio::select! {
                _ = stop.cancelled() => break,
                a = self.listener.accept() => match a {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            // Dropped, and so closed, at once: a flood from one address costs an accept.
            let Some(admission) = gate.admit(from.ip(), slot) else {
                tracing::debug!(%from, "connection closed: its address holds its share");
                continue;
            };
            let (acceptor, router, auth, limits) = (
                Arc::clone(&acceptor),
                router.clone(),
                Arc::clone(&self.state.auth),
                gate.limits(),
            );
            tokio::spawn(async move {
                let closed = admission.closed();
                let served = tokio::select! {
                    r = connection(tcp, &acceptor, router, auth, admission, limits) => r,
                    _ = closed.cancelled() => Err("closed to make room: it had not authenticated".into()),
                };
                if let Err(e) = served {
                    tracing::debug!(%from, error = %e, "connection ended");
                }
            });
        }
        scheduler.shut_down();
        match sched_task.await {
            Ok(r) => r,
            Err(e) => Err(ServiceError::Database(format!("the scheduler failed: {e}"))),
        }
    }
}

/// One connection: the TLS handshake, then HTTP/1.1 until the client is done. Until its client
/// has authenticated, each step has a few seconds ([`ConnectionLimits`]).
async fn connection(
    tcp: tokio::net::TcpStream,
    acceptor: &openssl::ssl::SslAcceptor,
    router: axum::Router,
    auth: Arc<auth::Auth>,
    admission: Arc<Admission>,
    limits: ConnectionLimits,
) -> Result<(), String> {
    let _ = tcp.set_nodelay(true);
    let ssl = openssl::ssl::Ssl::new(acceptor.context()).map_err(|e| e.to_string())?;
    let mut tls = tokio_openssl::SslStream::new(ssl, tcp).map_err(|e| e.to_string())?;
    tokio::time::timeout(limits.handshake, std::pin::Pin::new(&mut tls).accept())
        .await
        .map_err(|_| "TLS handshake timed out".to_owned())?
        .map_err(|e| format!("TLS handshake: {e}"))?;
    let peer = auth.peer_of(tls.ssl());
    if matches!(peer, auth::Peer::Verified(_)) {
        admission.authenticated();
    }
    let head_within = if admission.is_authenticated() {
        limits.idle
    } else {
        limits.first_request
    };
    let app = tower::ServiceExt::map_request(
        api::with_peer(router, peer, auth, Arc::clone(&admission)),
        api::collapse_slashes,
    );
    let service = hyper_util::service::TowerToHyperService::new(app);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(head_within)
        .serve_connection(TokioIo::new(tls), service);
    let mut conn = std::pin::pin!(conn);
    if !admission.is_authenticated() {
        // A token or a session cookie in a request may still authenticate it; if none has
        // by then, the connection ends once its request in flight is answered.
        tokio::select! {
            r = conn.as_mut() => return r.map_err(|e| e.to_string()),
            _ = tokio::time::sleep(limits.unauthenticated_for) => {}
        }
        if !admission.is_authenticated() {
            conn.as_mut().graceful_shutdown();
            return match tokio::time::timeout(limits.first_request, conn).await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err("not authenticated in time".into()),
            };
        }
    }
    conn.await.map_err(|e| e.to_string())
}
