//! HTTP third-party copy (the WLCG/dCache draft `draft-http-tpc`, as XRootD, dCache and StoRM
//! serve it): what a `COPY` asks of its active party, and the performance markers and outcome
//! line the active party streams back.
//!
//! - Pull: `Source: <url>` names the file to GET into the request's path.
//! - Push: `Destination: <url>` on another server names where to PUT the request's file.
//! - `TransferHeader<Name>: v` goes to the passive party as `<Name>: v` (also the legacy
//!   `Copy-Header: <Name>: v`), except headers that frame or route the request.
//! - `Credential`: absent or `none` only (the client puts what the passive party needs into
//!   transfer headers), as XRootD and StoRM take it.

use std::net::SocketAddr;

use crate::http::dav;

/// Which way the data goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The active party GETs `remote` into the request path.
    Pull,
    /// The active party PUTs the request path to `remote`.
    Push,
}

/// What protocol the passive party speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// HTTP or HTTPS (WebDAV).
    Http,
    /// GridFTP (`gsiftp://`) or plain FTP (`ftp://`): the copy bridges the two worlds.
    GridFtp,
}

/// A third-party `COPY`, read from its headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copy {
    /// Pull or push.
    pub mode: Mode,
    /// The passive party's protocol.
    pub peer: Peer,
    /// The passive party's URL: `https://` or `http://` (`davs://` and `dav://` rewritten), or
    /// `gsiftp://` or `ftp://` as given.
    pub remote: String,
    /// Headers for the passive party.
    pub headers: Vec<(String, String)>,
    /// `X-Number-Of-Streams` (0: the active party chooses).
    pub streams: u32,
    /// `Overwrite` (default true).
    pub overwrite: bool,
    /// `RequireChecksumVerification`, where given.
    pub verify_checksum: Option<bool>,
}

/// Why a `COPY` cannot be taken (a 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TpcError {
    /// Both `Source` and a remote `Destination`.
    #[error("a COPY names either a Source (pull) or a Destination (push), not both")]
    Both,
    /// A scheme this door cannot copy with.
    #[error("{0}: unsupported scheme (https, http, davs, dav, gsiftp and ftp are)")]
    Scheme(String),
    /// A URL without a host.
    #[error("{0}: not a URL with a host")]
    Url(String),
    /// A header with a value outside its range.
    #[error("{0}")]
    Header(String),
}

/// Headers a client may not set on the passive request: they frame, route or upgrade it.
const NOT_FORWARDED: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "proxy-authorization",
    "range",
];

/// The most `X-Number-Of-Streams` may ask for (XRootD's bound).
pub const MAX_STREAMS: u32 = 100;

/// Reads a `COPY`'s headers (`(name, value)`, names in any case); `own` is this server's
/// `host[:port]`. `None`: not a third-party copy (a `Destination` on this server, or none).
pub fn parse<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    own: &str,
) -> Result<Option<Copy>, TpcError> {
    let mut source = None;
    let mut destination = None;
    let mut forwarded = Vec::new();
    let (mut credential, mut streams, mut overwrite, mut verify) = (None, None, None, None);
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        let value = value.trim();
        match lower.as_str() {
            "source" => source = Some(value.to_owned()),
            "destination" => destination = Some(value.to_owned()),
            "credential" => credential = Some(value.to_owned()),
            "x-number-of-streams" => streams = Some(value.to_owned()),
            "overwrite" => overwrite = Some(value.to_owned()),
            "requirechecksumverification" => verify = Some(value.to_owned()),
            "copy-header" => {
                if let Some((n, v)) = value.split_once(':') {
                    forward(&mut forwarded, n.trim(), v.trim());
                }
            }
            _ => {
                if let Some(n) = lower.strip_prefix("transferheader") {
                    // The name as the client wrote it, less the prefix.
                    forward(&mut forwarded, &name[name.len() - n.len()..], value);
                }
            }
        }
    }
    let remote_destination = match &destination {
        Some(d) => is_remote(d, own)?,
        None => false,
    };
    let (mode, remote) = match (source, remote_destination) {
        (Some(_), true) => return Err(TpcError::Both),
        (Some(_), false) if destination.is_some() => return Err(TpcError::Both),
        (Some(s), false) => (Mode::Pull, s),
        (None, true) => (Mode::Push, destination.unwrap_or_default()),
        (None, false) => return Ok(None),
    };
    match credential
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("none") => {}
        Some(other) => {
            return Err(TpcError::Header(format!(
                "Credential: {other} is not supported: put what the other server needs into \
                 TransferHeaderAuthorization and send Credential: none"
            )))
        }
    }
    let streams = match streams {
        None => 0,
        Some(s) => s
            .parse::<u32>()
            .ok()
            .filter(|n| *n <= MAX_STREAMS)
            .ok_or_else(|| {
                TpcError::Header(format!(
                    "X-Number-Of-Streams: {s} is not a number from 0 to {MAX_STREAMS}"
                ))
            })?,
    };
    let overwrite = dav::overwrite(overwrite.as_deref())
        .map_err(|_| TpcError::Header("Overwrite must be T or F".into()))?;
    let verify_checksum = match verify.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(v) => {
            return Err(TpcError::Header(format!(
                "RequireChecksumVerification: {v} is neither true nor false"
            )))
        }
    };
    let (peer, remote) = match gridftp_url(&remote)? {
        Some(url) => (Peer::GridFtp, url),
        None => (Peer::Http, web_url(&remote)?),
    };
    Ok(Some(Copy {
        mode,
        peer,
        remote,
        headers: forwarded,
        streams,
        overwrite,
        verify_checksum,
    }))
}

fn forward(out: &mut Vec<(String, String)>, name: &str, value: &str) {
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
    if valid && !NOT_FORWARDED.contains(&name.to_ascii_lowercase().as_str()) {
        out.push((name.to_owned(), value.to_owned()));
    }
}

/// Whether a `Destination` names another server than `own` (`host[:port]`).
fn is_remote(destination: &str, own: &str) -> Result<bool, TpcError> {
    if destination.starts_with('/') {
        return Ok(false);
    }
    if gridftp_url(destination)?.is_some() {
        return Ok(true);
    }
    let target = dav::target(destination).map_err(|_| TpcError::Url(destination.to_owned()))?;
    Ok(target
        .authority
        .is_some_and(|a| !a.eq_ignore_ascii_case(own)))
}

/// `url` if it names a GridFTP or FTP server (`gsiftp://`, `ftp://`), with its scheme in lower
/// case; `None` for any other scheme. A login in the URL (`ftp://user:password@host/`) is kept:
/// FTP has no other place for it.
pub fn gridftp_url(url: &str) -> Result<Option<String>, TpcError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(None);
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "gsiftp" && scheme != "ftp" {
        return Ok(None);
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    if host.is_empty() || !rest[authority.len()..].starts_with('/') {
        return Err(TpcError::Url(url.to_owned()));
    }
    Ok(Some(format!("{scheme}://{rest}")))
}

/// `url` as the HTTP client fetches it: `davs://` is `https://`, `dav://` is `http://`.
pub fn web_url(url: &str) -> Result<String, TpcError> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| TpcError::Url(url.to_owned()))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "https" | "davs" => "https",
        "http" | "dav" => "http",
        _ => return Err(TpcError::Scheme(url.to_owned())),
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || host.contains('@') {
        return Err(TpcError::Url(url.to_owned()));
    }
    Ok(format!("{scheme}://{rest}"))
}

/// A performance marker: `bytes` moved so far, at `timestamp` (unix seconds), over the
/// connections to `remote`.
pub fn perf_marker(timestamp: u64, bytes: u64, remote: &[SocketAddr]) -> String {
    let mut m = format!(
        "Perf Marker\nTimestamp: {timestamp}\nStripe Index: 0\nStripe Bytes Transferred: {bytes}\nTotal Stripe Count: 1\n"
    );
    if !remote.is_empty() {
        let list: Vec<String> = remote.iter().map(|a| format!("tcp:{a}")).collect();
        m.push_str(&format!("RemoteConnections: {}\n", list.join(",")));
    }
    m.push_str("End\n");
    m
}

/// The last line of a copy that succeeded.
pub const SUCCESS: &str = "success: Created\n";

/// The last line of a copy that failed: `why` on one line.
pub fn failure(why: &str) -> String {
    let one: String = why
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!("failure: {}\n", one.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(h: &[(&str, &str)]) -> Result<Option<Copy>, TpcError> {
        parse(h.iter().copied(), "door.example:8443")
    }

    #[test]
    fn pull_and_push_are_told_apart_and_local_copies_left_alone() {
        let pull = copy(&[
            ("Source", "davs://src.example:1094/data/f"),
            ("TransferHeaderAuthorization", "Bearer abc"),
            ("Credential", "none"),
            ("X-Number-Of-Streams", "4"),
            ("Overwrite", "F"),
            ("RequireChecksumVerification", "true"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(pull.mode, Mode::Pull);
        assert_eq!(pull.remote, "https://src.example:1094/data/f");
        assert_eq!(
            pull.headers,
            vec![("Authorization".to_string(), "Bearer abc".to_string())]
        );
        assert_eq!((pull.streams, pull.overwrite), (4, false));
        assert_eq!(pull.verify_checksum, Some(true));
        let push = copy(&[("Destination", "https://dst.example/x")])
            .unwrap()
            .unwrap();
        assert_eq!(
            (push.mode, push.streams, push.overwrite),
            (Mode::Push, 0, true)
        );
        for local in [
            "/elsewhere/x",
            "https://door.example:8443/elsewhere/x",
            "https://DOOR.example:8443/x",
        ] {
            assert_eq!(copy(&[("Destination", local)]).unwrap(), None, "{local}");
        }
        assert_eq!(copy(&[]).unwrap(), None);
    }

    #[test]
    fn gridftp_peers_bridge_both_ways() {
        let pull = copy(&[("Source", "GSIFTP://globus.example:2811/data/f")])
            .unwrap()
            .unwrap();
        assert_eq!(
            (pull.mode, pull.peer, pull.remote.as_str()),
            (
                Mode::Pull,
                Peer::GridFtp,
                "gsiftp://globus.example:2811/data/f"
            )
        );
        // A GridFTP destination is never this door, whatever its authority.
        let push = copy(&[("Destination", "ftp://u:p@door.example:8443/x")])
            .unwrap()
            .unwrap();
        assert_eq!(
            (push.mode, push.peer, push.remote.as_str()),
            (Mode::Push, Peer::GridFtp, "ftp://u:p@door.example:8443/x")
        );
        let web = copy(&[("Source", "davs://a/x")]).unwrap().unwrap();
        assert_eq!(web.peer, Peer::Http);
    }

    #[test]
    fn what_cannot_be_done_is_refused_with_the_reason() {
        let bad = [
            vec![("Source", "https://a/x"), ("Destination", "https://b/y")],
            vec![("Source", "https://a/x"), ("Destination", "/local")],
            vec![("Source", "s3://a/x")],
            vec![("Source", "gsiftp:///x")],
            vec![("Source", "gsiftp://a")],
            vec![("Source", "https:///x")],
            vec![("Source", "https://user:pw@a/x")],
            vec![("Source", "https://a/x"), ("Credential", "gridsite")],
            vec![("Source", "https://a/x"), ("X-Number-Of-Streams", "101")],
            vec![("Source", "https://a/x"), ("X-Number-Of-Streams", "-1")],
            vec![("Source", "https://a/x"), ("Overwrite", "yes")],
            vec![
                ("Source", "https://a/x"),
                ("RequireChecksumVerification", "1"),
            ],
        ];
        for h in bad {
            assert!(copy(&h).is_err(), "{h:?}");
        }
    }

    #[test]
    fn transfer_headers_never_reframe_or_reroute_the_passive_request() {
        let c = copy(&[
            ("Source", "https://a/x"),
            ("TransferHeaderHost", "evil.example"),
            ("TransferHeaderContent-Length", "0"),
            ("TransferHeaderTransfer-Encoding", "chunked"),
            ("TransferHeader", "empty name"),
            ("TransferHeaderX\r\nInjected", "v"),
            ("Copy-Header", "SciTag: 65"),
            ("transferheaderauthorization", "Bearer t"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            c.headers,
            vec![
                ("SciTag".to_string(), "65".to_string()),
                ("authorization".to_string(), "Bearer t".to_string())
            ]
        );
    }

    #[test]
    fn markers_and_outcomes_are_written_as_davix_and_fts3_read_them() {
        let addr: SocketAddr = "[2001:db8::1]:1094".parse().unwrap();
        let m = perf_marker(
            1537788010,
            238745,
            &[addr, "192.0.2.7:443".parse().unwrap()],
        );
        assert_eq!(
            m,
            "Perf Marker\nTimestamp: 1537788010\nStripe Index: 0\nStripe Bytes Transferred: 238745\n\
             Total Stripe Count: 1\nRemoteConnections: tcp:[2001:db8::1]:1094,tcp:192.0.2.7:443\nEnd\n"
        );
        assert!(!perf_marker(1, 2, &[]).contains("RemoteConnections"));
        assert_eq!(failure("no such\nfile\r"), "failure: no such file\n");
        assert_eq!(SUCCESS, "success: Created\n");
    }
}
