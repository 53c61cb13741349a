//! How many transfers run at once on each link, moved by what the link did in the last
//! window: the idea of FTS3's optimizer, in ferry's own rules.
//!
//! - A link starts at `min` transfers.
//! - Failures first: when a window saw failures and less than 90 % of its ended transfers
//!   succeeded, one transfer fewer (down to `min`). Too many parallel transfers is a common
//!   cause of timeouts at storage endpoints, and fewer never loses data.
//! - Otherwise, only when the link is saturated (files are waiting and every slot is busy):
//!   one more transfer while each step up raised the throughput by at least 5 %; one fewer when
//!   the last step up lowered it by more than 5 %; else hold. A link with nothing waiting keeps
//!   its value, since its throughput then says nothing about concurrency.
//!
//! No clock and no I/O here: the scheduler feeds one [`Window`] per link per interval and
//! records each [`Decision`] with its reason.

/// What a link did in one window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Bytes per second moved in the window.
    pub throughput: f64,
    /// Transfers that finished in the window.
    pub finished: u64,
    /// Transfers that failed (for good or to be retried) in the window.
    pub failed: u64,
    /// Files waiting for a slot at the end of the window.
    pub waiting: u64,
    /// Transfers running at the end of the window.
    pub active: u64,
}

/// A change of a link's concurrency and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Concurrency before.
    pub from: u32,
    /// Concurrency after.
    pub to: u32,
    /// Why, in a sentence.
    pub reason: String,
}

/// One link's concurrency and what it learnt.
#[derive(Debug, Clone)]
pub struct LinkOptimizer {
    target: u32,
    min: u32,
    max: u32,
    /// Throughput measured at the concurrency before the last step up.
    before_step: Option<f64>,
    /// Windows to wait before probing again after a step that did not pay.
    hold: u32,
}

/// Windows a link keeps its concurrency after a step up that did not pay, before it probes
/// again (the path or the other traffic may have changed).
pub const HOLD_WINDOWS: u32 = 6;

/// Below this success rate a link sheds a transfer.
pub const MIN_SUCCESS: f64 = 0.9;
/// A step up must bring this much more throughput to go on.
const GAIN: f64 = 1.05;

impl LinkOptimizer {
    /// A link between `min` and `max` transfers, starting at `min`.
    pub fn new(min: u32, max: u32) -> LinkOptimizer {
        let min = min.max(1);
        LinkOptimizer {
            target: min,
            min,
            max: max.max(min),
            before_step: None,
            hold: 0,
        }
    }

    /// Transfers the link may run now.
    pub fn target(&self) -> u32 {
        self.target
    }

    /// Takes one window; a decision when the concurrency changes.
    pub fn evaluate(&mut self, w: Window) -> Option<Decision> {
        let from = self.target;
        let ended = w.finished + w.failed;
        let mbit = |bps: f64| bps * 8.0 / 1e6;
        if w.failed > 0 && ended > 0 {
            let rate = w.finished as f64 / ended as f64;
            if rate < MIN_SUCCESS {
                self.before_step = None;
                if self.target > self.min {
                    self.target -= 1;
                    return Some(Decision {
                        from,
                        to: self.target,
                        reason: format!(
                            "{:.0} % of {ended} transfers succeeded (below {:.0} %): one fewer",
                            rate * 100.0,
                            MIN_SUCCESS * 100.0
                        ),
                    });
                }
                return None;
            }
        }
        let saturated = w.waiting > 0 && w.active >= u64::from(self.target);
        if !saturated {
            return None;
        }
        if self.hold > 0 {
            self.hold -= 1;
            return None;
        }
        match self.before_step.take() {
            Some(before) if w.throughput < before / GAIN && self.target > self.min => {
                // The last step up cost throughput: back to where it was for a while.
                self.target -= 1;
                self.hold = HOLD_WINDOWS;
                Some(Decision {
                    from,
                    to: self.target,
                    reason: format!(
                        "{:.0} Mbit/s with {from}, {:.0} with {}: one fewer",
                        mbit(w.throughput),
                        mbit(before),
                        self.target
                    ),
                })
            }
            Some(before) if w.throughput < before * GAIN => {
                // No gain worth a transfer: keep it, probe again later.
                self.hold = HOLD_WINDOWS;
                None
            }
            _ if self.target >= self.max => None,
            previous => {
                self.target += 1;
                self.before_step = Some(w.throughput);
                Some(Decision {
                    from,
                    to: self.target,
                    reason: match previous {
                        Some(before) => format!(
                            "{:.0} Mbit/s with {from}, up from {:.0}, and files wait: one more",
                            mbit(w.throughput),
                            mbit(before)
                        ),
                        None => format!(
                            "{:.0} Mbit/s with {from} and files wait: trying one more",
                            mbit(w.throughput)
                        ),
                    },
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(throughput: f64, target: u32) -> Window {
        Window {
            throughput,
            finished: 4,
            failed: 0,
            waiting: 10,
            active: u64::from(target),
        }
    }

    #[test]
    fn a_saturated_link_climbs_while_throughput_rises_and_steps_back_when_it_falls() {
        let mut o = LinkOptimizer::new(2, 8);
        assert_eq!(o.target(), 2);
        let d = o.evaluate(busy(100e6, 2)).unwrap();
        assert_eq!((d.from, d.to), (2, 3));
        let d = o.evaluate(busy(150e6, 3)).unwrap();
        assert_eq!((d.from, d.to), (3, 4), "{}", d.reason);
        // +2 % only: hold.
        assert_eq!(o.evaluate(busy(153e6, 4)), None);
        // Now it fell below what 3 gave: back to 3, and stay.
        let mut o = LinkOptimizer::new(2, 8);
        o.evaluate(busy(100e6, 2));
        o.evaluate(busy(150e6, 3));
        let d = o.evaluate(busy(120e6, 4)).unwrap();
        assert_eq!((d.from, d.to), (4, 3), "{}", d.reason);
        for _ in 0..HOLD_WINDOWS {
            assert_eq!(
                o.evaluate(busy(150e6, 3)),
                None,
                "holds after stepping back"
            );
        }
        let d = o.evaluate(busy(150e6, 3)).unwrap();
        assert_eq!((d.from, d.to), (3, 4), "probes again later: {}", d.reason);
    }

    #[test]
    fn failures_shed_a_transfer_down_to_the_minimum_and_idle_links_hold() {
        let mut o = LinkOptimizer::new(1, 8);
        o.evaluate(busy(100e6, 1));
        o.evaluate(busy(200e6, 2));
        assert_eq!(o.target(), 3);
        let bad = Window {
            throughput: 50e6,
            finished: 1,
            failed: 3,
            waiting: 10,
            active: 3,
        };
        let d = o.evaluate(bad).unwrap();
        assert_eq!((d.from, d.to), (3, 2));
        assert!(d.reason.contains("25 % of 4"), "{}", d.reason);
        o.evaluate(bad);
        assert_eq!(o.target(), 1);
        assert_eq!(o.evaluate(bad), None, "not below the minimum");
        // Nothing waiting: throughput says nothing about concurrency.
        let idle = Window {
            throughput: 1e6,
            finished: 1,
            failed: 0,
            waiting: 0,
            active: 1,
        };
        assert_eq!(o.evaluate(idle), None);
        // Not every slot busy: no step up either.
        let mut o = LinkOptimizer::new(2, 8);
        assert_eq!(
            o.evaluate(Window {
                active: 1,
                ..busy(1e6, 2)
            }),
            None
        );
    }

    #[test]
    fn the_maximum_is_kept() {
        let mut o = LinkOptimizer::new(2, 3);
        o.evaluate(busy(100e6, 2));
        assert_eq!(o.target(), 3);
        assert_eq!(o.evaluate(busy(500e6, 3)), None);
        assert_eq!(LinkOptimizer::new(5, 2).target(), 5, "max never below min");
    }
}
