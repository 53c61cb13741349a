//! `ferry copy --to-many` and `--via`: one file to many servers through a forwarding tree
//! (`gridftp_multicast` on the servers), and routes through servers that store nothing.
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

use ferry_client::{GsiSetup, Location, RemoteSession, RemoteUrl};
use ferry_proto::multicast::{best_fan_out, first_hop_stack, parse_mc_file, Destination};

use crate::copy::{run_job_async, runtime, CopyJob};
use crate::exit;
use crate::present::Output;

/// What `--to-many`, `--to-many-file`, `--via`, `--fan-out` and `--keep-order` ask for.
#[derive(Debug, Clone)]
pub(crate) struct Tree {
    pub(crate) dests: Vec<Destination>,
    pub(crate) via: Vec<String>,
    pub(crate) fan_out: Option<usize>,
    /// The tree follows the order given, not the round trips measured.
    pub(crate) keep_order: bool,
    /// Bits per second one hop carries.
    pub(crate) link_rate: f64,
}

impl Tree {
    /// The tree of `dests` (URLs, or the lines of `file`), through `via`, in the order given
    /// with `keep_order`.
    pub(crate) fn new(
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

/// Runs `job` (one source; its destination is replaced) to every destination of `tree`. Then
/// every destination the client can reach is checked (checksum, or size with --no-verify);
/// those that failed, and no others, get the file again down a tree of their own, up to the
/// job's retries.
pub(crate) fn run(mut job: CopyJob, tree: Tree) -> u8 {
    let Some(rt) = runtime() else {
        return 1;
    };
    let gsi = Arc::new(GsiSetup::new(job.options.gsi.clone()));
    let verbose = matches!(job.output, Output::Human { verbose: true });
    let retries = job.options.retries;
    // Each round is one attempt: a restarted multicast would leave the children short.
    job.options.retries = 0;
    let verify = job.options.verify.take();
    rt.block_on(async {
        let [source] = job.sources.as_slice() else {
            eprintln!("ferry copy: --to-many and --via copy one source file");
            return exit::USAGE;
        };
        let source = source.clone();
        let name = source_name(&source);
        let expected = match expected(&source, verify.as_ref(), &gsi).await {
            Ok(e) => Arc::new(e),
            Err(e) => {
                eprintln!("ferry copy: {e}");
                return exit::USAGE;
            }
        };
        let mut tree = tree;
        let mut last = exit::OK;
        for round in 0..=retries {
            if round > 0 {
                // Waits as a single copy's retries do: a destination that failed may be a
                // server restarting, and planning the round connects to it again.
                tokio::time::sleep(job.options.retry_delay(round)).await;
            }
            let plan = match plan(&source, &tree, &name, &gsi).await {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("ferry copy: {e}");
                    return exit::code(ferry_client::ErrorClass::Network);
                }
            };
            if verbose || job.output == Output::Json {
                for line in &plan.said {
                    eprintln!("ferry: {line}");
                }
            }
            job.dest = Location::Remote(plan.first.clone());
            job.options.request.disk_stack = Some(plan.stack.clone());
            let sessions = ferry_client::Sessions::with_gsi(Arc::clone(&gsi));
            let (code, _) = run_job_async(job.clone(), sessions).await;
            last = code;
            let failed = check_all(&plan, &expected, &gsi).await;
            let checked = plan.stored.len() - failed.len();
            if verbose && checked > 0 {
                eprintln!(
                    "ferry: {checked} destinations hold the source's bytes ({})",
                    expected.what()
                );
            }
            for (d, why) in &failed {
                eprintln!("ferry: {}: {why}", d.url);
            }
            // Hidden destinations (behind --via) cannot be checked: trust the copy's reply.
            let mut again: Vec<Destination> = failed.into_iter().map(|(d, _)| d).collect();
            if code != exit::OK {
                again.extend(plan.hidden.iter().cloned());
            } else if !plan.hidden.is_empty() {
                eprintln!(
                    "ferry: not checked, as not reachable from here (behind --via): {}",
                    plan.hidden
                        .iter()
                        .map(|d| d.url.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            if again.is_empty() {
                return exit::OK;
            }
            if round < retries {
                eprintln!(
                    "ferry: sending again to the {} destinations that do not have the file",
                    again.len()
                );
            }
            tree.dests = again;
            if last == exit::OK {
                last = exit::code(ferry_client::ErrorClass::Verification);
            }
        }
        last
    })
}

/// What a good copy must show: the source's checksum, or its size with --no-verify.
enum Expected {
    Checksum(&'static str, String),
    Size(u64),
}

impl Expected {
    fn what(&self) -> String {
        match self {
            Expected::Checksum(alg, _) => format!("{alg} compared"),
            Expected::Size(_) => "size compared".into(),
        }
    }
}

async fn expected(
    source: &Location,
    verify: Option<&ferry_client::Verify>,
    gsi: &Arc<GsiSetup>,
) -> Result<Expected, String> {
    let Some(verify) = verify else {
        return source_size(source, gsi).await.map(Expected::Size);
    };
    let alg = verify.algorithm.name();
    let value = match source {
        Location::Local(p) => {
            // As the copy's own verification sums a local end: the storage's checksum.
            let shown = p.display().to_string();
            let abs = std::path::absolute(p).map_err(|e| format!("{shown}: {e}"))?;
            let vp = ferry_storage::VirtualPath::resolve(
                &ferry_storage::VirtualPath::root(),
                &abs.to_string_lossy(),
            )
            .map_err(|e| format!("{shown}: {e}"))?;
            let alg = verify.algorithm;
            tokio::task::spawn_blocking(move || {
                let storage = ferry_storage::PosixStorage::open(std::path::Path::new("/"), true)?;
                ferry_storage::Storage::checksum(&storage, &vp, alg, 0, None)
            })
            .await
            .map_err(|e| format!("checksum task failed: {e}"))?
            .map_err(|e| format!("{shown}: {e}"))?
        }
        Location::Remote(u) => {
            let mut s = RemoteSession::connect(u, gsi)
                .await
                .map_err(|e| e.to_string())?;
            s.checksum(&u.path, alg, 0, None)
                .await
                .map_err(|e| e.to_string())?
        }
    };
    Ok(Expected::Checksum(alg, value))
}

/// The stored destinations that do not hold the source's bytes, with what is wrong; all are
/// asked at once.
async fn check_all(
    plan: &Plan,
    expected: &Arc<Expected>,
    gsi: &Arc<GsiSetup>,
) -> Vec<(Destination, String)> {
    let mut set = tokio::task::JoinSet::new();
    for d in plan.stored.iter().cloned() {
        let (expected, gsi) = (Arc::clone(expected), Arc::clone(gsi));
        set.spawn(async move {
            let got = check(&d.url, &expected, &gsi).await;
            (d, got)
        });
    }
    let mut good = Vec::new();
    let mut failed = Vec::new();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((d, Ok(()))) => good.push(d.url),
            Ok((d, Err(why))) => failed.push((d, why)),
            Err(e) => tracing::warn!("a check stopped: {e}"),
        }
    }
    // A check that stopped without an answer counts as a failure.
    for d in &plan.stored {
        if !good.contains(&d.url) && !failed.iter().any(|(f, _)| f.url == d.url) {
            failed.push((d.clone(), "not checked: the check stopped".into()));
        }
    }
    failed
}

/// Whether the copy at `url` holds the source's bytes.
async fn check(url: &str, expected: &Expected, gsi: &Arc<GsiSetup>) -> Result<(), String> {
    let Ok(Location::Remote(u)) = Location::parse(url) else {
        return Err("not a server URL".into());
    };
    let mut s = RemoteSession::connect(&u, gsi)
        .await
        .map_err(|e| e.to_string())?;
    match expected {
        Expected::Checksum(alg, want) => {
            let got = s
                .checksum(&u.path, alg, 0, None)
                .await
                .map_err(|e| e.to_string())?;
            if &got == want {
                Ok(())
            } else {
                Err(format!("{alg} {got} where the source has {want}"))
            }
        }
        Expected::Size(want) => {
            let got = s.size(&u.path).await.map_err(|e| e.to_string())?;
            if got == *want {
                Ok(())
            } else {
                Err(format!("{got} bytes where the source has {want}"))
            }
        }
    }
}

/// The copy's first hop, its disk stack, the destinations that store the file, and what was
/// measured and decided, for `-v`.
struct Plan {
    first: RemoteUrl,
    stack: String,
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
    let Ok(Location::Remote(first_url)) = Location::parse(&first.url) else {
        return Err(format!("{}: not a server URL", first.url));
    };
    Ok(Plan {
        first: first_url,
        stack: first_hop_stack(Some(&first.options), rest),
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
                    unreachable: e.class() == ferry_client::ErrorClass::Network,
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
