//! `--transport auto`: whether a file's data channels go over QUIC, UDT or TCP.
//!
//! The rule, from `bench/` (scenario `quic`, 1 Gbit/s netlab paths): where the sending host's
//! TCP is loss-based (cubic, reno), random loss on a long path caps TCP at a few per cent of
//! the link (200 ms / 0.1 %: 6 Mbit/s one stream, 41 with 8; 60 ms / 1 %: 2 and 17) while
//! QUIC with BBR keeps 702 and 748 Mbit/s. Where the sender's TCP is bbr, eight TCP streams
//! match or beat QUIC (767 against 692; 825 against 789) for less CPU. On a LAN TCP is the
//! cheaper and faster of the two. So QUIC is chosen when all of these hold:
//! - the file is large enough for parallel streams (16 MiB or more): a small file is mostly
//!   set-up, and QUIC's set-up takes a round trip more than TCP's;
//! - the control channel's round trip is at least [`MIN_RTT`] (a WAN, where loss costs
//!   loss-based TCP the most); for a third-party copy, the longer of the two servers' (the
//!   path between them cannot be timed from the client, which is usually near one of them);
//! - the sending side's TCP is loss-based: this host's kernel default when the client sends,
//!   the congestion control asked with `--congestion` when one was, and Linux's default
//!   (cubic) for a server, which does not say its own;
//! - every server at the ends offers QUIC (`SITE SETNETSTACK quic` is accepted; the client's
//!   own end always has it).
//!
//! Where a server does not offer QUIC (a Globus server: no GridFTP server but ferry has it),
//! UDT is chosen instead when every server offers that (`SITE SETNETSTACK udt`, with `gsi`
//! above it under DCAU, as globus-url-copy asks): Globus' own UDT, libudt's controller,
//! carries 83 Mbit/s on the 200 ms / 0.1 % path against 37 for eight Globus TCP streams, and
//! ferry's UDT 634 to a loss-based sender's 43 (`bench/`, scenario `udt`). Where both are
//! offered QUIC goes first: the two keep about the same rate on the lossy paths (QUIC 702 and
//! 748 Mbit/s; UDT 634-706 and 665-803), and QUIC carries its own TLS 1.3 where UDT needs
//! GSI's layer above it.
//!
//! Loss is not measured before the first file: a login moves too few segments to see 0.1 %
//! loss. Without it the rule costs little where it is wrong: on a clean long path QUIC is
//! within 4 % of loss-based TCP (`bench/`, scenario `quic`, path `wan`: 810 against 839-841
//! Mbit/s at 60 ms), where on the lossy ones it is 17 to 44 times faster than 8 TCP streams.
//!
//! Once a large file of the copy has crossed a path over TCP, its sender's retransmissions
//! are known (this host's data connections when it sent; a ferry server's `SITE TCPINFO` when
//! the server sent), and the next files on that path go by them instead of by the round trip
//! ([`by_loss`]): with a loss-based sender, a user-space transport when the file moved at
//! about the rate that loss allows TCP (Mathis et al., 1997: streams × 1.22 × MSS / (RTT ×
//! √loss); from half to [`LOSS_MODEL_SLACK`] times it), so loss, not the link or the disks, is
//! what held it back; TCP when it moved well under that (something else limits), well above
//! it (a burst, not steady loss), or nothing was sent again. That also catches a short path
//! with loss (a 5 ms path losing 1 % holds a cubic stream near 28 Mbit/s), which the round
//! trip alone leaves on TCP. Where the link is nearly full at rare loss the rule may pick a
//! user-space transport that is up to ~15 % slower (QUIC's 810 against TCP's 840 Mbit/s on the
//! clean 60 ms path); it never does so on a LAN, where the bound is far above any rate.

use std::time::Duration;

use ferry_proto::stack::StackSpec;

use crate::url::Location;
use crate::{ClientError, FileRequest, Sessions};

/// What `--transport auto` is spelled.
pub const AUTO: &str = "auto";
/// The user-space transports `auto` may pick, in the order it asks for them.
const USER_SPACE: [(&str, &str); 2] = [("quic", "QUIC"), ("udt", "UDT")];
/// The smallest file `auto` considers for QUIC, and learns a path's loss from.
const LARGE: u64 = 16 << 20;
/// How far above Mathis et al.'s loss bound a file may move and still count as held back by
/// loss: cubic beats that Reno model by 1.3 to 2.3 times on netlab's lossy paths (`bench/`,
/// scenario `quic`: 3 Mbit/s for 2.4 at 60 ms / 1 %, one stream; 41 for 18 at 200 ms / 0.1 %,
/// eight). Further above it, the loss was a burst (a start-up's overshoot), not the steady
/// kind.
const LOSS_MODEL_SLACK: f64 = 4.0;
/// Shortest round trip at which `auto` considers QUIC.
pub const MIN_RTT: Duration = Duration::from_millis(20);

/// What `auto` decided for one file, and why, in a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Choice {
    /// The transport for `FileRequest::transport` (`None`: TCP).
    pub(crate) transport: Option<String>,
    pub(crate) why: String,
}

impl Choice {
    fn tcp(why: String) -> Choice {
        Choice {
            transport: None,
            why: format!("transport auto chose tcp: {why}"),
        }
    }
}

/// The part of the rule that needs no server: `Ok(reason)` when the path calls for QUIC,
/// `Err(reason)` for TCP.
pub(crate) fn by_path(
    large: bool,
    rtt: Duration,
    sender: &str,
    sender_congestion: &str,
) -> Result<String, String> {
    let ms = rtt.as_secs_f64() * 1e3;
    if !large {
        return Err(
            "a file under 16 MiB is mostly set-up, which TCP does in fewer round trips".into(),
        );
    }
    if rtt < MIN_RTT {
        return Err(format!(
            "the round trip is {ms:.1} ms, under {} ms: a LAN, where TCP is as fast for less CPU",
            MIN_RTT.as_millis()
        ));
    }
    if !loss_based(sender_congestion) {
        return Err(format!(
            "{sender} sends with TCP {sender_congestion}, which holds a lossy long path as well as QUIC does"
        ));
    }
    Ok(format!(
        "the round trip is {ms:.0} ms and {sender} sends with TCP {sender_congestion}, which \
         random loss on a long path slows many times more than QUIC with BBR"
    ))
}

/// What a large file moved over TCP showed of its path, from its sender's data connections.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Seen {
    /// Bytes sent again over bytes sent.
    pub(crate) loss: f64,
    /// The file's bytes over its transfer's seconds.
    pub(crate) rate: f64,
    pub(crate) streams: u32,
    /// The data connections' smoothed round trip.
    pub(crate) rtt: Duration,
    /// Whether the sender's TCP congestion control reads every loss as congestion.
    pub(crate) loss_based: bool,
}

impl Seen {
    /// From the sending side's figures of a file that moved `bytes` in `seconds`; `None` where
    /// they say nothing of loss (no bytes sent: a receiver's figures, or too small a file).
    pub(crate) fn from_sender(tcp: &ferry_net::TcpStats, bytes: u64, seconds: f64) -> Option<Seen> {
        if tcp.bytes_sent < LARGE || seconds <= 0.0 || tcp.connections == 0 {
            return None;
        }
        let rtt_us = if tcp.rtt_us > 0 {
            tcp.rtt_us
        } else {
            tcp.min_rtt_us
        };
        Some(Seen {
            loss: tcp.retransmit_ratio(),
            rate: bytes as f64 / seconds,
            streams: tcp.connections,
            rtt: Duration::from_micros(u64::from(rtt_us.max(1))),
            loss_based: loss_based(&tcp.congestion),
        })
    }

    /// What loss lets loss-based TCP carry on these streams, bytes per second (Mathis et
    /// al.'s 1.22 × MSS / (RTT × √loss) per stream, with Ethernet's 1448-byte segments);
    /// unbounded without loss.
    fn loss_bound(&self) -> f64 {
        if self.loss <= 0.0 {
            return f64::INFINITY;
        }
        f64::from(self.streams) * 1.22 * 1448.0 / (self.rtt.as_secs_f64() * self.loss.sqrt())
    }
}

/// The rule once a file showed the path's loss: `Ok(reason)` for a user-space transport,
/// `Err(reason)` for TCP.
pub(crate) fn by_loss(seen: &Seen) -> Result<String, String> {
    let mb = |bytes_per_s: f64| bytes_per_s * 8.0 / 1e6;
    let ms = seen.rtt.as_secs_f64() * 1e3;
    let pct = seen.loss * 100.0;
    let said = format!(
        "the last large file over TCP ({} streams, {ms:.1} ms) moved at {:.0} Mbit/s and sent {pct:.3} % again",
        seen.streams,
        mb(seen.rate)
    );
    if !seen.loss_based {
        return Err(format!(
            "{said}; its sender's TCP is model-based (bbr), which loss holds back little"
        ));
    }
    let bound = seen.loss_bound();
    if !bound.is_finite() {
        return Err(format!(
            "{said}: a path without loss, where TCP is as fast for less CPU"
        ));
    }
    let allows = mb(bound);
    if seen.rate < bound / 2.0 {
        Err(format!(
            "{said}, under half the {allows:.0} Mbit/s that loss allows: something else (the link, \
             the disks) holds TCP back"
        ))
    } else if seen.rate > bound * LOSS_MODEL_SLACK {
        Err(format!(
            "{said}, over {LOSS_MODEL_SLACK} times the {allows:.0} Mbit/s that steady loss would \
             allow: not the random loss that holds TCP back"
        ))
    } else {
        Ok(format!(
            "{said}: steady loss allows loss-based TCP about {allows:.0} Mbit/s there, so loss is \
             what holds it back"
        ))
    }
}

/// Whether a TCP congestion control reads every loss as congestion.
fn loss_based(congestion: &str) -> bool {
    !matches!(congestion, "bbr" | "bbr2" | "bbr3")
}

/// Keeps what a file that `auto` sent over TCP from `src` to `dst` showed of the path, for
/// the next files: from `tcp`, this host's data connections, when this host sent; from the
/// source's `SITE TCPINFO` (a ferry server's) when the source is a server that sent.
pub(crate) async fn learn(
    src: &Location,
    dst: &Location,
    tcp: Option<&ferry_net::TcpStats>,
    bytes: u64,
    took: Duration,
    sessions: &mut Sessions,
) {
    // A small file's rate is mostly set-up, whatever its (possibly reused) connections sent.
    if bytes < LARGE {
        return;
    }
    let seconds = took.as_secs_f64();
    let mut seen = tcp.and_then(|t| Seen::from_sender(t, bytes, seconds));
    if seen.is_none() {
        if let Location::Remote(r) = src {
            if let Ok(session) = sessions.get(r).await {
                if let Some(t) = session.last_tcp_info().await {
                    seen = Seen::from_sender(&t, bytes, seconds);
                }
            }
        }
    }
    if let Some(seen) = seen {
        sessions.saw(src, dst, seen);
    }
}

/// Decides `req`'s transport for a copy from `src` to `dst` when it asks for `auto`; leaves an
/// explicit one alone. Servers asked whether they offer QUIC stay on it when they do.
pub(crate) async fn choose(
    src: &Location,
    dst: &Location,
    req: &FileRequest,
    size: Option<u64>,
    sessions: &mut Sessions,
) -> Result<Option<Choice>, ClientError> {
    if req.transport.as_deref() != Some(AUTO) {
        return Ok(None);
    }
    let remotes: Vec<_> = [src, dst]
        .into_iter()
        .filter_map(|l| match l {
            Location::Remote(r) => Some(r),
            Location::Local(_) => None,
        })
        .collect();
    if remotes.is_empty() {
        return Ok(Some(Choice::tcp("both ends are local".into())));
    }
    // A third-party copy's path runs between the servers, which the client cannot time: the
    // longer of its two round trips stands for it (the client is usually near one end).
    let mut rtt = Duration::ZERO;
    for r in &remotes {
        rtt = rtt.max(sessions.get(r).await?.rtt());
    }
    let asked = req.congestion.as_ref().map(|c| c.as_str().to_string());
    let (sender, congestion) = match (src, asked) {
        (_, Some(asked)) => ("the sender".to_string(), asked),
        (Location::Local(_), None) => (
            "this host".to_string(),
            ferry_net::Congestion::system_default()
                .map_or_else(|| "cubic".into(), |c| c.as_str().to_string()),
        ),
        (Location::Remote(r), None) => (
            format!("{} (as Linux by default)", r.authority()),
            "cubic".into(),
        ),
    };
    let payload = size
        .map(|s| s.saturating_sub(req.offset))
        .into_iter()
        .chain(req.length)
        .min();
    let large = payload.is_none_or(|p| p >= LARGE);
    let rule = match sessions.seen(src, dst) {
        Some(seen) if large => by_loss(seen),
        _ => by_path(large, rtt, &sender, &congestion),
    };
    let why = match rule {
        Ok(why) => why,
        Err(why) => return Ok(Some(Choice::tcp(why))),
    };
    let mut refusals = Vec::new();
    for (name, shown) in USER_SPACE {
        let stack = StackSpec::parse(name).map_err(|e| ClientError::Usage(e.to_string()))?;
        let mut refused = None;
        for r in &remotes {
            let session = sessions.get(r).await?;
            if let Err(answer) = session.offers(&stack).await? {
                refused = Some(format!(
                    "{} does not offer {shown} ({answer})",
                    r.authority()
                ));
                break;
            }
        }
        match refused {
            Some(why) => refusals.push(why),
            None => {
                let instead = if refusals.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", refusals.join("; "))
                };
                return Ok(Some(Choice {
                    transport: Some(name.into()),
                    why: format!("transport auto chose {name}: {why}{instead}"),
                }));
            }
        }
    }
    Ok(Some(Choice::tcp(refusals.join("; "))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quic_only_for_large_files_on_long_paths_from_loss_based_senders() {
        let ms = Duration::from_millis;
        assert!(by_path(true, ms(60), "this host", "cubic").is_ok());
        assert!(by_path(true, ms(20), "this host", "reno").is_ok());
        let lan = by_path(true, ms(2), "this host", "cubic").unwrap_err();
        assert!(lan.contains("LAN"), "{lan}");
        let bbr = by_path(true, ms(200), "this host", "bbr").unwrap_err();
        assert!(bbr.contains("bbr"), "{bbr}");
        let small = by_path(false, ms(200), "this host", "cubic").unwrap_err();
        assert!(small.contains("16 MiB"), "{small}");
    }

    fn seen(loss: f64, mbit: f64, streams: u32, rtt_ms: u64) -> Seen {
        Seen {
            loss,
            rate: mbit * 1e6 / 8.0,
            streams,
            rtt: Duration::from_millis(rtt_ms),
            loss_based: true,
        }
    }

    #[test]
    fn a_file_held_back_by_loss_sends_the_next_ones_over_user_space_and_no_other() {
        // bench/ (quic, udt): 200 ms / 0.1 %, 8 cubic streams: 41 Mbit/s, where loss allows
        // 8 × 1.22 × 1448 / (0.2 × 0.0316) = 2.2 MB/s (18 Mbit/s).
        let why = by_loss(&seen(0.001, 41.0, 8, 200)).unwrap();
        assert!(why.contains("loss is what holds it back"), "{why}");
        // 60 ms / 1 %, one stream: 3 Mbit/s; loss allows 2.4.
        assert!(by_loss(&seen(0.01, 3.0, 1, 60)).is_ok());
        // A short path with loss, which the round trip alone leaves on TCP: 5 ms / 1 %, 4
        // streams at 110 Mbit/s, loss allowing 113.
        assert!(by_path(true, Duration::from_millis(5), "this host", "cubic").is_err());
        assert!(by_loss(&seen(0.01, 110.0, 4, 5)).is_ok());
        // A clean long path: cubic's start-up overshoot sent 0.01 % again, and the file still
        // moved at 840 Mbit/s, far above the 190 Mbit/s such loss would allow: not loss-bound.
        let clean = by_loss(&seen(0.0001, 840.0, 8, 60)).unwrap_err();
        assert!(clean.contains("not the random loss"), "{clean}");
        // Loss, but the disks held the file to 100 Mbit/s where loss allows 357.
        let slow = by_loss(&seen(0.001, 100.0, 4, 5)).unwrap_err();
        assert!(slow.contains("something else"), "{slow}");
        // Nothing sent again.
        let none = by_loss(&seen(0.0, 900.0, 4, 60)).unwrap_err();
        assert!(none.contains("without loss"), "{none}");
        // A bbr sender keeps TCP whatever the loss.
        let mut bbr = seen(0.01, 3.0, 1, 60);
        bbr.loss_based = false;
        assert!(by_loss(&bbr).unwrap_err().contains("bbr"));
    }

    #[test]
    fn only_a_large_file_sender_s_figures_say_what_the_path_loses() {
        let tcp = |sent: u64, again: u64, cc: &str| ferry_net::TcpStats {
            connections: 4,
            congestion: cc.into(),
            rtt_us: 60_000,
            bytes_sent: sent,
            bytes_retrans: again,
            ..Default::default()
        };
        let s = Seen::from_sender(&tcp(1 << 30, 1 << 20, "cubic"), 1 << 30, 10.0).unwrap();
        assert!((s.loss - 1.0 / 1024.0).abs() < 1e-9, "{s:?}");
        assert_eq!(
            (s.streams, s.rtt, s.loss_based),
            (4, Duration::from_millis(60), true)
        );
        assert!((s.rate - (1u64 << 30) as f64 / 10.0).abs() < 1.0);
        assert_eq!(
            Seen::from_sender(&tcp(1 << 30, 0, "bbr"), 1 << 30, 10.0).map(|s| s.loss_based),
            Some(false)
        );
        // A receiver's figures (nothing sent) and a small file's say nothing.
        assert_eq!(Seen::from_sender(&tcp(0, 0, "cubic"), 1 << 30, 10.0), None);
        assert_eq!(
            Seen::from_sender(&tcp(1 << 20, 0, "cubic"), 1 << 20, 0.1),
            None
        );
    }
}
