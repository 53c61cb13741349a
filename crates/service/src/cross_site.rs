//! Requests that other sites' pages make through a user's browser. A browser presents the
//! user's client certificate with any page's request, so without this check a page anywhere
//! could submit jobs as the user (run with the proxy they delegated) or reset their
//! delegation. Browsers say where a request comes from (`Sec-Fetch-Site`, `Origin`), and a page
//! cannot forge either; command-line clients (FTS3's `fts-rest-*`, `ferry`) send neither and
//! are not affected.

use axum::extract::Request;
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::ServiceError;

/// Refuses a request that changes something when its browser says another site's page made it.
pub(crate) async fn guard(req: Request, next: Next) -> Response {
    if changes_state(req.method(), req.uri().path()) {
        if let Some(why) = from_elsewhere(req.headers()) {
            return ServiceError::Forbidden(why).into_response();
        }
    }
    next.run(req).await
}

/// Whether a request may change something: every method but the reading ones, and FTS3's
/// `GET /delegation/{id}/request`, which replaces the caller's pending delegation key (FTS3's
/// client asks it with GET, so GET it stays).
fn changes_state(method: &Method, path: &str) -> bool {
    let reads = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    !reads || is_delegation_request(path)
}

fn is_delegation_request(path: &str) -> bool {
    path.strip_prefix("/delegation/")
        .and_then(|rest| rest.strip_suffix("/request"))
        .is_some_and(|id| !id.is_empty() && !id.contains('/'))
}

/// Why a request comes from a page of another site, as its browser says; `None` for one of
/// the service's own pages, one the user typed, or a client that is not a browser.
fn from_elsewhere(headers: &HeaderMap) -> Option<String> {
    if let Some(site) = headers.get("sec-fetch-site") {
        // `same-site` too: a sibling host's page is another origin all the same.
        if !matches!(site.as_bytes(), b"same-origin" | b"none") {
            return Some(format!(
                "refused: the browser says another site's page sent this (Sec-Fetch-Site: {})",
                String::from_utf8_lossy(site.as_bytes())
            ));
        }
    }
    let origin = headers.get(header::ORIGIN)?;
    let own = headers
        .get(header::HOST)
        .map(|host| format!("https://{}", String::from_utf8_lossy(host.as_bytes())));
    let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
    match own {
        Some(own) if same_origin(&origin, &own) => None,
        _ => Some(format!(
            "refused: a page of {origin} may not change anything here (only this service's own pages may)"
        )),
    }
}

/// Whether two `https://host[:port]` origins are the same (case aside, `:443` or not).
fn same_origin(a: &str, b: &str) -> bool {
    let norm = |o: &str| {
        let o = o.trim().to_ascii_lowercase();
        o.strip_suffix(":443").map(str::to_owned).unwrap_or(o)
    };
    norm(a) == norm(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn cross_site_browser_requests_are_told_apart_from_the_services_own_and_from_clients() {
        let host = ("host", "fts.example:8446");
        for ok in [
            headers(&[host]),
            // FTS3's client: no browser headers at all.
            headers(&[
                host,
                ("user-agent", "fts-rest-cli/3.14"),
                ("accept", "application/json"),
            ]),
            headers(&[
                host,
                ("sec-fetch-site", "same-origin"),
                ("origin", "https://fts.example:8446"),
            ]),
            headers(&[host, ("origin", "https://FTS.example:8446")]),
            headers(&[
                ("host", "fts.example"),
                ("origin", "https://fts.example:443"),
            ]),
            headers(&[host, ("sec-fetch-site", "none")]),
        ] {
            assert_eq!(from_elsewhere(&ok), None, "{ok:?}");
        }
        for refused in [
            headers(&[host, ("sec-fetch-site", "cross-site")]),
            headers(&[host, ("sec-fetch-site", "same-site")]),
            headers(&[host, ("origin", "https://evil.example")]),
            headers(&[host, ("origin", "http://fts.example:8446")]),
            headers(&[host, ("origin", "null")]),
            headers(&[("origin", "https://fts.example:8446")]),
            headers(&[
                host,
                ("sec-fetch-site", "same-origin"),
                ("origin", "https://evil.example"),
            ]),
        ] {
            assert!(from_elsewhere(&refused).is_some(), "{refused:?}");
        }
    }

    #[test]
    fn writes_and_the_delegation_request_change_state_and_reads_do_not() {
        assert!(changes_state(&Method::POST, "/jobs"));
        assert!(changes_state(&Method::DELETE, "/jobs/x"));
        assert!(changes_state(&Method::PUT, "/delegation/ab/credential"));
        assert!(changes_state(&Method::GET, "/delegation/ab/request"));
        assert!(!changes_state(&Method::GET, "/delegation/ab"));
        assert!(!changes_state(&Method::GET, "/jobs"));
        assert!(!changes_state(&Method::GET, "/dashboard"));
        assert!(!changes_state(&Method::HEAD, "/"));
    }
}
