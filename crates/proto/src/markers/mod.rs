//! Restart (111) and performance (112) markers.

mod perf;
mod restart;

pub use perf::{data_rtt_in, data_rtt_line, PerfMarker};
pub use restart::RestartMarker;
