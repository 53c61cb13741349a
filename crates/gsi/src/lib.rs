//! GSI, the Grid Security Infrastructure, as GridFTP speaks it: X.509 credentials with RFC 3820
//! proxy certificates, trusted-CA directories with signing policies and CRLs, the GSS token
//! exchange (TLS in `ADAT` tokens, the keep-going byte, delegation) driven through memory,
//! wrapping of protected messages, target-name checks, and grid-mapfile authorization.
//!
//! Sans-IO like `ferry-proto`: nothing here opens a socket; callers move the tokens.
//! Cryptography and path validation are OpenSSL's (the `openssl` crate, proxies allowed).

#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod ca;
pub mod context;
pub mod credential;
pub mod data;
mod der;
#[doc(hidden)]
pub use der::fuzz_readers as fuzz_der_readers;
mod certkind;
pub mod dn;
pub mod error;
pub mod gridmap;
pub mod https;
pub mod protect;
pub mod proxy;
pub mod record;
pub mod signing_policy;
pub mod target;
pub mod trust;

pub use ca::{CertificateAuthority, IssueSpec};
pub use context::{ContextConfig, Delegation, SecurityContext, Step};
pub use credential::{Credential, CredentialSource};
pub use data::{DataSecurity, PeerCheck};
pub use error::{GsiError, Result};
pub use gridmap::{Authorizer, GridMap};
pub use proxy::{CertKind, ProxyFormat, ProxyOptions, ProxyPolicy};
pub use record::{RecordLayer, Suite, TrafficSecrets};
pub use target::Target;
pub use trust::{TrustStore, Verified, VerifyOptions};
