//! `ferry serve` and `ferry passwd`.

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use ferry_server::{Server, ServerConfig};

/// `ferry serve` flags. Each overrides the same key of `--config`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ServeArgs {
    /// TOML file with any of these settings (keys are the flag names, e.g. `port-range = "50000-51000"`).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Control-channel address; port 0 picks a free port; IPv6 as [::1]:2811. [default: 0.0.0.0:2811]
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<SocketAddr>,
    /// Directory that every client path is confined beneath (anonymous service needs one
    /// other than /). [default: /]
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Allow anonymous logins (USER anonymous or ftp), read-only.
    #[arg(long)]
    anonymous: bool,
    /// Let anonymous users write too.
    #[arg(long)]
    anonymous_write: bool,
    /// Started as root: the local account anonymous sessions work as, so the kernel checks
    /// that account's permissions. [default: ftp, else nobody]
    #[arg(long, value_name = "ACCOUNT")]
    anonymous_user: Option<String>,
    /// Password file of `user:argon2-hash[:account]` lines (write entries with `ferry passwd`).
    #[arg(long, value_name = "FILE")]
    password_file: Option<PathBuf>,
    /// Started as root: the local account password users work as when their line names none.
    #[arg(long, value_name = "ACCOUNT")]
    password_account: Option<String>,
    /// Started as root, let sessions work as root (an account mapped to root, run-as-user =
    /// false, an anonymous or password account that is root). Off: such a start is refused.
    #[arg(long)]
    allow_root_sessions: bool,
    /// Let anonymous users see the whole file system (--root /). Off: anonymous service needs
    /// a --root other than /.
    #[arg(long)]
    anonymous_whole_fs: bool,
    /// Let sessions without data-channel authentication be one end of a third-party copy
    /// (name another host in PORT, take data connections from another host): anonymous,
    /// password or dcau-none (GSI with DCAU N); repeat or separate with commas. GSI sessions
    /// with DCAU A always may. [default: none]
    #[arg(long, value_name = "KIND", value_delimiter = ',')]
    allow_third_party: Vec<String>,
    /// Networks or addresses (10.0.0.0/8, 192.0.2.7) where gridftp_multicast children may be;
    /// repeat or separate with commas. [default: none, the forwarder forwards nowhere]
    #[arg(long, value_name = "NET", value_delimiter = ',')]
    multicast_allow_to: Vec<String>,
    /// Most data connections one upload takes; more are closed as they come. [default: 128]
    #[arg(long, value_name = "N")]
    data_streams_max: Option<u32>,
    /// Most data connections the server reads from at once, all sessions together.
    /// [default: 16384]
    #[arg(long, value_name = "N")]
    data_connections_max: Option<usize>,
    /// GSI logins: AUTH GSSAPI with the host credential, authorized by the grid-mapfile.
    #[arg(long)]
    gsi: bool,
    /// Host certificate. [default: X509_USER_CERT, else /etc/grid-security/hostcert.pem]
    #[arg(long, value_name = "FILE")]
    host_cert: Option<PathBuf>,
    /// Host key. [default: X509_USER_KEY, else /etc/grid-security/hostkey.pem]
    #[arg(long, value_name = "FILE")]
    host_key: Option<PathBuf>,
    /// Trusted CA directory. [default: X509_CERT_DIR, else /etc/grid-security/certificates]
    #[arg(long, value_name = "DIR")]
    cert_dir: Option<PathBuf>,
    /// Grid-mapfile. [default: GRIDMAP, else /etc/grid-security/grid-mapfile]
    #[arg(long, value_name = "FILE")]
    gridmap: Option<PathBuf>,
    /// Started as root, serve GSI sessions as the server's own user instead of the mapped
    /// account (config: run-as-user = false).
    #[arg(long)]
    no_run_as_user: bool,
    /// Ports for passive data listeners, e.g. 50000-51000. [default: any]
    #[arg(long, value_name = "LO-HI")]
    port_range: Option<ferry_net::PortRange>,
    /// Most concurrent control connections (the open-file limit, raised to its maximum at start, also bounds them). [default: 65536]
    #[arg(long, value_name = "N")]
    connections_max: Option<usize>,
    /// Seconds a logged-in control connection may stay idle. [default: 600]
    #[arg(long, value_name = "SECONDS")]
    control_idle_timeout: Option<u64>,
    /// Seconds a new connection has to log in. [default: 60]
    #[arg(long, value_name = "SECONDS")]
    control_preauth_timeout: Option<u64>,
    /// Seconds a transfer may move no data before it is aborted. [default: 600]
    #[arg(long, value_name = "SECONDS")]
    data_idle_timeout: Option<u64>,
    /// Append one line per transfer to FILE (reopened on SIGHUP, after logrotate moved it).
    #[arg(long, value_name = "FILE")]
    log_transfer: Option<PathBuf>,
    /// Transfer-log lines as JSON (failures included), or with the Globus server's fields
    /// (DATE= HOST= … NBYTES= … CODE=226; successful transfers only) for accounting tools. [default: json]
    #[arg(long, value_enum, value_name = "FORMAT")]
    log_transfer_format: Option<TransferLogFormatArg>,
    /// Serve Prometheus metrics at http://ADDR/metrics and a health answer at /healthz
    /// (200, or 503 while connections-max is reached), e.g. 127.0.0.1:9812.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<SocketAddr>,
    /// Serve the same storage over HTTPS/WebDAV on ADDR too (GET, PUT, PROPFIND, MKCOL, DELETE,
    /// MOVE, COPY; digests), with the same logins, accounts and logs; e.g. 0.0.0.0:8443. The
    /// host credential is the TLS certificate; X.509 client certificates and proxies log in
    /// through the grid-mapfile when --gsi is on. [config: [https] listen]
    #[arg(long, value_name = "ADDR:PORT")]
    https_listen: Option<SocketAddr>,
    /// Serve the same door in clear-text HTTP on ADDR too, for anonymous access only (passwords
    /// are refused there; certificates need TLS). Alone it needs no host credential. Files go out by
    /// sendfile. [config: [https] clear-listen]
    #[arg(long, value_name = "ADDR:PORT")]
    http_listen: Option<SocketAddr>,
    /// Where whole-file checksums are kept so CKSM answers at once: xattr (the files'
    /// user.XrdCks.* and user.ferry.checksums attributes, and memory), memory, or off (every
    /// CKSM reads the file). [default: xattr]
    #[arg(long, value_enum, value_name = "WHERE")]
    checksum_cache: Option<ChecksumCacheArg>,
    /// Checksums every whole-file transfer takes while its bytes move and keeps for CKSM
    /// (comma-separated: ADLER32, CRC32C, MD5, SHA1, SHA256, SHA512). [default: ADLER32]
    #[arg(long, value_name = "ALG,...", value_delimiter = ',')]
    transfer_checksums: Vec<String>,
    /// TCP congestion control of the data connections, e.g. bbr (the sending side's decides;
    /// clients may ask for another per session with SITE SETNETSTACK tcp:congestion=NAME).
    /// [default: the system's, net.ipv4.tcp_congestion_control]
    #[arg(long, value_name = "NAME")]
    data_congestion: Option<ferry_net::Congestion>,
    /// MODE E block size this server sends, in bytes. [default: 262144 on one stream, up to 4194304 on several]
    #[arg(long, value_name = "BYTES")]
    block_size: Option<u32>,
    /// Uploads that may each read their one stream on a thread of its own that polls the socket
    /// before sleeping (1.4-1.8x on one loopback stream, a core each while data flows); 0 = none. [default: half the CPUs]
    #[arg(long, value_name = "N")]
    polling_streams: Option<usize>,
    /// Text of the 220 greeting.
    #[arg(long, value_name = "TEXT")]
    banner: Option<String>,
    /// Data-channel drivers clients may choose with SITE SETNETSTACK (comma-separated, bottom
    /// first names). [default: tcp,gsi]
    #[arg(long, value_name = "DRIVER,...", value_delimiter = ',')]
    dc_whitelist: Vec<String>,
    /// The data-channel stack of sessions that send no SITE SETNETSTACK (Globus'
    /// -dc-default), e.g. udt; its drivers must be in --dc-whitelist. [default: tcp]
    #[arg(long, value_name = "STACK")]
    dc_default: Option<String>,
    /// Disk-stack drivers clients may choose with SITE SETDISKSTACK (comma-separated).
    /// [default: file]
    #[arg(long, value_name = "DRIVER,...", value_delimiter = ',')]
    fs_whitelist: Vec<String>,
    /// Run as a data node of a striped server: serve a frontend's IPC links on --listen
    /// instead of FTP clients. The data node moves data between its --root and the peers.
    #[arg(long)]
    data_node: bool,
    /// Striped frontend: the data nodes (host:port, comma-separated) that move the data; SPAS
    /// answers one address per node. --root must show the same files as the nodes'.
    #[arg(long, value_name = "HOST:PORT,...", value_delimiter = ',')]
    remote_nodes: Vec<String>,
    /// File holding the secret shared by a frontend and its data nodes (at least 16 bytes);
    /// the IPC link is TLS 1.3 keyed by it. Without it, --gsi links use the host credentials.
    #[arg(long, value_name = "FILE")]
    ipc_secret_file: Option<PathBuf>,
    /// GSI IPC: the subject the other end's host certificate must have. [default: our own]
    #[arg(long, value_name = "DN")]
    ipc_subject: Option<String>,
    /// Data node: only these addresses or networks may connect (comma-separated, e.g.
    /// 10.0.0.1,192.168.0.0/24). [default: any that authenticates]
    #[arg(long, value_name = "ADDR|NET,...", value_delimiter = ',')]
    ipc_allow_from: Vec<String>,
    /// Passive data listeners (PASV/EPSV/SPAS, a data node's too) bind to and advertise this
    /// address, for hosts whose data network is not their control network. [default: the
    /// address the control connection or IPC link arrived on]
    #[arg(long, value_name = "IP")]
    data_interface: Option<std::net::IpAddr>,
    /// Frontend: seconds a data node has to connect and authenticate. [default: 5]
    #[arg(long, value_name = "SECONDS")]
    ipc_connect_timeout: Option<u64>,
    /// Log filter (e.g. info, debug, ferry_server=debug). [default: info, or RUST_LOG]
    #[arg(long, value_name = "FILTER")]
    log: Option<String>,
    /// Log lines as text, or as one JSON object each (for log shippers). Under systemd (where
    /// journald stamps each line) text goes without its own timestamp.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Check the configuration as a start would (every file it names read, credentials
    /// verified) without binding the port or writing anything; print what was checked and
    /// exit 0, or the error and exit 1.
    #[arg(long)]
    check_config: bool,
}

impl ServeArgs {
    fn into_config(self) -> anyhow::Result<ServerConfig> {
        let mut c = match &self.config {
            Some(f) => ServerConfig::from_toml_file(f)?,
            None => ServerConfig::default(),
        };
        given(&mut c.listen, self.listen);
        given(&mut c.root, self.root);
        c.anonymous |= self.anonymous;
        c.anonymous_write |= self.anonymous_write;
        given_opt(&mut c.anonymous_user, self.anonymous_user);
        given_opt(&mut c.password_file, self.password_file);
        given_opt(&mut c.password_account, self.password_account);
        c.allow_root_sessions |= self.allow_root_sessions;
        c.anonymous_whole_fs |= self.anonymous_whole_fs;
        given_list(&mut c.allow_third_party, self.allow_third_party);
        given_list(&mut c.multicast_allow_to, self.multicast_allow_to);
        given(&mut c.data_streams_max, self.data_streams_max);
        given(&mut c.data_connections_max, self.data_connections_max);
        c.gsi |= self.gsi;
        if self.no_run_as_user {
            c.run_as_user = false;
        }
        given_opt(&mut c.host_cert, self.host_cert);
        given_opt(&mut c.host_key, self.host_key);
        given_opt(&mut c.cert_dir, self.cert_dir);
        given_opt(&mut c.gridmap, self.gridmap);
        given_opt(&mut c.port_range, self.port_range);
        given(&mut c.connections_max, self.connections_max);
        given(&mut c.control_idle_timeout, self.control_idle_timeout);
        given(&mut c.control_preauth_timeout, self.control_preauth_timeout);
        given(&mut c.data_idle_timeout, self.data_idle_timeout);
        given_opt(&mut c.log_transfer, self.log_transfer);
        if let Some(f) = self.log_transfer_format {
            c.log_transfer_format = match f {
                TransferLogFormatArg::Json => ferry_server::TransferLogFormat::Json,
                TransferLogFormatArg::Globus => ferry_server::TransferLogFormat::Globus,
            };
        }
        given_opt(&mut c.metrics, self.metrics);
        given_opt(&mut c.https.clear_listen, self.http_listen);
        given_opt(&mut c.https.listen, self.https_listen);
        if let Some(m) = self.checksum_cache {
            c.checksum_cache = match m {
                ChecksumCacheArg::Xattr => ferry_storage::CacheMode::Xattr,
                ChecksumCacheArg::Memory => ferry_storage::CacheMode::Memory,
                ChecksumCacheArg::Off => ferry_storage::CacheMode::Off,
            };
        }
        given_list(&mut c.transfer_checksums, self.transfer_checksums);
        given_opt(&mut c.block_size, self.block_size);
        given_opt(&mut c.data_congestion, self.data_congestion);
        given_opt(&mut c.polling_streams, self.polling_streams);
        given_opt(&mut c.banner, self.banner);
        given_list(&mut c.dc_whitelist, self.dc_whitelist);
        given_opt(&mut c.dc_default, self.dc_default);
        given_list(&mut c.fs_whitelist, self.fs_whitelist);
        c.data_node |= self.data_node;
        given_list(&mut c.remote_nodes, self.remote_nodes);
        given_opt(&mut c.ipc_secret_file, self.ipc_secret_file);
        given_opt(&mut c.ipc_subject, self.ipc_subject);
        given_list(&mut c.ipc_allow_from, self.ipc_allow_from);
        given_opt(&mut c.data_interface, self.data_interface);
        given(&mut c.ipc_connect_timeout, self.ipc_connect_timeout);
        Ok(c)
    }
}

/// A flag given on the command line over the configuration's value.
fn given<T>(slot: &mut T, flag: Option<T>) {
    if let Some(v) = flag {
        *slot = v;
    }
}

/// [`given`] for a setting that may be absent.
fn given_opt<T>(slot: &mut Option<T>, flag: Option<T>) {
    if flag.is_some() {
        *slot = flag;
    }
}

/// [`given`] for a list flag: given when it has any value.
fn given_list<T>(slot: &mut Vec<T>, flag: Vec<T>) {
    if !flag.is_empty() {
        *slot = flag;
    }
}

/// `--log-transfer-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TransferLogFormatArg {
    /// One JSON object per transfer.
    Json,
    /// The Globus GridFTP server's transfer-log line.
    Globus,
}

/// `--checksum-cache`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ChecksumCacheArg {
    /// Extended attributes on the files (XRootD's records and ferry's), and memory.
    Xattr,
    /// Memory only: files' metadata is never changed.
    Memory,
    /// Nothing kept: every CKSM reads the file.
    Off,
}

/// How log lines look (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line: timestamp, level, target and the event's fields.
    Json,
}

pub(crate) fn init_logging(filter: Option<&str>) {
    init_logging_as(filter, LogFormat::Text);
}

fn init_logging_as(filter: Option<&str>, format: LogFormat) {
    let filter = filter
        .map(tracing_subscriber::EnvFilter::new)
        .or_else(|| tracing_subscriber::EnvFilter::try_from_default_env().ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        // systemd points JOURNAL_STREAM at the journal, which stamps every line itself.
        LogFormat::Text if std::env::var_os("JOURNAL_STREAM").is_some() => {
            builder.with_ansi(false).without_time().try_init()
        }
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
    };
}

pub(crate) fn run(args: ServeArgs) -> anyhow::Result<()> {
    if args.check_config {
        init_logging_as(Some(args.log.as_deref().unwrap_or("warn")), args.log_format);
        let config = args.into_config()?;
        // The error's own text names its cause; anyhow's chain would repeat it.
        let report = Server::check_config(&config, &ferry_server::Drivers::default())
            .map_err(|e| anyhow::anyhow!("configuration error: {e}"))?;
        for line in &report.checked {
            println!("  {line}");
        }
        for line in &report.warnings {
            println!("  warning: {line}");
        }
        println!("configuration OK");
        return Ok(());
    }
    init_logging_as(args.log.as_deref(), args.log_format);
    // Thousands of sessions need thousands of descriptors.
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let config = args.clone().into_config()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        // SIGHUP's default action ends the process: catch it before the start loads
        // credentials and CRLs, so a logrotate or reload that arrives meanwhile is not fatal.
        let hup = signal(SignalKind::hangup());
        let server = Server::bind(config).await?;
        let addr = server.local_addr()?;
        println!("listening on {addr}");
        if let Some(m) = server.metrics_addr() {
            println!("metrics on http://{m}/metrics");
        }
        if let Some(h) = server.https_addr() {
            println!("https on https://{h}/");
        }
        if let Some(h) = server.http_addr() {
            println!("http on http://{h}/");
        }
        std::io::stdout().flush()?;
        let load = move || args.clone().into_config().map_err(|e| format!("{e:#}"));
        tokio::spawn(server.reloader().on_hangup(hup, load));
        tokio::select! {
            r = server.run() => r?,
            _ = ferry_server::stop_signal() => tracing::info!("shutting down"),
        }
        Ok(())
    })
}

/// `ferry passwd` flags.
#[derive(Debug, Args)]
pub(crate) struct PasswdArgs {
    /// Password file to create or update.
    file: PathBuf,
    /// User name.
    user: String,
    /// Read the password from the first line of standard input instead of prompting.
    #[arg(long)]
    stdin: bool,
    /// The local account the user works as on a server started as root. [default: the one
    /// the user's line already names, else the server's --password-account]
    #[arg(long, value_name = "ACCOUNT")]
    account: Option<String>,
}

pub(crate) fn passwd(args: PasswdArgs) -> anyhow::Result<()> {
    if !args.stdin {
        eprint!(
            "password for {} (input is shown; use --stdin to pipe it): ",
            args.user
        );
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("cannot read password")?;
    let password = line.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        anyhow::bail!("empty password refused");
    }
    ferry_server::auth::set_password(&args.file, &args.user, password, args.account.as_deref())?;
    eprintln!("{}: entry for {} written", args.file.display(), args.user);
    Ok(())
}
