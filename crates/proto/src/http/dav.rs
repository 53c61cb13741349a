//! WebDAV request headers (RFC 4918 §10) and the paths in request targets, `Destination` and
//! `href`s: percent-decoding that refuses what would name something else than it seems
//! (encoded slashes, NUL, `..`), and the encoding the door writes back.

/// Why a request names no usable path or header value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DavError {
    /// A `%` not followed by two hex digits, or bytes that are not UTF-8 once decoded.
    #[error("the path is not valid percent-encoded UTF-8")]
    BadEncoding,
    /// `%2F` (an encoded slash) or `%00`: a name no file can have here.
    #[error("the path has an encoded slash or NUL")]
    EncodedSeparator,
    /// A `..` segment (encoded or not).
    #[error("the path has a '..' segment")]
    DotDot,
    /// A header with a value the RFC does not allow.
    #[error("bad {0} header")]
    BadHeader(&'static str),
}

/// `Depth` (RFC 4918 §10.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// The resource only.
    Zero,
    /// The resource and its members.
    One,
    /// The whole tree.
    Infinity,
}

/// Reads `Depth` (`None`: absent, the method's default applies).
pub fn depth(value: Option<&str>) -> Result<Option<Depth>, DavError> {
    match value.map(str::trim) {
        None => Ok(None),
        Some("0") => Ok(Some(Depth::Zero)),
        Some("1") => Ok(Some(Depth::One)),
        Some(v) if v.eq_ignore_ascii_case("infinity") => Ok(Some(Depth::Infinity)),
        Some(_) => Err(DavError::BadHeader("Depth")),
    }
}

/// Reads `Overwrite` (absent: `T`).
pub fn overwrite(value: Option<&str>) -> Result<bool, DavError> {
    match value.map(str::trim) {
        None | Some("T") | Some("t") => Ok(true),
        Some("F") | Some("f") => Ok(false),
        Some(_) => Err(DavError::BadHeader("Overwrite")),
    }
}

/// Percent-decodes a request path (`/a/b%20c`) into the path it names. Empty segments and `.`
/// are dropped; a trailing slash is reported (`true`), since it says "collection".
pub fn decode_path(raw: &str) -> Result<(String, bool), DavError> {
    let raw = raw.split('?').next().unwrap_or_default();
    let mut out = String::with_capacity(raw.len() + 1);
    for segment in raw.split('/') {
        let bytes = percent_decode(segment)?;
        if bytes.contains(&b'/') || bytes.contains(&0) {
            return Err(DavError::EncodedSeparator);
        }
        let name = String::from_utf8(bytes).map_err(|_| DavError::BadEncoding)?;
        match name.as_str() {
            "" | "." => {}
            ".." => return Err(DavError::DotDot),
            _ => {
                out.push('/');
                out.push_str(&name);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    let trailing = raw.len() > 1 && raw.ends_with('/');
    Ok((out, trailing))
}

fn percent_decode(s: &str) -> Result<Vec<u8>, DavError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).ok_or(DavError::BadEncoding)?;
            let v = std::str::from_utf8(hex)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or(DavError::BadEncoding)?;
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// Percent-encodes a path for an `href` or `Location`: unreserved characters and `/` stay,
/// everything else (spaces, `%`, non-ASCII) is escaped.
pub fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for &b in path.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A `Destination` (or `Source`) header: an absolute URL or an absolute path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `https`, `davs` …; `None` for a bare path.
    pub scheme: Option<String>,
    /// `host[:port]`, as written; `None` for a bare path.
    pub authority: Option<String>,
    /// The decoded path.
    pub path: String,
    /// Whether the path ended in `/`.
    pub trailing_slash: bool,
}

/// Reads a `Destination` header.
pub fn target(value: &str) -> Result<Target, DavError> {
    let value = value.trim();
    if value.starts_with('/') {
        let (path, trailing_slash) = decode_path(value)?;
        return Ok(Target {
            scheme: None,
            authority: None,
            path,
            trailing_slash,
        });
    }
    let (scheme, rest) = value
        .split_once("://")
        .ok_or(DavError::BadHeader("Destination"))?;
    if scheme.is_empty()
        || !scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+')
    {
        return Err(DavError::BadHeader("Destination"));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err(DavError::BadHeader("Destination"));
    }
    let (path, trailing_slash) = decode_path(path)?;
    Ok(Target {
        scheme: Some(scheme.to_ascii_lowercase()),
        authority: Some(authority.to_ascii_lowercase()),
        path,
        trailing_slash,
    })
}

/// `s` with XML's five special characters escaped (text and attribute values).
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn paths_decode_and_what_would_escape_is_refused() {
        assert_eq!(decode_path("/a/b%20c/").unwrap(), ("/a/b c".into(), true));
        assert_eq!(decode_path("/res-%e2%82%ac").unwrap().0, "/res-€");
        assert_eq!(decode_path("//a/./b?x=1").unwrap(), ("/a/b".into(), false));
        assert_eq!(decode_path("/").unwrap(), ("/".into(), false));
        assert_eq!(decode_path("/a/../b"), Err(DavError::DotDot));
        assert_eq!(decode_path("/a/%2e%2e/b"), Err(DavError::DotDot));
        assert_eq!(decode_path("/a%2fb"), Err(DavError::EncodedSeparator));
        assert_eq!(decode_path("/a%00"), Err(DavError::EncodedSeparator));
        assert_eq!(decode_path("/a%zz"), Err(DavError::BadEncoding));
        assert_eq!(decode_path("/a%ff"), Err(DavError::BadEncoding));
    }

    #[test]
    fn destinations_are_urls_or_paths() {
        let t = target("https://Host:8443/dir/new%20name").unwrap();
        assert_eq!(t.authority.as_deref(), Some("host:8443"));
        assert_eq!(t.path, "/dir/new name");
        assert_eq!(target("/x/").unwrap().path, "/x");
        assert!(target("x").is_err());
        assert!(target("https://user@host/x").is_err());
        assert!(target("https://h/../x").is_err());
    }

    #[test]
    fn headers_take_only_the_values_the_rfc_allows() {
        assert_eq!(depth(Some("infinity")).unwrap(), Some(Depth::Infinity));
        assert!(depth(Some("2")).is_err());
        assert!(overwrite(None).unwrap());
        assert!(!overwrite(Some("F")).unwrap());
        assert!(overwrite(Some("maybe")).is_err());
    }

    proptest! {
        #[test]
        fn an_encoded_path_decodes_to_itself(segs in proptest::collection::vec("[^/\0]{1,12}", 0..5)) {
            let segs: Vec<String> = segs.into_iter().filter(|s| s != "." && s != "..").collect();
            let path = if segs.is_empty() { "/".to_string() } else { format!("/{}", segs.join("/")) };
            prop_assert_eq!(decode_path(&encode_path(&path)).unwrap().0, path);
        }
    }
}
