//! Restart (111) and performance (112) markers.

mod perf;
mod restart;

pub use perf::PerfMarker;
pub use restart::RestartMarker;
