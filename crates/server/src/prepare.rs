//! Everything a configuration loads before the control port is bound: the root, the password
//! file, GSI (host credential, CAs, grid-mapfile) and the striping link. `Server::bind` starts
//! from it and `Server::check_config` stops at it, so the check finds every error a start
//! would, without binding a port or touching the transfer log.

use std::path::Path;
use std::sync::Arc;

use ferry_gsi::{Credential, TrustStore};
use ferry_storage::{ChecksumCache, PosixStorage, Storage};

use ferry_site::Accounts;

use crate::auth::PasswordDb;
use crate::config::{ConfigError, ServerConfig};
use crate::daemon::{Drivers, Server, StartError};
use crate::striped::ipc::IpcAuth;
use crate::striped::AllowFrom;

/// What a configuration loaded.
pub(crate) struct Prepared {
    pub(crate) storage_rw: Arc<dyn Storage>,
    pub(crate) storage_ro: Arc<dyn Storage>,
    pub(crate) passwords: PasswordDb,
    /// The account each kind of login works as.
    pub(crate) accounts: Accounts,
    /// GSI logins (not on a data node).
    pub(crate) gsi: Option<crate::gsi::GsiServer>,
    /// The link between a frontend and its data nodes.
    pub(crate) ipc: Option<IpcAuth>,
    /// A GSI data node's host credential and CAs.
    pub(crate) host: Option<(Credential, Arc<TrustStore>)>,
    /// A data node's admitted frontends.
    pub(crate) allow: Option<AllowFrom>,
}

impl Prepared {
    /// Validates `config` and loads what it names.
    pub(crate) fn load(config: &ServerConfig) -> Result<Prepared, StartError> {
        config.validate()?;
        let root_err = |source| StartError::Root {
            path: config.root.display().to_string(),
            source,
        };
        // One cache for the root, so read-only sessions' values serve writers too; a reload
        // starts a new one (the attributes stay).
        let cache = Arc::new(ChecksumCache::new(config.checksum_cache));
        let open = |read_only| {
            PosixStorage::open(&config.root, read_only)
                .map(|s| s.with_checksum_cache(Arc::clone(&cache)))
                .map_err(root_err)
        };
        let storage_rw: Arc<dyn Storage> = Arc::new(open(false)?);
        let storage_ro: Arc<dyn Storage> = Arc::new(open(true)?);
        let passwords = match &config.password_file {
            Some(p) => PasswordDb::load(p)?,
            None => PasswordDb::default(),
        };
        let accounts = if config.data_node {
            Accounts::default()
        } else {
            Accounts::resolve(&config.account_policy(), &passwords)
                .map_err(|e| ConfigError::Invalid(e.to_string()))?
        };
        let gsi = if config.gsi && !config.data_node {
            Some(crate::gsi::GsiServer::load(config)?)
        } else {
            None
        };
        let ipc = if config.data_node || !config.remote_nodes.is_empty() {
            Some(IpcAuth::from_config(config).map_err(StartError::Ipc)?)
        } else {
            None
        };
        let (host, allow) = if config.data_node {
            let host = if config.gsi {
                Some(crate::gsi::load_host(config)?)
            } else {
                None
            };
            let allow = AllowFrom::new(&config.ipc_allow_from).map_err(StartError::Ipc)?;
            (host, Some(allow))
        } else {
            (None, None)
        };
        Ok(Prepared {
            storage_rw,
            storage_ro,
            passwords,
            accounts,
            gsi,
            ipc,
            host,
            allow,
        })
    }
}

/// What `Server::check_config` found: a line per part it checked, and what it would warn of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigReport {
    /// What was loaded and how it looks.
    pub checked: Vec<String>,
    /// Settings that work but are probably not what the admin meant.
    pub warnings: Vec<String>,
}

impl Server {
    /// Checks `config` as [`Server::bind_with`] would (every file it names is read and every
    /// credential verified) without binding the control port or writing anything.
    pub fn check_config(
        config: &ServerConfig,
        drivers: &Drivers,
    ) -> Result<ConfigReport, StartError> {
        let p = Prepared::load(config)?;
        let mut r = ConfigReport::default();
        let role = if config.data_node {
            "data node of a striped server"
        } else if !config.remote_nodes.is_empty() {
            "striped frontend"
        } else {
            "single server"
        };
        r.checked
            .push(format!("{role}, control address {}", config.listen));
        r.checked
            .push(format!("root {}: opened", config.root.display()));
        if config.anonymous {
            let how = if config.anonymous_write {
                "read-write"
            } else {
                "read-only"
            };
            r.checked.push(format!("anonymous logins, {how}"));
        }
        r.checked
            .extend(p.accounts.report(&config.account_policy(), &p.passwords));
        if let Some(f) = &config.password_file {
            let n = p.passwords.len();
            r.checked
                .push(format!("password file {}: {n} users", f.display()));
            if n == 0 {
                r.warnings
                    .push(format!("password file {} has no users", f.display()));
            }
        }
        if let Some(gsi) = &p.gsi {
            r.checked.push(format!(
                "GSI: host credential {} ({} s left), CAs and grid-mapfile loaded",
                gsi.credential().subject(),
                gsi.credential().seconds_left().unwrap_or(0)
            ));
        }
        if let Some((credential, _)) = &p.host {
            r.checked.push(format!(
                "GSI data node: host credential {}",
                credential.subject()
            ));
        }
        if p.ipc.is_some() {
            r.checked
                .push("striping link: authentication loaded".into());
        }
        if let Some(path) = &config.log_transfer {
            let format = match config.log_transfer_format {
                crate::TransferLogFormat::Json => "JSON",
                crate::TransferLogFormat::Globus => "Globus fields",
            };
            r.checked
                .push(format!("{} ({format})", transfer_log_check(path)?));
        }
        if let Some(addr) = config.metrics {
            r.checked.push(format!(
                "metrics and health on http://{addr}/metrics and /healthz"
            ));
        }
        if let Some(addr) = config.https.listen.filter(|_| !config.data_node) {
            r.checked.push(crate::https::report(config, &p, addr)?);
        }
        if let Some(addr) = config.https.clear_listen.filter(|_| !config.data_node) {
            r.checked.push(format!(
                "clear-text HTTP door on http://{addr}/: {}",
                if config.anonymous {
                    "anonymous access only"
                } else {
                    "no login it could take (no --anonymous): every request gets 401"
                }
            ));
        }
        if let Some(cc) = &config.data_congestion {
            r.checked
                .push(format!("data connections use TCP congestion control {cc}"));
        }
        for name in &config.dc_whitelist {
            if !drivers.transports.has_driver(name) {
                r.warnings.push(format!(
                    "--dc-whitelist names '{name}', which this build does not have"
                ));
            }
        }
        if let Some(text) = &config.dc_default {
            match crate::session::pi::stacks::default_net_stack(config, &drivers.transports) {
                Ok(_) => r
                    .checked
                    .push(format!("sessions start on the data-channel stack {text}")),
                Err(why) => r.warnings.push(format!(
                    "--dc-default {text} ignored, sessions start on tcp: {why}"
                )),
            }
        }
        for name in &config.fs_whitelist {
            if !drivers.disk_stacks.exists(name) {
                r.warnings.push(format!(
                    "--fs-whitelist names '{name}', which this build does not have"
                ));
            }
        }
        Ok(r)
    }
}

/// Whether the transfer log could be appended to, without creating it.
fn transfer_log_check(path: &Path) -> Result<String, StartError> {
    let err = |source| {
        StartError::TransferLog(ferry_site::translog::TransferLogError {
            path: path.display().to_string(),
            source,
        })
    };
    if path.exists() {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(err)?;
        return Ok(format!("transfer log {}: writable", path.display()));
    }
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no directory {}", parent.display()),
        )));
    }
    Ok(format!("transfer log {}: will be created", path.display()))
}
