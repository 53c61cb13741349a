//! The server's integration tests, one module per concern, built as one test binary. Each test
//! binary links the whole server with thin LTO: as nineteen binaries they took 2,250 s of CPU to
//! build (~118 s each), as one 205 s. `cargo test --release -p ferry-server --test it markers::`
//! runs one module.

mod common;

mod bounce;
mod checksum_cache;
mod checksums;
mod config_file;
mod confinement;
mod control_input;
mod driver_stacks;
mod file_commands;
mod ipv6;
mod listings;
mod login_and_limits;
mod markers;
mod polling_uploads;
mod resumable_copy;
mod striped_markers;
mod transfer_failures;
mod transfer_log;
mod transfers_mode_e;
mod transfers_stream;
mod transport_seam;
