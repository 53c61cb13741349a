//! The active side's HTTP client: one HTTP/1.1 connection per request to the passive server,
//! over TLS checked against the grid CAs (the door's CA directory) and the system's, following
//! redirects for GETs.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use http::{header, HeaderValue, Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use openssl::ssl::{SslConnector, SslMethod, SslVersion};
use tokio::net::TcpStream;

use crate::body::Body;

/// How long connecting (TCP and TLS) and the answer's head may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// Redirects a GET follows.
const MAX_REDIRECTS: usize = 5;

/// What the door's outgoing requests go by: TLS settings, and the networks it does not copy
/// with (`https.tpc-deny-networks`).
pub(crate) struct Outgoing {
    tls: SslConnector,
    deny: Vec<ipnet::IpNet>,
}

impl Outgoing {
    /// Whether `ip` may be copied with; the refusal names the setting.
    pub(crate) fn allows(&self, host: &str, ip: std::net::IpAddr) -> Result<(), String> {
        // An IPv4-mapped IPv6 address is its IPv4 address.
        let ip = match ip {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
            v4 => v4,
        };
        match self.deny.iter().find(|n| n.contains(&ip)) {
            Some(net) => Err(format!(
                "{host} is {ip}, in {net}: this server does not copy with that network ([https] tpc-deny-networks)"
            )),
            None => Ok(()),
        }
    }

    /// The addresses of `host:port` it may connect to: all of them, or the refusal.
    pub(crate) async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
        let addrs: Vec<SocketAddr> =
            tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((host, port)))
                .await
                .map_err(|_| format!("{host}: no address in {} s", CONNECT_TIMEOUT.as_secs()))?
                .map_err(|e| format!("{host}: {e}"))?
                .collect();
        for a in &addrs {
            self.allows(host, a.ip())?;
        }
        Ok(addrs)
    }
}

/// The door's outgoing requests' settings: TLS trusting `ca_dir` and the system's CAs, and
/// the networks in `deny` refused.
pub(crate) fn connector(ca_dir: Option<&Path>, deny: &[ipnet::IpNet]) -> Result<Outgoing, String> {
    Ok(Outgoing {
        tls: tls_connector(ca_dir)?,
        deny: deny.to_vec(),
    })
}

/// The TLS settings of the door's outgoing requests.
fn tls_connector(ca_dir: Option<&Path>) -> Result<SslConnector, String> {
    let mut b = SslConnector::builder(SslMethod::tls_client()).map_err(|e| e.to_string())?;
    b.set_min_proto_version(Some(SslVersion::TLS1_2))
        .map_err(|e| e.to_string())?;
    b.set_default_verify_paths().map_err(|e| e.to_string())?;
    if let Some(dir) = ca_dir.filter(|d| d.is_dir()) {
        b.load_verify_locations(None, Some(dir))
            .map_err(|e| format!("the CA directory {}: {e}", dir.display()))?;
    }
    b.set_alpn_protos(b"\x08http/1.1")
        .map_err(|e| e.to_string())?;
    Ok(b.build())
}

/// An answer of the passive server, and the address it came from.
pub(crate) struct Answer {
    pub(crate) response: Response<Incoming>,
    pub(crate) peer: SocketAddr,
    /// How long the TCP connection took to open: about one round trip.
    pub(crate) rtt: Duration,
    /// The URL that answered (after redirects), and the headers it was sent.
    pub(crate) url: String,
    pub(crate) headers: Vec<(String, String)>,
}

/// Sends `method` for `url` with `headers` and `body` (a GET: none), following redirects for
/// GETs (a redirect to another host drops `Authorization`, as dCache and StoRM do).
pub(crate) async fn send(
    tls: &Outgoing,
    method: Method,
    url: &str,
    headers: &[(String, String)],
    body: Body,
    length: Option<u64>,
) -> Result<Answer, String> {
    let mut url: Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let mut headers = headers.to_vec();
    let mut body = Some(body);
    for _ in 0..=MAX_REDIRECTS {
        let exchange = once(
            tls,
            &method,
            &url,
            &headers,
            body.take().unwrap_or(Body::Empty),
            length,
        );
        // A GET or HEAD is answered at once; a PUT only when its body is through, which takes
        // as long as it takes (the caller watches its progress).
        let mut answer = if method == Method::PUT {
            exchange.await?
        } else {
            tokio::time::timeout(CONNECT_TIMEOUT, exchange)
                .await
                .map_err(|_| format!("{url}: no answer in {} s", CONNECT_TIMEOUT.as_secs()))??
        };
        let status = answer.response.status();
        let location = answer
            .response
            .headers()
            .get(header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .map(str::to_owned);
        let redirect = matches!(
            status,
            StatusCode::MOVED_PERMANENTLY
                | StatusCode::FOUND
                | StatusCode::SEE_OTHER
                | StatusCode::TEMPORARY_REDIRECT
                | StatusCode::PERMANENT_REDIRECT
        );
        match (redirect && method == Method::GET, location) {
            (true, Some(to)) => {
                let next = resolve(&url, &to)?;
                if next.authority() != url.authority() {
                    headers.retain(|(n, _)| !n.eq_ignore_ascii_case("authorization"));
                }
                url = next;
            }
            _ => {
                answer.url = url.to_string();
                answer.headers = headers;
                return Ok(answer);
            }
        }
    }
    Err(format!("{url}: more than {MAX_REDIRECTS} redirects"))
}

fn resolve(base: &Uri, location: &str) -> Result<Uri, String> {
    if location.starts_with('/') {
        let mut parts = base.clone().into_parts();
        parts.path_and_query = Some(location.parse().map_err(|e| format!("{location}: {e}"))?);
        return Uri::from_parts(parts).map_err(|e| format!("{location}: {e}"));
    }
    let to = ferry_proto::http::tpc::web_url(location).map_err(|e| e.to_string())?;
    to.parse().map_err(|e| format!("{location}: {e}"))
}

async fn once(
    tls: &Outgoing,
    method: &Method,
    url: &Uri,
    headers: &[(String, String)],
    body: Body,
    length: Option<u64>,
) -> Result<Answer, String> {
    let https = url.scheme_str() == Some("https");
    let host = url.host().ok_or_else(|| format!("{url}: no host"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = url.port_u16().unwrap_or(if https { 443 } else { 80 });
    let connecting = std::time::Instant::now();
    let addrs = tls.resolve(host, port).await?;
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&addrs[..]))
        .await
        .map_err(|_| {
            format!(
                "cannot connect to {host}:{port}: no answer in {} s",
                CONNECT_TIMEOUT.as_secs()
            )
        })?
        .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
    let rtt = connecting.elapsed();
    let _ = tcp.set_nodelay(true);
    let peer = tcp.peer_addr().map_err(|e| e.to_string())?;
    let mut request = Request::builder()
        .method(method.clone())
        .uri(url.path_and_query().map_or("/", |p| p.as_str()))
        .header(header::HOST, url.authority().map_or(host, |a| a.as_str()))
        .header(
            header::USER_AGENT,
            concat!("ferry-tpc/", env!("CARGO_PKG_VERSION")),
        );
    for (name, value) in headers {
        if let Ok(v) = HeaderValue::from_str(value) {
            request = request.header(name.as_str(), v);
        }
    }
    if let Some(n) = length {
        request = request.header(header::CONTENT_LENGTH, n);
    }
    let request = request.body(body).map_err(|e| e.to_string())?;
    let response = if https {
        let ssl = tls
            .tls
            .configure()
            .and_then(|c| c.into_ssl(host))
            .map_err(|e| e.to_string())?;
        let mut stream = tokio_openssl::SslStream::new(ssl, tcp).map_err(|e| e.to_string())?;
        tokio::time::timeout(CONNECT_TIMEOUT, std::pin::Pin::new(&mut stream).connect())
            .await
            .map_err(|_| {
                format!(
                    "TLS with {host}:{port}: no handshake in {} s",
                    CONNECT_TIMEOUT.as_secs()
                )
            })?
            .map_err(|e| format!("TLS with {host}:{port}: {e}"))?;
        exchange(stream, request).await?
    } else {
        exchange(tcp, request).await?
    };
    Ok(Answer {
        response,
        peer,
        rtt,
        url: String::new(),
        headers: Vec::new(),
    })
}

async fn exchange<S>(io: S, request: Request<Body>) -> Result<Response<Incoming>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // Header names as most clients write them: XRootD 5's HTTP door matches them exactly
    // (a lower-case content-length goes unseen and the PUT stores nothing).
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .title_case_headers(true)
        .handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("third-party copy connection ended: {e}");
        }
    });
    sender
        .send_request(request)
        .await
        .map_err(|e| format!("the request failed: {e}"))
}
