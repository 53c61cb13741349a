//! What ferry knows of a path between two ends, and the tuning it chooses from that: one
//! knowledge for every mover (gcp, `ferry copy --tune`, the transfer service, the HTTP
//! third-party copy's active side).
//!
//! - `cache.rs`: what copies learnt, per (source, destination), in one locked file per user.
//! - `window.rs`: how much one data socket of the path may buffer.
//! - `congestion.rs`: the sending side's TCP congestion control (bbr or cubic, measured).
//! - `search.rs`: the streams of large files, and the rule that re-chooses them from a file's
//!   first seconds.
//! - `tune.rs`: [`Tuning::choose`] before a copy and [`Tuning::learn`] after it.
//!
//! It sits in `ferry-client` because it probes over the client's [`Sessions`](crate::Sessions)
//! (the logins the copy then goes on with) and re-tunes through its [`Retune`](crate::Retune)
//! hook: a crate of its own would depend on everything here and on nothing else.

mod cache;
mod congestion;
mod search;
mod tune;
mod window;

pub use cache::{PathCache, PathEntry, Search};
pub use congestion::CongestionArg;
pub use tune::{Asked, Tuning};
