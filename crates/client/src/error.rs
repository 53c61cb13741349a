//! Client errors.

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
}
