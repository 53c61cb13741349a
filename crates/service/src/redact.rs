//! Passwords out of everything the service shows or keeps as text: `ftp://user:secret@host/…`
//! URLs are kept whole for the transfer, but what is stored as a reason, logged, or answered
//! shows `***` in place of the password.

use ferry_client::Location;

/// What stands in for a password.
const MASK: &str = "***";

/// A URL as shown: its password (`ftp://alice:secret@host/…`) as `***`.
pub fn url(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    // The authority ends where the path begins, as the URL parser splits it.
    let end = url[start..].find('/').map_or(url.len(), |i| start + i);
    mask_userinfo(url, start, end)
}

/// A free text (an error, a reason) as shown: the password of every `scheme://user:pw@` in
/// it as `***`, and every password of `urls` wherever it appears (a server may echo it, a
/// message may hold it decoded or cut from its URL).
pub fn text(text: &str, urls: &[&str]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let start = i + 3;
        // In running text an authority also ends at a blank or a quote; a password holding
        // one is still masked below, by its value.
        let end = rest[start..]
            .find(|c: char| {
                c == '/' || c.is_whitespace() || matches!(c, '\'' | '"' | '`' | '<' | '>')
            })
            .map_or(rest.len(), |j| start + j);
        out.push_str(&mask_userinfo(&rest[..end], start, end));
        rest = &rest[end..];
    }
    out.push_str(rest);
    for secret in urls.iter().flat_map(|u| passwords(u)) {
        if !secret.is_empty() && secret != MASK {
            out = out.replace(&secret, MASK);
        }
    }
    out
}

/// `s` with the password of the authority `s[start..end]` masked.
fn mask_userinfo(s: &str, start: usize, end: usize) -> String {
    let authority = &s[start..end];
    match authority.rfind('@') {
        Some(at) => match authority[..at].find(':') {
            Some(colon) => format!("{}{MASK}{}", &s[..start + colon + 1], &s[start + at..]),
            None => s.to_owned(),
        },
        None => s.to_owned(),
    }
}

/// A URL's password as written and as decoded (`%40` and `@`), when it has one.
fn passwords(url: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return out;
    };
    let end = url[start..].find('/').map_or(url.len(), |i| start + i);
    let authority = &url[start..end];
    if let Some(at) = authority.rfind('@') {
        if let Some((_, written)) = authority[..at].split_once(':') {
            out.push(written.to_owned());
        }
    }
    if let Ok(Location::Remote(r)) = Location::parse(url) {
        if let Some(decoded) = r.password.filter(|p| !out.contains(p)) {
            out.push(decoded);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_urls_are_not_shown() {
        assert_eq!(
            url("ftp://alice:s3cret@host:21/a/b"),
            "ftp://alice:***@host:21/a/b"
        );
        assert_eq!(url("ftp://alice@host/a@b"), "ftp://alice@host/a@b");
        assert_eq!(url("gsiftp://host/x:y@z"), "gsiftp://host/x:y@z");
        assert_eq!(url("ftp://a:p@ss@host/x"), "ftp://a:***@host/x");
        assert_eq!(url("/local/path"), "/local/path");
    }

    #[test]
    fn passwords_in_error_texts_are_masked_wherever_they_appear() {
        assert_eq!(
            text("URL 'ftp://bob:hunter2@h:x/y' has a bad port", &[]),
            "URL 'ftp://bob:***@h:x/y' has a bad port"
        );
        assert_eq!(
            text("from ftp://a:one@h/x to ftps://b:two@k:990/y failed", &[]),
            "from ftp://a:***@h/x to ftps://b:***@k:990/y failed"
        );
        // Echoed by a server, decoded, or with a blank the pattern stops at: masked by value.
        let u = "ftp://bob:p%40ss%20word@h/x";
        assert_eq!(
            text("530 password p@ss word is wrong (p%40ss%20word)", &[u]),
            "530 password *** is wrong (***)"
        );
        assert_eq!(
            text(
                "the destination ftp://bob:p ss@h/x exists",
                &["ftp://bob:p ss@h/x"]
            ),
            "the destination ftp://bob:***@h/x exists"
        );
        // Nothing to mask: the text as it was.
        let plain = "server refused 'STOR /a:b@c': 550 no";
        assert_eq!(text(plain, &["gsiftp://h/x"]), plain);
        assert_eq!(text("ends with ://", &[]), "ends with ://");
    }
}
