//! The gsi crate's integration tests, one module per concern, built as one test binary (each
//! test binary links the whole program with LTO, so one binary builds in a fraction of the time
//! of one per file). `cargo test --release -p ferry-gsi --test it MODULE::` runs one module.

mod common;

mod context;
mod globus;
mod old_proxies;
mod records;
mod verify;
