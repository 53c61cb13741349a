//! The accept loop: one small task per control connection on the multi-threaded runtime.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use ferry_dtp::BufferPool;
use ferry_storage::modules::ModuleRegistry;
use ferry_storage::{PosixStorage, Storage};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use crate::auth::PasswordDb;
use crate::config::{ConfigError, ServerConfig};
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
    pub(crate) modules: ModuleRegistry,
    pub(crate) translog: Option<TransferLog>,
    pub(crate) connections: AtomicUsize,
    pub(crate) next_transfer: AtomicU64,
    /// The host credential, trusted CAs and authorization, when GSI is on.
    pub(crate) gsi: Option<crate::gsi::GsiServer>,
}

/// A bound, ready server.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    ctx: Arc<ServerContext>,
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
    /// The control address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// Address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

impl Server {
    /// Validates `config`, opens the root and binds the control port.
    pub async fn bind(config: ServerConfig) -> Result<Server, StartError> {
        config.validate()?;
        let root_err = |source| StartError::Root {
            path: config.root.display().to_string(),
            source,
        };
        let storage_rw: Arc<dyn Storage> =
            Arc::new(PosixStorage::open(&config.root, false).map_err(root_err)?);
        let storage_ro: Arc<dyn Storage> =
            Arc::new(PosixStorage::open(&config.root, true).map_err(root_err)?);
        let passwords = match &config.password_file {
            Some(p) => PasswordDb::load(p)?,
            None => PasswordDb::default(),
        };
        let translog = match &config.log_transfer {
            Some(p) => Some(
                TransferLog::open(p).map_err(|source| StartError::TransferLog {
                    path: p.display().to_string(),
                    source,
                })?,
            ),
            None => None,
        };
        let gsi = if config.gsi {
            Some(crate::gsi::GsiServer::load(&config)?)
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
        let ctx = Arc::new(ServerContext {
            config,
            storage_rw,
            storage_ro,
            passwords,
            pool,
            modules: ModuleRegistry::with_builtins(),
            translog,
            connections: AtomicUsize::new(0),
            next_transfer: AtomicU64::new(1),
            gsi,
        });
        Ok(Server { listener, ctx })
    }

    /// The bound control address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts control connections until the task is dropped.
    pub async fn run(self) -> std::io::Result<()> {
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
            let ctx = Arc::clone(&self.ctx);
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
