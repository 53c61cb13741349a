//! scp-style operands: `host:path`, `user@host:path`, `[v6::addr]:path`, URLs and local paths.

use std::path::PathBuf;

/// One operand as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Name {
    /// A local path (no colon before the first slash, or starting with `/` or `.`).
    Local(PathBuf),
    /// `[user@]host:path`, to be translated into a transfer server's URL.
    Remote {
        /// The account named before `@`, if any.
        user: Option<String>,
        /// The host as written (brackets removed from an IPv6 address).
        host: String,
        /// The path after the colon (empty: the home directory).
        path: String,
    },
    /// A URL (`gsiftp://…`, `ftp://…`, `file://…`), used as it is.
    Url(String),
}

impl Name {
    /// Parses an operand the way scp does: a colon before any slash makes it remote.
    pub fn parse(s: &str) -> Result<Name, String> {
        if s.contains("://") {
            return Ok(Name::Url(s.to_string()));
        }
        if s.starts_with('/') || s.starts_with('.') || s.is_empty() {
            return Ok(Name::Local(PathBuf::from(s)));
        }
        let (user, rest) = match s.split_once('@') {
            Some((u, r)) if !u.contains('/') && !u.contains(':') => (Some(u), r),
            _ => (None, s),
        };
        let (host, path) = if let Some(inner) = rest.strip_prefix('[') {
            let (h, after) = inner
                .split_once(']')
                .ok_or_else(|| format!("'{s}': an IPv6 host needs its closing ]"))?;
            let path = after
                .strip_prefix(':')
                .ok_or_else(|| format!("'{s}': write [ADDRESS]:PATH"))?;
            (h, path)
        } else {
            match rest.split_once(':') {
                Some((h, p)) if !h.contains('/') => (h, p),
                _ => return Ok(Name::Local(PathBuf::from(s))),
            }
        };
        if host.is_empty() {
            return Err(format!("'{s}': no host before the colon"));
        }
        if user.is_some_and(str::is_empty) {
            return Err(format!("'{s}': no user before the @"));
        }
        Ok(Name::Remote {
            user: user.map(str::to_string),
            host: host.to_string(),
            path: path.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(user: Option<&str>, host: &str, path: &str) -> Name {
        Name::Remote {
            user: user.map(str::to_string),
            host: host.into(),
            path: path.into(),
        }
    }

    #[test]
    fn operands_parse_as_scp_reads_them() {
        let cases = [
            (
                "dtn.example.org:/data/x",
                remote(None, "dtn.example.org", "/data/x"),
            ),
            ("alice@dtn:/data/x", remote(Some("alice"), "dtn", "/data/x")),
            ("dtn:run 7.h5", remote(None, "dtn", "run 7.h5")),
            ("dtn:", remote(None, "dtn", "")),
            ("[2001:db8::1]:/x", remote(None, "2001:db8::1", "/x")),
            ("bob@[::1]:x", remote(Some("bob"), "::1", "x")),
            ("/tmp/a:b", Name::Local("/tmp/a:b".into())),
            ("./host:x", Name::Local("./host:x".into())),
            ("dir/file:x", Name::Local("dir/file:x".into())),
            ("plain.txt", Name::Local("plain.txt".into())),
            ("gsiftp://h/x", Name::Url("gsiftp://h/x".into())),
            ("file:///x", Name::Url("file:///x".into())),
        ];
        for (text, want) in cases {
            assert_eq!(Name::parse(text).as_ref(), Ok(&want), "{text}");
        }
        for bad in [":x", "@h:x", "[::1:x", "[::1]x"] {
            assert!(Name::parse(bad).is_err(), "{bad}");
        }
    }
}
