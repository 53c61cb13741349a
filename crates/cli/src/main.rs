//! `ferry`: the GridFTP server and tools. This binary only parses arguments and presents
//! results; the work lives in the library crates.

mod ca;
mod copy;
mod demo;
mod docs;
mod exit;
mod gcp;
mod multilink;
mod present;
mod proxy;
mod remote;
mod serve;
mod service;
mod url_copy;

use clap::{Parser, Subcommand};

/// ferry: a GridFTP server and client suite, wire-compatible with the Globus tools.
#[derive(Debug, Parser)]
#[command(name = "ferry", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the GridFTP server.
    Serve(Box<serve::ServeArgs>),
    /// Copy files and directories between local paths and GridFTP servers (two-party or third-party).
    Copy(copy::CopyArgs),
    /// scp-style copies (also installed as `gcp`): [user@]host:path names translated into the
    /// site's transfer servers by rules in ~/.config/ferry/gcp.toml and /etc/ferry/gcp.toml.
    Cp(gcp::GcpArgs),
    /// URL copy with globus-url-copy's option spelling (-p 4 -tcp-bs 8M -vb ...).
    #[command(name = "url-copy", disable_help_flag = true)]
    UrlCopy {
        /// globus-url-copy options and URLs (ferry url-copy -help lists them).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Make proxy certificates and show or delete them (grid-proxy-init/-info/-destroy).
    #[command(subcommand)]
    Proxy(proxy::ProxyCmd),
    /// Make a throw-away CA with host and user certificates, a trusted-CA directory and a
    /// grid-mapfile, for tests and first GSI steps.
    Ca(ca::CaArgs),
    /// Add or change a user in a password file (argon2id hashes).
    Passwd(serve::PasswdArgs),
    /// Start a server on a temporary directory, copy a generated file through it with parallel
    /// streams both ways, verify checksums and print the throughput.
    Demo(demo::DemoArgs),
    /// Run the transfer service: a queue of copy jobs that survives failures of the servers,
    /// the network and itself, with FTS3's REST API (HTTPS, X.509 proxies or tokens).
    Service(Box<service::ServiceArgs>),
    /// Submit a copy job to the transfer service (delegating your proxy when it needs one).
    Submit(service::SubmitArgs),
    /// List your jobs on the transfer service.
    Jobs(service::JobsArgs),
    /// Show one job of the transfer service, file by file.
    Job(service::JobArgs),
    /// Cancel jobs on the transfer service.
    Cancel(service::CancelArgs),
    /// Print shell completions for bash, zsh, fish, elvish or powershell.
    Completions(docs::CompletionsArgs),
    /// Write the man pages (ferry.1, ferry-serve.8, ...) into a directory.
    #[command(hide = true)]
    Man(docs::ManArgs),
    #[command(flatten)]
    Remote(remote::RemoteCmd),
}

/// An error and its causes, each said once: many errors already quote their source, which
/// anyhow's `{:#}` would print again.
fn causes(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

/// `gcp`: the same binary called by that name (a link to ferry) takes `ferry cp`'s arguments.
#[derive(Debug, Parser)]
#[command(
    name = "gcp",
    version,
    about = "scp-style copies over GridFTP: [user@]host:path names go to the site's transfer servers"
)]
struct GcpCli {
    #[command(flatten)]
    args: gcp::GcpArgs,
}

fn invoked_as_gcp() -> bool {
    std::env::args_os()
        .next()
        .and_then(|a| std::path::Path::new(&a).file_name().map(|n| n == "gcp"))
        .unwrap_or(false)
}

fn main() -> std::process::ExitCode {
    if invoked_as_gcp() {
        return std::process::ExitCode::from(gcp::run(GcpCli::parse().args));
    }
    let cli = Cli::parse();
    let done = |r: anyhow::Result<()>| match r {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("ferry: {}", causes(&e));
            1
        }
    };
    let code = match cli.command {
        Cmd::Serve(a) => done(serve::run(*a)),
        Cmd::Passwd(a) => done(serve::passwd(a)),
        Cmd::Demo(a) => done(demo::run(a)),
        Cmd::Ca(a) => done(ca::run(a)),
        Cmd::Completions(a) => done(docs::completions(a)),
        Cmd::Man(a) => done(docs::man(a)),
        Cmd::Proxy(p) => proxy::run(p),
        Cmd::Copy(a) => copy::run(a),
        Cmd::Cp(a) => gcp::run(a),
        Cmd::UrlCopy { args } => url_copy::run(args),
        Cmd::Remote(r) => remote::run(r),
        Cmd::Service(a) => done(service::serve(*a)),
        Cmd::Submit(a) => service::submit(a),
        Cmd::Jobs(a) => service::jobs(a),
        Cmd::Job(a) => service::job(a),
        Cmd::Cancel(a) => service::cancel(a),
    };
    std::process::ExitCode::from(code)
}
