//! How a forwarding tree reports a failed hop, and how a client reaches that hop again.
//!
//! A node whose child fails says so at once, as one more line of its next performance marker
//! (`112`), and again in its final reply; its parent passes the line up, so the client hears
//! of a failure anywhere in the tree while the other branches go on:
//!
//! ```text
//!  Forward Failed: gsiftp://d3/f; Held: 0-8388608; Error: connection reset by peer
//! ```
//!
//! `Held` is what every destination of the failed hop's subtree had stored (its restart
//! markers), so a retry sends that subtree only the rest. Globus' client reads perf-marker
//! fields by name and skips lines it does not know, so these lines cost it nothing (Globus' own
//! `GMC_ERROR` report is never read by its parents: see
//! `shared/reference/transports-and-stacks.md`). A node whose own part is complete ends
//! with [`REPORT_HEADER`] and the failures below it; any other error means the node's whole
//! subtree failed.

use super::{Destination, MulticastOptions};
use crate::reply::Reply;
use crate::RangeSet;

/// The first line of a node's final reply when only hops below it failed: its own file (or
/// its relaying) is complete.
pub const REPORT_HEADER: &str =
    "gridftp_multicast: forwarding failed below this server; all else is complete.";

const FAILED: &str = "Forward Failed: ";
const HELD: &str = "; Held: ";
const ERROR: &str = "; Error: ";

/// One hop of a forwarding tree that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardFailure {
    /// The hop's URL, as its parent's `urls` named it.
    pub url: String,
    /// What every destination of its subtree had stored when it failed.
    pub held: RangeSet,
    /// Why it failed.
    pub error: String,
}

impl ForwardFailure {
    /// The reply line (with its leading space; line breaks in the error become spaces).
    pub fn to_line(&self) -> String {
        let error: String = self
            .error
            .chars()
            .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
            .collect();
        format!(" {FAILED}{}{HELD}{}{ERROR}{error}", self.url, self.held)
    }

    /// Reads a line [`ForwardFailure::to_line`] wrote; `None` for any other line.
    pub fn from_line(line: &str) -> Option<ForwardFailure> {
        let rest = line.trim_start().strip_prefix(FAILED)?;
        let (url, rest) = rest.split_once(HELD)?;
        let (held, error) = rest.split_once(ERROR)?;
        Some(ForwardFailure {
            url: url.to_string(),
            held: RangeSet::parse(held).ok()?,
            error: error.trim_end().to_string(),
        })
    }

    /// Every failure a reply (a perf marker or a final reply) names.
    pub fn all_in(reply: &Reply) -> Vec<ForwardFailure> {
        reply
            .lines
            .iter()
            .filter_map(|l| ForwardFailure::from_line(l))
            .collect()
    }
}

/// The text of a node's final reply when only hops below it failed (lines split by `\n`).
pub fn report(failures: &[ForwardFailure]) -> String {
    let mut text = String::from(REPORT_HEADER);
    for f in failures {
        text.push('\n');
        text.push_str(&f.to_line());
    }
    text
}

/// Whether `reply` is a node's report that its own part is complete and only the hops it
/// names failed.
pub fn is_report(reply: &Reply) -> bool {
    reply
        .lines
        .first()
        .is_some_and(|l| l.trim() == REPORT_HEADER)
}

/// `options` with `key` set to `value` (replacing any earlier value).
fn with_option(options: &str, key: &str, value: &str) -> String {
    let prefix = format!("{key}=");
    let mut items: Vec<&str> = options
        .split(';')
        .filter(|i| !i.is_empty() && !i.starts_with(&prefix))
        .collect();
    let own = format!("{key}={value}");
    items.push(&own);
    items.join(";")
}

/// The tree that reaches the hop `failed` again and no other destination: the first hop and
/// the destinations it forwards to (as [`super::first_hop_stack`] takes them), where `first`
/// forwarding to `rest` is the tree as it was sent. Every hop on the way keeps its place and
/// options but forwards to one child and writes nothing (`cc=1;local_write=n`), so the data
/// takes the route it took before (through relays, to hosts the client cannot reach); the
/// failed hop forwards to its own subtree as before. `None` when no hop has that URL.
pub fn route_to(
    first: &Destination,
    rest: &[Destination],
    failed: &str,
) -> Option<(Destination, Vec<Destination>)> {
    let mut path = Vec::new();
    let below = find(first, rest, failed, &mut path)?;
    let (hop, relays) = path.split_last()?;
    let relay = |d: &Destination| Destination {
        url: d.url.clone(),
        options: with_option(&with_option(&d.options, "cc", "1"), "local_write", "n"),
    };
    let mut line: Vec<Destination> = relays.iter().map(relay).collect();
    line.push(hop.clone());
    line.extend(below);
    let first = line.remove(0);
    Some((first, line))
}

/// Every destination of the hop `url`'s subtree, the hop first, in the tree `first` forwarding
/// to `rest`; `None` when no hop has that URL.
pub fn subtree(first: &Destination, rest: &[Destination], url: &str) -> Option<Vec<Destination>> {
    let mut path = Vec::new();
    let below = find(first, rest, url, &mut path)?;
    let mut all = vec![path.pop()?];
    all.extend(below);
    Some(all)
}

/// Walks the tree under `node` (forwarding to `below`) to the hop `target`, pushing each hop
/// of the way onto `path`; the target's own subtree when found.
fn find(
    node: &Destination,
    below: &[Destination],
    target: &str,
    path: &mut Vec<Destination>,
) -> Option<Vec<Destination>> {
    path.push(node.clone());
    if node.url == target {
        return Some(below.to_vec());
    }
    let mut options = MulticastOptions::parse(&node.options).unwrap_or_default();
    options.urls = below.to_vec();
    for (child, d) in options.children().into_iter().zip(below) {
        if let Some(found) = find(d, &child.subtree, target, path) {
            return Some(found);
        }
    }
    path.pop();
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::multicast::first_hop_stack;

    fn d(url: &str, options: &str) -> Destination {
        Destination {
            url: url.into(),
            options: options.into(),
        }
    }

    #[test]
    fn a_failure_line_round_trips_and_other_lines_are_not_failures() {
        let f = ForwardFailure {
            url: "gsiftp://d3:2811/data/f; odd".into(),
            held: RangeSet::parse("0-1048576,2097152-3145728").unwrap(),
            error: "425 Can't open data connection;\r\n reset".into(),
        };
        let line = f.to_line();
        assert!(line.starts_with(" Forward Failed: gsiftp://d3:2811/data/f; odd; Held: "));
        assert!(!line.contains('\n'));
        let back = ForwardFailure::from_line(&line).unwrap();
        assert_eq!(back.url, f.url);
        assert_eq!(back.held, f.held);
        assert_eq!(back.error, "425 Can't open data connection;   reset");
        assert_eq!(
            ForwardFailure::from_line(" Stripe Bytes Transferred: 5"),
            None
        );
        let nothing = ForwardFailure {
            held: RangeSet::new(),
            error: "gone".into(),
            ..f
        };
        assert_eq!(ForwardFailure::from_line(&nothing.to_line()), Some(nothing));
    }

    #[test]
    fn a_report_reads_back_from_the_reply_a_server_sends() {
        let failures = vec![ForwardFailure {
            url: "ftp://a/f".into(),
            held: RangeSet::from_range(0, 10),
            error: "gone".into(),
        }];
        let mut lines: Vec<String> = report(&failures).split('\n').map(String::from).collect();
        lines.push("End.".into());
        let reply = Reply::multi(451, lines);
        let mut parser = crate::reply::ReplyParser::new();
        parser.feed(&reply.to_bytes());
        let got = parser.next_reply().unwrap().unwrap();
        assert!(is_report(&got));
        assert_eq!(ForwardFailure::all_in(&got), failures);
        assert!(!is_report(&Reply::new(451, "local error: disk full")));
    }

    #[test]
    fn the_route_to_a_hop_relays_through_its_ancestors_and_keeps_its_subtree() {
        // d0 forwards to d1 and d2 (cc=2); d1 to d3 and d4; d2 to d5 and d6.
        let first = d("ftp://h0/f", "cc=2;P=4");
        let rest: Vec<Destination> = (1..=6)
            .map(|i| d(&format!("ftp://h{i}/f"), "cc=2"))
            .collect();
        let (f, r) = route_to(&first, &rest, "ftp://h2/f").unwrap();
        assert_eq!(f.url, "ftp://h0/f");
        assert_eq!(f.options, "P=4;cc=1;local_write=n");
        let urls: Vec<&str> = r.iter().map(|d| d.url.as_str()).collect();
        assert_eq!(urls, ["ftp://h2/f", "ftp://h5/f", "ftp://h6/f"]);
        assert_eq!(r[0].options, "cc=2");
        // What the retry's first hop is told: forward to h2 only, which forwards as before.
        let o = MulticastOptions::parse(
            &String::from_utf8(crate::stack::percent_decode(
                first_hop_stack(Some(&f.options), &r)
                    .strip_prefix("file,gridftp_multicast:")
                    .unwrap(),
            ))
            .unwrap(),
        )
        .unwrap();
        assert!(!o.local_write);
        let children = o.children();
        assert_eq!(children.len(), 1);
        assert_eq!(children[0].url, "ftp://h2/f");
        assert_eq!(children[0].subtree.len(), 2);

        // A leaf two levels down: two relays, then the leaf alone.
        let (f, r) = route_to(&first, &rest, "ftp://h4/f").unwrap();
        assert_eq!(f.options, "P=4;cc=1;local_write=n");
        let urls: Vec<(&str, &str)> = r
            .iter()
            .map(|d| (d.url.as_str(), d.options.as_str()))
            .collect();
        assert_eq!(
            urls,
            [("ftp://h1/f", "cc=1;local_write=n"), ("ftp://h4/f", "cc=2")]
        );
        let urls = |v: Option<Vec<Destination>>| {
            v.unwrap_or_default()
                .into_iter()
                .map(|d| d.url)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            urls(subtree(&first, &rest, "ftp://h1/f")),
            ["ftp://h1/f", "ftp://h3/f", "ftp://h4/f"]
        );
        assert_eq!(urls(subtree(&first, &rest, "ftp://h6/f")), ["ftp://h6/f"]);
        assert_eq!(urls(subtree(&first, &rest, "ftp://h0/f")).len(), 7);
        // The first hop is the whole tree; an unknown URL has no route.
        assert_eq!(
            route_to(&first, &rest, "ftp://h0/f"),
            Some((first.clone(), rest.clone()))
        );
        assert_eq!(route_to(&first, &rest, "ftp://elsewhere/f"), None);
    }
}
