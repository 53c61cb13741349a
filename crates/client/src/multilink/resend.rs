//! One copy down a multilink tree or one failed hop's subtree, and what the next round sends.
//!
//! The tree names a hop that fails while the copy runs (see
//! [`ferry_proto::multicast::ForwardFailure`]), with what its subtree held; the copy's own
//! restart markers cover only what every destination has. So a round ends with the hops that
//! failed, outermost only, each with the ranges its subtree holds, and the next round sends
//! each of them the rest along the route it had (the hops above relaying, storing nothing).

use std::sync::{Arc, Mutex};

use ferry_proto::multicast::{
    first_hop_stack, route_to, subtree, Destination, ForwardFailure, REPORT_HEADER,
};
use ferry_proto::RangeSet;

use super::{Plan, Watch};
use crate::{human_bytes, CopyEvent, CopyOptions, ErrorClass, GsiSetup, Location};

/// A subtree to send the file to: the hop at its top, and what all of it holds already.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Resend {
    pub(super) url: String,
    pub(super) held: RangeSet,
}

impl Resend {
    /// The whole tree, from nothing.
    pub(super) fn whole(plan: &Plan) -> Resend {
        Resend {
            url: plan.top.url.clone(),
            held: RangeSet::new(),
        }
    }
}

/// What the copy's events said.
#[derive(Debug, Default)]
struct Seen {
    failed: Vec<ForwardFailure>,
    stored: RangeSet,
    /// The copy failed with the first hop's report: its own part is complete.
    reported: bool,
}

/// Sends `r`'s subtree the source's bytes it lacks; returns how the copy ended and the hops
/// that failed (the top hop itself, with what it held, when the copy failed there).
pub(super) async fn send(
    source: &Location,
    options: &CopyOptions,
    plan: &Plan,
    r: &Resend,
    gsi: &Arc<GsiSetup>,
    size: Option<u64>,
    watch: &dyn Watch,
) -> (Result<(), ErrorClass>, Vec<ForwardFailure>) {
    let Some((first, rest)) = route_to(&plan.top, &plan.below, &r.url) else {
        watch.say(&format!("{}: not in the tree", r.url), false);
        return (Err(ErrorClass::Usage), Vec::new());
    };
    let Ok(dest @ Location::Remote(_)) = Location::parse(&first.url) else {
        watch.say(&format!("{}: not a server URL", first.url), false);
        return (Err(ErrorClass::Usage), Vec::new());
    };
    if r.url != plan.top.url || !r.held.is_empty() {
        let others = subtree(&plan.top, &plan.below, &r.url).map_or(0, |s| s.len() - 1);
        let lacking =
            size.map(|s| s.saturating_sub(r.held.intersect(&RangeSet::from_range(0, s)).total()));
        let line = format!(
            "sending {}{} {}{}",
            r.url,
            match others {
                0 => String::new(),
                1 => " and the destination below it".into(),
                n => format!(" and the {n} destinations below it"),
            },
            match lacking {
                Some(n) => format!("the {} they lack", human_bytes(n)),
                None => "what they lack".into(),
            },
            if first.url == r.url {
                String::new()
            } else {
                format!(
                    " (through {}, storing nothing there)",
                    route_names(&first, &rest, &r.url)
                )
            }
        );
        watch.say(&line, false);
    }
    let mut options = options.clone();
    options.request.disk_stack = Some(first_hop_stack(Some(&first.options), &rest));
    options.request.restart = r.held.clone();
    let seen = Arc::new(Mutex::new(Seen {
        stored: r.held.clone(),
        ..Seen::default()
    }));
    let shown = watch.events();
    let sink: crate::EventSink = {
        let seen = Arc::clone(&seen);
        Arc::new(move |ev: CopyEvent| {
            note(&seen, &ev);
            shown(ev);
        })
    };
    let sessions = crate::Sessions::with_gsi(Arc::clone(gsi));
    let started = std::time::Instant::now();
    let result = crate::copy_with_sessions(
        std::slice::from_ref(source),
        &dest,
        false,
        &options,
        sink,
        sessions,
    )
    .await;
    watch.copied(&result, started.elapsed());
    let outcome = match &result {
        Ok(s) => s.first_failure.map_or(Ok(()), Err),
        Err(e) => Err(e.class()),
    };
    let seen = std::mem::take(&mut *seen.lock().unwrap_or_else(|p| p.into_inner()));
    if outcome.is_ok() {
        return (outcome, Vec::new());
    }
    if seen.reported {
        return (outcome, seen.failed);
    }
    // The copy failed at its first hop (or before): the whole subtree failed with it, holding
    // what the copy's restart markers said, which is what all of it had.
    let mut held = seen.stored;
    held.merge(&r.held);
    let failed = ForwardFailure {
        url: r.url.clone(),
        held,
        error: "the copy to it failed".into(),
    };
    (outcome, vec![failed])
}

/// Keeps what an event of the copy says of the tree.
fn note(seen: &Mutex<Seen>, ev: &CopyEvent) {
    let Ok(mut s) = seen.lock() else { return };
    match ev {
        CopyEvent::ForwardFailed {
            url, held, error, ..
        } => {
            // The final report repeats what the markers said: the latest stands.
            s.failed.retain(|f| &f.url != url);
            s.failed.push(ForwardFailure {
                url: url.clone(),
                held: RangeSet::parse(held).unwrap_or_default(),
                error: error.clone(),
            });
        }
        CopyEvent::Stored { ranges, .. } => {
            s.stored = RangeSet::parse(ranges).unwrap_or_else(|_| s.stored.clone());
        }
        CopyEvent::Failed { error, .. } => s.reported = error.contains(REPORT_HEADER),
        _ => {}
    }
}

/// The relays a route passes, by name.
fn route_names(first: &Destination, rest: &[Destination], to: &str) -> String {
    std::iter::once(first)
        .chain(rest.iter())
        .take_while(|d| d.url != to)
        .map(|d| d.url.as_str())
        .collect::<Vec<_>>()
        .join(" → ")
}

/// What the next round sends: each failed hop that no other failed hop's subtree holds, from
/// what it held; and any destination whose bytes are wrong (`bad`, from the checks) that no
/// such hop covers, from nothing. A hop whose every destination checks out (it failed after
/// its last byte) needs nothing; destinations behind a relay cannot be checked and count as
/// failed with their hop.
pub(super) fn next_round(
    plan: &Plan,
    failed: Vec<ForwardFailure>,
    bad: &[(Destination, String)],
) -> Vec<Resend> {
    let below = |hop: &str| subtree(&plan.top, &plan.below, hop).unwrap_or_default();
    let covers = |hop: &str, url: &str| below(hop).iter().any(|d| d.url == url);
    let mut next: Vec<Resend> = Vec::new();
    for f in &failed {
        let inside_another = failed
            .iter()
            .any(|g| g.url != f.url && covers(&g.url, &f.url));
        if inside_another || next.iter().any(|r| r.url == f.url) {
            continue;
        }
        let all_good = below(&f.url).iter().all(|d| {
            plan.stored.iter().any(|s| s.url == d.url) && !bad.iter().any(|(b, _)| b.url == d.url)
        });
        if !all_good {
            next.push(Resend {
                url: f.url.clone(),
                held: f.held.clone(),
            });
        }
    }
    for (d, _) in bad {
        if !next.iter().any(|r| covers(&r.url, &d.url)) {
            next.push(Resend {
                url: d.url.clone(),
                held: RangeSet::new(),
            });
        }
    }
    next
}

/// The hops of a round, for a message.
pub(super) fn describe(next: &[Resend]) -> String {
    next.iter()
        .map(|r| r.url.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
