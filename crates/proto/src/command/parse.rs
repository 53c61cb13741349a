//! Command line to [`Command`].

use super::{
    Command, CommandError, Dcau, EpsvArg, Eret, Esto, Protection, Restart, Structure, TransferMode,
    TransferType, TrevEvent, MAX_COMMAND_LINE,
};
use crate::args::Args;
use crate::civil::parse_timestamp;
use crate::hostport::{HostPort, HostPortError};
use crate::opts::parse_opts;
use crate::ranges::{parse_u64, RangeSet};
use crate::site::parse_site;

/// Parses one line (CRLF or LF optional).
pub(super) fn parse_line(line: &[u8]) -> Result<Command, CommandError> {
    if line.len() > MAX_COMMAND_LINE {
        return Err(CommandError::TooLong);
    }
    let line = line
        .strip_suffix(b"\r\n")
        .or_else(|| line.strip_suffix(b"\n"))
        .unwrap_or(line);
    let text = std::str::from_utf8(line).map_err(|_| CommandError::NotText)?;
    if text.chars().any(char::is_control) {
        return Err(CommandError::NotText);
    }
    let (verb, rest) = text.split_once(' ').unwrap_or((text, ""));
    if verb.is_empty() || !verb.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(CommandError::Malformed);
    }
    let verb = verb.to_ascii_uppercase();
    dispatch(Args::new(&verb, rest))
}

fn dispatch(a: Args<'_>) -> Result<Command, CommandError> {
    let path = |a: Args<'_>| a.required().map(str::to_owned);
    Ok(match a.verb() {
        "USER" => Command::User(path(a)?),
        "PASS" => Command::Pass(a.rest().to_owned()),
        "ACCT" => Command::Acct(path(a)?),
        "AUTH" => Command::Auth(path(a)?),
        "ADAT" => Command::Adat(path(a)?),
        "PBSZ" => Command::Pbsz(a.number()?),
        "PROT" => Command::Prot(protection(a)?),
        "FEAT" => a.none().map(|()| Command::Feat)?,
        "OPTS" => Command::Opts(parse_opts(a)?),
        "HELP" => Command::Help(a.optional()),
        "SYST" => a.none().map(|()| Command::Syst)?,
        "NOOP" => a.none().map(|()| Command::Noop)?,
        "QUIT" => a.none().map(|()| Command::Quit)?,
        "STAT" => Command::Stat(a.optional()),
        "TYPE" => Command::Type(transfer_type(a)?),
        "MODE" => Command::Mode(mode(a)?),
        "STRU" => Command::Stru(structure(a)?),
        "PASV" => a.none().map(|()| Command::Pasv)?,
        "EPSV" => Command::Epsv(epsv(a)?),
        "SPAS" => Command::Spas(spas(a)?),
        "PORT" => Command::Port(host_port(a, a.word()?, HostPort::parse_port)?),
        "EPRT" => Command::Eprt(host_port(a, a.word()?, HostPort::parse_eprt)?),
        "SPOR" => Command::Spor(spor(a)?),
        "REST" => Command::Rest(restart(a)?),
        "RETR" => Command::Retr(path(a)?),
        "STOR" => Command::Stor(path(a)?),
        "STOU" => Command::Stou(a.optional()),
        "APPE" => Command::Appe(path(a)?),
        "ERET" => Command::Eret(eret(a)?),
        "ESTO" => Command::Esto(esto(a)?),
        "LIST" => Command::List(without_flags(a)),
        "NLST" => Command::Nlst(without_flags(a)),
        "MLST" => Command::Mlst(a.optional()),
        "MLSD" => Command::Mlsd(a.optional()),
        "MLSR" => Command::Mlsr(a.optional()),
        "MLSC" => Command::Mlsc(a.optional()),
        "SIZE" => Command::Size(path(a)?),
        "MDTM" => Command::Mdtm(path(a)?),
        "MFMT" => mfmt(a)?,
        "CWD" => Command::Cwd(path(a)?),
        "CDUP" => a.none().map(|()| Command::Cdup)?,
        "PWD" => a.none().map(|()| Command::Pwd)?,
        "MKD" => Command::Mkd(path(a)?),
        "RMD" => Command::Rmd(path(a)?),
        "DELE" => Command::Dele(path(a)?),
        "RNFR" => Command::Rnfr(path(a)?),
        "RNTO" => Command::Rnto(path(a)?),
        "ALLO" => Command::Allo(allo(a)?),
        "ABOR" => a.none().map(|()| Command::Abor)?,
        "SBUF" => Command::Sbuf(a.number()?),
        "CKSM" => cksm(a)?,
        "SCKS" => {
            let [algorithm, value] = a.exactly::<2>()?;
            let value = value.trim_end_matches(' ');
            Command::Scks {
                algorithm: algorithm.to_ascii_uppercase(),
                value: value.to_owned(),
            }
        }
        "DCAU" => Command::Dcau(dcau(a)?),
        "TREV" => trev(a)?,
        "LANG" => Command::Lang(a.optional()),
        "SITE" => Command::Site(parse_site(a)?),
        other => return Err(CommandError::Unknown(other.to_owned())),
    })
}

/// The single word argument, upper-cased.
fn upper_word(a: Args<'_>) -> Result<String, CommandError> {
    Ok(a.word()?.to_ascii_uppercase())
}

fn protection(a: Args<'_>) -> Result<Protection, CommandError> {
    match upper_word(a)?.as_str() {
        "C" => Ok(Protection::Clear),
        "S" => Ok(Protection::Safe),
        "E" => Ok(Protection::Confidential),
        "P" => Ok(Protection::Private),
        level if level.len() == 1 => {
            Err(a.unsupported(format!("{level} protection level not supported")))
        }
        _ => Err(a.bad("bad protection level")),
    }
}

fn transfer_type(a: Args<'_>) -> Result<TransferType, CommandError> {
    let upper = upper_word(a)?;
    let words: Vec<&str> = upper.split(' ').filter(|w| !w.is_empty()).collect();
    match words.as_slice() {
        ["A"] | ["A", "N"] => Ok(TransferType::Ascii),
        ["I"] | ["L", "8"] => Ok(TransferType::Image),
        ["A", "T" | "C"] | ["E", ..] | ["L", _] => {
            Err(a.unsupported(format!("type {upper} not supported")))
        }
        _ => Err(a.bad(format!("'{upper}' unrecognized type"))),
    }
}

fn mode(a: Args<'_>) -> Result<TransferMode, CommandError> {
    match upper_word(a)?.as_str() {
        "S" => Ok(TransferMode::Stream),
        "E" => Ok(TransferMode::Extended),
        m @ ("B" | "C") => Err(a.unsupported(format!("mode {m} not supported"))),
        m => Err(a.bad(format!("'{m}' unrecognized transfer mode"))),
    }
}

fn structure(a: Args<'_>) -> Result<Structure, CommandError> {
    match upper_word(a)?.as_str() {
        "F" => Ok(Structure::File),
        "R" => Ok(Structure::Record),
        "P" => Ok(Structure::Page),
        _ => Err(a.bad("unrecognized structure")),
    }
}

fn epsv(a: Args<'_>) -> Result<Option<EpsvArg>, CommandError> {
    if a.rest().is_empty() {
        return Ok(None);
    }
    match upper_word(a)?.as_str() {
        "1" => Ok(Some(EpsvArg::Protocol(1))),
        "2" => Ok(Some(EpsvArg::Protocol(2))),
        "ALL" => Ok(Some(EpsvArg::All)),
        _ => Err(a.bad("Invalid protocol")),
    }
}

fn spas(a: Args<'_>) -> Result<bool, CommandError> {
    if a.rest().is_empty() {
        return Ok(false);
    }
    match a.word()? {
        "2" => Ok(true),
        _ => Err(a.bad("expected SPAS or SPAS 2")),
    }
}

fn host_port(
    a: Args<'_>,
    text: &str,
    parse: fn(&str) -> Result<HostPort, HostPortError>,
) -> Result<HostPort, CommandError> {
    parse(text).map_err(|err| match err {
        HostPortError::UnsupportedProtocol => CommandError::UnsupportedNetworkProtocol {
            verb: a.verb().to_owned(),
        },
        other => a.bad(other.to_string()),
    })
}

fn spor(a: Args<'_>) -> Result<Vec<HostPort>, CommandError> {
    a.required()?
        .split(' ')
        .filter(|w| !w.is_empty())
        .map(|w| host_port(a, w, HostPort::parse_any))
        .collect()
}

fn restart(a: Args<'_>) -> Result<Restart, CommandError> {
    let word = a.word()?;
    if word.contains('-') {
        RangeSet::parse(word)
            .map(Restart::Ranges)
            .map_err(|e| a.bad(e.to_string()))
    } else {
        Ok(Restart::Stream(a.number()?))
    }
}

/// `name="params" path`, as ERET and ESTO take for modules other than P and A.
fn module<'a>(a: Args<'a>) -> Result<(String, String, String), CommandError> {
    let text = a.rest();
    let (name, after) = text
        .split_once("=\"")
        .ok_or_else(|| a.bad("bad parameter"))?;
    let (params, after) = after
        .split_once('"')
        .ok_or_else(|| a.bad("unterminated parameters"))?;
    if name.is_empty() || name.contains([' ', '"', '=']) {
        return Err(a.bad("bad module name"));
    }
    let path = after
        .strip_prefix(' ')
        .ok_or_else(|| a.bad("missing path"))?;
    let path = Args::new(a.verb(), path).required()?;
    Ok((name.to_owned(), params.to_owned(), path.to_owned()))
}

/// Whether the arguments start with the one-letter module `letter` and a space.
fn is_module(a: Args<'_>, letter: char) -> bool {
    let mut chars = a.rest().chars();
    chars
        .next()
        .is_some_and(|c| c.eq_ignore_ascii_case(&letter))
        && chars.next() == Some(' ')
}

fn eret(a: Args<'_>) -> Result<Eret, CommandError> {
    if is_module(a, 'P') {
        let [_, offset, length, path] = a.exactly::<4>()?;
        let number = |s: &str| parse_u64(s).ok_or_else(|| a.bad(format!("'{s}' is not a number")));
        return Ok(Eret::Partial {
            offset: number(offset)?,
            length: number(length)?,
            path: path.to_owned(),
        });
    }
    let (name, params, path) = module(a)?;
    Ok(Eret::Module { name, params, path })
}

fn esto(a: Args<'_>) -> Result<Esto, CommandError> {
    if is_module(a, 'A') {
        let [_, offset, path] = a.exactly::<3>()?;
        let offset =
            parse_u64(offset).ok_or_else(|| a.bad(format!("'{offset}' is not a number")))?;
        return Ok(Esto::Adjusted {
            offset,
            path: path.to_owned(),
        });
    }
    let (name, params, path) = module(a)?;
    Ok(Esto::Module { name, params, path })
}

/// LIST/NLST path with leading `-flag` words dropped.
fn without_flags(a: Args<'_>) -> Option<String> {
    let mut rest = a.rest();
    while rest.starts_with('-') {
        rest = rest
            .split_once(' ')
            .map_or("", |(_, after)| after.trim_start_matches(' '));
    }
    (!rest.is_empty()).then(|| rest.to_owned())
}

fn mfmt(a: Args<'_>) -> Result<Command, CommandError> {
    let [time, path] = a.exactly::<2>()?;
    let mtime = parse_timestamp(time).ok_or_else(|| a.bad("Invalid command arguments"))?;
    Ok(Command::Mfmt {
        mtime,
        path: path.to_owned(),
    })
}

fn allo(a: Args<'_>) -> Result<u64, CommandError> {
    let word = a.word()?;
    let words: Vec<&str> = word.split(' ').filter(|w| !w.is_empty()).collect();
    let number = |s: &str| parse_u64(s).ok_or_else(|| a.bad(format!("'{s}' is not a number")));
    match words.as_slice() {
        [size] => number(size),
        [size, r, record] if r.eq_ignore_ascii_case("R") => {
            number(record)?;
            number(size)
        }
        _ => Err(a.bad("expected ALLO <bytes> [R <record size>]")),
    }
}

fn cksm(a: Args<'_>) -> Result<Command, CommandError> {
    let [algorithm, offset, length, path] = a.exactly::<4>()?;
    let number = |s: &str| parse_u64(s).ok_or_else(|| a.bad(format!("'{s}' is not a number")));
    let length = if length == "-1" {
        None
    } else {
        Some(number(length)?)
    };
    Ok(Command::Cksm {
        algorithm: algorithm.to_ascii_uppercase(),
        offset: number(offset)?,
        length,
        path: path.to_owned(),
    })
}

fn dcau(a: Args<'_>) -> Result<Dcau, CommandError> {
    let tokens = match a.exactly::<2>() {
        Ok([mode, subject]) => (mode, Some(subject)),
        Err(_) => (a.word()?, None),
    };
    match (tokens.0.to_ascii_uppercase().as_str(), tokens.1) {
        ("N", None) => Ok(Dcau::None),
        ("A", None) => Ok(Dcau::Self_),
        ("S", Some(subject)) => Ok(Dcau::Subject(subject.to_owned())),
        ("S", None) => Err(a.bad("DCAU S expected subject")),
        ("N" | "A", Some(_)) => Err(a.bad("Bad Parameter to DCAU")),
        (m, _) if m.len() == 1 => Err(a.unsupported("Bad DCAU mode")),
        _ => Err(a.bad("Bad Parameter to DCAU")),
    }
}

fn trev(a: Args<'_>) -> Result<Command, CommandError> {
    let [event, interval] = a.exactly::<2>()?;
    let event = match event.to_ascii_uppercase().as_str() {
        "RESTART" => TrevEvent::Restart,
        "PERF" => TrevEvent::Perf,
        _ => return Err(a.unsupported("Unsupported event")),
    };
    let interval = interval.trim_end_matches(' ');
    let interval = parse_u64(interval)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| a.bad(format!("'{interval}' is not an interval")))?;
    Ok(Command::Trev { event, interval })
}
