//! DTP errors, each with the FTP reply a PI sends for it.

use ferry_net::NetError;
use ferry_storage::StorageError;

/// Why a transfer failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DtpError {
    /// Storage refused or failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The data connection could not be set up: 425.
    #[error("Can't open data connection: {0}")]
    Connect(#[source] NetError),
    /// A passive listener could not be opened: 425.
    #[error("Cannot open passive listener: {0}")]
    Listen(#[source] NetError),
    /// No passive listener and no active address: 425.
    #[error("Can't open data connection: use PASV, EPSV, SPAS, PORT, EPRT or SPOR first")]
    NoDataChannel,
    /// The data connection broke or timed out during the transfer: 426.
    #[error("Data connection failed: {0}")]
    Connection(String),
    /// The peer violated MODE E: 426.
    #[error("Data channel protocol error: {0}")]
    Protocol(String),
    /// No data moved for the idle timeout: 426.
    #[error("Data channel idle for {0} s; transfer aborted")]
    IdleTimeout(u64),
    /// The request cannot be carried out (e.g. TYPE A in MODE E): 504.
    #[error("{0}")]
    Unsupported(String),
    /// The transfer's disk stack cannot be used on this DTP (a data node of another build).
    #[error("Setting filesystem driver stack failed: {0}")]
    DiskStack(#[from] crate::disk_stack::DiskStackError),
    /// A remote data node failed the transfer or was lost (a striped frontend's DTP).
    #[error("{message}")]
    Remote {
        /// The reply code to send.
        code: u16,
        /// What happened, naming the node.
        message: String,
    },
}

impl DtpError {
    /// The FTP reply code for this error.
    pub fn reply_code(&self) -> u16 {
        match self {
            DtpError::Storage(e) => e.reply_code(),
            DtpError::Connect(_) | DtpError::Listen(_) | DtpError::NoDataChannel => 425,
            DtpError::Connection(_) | DtpError::Protocol(_) | DtpError::IdleTimeout(_) => 426,
            DtpError::Unsupported(_) => 504,
            DtpError::DiskStack(_) => 500,
            DtpError::Remote { code, .. } => *code,
        }
    }
}
