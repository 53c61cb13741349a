//! Listing formats: MLSx facts, LIST (`ls -l` style) and NLST lines.

mod mdtm;

use std::fmt::Write as _;

use ferry_proto::civil::Civil;

use crate::{DirEntry, FileKind, Metadata};

pub use mdtm::{format_mdtm, parse_mdtm};

/// Every fact we can emit, in output order. `Charset` is only sent when selected.
const FACTS: &[&str] = &[
    "Type",
    "Modify",
    "Size",
    "Perm",
    "Charset",
    "UNIX.mode",
    "UNIX.owner",
    "UNIX.uid",
    "UNIX.group",
    "UNIX.gid",
    "Unique",
    "UNIX.slink",
];

/// Half a Gregorian year in seconds: `ls` shows a year instead of a time past this age.
const SIX_MONTHS: i64 = 31_556_952 / 2;

/// MLSx facts that can be selected with `OPTS MLST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactSelection {
    /// Lower-cased fact names to include; empty = the default set.
    pub facts: Vec<String>,
}

impl FactSelection {
    /// The default set: every fact but `Charset`.
    pub fn default_set() -> FactSelection {
        FactSelection { facts: Vec::new() }
    }

    /// Parses the argument of `OPTS MLST` (`type;size;modify;`), case-insensitively, keeping the
    /// facts we know and dropping the rest, as RFC 3659 asks.
    pub fn parse(list: &str) -> FactSelection {
        let mut facts: Vec<String> = Vec::new();
        for name in list.split(';').map(|f| f.trim().to_ascii_lowercase()) {
            if FACTS.iter().any(|f| f.eq_ignore_ascii_case(&name)) && !facts.contains(&name) {
                facts.push(name);
            }
        }
        FactSelection { facts }
    }

    /// Whether fact `name` (any case) is emitted.
    pub fn includes(&self, name: &str) -> bool {
        if self.facts.is_empty() {
            return !name.eq_ignore_ascii_case("charset");
        }
        self.facts.iter().any(|f| f.eq_ignore_ascii_case(name))
    }

    /// The selected facts in their canonical spelling, `Type;Size;`, for the `OPTS MLST` reply.
    pub fn to_opts_string(&self) -> String {
        FACTS
            .iter()
            .filter(|f| self.includes(f))
            .fold(String::new(), |mut s, f| {
                s.push_str(f);
                s.push(';');
                s
            })
    }
}

impl Default for FactSelection {
    fn default() -> FactSelection {
        FactSelection::default_set()
    }
}

/// The `Type=` value for an entry kind.
fn type_fact(kind: FileKind) -> &'static str {
    match kind {
        FileKind::File => "file",
        FileKind::Dir => "dir",
        // RFC 3659's spelling, which FileZilla, Python's ftplib users and others recognise.
        FileKind::Symlink => "OS.unix=slink",
        FileKind::CharDevice => "OS.unix=chr",
        FileKind::BlockDevice => "OS.unix=blk",
        FileKind::Fifo => "OS.unix=pipe",
        FileKind::Socket => "OS.unix=socket",
    }
}

/// Percent-encodes what would break a fact line: `%`, `;`, `=`, space and control characters.
fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c == '%' || c == ';' || c == '=' || c == ' ' || c.is_control() {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                let _ = write!(out, "%{b:02X}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The MLSx fact string for one entry: `Type=file;Modify=...;Size=...;...; ` (facts then a
/// single space, no name). `kind_override` is `cdir`/`pdir` for `.`/`..` entries. `perm` is the
/// `Perm=` letters the session's rights allow.
pub fn mlsx_facts(
    meta: &Metadata,
    kind_override: Option<&str>,
    perm: &str,
    sel: &FactSelection,
) -> String {
    let mut out = String::with_capacity(160);
    for fact in FACTS {
        if !sel.includes(fact) {
            continue;
        }
        // Writing to a String cannot fail.
        let _ = match *fact {
            "Type" => write!(
                out,
                "Type={};",
                kind_override.unwrap_or(type_fact(meta.kind))
            ),
            "Modify" => write!(out, "Modify={};", format_mdtm(meta.mtime)),
            "Size" => write!(out, "Size={};", meta.size),
            "Perm" => write!(out, "Perm={perm};"),
            "Charset" => write!(out, "Charset=UTF-8;"),
            "UNIX.mode" => write!(out, "UNIX.mode={:04o};", meta.mode & 0o7777),
            "UNIX.owner" => write!(out, "UNIX.owner={};", meta.uid),
            "UNIX.uid" => write!(out, "UNIX.uid={};", meta.uid),
            "UNIX.group" => write!(out, "UNIX.group={};", meta.gid),
            "UNIX.gid" => write!(out, "UNIX.gid={};", meta.gid),
            "Unique" => write!(out, "Unique={:x}-{:x};", meta.dev, meta.ino),
            "UNIX.slink" => match &meta.link_target {
                Some(target) => write!(out, "UNIX.slink={};", url_encode(target)),
                None => Ok(()),
            },
            _ => Ok(()),
        };
    }
    out.push(' ');
    out
}

/// `ls -l` permissions: type letter then three `rwx` triplets with setuid, setgid and sticky.
fn perms10(kind: FileKind, mode: u32) -> String {
    let type_char = match kind {
        FileKind::File => '-',
        FileKind::Dir => 'd',
        FileKind::Symlink => 'l',
        FileKind::CharDevice => 'c',
        FileKind::BlockDevice => 'b',
        FileKind::Fifo => 'p',
        FileKind::Socket => 's',
    };
    let bit = |mask: u32, c: char| if mode & mask != 0 { c } else { '-' };
    let exec = |x: u32, special: u32, set: char| match (mode & x != 0, mode & special != 0) {
        (true, true) => set,
        (false, true) => set.to_ascii_uppercase(),
        (true, false) => 'x',
        (false, false) => '-',
    };
    [
        type_char,
        bit(0o400, 'r'),
        bit(0o200, 'w'),
        exec(0o100, 0o4000, 's'),
        bit(0o040, 'r'),
        bit(0o020, 'w'),
        exec(0o010, 0o2000, 's'),
        bit(0o004, 'r'),
        bit(0o002, 'w'),
        exec(0o001, 0o1000, 't'),
    ]
    .iter()
    .collect()
}

/// Three-letter English month names.
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// One LIST line (no line end): `-rw-r--r--    1 1000     1000                5 Nov 22 15:30 name`.
/// Owner and group are numeric ids (names need NSS; the session may run confined). Times are
/// UTC: `HH:MM` within six months before `now`, else ` YYYY`, like `ls -l`.
pub fn list_line(entry: &DirEntry, now: i64) -> String {
    let meta = &entry.metadata;
    let c = Civil::from_unix(meta.mtime);
    let month = MONTHS
        .get(c.month.saturating_sub(1) as usize)
        .copied()
        .unwrap_or("???");
    let when = if meta.mtime > now - SIX_MONTHS && meta.mtime <= now {
        format!("{:02}:{:02}", c.hour, c.minute)
    } else {
        format!("{:>5}", c.year)
    };
    let mut line = format!(
        "{} {:>4} {:<8} {:<8} {:>12} {} {:>2} {} {}",
        perms10(meta.kind, meta.mode),
        meta.nlink,
        meta.uid,
        meta.gid,
        meta.size,
        month,
        c.day,
        when,
        entry.name
    );
    if let Some(target) = &meta.link_target {
        line.push_str(" -> ");
        line.push_str(target);
    }
    line
}

/// One NLST line (no line end): the bare name.
pub fn nlst_line(entry: &DirEntry) -> &str {
    &entry.name
}

#[cfg(test)]
mod tests;
