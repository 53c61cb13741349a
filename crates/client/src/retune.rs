//! Re-choosing a file's streams from what its first seconds measured: a rule (gcp's) reads the
//! performance samples of a run and may ask for another stream count, or for another congestion
//! control on the sending side. The run is then stopped and the file resumed from the ranges
//! the destination holds, with the new setting, so no stored byte moves twice; this happens at
//! most once per file.

use std::sync::Arc;

/// What a file's run has measured so far, for a [`Retune`] rule.
#[derive(Debug, Clone, PartialEq)]
pub struct FirstSeconds {
    /// Parallel TCP streams the run moves on.
    pub streams: u32,
    /// `(seconds, bytes)`: the run's performance samples (seconds since the run started, bytes
    /// it moved by then), oldest first.
    pub samples: Vec<(f64, u64)>,
    /// Bytes the file still lacks at the last sample, when its size is known.
    pub left: Option<u64>,
    /// The round trip measured on the data connections, ms, when a server said it (a ferry
    /// server does in its perf markers): the path the streams take, which in a third-party
    /// copy neither control channel shows.
    pub data_rtt_ms: Option<f64>,
}

/// A rule's verdict on a run's first seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retuned {
    /// Not enough measured yet: ask again at the next sample.
    Wait,
    /// Keep the streams; the reason is said (`CopyEvent::Note`).
    Keep(String),
    /// Stop and resume with this many streams, for this reason.
    Streams(u32, String),
    /// Stop and resume with the sending side's data connections on this congestion control
    /// (`FileRequest::congestion`), for this reason.
    Sender(ferry_net::Congestion, String),
}

/// How streams are re-chosen from a file's first seconds.
pub trait RetuneRule: Send + Sync {
    /// The verdict on a run's samples so far.
    fn judge(&self, first: &FirstSeconds) -> Retuned;
    /// The streams a large file should start on, from what earlier files of the copy showed
    /// (`None`: as the request says).
    fn settled(&self) -> Option<u32> {
        None
    }
    /// The congestion control the sending side of a file should start on, from what earlier
    /// files of the copy showed (`None`: as the request says).
    fn settled_sender(&self) -> Option<ferry_net::Congestion> {
        None
    }
}

/// A rule that may re-choose a file's streams from its first seconds ([`FirstSeconds`]).
#[derive(Clone)]
pub struct Retune(pub Arc<dyn RetuneRule>);

impl std::fmt::Debug for Retune {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Retune(..)")
    }
}

/// One run watched by a rule: gathers its samples and asks the rule until it decides.
pub(crate) struct Watch<'a> {
    rule: &'a Retune,
    size: Option<u64>,
    /// The bytes the destination held when the run started.
    held: u64,
    seen: Option<FirstSeconds>,
    /// The rule's decision, once made.
    pub(crate) verdict: Option<Retuned>,
}

impl<'a> Watch<'a> {
    pub(crate) fn new(rule: &'a Retune, size: Option<u64>, held: u64) -> Watch<'a> {
        Watch {
            rule,
            size,
            held,
            seen: None,
            verdict: None,
        }
    }

    /// The run moves on `streams` streams.
    pub(crate) fn moving(&mut self, streams: u32) {
        if self.verdict.is_none() {
            self.seen = Some(FirstSeconds {
                streams,
                samples: Vec::new(),
                left: self.size.map(|s| s.saturating_sub(self.held)),
                data_rtt_ms: None,
            });
        }
    }

    /// The data connections' round trip (µs), as a server or this host measured it.
    pub(crate) fn data_rtt(&mut self, rtt_us: u32) {
        if let Some(seen) = self.seen.as_mut().filter(|_| rtt_us > 0) {
            seen.data_rtt_ms = Some(f64::from(rtt_us) / 1e3);
        }
    }

    /// A performance sample; true when the rule asks for other streams now.
    pub(crate) fn sample(&mut self, seconds: f64, bytes: u64) -> bool {
        let (None, Some(seen)) = (&self.verdict, self.seen.as_mut()) else {
            return false;
        };
        seen.samples.push((seconds, bytes));
        seen.left = self
            .size
            .map(|s| s.saturating_sub(self.held.saturating_add(bytes)));
        match self.rule.0.judge(seen) {
            Retuned::Wait => false,
            Retuned::Streams(n, why) if n == seen.streams => {
                self.verdict = Some(Retuned::Keep(why));
                false
            }
            v => {
                let restream = matches!(v, Retuned::Streams(..) | Retuned::Sender(..));
                self.verdict = Some(v);
                restream
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asks for `to` streams once 3 samples came.
    struct AfterThree(u32);

    impl RetuneRule for AfterThree {
        fn judge(&self, first: &FirstSeconds) -> Retuned {
            if first.samples.len() < 3 {
                Retuned::Wait
            } else {
                Retuned::Streams(self.0, format!("{} samples", first.samples.len()))
            }
        }
    }

    #[test]
    fn a_watch_asks_until_the_rule_decides_then_never_again() {
        let rule = Retune(Arc::new(AfterThree(8)));
        let mut w = Watch::new(&rule, Some(1000), 100);
        // No samples count before the run says its streams.
        assert!(!w.sample(0.1, 10));
        w.moving(4);
        assert!(!w.sample(0.25, 10));
        assert!(!w.sample(0.5, 20));
        assert!(w.sample(0.75, 30), "the third sample restreams");
        assert_eq!(w.verdict, Some(Retuned::Streams(8, "3 samples".into())));
        assert_eq!(w.seen.as_ref().and_then(|s| s.left), Some(870));
        assert!(!w.sample(1.0, 40), "decided once");
        // Asking for the streams it has is keeping them.
        let same = Retune(Arc::new(AfterThree(4)));
        let mut w = Watch::new(&same, None, 0);
        w.moving(4);
        assert!(!w.sample(0.25, 1) && !w.sample(0.5, 2) && !w.sample(0.75, 3));
        assert_eq!(w.verdict, Some(Retuned::Keep("3 samples".into())));
    }
}
