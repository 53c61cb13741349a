//! The `ferry` binary's integration tests, one module per subject, linked into one test
//! binary: one link instead of one per subject, and one `common` harness compiled once.
//! Run one subject with `cargo test --release -p ferry-cli --test it -- interop_gsi::`.

#[macro_use]
mod common;

mod bearer_tokens;
mod client_against_bad_servers;
mod gcp_tuning;
mod gsi_tools;
mod http_tpc;
mod http_tpc_gridftp;
mod http_tpc_streams;
mod https_door;
mod interop_ferry_copy;
mod interop_ftplib;
mod interop_globus_url_copy;
mod interop_gsi;
mod interop_plain_ftp;
mod interop_striping;
mod multilink;
mod run_as;
mod serve_ops;
mod serve_watch;
mod striped_netlab;
mod striped_server;
mod transfer_service;
mod transport_auto;
