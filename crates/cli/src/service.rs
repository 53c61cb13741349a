//! `ferry service` (the transfer service) and its client commands `ferry submit`, `ferry jobs`,
//! `ferry job` and `ferry cancel`. Argument parsing and presentation only: the work lives in
//! `ferry-service`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use ferry_gsi::credential::process_env;
use ferry_gsi::{Credential, TrustStore};
use ferry_service::client::{Method, ServiceClient};
use ferry_service::{Config, Defaults, Limits, ServiceError};
use serde_json::{json, Value};

use crate::exit;

/// `println!` that ends the program quietly when stdout is closed (`ferry jobs | head`).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(0);
        }
    }};
}

/// `ferry service`.
#[derive(Debug, Args)]
pub(crate) struct ServiceArgs {
    /// Address and port for HTTPS (FTS3's port is 8446).
    #[arg(long, default_value = "0.0.0.0:8446")]
    listen: SocketAddr,
    /// The queue: an SQLite file (created, mode 0600: it holds delegated proxies), or a
    /// postgres://USER:PASSWORD@HOST/DB URL that several service hosts share.
    #[arg(
        long,
        value_name = "FILE|URL",
        default_value = "/var/lib/ferry/service.db",
        env = "FERRY_DATABASE",
        hide_env_values = true
    )]
    database: String,
    /// This host's name in a shared queue (default: HOSTNAME:PORT); keep it the same across
    /// restarts so the host takes back its own transfers at once.
    #[arg(long, value_name = "NAME")]
    host_id: Option<String>,
    /// The service's certificate.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/etc/grid-security/hostcert.pem"
    )]
    host_cert: PathBuf,
    /// Its key.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/etc/grid-security/hostkey.pem"
    )]
    host_key: PathBuf,
    /// Trusted CAs (default: $X509_CERT_DIR, else /etc/grid-security/certificates).
    #[arg(long, value_name = "DIR")]
    cert_dir: Option<PathBuf>,
    /// Bearer tokens: lines of `TOKEN IDENTITY` (a second way in besides certificates).
    #[arg(long, value_name = "FILE")]
    tokens: Option<PathBuf>,
    /// A DN (or token identity) that sees and cancels every user's jobs; repeat for more.
    #[arg(long, value_name = "DN")]
    admin: Vec<String>,
    /// Transfers at once, in all.
    #[arg(long, default_value_t = Limits::default().max_active)]
    max_active: usize,
    /// Transfers each link (source server → destination server) starts with and keeps at
    /// least.
    #[arg(long, default_value_t = Limits::default().link_min)]
    link_min: usize,
    /// Transfers a link may reach when the optimizer measures that more pay.
    #[arg(long, default_value_t = Limits::default().link_max)]
    link_max: usize,
    /// Transfers at once touching one server, over all its links.
    #[arg(long, default_value_t = Limits::default().endpoint_max)]
    endpoint_max: usize,
    /// Seconds between the optimizer's judgements of each link.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    optimizer_interval: u64,
    /// Seconds without a heartbeat after which a host sharing the queue is taken for dead and
    /// its transfers resume on the others.
    #[arg(long, value_name = "SECONDS", default_value_t = ferry_service::db::HOST_TIMEOUT as u64)]
    host_timeout: u64,
    /// Serve Prometheus /metrics and /healthz on this address (plain HTTP; keep it private).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Retries of a transient failure when a job does not say.
    #[arg(long, default_value_t = Defaults::default().retry)]
    retry: i64,
    /// Seconds between retries when a job does not say.
    #[arg(long, default_value_t = Defaults::default().retry_delay)]
    retry_delay: i64,
    /// Let jobs name files on this host (paths, file:// URLs), read and written as the
    /// service's own user: only where every user of the service may do that.
    #[arg(long)]
    allow_local: bool,
}

/// Where the service is and how to prove who you are.
#[derive(Debug, Args, Clone)]
pub(crate) struct Conn {
    /// The transfer service.
    #[arg(long, env = "FERRY_SERVICE", default_value = "https://localhost:8446")]
    service: String,
    /// A bearer token instead of your proxy.
    #[arg(long, env = "FERRY_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `ferry submit`.
#[derive(Debug, Args)]
pub(crate) struct SubmitArgs {
    /// Source URL (with DEST), or nothing with --file.
    src: Option<String>,
    /// Destination URL.
    dst: Option<String>,
    /// Many files: lines of `SRC DST [CHECKSUM]` (FTS3's bulk format; # comments).
    #[arg(long, short = 'f', value_name = "FILE")]
    file: Option<PathBuf>,
    /// Retries of a transient failure (default: the service's).
    #[arg(long)]
    retry: Option<u32>,
    /// Seconds between retries.
    #[arg(long)]
    retry_delay: Option<u32>,
    /// 1 (lowest) to 5.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=5))]
    priority: Option<u8>,
    /// Replace destinations that exist.
    #[arg(long)]
    overwrite: bool,
    /// Checksum for every file: ALG, or ALG:VALUE that the files must have.
    #[arg(long, value_name = "ALG[:VALUE]")]
    checksum: Option<String>,
    /// Which ends to verify: none, source, target or both (default: ADLER32 where both ends
    /// can answer).
    #[arg(long, value_name = "MODE")]
    verify: Option<String>,
    /// Parallel streams per file.
    #[arg(long)]
    streams: Option<u32>,
    /// TCP buffer size of the data connections, in bytes.
    #[arg(long, value_name = "BYTES")]
    tcp_bs: Option<u32>,
    /// Your own job id: submitting the same job with it again is harmless.
    #[arg(long)]
    job_id: Option<String>,
    /// Do not delegate a proxy (the service must have one of yours already).
    #[arg(long)]
    no_delegate: bool,
    /// Wait until the job ends, showing its files' progress; the exit code says how it ended.
    #[arg(long)]
    wait: bool,
    #[command(flatten)]
    conn: Conn,
}

/// `ferry jobs`.
#[derive(Debug, Args)]
pub(crate) struct JobsArgs {
    /// States to list, comma-separated (default: SUBMITTED and ACTIVE).
    #[arg(long)]
    state: Option<String>,
    /// Every state.
    #[arg(long)]
    all: bool,
    /// Another user's jobs (admins).
    #[arg(long, value_name = "DN")]
    user: Option<String>,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 100)]
    limit: u32,
    #[command(flatten)]
    conn: Conn,
}

/// `ferry job`.
#[derive(Debug, Args)]
pub(crate) struct JobArgs {
    /// The job id.
    id: String,
    /// Show each file's attempts and their errors.
    #[arg(long)]
    attempts: bool,
    #[command(flatten)]
    conn: Conn,
}

/// `ferry cancel`.
#[derive(Debug, Args)]
pub(crate) struct CancelArgs {
    /// Job ids.
    #[arg(required = true)]
    ids: Vec<String>,
    #[command(flatten)]
    conn: Conn,
}

/// Runs `ferry service` until SIGINT or SIGTERM.
pub(crate) fn serve(args: ServiceArgs) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    let host_id = args.host_id.unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "localhost".into());
        format!("{host}:{}", args.listen.port())
    });
    let config = Config {
        listen: args.listen,
        database: args.database,
        host_id,
        host_cert: args.host_cert,
        host_key: args.host_key,
        cert_dir: args
            .cert_dir
            .unwrap_or_else(|| TrustStore::default_dir(&process_env)),
        token_file: args.tokens,
        admins: args.admin,
        limits: Limits {
            max_active: args.max_active.max(1),
            link_min: args.link_min.max(1),
            link_max: args.link_max.max(args.link_min.max(1)),
            endpoint_max: args.endpoint_max.max(1),
            interval: Duration::from_secs(args.optimizer_interval.max(1)),
            host_timeout: Duration::from_secs(args.host_timeout.max(2)),
        },
        defaults: Defaults {
            retry: args.retry.clamp(0, 100),
            retry_delay: args.retry_delay.clamp(0, 86_400),
        },
        allow_local: args.allow_local,
        metrics: args.metrics,
    };
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let service = ferry_service::Service::bind(&config).await?;
        let addr = service.local_addr()?;
        if let Some(m) = service.metrics_addr() {
            eprintln!("ferry service: metrics on http://{m}/metrics");
        }
        tracing::info!(%addr, host = %config.host_id, "transfer service listening (https)");
        eprintln!("ferry service: listening on https://{addr}");
        let stop = ferry_client::CancellationToken::new();
        let on_signal = stop.clone();
        tokio::spawn(async move {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(_) => return,
                };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            on_signal.cancel();
        });
        service.serve(stop).await?;
        Ok::<_, anyhow::Error>(())
    })
}

fn client(conn: &Conn) -> Result<ServiceClient, ServiceError> {
    let trust = TrustStore::load(&TrustStore::default_dir(&process_env))
        .map_err(|e| ServiceError::Config(format!("the trusted CAs: {e}")))?;
    let credential = if conn.token.is_some() {
        None
    } else {
        let (c, _) = Credential::find_user(&process_env, None)
            .map_err(|e| ServiceError::Unauthorized(format!("{e}; or give --token")))?;
        Some(c)
    };
    ServiceClient::new(&conn.service, &trust, credential, conn.token.clone())
}

fn code_of(e: &ServiceError) -> u8 {
    match e {
        ServiceError::BadRequest(_)
        | ServiceError::Config(_)
        | ServiceError::Conflict(_)
        | ServiceError::TooLarge(_) => exit::USAGE,
        ServiceError::Unauthorized(_) | ServiceError::Forbidden(_) | ServiceError::Tls(_) => 3,
        ServiceError::NotFound(_) => 4,
        ServiceError::Http(_) => 5,
        ServiceError::Database(_) => 1,
    }
}

fn run_client(what: &str, f: impl std::future::Future<Output = Result<u8, ServiceError>>) -> u8 {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ferry {what}: {e}");
            return 1;
        }
    };
    match rt.block_on(f) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ferry {what}: {e}");
            code_of(&e)
        }
    }
}

/// The body of a submission from the command line.
pub(crate) fn submission(args: &SubmitArgs) -> Result<Value, ServiceError> {
    let mut files = Vec::new();
    let file_entry = |src: &str, dst: &str, checksum: Option<&str>| json!({"sources": [src], "destinations": [dst], "checksum": checksum});
    match (&args.src, &args.dst, &args.file) {
        (Some(s), Some(d), None) => files.push(file_entry(s, d, args.checksum.as_deref())),
        (None, None, Some(path)) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                ServiceError::Config(format!("cannot read {}: {e}", path.display()))
            })?;
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let parts: Vec<&str> = line.split_whitespace().collect();
                match parts.as_slice() {
                    [s, d] => files.push(file_entry(s, d, args.checksum.as_deref())),
                    [s, d, c] => files.push(file_entry(s, d, Some(c))),
                    _ => {
                        return Err(ServiceError::Config(format!(
                            "{}:{}: a line is SRC DST [CHECKSUM]",
                            path.display(),
                            n + 1
                        )))
                    }
                }
            }
            if files.is_empty() {
                return Err(ServiceError::Config(format!(
                    "{} lists no files",
                    path.display()
                )));
            }
        }
        _ => return Err(ServiceError::Config("give SRC DST, or --file LIST".into())),
    }
    Ok(json!({
        "files": files,
        "params": {
            // FTS3 reads 0 as "the service's default" and a negative number as none.
            "retry": args.retry.map(|n| if n == 0 { -1 } else { i64::from(n) }),
            "retry_delay": args.retry_delay,
            "priority": args.priority,
            "overwrite": args.overwrite,
            "verify_checksum": args.verify,
            "nostreams": args.streams,
            "buffer_size": args.tcp_bs,
            "job_id": args.job_id,
        }
    }))
}

/// `ferry submit`.
pub(crate) fn submit(args: SubmitArgs) -> u8 {
    run_client("submit", async {
        let body = submission(&args)?;
        let c = client(&args.conn)?;
        if !args.no_delegate && c.delegate_if_needed().await? && !args.conn.json {
            eprintln!("ferry submit: delegated a proxy to the service");
        }
        let answer = c.json(Method::POST, "/jobs", Some(&body)).await?;
        let id = answer["job_id"].as_str().unwrap_or_default().to_owned();
        if args.conn.json && !args.wait {
            out!("{answer}");
        } else {
            out!("{id}");
        }
        if !args.wait {
            return Ok(exit::OK);
        }
        wait(&c, &id, args.conn.json).await
    })
}

/// Polls a job until it ends; its end state is the exit code (0 only for FINISHED). The job
/// is asked every 50 ms for its first 5 s, then every 0.25 s; its files (for the progress
/// line) every 2 s and at the end, so that a job of many files is not slowed by being watched.
async fn wait(c: &ServiceClient, id: &str, json_out: bool) -> Result<u8, ServiceError> {
    let started = std::time::Instant::now();
    let mut last = String::new();
    let mut files_asked: Option<std::time::Instant> = None;
    loop {
        let job = c.json(Method::GET, &format!("/jobs/{id}"), None).await?;
        let state = job["job_state"].as_str().unwrap_or("?").to_owned();
        let done = !matches!(state.as_str(), "SUBMITTED" | "ACTIVE");
        let due = files_asked.is_none_or(|t| t.elapsed() >= Duration::from_secs(2));
        if done || (due && !json_out) {
            files_asked = Some(std::time::Instant::now());
            let files = c
                .json(Method::GET, &format!("/jobs/{id}/files"), None)
                .await?;
            let line = progress_line(&state, &files);
            if line != last && !json_out {
                eprintln!("{line}");
                last = line;
            }
            if done {
                if json_out {
                    out!("{}", json!({"job": job, "files": files}));
                } else if let Some(r) = job["reason"].as_str() {
                    eprintln!("{id}: {state}: {r}");
                }
                return Ok(if state == "FINISHED" { exit::OK } else { 1 });
            }
        }
        let pause = if started.elapsed() < Duration::from_secs(5) {
            50
        } else {
            250
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

fn progress_line(state: &str, files: &Value) -> String {
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    let mut bytes = 0i64;
    for f in files.as_array().into_iter().flatten() {
        *counts
            .entry(f["file_state"].as_str().unwrap_or("?"))
            .or_default() += 1;
        bytes += f["transferred"].as_i64().unwrap_or(0);
    }
    let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    format!(
        "{state}: {} ({})",
        parts.join(", "),
        crate::present::human_bytes(bytes.max(0) as u64)
    )
}

/// `ferry jobs`.
pub(crate) fn jobs(args: JobsArgs) -> u8 {
    run_client("jobs", async {
        let c = client(&args.conn)?;
        let mut q = vec![format!("limit={}", args.limit)];
        if args.all {
            q.push("state_in=SUBMITTED,ACTIVE,FINISHED,FINISHEDDIRTY,FAILED,CANCELED".into());
        } else if let Some(s) = &args.state {
            q.push(format!("state_in={}", url_escape(s)));
        }
        if let Some(u) = &args.user {
            q.push(format!("user_dn={}", url_escape(u)));
        }
        let list = c
            .json(Method::GET, &format!("/jobs?{}", q.join("&")), None)
            .await?;
        if args.conn.json {
            out!("{list}");
            return Ok(exit::OK);
        }
        let jobs = list.as_array().cloned().unwrap_or_default();
        if jobs.is_empty() {
            eprintln!("no jobs");
        }
        for j in jobs {
            out!(
                "{:<36}  {:<13}  {}  {}",
                j["job_id"].as_str().unwrap_or(""),
                j["job_state"].as_str().unwrap_or(""),
                j["submit_time"].as_str().unwrap_or(""),
                j["reason"].as_str().unwrap_or("")
            );
        }
        Ok(exit::OK)
    })
}

/// `ferry job`.
pub(crate) fn job(args: JobArgs) -> u8 {
    run_client("job", async {
        let c = client(&args.conn)?;
        let id = &args.id;
        let job = c
            .json(Method::GET, &format!("/jobs/{}", url_escape(id)), None)
            .await?;
        let files = c
            .json(
                Method::GET,
                &format!("/jobs/{}/files", url_escape(id)),
                None,
            )
            .await?;
        let mut attempts = Vec::new();
        if args.attempts {
            for f in files.as_array().into_iter().flatten() {
                let fid = f["file_id"].as_i64().unwrap_or(0);
                attempts.push(
                    c.json(
                        Method::GET,
                        &format!("/jobs/{}/files/{fid}/retries", url_escape(id)),
                        None,
                    )
                    .await?,
                );
            }
        }
        if args.conn.json {
            let mut out = json!({"job": job, "files": files});
            if args.attempts {
                out["attempts"] = Value::Array(attempts);
            }
            out!("{out}");
            return Ok(exit::OK);
        }
        out!(
            "{}  {}  submitted {}  by {}",
            job["job_id"].as_str().unwrap_or(""),
            job["job_state"].as_str().unwrap_or(""),
            job["submit_time"].as_str().unwrap_or(""),
            job["user_dn"].as_str().unwrap_or("")
        );
        if let Some(r) = job["reason"].as_str() {
            out!("  {r}");
        }
        if let Some(ig) = job["ignored_fields"].as_array().filter(|a| !a.is_empty()) {
            let names: Vec<&str> = ig.iter().filter_map(Value::as_str).collect();
            out!("  accepted but not acted on: {}", names.join(", "));
        }
        for (i, f) in files.as_array().into_iter().flatten().enumerate() {
            out!(
                "  {:<9} {} → {}  {}{}",
                f["file_state"].as_str().unwrap_or(""),
                f["source_surl"].as_str().unwrap_or(""),
                f["dest_surl"].as_str().unwrap_or(""),
                f["transferred"]
                    .as_i64()
                    .map(|b| crate::present::human_bytes(b.max(0) as u64))
                    .unwrap_or_default(),
                f["retry"]
                    .as_i64()
                    .filter(|&n| n > 0)
                    .map(|n| format!(", {n} retries"))
                    .unwrap_or_default(),
            );
            if let Some(r) = f["reason"].as_str() {
                out!("            {r}");
            }
            if let Some(list) = attempts.get(i).and_then(Value::as_array) {
                for a in list {
                    out!(
                        "            attempt {}: resumed at {} bytes{}",
                        a["attempt"],
                        a["resumed_bytes"],
                        a["error"]
                            .as_str()
                            .map(|e| format!(": {e}"))
                            .unwrap_or_default()
                    );
                }
            }
        }
        Ok(exit::OK)
    })
}

/// `ferry cancel`.
pub(crate) fn cancel(args: CancelArgs) -> u8 {
    run_client("cancel", async {
        let c = client(&args.conn)?;
        let ids: Vec<String> = args.ids.iter().map(|s| url_escape(s)).collect();
        let answer = c
            .json(Method::DELETE, &format!("/jobs/{}", ids.join(",")), None)
            .await?;
        if args.conn.json {
            out!("{answer}");
            return Ok(exit::OK);
        }
        let list = match answer {
            Value::Array(a) => a,
            one => vec![one],
        };
        for j in list {
            out!(
                "{}  {}",
                j["job_id"].as_str().unwrap_or(""),
                j["job_state"].as_str().unwrap_or("")
            );
        }
        Ok(exit::OK)
    })
}

/// Percent-escapes what a path segment or query value may not hold.
fn url_escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~,".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `gcp --queue`: plans the copy here (listing directories with the user's own logins, making
/// the destination's directories) and submits its files as one job, delegating as needed.
pub(crate) fn queue(job: &crate::copy::CopyJob, service: &str, dry_run: bool) -> u8 {
    use ferry_client::{Location, Sessions};
    for loc in job.sources.iter().chain(std::iter::once(&job.dest)) {
        if let Location::Local(p) = loc {
            eprintln!(
                "gcp: --queue: {} is on this host; the transfer service copies between transfer servers, so give a host:path (or URL) for both ends",
                p.display()
            );
            return exit::USAGE;
        }
    }
    let Some(rt) = crate::copy::runtime() else {
        return 1;
    };
    rt.block_on(async {
        let gsi = std::sync::Arc::new(ferry_client::GsiSetup::new(job.options.gsi.clone()));
        let mut sessions = Sessions::with_gsi(gsi);
        let plan = match ferry_client::plan(&job.sources, &job.dest, job.recursive, &mut sessions).await {
            Ok(p) => p,
            Err(e) => return crate::copy::report(&e),
        };
        let url = |l: &Location| match l {
            Location::Remote(r) => r.to_url(),
            Location::Local(p) => p.display().to_string(),
        };
        if dry_run {
            for j in &plan.jobs {
                out!("{} -> {}", url(&j.src), url(&j.dst));
            }
            return exit::OK;
        }
        for dir in &plan.dirs {
            if let Location::Remote(r) = dir {
                let made = async { sessions.get(r).await?.mkdir_all(&r.path).await };
                if let Err(e) = made.await {
                    return crate::copy::report(&e);
                }
            }
        }
        let files: Vec<Value> = plan
            .jobs
            .iter()
            .map(|j| json!({"sources": [url(&j.src)], "destinations": [url(&j.dst)], "filesize": j.size}))
            .collect();
        if files.is_empty() {
            eprintln!("gcp: nothing to queue");
            return exit::OK;
        }
        let verify = match &job.options.verify {
            None => Some("none"),
            Some(v) if v.required => Some("both"),
            Some(_) => None,
        };
        let body = json!({
            "files": files,
            "params": {
                "retry": if job.options.retries == 0 { -1 } else { i64::from(job.options.retries) },
                "retry_delay": job.options.retry_wait.as_secs().max(1),
                "overwrite": true,
                "verify_checksum": verify,
                "nostreams": (job.options.request.parallelism > 0).then_some(job.options.request.parallelism),
            }
        });
        let conn = Conn {
            service: service.to_owned(),
            token: std::env::var("FERRY_TOKEN").ok().filter(|t| !t.is_empty()),
            json: false,
        };
        let submitted = async {
            let c = client(&conn)?;
            c.delegate_if_needed().await?;
            c.json(Method::POST, "/jobs", Some(&body)).await
        };
        match submitted.await {
            Ok(answer) => {
                out!("{}", answer["job_id"].as_str().unwrap_or_default());
                eprintln!(
                    "gcp: queued {} file(s) on {service}; follow with: ferry job ID",
                    plan.jobs.len()
                );
                exit::OK
            }
            Err(e) => {
                eprintln!("gcp: --queue: {e}");
                code_of(&e)
            }
        }
    })
}
