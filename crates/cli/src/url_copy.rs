//! `ferry url-copy`: globus-url-copy's own spelling of the options (`-p 4 -tcp-bs 8M -vb`),
//! parsed into a raw form first and then resolved into the same copy job as `ferry copy`, so
//! existing scripts keep working with one word changed.

use ferry_client::{CopyOptions, FileRequest, Location, SyncLevel};

use crate::copy::{bytes_u32, run_job, CopyJob};
use crate::demo::parse_size;
use crate::exit;
use crate::present::Output;

/// The options as globus-url-copy spells them, before any meaning is given to them.
#[derive(Debug, Default)]
struct Raw {
    parallel: Option<String>,
    tcp_bs: Option<String>,
    block_size: Option<String>,
    length: Option<String>,
    offset: Option<String>,
    verbose_perf: bool,
    verbose: bool,
    quiet: bool,
    recurse: bool,
    create_dest: bool,
    concurrency: Option<String>,
    restart: bool,
    rst_retries: Option<String>,
    sync: bool,
    sync_level: Option<String>,
    verify_checksum: bool,
    checksum_alg: Option<String>,
    debug: bool,
    file: Option<String>,
    list: Option<String>,
    continue_on_error: bool,
    ascii: bool,
    stripe: bool,
    stripe_block_size: Option<String>,
    nodcau: bool,
    dcsafe: bool,
    dcpriv: bool,
    subject: Option<String>,
    source_subject: Option<String>,
    dest_subject: Option<String>,
    dcstack: Option<String>,
    udt: bool,
    multicast: Option<String>,
    unsupported: Vec<String>,
    urls: Vec<String>,
}

/// Options that take no value and are accepted because ferry always does what they ask
/// (pipelining, data-channel reuse) or because they are the default.
const ACCEPTED_FLAGS: &[&str] = &[
    "-pp",
    "-pipeline",
    "-fast",
    "-fast-data-channels",
    "-b",
    "-binary",
    "-ipv6",
    "-IPv6",
    "-notpt",
    "-no-third-party-transfers",
    "-allo",
    "-no-allo",
    "-g2",
    "-no-g2",
    "-nogridftp2",
];
/// Options that take a value and are accepted without effect (retry pacing, stall timeout).
const ACCEPTED_WITH_VALUE: &[&str] = &[
    "-rst-interval",
    "-rst-timeout",
    "-st",
    "-stall-timeout",
    "-ppq",
    "-pipelineq",
];
/// Per-URL credential files: ferry uses the one credential GSI tools find (X509_USER_PROXY).
const UNSUPPORTED_WITH_VALUE: &[&str] = &["-cred", "-sc", "-src-cred", "-dc", "-dst-cred"];

fn parse(args: &[String]) -> Result<Raw, String> {
    let mut raw = Raw::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match a.as_str() {
            "-p" | "-parallel" => raw.parallel = Some(value(a)?),
            "-tcp-bs" | "-tcp-buffer-size" => raw.tcp_bs = Some(value(a)?),
            "-bs" | "-block-size" => raw.block_size = Some(value(a)?),
            "-len" | "-partial-length" => raw.length = Some(value(a)?),
            "-off" | "-partial-offset" => raw.offset = Some(value(a)?),
            "-vb" | "-verbose-perf" => raw.verbose_perf = true,
            "-v" | "-verbose" => raw.verbose = true,
            "-q" | "-quiet" => raw.quiet = true,
            "-r" | "-recurse" => raw.recurse = true,
            "-cd" | "-create-dest" => raw.create_dest = true,
            "-cc" | "-concurrency" => raw.concurrency = Some(value(a)?),
            "-rst" | "-restart" => raw.restart = true,
            "-rst-retries" => raw.rst_retries = Some(value(a)?),
            "-sync" => raw.sync = true,
            "-sync-level" => raw.sync_level = Some(value(a)?),
            "-verify-checksum" | "-checksum" => raw.verify_checksum = true,
            "-checksum-alg" | "-algo" => raw.checksum_alg = Some(value(a)?),
            "-dbg" | "-debugftp" => raw.debug = true,
            "-f" | "-filename" => raw.file = Some(value(a)?),
            "-list" | "-list-url" => raw.list = Some(value(a)?),
            "-c" | "-continue-on-error" => raw.continue_on_error = true,
            "-a" | "-ascii" => raw.ascii = true,
            f if ACCEPTED_FLAGS.contains(&f) => {}
            f if ACCEPTED_WITH_VALUE.contains(&f) => {
                value(f)?;
            }
            "-stripe" => raw.stripe = true,
            "-sbs" | "-striped-block-size" => raw.stripe_block_size = Some(value(a)?),
            "-nodcau" | "-no-data-channel-authentication" => raw.nodcau = true,
            "-dcsafe" | "-data-channel-safe" => raw.dcsafe = true,
            "-dcpriv" | "-data-channel-private" => raw.dcpriv = true,
            "-s" | "-subject" => raw.subject = Some(value(a)?),
            "-ss" | "-source-subject" => raw.source_subject = Some(value(a)?),
            "-ds" | "-dest-subject" => raw.dest_subject = Some(value(a)?),
            "-dcstack" | "-data-channel-stack" => raw.dcstack = Some(value(a)?),
            "-udt" | "-u" => raw.udt = true,
            "-MC" | "-multicast" => raw.multicast = Some(value(a)?),
            f if UNSUPPORTED_WITH_VALUE.contains(&f) => {
                value(f)?;
                raw.unsupported.push(f.to_string());
            }
            f if f.starts_with('-') && f.len() > 1 => {
                return Err(format!(
                    "unknown option {f} (ferry url-copy -help lists what works)"
                ))
            }
            url => raw.urls.push(url.to_string()),
        }
    }
    Ok(raw)
}

fn num<T: std::str::FromStr>(v: &Option<String>, name: &str) -> Result<Option<T>, String> {
    v.as_deref()
        .map(|s| {
            s.parse::<T>()
                .map_err(|_| format!("{name}: '{s}' is not a number"))
        })
        .transpose()
}

fn size(v: &Option<String>, name: &str) -> Result<Option<u64>, String> {
    v.as_deref()
        .map(|s| parse_size(s).map_err(|e| format!("{name}: {e}")))
        .transpose()
}

/// `-dcstack STACK`: the data channels' net stack (`quic`, `quic,gsi`), checked against this
/// build's transports. As globus-url-copy, it is sent only to gsiftp:// servers: with other
/// remote URLs it is ignored, and said so.
///
/// `-udt` is `-dcstack udt` (the gsi layer goes above it when DCAU is on) and, as in
/// globus-url-copy, only when DCAU is on: with `-nodcau` it is ignored, and said so.
fn dcstack(raw: &Raw) -> Result<Option<String>, String> {
    let udt = raw.udt && raw.dcstack.is_none();
    if udt && raw.nodcau {
        eprintln!("ferry url-copy: -udt ignored: as in globus-url-copy, it needs data channel authentication (drop -nodcau, or use -dcstack udt)");
        return Ok(None);
    }
    let Some(text) = raw.dcstack.as_deref().or(udt.then_some("udt")) else {
        return Ok(None);
    };
    let stack = ferry_proto::stack::StackSpec::parse(text).map_err(|e| format!("-dcstack: {e}"))?;
    let transports = ferry_net::Transports::standard();
    let (transport, options) = transports
        .transport_of(&stack)
        .map_err(|e| format!("-dcstack {text}: {e}"))?;
    // Plain TCP (with or without the gsi layer DCAU adds anyway) is every server's default.
    if transport.name() == "tcp" && options.is_empty() {
        return Ok(None);
    }
    let remote: Vec<&String> = raw
        .urls
        .iter()
        .filter(|u| u.contains("://") && !u.starts_with("file:"))
        .collect();
    if remote.is_empty() || !remote.iter().all(|u| u.starts_with("gsiftp://")) {
        let flag = if udt {
            "-udt".to_string()
        } else {
            format!("-dcstack {text}")
        };
        eprintln!("ferry url-copy: {flag} ignored: as in globus-url-copy, it applies to gsiftp:// URLs only (ferry copy --transport takes any)");
        return Ok(None);
    }
    Ok(Some(stack.to_string()))
}

/// `-MC FILE`: the destination (the file's first line when the command line names only a
/// source) and the disk stack that makes it forward to the other lines' servers, as
/// globus-url-copy writes it.
fn multicast(raw: &Raw) -> Result<Option<(String, String)>, String> {
    let Some(path) = &raw.multicast else {
        return Ok(None);
    };
    if raw.file.is_some() {
        return Err("-MC cannot be combined with -f".into());
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("-MC {path}: {e}"))?;
    let subject = raw.dest_subject.as_deref().or(raw.subject.as_deref());
    let dest = match raw.urls.as_slice() {
        [_] => None,
        [_, dest] => Some(dest.as_str()),
        _ => {
            return Err("-MC needs a source URL, and optionally the first destination's URL".into())
        }
    };
    ferry_proto::multicast::mc_first_hop(&text, subject, dest)
        .map(Some)
        .map_err(|e| format!("-MC {path}: {e}"))
}

/// The copy jobs a raw command line asks for (one per URL pair).
fn resolve(raw: &Raw) -> Result<Vec<CopyJob>, String> {
    if !raw.unsupported.is_empty() {
        return Err(format!(
            "{} not supported: ferry uses the credential in X509_USER_PROXY (or /tmp/x509up_u<uid>) for every server",
            raw.unsupported.join(" ")
        ));
    }
    if raw.ascii {
        return Err("-ascii is not supported: ferry copies bytes as they are".into());
    }
    let defaults = CopyOptions::default();
    let sync = match (raw.sync, num::<u32>(&raw.sync_level, "-sync-level")?) {
        (false, _) => SyncLevel::Off,
        (true, Some(0)) => SyncLevel::Exists,
        (true, Some(3)) => SyncLevel::Checksum,
        (true, _) => SyncLevel::Size,
    };
    let options = CopyOptions {
        request: FileRequest {
            parallelism: num(&raw.parallel, "-p")?.unwrap_or(0),
            tcp_buffer: bytes_u32(size(&raw.tcp_bs, "-tcp-bs")?, "-tcp-bs")?,
            block_size: bytes_u32(size(&raw.block_size, "-bs")?, "-bs")?
                .map(|b| b.max(4096))
                .or(defaults.request.block_size),
            offset: size(&raw.offset, "-off")?.unwrap_or(0),
            length: size(&raw.length, "-len")?,
            stripe: ferry_dtp::LayoutSpec::asked(raw.stripe, size(&raw.stripe_block_size, "-sbs")?),
            transport: dcstack(raw)?,
            ..defaults.request.clone()
        },
        create_dirs: raw.create_dest,
        concurrency: num(&raw.concurrency, "-cc")?.unwrap_or(defaults.concurrency),
        // globus-url-copy retries only with -restart (default 5 retries).
        retries: if raw.restart {
            num(&raw.rst_retries, "-rst-retries")?.unwrap_or(5)
        } else {
            0
        },
        // As globus-url-copy: verified only on request, MD5 unless -checksum-alg names another.
        verify: if raw.verify_checksum {
            let alg = ferry_client::checksum_algorithm(raw.checksum_alg.as_deref());
            Some(ferry_client::Verify::required(
                alg.map_err(|e| e.to_string())?,
            ))
        } else {
            None
        },
        sync,
        gsi: ferry_client::GsiOptions::from_flags(
            raw.nodcau,
            raw.dcsafe,
            raw.dcpriv,
            raw.subject.clone(),
        )?,
        ..defaults
    };
    let multicast = multicast(raw)?;
    if multicast.is_some() && options.retries > 0 {
        // A retry would send REST, which no forwarding node takes (its children would miss
        // the skipped bytes).
        eprintln!("ferry url-copy: -restart ignored with -MC: a forwarding transfer cannot resume (ferry copy --to-many sends the file again to the destinations that failed)");
    }
    let options = CopyOptions {
        request: FileRequest {
            disk_stack: multicast.as_ref().map(|(_, stack)| stack.clone()),
            ..options.request
        },
        retries: if multicast.is_some() {
            0
        } else {
            options.retries
        },
        ..options
    };
    let output = if raw.quiet {
        Output::Quiet
    } else {
        Output::Human {
            verbose: raw.verbose || raw.verbose_perf,
        }
    };
    let pairs: Vec<(String, String)> = match (&raw.file, multicast) {
        (Some(f), _) => read_pairs(f)?,
        (None, Some((dest, _))) => vec![(raw.urls[0].clone(), dest)],
        (None, None) => match raw.urls.as_slice() {
            [s, d] => vec![(s.clone(), d.clone())],
            _ => {
                return Err(
                    "need exactly one source URL and one destination URL (or -f FILE)".into(),
                )
            }
        },
    };
    pairs
        .into_iter()
        .map(|(s, d)| {
            let src = Location::parse(&s).map_err(|e| e.to_string())?;
            let dest = Location::parse(&d).map_err(|e| e.to_string())?;
            let recursive = raw.recurse && src.names_dir();
            let mut options = options.clone();
            for (loc, subject) in [(&src, &raw.source_subject), (&dest, &raw.dest_subject)] {
                if let (Location::Remote(url), Some(subject)) = (loc, subject) {
                    options.gsi.subjects.push((url.clone(), subject.clone()));
                }
            }
            Ok(CopyJob {
                sources: vec![src],
                dest,
                recursive,
                options,
                output,
            })
        })
        .collect()
}

/// `-f FILE`: one `src dst` pair per line, `#` comments, URLs with spaces in double quotes.
fn read_pairs(path: &str) -> Result<Vec<(String, String)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("-f {path}: {e}"))?;
    let listed = ferry_client::parse_transfer_list(&text).map_err(|e| format!("-f {path}: {e}"))?;
    listed
        .into_iter()
        .map(|l| match l.checksum {
            None => Ok((l.source, l.dest)),
            Some(_) => Err(format!(
                "-f {path}:{}: expected 'source destination'",
                l.line
            )),
        })
        .collect()
}

const HELP: &str = "ferry url-copy: globus-url-copy's options, run by ferry

usage: ferry url-copy [options] SOURCE_URL DEST_URL
       ferry url-copy [options] -f FILE
       ferry url-copy -list URL

  -p N, -parallel N          parallel streams (default: chosen by file size)
  -tcp-bs SIZE               TCP buffer size (e.g. 8M)
  -dcstack STACK             data channel stack on gsiftp:// servers (udt, quic, quic,gsi)
  -udt, -u                   data channels over UDT on gsiftp:// servers (with DCAU, as Globus)
  -bs SIZE                   MODE E block size
  -off N, -len N             partial transfer
  -r, -cd                    recursive; create destination directories
  -cc N                      files in flight at once (default 4)
  -restart, -rst-retries N   retry interrupted files from their restart markers (default 5 retries)
  -sync [-sync-level 0-3]    skip files already at the destination
  -verify-checksum, -checksum-alg ALG
  -f FILE                    'source destination' pairs, one per line
  -MC FILE, -multicast FILE  one file to many servers: FILE lists destination URLs (url?opts),
                             the first one forwards to the others (gridftp_multicast)
  -list URL                  list a directory
  -vb, -v, -q, -dbg          progress, file names, quiet, control-channel debug log
  -pp, -fast                 accepted: ferry always pipelines and reuses data channels
";

/// Runs `ferry url-copy ARGS...`.
pub(crate) fn run(args: Vec<String>) -> u8 {
    if args
        .iter()
        .any(|a| a == "-help" || a == "-usage" || a == "--help" || a == "-h")
    {
        print!("{HELP}");
        return exit::OK;
    }
    let raw = match parse(&args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ferry url-copy: {e}");
            return exit::USAGE;
        }
    };
    if raw.debug {
        std::env::set_var("RUST_LOG", "ferry_client=debug");
    }
    if let Some(url) = &raw.list {
        return crate::remote::list_url(url);
    }
    let jobs = match resolve(&raw) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("ferry url-copy: {e}");
            return exit::USAGE;
        }
    };
    let mut worst = exit::OK;
    for job in jobs {
        let code = run_job(job);
        if code != exit::OK {
            worst = code;
            if !raw.continue_on_error {
                break;
            }
        }
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn globus_spelling_resolves_to_the_same_options_as_ferry_copy() {
        let raw = parse(&args("-p 4 -tcp-bs 8M -bs 1M -vb -r -cd -cc 8 -pp -fast -restart -rst-retries 7 -sync -sync-level 3 -verify-checksum -checksum-alg ADLER32 ftp://h/a/ /tmp/b/")).unwrap();
        let jobs = resolve(&raw).unwrap();
        let o = &jobs[0].options;
        assert_eq!(o.request.parallelism, 4);
        assert_eq!(o.request.tcp_buffer, Some(8 << 20));
        assert_eq!(o.request.block_size, Some(1 << 20));
        assert_eq!(
            (o.concurrency, o.retries, o.create_dirs, o.sync),
            (8, 7, true, SyncLevel::Checksum)
        );
        assert!(jobs[0].recursive);
        assert_eq!(
            o.verify.as_ref().map(|v| v.algorithm.name()),
            Some("ADLER32")
        );
    }

    #[test]
    fn dcstack_picks_the_transport_for_gsiftp_urls_only_and_unknown_drivers_are_refused() {
        let transport = |line: &str| -> Result<Option<String>, String> {
            Ok(resolve(&parse(&args(line))?)?[0]
                .options
                .request
                .transport
                .clone())
        };
        assert_eq!(
            transport("-dcstack quic,gsi gsiftp://h/a /tmp/b").unwrap(),
            Some("quic,gsi".into())
        );
        assert_eq!(
            transport("-data-channel-stack quic gsiftp://h/a gsiftp://g/b").unwrap(),
            Some("quic".into())
        );
        assert_eq!(
            transport("-dcstack tcp,gsi gsiftp://h/a /tmp/b").unwrap(),
            None
        );
        // As globus-url-copy: not sent to ftp:// servers.
        assert_eq!(transport("-dcstack quic ftp://h/a /tmp/b").unwrap(), None);
        assert_eq!(
            transport("-dcstack udt,gsi gsiftp://h/a /tmp/b").unwrap(),
            Some("udt,gsi".into())
        );
        assert_eq!(
            transport("-udt gsiftp://h/a /tmp/b").unwrap(),
            Some("udt".into())
        );
        assert_eq!(
            transport("-u gsiftp://h/a gsiftp://g/b").unwrap(),
            Some("udt".into())
        );
        assert_eq!(transport("-udt ftp://h/a /tmp/b").unwrap(), None);
        assert_eq!(transport("-udt -nodcau gsiftp://h/a /tmp/b").unwrap(), None);
        let e = transport("-dcstack rate,gsi gsiftp://h/a /tmp/b").unwrap_err();
        assert!(e.contains("rate driver not available"), "{e}");
    }

    #[test]
    fn no_restart_means_no_retries_and_bad_options_are_refused() {
        let jobs = resolve(&parse(&args("-off 10 -len 20 ftp://h/a /tmp/b")).unwrap()).unwrap();
        assert_eq!(jobs[0].options.retries, 0);
        assert_eq!(
            (
                jobs[0].options.request.offset,
                jobs[0].options.request.length
            ),
            (10, Some(20))
        );
        assert!(parse(&args("-bogus x y")).is_err());
        assert!(parse(&args("-p")).is_err());
        assert!(resolve(&parse(&args("-nodcau -dcpriv gsiftp://h/a /tmp/b")).unwrap()).is_err());
        assert!(resolve(&parse(&args("-cred /tmp/x gsiftp://h/a /tmp/b")).unwrap()).is_err());
        let jobs =
            resolve(&parse(&args("-dcpriv -ds /O=Grid/CN=b gsiftp://a/x gsiftp://b/y")).unwrap())
                .unwrap();
        let gsi = &jobs[0].options.gsi;
        assert_eq!(
            (gsi.dcau, gsi.prot),
            (true, ferry_proto::command::Protection::Private)
        );
        assert_eq!(gsi.subjects.len(), 1);
        assert_eq!(gsi.subjects[0].0.host, "b");
        assert!(resolve(&parse(&args("ftp://h/a")).unwrap()).is_err());
    }
}
