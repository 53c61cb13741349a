//! `gcp` (also `ferry cp`): scp-style copies. Operands are written as for scp (`host:path`,
//! `user@host:path`, local paths) or as URLs; site rules turn each host into the URL of its
//! transfer server (`ferry_client::sites`); gcp tunes the copy to the path
//! (`ferry_client::path`: the sending side's congestion control, the streams of large files,
//! learnt per path), and the copy then runs as `ferry copy` does, verified by default.

use std::path::PathBuf;

use clap::Args;
use ferry_client::path::{Asked, CongestionArg};
use ferry_client::sites::{locate, Sites};
use ferry_client::{CopyOptions, FileRequest, GsiOptions, Verify};

use crate::copy::{run_tuned, CopyJob};
use crate::exit;
use crate::present::OutputArgs;

/// `gcp` / `ferry cp` flags.
#[derive(Debug, Args)]
pub(crate) struct GcpArgs {
    /// Sources then the destination: [user@]host:path (translated by the site rules), a URL
    /// (gsiftp://, ftp://, ftps://, ftpes://, file://) or a local path.
    #[arg(required = true, num_args = 2.., value_name = "SRC... DST")]
    paths: Vec<String>,
    /// Copy directories recursively.
    #[arg(short = 'r', long)]
    recursive: bool,
    /// Parallel data streams per file (scp's -p means "preserve", so gcp spells streams -n).
    /// [default: tuned to the path for files of 16 MiB and more, 1 for smaller ones]
    #[arg(short = 'n', long = "streams", value_name = "N")]
    streams: Option<u32>,
    /// Preserve modification times and modes, as scp -p does (MFMT and SITE CHMOD on a
    /// server; a server that refuses them gives a warning).
    #[arg(short = 'p', long = "preserve")]
    preserve: bool,
    /// Site rules to use instead of ~/.config/ferry/gcp.toml and /etc/ferry/gcp.toml.
    #[arg(long = "sites", value_name = "FILE")]
    sites: Option<PathBuf>,
    /// Take host:path as PROTOCOL://host/path (the rules' default protocol, gsiftp unless set),
    /// ignoring every site rule.
    #[arg(long = "no-translate")]
    no_translate: bool,
    /// Print the rules files read, and for each operand the rule it matched and the URL.
    #[arg(long)]
    explain: bool,
    /// With --explain: print the translation and copy nothing.
    #[arg(long = "dry-run", requires = "explain")]
    dry_run: bool,
    /// Do not tune: no probe, no cache, streams by file size and round trip as ferry copy.
    #[arg(long = "no-tune")]
    no_tune: bool,
    /// TCP congestion control of the sending side's data connections: auto (bbr on paths of
    /// 10 ms and more where the sender offers it), system (the sender's default), or a name.
    /// A ferry server is asked with SITE SETNETSTACK tcp:congestion=NAME. [default: auto]
    #[arg(long, value_name = "auto|system|NAME")]
    congestion: Option<CongestionArg>,
    /// Stripe over every data node of striped servers (the seed's -big): third-party copies
    /// between striped sites (SPAS to the destination, SPOR to the source) and uploads, as
    /// ferry copy --stripe.
    #[arg(long)]
    big: bool,
    /// Hand the copy to ferry's transfer service (--service, $FERRY_SERVICE) and print the job
    /// id (the seed's -rft): the service retries and resumes it whatever fails, itself included.
    /// Both ends must be transfer servers; directories are listed now, their files queued.
    #[arg(long, visible_alias = "rft")]
    queue: bool,
    /// The transfer service for --queue.
    #[arg(
        long,
        env = "FERRY_SERVICE",
        value_name = "URL",
        default_value = "https://localhost:8446"
    )]
    service: String,
    /// Do not compare checksums after each file (see ferry copy).
    #[arg(long = "no-verify")]
    no_verify: bool,
    /// Retries per file after a network failure, resuming from restart markers. [default: 3]
    #[arg(long, value_name = "N")]
    retries: Option<u32>,
    #[command(flatten)]
    output: OutputArgs,
}

/// A resolved gcp command: the copy, what the translation said, and how to tune it.
struct Resolved {
    job: CopyJob,
    explained: Vec<String>,
    /// `None`: no tuning, for this reason.
    tune: Result<Asked, &'static str>,
}

impl GcpArgs {
    fn resolve(self) -> Result<Resolved, String> {
        let files = match &self.sites {
            Some(f) if !f.exists() => return Err(format!("--sites {}: no such file", f.display())),
            Some(f) => vec![f.clone()],
            None => Sites::default_files(),
        };
        let sites = Sites::load(&files)?;
        let mut explained = vec![match sites.files_read() {
            [] => "site rules: none found".to_string(),
            read => format!("site rules from {}", read.join(", ")),
        }];
        let mut locs = Vec::new();
        for p in &self.paths {
            let (loc, why) = locate(p, &sites, !self.no_translate)?;
            explained.push(format!("{p} -> {why}"));
            locs.push(loc);
        }
        let dest = locs.pop().ok_or("need a source and a destination")?;
        let tune = match (self.no_tune, self.congestion) {
            (true, Some(CongestionArg::Named(_))) => {
                return Err("--congestion NAME and --no-tune contradict each other".into())
            }
            (true, _) => Err("--no-tune"),
            (false, _) if self.dry_run => Err("--dry-run probes nothing"),
            (false, cc) => Ok(Asked {
                streams: self.streams,
                congestion: cc.unwrap_or(CongestionArg::Auto),
            }),
        };
        let defaults = CopyOptions::default();
        let options = CopyOptions {
            request: FileRequest {
                parallelism: self.streams.unwrap_or(0),
                stripe: ferry_dtp::LayoutSpec::asked(self.big, None),
                // QUIC where the path calls for it, as `ferry copy` (said with --explain).
                transport: (!self.no_tune).then(|| ferry_client::choose::AUTO.to_string()),
                ..defaults.request.clone()
            },
            retries: self.retries.unwrap_or(defaults.retries),
            verify: (!self.no_verify).then(Verify::by_default),
            preserve: self.preserve,
            gsi: GsiOptions::from_flags(false, false, false, None)?,
            ..defaults
        };
        let job = CopyJob {
            sources: locs,
            dest,
            recursive: self.recursive,
            options,
            output: self.output.output(),
        };
        Ok(Resolved {
            job,
            explained,
            tune,
        })
    }
}

/// Runs `gcp`; returns the exit code (as `ferry copy`'s).
pub(crate) fn run(args: GcpArgs) -> u8 {
    let (explain, dry_run, queue) = (args.explain, args.dry_run, args.queue);
    let service = args.service.clone();
    let Resolved {
        mut job,
        explained,
        tune,
    } = match args.resolve() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gcp: {e}");
            return exit::USAGE;
        }
    };
    let say = |lines: &[String]| {
        if explain {
            for line in lines {
                eprintln!("gcp: {line}");
            }
        }
    };
    say(&explained);
    if let (true, crate::present::Output::Human { verbose }) = (explain, &mut job.output) {
        // The choices made per file (`--transport auto`) are part of the explanation.
        *verbose = true;
    }
    if queue {
        return crate::service::queue(&job, &service, dry_run);
    }
    let Some(rt) = crate::present::runtime() else {
        return 1;
    };
    let sessions = crate::copy::sessions_for(&job.options);
    rt.block_on(run_tuned(job, sessions, tune, &say, dry_run))
}
