//! `SITE` subcommands.

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
    /// `SITE BUFSIZE <bytes>` / `SITE SBUF <bytes>`: both buffers.
    BufSize(u64),
    /// `SITE RETRBUFSIZE|RBUFSZ|RBUFSIZ <bytes>`: receive buffer.
    RetrBufSize(u64),
    /// `SITE STORBUFSIZE|SBUFSZ|SBUFSIZ <bytes>`: send buffer.
    StorBufSize(u64),
    /// `SITE CLIENTINFO <k=v;...>`: informational.
    ClientInfo(String),
    /// `SITE TASKID <id>`: informational.
    TaskId(String),
    /// `SITE WHOAMI`.
    Whoami,
    /// `SITE VERSION`.
    Version,
    /// `SITE SETNETSTACK <stack>` (alias `SETDCSTACK`).
    SetNetStack(String),
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
