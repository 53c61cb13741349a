//! FTS3's file and job states, and how a job's state follows from its files'.

use serde::Serialize;

/// Where a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum FileState {
    /// Waiting: new, or a retry waiting for its delay.
    Submitted,
    /// Due, waiting for a free slot on its link.
    Ready,
    /// Moving.
    Active,
    /// At the destination (and verified when asked).
    Finished,
    /// Failed for good.
    Failed,
    /// Cancelled by its owner.
    Canceled,
}

impl FileState {
    /// FTS3's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            FileState::Submitted => "SUBMITTED",
            FileState::Ready => "READY",
            FileState::Active => "ACTIVE",
            FileState::Finished => "FINISHED",
            FileState::Failed => "FAILED",
            FileState::Canceled => "CANCELED",
        }
    }

    /// From FTS3's spelling (any case).
    pub fn parse(s: &str) -> Option<FileState> {
        Some(match s.to_ascii_uppercase().as_str() {
            "SUBMITTED" => FileState::Submitted,
            "READY" => FileState::Ready,
            "ACTIVE" => FileState::Active,
            "FINISHED" => FileState::Finished,
            "FAILED" => FileState::Failed,
            "CANCELED" | "CANCELLED" => FileState::Canceled,
            _ => return None,
        })
    }

    /// Whether the file will not change again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            FileState::Finished | FileState::Failed | FileState::Canceled
        )
    }
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum JobState {
    /// No file has started.
    Submitted,
    /// Some file has started and some are not done.
    Active,
    /// Every file finished.
    Finished,
    /// Some finished, some failed or were cancelled.
    Finisheddirty,
    /// No file finished.
    Failed,
    /// Cancelled by its owner.
    Canceled,
}

impl JobState {
    /// The states a listing without a filter shows (FTS3's default).
    pub const UNFINISHED: [JobState; 2] = [JobState::Submitted, JobState::Active];

    /// FTS3's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Submitted => "SUBMITTED",
            JobState::Active => "ACTIVE",
            JobState::Finished => "FINISHED",
            JobState::Finisheddirty => "FINISHEDDIRTY",
            JobState::Failed => "FAILED",
            JobState::Canceled => "CANCELED",
        }
    }

    /// From FTS3's spelling (any case); READY and STAGING count as SUBMITTED as in FTS3's
    /// filters.
    pub fn parse(s: &str) -> Option<JobState> {
        Some(match s.to_ascii_uppercase().as_str() {
            "SUBMITTED" | "READY" | "STAGING" => JobState::Submitted,
            "ACTIVE" => JobState::Active,
            "FINISHED" => JobState::Finished,
            "FINISHEDDIRTY" => JobState::Finisheddirty,
            "FAILED" => JobState::Failed,
            "CANCELED" | "CANCELLED" => JobState::Canceled,
            _ => return None,
        })
    }

    /// Whether the job will not change again.
    pub fn is_terminal(self) -> bool {
        !matches!(self, JobState::Submitted | JobState::Active)
    }
}

/// How many of a job's files are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileCounts {
    /// SUBMITTED or READY.
    pub waiting: i64,
    /// ACTIVE.
    pub active: i64,
    /// FINISHED.
    pub finished: i64,
    /// FAILED.
    pub failed: i64,
    /// CANCELED.
    pub canceled: i64,
}

impl FileCounts {
    /// Adds `n` files in `state`.
    pub fn add(&mut self, state: FileState, n: i64) {
        match state {
            FileState::Submitted | FileState::Ready => self.waiting += n,
            FileState::Active => self.active += n,
            FileState::Finished => self.finished += n,
            FileState::Failed => self.failed += n,
            FileState::Canceled => self.canceled += n,
        }
    }

    /// The job's state, FTS3's rules: unfinished while any file is; then FINISHED when all
    /// finished, CANCELED when its owner cancelled it, FINISHEDDIRTY when some finished, else
    /// FAILED.
    pub fn job_state(&self, canceled: bool) -> JobState {
        if self.waiting + self.active > 0 {
            if self.active + self.finished + self.failed + self.canceled > 0 {
                JobState::Active
            } else {
                JobState::Submitted
            }
        } else if self.failed == 0 && self.canceled == 0 {
            JobState::Finished
        } else if canceled {
            JobState::Canceled
        } else if self.finished > 0 {
            JobState::Finisheddirty
        } else {
            JobState::Failed
        }
    }

    /// A sentence for a terminal job that did not simply finish.
    pub fn reason(&self, canceled: bool) -> Option<String> {
        match self.job_state(canceled) {
            JobState::Finished | JobState::Submitted | JobState::Active => None,
            JobState::Canceled => Some("canceled by its owner".into()),
            _ => Some(format!(
                "{} of {} files failed",
                self.failed,
                self.finished + self.failed + self.canceled
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(list: &[(FileState, i64)]) -> FileCounts {
        let mut c = FileCounts::default();
        for (s, n) in list {
            c.add(*s, *n);
        }
        c
    }

    #[test]
    fn a_job_follows_its_files_as_fts3_says() {
        use FileState::*;
        let j = |l: &[(FileState, i64)], canceled| counts(l).job_state(canceled);
        assert_eq!(j(&[(Submitted, 3)], false), JobState::Submitted);
        assert_eq!(j(&[(Ready, 1), (Submitted, 2)], false), JobState::Submitted);
        assert_eq!(j(&[(Active, 1), (Submitted, 2)], false), JobState::Active);
        assert_eq!(j(&[(Finished, 1), (Submitted, 2)], false), JobState::Active);
        assert_eq!(j(&[(Finished, 3)], false), JobState::Finished);
        assert_eq!(
            j(&[(Finished, 2), (Failed, 1)], false),
            JobState::Finisheddirty
        );
        assert_eq!(j(&[(Failed, 3)], false), JobState::Failed);
        assert_eq!(j(&[(Finished, 1), (Canceled, 2)], true), JobState::Canceled);
        assert_eq!(j(&[(Canceled, 2)], true), JobState::Canceled);
        // Every file finished before the cancel arrived: the job did finish.
        assert_eq!(j(&[(Finished, 2)], true), JobState::Finished);
        assert_eq!(
            counts(&[(Finished, 2), (Failed, 1)])
                .reason(false)
                .as_deref(),
            Some("1 of 3 files failed")
        );
    }

    #[test]
    fn states_read_back_as_written() {
        for s in [
            FileState::Submitted,
            FileState::Ready,
            FileState::Active,
            FileState::Finished,
            FileState::Failed,
            FileState::Canceled,
        ] {
            assert_eq!(FileState::parse(s.as_str()), Some(s));
        }
        for s in [
            JobState::Submitted,
            JobState::Active,
            JobState::Finished,
            JobState::Finisheddirty,
            JobState::Failed,
            JobState::Canceled,
        ] {
            assert_eq!(JobState::parse(s.as_str()), Some(s));
        }
        assert_eq!(JobState::parse("cancelled"), Some(JobState::Canceled));
        assert_eq!(JobState::parse("nonsense"), None);
    }
}
