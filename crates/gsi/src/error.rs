//! One error type for the crate, with variants that say what a person can do about it.

use std::path::PathBuf;

/// Everything that can go wrong with credentials, trust, the security context and authorization.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GsiError {
    /// A credential or trust file could not be read or written.
    #[error("{}: {error}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why (shown in the message rather than as a source, so it is printed once).
        error: std::io::Error,
    },
    /// No credential was found where GSI looks for one.
    #[error("no credential found: {0}")]
    NoCredential(String),
    /// A PEM or DER object could not be decoded.
    #[error("{what}: {detail}")]
    Decode {
        /// What was being decoded.
        what: String,
        /// The decoder's complaint.
        detail: String,
    },
    /// The certificate chain does not verify against the trusted CAs.
    #[error("certificate chain of {subject} rejected: {reason}")]
    Untrusted {
        /// The leaf's subject.
        subject: String,
        /// What failed, in OpenSSL's words or ours.
        reason: String,
    },
    /// A CA's signing policy is missing or forbids what it signed.
    #[error("signing policy: {0}")]
    SigningPolicy(String),
    /// A proxy in the chain has a policy language other than impersonation, limited or
    /// independent: its restrictions cannot be enforced, so it does not authenticate at all.
    #[error(
        "certificate chain rejected: the proxy {subject} has policy language {language}, \
         which is not supported (only impersonation, limited and independent proxies are)"
    )]
    UnsupportedProxyPolicy {
        /// The subject of the proxy that carries it.
        subject: String,
        /// The policy language, dotted OID.
        language: String,
    },
    /// A certificate is expired or not yet valid.
    #[error("{0}")]
    Validity(String),
    /// The peer is not who the caller expected.
    #[error(
        "the name of the remote entity ({found}) and the expected name ({expected}) do not match"
    )]
    WrongPeer {
        /// The peer's identity.
        found: String,
        /// The expected name.
        expected: String,
    },
    /// The GSS token exchange broke the protocol.
    #[error("security context: {0}")]
    Protocol(String),
    /// TLS failed (handshake, record, alert).
    #[error("TLS: {0}")]
    Tls(String),
    /// The identity is not mapped to a local account.
    #[error("{0}")]
    NotAuthorized(String),
    /// OpenSSL failed in a way that is not the peer's fault.
    #[error("OpenSSL: {0}")]
    OpenSsl(#[from] openssl::error::ErrorStack),
}

/// How a revoked certificate's rejection ends ([`GsiError::Untrusted`]'s reason).
pub(crate) const REVOKED: &str = " is revoked";

impl GsiError {
    /// A short, stable name for the kind of failure, for counting (metrics labels): `credential`,
    /// `decode`, `untrusted`, `revoked`, `signing_policy`, `proxy_policy`, `expired`,
    /// `wrong_peer`, `protocol`, `tls`, `not_authorized` or `openssl`.
    pub fn reason(&self) -> &'static str {
        match self {
            GsiError::File { .. } | GsiError::NoCredential(_) => "credential",
            GsiError::Decode { .. } => "decode",
            GsiError::Untrusted { reason, .. } if reason.ends_with(REVOKED) => "revoked",
            GsiError::Untrusted { .. } => "untrusted",
            GsiError::SigningPolicy(_) => "signing_policy",
            GsiError::UnsupportedProxyPolicy { .. } => "proxy_policy",
            GsiError::Validity(_) => "expired",
            GsiError::WrongPeer { .. } => "wrong_peer",
            GsiError::Protocol(_) => "protocol",
            GsiError::Tls(_) => "tls",
            GsiError::NotAuthorized(_) => "not_authorized",
            GsiError::OpenSsl(_) => "openssl",
        }
    }

    pub(crate) fn decode(what: impl Into<String>, detail: impl std::fmt::Display) -> GsiError {
        GsiError::Decode {
            what: what.into(),
            detail: detail.to_string(),
        }
    }

    pub(crate) fn file(path: impl Into<PathBuf>, error: std::io::Error) -> GsiError {
        GsiError::File {
            path: path.into(),
            error,
        }
    }
}

/// The crate's result type.
pub type Result<T, E = GsiError> = std::result::Result<T, E>;
