//! `ferry copy`: URL copy with defaults that need no tuning (`--tune` tunes it as gcp does).

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use ferry_client::path::{Asked, CongestionArg, PathCache, Tuning};
use ferry_client::{CopyOptions, FileRequest, GsiOptions, Location, SyncLevel, Verify};

use crate::demo::parse_size;
use crate::exit;
use crate::present::{self, report, runtime, summary, Output, OutputArgs};

/// `ferry copy` flags.
#[derive(Debug, Args)]
pub(crate) struct CopyArgs {
    /// Sources then the destination: ftp://[user[:pass]@]host[:port]/path (also ftps://,
    /// ftpes://, gsiftp://), file:///path or a local path. A trailing / names a directory.
    #[arg(required = true, num_args = 1.., value_name = "SRC... DST")]
    paths: Vec<String>,
    /// One file to many servers: the paths are SRC DST1 DST2 ... The first destination
    /// forwards each block to others as it arrives, down a tree (gridftp_multicast, on ferry or
    /// Globus servers that whitelist it); the client logs in to every destination first and
    /// builds the tree from what it measures (-v says so). Every copy's checksum is compared.
    #[arg(long = "to-many")]
    to_many: bool,
    /// Like --to-many, with destinations read from FILE: one URL per line, url?opts as in
    /// globus-url-copy -MC files.
    #[arg(long = "to-many-file", value_name = "FILE")]
    to_many_file: Option<std::path::PathBuf>,
    /// Children of each node of the tree. [default: the fan-out estimated soonest: a chain
    /// for large files, a flat tree for small ones]
    #[arg(long = "fan-out", value_name = "N")]
    fan_out: Option<usize>,
    /// With --to-many: build the tree in the order the destinations are given (the first is
    /// the root, then breadth first), instead of nearest first by the round trip of each login:
    /// for a topology known better than a login's round trip tells it.
    #[arg(long = "keep-order")]
    keep_order: bool,
    /// Forward through this server, which stores nothing (repeat for a chain of them): to
    /// reach a host with no route from here, behind a head node, or around a slow path.
    #[arg(long = "via", value_name = "URL")]
    via: Vec<String>,
    /// The rate one hop of a --to-many tree carries, in bits/s (1G, 10G), for its fan-out.
    /// [default: 1G]
    #[arg(long = "link-rate", value_name = "RATE", value_parser = parse_size)]
    link_rate: Option<u64>,
    /// Parallel data streams per file. [default: 1 below 16 MiB, else 4 (8 on paths with RTT > 20 ms)]
    #[arg(short = 'p', long = "parallel", value_name = "N")]
    parallel: Option<u32>,
    /// With -p N > 1: fail before transferring when a server does not offer MODE E (plain FTP
    /// servers), instead of copying with one stream in stream mode after a warning.
    #[arg(long = "require-parallel")]
    require_parallel: bool,
    /// Tune to the path as gcp does: probe it over the copy's own logins, choose the sending
    /// side's congestion control and the streams of large files (-p fixes the streams) from
    /// what earlier copies learnt in the path cache (shared with gcp and the transfer service),
    /// and keep what this copy measures. Without it ferry copy probes and keeps nothing.
    #[arg(long)]
    tune: bool,
    /// The data channels' transport: auto, tcp, udt or quic (both over UDP; udt also with
    /// Globus servers, quic with ferry servers, each where the admin allows it in
    /// --dc-whitelist), with options as in SITE SETNETSTACK (udt:cc=udt, quic:congestion=cubic).
    /// auto picks quic for files of 16 MiB or more when the round trip is 20 ms or more, the
    /// sender's TCP is loss-based (cubic, reno) and every server offers quic, or there udt
    /// where every server offers that and not quic (Globus servers with udt whitelisted);
    /// else tcp (-v says which and why). A named transport is used at both ends of every data connection;
    /// a server that refuses it fails the copy.
    #[arg(long, value_name = "NAME[:OPTIONS]", default_value = "auto", value_parser = parse_transport)]
    transport: String,
    /// TCP buffer size for data connections (e.g. 8M). [default: the kernel's autotuning]
    #[arg(long = "tcp-bs", value_name = "SIZE", value_parser = parse_size)]
    tcp_bs: Option<u64>,
    /// MODE E block size when sending (e.g. 1M), and asked of ferry servers that send. [default: 256K on one stream, up to 4M on several; a one-stream get asks a ferry server for 512K]
    #[arg(long = "block-size", value_name = "SIZE", value_parser = parse_size)]
    block_size: Option<u64>,
    /// Copy from this offset (partial transfer; written at the same offset).
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    offset: Option<u64>,
    /// Copy this many bytes (partial transfer; with /dev/zero as source, memory-to-memory runs).
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    length: Option<u64>,
    /// Copy directories recursively.
    #[arg(short = 'r', long)]
    recursive: bool,
    /// Create missing destination directories.
    #[arg(long = "create-dirs")]
    create_dirs: bool,
    /// Files in flight at once. [default: 4]
    #[arg(long, value_name = "N")]
    concurrency: Option<usize>,
    /// Retries per file after a network failure, resuming from restart markers. [default: 3]
    #[arg(long, value_name = "N")]
    retries: Option<u32>,
    /// Do not compare checksums. By default each file's source and destination checksums are
    /// compared (ADLER32, taken while the bytes move at a local end and kept by ferry servers),
    /// with a warning where a server cannot answer CKSM.
    #[arg(long = "no-verify", conflicts_with_all = ["checksum", "checksum_value", "verify_checksum"])]
    no_verify: bool,
    /// Verify with this algorithm (MD5, ADLER32, CRC32C, SHA1, SHA256, SHA512), failing where
    /// a server cannot answer it. A mismatch fails the file and removes the destination.
    /// [default: ADLER32, where the servers answer it]
    #[arg(long = "checksum", visible_alias = "checksum-alg", value_name = "ALG")]
    checksum: Option<String>,
    /// The source's known checksum, as FTS3's user checksum (e.g. ADLER32:1a2b3c4d): the source
    /// and the destination must both have it. One file only.
    #[arg(long = "checksum-value", value_name = "ALG:VALUE")]
    checksum_value: Option<String>,
    /// Fail where a server cannot answer CKSM (verification itself is the default).
    #[arg(long = "verify-checksum")]
    verify_checksum: bool,
    /// Give each destination its source's modification time and permission bits (MFMT and
    /// SITE CHMOD on a server; one that refuses them gives a warning).
    #[arg(long)]
    preserve: bool,
    /// Skip files already at the destination: --sync (same size), --sync=exists, --sync=size or --sync=checksum.
    #[arg(long, value_name = "LEVEL", num_args = 0..=1, require_equals = true, default_missing_value = "size")]
    sync: Option<String>,
    /// Stripe over every data node a striped server offers (SPAS): third party (SPAS to the
    /// destination, SPOR to the source) and uploads, as globus-url-copy -stripe does. Downloads
    /// use PORT, where a striped server sends from one node (as Globus' does).
    #[arg(long)]
    stripe: bool,
    /// With --stripe: the block size of the blocked layout, or 0 for the partitioned layout.
    /// [default: 1M]
    #[arg(long = "stripe-block-size", value_name = "SIZE", value_parser = parse_size, requires = "stripe")]
    stripe_block_size: Option<u64>,
    /// gsiftp://: authenticate data connections (DCAU A; the default).
    #[arg(long, overrides_with = "no_dcau")]
    dcau: bool,
    /// gsiftp://: no data-channel authentication (DCAU N), for servers that cannot do it.
    #[arg(long = "no-dcau")]
    no_dcau: bool,
    /// gsiftp://: integrity-protected data (PROT S; under TLS 1.3 also encrypted).
    #[arg(long)]
    dcsafe: bool,
    /// gsiftp://: encrypted data (PROT P), each parallel stream on its own core.
    #[arg(long)]
    dcpriv: bool,
    /// ftps:// and ftpes://: trust the CA certificates in this PEM file besides the system's.
    #[arg(long = "ca-file", value_name = "FILE")]
    ca_file: Option<std::path::PathBuf>,
    /// gsiftp://: the server's expected subject (DN) instead of a host certificate for the URL's host.
    #[arg(long, value_name = "DN")]
    subject: Option<String>,
    #[command(flatten)]
    output: OutputArgs,
}

/// A copy request, resolved from any spelling of the flags.
#[derive(Debug, Clone)]
pub(crate) struct CopyJob {
    pub(crate) sources: Vec<Location>,
    pub(crate) dest: Location,
    pub(crate) recursive: bool,
    pub(crate) options: CopyOptions,
    pub(crate) output: Output,
}

/// A size flag's value where the wire takes 32 bits.
pub(crate) fn bytes_u32(v: Option<u64>, what: &str) -> Result<Option<u32>, String> {
    v.map(|n| u32::try_from(n).map_err(|_| format!("{what} must be below 4 GiB")))
        .transpose()
}

impl CopyArgs {
    pub(crate) fn resolve(self) -> Result<CopyJob, String> {
        let mut locs = self
            .paths
            .iter()
            .map(|p| Location::parse(p).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        if locs.len() < 2 {
            return Err("need a source and a destination".into());
        }
        let dest = locs.pop().ok_or("need a source and a destination")?;
        let sync = SyncLevel::from_flag(self.sync.as_deref()).map_err(|e| e.to_string())?;
        let verify = Verify::from_flags(
            self.no_verify,
            self.checksum.as_deref(),
            self.verify_checksum,
            self.checksum_value.as_deref(),
        )
        .map_err(|e| e.to_string())?;
        if self.checksum_value.is_some() && (locs.len() != 1 || self.recursive) {
            return Err(
                "--checksum-value is one file's checksum: give one source file and no -r".into(),
            );
        }
        let defaults = CopyOptions::default();
        let options = CopyOptions {
            request: FileRequest {
                parallelism: self.parallel.unwrap_or(0),
                block_size: bytes_u32(self.block_size, "--block-size")?
                    .map(|b| b.max(4096))
                    .or(defaults.request.block_size),
                tcp_buffer: bytes_u32(self.tcp_bs, "--tcp-bs")?,
                transport: (self.transport != "tcp").then(|| self.transport.clone()),
                offset: self.offset.unwrap_or(0),
                length: self.length,
                stripe: ferry_dtp::LayoutSpec::asked(self.stripe, self.stripe_block_size),
                require_parallel: self.require_parallel,
                ..defaults.request.clone()
            },
            create_dirs: self.create_dirs,
            concurrency: self.concurrency.unwrap_or(defaults.concurrency),
            retries: self.retries.unwrap_or(defaults.retries),
            verify,
            sync,
            preserve: self.preserve,
            gsi: GsiOptions {
                ca_file: self.ca_file.clone(),
                ..GsiOptions::from_flags(
                    self.no_dcau && !self.dcau,
                    self.dcsafe,
                    self.dcpriv,
                    self.subject.clone(),
                )?
            },
            ..defaults
        };
        let output = self.output.output();
        Ok(CopyJob {
            sources: locs,
            dest,
            recursive: self.recursive,
            options,
            output,
        })
    }
}

/// Runs a resolved copy and returns the exit code.
pub(crate) fn run_job(job: CopyJob) -> u8 {
    let Some(rt) = runtime() else {
        return 1;
    };
    let sessions = sessions_for(&job.options);
    rt.block_on(run_job_async(job, sessions)).0
}

/// The sessions a copy with `options` logs in with.
pub(crate) fn sessions_for(options: &CopyOptions) -> ferry_client::Sessions {
    let gsi = ferry_client::GsiSetup::new(options.gsi.clone());
    ferry_client::Sessions::with_gsi(Arc::new(gsi))
}

/// An exit code, and what the copy moved in how long when it ran.
pub(crate) type Measured = (u8, Option<(ferry_client::CopySummary, Duration)>);

/// Runs the job from `sessions` (which may be logged in already) on the current runtime.
pub(crate) async fn run_job_async(job: CopyJob, sessions: ferry_client::Sessions) -> Measured {
    let started = Instant::now();
    let sink = present::sink(job.output);
    let result = ferry_client::copy_with_sessions(
        &job.sources,
        &job.dest,
        job.recursive,
        &job.options,
        sink,
        sessions,
    )
    .await;
    let elapsed = started.elapsed();
    match result {
        Ok(s) => {
            if job.output != Output::Json && job.output != Output::Quiet {
                summary(s.done, s.failed, s.bytes, elapsed);
            }
            let code = match s.first_failure {
                Some(class) => exit::code(class),
                None => exit::OK,
            };
            (code, Some((s, elapsed)))
        }
        Err(e) => (report(&e), None),
    }
}

/// Runs `job` tuned to its path from what the path cache holds, as `tune` asks (`Err`: no
/// tuning, for that reason), then keeps what it measured; `say` shows the choices and the
/// measurements, and `dry_run` stops once they are chosen. The probe logs in over `sessions`,
/// which the copy goes on with: no login twice.
pub(crate) async fn run_tuned(
    mut job: CopyJob,
    mut sessions: ferry_client::Sessions,
    tune: Result<Asked, &str>,
    say: &dyn Fn(&[String]),
    dry_run: bool,
) -> u8 {
    let tuning = match tune {
        Ok(asked) => {
            let cache = PathCache::default_for_user();
            match Tuning::choose(&job.sources, &job.dest, &mut sessions, &asked, cache).await {
                Ok(t) => t,
                Err(e) => return report(&e),
            }
        }
        Err(why) => Tuning::none(why),
    };
    say(&tuning.explained);
    if dry_run {
        return exit::OK;
    }
    tuning.apply(&mut job.options);
    let (code, measured) = run_job_async(job, sessions).await;
    if let Some((summary, elapsed)) = measured {
        say(&tuning.learn_from(&summary, elapsed));
    }
    code
}

pub(crate) fn run(mut args: CopyArgs) -> u8 {
    let tree = match args.tree() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("ferry copy: {e}");
            return exit::USAGE;
        }
    };
    if args.tune {
        if tree.is_some() {
            eprintln!("ferry copy: --tune tunes one path; --to-many and --via plan their own");
            return exit::USAGE;
        }
        let asked = Asked {
            streams: args.parallel,
            congestion: CongestionArg::Auto,
        };
        return match args.resolve() {
            Ok(job) => run_tuned_here(job, asked),
            Err(e) => {
                eprintln!("ferry copy: {e}");
                exit::USAGE
            }
        };
    }
    if let Some(t) = &tree {
        // The job's destination is the tree's first hop, chosen once it is measured.
        args.paths.truncate(1);
        args.paths.push(t.dests[0].url.clone());
    }
    match (args.resolve(), tree) {
        (Ok(job), Some(tree)) => {
            crate::multilink::run(&job.sources, &job.options, job.output, tree)
        }
        (Ok(job), None) => run_job(job),
        (Err(e), _) => {
            eprintln!("ferry copy: {e}");
            exit::USAGE
        }
    }
}

/// `ferry copy --tune`: the job tuned as gcp tunes it; the choices are said with -v.
fn run_tuned_here(job: CopyJob, asked: Asked) -> u8 {
    let Some(rt) = runtime() else {
        return 1;
    };
    let verbose = matches!(job.output, Output::Human { verbose: true });
    let say = move |lines: &[String]| {
        if verbose {
            for line in lines {
                eprintln!("ferry copy: {line}");
            }
        }
    };
    let sessions = sessions_for(&job.options);
    rt.block_on(run_tuned(job, sessions, Ok(asked), &say, false))
}

impl CopyArgs {
    /// The forwarding tree `--to-many`, `--to-many-file` and `--via` ask for, if any.
    fn tree(&self) -> Result<Option<ferry_client::multilink::Tree>, String> {
        let many = self.to_many || self.to_many_file.is_some();
        if !many && self.via.is_empty() {
            if self.fan_out.is_some() {
                return Err("--fan-out needs --to-many".into());
            }
            if self.keep_order {
                return Err("--keep-order needs --to-many".into());
            }
            return Ok(None);
        }
        if self.recursive {
            return Err("--to-many and --via copy one file, not a directory (-r)".into());
        }
        let dests = match (many, self.paths.as_slice()) {
            (true, [_, dests @ ..]) => dests.to_vec(),
            (false, [_, dest]) => vec![dest.clone()],
            (false, _) => {
                return Err(
                    "--via copies one source to one destination (--to-many for more)".into(),
                )
            }
            (true, []) => return Err("need a source".into()),
        };
        ferry_client::multilink::Tree::new(
            &dests,
            self.to_many_file.as_ref(),
            self.via.clone(),
            self.fan_out,
            self.keep_order,
            self.link_rate.map_or(1e9, |r| r as f64),
        )
        .map(Some)
    }
}

/// `--transport`: `auto`, or a transport of this build with options it takes, as a net-stack
/// entry.
fn parse_transport(s: &str) -> Result<String, String> {
    if s == ferry_client::choose::AUTO {
        return Ok(s.to_string());
    }
    let stack = ferry_proto::stack::StackSpec::parse(s).map_err(|e| e.to_string())?;
    ferry_net::Transports::standard()
        .transport_of(&stack)
        .map_err(|e| e.to_string())?;
    Ok(stack.to_string())
}
