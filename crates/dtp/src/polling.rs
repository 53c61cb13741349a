//! How many receiving streams may poll their sockets at once, process-wide.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Permits for lone receiving streams to read on a polling thread of their own (see
/// `receive::continue_on_own_thread`). A polling stream spends its CPU's idle time while data
/// arrives; the budget keeps a host with many sessions from spending more than half its cores
/// that way. A stream that finds none left reads the ordinary way and asks again each block.
#[derive(Debug)]
pub struct PollBudget {
    left: AtomicUsize,
}

impl PollBudget {
    /// A budget of `max` streams polling at once.
    pub fn new(max: usize) -> Arc<PollBudget> {
        Arc::new(PollBudget {
            left: AtomicUsize::new(max),
        })
    }

    /// Half this host's CPUs, at least one.
    pub fn for_this_host() -> Arc<PollBudget> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        PollBudget::new((cpus / 2).max(1))
    }

    /// Takes a permit if one is left; it returns when dropped.
    pub(crate) fn try_take(self: &Arc<Self>) -> Option<PollPermit> {
        self.left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .ok()
            .map(|_| PollPermit(Arc::clone(self)))
    }
}

/// One stream's leave to poll, given back when dropped.
#[derive(Debug)]
pub(crate) struct PollPermit(Arc<PollBudget>);

impl Drop for PollPermit {
    fn drop(&mut self) {
        self.0.left.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::PollBudget;

    #[test]
    fn permits_run_out_and_come_back_when_dropped() {
        let budget = PollBudget::new(2);
        let a = budget.try_take().expect("first");
        let b = budget.try_take().expect("second");
        assert!(budget.try_take().is_none(), "only two");
        drop(a);
        let c = budget.try_take().expect("one came back");
        assert!(budget.try_take().is_none());
        drop((b, c));
        assert!(budget.try_take().is_some());
    }
}
