//! Directory listings as plain FTP servers send them for `LIST`: the Unix `ls -l` form and the
//! DOS/IIS form. RFC 959 leaves the format to the server, so a client that must list a server
//! without `MLSD` (RFC 3659) reads whichever of the two common forms it finds, line by line.

/// What a listed entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListedKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Link,
    /// A device, pipe or socket.
    Other,
}

/// One entry of a `LIST` reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedEntry {
    /// The entry's name (for a link, without ` -> target`).
    pub name: String,
    /// What it is.
    pub kind: ListedKind,
    /// Size in bytes (none for devices).
    pub size: Option<u64>,
    /// Where a link points, when the server says.
    pub target: Option<String>,
}

/// Parses one `LIST` line; `None` for `total N`, `.`/`..`, and lines in neither form.
pub fn parse_list_line(line: &str) -> Option<ListedEntry> {
    let line = line.trim_end_matches(['\r', '\n']);
    let entry = parse_unix(line).or_else(|| parse_dos(line))?;
    (entry.name != "." && entry.name != "..").then_some(entry)
}

/// What a listed name is, for a client that joins it to a local or remote directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListedName {
    /// One plain path component: safe to join.
    Plain,
    /// `.` or `..`: the directory itself or its parent, whatever type the server gave it.
    SelfOrParent,
    /// Empty, or holding `/` or NUL: joined, it would name a path outside the directory listed.
    Unsafe,
}

/// Classifies a name a server listed: only [`ListedName::Plain`] names may be joined to the
/// directory they were listed in (a hostile server can send `../../x` or `/etc/x`).
pub fn listed_name(name: &str) -> ListedName {
    match name {
        "." | ".." => ListedName::SelfOrParent,
        n if n.is_empty() || n.contains(['/', '\0']) => ListedName::Unsafe,
        _ => ListedName::Plain,
    }
}

/// The whitespace-separated words of a line with where each starts.
fn words(line: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices() {
        match (c.is_ascii_whitespace(), start) {
            (true, Some(s)) => {
                out.push((s, &line[s..i]));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, &line[s..]));
    }
    out
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

fn is_month(w: &str) -> bool {
    MONTHS.iter().any(|m| w.eq_ignore_ascii_case(m))
}

fn is_day(w: &str) -> bool {
    (1..=2).contains(&w.len()) && w.bytes().all(|b| b.is_ascii_digit())
}

/// `HH:MM` (a recent file) or `YYYY` (an older one).
fn is_time_or_year(w: &str) -> bool {
    let b = w.as_bytes();
    match b.len() {
        4 => b.iter().all(u8::is_ascii_digit),
        5 => b[2] == b':' && [0, 1, 3, 4].iter().all(|&i| b[i].is_ascii_digit()),
        _ => false,
    }
}

/// `drwxr-xr-x 2 owner group 4096 Nov 25 12:00 name`; owner and group may be missing or
/// contain anything, so the date (`Mon DD HH:MM|YYYY`) anchors the line.
fn parse_unix(line: &str) -> Option<ListedEntry> {
    let w = words(line);
    let (_, perms) = *w.first()?;
    let kind = match perms.as_bytes().first()? {
        b'-' => ListedKind::File,
        b'd' => ListedKind::Dir,
        b'l' => ListedKind::Link,
        b'b' | b'c' | b'p' | b's' | b'D' => ListedKind::Other,
        _ => return None,
    };
    if perms.len() < 10 {
        return None;
    }
    let month = (2..w.len().saturating_sub(3))
        .find(|&i| is_month(w[i].1) && is_day(w[i + 1].1) && is_time_or_year(w[i + 2].1))?;
    let (name_at, _) = w[month + 3];
    let name = &line[name_at..];
    let size = match kind {
        ListedKind::Other => None,
        _ => Some(w[month - 1].1.parse().ok()?),
    };
    let (name, target) = match (kind, name.split_once(" -> ")) {
        (ListedKind::Link, Some((n, t))) => (n, Some(t.to_string())),
        _ => (name, None),
    };
    Some(ListedEntry {
        name: name.to_string(),
        kind,
        size,
        target,
    })
}

/// `11-25-26  12:00PM       <DIR>          name` or `… 1234 name` (IIS and other DOS-style
/// servers; the year may have four digits, the time may be 24-hour).
fn parse_dos(line: &str) -> Option<ListedEntry> {
    let w = words(line);
    if w.len() < 4 {
        return None;
    }
    let date = w[0].1.as_bytes();
    let date_ok = (date.len() == 8 || date.len() == 10)
        && date[2] == b'-'
        && date[5] == b'-'
        && date
            .iter()
            .enumerate()
            .all(|(i, b)| i == 2 || i == 5 || b.is_ascii_digit());
    let time = w[1].1.to_ascii_uppercase();
    let clock = time.trim_end_matches("AM").trim_end_matches("PM");
    let time_ok = clock.len() == 5 && is_time_or_year(clock);
    if !date_ok || !time_ok {
        return None;
    }
    let (kind, size) = if w[2].1.eq_ignore_ascii_case("<DIR>") {
        (ListedKind::Dir, None)
    } else {
        (
            ListedKind::File,
            Some(w[2].1.replace(',', "").parse().ok()?),
        )
    };
    Some(ListedEntry {
        name: line[w[3].0..].to_string(),
        kind,
        size,
        target: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(line: &str) -> (String, ListedKind, Option<u64>) {
        let e = parse_list_line(line).unwrap_or_else(|| panic!("no entry in {line:?}"));
        (e.name, e.kind, e.size)
    }

    #[test]
    fn listed_names_that_would_leave_their_directory_are_unsafe() {
        for name in [
            "../../victim/evil",
            "/etc/passwd",
            "a/b",
            "",
            "x\0y",
            "sub/",
        ] {
            assert_eq!(listed_name(name), ListedName::Unsafe, "{name:?}");
        }
        for name in [".", ".."] {
            assert_eq!(listed_name(name), ListedName::SelfOrParent, "{name:?}");
        }
        for name in ["big.bin", "sub dir", "..hidden", "...", "a\\b", "-"] {
            assert_eq!(listed_name(name), ListedName::Plain, "{name:?}");
        }
    }

    proptest! {
        #[test]
        fn only_plain_names_join_to_one_component(name in "\\PC{0,12}") {
            let joined = std::path::Path::new("/dst").join(&name);
            if listed_name(&name) == ListedName::Plain {
                prop_assert_eq!(joined.parent(), Some(std::path::Path::new("/dst")));
                prop_assert_eq!(joined.file_name(), Some(std::ffi::OsStr::new(&name)));
            }
        }
    }

    #[test]
    fn unix_lines_from_proftpd_and_pure_ftpd_parse() {
        // ProFTPD 1.3.8 and Pure-FTPd 1.0.50, as they answer LIST.
        assert_eq!(
            entry("-rw-r--r--   1 ftp      ftp       4194304 Nov 25 20:11 big.bin\r\n"),
            ("big.bin".into(), ListedKind::File, Some(4194304))
        );
        assert_eq!(
            entry("drwxr-xr-x    2 1000       1000             4096 Nov 25 20:11 sub dir"),
            ("sub dir".into(), ListedKind::Dir, Some(4096))
        );
        assert_eq!(
            entry("-rw-r--r--   1 ftp ftp 12 Jan  3  2019 old.txt"),
            ("old.txt".into(), ListedKind::File, Some(12))
        );
        let link = parse_list_line("lrwxrwxrwx 1 u g 7 Nov 25 20:11 latest -> big.bin").unwrap();
        assert_eq!(
            (link.name.as_str(), link.kind, link.target.as_deref()),
            ("latest", ListedKind::Link, Some("big.bin"))
        );
    }

    #[test]
    fn unix_lines_without_group_or_with_devices_parse() {
        assert_eq!(
            entry("-rw-r--r-- 1 owner 77 Feb 29 09:05 x"),
            ("x".into(), ListedKind::File, Some(77))
        );
        assert_eq!(
            entry("crw-rw-rw- 1 root root 1, 3 Nov 25 20:11 null"),
            ("null".into(), ListedKind::Other, None)
        );
        // A name that itself looks like a date stays whole.
        assert_eq!(
            entry("-rw-r--r-- 1 u g 5 Nov 25 20:11 Nov 25 2020 notes"),
            ("Nov 25 2020 notes".into(), ListedKind::File, Some(5))
        );
    }

    #[test]
    fn dos_lines_parse() {
        assert_eq!(
            entry("11-25-26  08:11PM       <DIR>          Program Files"),
            ("Program Files".into(), ListedKind::Dir, None)
        );
        assert_eq!(
            entry("11-25-2026  20:11             1,234,567 data.bin"),
            ("data.bin".into(), ListedKind::File, Some(1234567))
        );
    }

    #[test]
    fn totals_dots_and_garbage_are_not_entries() {
        for line in [
            "total 12",
            "drwxr-xr-x 2 u g 4096 Nov 25 20:11 .",
            "drwxr-xr-x 2 u g 4096 Nov 25 20:11 ..",
            "",
            "hello world",
            "-rw-r--r-- 1 u g notanumber Nov 25 20:11 x",
            "-rw-r--r-- 1 u g 5 Nov 25",
            "11-25-26 08:11PM",
        ] {
            assert_eq!(parse_list_line(line), None, "{line:?}");
        }
    }

    proptest! {
        #[test]
        fn any_line_parses_or_is_skipped_without_panic(line in "\\PC{0,120}") {
            let _ = parse_list_line(&line);
        }

        #[test]
        fn generated_unix_lines_give_back_name_and_size(
            size in any::<u64>(),
            name in "[A-Za-z0-9_.][A-Za-z0-9_. -]{0,30}[A-Za-z0-9_]",
            dir in any::<bool>(),
        ) {
            prop_assume!(name != "." && name != "..");
            let perms = if dir { "drwxr-xr-x" } else { "-rw-r--r--" };
            let line = format!("{perms}   1 user  group {size:>12} Nov 25 20:11 {name}");
            let e = parse_list_line(&line).unwrap();
            prop_assert_eq!(e.name, name);
            prop_assert_eq!(e.size, Some(size));
            prop_assert_eq!(e.kind, if dir { ListedKind::Dir } else { ListedKind::File });
        }
    }
}
