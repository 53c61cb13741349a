//! Client errors, each in a class that the command line turns into an exit code.

use ferry_proto::Reply;

/// What went wrong on the client side.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The control connection failed.
    #[error("control connection: {0}")]
    Io(#[from] std::io::Error),
    /// The server sent bytes that are not FTP replies.
    #[error("bad reply from server: {0}")]
    BadReply(#[from] ferry_proto::reply::ReplyError),
    /// The server closed the control connection.
    #[error("server closed the control connection")]
    Closed,
    /// The server refused a command.
    #[error("server refused '{command}': {} {}", reply.code, reply.text())]
    Refused {
        /// The command (passwords redacted).
        command: String,
        /// The reply.
        reply: Reply,
    },
    /// The local side of a transfer failed.
    #[error(transparent)]
    Dtp(#[from] ferry_dtp::DtpError),
    /// A local file problem.
    #[error(transparent)]
    Storage(#[from] ferry_storage::StorageError),
    /// A reply that should carry an address did not.
    #[error("cannot read data address from reply: {0}")]
    Address(String),
    /// Login refused or not authorised.
    #[error("{0}")]
    Auth(String),
    /// Host unreachable or connection lost.
    #[error("{0}")]
    Network(String),
    /// Checksums differ.
    #[error("{0}")]
    Verification(String),
    /// A request this client cannot carry out.
    #[error("{0}")]
    Unsupported(String),
    /// Bad arguments.
    #[error("{0}")]
    Usage(String),
    /// The caller cancelled the copy.
    #[error("cancelled")]
    Cancelled,
    /// A URL that does not parse.
    #[error(transparent)]
    Url(#[from] crate::url::UrlError),
    /// A server named a data address it cannot mean (a blind relay otherwise).
    #[error(transparent)]
    DataAddress(#[from] ferry_proto::data_address::DataAddressError),
    /// A listing named an entry that is not one plain path component.
    #[error("the listing of {dir} names {name:?}, which is not a plain file name (empty, or a '/' or NUL in it): refusing to copy or remove through it")]
    UnsafeName {
        /// The directory listed.
        dir: String,
        /// The name as the server sent it.
        name: String,
    },
}

/// Broad classes of failure, for exit codes and for deciding whether to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Bad arguments.
    Usage,
    /// Login refused or permission denied.
    Auth,
    /// No such file or directory.
    NotFound,
    /// Connection refused, lost or timed out: worth a retry.
    Network,
    /// Checksums differ.
    Verification,
    /// Anything else.
    Other,
}

impl ClientError {
    /// The class of this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            ClientError::Usage(_) | ClientError::Url(_) => ErrorClass::Usage,
            ClientError::Auth(_) => ErrorClass::Auth,
            ClientError::Verification(_) => ErrorClass::Verification,
            ClientError::Io(_)
            | ClientError::Closed
            | ClientError::Network(_)
            | ClientError::Address(_) => ErrorClass::Network,
            ClientError::Dtp(e) => match e.reply_code() {
                425 | 426 => ErrorClass::Network,
                _ => ErrorClass::Other,
            },
            ClientError::Storage(ferry_storage::StorageError::NotFound(_)) => ErrorClass::NotFound,
            ClientError::Storage(ferry_storage::StorageError::PermissionDenied(_)) => {
                ErrorClass::Auth
            }
            ClientError::Refused { reply, .. } => match reply.code {
                530 | 532 | 533 | 534 | 535 => ErrorClass::Auth,
                550 if reply.text().to_ascii_lowercase().contains("permission") => ErrorClass::Auth,
                550 => ErrorClass::NotFound,
                421 | 425 | 426 => ErrorClass::Network,
                _ => ErrorClass::Other,
            },
            _ => ErrorClass::Other,
        }
    }
}
