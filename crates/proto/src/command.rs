//! Control-channel commands: parsed from a line into a typed value and formatted back.

use std::fmt;

pub use crate::args::CommandError;
use crate::hostport::HostPort;
use crate::opts::Opts;
use crate::ranges::RangeSet;
use crate::site::SiteCommand;

mod format;
mod parse;
#[cfg(test)]
mod round_trip;
#[cfg(test)]
mod tests;

/// Longest command line accepted, CRLF included (bytes).
pub const MAX_COMMAND_LINE: usize = 8192;

/// `TYPE` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum TransferType {
    /// `TYPE A`: ASCII, lines end CRLF on the wire.
    Ascii,
    /// `TYPE I`: image (binary).
    Image,
}

/// `MODE` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum TransferMode {
    /// `MODE S`: stream mode, end of data is end of connection.
    Stream,
    /// `MODE E`: GridFTP extended block mode.
    Extended,
}

/// `STRU` argument (only `F` is supported, the others parse so they can be refused with 504).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Structure {
    /// `STRU F`.
    File,
    /// `STRU R`.
    Record,
    /// `STRU P`.
    Page,
}

/// `EPSV` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpsvArg {
    /// `EPSV 1` or `EPSV 2`: the network protocol to use.
    Protocol(u8),
    /// `EPSV ALL`.
    All,
}

/// `REST` argument: a stream offset or a MODE E range list (`a-b,c-d`, end exclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restart {
    /// `REST n`: bytes `0..n` are already transferred.
    Stream(u64),
    /// `REST a-b,c-d`: these ranges are already transferred.
    Ranges(RangeSet),
}

/// `ERET` module and its argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eret {
    /// `ERET P <offset> <length> <path>`: partial retrieve.
    Partial {
        /// First byte of the section.
        offset: u64,
        /// Bytes in the section.
        length: u64,
        /// File path.
        path: String,
    },
    /// `ERET name="params" path`: any other processing module.
    Module {
        /// Module name.
        name: String,
        /// Parameter string between the quotes.
        params: String,
        /// File path.
        path: String,
    },
}

/// `ESTO` module and its argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Esto {
    /// `ESTO A <offset> <path>`: adjusted store, file position = wire offset + offset.
    Adjusted {
        /// Added to every wire offset.
        offset: u64,
        /// File path.
        path: String,
    },
    /// `ESTO name="params" path`: any other processing module.
    Module {
        /// Module name.
        name: String,
        /// Parameter string between the quotes.
        params: String,
        /// File path.
        path: String,
    },
}

/// `DCAU` argument.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Dcau {
    /// `DCAU N`: no data-channel authentication.
    None,
    /// `DCAU A`: authenticate with the session's own credential.
    Self_,
    /// `DCAU S <subject>`: expect this subject on the other end.
    Subject(String),
}

/// `PROT` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Protection {
    /// `PROT C`: clear.
    Clear,
    /// `PROT S`: integrity.
    Safe,
    /// `PROT E`: confidential (refused, as Globus does).
    Confidential,
    /// `PROT P`: private (integrity and encryption).
    Private,
}

/// `TREV` event kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrevEvent {
    /// `TREV RESTART <sec>`.
    Restart,
    /// `TREV PERF <sec>`.
    Perf,
}

/// One control-channel command.
///
/// Path arguments keep their spaces (the last argument takes the rest of the line, as Globus
/// parses). Optional arguments are `None` when absent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Command {
    /// `USER name`.
    User(String),
    /// `PASS password` (may be empty).
    Pass(String),
    /// `ACCT account`.
    Acct(String),
    /// `AUTH mechanism`.
    Auth(String),
    /// `ADAT base64`.
    Adat(String),
    /// `PBSZ n`.
    Pbsz(u64),
    /// `PROT level`.
    Prot(Protection),
    /// `FEAT`.
    Feat,
    /// `OPTS ...`.
    Opts(Opts),
    /// `HELP [topic]`.
    Help(Option<String>),
    /// `SYST`.
    Syst,
    /// `NOOP`.
    Noop,
    /// `QUIT`.
    Quit,
    /// `STAT [path]`.
    Stat(Option<String>),
    /// `TYPE A|I` (a trailing format such as `A N` is accepted and ignored).
    Type(TransferType),
    /// `MODE S|E`.
    Mode(TransferMode),
    /// `STRU F|R|P`.
    Stru(Structure),
    /// `PASV`.
    Pasv,
    /// `EPSV [1|2|ALL]`.
    Epsv(Option<EpsvArg>),
    /// `SPAS [2]`: the flag is true for the IPv6-capable form.
    Spas(bool),
    /// `PORT h1,h2,h3,h4,p1,p2`.
    Port(HostPort),
    /// `EPRT |1|ip|port|` or `|2|ip6|port|`.
    Eprt(HostPort),
    /// `SPOR hp hp ...` (PORT-style or EPRT-style tuples).
    Spor(Vec<HostPort>),
    /// `REST n` or `REST a-b,c-d`.
    Rest(Restart),
    /// `RETR path`.
    Retr(String),
    /// `STOR path`.
    Stor(String),
    /// `STOU [path]`.
    Stou(Option<String>),
    /// `APPE path`.
    Appe(String),
    /// `ERET ...`.
    Eret(Eret),
    /// `ESTO ...`.
    Esto(Esto),
    /// `LIST [path]` (leading `-flags` are dropped).
    List(Option<String>),
    /// `NLST [path]`.
    Nlst(Option<String>),
    /// `MLST [path]`.
    Mlst(Option<String>),
    /// `MLSD [path]`.
    Mlsd(Option<String>),
    /// `MLSR [path]`: recursive MLSD (Globus).
    Mlsr(Option<String>),
    /// `MLSC [path]`: directory listing on the control channel (Globus).
    Mlsc(Option<String>),
    /// `SIZE path`.
    Size(String),
    /// `MDTM path`.
    Mdtm(String),
    /// `MFMT YYYYMMDDHHMMSS path`.
    Mfmt {
        /// Seconds since the Unix epoch (UTC).
        mtime: i64,
        /// File path.
        path: String,
    },
    /// `CWD path`.
    Cwd(String),
    /// `CDUP`.
    Cdup,
    /// `PWD`.
    Pwd,
    /// `MKD path`.
    Mkd(String),
    /// `RMD path`.
    Rmd(String),
    /// `DELE path`.
    Dele(String),
    /// `RNFR path`.
    Rnfr(String),
    /// `RNTO path`.
    Rnto(String),
    /// `ALLO bytes` (`ALLO n R m` is accepted, the record size ignored).
    Allo(u64),
    /// `ABOR`.
    Abor,
    /// `SBUF bytes`.
    Sbuf(u64),
    /// `CKSM alg offset length path`; `length` is `None` for `-1` (to end of file).
    Cksm {
        /// Algorithm name, upper-cased (MD5, ADLER32, CRC32C, SHA1, SHA256, SHA512 ...).
        algorithm: String,
        /// First byte.
        offset: u64,
        /// Bytes, `None` to the end.
        length: Option<u64>,
        /// File path.
        path: String,
    },
    /// `SCKS alg value`: expected checksum of the next STOR (Globus).
    Scks {
        /// Algorithm name, upper-cased.
        algorithm: String,
        /// Expected checksum as sent (hex).
        value: String,
    },
    /// `DCAU N|A|S subject`.
    Dcau(Dcau),
    /// `TREV RESTART|PERF seconds`.
    Trev {
        /// Which marker.
        event: TrevEvent,
        /// Interval in seconds.
        interval: u32,
    },
    /// `LANG [lang]`.
    Lang(Option<String>),
    /// `SITE ...`.
    Site(SiteCommand),
}

impl Command {
    /// Parses one command line (with or without the trailing CRLF).
    ///
    /// As Globus does, the verb (letters only) is upper-cased, arguments are separated by runs
    /// of spaces, and the last argument a command takes is the rest of the line, spaces (also
    /// trailing ones) included: `RETR my file ` names `my file `.
    pub fn parse(line: &[u8]) -> Result<Command, CommandError> {
        parse::parse_line(line)
    }

    /// [`Command::parse`] for a line already in a string.
    pub fn parse_str(line: &str) -> Result<Command, CommandError> {
        parse::parse_line(line.as_bytes())
    }

    /// The upper-cased verb (`SITE` for site commands).
    pub fn verb(&self) -> &'static str {
        format::verb(self)
    }
}

impl std::str::FromStr for Command {
    type Err = CommandError;

    fn from_str(line: &str) -> Result<Command, CommandError> {
        Command::parse_str(line)
    }
}

impl Command {
    /// `PORT` for an IPv4 address, `EPRT` for any other: what a client sends to name its
    /// listener, or a third-party source to name its peer.
    pub fn port_or_eprt(hp: HostPort) -> Command {
        match hp.to_port_form() {
            Some(_) => Command::Port(hp),
            None => Command::Eprt(hp),
        }
    }
}

impl fmt::Display for Command {
    /// The wire form without CRLF; `Command::parse` of it gives back an equal value.
    ///
    /// That holds for every value `parse` can produce, as long as the canonical line stays
    /// within [`MAX_COMMAND_LINE`] (it can be a few bytes longer than the line it was parsed
    /// from: `OPTS MLST a` is written `OPTS MLST a;`, `SITE RBUFSZ` as `SITE RETRBUFSIZE`).
    /// Values `parse` cannot produce (an argument with a control character or leading space, a
    /// `LIST` path starting with `-`, an empty required argument, `OPTS CKSM` without markers,
    /// a time outside years 0-9999) are written as well as they can be.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        format::write_command(self, f)
    }
}
