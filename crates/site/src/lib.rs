//! What the doors of one site share (DESIGN.md "Doors"): the password file, the local account
//! each kind of login works as and the storage it sees, the bearer-token issuers it trusts,
//! and the transfer log. The GridFTP door
//! (`ferry-server`) and the HTTPS door (`ferry-door`) both sit on this, so one setting governs
//! both and an HTTP transfer is a transfer like any other.
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod accounts;
pub mod identity;
pub mod passwords;
pub mod tokens;
pub mod translog;

pub use accounts::{AccountPolicy, Accounts};
pub use passwords::PasswordDb;
pub use tokens::{TokenAuthority, TokensConfig};
pub use translog::{TransferLog, TransferLogFormat, TransferRecord};
