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
//! Loss is not measured before the copy: a login moves too few segments to see 0.1 % loss.
//! Without it the rule costs little where it is wrong: on a clean long path QUIC is within 4 %
//! of loss-based TCP (`bench/`, scenario `quic`, path `wan`: 810 against 839-841 Mbit/s at
//! 60 ms), where on the lossy ones it is 17 to 44 times faster than 8 TCP streams.

use std::time::Duration;

use ferry_proto::stack::StackSpec;

use crate::url::Location;
use crate::{ClientError, FileRequest, Sessions};

/// What `--transport auto` is spelled.
pub const AUTO: &str = "auto";
/// The user-space transports `auto` may pick, in the order it asks for them.
const USER_SPACE: [(&str, &str); 2] = [("quic", "QUIC"), ("udt", "UDT")];
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

/// Whether a TCP congestion control reads every loss as congestion.
fn loss_based(congestion: &str) -> bool {
    !matches!(congestion, "bbr" | "bbr2" | "bbr3")
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
    let large = payload.is_none_or(|p| p >= 16 << 20);
    let why = match by_path(large, rtt, &sender, &congestion) {
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
}
