//! `SITE` subcommands.

use std::fmt;

use crate::args::{Args, CommandError};
use crate::civil::parse_timestamp;

#[cfg(test)]
mod tests;

/// One `SITE` subcommand.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SiteCommand {
    /// `SITE HELP`.
    Help,
    /// `SITE CHMOD <octal> <path>`.
    Chmod {
        /// Permission bits (parsed base 8).
        mode: u32,
        /// Path.
        path: String,
    },
    /// `SITE UTIME YYYYMMDDHHMMSS <path>` (also the `SITE UTIME <path> <atime> <mtime> <ctime> UTC` form).
    Utime {
        /// Modification time, seconds since the Unix epoch (UTC).
        mtime: i64,
        /// Path.
        path: String,
    },
    /// `SITE SYMLINK <target> <link>` (the Globus client's form).
    Symlink {
        /// What the link points to.
        target: String,
        /// The link to create.
        link: String,
    },
    /// `SITE SYMLINKFROM <existing>` (first step of the Globus server's two-step form).
    SymlinkFrom(String),
    /// `SITE SYMLINKTO <link>` (second step).
    SymlinkTo(String),
    /// `SITE RDEL <path>`: recursive delete.
    Rdel(String),
    /// `SITE BUFSIZE <bytes>` / `SITE SBUF <bytes>`: both buffers (written as `SBUF`, the name
    /// the Globus server knows).
    BufSize(u64),
    /// `SITE RETRBUFSIZE|RBUFSZ|RBUFSIZ <bytes>`: receive buffer.
    RetrBufSize(u64),
    /// `SITE STORBUFSIZE|SBUFSZ|SBUFSIZ <bytes>`: send buffer.
    StorBufSize(u64),
    /// `SITE BLOCKSIZE <bytes>`: the MODE E block size the server sends in this session; `0`
    /// returns to the server's own choice. A ferry extension (FEAT `SITE BLOCKSIZE`): MODE E
    /// leaves block sizes to the sender, and a receiver that drains its socket without
    /// sleeping (ferry's client) moves one stream faster with larger blocks than a receiver
    /// that reads each block whole (globus-url-copy) or sleeps between reads.
    BlockSize(u64),
    /// `SITE CLIENTINFO <k=v;...>`: informational.
    ClientInfo(String),
    /// `SITE TASKID <id>`: informational.
    TaskId(String),
    /// `SITE WHOAMI`.
    Whoami,
    /// `SITE VERSION`.
    Version,
    /// `SITE STATUS`: the server's uptime, sessions and transfers, for monitoring.
    Status,
    /// `SITE SETNETSTACK <stack>` (alias `SETDCSTACK`).
    SetNetStack(String),
    /// `SITE TCPINFO`: what the kernel knew of the last transfer's data connections (a ferry
    /// extension, listed in FEAT), so that a client steering a third-party copy sees the path
    /// between the servers.
    TcpInfo,
    /// `SITE SETDISKSTACK <stack>`.
    SetDiskStack(String),
    /// Any other subcommand: the upper-cased word and the rest of the line.
    Other {
        /// Upper-cased subcommand.
        name: String,
        /// Rest of the line.
        args: String,
    },
}

/// Parses the arguments of `SITE` (the subcommand word and what follows it).
pub(crate) fn parse_site(a: Args<'_>) -> Result<SiteCommand, CommandError> {
    let text = a.required()?;
    let (word, rest) = text.split_once(' ').unwrap_or((text, ""));
    let name = word.to_ascii_uppercase();
    let verb = format!("SITE {name}");
    let s = Args::new(&verb, rest);
    let path = |s: Args<'_>| s.required().map(str::to_owned);
    Ok(match name.as_str() {
        "HELP" => SiteCommand::Help,
        "CHMOD" => {
            let [mode, path] = s.exactly::<2>()?;
            let octal = !mode.is_empty() && mode.bytes().all(|b| (b'0'..=b'7').contains(&b));
            let mode = octal
                .then(|| u32::from_str_radix(mode, 8).ok())
                .flatten()
                .ok_or_else(|| s.bad(format!("'{mode}' is not an octal mode")))?;
            SiteCommand::Chmod {
                mode,
                path: path.to_owned(),
            }
        }
        "UTIME" => utime(s)?,
        "SYMLINK" => {
            let [target, link] = s.exactly::<2>()?;
            SiteCommand::Symlink {
                target: target.to_owned(),
                link: link.to_owned(),
            }
        }
        "SYMLINKFROM" => SiteCommand::SymlinkFrom(path(s)?),
        "SYMLINKTO" => SiteCommand::SymlinkTo(path(s)?),
        "RDEL" => SiteCommand::Rdel(path(s)?),
        "BUFSIZE" | "SBUF" => SiteCommand::BufSize(s.number()?),
        "RETRBUFSIZE" | "RBUFSZ" | "RBUFSIZ" => SiteCommand::RetrBufSize(s.number()?),
        "STORBUFSIZE" | "SBUFSZ" | "SBUFSIZ" => SiteCommand::StorBufSize(s.number()?),
        "BLOCKSIZE" => SiteCommand::BlockSize(s.number()?),
        "CLIENTINFO" => SiteCommand::ClientInfo(path(s)?),
        "TASKID" => SiteCommand::TaskId(path(s)?),
        "WHOAMI" => s.none().map(|()| SiteCommand::Whoami)?,
        "VERSION" => s.none().map(|()| SiteCommand::Version)?,
        "STATUS" => s.none().map(|()| SiteCommand::Status)?,
        "TCPINFO" => s.none().map(|()| SiteCommand::TcpInfo)?,
        "SETNETSTACK" | "SETDCSTACK" => SiteCommand::SetNetStack(path(s)?),
        "SETDISKSTACK" => SiteCommand::SetDiskStack(path(s)?),
        _ => SiteCommand::Other {
            name,
            args: s.rest().to_owned(),
        },
    })
}

/// `UTIME YYYYMMDDHHMMSS path` (Globus) or `UTIME path atime mtime ctime UTC` (wu-ftpd, ProFTPD).
fn utime(s: Args<'_>) -> Result<SiteCommand, CommandError> {
    if let Ok([time, path]) = s.exactly::<2>() {
        if let Some(mtime) = parse_timestamp(time) {
            return Ok(SiteCommand::Utime {
                mtime,
                path: path.to_owned(),
            });
        }
    }
    // The path may hold spaces, so the four trailing words are taken from the end.
    let mut head = s.rest().trim_end_matches(' ');
    let mut tail = [""; 4];
    for slot in tail.iter_mut().rev() {
        let (before, word) = head
            .rsplit_once(' ')
            .ok_or_else(|| s.bad("expected a time and a path"))?;
        *slot = word;
        head = before.trim_end_matches(' ');
    }
    let [atime, mtime, ctime, zone] = tail;
    let times_ok = parse_timestamp(atime).is_some() && parse_timestamp(ctime).is_some();
    match parse_timestamp(mtime) {
        Some(mtime) if times_ok && zone.eq_ignore_ascii_case("UTC") && !head.is_empty() => {
            Ok(SiteCommand::Utime {
                mtime,
                path: head.to_owned(),
            })
        }
        _ => Err(s.bad("expected a time and a path")),
    }
}

impl fmt::Display for SiteCommand {
    /// The canonical wire form after `SITE ` (`CHMOD 755 /p`), which parses back to an equal value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SiteCommand::Help => f.write_str("HELP"),
            SiteCommand::Chmod { mode, path } => write!(f, "CHMOD {mode:o} {path}"),
            SiteCommand::Utime { mtime, path } => {
                f.write_str("UTIME ")?;
                crate::civil::write_timestamp(f, *mtime)?;
                write!(f, " {path}")
            }
            SiteCommand::Symlink { target, link } => write!(f, "SYMLINK {target} {link}"),
            SiteCommand::SymlinkFrom(p) => write!(f, "SYMLINKFROM {p}"),
            SiteCommand::SymlinkTo(p) => write!(f, "SYMLINKTO {p}"),
            SiteCommand::Rdel(p) => write!(f, "RDEL {p}"),
            SiteCommand::BufSize(n) => write!(f, "SBUF {n}"),
            SiteCommand::RetrBufSize(n) => write!(f, "RETRBUFSIZE {n}"),
            SiteCommand::StorBufSize(n) => write!(f, "STORBUFSIZE {n}"),
            SiteCommand::BlockSize(n) => write!(f, "BLOCKSIZE {n}"),
            SiteCommand::ClientInfo(s) => write!(f, "CLIENTINFO {s}"),
            SiteCommand::TaskId(s) => write!(f, "TASKID {s}"),
            SiteCommand::Whoami => f.write_str("WHOAMI"),
            SiteCommand::Version => f.write_str("VERSION"),
            SiteCommand::Status => f.write_str("STATUS"),
            SiteCommand::TcpInfo => f.write_str("TCPINFO"),
            SiteCommand::SetNetStack(s) => write!(f, "SETNETSTACK {s}"),
            SiteCommand::SetDiskStack(s) => write!(f, "SETDISKSTACK {s}"),
            SiteCommand::Other { name, args } if args.is_empty() => f.write_str(name),
            SiteCommand::Other { name, args } => write!(f, "{name} {args}"),
        }
    }
}
