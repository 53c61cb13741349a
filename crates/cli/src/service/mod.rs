//! `ferry service` (the transfer service) and its client commands `ferry submit`, `ferry jobs`,
//! `ferry job` and `ferry cancel`. Argument parsing and presentation only: the work lives in
//! `ferry-service`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use ferry_client::path::PathCache;
use ferry_gsi::credential::process_env;
use ferry_gsi::TrustStore;
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

mod commands;
mod queue;

pub(crate) use commands::{cancel, job, jobs, submit};
pub(crate) use queue::queue;

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
    /// JSON Web Tokens (WLCG, SciTokens) of the issuers this TOML file's `[[tokens.issuer]]`
    /// tables name may call the API too: `ferry.toml` itself will do (its other tables are
    /// not read here).
    #[arg(long, value_name = "FILE")]
    token_issuers: Option<PathBuf>,
    /// A DN (or token identity) that sees and cancels every user's jobs; repeat for more.
    #[arg(long, value_name = "DN")]
    admin: Vec<String>,
    /// Transfers at once on this host, in all.
    #[arg(long, default_value_t = Limits::default().max_active)]
    max_active: usize,
    /// Transfers each link (source server → destination server) starts with and keeps at
    /// least.
    #[arg(long, default_value_t = Limits::default().link_min)]
    link_min: usize,
    /// Transfers a link may reach when the optimizer measures that more pay (over all hosts
    /// of a shared queue).
    #[arg(long, default_value_t = Limits::default().link_max)]
    link_max: usize,
    /// Transfers at once touching one server, over all its links (and all hosts of a shared
    /// queue).
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
    /// The path cache large files' streams are chosen from, and that learns from them, as
    /// gcp's does (default: $FERRY_PATH_CACHE, else ~/.cache/ferry/gcp-paths.json of the
    /// service's user).
    #[arg(long, value_name = "FILE")]
    path_cache: Option<PathBuf>,
    /// Choose streams by size and round trip only, with no path cache (even where
    /// --path-cache is given, as the packaged unit does).
    #[arg(long)]
    no_path_cache: bool,
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

/// The `[[tokens.issuer]]` tables of the TOML file `file`.
fn token_issuers(file: &std::path::Path) -> anyhow::Result<ferry_site::TokensConfig> {
    #[derive(serde::Deserialize)]
    struct Only {
        #[serde(default)]
        tokens: ferry_site::TokensConfig,
    }
    let text = std::fs::read_to_string(file)
        .map_err(|e| anyhow::anyhow!("--token-issuers {}: {e}", file.display()))?;
    let only: Only = toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("--token-issuers {}: {e}", file.display()))?;
    if only.tokens.issuer.is_empty() {
        anyhow::bail!(
            "--token-issuers {}: it has no [[tokens.issuer]] table",
            file.display()
        );
    }
    Ok(only.tokens)
}

/// Runs `ferry service` until SIGINT or SIGTERM.
pub(crate) fn serve(args: ServiceArgs) -> anyhow::Result<()> {
    crate::serve::init_logging(None);
    let path_cache = match args.path_cache {
        _ if args.no_path_cache => None,
        Some(file) => Some(file),
        None => PathCache::default_for_user().map(|c| c.file().to_path_buf()),
    };
    let config = Config {
        listen: args.listen,
        database: args.database,
        host_id: args
            .host_id
            .unwrap_or_else(|| Config::default_host_id(args.listen.port())),
        host_cert: args.host_cert,
        host_key: args.host_key,
        cert_dir: args
            .cert_dir
            .unwrap_or_else(|| TrustStore::default_dir(&process_env)),
        token_file: args.tokens,
        token_issuers: match &args.token_issuers {
            Some(file) => token_issuers(file)?,
            None => Default::default(),
        },
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
        path_cache,
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
            ferry_server::stop_signal().await;
            on_signal.cancel();
        });
        service.serve(stop).await?;
        Ok::<_, anyhow::Error>(())
    })
}

fn client(conn: &Conn) -> Result<ServiceClient, ServiceError> {
    ServiceClient::for_user(&conn.service, conn.token.clone())
}

fn code_of(e: &ServiceError) -> u8 {
    exit::code(e.class())
}

fn run_client(what: &str, f: impl std::future::Future<Output = Result<u8, ServiceError>>) -> u8 {
    let Some(rt) = crate::present::runtime() else {
        return 1;
    };
    rt.block_on(f).unwrap_or_else(|e| {
        eprintln!("ferry {what}: {e}");
        code_of(&e)
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
