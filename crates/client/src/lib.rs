//! The GridFTP client: control sessions, two-party and third-party transfers that run the same
//! DTP as the server, remote file management, and the copy planner behind `ferry copy`.
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod checks;
pub mod choose;
mod control;
mod copy;
mod data_channel;
mod drive;
mod error;
mod ftps;
mod gsi;
mod job;
pub mod multilink;
mod oneshot;
mod ops;
mod options;
pub mod path;
mod pipeline;
mod plan;
mod relay;
mod request;
mod retune;
mod session;
mod session_key;
mod sessions;
pub mod sites;
mod stream;
mod tcp_settings;
mod third_party;
mod transfer;
mod transfer_list;
pub mod url;

pub use control::ControlClient;
pub use copy::{copy, copy_with_sessions};
pub use drive::Progress;
pub use error::{ClientError, ErrorClass};
pub use ferry_gsi::Delegation;
pub use gsi::{GsiOptions, GsiSetup};
pub use job::{run_pipelined, FileCopied, FileCopy, FileCopyError, FileCopyEvent, Retry};
pub use oneshot::{get, put, TransferOptions};
pub use ops::{parse_mlsx_line, EntryKind, RemoteEntry};
pub use options::{
    checksum_algorithm, CopyEvent, CopyOptions, CopySummary, Ends, EventSink, SyncLevel, Verify,
};
pub use plan::{display, plan, Job, Plan};
pub use request::FileRequest;
pub use retune::{FirstSeconds, Retune, RetuneRule, Retuned};
pub use session::RemoteSession;
pub use sessions::Sessions;
pub use third_party::{third_party, third_party_pipelined};
pub use tokio_util::sync::CancellationToken;
pub use transfer_list::{parse_transfer_list, Listed};
pub use url::{Location, RemoteUrl};

/// A byte count for people: GiB, MiB, KiB or bytes.
pub fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} bytes"),
    }
}

/// The process's budget of receiving streams that poll at once: a copy runs several sessions
/// (`--concurrency`), and their lone streams share it.
fn poll_budget() -> std::sync::Arc<ferry_dtp::PollBudget> {
    static BUDGET: std::sync::OnceLock<std::sync::Arc<ferry_dtp::PollBudget>> =
        std::sync::OnceLock::new();
    std::sync::Arc::clone(BUDGET.get_or_init(ferry_dtp::PollBudget::for_this_host))
}
