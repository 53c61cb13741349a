//! The HTTPS/WebDAV door (DESIGN.md "Doors"): the site's storage served over HTTP/1.1 and
//! HTTP/2 on TLS, beside the GridFTP door and sharing with it the storage (root confinement,
//! run-as-user identity threads), the checksum cache, the password file and grid-mapfile
//! accounts, the transfer log and the metrics registry.
//!
//! Methods: GET and HEAD (ranges, conditional requests, `Want-Digest`), PUT (streamed to a
//! temporary name, renamed only when whole and its digests agree), DELETE, MKCOL, MOVE, COPY,
//! OPTIONS and PROPFIND (WebDAV class 1); HTTP third-party copy as the active party (`COPY`
//! with `Source`, or with a `Destination` on another server).
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]
// Handlers answer with a whole response either way (`Err` is the refusal, sent as it is):
// it moves once per request, so boxing it would buy nothing.
#![allow(clippy::result_large_err)]

mod body;
mod coalesce;
pub mod config;
mod context;
mod dav;
mod deadprops;
mod get;
mod listener;
mod macaroon;
pub mod metrics;
mod principal;
mod propfind;
mod put;
mod reply;
mod req;
mod request;
mod tpc;
mod zerocopy;

pub use config::HttpsConfig;
pub use context::{process_secret, DoorContext, X509Logins};
pub use listener::{alpn, Door, DoorHandle};
pub use metrics::DoorMetrics;
