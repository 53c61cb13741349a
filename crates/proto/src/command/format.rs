//! [`Command`] to its canonical wire form, and the argument enums' letters.

use std::fmt;

use super::{
    Command, Dcau, EpsvArg, Eret, Esto, Protection, Restart, Structure, TransferMode, TransferType,
    TrevEvent,
};
use crate::civil::write_timestamp as timestamp;

/// The verb of `cmd`.
pub(super) fn verb(cmd: &Command) -> &'static str {
    match cmd {
        Command::User(_) => "USER",
        Command::Pass(_) => "PASS",
        Command::Acct(_) => "ACCT",
        Command::Auth(_) => "AUTH",
        Command::Adat(_) => "ADAT",
        Command::Pbsz(_) => "PBSZ",
        Command::Prot(_) => "PROT",
        Command::Feat => "FEAT",
        Command::Opts(_) => "OPTS",
        Command::Help(_) => "HELP",
        Command::Syst => "SYST",
        Command::Noop => "NOOP",
        Command::Quit => "QUIT",
        Command::Stat(_) => "STAT",
        Command::Type(_) => "TYPE",
        Command::Mode(_) => "MODE",
        Command::Stru(_) => "STRU",
        Command::Pasv => "PASV",
        Command::Epsv(_) => "EPSV",
        Command::Spas(_) => "SPAS",
        Command::Port(_) => "PORT",
        Command::Eprt(_) => "EPRT",
        Command::Spor(_) => "SPOR",
        Command::Rest(_) => "REST",
        Command::Retr(_) => "RETR",
        Command::Stor(_) => "STOR",
        Command::Stou(_) => "STOU",
        Command::Appe(_) => "APPE",
        Command::Eret(_) => "ERET",
        Command::Esto(_) => "ESTO",
        Command::List(_) => "LIST",
        Command::Nlst(_) => "NLST",
        Command::Mlst(_) => "MLST",
        Command::Mlsd(_) => "MLSD",
        Command::Mlsr(_) => "MLSR",
        Command::Mlsc(_) => "MLSC",
        Command::Size(_) => "SIZE",
        Command::Mdtm(_) => "MDTM",
        Command::Mfmt { .. } => "MFMT",
        Command::Cwd(_) => "CWD",
        Command::Cdup => "CDUP",
        Command::Pwd => "PWD",
        Command::Mkd(_) => "MKD",
        Command::Rmd(_) => "RMD",
        Command::Dele(_) => "DELE",
        Command::Rnfr(_) => "RNFR",
        Command::Rnto(_) => "RNTO",
        Command::Allo(_) => "ALLO",
        Command::Abor => "ABOR",
        Command::Sbuf(_) => "SBUF",
        Command::Cksm { .. } => "CKSM",
        Command::Scks { .. } => "SCKS",
        Command::Dcau(_) => "DCAU",
        Command::Trev { .. } => "TREV",
        Command::Lang(_) => "LANG",
        Command::Site(_) => "SITE",
    }
}

/// Writes `cmd` in its canonical form (no CRLF).
pub(super) fn write_command(cmd: &Command, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    f.write_str(verb(cmd))?;
    match cmd {
        Command::Feat
        | Command::Syst
        | Command::Noop
        | Command::Quit
        | Command::Pasv
        | Command::Cdup
        | Command::Pwd
        | Command::Abor => Ok(()),
        Command::User(s)
        | Command::Acct(s)
        | Command::Auth(s)
        | Command::Adat(s)
        | Command::Retr(s)
        | Command::Stor(s)
        | Command::Appe(s)
        | Command::Size(s)
        | Command::Mdtm(s)
        | Command::Cwd(s)
        | Command::Mkd(s)
        | Command::Rmd(s)
        | Command::Dele(s)
        | Command::Rnfr(s)
        | Command::Rnto(s) => write!(f, " {s}"),
        Command::Pass(s) => optional(f, Some(s).filter(|s| !s.is_empty())),
        Command::Help(s)
        | Command::Stat(s)
        | Command::Stou(s)
        | Command::List(s)
        | Command::Nlst(s)
        | Command::Mlst(s)
        | Command::Mlsd(s)
        | Command::Mlsr(s)
        | Command::Mlsc(s)
        | Command::Lang(s) => optional(f, s.as_ref()),
        Command::Pbsz(n) | Command::Allo(n) | Command::Sbuf(n) => write!(f, " {n}"),
        Command::Prot(p) => write!(f, " {p}"),
        Command::Opts(o) => write!(f, " {o}"),
        Command::Type(t) => write!(f, " {t}"),
        Command::Mode(m) => write!(f, " {m}"),
        Command::Stru(s) => write!(f, " {s}"),
        Command::Epsv(None) => Ok(()),
        Command::Epsv(Some(arg)) => write!(f, " {arg}"),
        Command::Spas(false) => Ok(()),
        Command::Spas(true) => f.write_str(" 2"),
        Command::Port(hp) => write!(f, " {hp}"),
        Command::Eprt(hp) => write!(f, " {}", hp.to_eprt_form()),
        Command::Spor(list) => list.iter().try_for_each(|hp| write!(f, " {hp}")),
        Command::Rest(Restart::Stream(n)) => write!(f, " {n}"),
        // "0-0" is the empty list that still reads as the range form.
        Command::Rest(Restart::Ranges(r)) if r.is_empty() => f.write_str(" 0-0"),
        Command::Rest(Restart::Ranges(r)) => write!(f, " {r}"),
        Command::Eret(Eret::Partial {
            offset,
            length,
            path,
        }) => {
            write!(f, " P {offset} {length} {path}")
        }
        Command::Eret(Eret::Module { name, params, path })
        | Command::Esto(Esto::Module { name, params, path }) => {
            write!(f, " {name}=\"{params}\" {path}")
        }
        Command::Esto(Esto::Adjusted { offset, path }) => write!(f, " A {offset} {path}"),
        Command::Mfmt { mtime, path } => {
            write!(f, " ")?;
            timestamp(f, *mtime)?;
            write!(f, " {path}")
        }
        Command::Cksm {
            algorithm,
            offset,
            length,
            path,
        } => {
            write!(f, " {algorithm} {offset} ")?;
            match length {
                Some(n) => write!(f, "{n}")?,
                None => f.write_str("-1")?,
            }
            write!(f, " {path}")
        }
        Command::Scks { algorithm, value } => write!(f, " {algorithm} {value}"),
        Command::Dcau(Dcau::None) => f.write_str(" N"),
        Command::Dcau(Dcau::Self_) => f.write_str(" A"),
        Command::Dcau(Dcau::Subject(s)) => write!(f, " S {s}"),
        Command::Trev { event, interval } => {
            let event = match event {
                TrevEvent::Restart => "RESTART",
                TrevEvent::Perf => "PERF",
            };
            write!(f, " {event} {interval}")
        }
        Command::Site(site) => write!(f, " {site}"),
    }
}

fn optional(f: &mut fmt::Formatter<'_>, arg: Option<&String>) -> fmt::Result {
    match arg {
        Some(s) => write!(f, " {s}"),
        None => Ok(()),
    }
}

impl fmt::Display for TransferType {
    /// The TYPE letter: `A` or `I`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransferType::Ascii => "A",
            TransferType::Image => "I",
        })
    }
}

impl fmt::Display for TransferMode {
    /// The MODE letter: `S` or `E`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransferMode::Stream => "S",
            TransferMode::Extended => "E",
        })
    }
}

impl fmt::Display for Structure {
    /// The STRU letter: `F`, `R` or `P`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Structure::File => "F",
            Structure::Record => "R",
            Structure::Page => "P",
        })
    }
}

impl fmt::Display for Protection {
    /// The PROT letter: `C`, `S`, `E` or `P`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protection::Clear => "C",
            Protection::Safe => "S",
            Protection::Confidential => "E",
            Protection::Private => "P",
        })
    }
}

impl fmt::Display for EpsvArg {
    /// The EPSV argument: the protocol number or `ALL`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EpsvArg::Protocol(n) => write!(f, "{n}"),
            EpsvArg::All => f.write_str("ALL"),
        }
    }
}
