//! What every request of one configuration shares; a reload (SIGHUP) builds a new one.

use std::sync::Arc;

use ferry_gsi::{Authorizer, TrustStore};
use ferry_site::{Accounts, PasswordDb, TransferLog};
use ferry_storage::{ChecksumAlgorithm, Storage};
use openssl::ssl::SslAcceptor;

use crate::config::HttpsConfig;
use crate::metrics::DoorMetrics;

/// X.509 logins: the trusted CAs a client's chain must verify against and the grid-mapfile
/// that maps its identity to an account (the same the GridFTP door's GSI logins use).
#[derive(Clone)]
pub struct X509Logins {
    /// Trusted CAs, signing policies and CRLs.
    pub trust: Arc<TrustStore>,
    /// DN to account.
    pub authorizer: Arc<dyn Authorizer>,
}

impl std::fmt::Debug for X509Logins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("X509Logins")
            .field("trust", &self.trust)
            .finish_non_exhaustive()
    }
}

/// The door's view of the site: built by `ferry serve` from the same loaded configuration as
/// the GridFTP door's.
pub struct DoorContext {
    /// The door's own settings.
    pub https: HttpsConfig,
    /// The root, writable.
    pub storage_rw: Arc<dyn Storage>,
    /// The root, read-only (anonymous sessions without `anonymous-write`).
    pub storage_ro: Arc<dyn Storage>,
    /// Password logins (HTTP Basic).
    pub passwords: PasswordDb,
    /// The account each kind of login works as.
    pub accounts: Accounts,
    /// Anonymous access (no credentials at all).
    pub anonymous: bool,
    /// Anonymous users may write.
    pub anonymous_write: bool,
    /// X.509 sessions work as their mapped account.
    pub run_as_user: bool,
    /// X.509 logins (`None`: GSI is off, client certificates are not looked at).
    pub x509: Option<X509Logins>,
    /// Bearer tokens of the issuers the site trusts (`None`: none is, tokens are refused).
    pub tokens: Option<Arc<ferry_site::TokenAuthority>>,
    /// TLS with the host credential; `None` for a door with no HTTPS listener (clear text
    /// only), which needs no credential.
    pub tls: Option<SslAcceptor>,
    /// The secret the tokens this door issues are signed with (`https.token-secret-file`, or
    /// one drawn at start for the life of the process).
    pub site_secret: Arc<Vec<u8>>,
    /// The credential and CAs of third-party copies with `gsiftp://` servers
    /// (`https.tpc-gsiftp-credential`); `None`: such copies are refused.
    pub gsiftp: Option<Arc<ferry_client::GsiSetup>>,
    /// The CA directory outgoing HTTPS (third-party copy) trusts besides the system's CAs.
    pub ca_dir: Option<std::path::PathBuf>,
    /// The checksums every whole-file upload takes and keeps.
    pub transfer_checksums: Vec<ChecksumAlgorithm>,
    /// The site's transfer log.
    pub log: Arc<TransferLog>,
    /// This host's name, for the transfer log.
    pub host: String,
    /// The door's metrics.
    pub metrics: DoorMetrics,
}

impl std::fmt::Debug for DoorContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DoorContext")
            .field("https", &self.https)
            .field("anonymous", &self.anonymous)
            .field("x509", &self.x509)
            .finish_non_exhaustive()
    }
}

/// One finished HTTP transfer, for the site's transfer log.
#[derive(Debug)]
pub(crate) struct HttpTransfer<'a> {
    pub(crate) user: &'a str,
    pub(crate) peer: std::net::SocketAddr,
    /// `GET` or `PUT`.
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    pub(crate) bytes: u64,
    pub(crate) started: std::time::Instant,
    /// The HTTP status it ended with.
    pub(crate) status: u16,
    /// `ok`, or why not.
    pub(crate) result: &'a str,
    /// Checksums taken while the bytes moved, by name.
    pub(crate) checksums: &'a [(&'static str, String)],
}

/// A secret drawn once per process, for doors given none: tokens they issue last until the
/// server stops (reloads keep it).
pub fn process_secret() -> Arc<Vec<u8>> {
    static SECRET: std::sync::OnceLock<Arc<Vec<u8>>> = std::sync::OnceLock::new();
    Arc::clone(SECRET.get_or_init(|| Arc::new(rand::random::<[u8; 32]>().to_vec())))
}

impl DoorContext {
    /// Writes `t` to the transfer log: an HTTP transfer is a transfer like a RETR or a STOR
    /// (Globus' format records it as one when it succeeded, code 226).
    pub(crate) fn log_transfer(&self, t: &HttpTransfer<'_>) {
        let ok = (200..300).contains(&t.status);
        let checksums = t.checksums.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.log.write(
            &ferry_site::TransferRecord {
                time: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64()),
                user: t.user,
                peer: t.peer.to_string(),
                command: t.method,
                path: t.path,
                bytes: t.bytes,
                streams: 1,
                mode: "HTTP",
                transport: "https",
                duration_s: t.started.elapsed().as_secs_f64(),
                result: t.result,
                code: if ok { 226 } else { t.status },
                task_id: None,
                checksums,
                tcp: None,
                globus_type: if t.method == "PUT" { "STOR" } else { "RETR" },
                buffer: 0,
                block: 0,
                stripes: 1,
                data_peer: Some(t.peer.ip()),
            },
            &self.host,
        );
    }
}
