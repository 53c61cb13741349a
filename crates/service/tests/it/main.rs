//! The service crate's integration tests, one module per concern, built as one test binary (each
//! test binary links the whole program with LTO, so one binary builds in a fraction of the time
//! of one per file). `cargo test --release -p ferry-service --test it MODULE::` runs one module.

mod fake_ftp;
mod pg;

mod api;
mod connections;
mod destinations;
mod queue;
