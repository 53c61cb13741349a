//! The dtp crate's integration tests, one module per concern, built as one test binary (each
//! test binary links the whole program with LTO, so one binary builds in a fraction of the time
//! of one per file). `cargo test --release -p ferry-dtp --test it MODULE::` runs one module.

mod ahead;
mod checksums_on_the_fly;
mod disk_stack;
mod lone_stream;
