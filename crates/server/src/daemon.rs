//! The accept loop: one small task per control connection on the multi-threaded runtime.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use ferry_dtp::{BufferPool, PollBudget};
use ferry_storage::modules::ModuleRegistry;
use ferry_storage::Storage;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use crate::auth::PasswordDb;
use crate::config::{ConfigError, ServerConfig};
use crate::metrics::ServerMetrics;
use crate::prepare::Prepared;
use crate::reload::{Live, Reloader};
use crate::session;
use ferry_site::TransferLog;
use prometheus_client::registry::Registry;

/// What the server keeps across configuration reloads; every [`ServerContext`] points at it.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Control connections open now.
    pub(crate) connections: AtomicUsize,
    pub(crate) next_transfer: AtomicU64,
    /// Transfers running now (`SITE STATUS`).
    pub(crate) transfers_running: AtomicUsize,
    /// When the server started (`SITE STATUS`'s uptime).
    pub(crate) started: std::time::Instant,
    pub(crate) metrics: ServerMetrics,
    pub(crate) translog: Arc<TransferLog>,
    /// This host's name (the Globus transfer log's HOST).
    pub(crate) host: String,
    /// One permit per data connection being read, server-wide (`data_connections_max`).
    pub(crate) data_permits: Arc<tokio::sync::Semaphore>,
}

impl Shared {
    fn new(
        metrics: ServerMetrics,
        translog: Arc<TransferLog>,
        data_connections: usize,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            data_permits: Arc::new(tokio::sync::Semaphore::new(data_connections)),
            connections: AtomicUsize::new(0),
            next_transfer: AtomicU64::new(1),
            transfers_running: AtomicUsize::new(0),
            started: std::time::Instant::now(),
            metrics,
            translog,
            host: ferry_site::translog::host_name(),
        })
    }
}

/// What every session shares: one configuration and what it loaded. A reload (SIGHUP) builds
/// a new one; sessions keep the one they started with.
#[derive(Debug)]
pub(crate) struct ServerContext {
    pub(crate) config: ServerConfig,
    pub(crate) storage_rw: Arc<dyn Storage>,
    pub(crate) storage_ro: Arc<dyn Storage>,
    pub(crate) passwords: PasswordDb,
    /// The account each kind of login works as.
    pub(crate) accounts: ferry_site::Accounts,
    pub(crate) pool: Arc<BufferPool>,
    /// Lone receiving streams (uploads) that may poll their sockets at once.
    pub(crate) poll_budget: Arc<PollBudget>,
    pub(crate) modules: ModuleRegistry,
    /// The disk-stack drivers sessions may name (and `--fs-whitelist` admits).
    pub(crate) disk_stacks: Arc<ferry_dtp::disk_stack::DiskStacks>,
    /// The data-channel transports sessions may name (and `--dc-whitelist` admits).
    pub(crate) transports: Arc<ferry_net::Transports>,
    /// What outlives a reload: counters, metrics, the transfer log.
    pub(crate) shared: Arc<Shared>,
    /// The host credential, trusted CAs and authorization, when GSI is on.
    pub(crate) gsi: Option<crate::gsi::GsiServer>,
    /// Striped frontend: the data nodes that move the data.
    pub(crate) nodes: Option<Arc<crate::striped::frontend::NodeSet>>,
}

#[cfg(test)]
impl ServerContext {
    /// A single-node context for in-memory PI tests: `config.root` as storage, GSI as the
    /// configuration says, no transfer log, this build's drivers.
    pub(crate) fn for_tests(config: ServerConfig) -> ServerContext {
        let open = |ro| -> Arc<dyn Storage> {
            Arc::new(ferry_storage::PosixStorage::open(&config.root, ro).expect("test root"))
        };
        ServerContext {
            storage_rw: open(false),
            storage_ro: open(true),
            passwords: PasswordDb::default(),
            accounts: ferry_site::Accounts::default(),
            pool: BufferPool::new(ferry_dtp::IO_CHUNK, 4),
            poll_budget: PollBudget::new(1),
            modules: ModuleRegistry::with_builtins(),
            disk_stacks: Arc::new(
                configured_disk_stacks(Drivers::default().disk_stacks, &config)
                    .expect("test multicast networks"),
            ),
            transports: Arc::new(ferry_net::Transports::default()),
            shared: Shared::new(
                ServerMetrics::new(&mut Registry::default()),
                Arc::new(TransferLog::default()),
                config.data_connections_max,
            ),
            gsi: config
                .gsi
                .then(|| crate::gsi::GsiServer::load(&config).expect("test GSI")),
            nodes: None,
            config,
        }
    }
}

/// What a bound server does with its connections.
#[derive(Debug, Clone)]
pub(crate) enum Role {
    /// Serves FTP clients (a single node, or a striped frontend).
    Pi(Arc<Live<ServerContext>>),
    /// Serves a striped frontend's IPC links.
    Node(Arc<Live<crate::striped::node::NodeContext>>),
}

/// A bound, ready server.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    role: Role,
    shared: Arc<Shared>,
    metrics: Option<ferry_metrics::Endpoint>,
    /// The HTTPS door, when `[https] listen` is set.
    door: Option<ferry_door::Door>,
}

/// Why a server cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The root cannot be opened.
    #[error("cannot use root {path}: {source}")]
    Root {
        /// The root.
        path: String,
        /// Why.
        source: ferry_storage::StorageError,
    },
    /// The password file cannot be used.
    #[error(transparent)]
    Passwords(#[from] crate::auth::AuthError),
    /// The transfer log cannot be opened.
    #[error(transparent)]
    TransferLog(#[from] ferry_site::translog::TransferLogError),
    /// The GSI credential, CAs or grid-mapfile cannot be used.
    #[error("GSI: {0}")]
    Gsi(#[from] ferry_gsi::GsiError),
    /// The link to data nodes (or from a frontend) cannot be set up.
    #[error("striping: {0}")]
    Ipc(String),
    /// The metrics address cannot be bound.
    #[error("cannot serve metrics on {addr}: {source}")]
    Metrics {
        /// Address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The control address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// Address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// The driver registries a server offers clients (`SITE SETNETSTACK`, `SITE SETDISKSTACK`):
/// this build's own, plus whatever an embedding program (or a test) registers.
#[derive(Debug, Clone)]
pub struct Drivers {
    /// Data-channel transports.
    pub transports: ferry_net::Transports,
    /// Disk-stack drivers.
    pub disk_stacks: ferry_dtp::disk_stack::DiskStacks,
}

impl Default for Drivers {
    /// The data-movement layer's drivers, and the server's own: `gridftp_multicast`, a
    /// GridFTP client inside a disk stack.
    fn default() -> Self {
        Drivers {
            transports: ferry_net::Transports::default(),
            disk_stacks: ferry_dtp::disk_stack::DiskStacks::standard()
                .with(Arc::new(crate::multicast::Multicast::default())),
        }
    }
}

/// `disk_stacks` with the multicast forwarder bound to the networks `config` allows children in.
fn configured_disk_stacks(
    disk_stacks: ferry_dtp::disk_stack::DiskStacks,
    config: &ServerConfig,
) -> Result<ferry_dtp::disk_stack::DiskStacks, StartError> {
    if !disk_stacks.exists(crate::multicast::NAME) {
        return Ok(disk_stacks);
    }
    let networks = crate::striped::AllowFrom::parse_all(&config.multicast_allow_to)
        .map_err(|e| StartError::Config(ConfigError::Invalid(e)))?;
    Ok(disk_stacks.with(Arc::new(crate::multicast::Multicast::allowing(networks))))
}

impl Server {
    /// Validates `config`, opens the root and binds the control port.
    pub async fn bind(config: ServerConfig) -> Result<Server, StartError> {
        Server::bind_with(config, Drivers::default()).await
    }

    /// [`Server::bind`], offering `drivers` instead of this build's standard set.
    pub async fn bind_with(config: ServerConfig, drivers: Drivers) -> Result<Server, StartError> {
        let prepared = Prepared::load(&config)?;
        if !config.data_node {
            for line in prepared
                .accounts
                .report(&config.account_policy(), &prepared.passwords)
            {
                tracing::info!("{line}");
            }
        }
        let transports = Arc::new(drivers.transports);
        let disk_stacks = Arc::new(configured_disk_stacks(drivers.disk_stacks, &config)?);
        let translog = Arc::new(TransferLog::default());
        translog.open(config.log_transfer.as_deref(), config.log_transfer_format)?;
        let mut registry = Registry::default();
        let metrics = ServerMetrics::new(&mut registry);
        registry.register_collector(Box::new(ferry_metrics::ProcessCollector));
        let shared = Shared::new(metrics, translog, config.data_connections_max);
        let https = &config.https;
        let door = if (https.listen.is_some() || https.clear_listen.is_some()) && !config.data_node
        {
            let door_metrics = ferry_door::DoorMetrics::new(&mut registry);
            let ctx = crate::https::door_context(&config, &prepared, &shared, door_metrics)?;
            let door = ferry_door::Door::bind(https.listen, https.clear_listen, ctx)
                .await
                .map_err(|source| StartError::Listen {
                    addr: https.listen.or(https.clear_listen).unwrap_or(config.listen),
                    source,
                })?;
            tracing::info!(https = ?door.local_addr(), http = ?door.clear_addr(), "HTTP door ready");
            Some(door)
        } else {
            None
        };
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| StartError::Listen {
                    addr: config.listen,
                    source,
                })?;
        let pool = BufferPool::new(
            ferry_dtp::IO_CHUNK.min(config.block_size.map_or(usize::MAX, |b| b as usize)),
            64,
        );
        let metrics_addr = config.metrics;
        let role = if config.data_node {
            let ctx = crate::striped::node::NodeContext::new(
                config,
                prepared,
                pool,
                transports,
                disk_stacks,
            )?;
            tracing::info!(listen = %ctx.config.listen, auth = ?ctx.auth, "data node ready");
            Role::Node(Arc::new(Live::new(Arc::new(ctx))))
        } else {
            let nodes = frontend_nodes(&config, prepared.ipc);
            let poll_budget = match config.polling_streams {
                Some(n) => PollBudget::new(n),
                None => PollBudget::for_this_host(),
            };
            let ctx = ServerContext {
                config,
                storage_rw: prepared.storage_rw,
                storage_ro: prepared.storage_ro,
                passwords: prepared.passwords,
                accounts: prepared.accounts,
                pool,
                poll_budget,
                modules: ModuleRegistry::with_builtins(),
                disk_stacks,
                transports,
                shared: Arc::clone(&shared),
                gsi: prepared.gsi,
                nodes,
            };
            Role::Pi(Arc::new(Live::new(Arc::new(ctx))))
        };
        let metrics = match metrics_addr {
            Some(addr) => Some(
                ferry_metrics::Endpoint::bind(addr, Arc::new(registry), health(&role))
                    .await
                    .map_err(|source| StartError::Metrics { addr, source })?,
            ),
            None => None,
        };
        Ok(Server {
            listener,
            role,
            shared,
            metrics,
            door,
        })
    }

    /// The bound control address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The bound HTTPS door address (`[https] listen`), if any.
    pub fn https_addr(&self) -> Option<SocketAddr> {
        self.door.as_ref().and_then(ferry_door::Door::local_addr)
    }

    /// The bound clear-text HTTP address (`[https] clear-listen`), if any.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.door.as_ref().and_then(ferry_door::Door::clear_addr)
    }

    /// The bound metrics address (`--metrics`), if any.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|m| m.local_addr().ok())
    }

    /// A handle that reloads this server's configuration while it runs (SIGHUP).
    pub fn reloader(&self) -> Reloader {
        Reloader::new(
            self.role.clone(),
            Arc::clone(&self.shared),
            self.door.as_ref().map(ferry_door::Door::handle),
        )
    }

    /// Accepts control connections until the task is dropped.
    pub async fn run(self) -> std::io::Result<()> {
        if let Some(endpoint) = self.metrics {
            tokio::spawn(async move {
                if let Err(e) = endpoint.serve().await {
                    tracing::error!("metrics endpoint stopped: {e}");
                }
            });
        }
        if let Some(door) = self.door {
            tokio::spawn(door.run());
        }
        let live = match self.role {
            Role::Pi(live) => live,
            Role::Node(node) => return crate::striped::node::serve(self.listener, node).await,
        };
        loop {
            let (mut stream, peer) = match self.listener.accept().await {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors or a reset before accept: keep serving the others.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let ctx = live.load();
            let Some(open) = OpenConnection::open(&ctx.shared, ctx.config.connections_max) else {
                tracing::warn!(%peer, connections_max = ctx.config.connections_max, "connection refused: too many connections");
                tokio::spawn(async move {
                    let _ = stream
                        .write_all(b"421 Too many connections; try again later.\r\n")
                        .await;
                });
                continue;
            };
            tokio::spawn(async move {
                let _open = open;
                let _ = stream.set_nodelay(true);
                session::run(stream, peer, ctx).await;
            });
        }
    }
}

/// A striped frontend's data nodes, linked with `ipc` (`None` for a single server).
pub(crate) fn frontend_nodes(
    config: &ServerConfig,
    ipc: Option<crate::striped::ipc::IpcAuth>,
) -> Option<Arc<crate::striped::frontend::NodeSet>> {
    let auth = ipc?;
    tracing::info!(nodes = ?config.remote_nodes, "striped frontend");
    Some(Arc::new(crate::striped::frontend::NodeSet::new(
        config.remote_nodes.clone(),
        auth,
        std::time::Duration::from_secs(config.ipc_connect_timeout.max(1)),
    )))
}

/// One open control connection, counted until its task ends, however it ends.
struct OpenConnection(Arc<Shared>);

impl OpenConnection {
    /// Counts a connection; `None` (and nothing counted) when `max` are open already.
    fn open(shared: &Arc<Shared>, max: usize) -> Option<OpenConnection> {
        let n = shared.connections.fetch_add(1, Ordering::AcqRel) + 1;
        if n > max {
            shared.connections.fetch_sub(1, Ordering::AcqRel);
            shared.metrics.connections.refused();
            return None;
        }
        shared.metrics.connections.opened();
        Some(OpenConnection(Arc::clone(shared)))
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::AcqRel);
        self.0.metrics.connections.closed();
    }
}

/// `/healthz`: what `SITE STATUS` says, from the configuration in force; 503 while the server
/// is full (a new connection would be refused).
fn health(role: &Role) -> ferry_metrics::HealthCheck {
    let role = role.clone();
    Arc::new(move || {
        let relaxed = Ordering::Relaxed;
        match &role {
            Role::Pi(live) => {
                let ctx = live.load();
                let s = &ctx.shared;
                let sessions = s.connections.load(relaxed);
                let max = ctx.config.connections_max;
                let ok = sessions < max;
                ferry_metrics::Health {
                    ok,
                    body: serde_json::json!({
                        "status": if ok { "ok" } else { "full" },
                        "version": crate::VERSION,
                        "uptime_s": s.started.elapsed().as_secs(),
                        "sessions": sessions,
                        "sessions_max": max,
                        "transfers_running": s.transfers_running.load(relaxed),
                        "transfers_started": s.next_transfer.load(relaxed).saturating_sub(1),
                    }),
                }
            }
            Role::Node(_) => ferry_metrics::Health {
                ok: true,
                body: serde_json::json!({"status": "ok", "version": crate::VERSION, "role": "data node"}),
            },
        }
    })
}
