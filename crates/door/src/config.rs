//! The door's settings: the `[https]` table of `ferry.toml`, and `ferry serve --https-*`.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// The HTTPS door's settings. Logins, accounts, the root and checksums are the server's own
/// (one setting governs both doors).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct HttpsConfig {
    /// Address of the HTTPS listener (`None`: no HTTPS door). The field's ports: 443, 8443,
    /// 2880 (dCache), 1094 (XRootD).
    pub listen: Option<SocketAddr>,
    /// Address of a clear-text HTTP listener on the same door (`None`: none). It serves
    /// anonymous access only: passwords never cross it and certificates cannot.
    pub clear_listen: Option<SocketAddr>,
    /// Most HTTPS connections open at once; more are closed as they come.
    pub connections_max: usize,
    /// Seconds a connection has to finish its TLS handshake and each request's headers.
    pub header_timeout: u64,
    /// Largest request head (request line and headers) in bytes; a larger one gets 431.
    pub max_header_bytes: usize,
    /// Accept HTTP Basic logins checked against the password file.
    pub basic_auth: bool,
    /// The secret the tokens this door issues for third-party copies are signed with: a file
    /// holding at least 32 bytes of base64 (XRootD's `macaroons.secretkey` form); several doors
    /// sharing it accept each other's tokens. `None`: one drawn at start, good until the server
    /// stops.
    pub token_secret_file: Option<std::path::PathBuf>,
    /// ALPN prefers HTTP/2 over HTTP/1.1 (both are offered either way; HTTP/1.1 first by
    /// default: see [`crate::alpn`]).
    pub prefer_http2: bool,
    /// Third-party copies (`COPY` with `Source`, or to another server) running at once; more
    /// are answered 429.
    pub tpc_max: usize,
    /// Seconds a third-party copy may move no byte before it is failed (twice that before its
    /// first byte).
    pub tpc_stall_timeout: u64,
    /// Networks the door does not copy with (the other party's every address is checked, at
    /// each redirect too): say `["127.0.0.0/8", "::1/128", "169.254.0.0/16"]` to keep users
    /// from reaching services on the door's own host or a cloud's metadata address. Empty: any.
    pub tpc_deny_networks: Vec<ipnet::IpNet>,
    /// The credential third-party copies with `gsiftp://` servers log in with.
    pub tpc_gsiftp_credential: GsiftpCredential,
}

/// What the door logs in to `gsiftp://` servers with, for a `COPY` that bridges to GridFTP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GsiftpCredential {
    /// None: such copies are refused (`ftp://` ones are not: they need no credential).
    #[default]
    None,
    /// The host credential (the one the door's TLS uses). Every user of the door then reaches
    /// what the remote servers grant this host: map the host's subject there to an account
    /// that holds only what the door's users may share.
    Host,
}

impl Default for HttpsConfig {
    fn default() -> HttpsConfig {
        HttpsConfig {
            listen: None,
            clear_listen: None,
            connections_max: 16_384,
            header_timeout: 20,
            max_header_bytes: 64 * 1024,
            basic_auth: true,
            token_secret_file: None,
            prefer_http2: false,
            tpc_max: 64,
            tpc_stall_timeout: 60,
            tpc_deny_networks: Vec::new(),
            tpc_gsiftp_credential: GsiftpCredential::None,
        }
    }
}
