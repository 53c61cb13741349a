//! What this host's path cache knows of a file's path: the streams that `gcp` and
//! `ferry copy --tune` learnt there, and what the service's own transfers teach them in turn.

use ferry_client::path::{Asked, CongestionArg, Tuning};
use ferry_client::FileCopied;

use super::*;

/// Files from this size up have their streams chosen from the path (as `gcp` chooses them).
const LARGE: u64 = 16 << 20;

impl Scheduler {
    /// Tunes `copy` to its path from the path cache, when its job leaves the streams to the
    /// service and the file is large; the tuning then learns from the transfer. The probe is
    /// the link's logins, which the transfer goes on with.
    pub(super) async fn tuned(
        &self,
        nostreams: Option<u32>,
        copy: &mut FileCopy,
        sessions: &mut Sessions,
    ) -> Option<Tuning> {
        let cache = self.path_cache.clone()?;
        if nostreams.is_some() || copy.size.is_none_or(|s| s < LARGE) {
            return None;
        }
        // The sender keeps its congestion control: a trial of another needs the first-seconds
        // rule of a whole copy to take it back, which a single file's attempt does not run.
        let asked = Asked {
            streams: None,
            congestion: CongestionArg::System,
        };
        let src = std::slice::from_ref(&copy.src);
        match Tuning::choose(src, &copy.dst, sessions, &asked, Some(cache)).await {
            Ok(tuning) => {
                tuning.apply_to_file(&mut copy.request);
                tracing::debug!(tuning = %tuning.explained.join("; "), "tuned from the path cache");
                Some(tuning)
            }
            Err(e) => {
                tracing::debug!(error = %e, "not tuned: the path was not probed");
                None
            }
        }
    }
}

/// Keeps in the path cache what a finished transfer measured; `resumed` bytes were there
/// before it.
pub(super) fn learn(tuning: Option<Tuning>, done: &FileCopied, resumed: u64) {
    if let Some(tuning) = tuning {
        let seconds = Duration::from_secs_f64(done.seconds.max(0.0));
        // A third-party copy moves nothing through the service: what the destination gained
        // is what moved.
        let moved = done.bytes.saturating_sub(resumed).max(done.moved);
        let said = tuning.learn(moved, seconds, (1, 0), done.tcp.as_ref());
        tracing::debug!(learnt = %said.join("; "), "path cache");
    }
}
