//! One file to many servers through a forwarding tree (`gridftp_multicast` on the servers),
//! and routes through servers that store nothing: `ferry copy --to-many` and `--via`.
//!
//! The tree is built from what the client measures before the copy: it logs in to every
//! destination at once, timing each login and its round trip. Destinations are ordered by
//! round trip (to the millisecond), so servers at one site share a subtree (`--keep-order`
//! keeps the order given instead), and the fan-out is
//! the one [`best_fan_out`] estimates soonest for the file's size at `--link-rate` and a hop's
//! start-up (twice the slowest login): a chain for large files, a flat tree for small ones.
//! After the copy every copy the client can reach is checked (checksum, or size), and the
//! failed destinations alone get the file again.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_proto::multicast::{best_fan_out, parse_mc_file, Destination};

use crate::{
    ClientError, CopyOptions, CopySummary, ErrorClass, EventSink, GsiSetup, Location, RemoteSession,
};

mod check;
mod resend;

/// What a one-to-many copy tells its caller as it goes (the CLI prints it; the transfer service
/// would keep it with the job).
pub trait Watch: Send + Sync {
    /// A line for people: `detail` lines (the plan, the checks that passed) are for `-v`.
    fn say(&self, line: &str, detail: bool);
    /// Where the events of the next copy down the tree go (each round sends one or more).
    fn events(&self) -> EventSink;
    /// One copy down the tree ended, after `elapsed`.
    fn copied(&self, result: &Result<CopySummary, ClientError>, elapsed: Duration);
}

/// What `--to-many`, `--to-many-file`, `--via`, `--fan-out` and `--keep-order` ask for.
#[derive(Debug, Clone)]
pub struct Tree {
    /// The destinations that store the file.
    pub dests: Vec<Destination>,
    /// Servers the file goes through, storing nothing, before the destinations.
    pub via: Vec<String>,
    /// The tree's fan-out, instead of the one estimated soonest.
    pub fan_out: Option<usize>,
    /// The tree follows the order given, not the round trips measured.
    pub keep_order: bool,
    /// Bits per second one hop carries.
    pub link_rate: f64,
}

impl Tree {
    /// The tree of `dests` (URLs, or the lines of `file`), through `via`, in the order given
    /// with `keep_order`.
    pub fn new(
        dests: &[String],
        file: Option<&PathBuf>,
        via: Vec<String>,
        fan_out: Option<usize>,
        keep_order: bool,
        link_rate: f64,
    ) -> Result<Tree, String> {
        let mut all = Vec::new();
        if let Some(f) = file {
            let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
            all = parse_mc_file(&text, None).map_err(|e| format!("{}: {e}", f.display()))?;
        }
        for d in dests {
            all.push(Destination::parse(d).map_err(|e| e.to_string())?);
        }
        for v in &via {
            Destination::parse(v).map_err(|e| format!("--via: {e}"))?;
        }
        if all.is_empty() {
            return Err("no destination".into());
        }
        if fan_out == Some(0) {
            return Err("--fan-out must be at least 1".into());
        }
        Ok(Tree {
            dests: all,
            via,
            fan_out,
            keep_order,
            link_rate,
        })
    }
}

/// Copies `source` to every destination of `tree` with `options` (their retries are the
/// rounds here). A hop that fails is named as the tree reports it, while the other branches go
/// on; then every destination this client can reach is checked (checksum, or size without
/// `options.verify`), and each failed hop's subtree alone is sent what it lacks again, from
/// what it held (its restart markers), along the route it had, up to `options.retries` times.
/// The error is the class of the last failure; `watch` has been told why.
pub async fn copy_to_many(
    source: &Location,
    tree: &Tree,
    options: &CopyOptions,
    watch: &dyn Watch,
) -> Result<(), ErrorClass> {
    let gsi = Arc::new(GsiSetup::new(options.gsi.clone()));
    let retries = options.retries;
    let mut options = options.clone();
    // The rounds below are the retries: each resends only what failed, where it failed.
    options.retries = 0;
    let verify = options.verify.take();
    let name = source_name(source);
    let expected = match check::expected(source, verify.as_ref(), &gsi).await {
        Ok(e) => Arc::new(e),
        Err(e) => {
            watch.say(&e, false);
            return Err(ErrorClass::Usage);
        }
    };
    let plan = match plan(source, tree, &name, &gsi).await {
        Ok(p) => p,
        Err(e) => {
            watch.say(&e, false);
            return Err(ErrorClass::Network);
        }
    };
    for line in &plan.said {
        watch.say(line, true);
    }
    let size = source_size(source, &gsi).await.ok();
    let mut sends = vec![resend::Resend::whole(&plan)];
    let mut last = Ok(());
    for round in 0..=retries {
        if round > 0 {
            // Waits as a single copy's retries do: a hop that failed may be a server
            // restarting.
            tokio::time::sleep(options.retry_delay(round)).await;
        }
        last = Ok(());
        let mut failed = Vec::new();
        for r in &sends {
            let (result, named) = resend::send(source, &options, &plan, r, &gsi, size, watch).await;
            if result.is_err() {
                last = result;
            }
            failed.extend(named);
        }
        let bad = check::check_all(&plan, &expected, &gsi).await;
        let checked = plan.stored.len() - bad.len();
        if checked > 0 {
            watch.say(
                &format!(
                    "{checked} destinations hold the source's bytes ({})",
                    expected.what()
                ),
                true,
            );
        }
        let next = resend::next_round(&plan, failed, &bad);
        if next.is_empty() {
            if last.is_err() {
                // Every destination checks out though the copy said otherwise (a hop failed
                // after its last byte): the copies are what counts.
                tracing::info!("every destination holds the file after a failed round");
            }
            if !plan.hidden.is_empty() {
                watch.say(
                    &format!(
                        "not checked, as not reachable from here (behind --via): {}",
                        plan.hidden
                            .iter()
                            .map(|d| d.url.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    false,
                );
            }
            return Ok(());
        }
        for (d, why) in &bad {
            watch.say(&format!("{}: {why}", d.url), false);
        }
        if round < retries {
            watch.say(
                &format!(
                    "{} of the tree failed; sending them again what they lack",
                    resend::describe(&next)
                ),
                false,
            );
        }
        sends = next;
        if last.is_ok() {
            last = Err(ErrorClass::Verification);
        }
    }
    last
}

/// The copy's first hop, its disk stack, the destinations that store the file, and what was
/// measured and decided, for `-v`.
struct Plan {
    /// The tree as sent: the first hop, and the destinations it forwards to (see
    /// [`ferry_proto::multicast::first_hop_stack`]).
    top: Destination,
    below: Vec<Destination>,
    /// Destinations that store the file and can be checked from here.
    stored: Vec<Destination>,
    /// Destinations behind a relay, which this client cannot reach.
    hidden: Vec<Destination>,
    said: Vec<String>,
}

/// The file name a destination directory (a URL ending in `/`) gets.
fn source_name(source: &Location) -> String {
    let path = match source {
        Location::Local(p) => p.display().to_string(),
        Location::Remote(u) => u.path.clone(),
    };
    path.rsplit('/').next().unwrap_or("file").to_string()
}

fn named(url: &str, name: &str) -> String {
    if url.ends_with('/') {
        format!("{url}{name}")
    } else {
        url.to_string()
    }
}

async fn plan(
    source: &Location,
    tree: &Tree,
    name: &str,
    gsi: &Arc<GsiSetup>,
) -> Result<Plan, String> {
    let mut said = Vec::new();
    let size = source_size(source, gsi).await?;
    let relays: Vec<Destination> = tree
        .via
        .iter()
        .map(|v| Destination {
            url: named(v, name),
            options: "cc=1;local_write=n".into(),
        })
        .collect();
    let relay_setup = measure(&relays, gsi)
        .await
        .into_iter()
        .zip(&relays)
        .map(|(m, r)| {
            m.map(|(_, setup)| setup)
                .map_err(|e| format!("--via {}: {}", r.url, e.why))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut dests: Vec<(Destination, Option<Duration>, Duration)> = Vec::new();
    let mut hidden = Vec::new();
    for (d, m) in tree.dests.iter().zip(measure(&tree.dests, gsi).await) {
        let mut d = d.clone();
        d.url = named(&d.url, name);
        match m {
            Ok((rtt, setup)) => dests.push((d, Some(rtt), setup)),
            // Behind a relay (a worker behind its head node): not reachable from here, as
            // expected; the relay's own start-up stands in for its hops.
            Err(e) if e.unreachable && !relays.is_empty() => {
                hidden.push(d.clone());
                dests.push((
                    d,
                    None,
                    relay_setup.iter().copied().max().unwrap_or_default(),
                ))
            }
            Err(e) => return Err(format!("{}: {}", d.url, e.why)),
        }
    }
    // Nearest first by whole milliseconds (closer round trips are noise, and keep the order
    // given), or as given with --keep-order; unmeasured destinations last.
    dests.sort_by_key(|(_, rtt, _)| match rtt {
        None => u128::MAX,
        Some(_) if tree.keep_order => 0,
        Some(r) => r.as_millis(),
    });
    // A hop starts with a login, then as many round trips again to start its transfer (TYPE,
    // MODE, SETDISKSTACK, PASV, STOR, the data connection): twice the slowest login measured.
    let setup = 2 * dests.iter().map(|(_, _, s)| *s).max().unwrap_or_default();
    let transfer_s = size as f64 * 8.0 / tree.link_rate;
    let n = dests.len();
    let (fan_out, estimate) = best_fan_out(n, transfer_s, setup.as_secs_f64());
    let fan_out = tree.fan_out.unwrap_or(fan_out);
    said.push(format!(
        "tree: {n} destinations {} ({}), fan-out {fan_out}{} (estimate {estimate:.2} s: \
         {size} bytes at {:.2} Gbit/s per hop, {:.0} ms to start a hop: twice the slowest login measured)",
        dests
            .iter()
            .map(|(d, rtt, _)| match rtt {
                Some(rtt) => format!("{} {:.1} ms", d.url, rtt.as_secs_f64() * 1e3),
                None => format!("{} (not reachable from here)", d.url),
            })
            .collect::<Vec<_>>()
            .join(", "),
        if tree.keep_order { "in the order given (--keep-order)" } else { "by round trip" },
        if tree.fan_out.is_some() { " (--fan-out)" } else { "" },
        tree.link_rate / 1e9,
        setup.as_secs_f64() * 1e3,
    ));
    if !relays.is_empty() {
        said.push(format!(
            "via {} (forwarding, storing nothing)",
            relays
                .iter()
                .map(|r| r.url.as_str())
                .collect::<Vec<_>>()
                .join(" → ")
        ));
    }
    let stored: Vec<Destination> = dests
        .iter()
        .filter(|(d, _, _)| !hidden.contains(d))
        .map(|(d, _, _)| d.clone())
        .collect();
    let mut lines = relays;
    for (mut d, _, _) in dests {
        let own = format!("cc={fan_out}");
        d.options = if d.options.is_empty() {
            own
        } else if d.options.split(';').any(|o| o.starts_with("cc=")) {
            d.options
        } else {
            format!("{own};{}", d.options)
        };
        lines.push(d);
    }
    let (first, rest) = lines.split_first().ok_or("no destination")?;
    if !matches!(Location::parse(&first.url), Ok(Location::Remote(_))) {
        return Err(format!("{}: not a server URL", first.url));
    }
    Ok(Plan {
        top: first.clone(),
        below: rest.to_vec(),
        stored,
        hidden,
        said,
    })
}

async fn source_size(source: &Location, gsi: &Arc<GsiSetup>) -> Result<u64, String> {
    match source {
        Location::Local(p) => std::fs::metadata(p)
            .map(|m| m.len())
            .map_err(|e| format!("{}: {e}", p.display())),
        Location::Remote(u) => {
            let mut s = RemoteSession::connect(u, gsi)
                .await
                .map_err(|e| e.to_string())?;
            s.size(&u.path)
                .await
                .map_err(|e| format!("{}: {e}", u.authority()))
        }
    }
}

/// A destination's round trip and login time.
type Measured = (Duration, Duration);

/// Why a destination could not be measured: `unreachable` when no connection got through
/// (behind a relay, as expected with `--via`), else a refusal to act on.
struct Unmeasured {
    unreachable: bool,
    why: String,
}

/// How long a destination may take to let the client in before the copy.
const MEASURE_TIMEOUT: Duration = Duration::from_secs(10);

/// Logs in to every destination at once: each one's round trip and log-in time.
async fn measure(dests: &[Destination], gsi: &Arc<GsiSetup>) -> Vec<Result<Measured, Unmeasured>> {
    let mut set = tokio::task::JoinSet::new();
    for (i, d) in dests.iter().enumerate() {
        let url = d.url.clone();
        let gsi = Arc::clone(gsi);
        set.spawn(async move {
            let Ok(Location::Remote(u)) = Location::parse(&url) else {
                let why = "not a server URL".to_string();
                return (
                    i,
                    Err(Unmeasured {
                        unreachable: false,
                        why,
                    }),
                );
            };
            let started = Instant::now();
            let r = match tokio::time::timeout(MEASURE_TIMEOUT, RemoteSession::connect(&u, &gsi))
                .await
            {
                Ok(Ok(s)) => Ok((s.rtt(), started.elapsed())),
                Ok(Err(e)) => Err(Unmeasured {
                    unreachable: e.class() == ErrorClass::Network,
                    why: e.to_string(),
                }),
                Err(_) => Err(Unmeasured {
                    unreachable: true,
                    why: format!("no login within {} s", MEASURE_TIMEOUT.as_secs()),
                }),
            };
            (i, r)
        });
    }
    let mut out: Vec<Result<Measured, Unmeasured>> = (0..dests.len())
        .map(|_| {
            Err(Unmeasured {
                unreachable: false,
                why: "not measured".into(),
            })
        })
        .collect();
    while let Some(joined) = set.join_next().await {
        if let Ok((i, r)) = joined {
            out[i] = r;
        }
    }
    out
}
