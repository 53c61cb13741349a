//! Listing formats: MLSx facts, LIST (`ls -l` style) and NLST lines.

use crate::{DirEntry, Metadata};

/// MLSx facts that can be selected with `OPTS MLST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactSelection {
    /// Lower-cased fact names to include; empty = the default set.
    pub facts: Vec<String>,
}

/// The MLSx fact string for one entry: `Type=file;Modify=...;Size=...;...; ` (facts then a
/// single space, no name). `kind_override` is `cdir`/`pdir` for `.`/`..` entries. `perm` is the
/// `Perm=` letters the session's rights allow.
pub fn mlsx_facts(meta: &Metadata, kind_override: Option<&str>, perm: &str, sel: &FactSelection) -> String {
    let _ = (meta, kind_override, perm, sel);
    todo!()
}

/// One LIST line (no line end): `-rw-r--r--   1 owner    group         1234 Jan  2 03:04 name`.
/// Owner and group are numeric ids (names need NSS; the session may run confined).
pub fn list_line(entry: &DirEntry, now: i64) -> String {
    let _ = (entry, now);
    todo!()
}

/// `YYYYMMDDHHMMSS` (UTC) for MDTM and `Modify=`.
pub fn format_mdtm(mtime: i64) -> String {
    let _ = mtime;
    todo!()
}

/// Parses `YYYYMMDDHHMMSS[.fff]` (UTC) into seconds since the epoch.
pub fn parse_mdtm(s: &str) -> Option<i64> {
    let _ = s;
    todo!()
}
