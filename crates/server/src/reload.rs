//! Reloading a running server's configuration (SIGHUP): the new configuration is loaded in
//! full (password file, host credential, CAs and CRLs, grid-mapfile, root, whitelists, limits)
//! before anything changes; then new connections get it, while sessions and transfers already
//! running keep the configuration they started with. A configuration that does not load is
//! refused and the old one stays.

use std::sync::{Arc, RwLock};

use crate::config::ServerConfig;
use crate::daemon::{Role, ServerContext, Shared, StartError};
use crate::prepare::Prepared;
use crate::striped::node::NodeContext;

/// The configuration in force: read at each accept, replaced by a reload.
#[derive(Debug)]
pub(crate) struct Live<T>(RwLock<Arc<T>>);

impl<T> Live<T> {
    pub(crate) fn new(value: Arc<T>) -> Live<T> {
        Live(RwLock::new(value))
    }

    /// The value in force now.
    pub(crate) fn load(&self) -> Arc<T> {
        // A panic while holding the lock cannot leave a half-written Arc behind.
        Arc::clone(&self.0.read().unwrap_or_else(|e| e.into_inner()))
    }

    fn store(&self, value: Arc<T>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = value;
    }
}

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reloaded {
    /// Settings that changed but only take effect at a restart (the old value stays).
    pub need_restart: Vec<&'static str>,
}

/// Reloads a running [`crate::Server`]'s configuration; cheap to clone.
#[derive(Debug, Clone)]
pub struct Reloader {
    role: Role,
    shared: Arc<Shared>,
    door: Option<ferry_door::DoorHandle>,
}

impl Reloader {
    pub(crate) fn new(
        role: Role,
        shared: Arc<Shared>,
        door: Option<ferry_door::DoorHandle>,
    ) -> Reloader {
        Reloader { role, shared, door }
    }

    /// Loads `config` and puts it in force for new connections. On error nothing changes.
    pub fn reload(&self, config: ServerConfig) -> Result<Reloaded, StartError> {
        let r = self.try_reload(config);
        if r.is_err() {
            self.reopen_log();
        }
        self.shared.metrics.reloaded(r.is_ok());
        r
    }

    /// Counts a reload refused before it reached [`Reloader::reload`] (a file that does not
    /// parse), and reopens the transfer log all the same.
    pub fn refused(&self) {
        self.reopen_log();
        self.shared.metrics.reloaded(false);
    }

    /// Reloads at each SIGHUP caught by `hup` (caught before the server started, so a logrotate
    /// or reload that arrives while it loads its credentials is not fatal), with the
    /// configuration `load` gives then (the file read again, the flags over it). A
    /// configuration that does not load is refused with a log line and the old one stays.
    pub async fn on_hangup<F>(self, hup: std::io::Result<tokio::signal::unix::Signal>, load: F)
    where
        F: Fn() -> Result<ServerConfig, String> + Clone + Send + 'static,
    {
        let mut hup = match hup {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot catch SIGHUP, so no reloads: {e}");
                return;
            }
        };
        while hup.recv().await.is_some() {
            let (load, reloader) = (load.clone(), self.clone());
            let outcome = tokio::task::spawn_blocking(move || match load() {
                Ok(config) => reloader.reload(config).map_err(|e| e.to_string()),
                Err(e) => {
                    reloader.refused();
                    Err(e)
                }
            })
            .await;
            match outcome {
                Ok(Ok(done)) => {
                    tracing::info!("configuration reloaded (SIGHUP): new sessions use it");
                    for setting in done.need_restart {
                        tracing::warn!(
                            setting,
                            "changed, but takes effect only at a restart; the running value stays"
                        );
                    }
                }
                Ok(Err(e)) => {
                    tracing::error!(
                        "configuration reload refused, the running configuration stays: {e}"
                    )
                }
                Err(e) => tracing::error!("configuration reload failed: {e}"),
            }
        }
    }

    /// Reopens the transfer log in force: logrotate's SIGHUP moves the file whether or not the
    /// new configuration loads.
    fn reopen_log(&self) {
        if let Err(e) = self.shared.translog.reopen() {
            tracing::warn!("{e}; transfers are logged to the old file until a reload succeeds");
        }
    }

    fn try_reload(&self, mut config: ServerConfig) -> Result<Reloaded, StartError> {
        let mut done = Reloaded::default();
        match &self.role {
            Role::Pi(live) => {
                let old = live.load();
                keep_restart_only(&old.config, &mut config, &mut done.need_restart);
                let p = Prepared::load(&config)?;
                let door = match &self.door {
                    Some(handle) => {
                        let metrics = handle.load().metrics.clone();
                        Some((
                            handle,
                            crate::https::door_context(&config, &p, &self.shared, metrics)?,
                        ))
                    }
                    None => None,
                };
                // The transfer log is opened (or reopened, after logrotate moved it) last,
                // once everything else loaded.
                self.shared
                    .translog
                    .open(config.log_transfer.as_deref(), config.log_transfer_format)?;
                if let Some((handle, ctx)) = door {
                    handle.replace(ctx);
                }
                let ctx = ServerContext {
                    storage_rw: p.storage_rw,
                    storage_ro: p.storage_ro,
                    passwords: p.passwords,
                    accounts: p.accounts,
                    gsi: p.gsi,
                    pool: Arc::clone(&old.pool),
                    poll_budget: Arc::clone(&old.poll_budget),
                    modules: ferry_storage::modules::ModuleRegistry::with_builtins(),
                    disk_stacks: Arc::clone(&old.disk_stacks),
                    transports: Arc::clone(&old.transports),
                    shared: Arc::clone(&old.shared),
                    nodes: crate::daemon::frontend_nodes(&config, p.ipc),
                    config,
                };
                live.store(Arc::new(ctx));
            }
            Role::Node(live) => {
                let old = live.load();
                keep_restart_only(&old.config, &mut config, &mut done.need_restart);
                let p = Prepared::load(&config)?;
                let ctx = NodeContext::new(
                    config,
                    p,
                    Arc::clone(&old.pool),
                    Arc::clone(&old.transports),
                    Arc::clone(&old.disk_stacks),
                )?;
                live.store(Arc::new(ctx));
            }
        }
        Ok(done)
    }
}

/// Puts back the settings a running server cannot change (its sockets, buffer pool and polling
/// threads were made from them, and a data node cannot become a frontend), naming each one
/// that differed.
fn keep_restart_only(old: &ServerConfig, new: &mut ServerConfig, named: &mut Vec<&'static str>) {
    macro_rules! keep {
        ($($field:ident => $name:literal),* $(,)?) => {$(
            if new.$field != old.$field {
                named.push($name);
                new.$field = old.$field.clone();
            }
        )*};
    }
    keep!(
        listen => "listen",
        data_node => "data-node",
        block_size => "block-size",
        polling_streams => "polling-streams",
        metrics => "metrics",
    );
    if new.https.listen != old.https.listen {
        named.push("https.listen");
        new.https.listen = old.https.listen;
    }
    if new.https.clear_listen != old.https.clear_listen {
        named.push("https.clear-listen");
        new.https.clear_listen = old.https.clear_listen;
    }
}

/// Waits for SIGTERM or Ctrl-C (for ever where SIGTERM cannot be caught).
pub async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_bound_at_start_are_kept_and_named() {
        let old = ServerConfig::default();
        let mut new = ServerConfig {
            listen: "127.0.0.1:1".parse().expect("addr"),
            block_size: Some(1 << 20),
            connections_max: 5,
            gridmap: Some("/tmp/gm".into()),
            ..ServerConfig::default()
        };
        let mut named = Vec::new();
        keep_restart_only(&old, &mut new, &mut named);
        assert_eq!(named, ["listen", "block-size"]);
        assert_eq!(new.listen, old.listen);
        assert_eq!(new.block_size, None);
        // What a reload is for stays new.
        assert_eq!(new.connections_max, 5);
        assert_eq!(
            new.gridmap.as_deref(),
            Some(std::path::Path::new("/tmp/gm"))
        );
    }
}
