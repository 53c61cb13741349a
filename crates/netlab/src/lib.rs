//! Emulated wide-area and cluster networks on one machine, for tests and for the benchmark.
//!
//! Hosts are network namespaces; each has one interface, a TUN device whose other end is the
//! emulator process. The emulator moves every packet from the sender's device to the
//! receiver's at the time the links on its path say (rate, delay, jitter, loss, queue), since
//! this kernel has no `netem`. A [`topology::Topology`] file describes a lab; `ferry-netlab`
//! brings it up and down and runs commands in its hosts.
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod emulate;
pub mod lab;
pub mod shaper;
pub mod topology;
pub mod tun;

/// Why a lab could not be described, set up or used.
#[derive(Debug, thiserror::Error)]
pub enum NetlabError {
    /// The topology file is wrong.
    #[error("{0}")]
    Topology(String),
    /// Namespaces, interfaces or the emulator could not be set up.
    #[error("{0}")]
    Setup(String),
    /// Not running as root.
    #[error("ferry-netlab needs root (network namespaces and TUN devices); run it with sudo")]
    NotRoot,
    /// No such lab or host is up.
    #[error("{0}")]
    NotUp(String),
}
