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
use crate::prepare::Prepared;
use crate::session;
use crate::translog::TransferLog;

/// What every session shares.
#[derive(Debug)]
pub(crate) struct ServerContext {
    pub(crate) config: ServerConfig,
    pub(crate) storage_rw: Arc<dyn Storage>,
    pub(crate) storage_ro: Arc<dyn Storage>,
    pub(crate) passwords: PasswordDb,
    pub(crate) pool: Arc<BufferPool>,
    /// Lone receiving streams (uploads) that may poll their sockets at once.
    pub(crate) poll_budget: Arc<PollBudget>,
    pub(crate) modules: ModuleRegistry,
    /// The disk-stack drivers sessions may name (and `--fs-whitelist` admits).
    pub(crate) disk_stacks: Arc<ferry_dtp::disk_stack::DiskStacks>,
    /// The data-channel transports sessions may name (and `--dc-whitelist` admits).
    pub(crate) transports: Arc<ferry_net::Transports>,
    pub(crate) translog: Option<TransferLog>,
    pub(crate) connections: AtomicUsize,
    pub(crate) next_transfer: AtomicU64,
    /// Transfers running now (`SITE STATUS`).
    pub(crate) transfers_running: AtomicUsize,
    /// When the server started (`SITE STATUS`'s uptime).
    pub(crate) started: std::time::Instant,
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
            pool: BufferPool::new(ferry_dtp::IO_CHUNK, 4),
            poll_budget: PollBudget::new(1),
            modules: ModuleRegistry::with_builtins(),
            disk_stacks: Arc::new(ferry_dtp::disk_stack::DiskStacks::default()),
            transports: Arc::new(ferry_net::Transports::default()),
            translog: None,
            connections: AtomicUsize::new(0),
            next_transfer: AtomicU64::new(1),
            transfers_running: AtomicUsize::new(0),
            started: std::time::Instant::now(),
            gsi: config
                .gsi
                .then(|| crate::gsi::GsiServer::load(&config).expect("test GSI")),
            nodes: None,
            config,
        }
    }
}

/// What a bound server does with its connections.
#[derive(Debug)]
enum Role {
    /// Serves FTP clients (a single node, or a striped frontend).
    Pi(Arc<ServerContext>),
    /// Serves a striped frontend's IPC links.
    Node(Arc<crate::striped::node::NodeContext>),
}

/// A bound, ready server.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    role: Role,
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
    #[error("cannot open transfer log {path}: {source}")]
    TransferLog {
        /// File.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The GSI credential, CAs or grid-mapfile cannot be used.
    #[error("GSI: {0}")]
    Gsi(#[from] ferry_gsi::GsiError),
    /// The link to data nodes (or from a frontend) cannot be set up.
    #[error("striping: {0}")]
    Ipc(String),
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
#[derive(Debug, Clone, Default)]
pub struct Drivers {
    /// Data-channel transports.
    pub transports: ferry_net::Transports,
    /// Disk-stack drivers.
    pub disk_stacks: ferry_dtp::disk_stack::DiskStacks,
}

impl Server {
    /// Validates `config`, opens the root and binds the control port.
    pub async fn bind(config: ServerConfig) -> Result<Server, StartError> {
        Server::bind_with(config, Drivers::default()).await
    }

    /// [`Server::bind`], offering `drivers` instead of this build's standard set.
    pub async fn bind_with(config: ServerConfig, drivers: Drivers) -> Result<Server, StartError> {
        let Prepared {
            storage_rw,
            storage_ro,
            passwords,
            gsi,
            ipc,
            host,
            allow,
        } = Prepared::load(&config)?;
        let transports = Arc::new(drivers.transports);
        let disk_stacks = Arc::new(drivers.disk_stacks);
        let translog = match &config.log_transfer {
            Some(p) => Some(
                TransferLog::open(p).map_err(|source| StartError::TransferLog {
                    path: p.display().to_string(),
                    source,
                })?,
            ),
            None => None,
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
        if config.data_node {
            let allow = allow.ok_or_else(|| StartError::Ipc("no admitted frontends".into()))?;
            let auth = ipc.ok_or_else(|| StartError::Ipc("no IPC authentication".into()))?;
            tracing::info!(listen = %config.listen, ?auth, "data node ready");
            let ctx = Arc::new(crate::striped::node::NodeContext {
                config,
                storage_rw,
                storage_ro,
                pool,
                auth,
                allow,
                host,
                transports,
                disk_stacks,
            });
            return Ok(Server {
                listener,
                role: Role::Node(ctx),
            });
        }
        let nodes = ipc.map(|auth| {
            tracing::info!(nodes = ?config.remote_nodes, "striped frontend");
            Arc::new(crate::striped::frontend::NodeSet::new(
                config.remote_nodes.clone(),
                auth,
                std::time::Duration::from_secs(config.ipc_connect_timeout.max(1)),
            ))
        });
        let poll_budget = match config.polling_streams {
            Some(n) => PollBudget::new(n),
            None => PollBudget::for_this_host(),
        };
        let ctx = Arc::new(ServerContext {
            config,
            storage_rw,
            storage_ro,
            passwords,
            pool,
            poll_budget,
            modules: ModuleRegistry::with_builtins(),
            disk_stacks,
            transports,
            translog,
            connections: AtomicUsize::new(0),
            next_transfer: AtomicU64::new(1),
            transfers_running: AtomicUsize::new(0),
            started: std::time::Instant::now(),
            gsi,
            nodes,
        });
        Ok(Server {
            listener,
            role: Role::Pi(ctx),
        })
    }

    /// The bound control address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts control connections until the task is dropped.
    pub async fn run(self) -> std::io::Result<()> {
        let ctx = match self.role {
            Role::Pi(ctx) => ctx,
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
            let ctx = Arc::clone(&ctx);
            let n = ctx.connections.fetch_add(1, Ordering::AcqRel) + 1;
            if n > ctx.config.connections_max {
                ctx.connections.fetch_sub(1, Ordering::AcqRel);
                tokio::spawn(async move {
                    let _ = stream
                        .write_all(b"421 Too many connections; try again later.\r\n")
                        .await;
                });
                continue;
            }
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                session::run(stream, peer, Arc::clone(&ctx)).await;
                ctx.connections.fetch_sub(1, Ordering::AcqRel);
            });
        }
    }
}
