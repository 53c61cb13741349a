//! What a user names: `ftp://` and `gsiftp://` URLs, `file://` URLs and plain local paths.

use std::fmt;
use std::path::PathBuf;

/// A URL scheme the client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `ftp://`: anonymous or password login.
    Ftp,
    /// `gsiftp://`: GSI login.
    GsiFtp,
    /// `ftps://`: FTP over TLS from the first byte (implicit FTPS).
    Ftps,
    /// `ftpes://`: FTP that turns to TLS with `AUTH TLS` before login (explicit FTPS).
    FtpEs,
}

impl Scheme {
    /// Whether the control and data connections run in TLS (RFC 4217).
    pub fn is_tls(self) -> bool {
        matches!(self, Scheme::Ftps | Scheme::FtpEs)
    }

    /// How URLs spell it.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Ftp => "ftp",
            Scheme::GsiFtp => "gsiftp",
            Scheme::Ftps => "ftps",
            Scheme::FtpEs => "ftpes",
        }
    }
}

/// A file or directory on a GridFTP server.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RemoteUrl {
    /// Scheme.
    pub scheme: Scheme,
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// Control port.
    pub port: u16,
    /// User name, if the URL has one.
    pub user: Option<String>,
    /// Password, if the URL has one.
    pub password: Option<String>,
    /// Path as sent in commands (percent escapes decoded); a trailing `/` names a directory.
    pub path: String,
}

/// Where a copy reads or writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A local file or directory.
    Local(PathBuf),
    /// A remote one.
    Remote(RemoteUrl),
}

/// Why a location does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// A scheme the client does not speak.
    #[error("unsupported URL scheme '{0}' (use ftp://, ftps://, ftpes://, gsiftp://, file:// or a local path)")]
    Scheme(String),
    /// No host in a remote URL.
    #[error("URL '{0}' has no host")]
    NoHost(String),
    /// A port that is not a number.
    #[error("URL '{0}' has a bad port")]
    Port(String),
    /// Bad percent escape.
    #[error("URL '{0}' has a bad %-escape")]
    Escape(String),
}

impl Location {
    /// Parses a URL or a local path.
    pub fn parse(s: &str) -> Result<Location, UrlError> {
        let Some((scheme, rest)) = s.split_once("://") else {
            return Ok(Location::Local(PathBuf::from(s)));
        };
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "ftp" => Scheme::Ftp,
            "gsiftp" => Scheme::GsiFtp,
            "ftps" => Scheme::Ftps,
            "ftpes" => Scheme::FtpEs,
            "file" => {
                // file:///abs/path or file://localhost/abs/path
                let path = rest.strip_prefix("localhost").unwrap_or(rest);
                return Ok(Location::Local(PathBuf::from(
                    percent_decode(path).ok_or_else(|| UrlError::Escape(s.into()))?,
                )));
            }
            other => return Err(UrlError::Scheme(other.into())),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((n, p)) => (Some(dec(n, s)?), Some(dec(p, s)?)),
                None => (Some(dec(u, s)?), None),
            },
            None => (None, None),
        };
        let (host, port) = split_host_port(hostport).ok_or_else(|| UrlError::Port(s.into()))?;
        if host.is_empty() {
            return Err(UrlError::NoHost(s.into()));
        }
        // The ports globus-url-copy and every FTP client assume.
        let port = port.unwrap_or(match scheme {
            Scheme::Ftp | Scheme::FtpEs => 21,
            Scheme::GsiFtp => 2811,
            Scheme::Ftps => 990,
        });
        let path = percent_decode(path).ok_or_else(|| UrlError::Escape(s.into()))?;
        Ok(Location::Remote(RemoteUrl {
            scheme,
            host,
            port,
            user,
            password,
            path,
        }))
    }

    /// Whether the location names a directory by its spelling (trailing `/`).
    pub fn names_dir(&self) -> bool {
        match self {
            Location::Local(p) => p.as_os_str().to_string_lossy().ends_with('/'),
            Location::Remote(r) => r.path.ends_with('/'),
        }
    }
}

fn dec(s: &str, whole: &str) -> Result<String, UrlError> {
    percent_decode(s).ok_or_else(|| UrlError::Escape(whole.into()))
}

/// `host`, `host:port`, `[v6]`, `[v6]:port`.
fn split_host_port(s: &str) -> Option<(String, Option<u16>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse().ok()?),
            None if after.is_empty() => None,
            None => return None,
        };
        return Some((h.to_string(), port));
    }
    match s.rsplit_once(':') {
        Some((h, p)) => Some((h.to_string(), Some(p.parse().ok()?))),
        None => Some((s.to_string(), None)),
    }
}

/// Decodes `%XX` escapes; `None` for a malformed one.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl RemoteUrl {
    /// The same server with another path.
    pub fn with_path(&self, path: impl Into<String>) -> RemoteUrl {
        RemoteUrl {
            path: path.into(),
            ..self.clone()
        }
    }

    /// `host:port` for connecting (brackets around IPv6).
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Parses a URL that must name a server.
    pub fn parse(s: &str) -> Result<RemoteUrl, crate::ClientError> {
        match Location::parse(s)? {
            Location::Remote(r) => Ok(r),
            Location::Local(_) => Err(crate::ClientError::Usage(format!(
                "'{s}' is not a remote URL (ftp://host/path)"
            ))),
        }
    }

    /// The path `to` names on this URL's server: a path, or a URL of the same server (and
    /// login); a rename cannot go elsewhere.
    pub fn path_here(&self, to: &str) -> Result<String, crate::ClientError> {
        match Location::parse(to)? {
            Location::Remote(t) if t.same_server(self) => Ok(t.path),
            Location::Remote(_) => Err(crate::ClientError::Usage(
                "mv works within one server; use ferry copy then ferry rm".into(),
            )),
            Location::Local(p) => Ok(p.to_string_lossy().into_owned()),
        }
    }

    /// Whether two URLs are on the same server with the same login (sessions can be shared).
    pub fn same_server(&self, other: &RemoteUrl) -> bool {
        self.scheme == other.scheme
            && self.host == other.host
            && self.port == other.port
            && self.user == other.user
            && self.password == other.password
    }
}

impl RemoteUrl {
    /// The whole URL, password included, %-escaped so that [`Location::parse`] gives back this
    /// very value: for handing a copy to another program (the transfer service).
    pub fn to_url(&self) -> String {
        fn esc(s: &str, keep_slash: bool) -> String {
            let mut out = String::with_capacity(s.len());
            for b in s.bytes() {
                let plain = b.is_ascii_alphanumeric()
                    || b"-._~!$&'()*+,;=".contains(&b)
                    || (keep_slash && (b == b'/' || b == b':' || b == b'@'));
                if plain {
                    out.push(b as char);
                } else {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
            out
        }
        let mut url = format!("{}://", self.scheme.name());
        if let Some(u) = &self.user {
            url.push_str(&esc(u, false));
            if let Some(p) = &self.password {
                url.push(':');
                url.push_str(&esc(p, false));
            }
            url.push('@');
        }
        url.push_str(&self.authority());
        url.push_str(&esc(&self.path, true));
        url
    }
}

impl fmt::Display for RemoteUrl {
    /// The URL without its password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme.name())?;
        if let Some(u) = &self.user {
            write!(f, "{u}@")?;
        }
        write!(f, "{}{}", self.authority(), self.path)
    }
}

impl fmt::Debug for RemoteUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_url_parses_back_to_the_same_value() {
        for s in [
            "gsiftp://host.example:2812/data/a b%25c#d?e",
            "ftp://us%40er:p%3Ass@10.0.0.1/x/y/",
            "ftps://[::1]:990/%C3%A9t%C3%A9",
        ] {
            let r = remote(s);
            assert_eq!(remote(&r.to_url()), r, "{s} -> {}", r.to_url());
        }
    }

    fn remote(s: &str) -> RemoteUrl {
        match Location::parse(s).unwrap() {
            Location::Remote(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn urls_parse_into_host_port_path_and_login() {
        let r = remote("ftp://alice:s%40cret@example.org:2812/data/a%20b.bin");
        assert_eq!(
            (r.host.as_str(), r.port, r.path.as_str()),
            ("example.org", 2812, "/data/a b.bin")
        );
        assert_eq!(r.user.as_deref(), Some("alice"));
        assert_eq!(r.password.as_deref(), Some("s@cret"));
        assert_eq!(r.to_string(), "ftp://alice@example.org:2812/data/a b.bin");
        let r = remote("gsiftp://[::1]/x/");
        assert_eq!(
            (r.host.as_str(), r.port, r.path.as_str()),
            ("::1", 2811, "/x/")
        );
        assert_eq!(r.authority(), "[::1]:2811");
        assert_eq!(remote("ftp://h").path, "/");
        assert_eq!(
            (remote("ftp://h/x").port, remote("gsiftp://h/x").port),
            (21, 2811)
        );
        assert_eq!(
            (remote("ftps://h/x").port, remote("ftpes://h/x").port),
            (990, 21)
        );
        assert_eq!(remote("ftpes://u@h/x").to_string(), "ftpes://u@h:21/x");
    }

    #[test]
    fn local_paths_and_file_urls_are_local() {
        assert_eq!(
            Location::parse("/tmp/x").unwrap(),
            Location::Local("/tmp/x".into())
        );
        assert_eq!(
            Location::parse("rel/x").unwrap(),
            Location::Local("rel/x".into())
        );
        assert_eq!(
            Location::parse("file:///tmp/a%20b").unwrap(),
            Location::Local("/tmp/a b".into())
        );
        assert!(Location::parse("http://x/y").is_err());
        assert!(Location::parse("ftp://h:notaport/x").is_err());
    }
}
