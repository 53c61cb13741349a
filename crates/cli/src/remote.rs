//! `ferry ls | mkdir | rm | mv | stat | cksum`: remote file management.

use clap::{Args, Subcommand};
use ferry_client::{ClientError, EntryKind, RemoteEntry, RemoteSession, RemoteUrl};

use crate::exit;

/// Remote file management commands.
#[derive(Debug, Subcommand)]
pub(crate) enum RemoteCmd {
    /// List a directory (or show one file).
    Ls(UrlArgs),
    /// Create a directory (-p: with missing parents).
    Mkdir {
        #[command(flatten)]
        url: UrlArgs,
        /// Create missing parents too; no error if it exists.
        #[arg(short = 'p', long)]
        parents: bool,
    },
    /// Remove a file, or a directory with -r.
    Rm {
        #[command(flatten)]
        url: UrlArgs,
        /// Remove directories and their contents.
        #[arg(short = 'r', long)]
        recursive: bool,
    },
    /// Rename or move within one server.
    Mv {
        /// What to move.
        from: String,
        /// New path (a path on the same server, or a URL naming it).
        to: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// ftps:// and ftpes://: trust the CA certificates in this PEM file besides the system's.
        #[arg(long = "ca-file", value_name = "FILE")]
        ca_file: Option<std::path::PathBuf>,
    },
    /// Show one entry's facts.
    Stat(UrlArgs),
    /// Ask the server for a checksum.
    Cksum {
        #[command(flatten)]
        url: UrlArgs,
        /// Algorithm: MD5, ADLER32, CRC32C, SHA1, SHA256, SHA512.
        #[arg(long = "alg", short = 'a', default_value = "MD5")]
        alg: String,
        /// First byte.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Bytes (default: to the end).
        #[arg(long)]
        length: Option<u64>,
    },
}

/// A remote URL and output format.
#[derive(Debug, Args)]
pub(crate) struct UrlArgs {
    /// ftp://[user[:pass]@]host[:port]/path (also ftps://, ftpes://, gsiftp://)
    url: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// ftps:// and ftpes://: trust the CA certificates in this PEM file besides the system's.
    #[arg(long = "ca-file", value_name = "FILE")]
    ca_file: Option<std::path::PathBuf>,
}

fn print_entry(e: &RemoteEntry) {
    let kind = match e.kind {
        EntryKind::Dir => "d",
        EntryKind::Link => "l",
        EntryKind::File => "-",
        EntryKind::Other => "?",
    };
    let size = e.size.map(|s| s.to_string()).unwrap_or_default();
    let modify = e.modify.as_deref().unwrap_or("");
    let name = if e.kind == EntryKind::Dir {
        format!("{}/", e.name)
    } else {
        e.name.clone()
    };
    println!("{kind} {size:>14} {modify:<14} {name}");
}

/// `{"ok": true, ...}` for commands that change something, with `--json`.
fn done_json(enabled: bool, op: &str, url: &RemoteUrl) {
    if enabled {
        json(&serde_json::json!({ "ok": true, "op": op, "url": url.to_string() }));
    }
}

fn json<T: serde::Serialize>(v: &T) {
    if let Ok(s) = serde_json::to_string(v) {
        println!("{s}");
    }
}

/// A session with the default GSI setup and `ca_file` trusted for FTPS.
async fn connect(
    url: &RemoteUrl,
    ca_file: Option<std::path::PathBuf>,
) -> Result<RemoteSession, ClientError> {
    let options = ferry_client::GsiOptions {
        ca_file,
        ..Default::default()
    };
    RemoteSession::connect(url, &ferry_client::GsiSetup::new(options)).await
}

async fn run_async(cmd: RemoteCmd) -> Result<(), ClientError> {
    match cmd {
        RemoteCmd::Ls(a) => {
            let url = RemoteUrl::parse(&a.url)?;
            let mut s = connect(&url, a.ca_file).await?;
            let entries = s.list_or_stat(&url.path).await?;
            if a.json {
                json(&entries);
            } else {
                entries.iter().for_each(print_entry);
            }
        }
        RemoteCmd::Mkdir { url, parents } => {
            let u = RemoteUrl::parse(&url.url)?;
            let mut s = connect(&u, url.ca_file).await?;
            if parents {
                s.mkdir_all(&u.path).await?;
            } else {
                s.mkdir(&u.path).await?;
            }
            done_json(url.json, "mkdir", &u);
        }
        RemoteCmd::Rm { url, recursive } => {
            let u = RemoteUrl::parse(&url.url)?;
            connect(&u, url.ca_file)
                .await?
                .remove(&u.path, recursive)
                .await?;
            done_json(url.json, "rm", &u);
        }
        RemoteCmd::Mv {
            from,
            to,
            json: as_json,
            ca_file,
        } => {
            let f = RemoteUrl::parse(&from)?;
            let to_path = f.path_here(&to)?;
            connect(&f, ca_file)
                .await?
                .rename(&f.path, &to_path)
                .await?;
            if as_json {
                json(
                    &serde_json::json!({ "ok": true, "op": "mv", "from": f.to_string(), "to": to_path }),
                );
            }
        }
        RemoteCmd::Stat(a) => {
            let u = RemoteUrl::parse(&a.url)?;
            let e = connect(&u, a.ca_file).await?.stat(&u.path).await?;
            if a.json {
                json(&e);
            } else {
                print_entry(&e);
            }
        }
        RemoteCmd::Cksum {
            url,
            alg,
            offset,
            length,
        } => {
            let u = RemoteUrl::parse(&url.url)?;
            let sum = connect(&u, url.ca_file)
                .await?
                .checksum(&u.path, &alg.to_ascii_uppercase(), offset, length)
                .await?;
            if url.json {
                json(
                    &serde_json::json!({ "url": u.to_string(), "algorithm": alg.to_ascii_uppercase(), "checksum": sum }),
                );
            } else {
                println!("{sum}  {u}");
            }
        }
    }
    Ok(())
}

pub(crate) fn run(cmd: RemoteCmd) -> u8 {
    let Some(rt) = crate::present::runtime() else {
        return 1;
    };
    match rt.block_on(run_async(cmd)) {
        Ok(()) => exit::OK,
        Err(e) => crate::present::report(&e),
    }
}

/// `url-copy -list URL`: names, directories with a trailing `/`, like globus-url-copy.
pub(crate) fn list_url(url: &str) -> u8 {
    run(RemoteCmd::Ls(UrlArgs {
        url: url.to_string(),
        json: false,
        ca_file: None,
    }))
}
