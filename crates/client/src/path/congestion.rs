//! The TCP congestion control of the sending side's data connections (`--congestion`).
//!
//! On a short path the sender keeps its default: a loss costs a few milliseconds there. On a
//! long one (10 ms and more) the choice is measured, per path, between bbr and cubic:
//! - The first copy goes on bbr where the sender offers it. A random loss halves cubic's
//!   window and a long path takes seconds to grow it back (at 60 ms with 1 % loss one cubic
//!   stream moves 3 Mbit/s, one bbr stream 860), so bbr is the safe guess on a path nothing is
//!   known of.
//! - bbr is not free on a clean path: it drains to four packets in flight for 200 ms every 10 s
//!   (`PROBE_RTT`), and parallel bbr streams overrun a tail-drop queue and send the loss again.
//!   Measured on netlab's 15 ms path with a queue of one bandwidth-delay product (2 GiB, Linux
//!   default buffers): bbr moved 938 Mbit/s and sent 11 % of its bytes twice, cubic 953 Mbit/s
//!   and 0.09 % (`--log-transfer`'s `bytes_retrans`). So the next copy tries cubic, over TCP
//!   (`--transport auto` would take a loss-based sender on a long path to QUIC), guarded: when
//!   its first seconds move less than half of what bbr's copy did, the path drops packets that
//!   cubic cannot ride over, and the copy resumes on bbr from the ranges stored (the rule in
//!   `search.rs`).
//! - From then on the faster of the two is chosen by what each last moved, cubic where it is
//!   within 2 % of bbr (the same rate for far fewer retransmissions); a cubic copy keeps the
//!   guard, so a path that starts losing packets goes back to bbr after its first seconds.

use ferry_net::Congestion;

use super::cache::PathEntry;

/// Round trips from this up are long: there one loss costs cubic seconds of halved rate.
pub(super) const LONG_RTT_MS: f64 = 10.0;
/// A copy on cubic goes back to bbr when its first seconds move less than this share of what
/// bbr's last copy moved.
const FLOOR: f64 = 0.5;
/// cubic is chosen where it moved at least this share of bbr's rate.
const TIE: f64 = 0.98;

/// The sending side's congestion control as asked (gcp's `--congestion`).
#[derive(Debug, Clone, Copy)]
pub enum CongestionArg {
    /// Chosen from the path.
    Auto,
    /// The sender's default.
    System,
    /// This one.
    Named(Congestion),
}

impl std::str::FromStr for CongestionArg {
    type Err = String;
    fn from_str(s: &str) -> Result<CongestionArg, String> {
        match s {
            "auto" => Ok(CongestionArg::Auto),
            "system" | "default" => Ok(CongestionArg::System),
            name => Congestion::new(name).map(CongestionArg::Named),
        }
    }
}

/// A copy on a loss-based congestion control that goes back to bbr when its first seconds are
/// slow.
#[derive(Debug, Clone)]
pub(super) struct Guard {
    /// What the copy runs on (`cubic`).
    pub(super) tried: Congestion,
    /// What it goes back to (`bbr`), and the rate under which it does (bit/s).
    pub(super) back_to: Congestion,
    pub(super) floor_bps: f64,
}

/// The choice for one copy.
#[derive(Debug, Default)]
pub(super) struct Choice {
    /// The sending side's congestion control (`None`: its default).
    pub(super) congestion: Option<Congestion>,
    /// The guard of a cubic copy on a long path; such a copy stays on TCP.
    pub(super) guard: Option<Guard>,
}

/// What a copy on `name` last moved on this path (bit/s). Caches from before the figures were
/// kept per congestion control have the last copy's only.
pub(super) fn measured(e: &PathEntry, name: &str) -> Option<f64> {
    e.by_congestion
        .get(name)
        .copied()
        .or_else(|| e.bps.filter(|_| e.congestion.as_deref() == Some(name)))
}

/// The sending side's congestion control, and why, into `explained`.
pub(super) fn choose(e: &PathEntry, asked: CongestionArg, explained: &mut Vec<String>) -> Choice {
    let offered = |name: &str| e.offered.iter().any(|o| o == name);
    let list = if e.offered.is_empty() {
        "none".to_string()
    } else {
        e.offered.join(" ")
    };
    let on = |name: &str| Choice {
        congestion: Congestion::new(name).ok(),
        guard: None,
    };
    match asked {
        CongestionArg::System => {
            explained.push("congestion control: the sender's default, as --congestion says".into());
            Choice::default()
        }
        CongestionArg::Named(cc) if offered(cc.as_str()) => {
            explained.push(format!("congestion control: {cc}, as --congestion says"));
            Choice {
                congestion: Some(cc),
                guard: None,
            }
        }
        CongestionArg::Named(cc) => {
            explained.push(format!(
                "congestion control: the sender's default; {} does not offer {cc} (offers: {list})",
                e.sender
            ));
            Choice::default()
        }
        CongestionArg::Auto if e.rtt_ms < LONG_RTT_MS => {
            explained.push(format!(
                "congestion control: the sender's default (a {:.1} ms round trip recovers from \
                 a loss within milliseconds)",
                e.rtt_ms
            ));
            Choice::default()
        }
        CongestionArg::Auto if offered("bbr") => {
            let (bbr, cubic) = (measured(e, "bbr"), measured(e, "cubic"));
            let mbit = |bps: f64| format!("{:.0} Mbit/s", bps / 1e6);
            let pair = Congestion::new("cubic")
                .ok()
                .zip(Congestion::new("bbr").ok());
            let guarded = |bbr_bps: f64| Choice {
                congestion: pair.map(|(cubic, _)| cubic),
                guard: pair.map(|(tried, back_to)| Guard {
                    tried,
                    back_to,
                    floor_bps: FLOOR * bbr_bps,
                }),
            };
            match (bbr, cubic) {
                (Some(b), None) if offered("cubic") => {
                    explained.push(format!(
                        "congestion control: cubic on {}'s data connections, over TCP, tried \
                         against bbr's {} (the last copy): on a clean path cubic fills it \
                         without bbr's pauses and retransmissions; back to bbr if the first \
                         seconds move under {}",
                        e.sender,
                        mbit(b),
                        mbit(FLOOR * b)
                    ));
                    guarded(b)
                }
                (Some(b), Some(c)) if offered("cubic") && c >= TIE * b => {
                    explained.push(format!(
                        "congestion control: cubic on {}'s data connections, over TCP (it moved \
                         {}, bbr {}: the same or more, for fewer retransmissions); back to bbr \
                         if the first seconds move under {}",
                        e.sender,
                        mbit(c),
                        mbit(b),
                        mbit(FLOOR * b)
                    ));
                    guarded(b)
                }
                (Some(b), Some(c)) => {
                    explained.push(format!(
                        "congestion control: bbr on {}'s data connections (it moved {}, cubic \
                         {}; --congestion system keeps the default)",
                        e.sender,
                        mbit(b),
                        mbit(c)
                    ));
                    on("bbr")
                }
                _ => {
                    explained.push(format!(
                        "congestion control: bbr on {}'s data connections ({:.0} ms round trip: \
                         cubic halves its window at every loss and takes seconds to grow back, \
                         bbr paces at the measured bottleneck rate; a later copy tries cubic \
                         against it; --congestion system keeps the default)",
                        e.sender, e.rtt_ms
                    ));
                    on("bbr")
                }
            }
        }
        CongestionArg::Auto => {
            explained.push(format!(
                "congestion control: the sender's default; {} offers no bbr (offers: {list}{})",
                e.sender,
                if e.sender == "this host" {
                    ", net.ipv4.tcp_allowed_congestion_control"
                } else {
                    "; a ferry server lists what it offers in FEAT, other servers choose none"
                }
            ));
            Choice::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::cache::tests::entry;
    use super::*;

    fn name(c: &Choice) -> Option<String> {
        c.congestion.map(|c| c.to_string())
    }

    #[test]
    fn long_paths_get_bbr_where_the_sender_offers_it_and_short_ones_keep_the_default() {
        let mut why = Vec::new();
        let e = entry();
        let first = choose(&e, CongestionArg::Auto, &mut why);
        assert_eq!(name(&first), Some("bbr".into()));
        assert!(first.guard.is_none());
        let short = PathEntry {
            rtt_ms: 0.3,
            ..entry()
        };
        assert!(name(&choose(&short, CongestionArg::Auto, &mut why)).is_none());
        let globus = PathEntry {
            offered: vec![],
            sender: "dtn:2811".into(),
            ..entry()
        };
        assert!(name(&choose(&globus, CongestionArg::Auto, &mut why)).is_none());
        assert!(why.last().unwrap().contains("offers no bbr"), "{why:?}");
        let named = CongestionArg::Named(Congestion::new("cubic").unwrap());
        let c = choose(&e, named, &mut why);
        assert_eq!(name(&c), Some("cubic".into()));
        assert!(c.guard.is_none(), "what the user names is not undone");
        assert!(name(&choose(&e, CongestionArg::System, &mut why)).is_none());
    }

    #[test]
    fn after_a_bbr_copy_cubic_is_tried_under_a_guard_then_the_faster_is_kept() {
        let mut why = Vec::new();
        let mut e = entry();
        e.by_congestion.insert("bbr".into(), 900e6);
        let trial = choose(&e, CongestionArg::Auto, &mut why);
        assert_eq!(name(&trial), Some("cubic".into()));
        let g = trial.guard.expect("a trial is guarded");
        assert_eq!((g.tried.as_str(), g.back_to.as_str()), ("cubic", "bbr"));
        assert_eq!(g.floor_bps, 450e6);
        assert!(
            why.last()
                .unwrap()
                .contains("tried against bbr's 900 Mbit/s"),
            "{why:?}"
        );

        // cubic within 2 % of bbr keeps cubic, still guarded; further behind, bbr again.
        e.by_congestion.insert("cubic".into(), 890e6);
        let kept = choose(&e, CongestionArg::Auto, &mut why);
        assert_eq!(name(&kept), Some("cubic".into()));
        assert!(kept.guard.is_some());
        e.by_congestion.insert("cubic".into(), 30e6);
        let back = choose(&e, CongestionArg::Auto, &mut why);
        assert_eq!(name(&back), Some("bbr".into()));
        assert!(back.guard.is_none());
        assert!(why.last().unwrap().contains("cubic 30 Mbit/s"), "{why:?}");

        // A sender without cubic stays on bbr.
        let no_cubic = PathEntry {
            offered: vec!["reno".into(), "bbr".into()],
            by_congestion: [("bbr".to_string(), 900e6)].into(),
            ..entry()
        };
        assert_eq!(
            name(&choose(&no_cubic, CongestionArg::Auto, &mut why)),
            Some("bbr".into())
        );
    }

    #[test]
    fn a_cache_from_before_the_figures_per_congestion_control_counts_its_last_copy() {
        let e = PathEntry {
            congestion: Some("bbr".into()),
            bps: Some(800e6),
            ..entry()
        };
        assert_eq!(measured(&e, "bbr"), Some(800e6));
        assert_eq!(measured(&e, "cubic"), None);
        let json = r#"{"rtt_ms":75.0,"offered":["bbr","cubic"],"sender":"x","probed_at":1,
            "streams":8,"bps":8e8,"best_streams":8,"best_bps":8e8,"search":"hold",
            "congestion":"bbr","data_rtt_ms":null,"retransmitted":null,"runs":3}"#;
        let old: PathEntry = serde_json::from_str(json).expect("an old entry still reads");
        assert!(old.by_congestion.is_empty());
        assert_eq!(measured(&old, "bbr"), Some(8e8));
    }
}
