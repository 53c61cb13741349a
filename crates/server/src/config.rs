//! Server configuration: every `ferry serve` flag, also readable from a TOML file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ferry_net::PortRange;
use serde::{Deserialize, Serialize};

/// Everything `ferry serve` can be told. TOML keys are the flag names (`port-range = "50000-51000"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServerConfig {
    /// Control-channel address (port 0 picks a free one).
    pub listen: SocketAddr,
    /// Directory every path is confined beneath.
    pub root: PathBuf,
    /// Allow anonymous logins (`anonymous`/`ftp`), read-only unless `anonymous_write`.
    pub anonymous: bool,
    /// Let anonymous users write.
    pub anonymous_write: bool,
    /// File of `user:argon2-hash` lines for password logins.
    pub password_file: Option<PathBuf>,
    /// Ports for passive data listeners.
    #[serde(with = "port_range_serde")]
    pub port_range: Option<PortRange>,
    /// Most concurrent control connections.
    pub connections_max: usize,
    /// Seconds a logged-in control connection may stay silent.
    pub control_idle_timeout: u64,
    /// Seconds a connection has to log in.
    pub control_preauth_timeout: u64,
    /// Seconds a transfer may move no data before it is aborted.
    pub data_idle_timeout: u64,
    /// Append one line per transfer to this file (reopened on SIGHUP, for logrotate).
    pub log_transfer: Option<PathBuf>,
    /// How transfer-log lines are written: JSON, or Globus' own fields.
    pub log_transfer_format: ferry_site::TransferLogFormat,
    /// Serve Prometheus metrics (`/metrics`) and a health answer (`/healthz`) on this address.
    pub metrics: Option<SocketAddr>,
    /// Where whole-file checksums are kept for `CKSM`: `xattr` (the files' extended attributes,
    /// XRootD's `user.XrdCks.*` records and ferry's own, plus memory), `memory`, or `off`
    /// (every `CKSM` reads the file).
    pub checksum_cache: ferry_storage::CacheMode,
    /// Checksums every whole-file transfer takes while its bytes move, and keeps (not with
    /// `checksum-cache = "off"`).
    pub transfer_checksums: Vec<String>,
    /// MODE E block size this server sends, in bytes (`None`: 256 KiB on one stream, 1 MiB on
    /// several).
    pub block_size: Option<u32>,
    /// TCP congestion control of the data connections (`None`: the system's,
    /// `net.ipv4.tcp_congestion_control`). A client may ask another for its session with
    /// `SITE SETNETSTACK tcp:congestion=NAME`; FEAT lists what this host offers.
    pub data_congestion: Option<ferry_net::Congestion>,
    /// Uploads that may each read their lone stream on a thread that polls the socket (`None`:
    /// half the CPUs; `0`: none).
    pub polling_streams: Option<usize>,
    /// Data-channel drivers clients may choose with SITE SETNETSTACK (Globus' `-dc-whitelist`).
    #[serde(alias = "net-stack-whitelist")]
    pub dc_whitelist: Vec<String>,
    /// Disk-stack drivers clients may choose with SITE SETDISKSTACK (Globus' `-fs-whitelist`).
    pub fs_whitelist: Vec<String>,
    /// The data-channel stack of a session that never sends SITE SETNETSTACK, and of
    /// `SITE SETNETSTACK default` (Globus' `-dc-default`, e.g. `udt`). Its drivers must be in
    /// `dc_whitelist`; otherwise it is ignored with a warning and sessions use TCP, as Globus.
    pub dc_default: Option<String>,
    /// Text of the 220 banner (default names ferry and its version).
    pub banner: Option<String>,
    /// GSI logins: AUTH GSSAPI with the host credential, grid-mapfile authorization.
    pub gsi: bool,
    /// Host certificate (`None`: X509_USER_CERT, else /etc/grid-security/hostcert.pem).
    pub host_cert: Option<PathBuf>,
    /// Host key (`None`: X509_USER_KEY, else /etc/grid-security/hostkey.pem).
    pub host_key: Option<PathBuf>,
    /// Trusted CAs (`None`: X509_CERT_DIR, else /etc/grid-security/certificates).
    pub cert_dir: Option<PathBuf>,
    /// Grid-mapfile (`None`: GRIDMAP, else /etc/grid-security/grid-mapfile).
    pub gridmap: Option<PathBuf>,
    /// Started as root: run each GSI session's file operations as the account the grid-mapfile
    /// maps it to (uid, gid, groups), as Globus does. `false` serves every session as the
    /// server's own user (a service account that owns all the data).
    pub run_as_user: bool,
    /// Started as root: the account anonymous sessions work as (Globus' `-anonymous-user`).
    /// `None`: `ftp`, else `nobody`; a root server with neither refuses anonymous service.
    pub anonymous_user: Option<String>,
    /// Started as root: the account password users work as when their line names none.
    pub password_account: Option<String>,
    /// Started as root, let sessions work as root. Off, a start that would serve any kind of
    /// login as root is refused, and so is a GSI login mapped to root.
    pub allow_root_sessions: bool,
    /// Let anonymous users see the whole file system. Off, anonymous service needs a root
    /// other than `/`.
    pub anonymous_whole_fs: bool,
    /// Sessions whose data channels are not authenticated that may still be one end of a
    /// third-party copy (name another host in PORT/EPRT/SPOR, take data connections from
    /// another host than their own): `anonymous`, `password`, `dcau-none` (GSI sessions that
    /// turned data-channel authentication off). GSI sessions with DCAU A or S always may.
    pub allow_third_party: Vec<String>,
    /// Networks (`10.0.0.0/8`) or addresses where `gridftp_multicast` children may be: the
    /// forwarder logs in and sends data only there. Empty: it forwards nowhere.
    pub multicast_allow_to: Vec<String>,
    /// Most data connections one receiving transfer takes (the client chooses how many it
    /// opens); more are closed as they come.
    pub data_streams_max: u32,
    /// Most data connections the whole server reads from at once.
    pub data_connections_max: usize,
    /// Run as a data node of a striped server: take transfer descriptions from frontends over
    /// the authenticated IPC link instead of serving FTP clients.
    pub data_node: bool,
    /// Striped frontend: the data nodes (`host:port`) that move this server's data.
    pub remote_nodes: Vec<String>,
    /// Shared secret authenticating the IPC link (TLS 1.3 with a key derived from it), for
    /// frontends and data nodes without GSI. With `gsi` and no secret, the link is GSI TLS with
    /// the host credentials.
    pub ipc_secret_file: Option<PathBuf>,
    /// GSI IPC: the subject the other end must have (`None`: the same as our host credential).
    pub ipc_subject: Option<String>,
    /// Data node: addresses or networks (`10.0.0.0/8`) that may connect; empty = any that
    /// authenticates.
    pub ipc_allow_from: Vec<String>,
    /// Frontend: seconds to wait for a data node to connect and authenticate.
    pub ipc_connect_timeout: u64,
    /// Passive listeners (PASV, EPSV, SPAS; a data node's too) bind to and advertise this
    /// address instead of the one the control connection or IPC link arrived on (Globus'
    /// `-data-interface`): for hosts whose data network is not their control network.
    pub data_interface: Option<std::net::IpAddr>,
    /// The HTTPS/WebDAV door on the same storage, logins and logs (`[https]`; off unless
    /// `listen` is set).
    pub https: ferry_door::HttpsConfig,
    /// Bearer-token issuers the HTTPS door trusts (`[[tokens.issuer]]`).
    pub tokens: ferry_site::TokensConfig,
}

impl ServerConfig {
    /// The settings that decide who sessions of either door work as.
    pub fn account_policy(&self) -> ferry_site::AccountPolicy {
        ferry_site::AccountPolicy {
            anonymous: self.anonymous,
            anonymous_user: self.anonymous_user.clone(),
            password_file: self.password_file.is_some(),
            password_account: self.password_account.clone(),
            gsi: self.gsi,
            run_as_user: self.run_as_user,
            allow_root_sessions: self.allow_root_sessions,
        }
    }

    /// The checksums each whole-file transfer takes (none when nothing would keep them).
    pub fn transfer_checksum_algorithms(&self) -> Vec<ferry_storage::ChecksumAlgorithm> {
        if self.checksum_cache == ferry_storage::CacheMode::Off {
            return Vec::new();
        }
        let mut algs = Vec::new();
        for alg in self
            .transfer_checksums
            .iter()
            .filter_map(|n| ferry_storage::ChecksumAlgorithm::from_name(n))
        {
            if !algs.contains(&alg) {
                algs.push(alg);
            }
        }
        algs
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 2811)),
            root: PathBuf::from("/"),
            anonymous: false,
            anonymous_write: false,
            password_file: None,
            port_range: None,
            connections_max: 65_536,
            control_idle_timeout: 600,
            control_preauth_timeout: 60,
            data_idle_timeout: 600,
            log_transfer: None,
            log_transfer_format: ferry_site::TransferLogFormat::Json,
            metrics: None,
            checksum_cache: ferry_storage::CacheMode::Xattr,
            transfer_checksums: vec!["ADLER32".into()],
            block_size: None,
            data_congestion: None,
            polling_streams: None,
            dc_whitelist: vec!["tcp".into(), "gsi".into()],
            fs_whitelist: vec!["file".into()],
            dc_default: None,
            banner: None,
            gsi: false,
            host_cert: None,
            host_key: None,
            cert_dir: None,
            gridmap: None,
            run_as_user: true,
            anonymous_user: None,
            password_account: None,
            allow_root_sessions: false,
            anonymous_whole_fs: false,
            allow_third_party: Vec::new(),
            multicast_allow_to: Vec::new(),
            data_streams_max: ferry_dtp::STREAMS_PER_TRANSFER,
            data_connections_max: 16_384,
            data_node: false,
            remote_nodes: Vec::new(),
            ipc_secret_file: None,
            ipc_subject: None,
            ipc_allow_from: Vec::new(),
            ipc_connect_timeout: 5,
            data_interface: None,
            https: ferry_door::HttpsConfig::default(),
            tokens: ferry_site::TokensConfig::default(),
        }
    }
}

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// File.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this configuration.
    #[error("{path}: {source}")]
    Parse {
        /// File.
        path: PathBuf,
        /// Why.
        source: toml::de::Error,
    },
    /// The values do not make sense together.
    #[error("{0}")]
    Invalid(String),
}

impl ServerConfig {
    /// Reads a TOML configuration file.
    pub fn from_toml_file(path: &Path) -> Result<ServerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.into(),
            source,
        })
    }

    /// Checks the values together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let striped = self.data_node || !self.remote_nodes.is_empty();
        if self.data_node && !self.remote_nodes.is_empty() {
            return Err(ConfigError::Invalid(
                "--data-node and --remote-nodes exclude each other".into(),
            ));
        }
        if striped && self.ipc_secret_file.is_none() && !self.gsi {
            return Err(ConfigError::Invalid(
                "the link between frontend and data nodes must be authenticated: pass \
                 --ipc-secret-file FILE (the same secret on every node), or --gsi"
                    .into(),
            ));
        }
        for a in &self.ipc_allow_from {
            crate::striped::AllowFrom::parse(a)
                .map_err(|e| ConfigError::Invalid(format!("--ipc-allow-from: {e}")))?;
        }
        for a in &self.multicast_allow_to {
            crate::striped::AllowFrom::parse(a)
                .map_err(|e| ConfigError::Invalid(format!("--multicast-allow-to: {e}")))?;
        }
        if self.data_node {
            return Ok(());
        }
        let tokens = self.https.listen.is_some() && !self.tokens.issuer.is_empty();
        if !self.anonymous && self.password_file.is_none() && !self.gsi && !tokens {
            return Err(ConfigError::Invalid(
                "no way to log in: pass --gsi, --anonymous or --password-file FILE, or trust a \
                 token issuer on the HTTPS door"
                    .into(),
            ));
        }
        ferry_token::Issuers::new(self.tokens.issuer.clone())
            .map_err(|e| ConfigError::Invalid(format!("[[tokens.issuer]]: {e}")))?;
        if self.anonymous_write && !self.anonymous {
            return Err(ConfigError::Invalid(
                "--anonymous-write needs --anonymous".into(),
            ));
        }
        if self.https.listen.is_some() && self.https.connections_max == 0 {
            return Err(ConfigError::Invalid(
                "[https] connections-max must be at least 1".into(),
            ));
        }
        for kind in &self.allow_third_party {
            if !THIRD_PARTY_KINDS.contains(&kind.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "--allow-third-party {kind}: expected one of {}",
                    THIRD_PARTY_KINDS.join(", ")
                )));
            }
        }
        if self.anonymous && !self.anonymous_whole_fs && serves_whole_fs(&self.root) {
            return Err(ConfigError::Invalid(
                "anonymous service needs --root DIR, the directory anonymous users see (not /); \
                 pass --anonymous-whole-fs as well to serve them the whole file system"
                    .into(),
            ));
        }
        if let Some(cc) = &self.data_congestion {
            cc.check()
                .map_err(|why| ConfigError::Invalid(format!("--data-congestion {cc}: {why}")))?;
        }
        if self.block_size.is_some_and(|b| b < 4096) {
            return Err(ConfigError::Invalid(
                "--block-size must be at least 4096".into(),
            ));
        }
        for name in &self.transfer_checksums {
            if ferry_storage::ChecksumAlgorithm::from_name(name).is_none() {
                return Err(ConfigError::Invalid(format!(
                    "--transfer-checksums: unknown algorithm '{name}' (MD5, ADLER32, CRC32C, SHA1, SHA256, SHA512)"
                )));
            }
        }
        if self.data_streams_max == 0 || self.data_connections_max == 0 {
            return Err(ConfigError::Invalid(
                "--data-streams-max and --data-connections-max must be at least 1".into(),
            ));
        }
        if self.connections_max == 0 {
            return Err(ConfigError::Invalid(
                "--connections-max must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// The kinds of session `allow_third_party` may name.
pub const THIRD_PARTY_KINDS: &[&str] = &["anonymous", "password", "dcau-none"];

/// Whether `root` is `/` (spelled `/`, `//`, `/.` or through a link to it).
fn serves_whole_fs(root: &std::path::Path) -> bool {
    use std::path::Component;
    root.components()
        .all(|c| matches!(c, Component::RootDir | Component::CurDir))
        || std::fs::canonicalize(root).is_ok_and(|p| p == std::path::Path::new("/"))
}

mod port_range_serde {
    use ferry_net::PortRange;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &Option<PortRange>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(r) => s.serialize_str(&format!("{}-{}", r.lo, r.hi)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<PortRange>, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        s.map(|s| s.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_service_of_the_whole_file_system_needs_saying_so() {
        for root in ["/", "//", "/.", "/tmp/.."] {
            let c = ServerConfig {
                anonymous: true,
                root: root.into(),
                ..ServerConfig::default()
            };
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains("anonymous service needs --root"), "{root}: {e}");
            let forced = ServerConfig {
                anonymous_whole_fs: true,
                ..c
            };
            forced.validate().unwrap();
        }
        let c = ServerConfig {
            anonymous: true,
            root: "/srv/ftp".into(),
            ..ServerConfig::default()
        };
        c.validate().unwrap();
    }

    #[test]
    fn toml_with_every_key_parses() {
        let cfg: ServerConfig = toml::from_str(
            r#"
            listen = "[::1]:0"
            root = "/srv/data"
            anonymous = true
            anonymous-write = true
            password-file = "/etc/ferry/passwd"
            password-account = "ferrydata"
            allow-root-sessions = false
            anonymous-whole-fs = false
            allow-third-party = ["password"]
            multicast-allow-to = ["10.0.0.0/8"]
            data-streams-max = 64
            data-connections-max = 4096
            port-range = "50000-50100"
            connections-max = 100
            control-idle-timeout = 30
            control-preauth-timeout = 10
            data-idle-timeout = 20
            log-transfer = "/var/log/ferry.log"
            log-transfer-format = "globus"
            metrics = "127.0.0.1:9812"
            block-size = 262144
            polling-streams = 2
            dc-whitelist = ["tcp", "gsi"]
            fs-whitelist = ["file"]
            banner = "hello"
            "#,
        )
        .unwrap();
        assert_eq!(
            cfg.port_range,
            Some(PortRange {
                lo: 50000,
                hi: 50100
            })
        );
        assert!(cfg.listen.is_ipv6());
        assert_eq!(
            cfg.log_transfer_format,
            ferry_site::TransferLogFormat::Globus
        );
        assert_eq!(cfg.metrics, Some("127.0.0.1:9812".parse().unwrap()));
        cfg.validate().unwrap();
    }

    #[test]
    fn unknown_keys_and_no_login_method_are_refused() {
        assert!(toml::from_str::<ServerConfig>("bogus = 1").is_err());
        assert!(ServerConfig::default().validate().is_err());
    }
}
