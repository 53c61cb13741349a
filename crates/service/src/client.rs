//! The service's client side, for `ferry submit`, `ferry jobs`, `ferry job`, `ferry cancel` and
//! `gcp --queue`: HTTPS with the user's proxy as client certificate (or a bearer token), the
//! server checked against the grid CAs and by host name, and delegation as FTS3's client does
//! it (a new proxy only when less than two hours remain).

use std::time::Duration;

use bytes::Bytes;
use ferry_gsi::{Credential, TrustStore};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
pub use hyper::Method;
use hyper::Request;
use hyper_util::rt::TokioIo;
use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
use serde_json::Value;

use crate::ServiceError;

/// Biggest answer read.
const MAX_ANSWER: usize = 256 << 20;
/// A delegated proxy is renewed when it has less than this left (FTS3's client's rule).
pub const RENEW_BELOW: Duration = Duration::from_secs(2 * 3600);
/// How long a new delegated proxy lives.
pub const DELEGATED_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// A connection setting for one service.
pub struct ServiceClient {
    host: String,
    port: u16,
    prefix: String,
    connector: SslConnector,
    token: Option<String>,
    credential: Option<Credential>,
    /// The connection of the last request, for the next.
    kept: tokio::sync::Mutex<Option<SendRequest<Full<Bytes>>>>,
}

impl ServiceClient {
    /// A client of the service at `url` as this process's user, with the CAs GSI tools trust,
    /// proving itself with the first of:
    /// - `token` (`--token`, `FERRY_TOKEN`);
    /// - a token the user named in `BEARER_TOKEN` or `BEARER_TOKEN_FILE`;
    /// - the user's proxy, where GSI tools look for it;
    /// - a token an agent left in `$XDG_RUNTIME_DIR/bt_u$UID` or `/tmp/bt_u$UID`.
    pub fn for_user(url: &str, token: Option<String>) -> Result<ServiceClient, ServiceError> {
        use ferry_gsi::credential::process_env;
        let trust = TrustStore::load(&TrustStore::default_dir(&process_env))
            .map_err(|e| ServiceError::Config(format!("the trusted CAs: {e}")))?;
        let found = || {
            ferry_token::discovery::discover(
                |k| std::env::var(k).ok(),
                |p| std::fs::read_to_string(p).ok(),
                nix::unistd::getuid().as_raw(),
            )
        };
        let (token, found) = match token {
            Some(t) => (Some(t), None),
            None => match found() {
                Some((t, place)) if place.is_named() => (Some(t), None),
                other => (None, other),
            },
        };
        if token.is_some() {
            return ServiceClient::new(url, &trust, None, token);
        }
        match Credential::find_user(&process_env, None) {
            Ok((credential, _)) => ServiceClient::new(url, &trust, Some(credential), None),
            Err(e) => match found {
                Some((t, place)) => {
                    tracing::debug!(%place, "no proxy: the bearer token found there is used");
                    ServiceClient::new(url, &trust, None, Some(t))
                }
                None => Err(ServiceError::Unauthorized(format!(
                    "{e}; or give a bearer token (--token, BEARER_TOKEN, BEARER_TOKEN_FILE)"
                ))),
            },
        }
    }

    /// Submits a job (`body` as `POST /jobs` takes it), delegating first when `delegate` and the
    /// service needs a proxy; the service's answer, and whether it delegated.
    pub async fn submit(
        &self,
        body: &Value,
        delegate: bool,
    ) -> Result<(Value, bool), ServiceError> {
        let delegated = delegate && self.delegate_if_needed().await?;
        let answer = self.json(Method::POST, "/jobs", Some(body)).await?;
        Ok((answer, delegated))
    }

    /// Polls job `id` until it ends and returns its last state: every 50 ms for the first 5 s,
    /// then every 0.25 s. `progress` sees the job every 2 s and at the end, so that a job of many
    /// files is not slowed by being watched.
    pub async fn wait(
        &self,
        id: &str,
        mut progress: impl FnMut(&Value),
    ) -> Result<Value, ServiceError> {
        let started = std::time::Instant::now();
        let mut said: Option<std::time::Instant> = None;
        loop {
            let job = self.json(Method::GET, &format!("/jobs/{id}"), None).await?;
            let state = job["job_state"].as_str().unwrap_or("?");
            let done = !matches!(state, "SUBMITTED" | "ACTIVE");
            if done || said.is_none_or(|t| t.elapsed() >= Duration::from_secs(2)) {
                said = Some(std::time::Instant::now());
                progress(&job);
            }
            if done {
                return Ok(job);
            }
            let pause = match started.elapsed() < Duration::from_secs(5) {
                true => 50,
                false => 250,
            };
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    /// A client of the service at `url` (`https://host:port[/prefix]`), trusting the CAs of
    /// `trust`, proving itself with `credential` (a proxy) or `token`.
    pub fn new(
        url: &str,
        trust: &TrustStore,
        credential: Option<Credential>,
        token: Option<String>,
    ) -> Result<ServiceClient, ServiceError> {
        let rest = url.strip_prefix("https://").ok_or_else(|| {
            ServiceError::Config(format!("the service URL '{url}' must start with https://"))
        })?;
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => (
                h.trim_start_matches('[').trim_end_matches(']').to_owned(),
                p.parse::<u16>().map_err(|_| {
                    ServiceError::Config(format!("the service URL '{url}' has a bad port"))
                })?,
            ),
            _ => (authority.to_owned(), 8446),
        };
        let mut b = SslConnector::builder(SslMethod::tls())?;
        b.set_cert_store(
            trust
                .x509_store()
                .map_err(|e| ServiceError::Config(e.to_string()))?,
        );
        b.set_verify(SslVerifyMode::PEER);
        if let Some(c) = &credential {
            b.set_certificate(&c.cert)?;
            b.set_private_key(&c.key)?;
            for x in &c.chain {
                b.add_extra_chain_cert(x.clone())?;
            }
        }
        Ok(ServiceClient {
            host,
            port,
            prefix: prefix.to_owned(),
            connector: b.build(),
            token,
            credential,
            kept: tokio::sync::Mutex::new(None),
        })
    }

    /// A new connection (TCP, TLS, HTTP/1.1) to the service.
    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, ServiceError> {
        let tcp = tokio::time::timeout(
            Duration::from_secs(20),
            tokio::net::TcpStream::connect((self.host.as_str(), self.port)),
        )
        .await
        .map_err(|_| {
            ServiceError::Http(format!("{}:{}: connection timed out", self.host, self.port))
        })?
        .map_err(|e| {
            ServiceError::Http(format!(
                "cannot reach the service at {}:{}: {e}",
                self.host, self.port
            ))
        })?;
        let ssl = self.connector.configure()?.into_ssl(&self.host)?;
        let mut tls = tokio_openssl::SslStream::new(ssl, tcp)?;
        std::pin::Pin::new(&mut tls).connect().await.map_err(|e| {
            ServiceError::Http(format!("TLS with the service at {}: {e}", self.host))
        })?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| ServiceError::Http(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(send)
    }

    /// One request; the status and the body. The connection stays open for the next request
    /// (a client that polls pays one TLS handshake, not one per question). A kept connection
    /// the service has closed meanwhile is replaced: before anything was sent on it, for any
    /// request; after, only for a question that changes nothing (GET).
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<(Vec<u8>, &str)>,
    ) -> Result<(u16, Vec<u8>), ServiceError> {
        self.request_with_headers(method, path, body, &[]).await
    }

    /// [`ServiceClient::request`] with more headers (what a browser would add, say).
    pub async fn request_with_headers(
        &self,
        method: Method,
        path: &str,
        body: Option<(Vec<u8>, &str)>,
        headers: &[(&str, &str)],
    ) -> Result<(u16, Vec<u8>), ServiceError> {
        let body = body.map(|(b, ct)| (Bytes::from(b), ct.to_owned()));
        let build = || {
            let mut req = Request::builder()
                .method(method.clone())
                .uri(format!("{}{}", self.prefix, path))
                .header(hyper::header::HOST, format!("{}:{}", self.host, self.port))
                .header(hyper::header::ACCEPT, "application/json");
            if let Some(t) = &self.token {
                req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
            }
            for (name, value) in headers {
                req = req.header(*name, *value);
            }
            let full = match &body {
                Some((b, ct)) => {
                    req = req.header(hyper::header::CONTENT_TYPE, ct.as_str());
                    Full::new(b.clone())
                }
                None => Full::new(Bytes::new()),
            };
            req.body(full)
                .map_err(|e| ServiceError::Http(e.to_string()))
        };
        let kept = self.kept.lock().await.take().filter(|s| !s.is_closed());
        if let Some(mut send) = kept {
            if send.ready().await.is_ok() {
                match Self::exchange(&mut send, build()?).await {
                    Ok(answer) => {
                        *self.kept.lock().await = Some(send);
                        return Ok(answer);
                    }
                    Err(e) if method != Method::GET => return Err(e),
                    Err(_) => {}
                }
            }
        }
        let mut send = self.connect().await?;
        let answer = Self::exchange(&mut send, build()?).await?;
        *self.kept.lock().await = Some(send);
        Ok(answer)
    }

    /// Sends `req` and reads the whole answer.
    async fn exchange(
        send: &mut SendRequest<Full<Bytes>>,
        req: Request<Full<Bytes>>,
    ) -> Result<(u16, Vec<u8>), ServiceError> {
        let resp = tokio::time::timeout(Duration::from_secs(120), send.send_request(req))
            .await
            .map_err(|_| ServiceError::Http("the service did not answer in 120 s".into()))?
            .map_err(|e| ServiceError::Http(e.to_string()))?;
        let status = resp.status().as_u16();
        let bytes = Limited::new(resp.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| ServiceError::Http(format!("reading the answer: {e}")))?
            .to_bytes();
        Ok((status, bytes.to_vec()))
    }

    /// A request whose answer is JSON; an error status becomes the service's message.
    pub async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ServiceError> {
        let body = body.map(|b| (b.to_string().into_bytes(), "application/json"));
        let (status, bytes) = self.request(method, path, body).await?;
        check(status, &bytes)?;
        serde_json::from_slice(&bytes)
            .map_err(|e| ServiceError::Http(format!("the service's answer is not JSON: {e}")))
    }

    /// Delegates a proxy when the service has none for the caller or it has less than
    /// [`RENEW_BELOW`] left. Returns whether it delegated.
    pub async fn delegate_if_needed(&self) -> Result<bool, ServiceError> {
        let Some(cred) = &self.credential else {
            return Ok(false);
        };
        let me = self.json(Method::GET, "/whoami", None).await?;
        let id = me["delegation_id"]
            .as_str()
            .ok_or_else(|| ServiceError::Http("whoami has no delegation_id".into()))?
            .to_owned();
        let current = self
            .json(Method::GET, &format!("/delegation/{id}"), None)
            .await?;
        if let Some(t) = current["termination_time"].as_str() {
            let fmt =
                time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");
            if let Ok(t) = time::PrimitiveDateTime::parse(t, &fmt) {
                let left = t.assume_utc().unix_timestamp() - crate::now();
                if left > RENEW_BELOW.as_secs() as i64 {
                    return Ok(false);
                }
            }
        }
        let (status, request) = self
            .request(Method::GET, &format!("/delegation/{id}/request"), None)
            .await?;
        check(status, &request)?;
        let cred = cred.clone();
        let signed = tokio::task::spawn_blocking(move || {
            crate::delegation::sign_request(&cred, &request, DELEGATED_LIFETIME)
        })
        .await
        .map_err(|e| ServiceError::Tls(e.to_string()))??;
        let (status, answer) = self
            .request(
                Method::PUT,
                &format!("/delegation/{id}/credential"),
                Some((signed, "application/x-pem-file")),
            )
            .await?;
        check(status, &answer)?;
        Ok(true)
    }
}

/// The job that copies `jobs` (a planned copy) as `options` ask: its files, with their sizes,
/// and FTS3's parameters for the retries, the verification and the streams.
pub fn copy_submission(jobs: &[ferry_client::Job], options: &ferry_client::CopyOptions) -> Value {
    use ferry_client::Location;
    let url = |l: &Location| match l {
        Location::Remote(r) => r.to_url(),
        Location::Local(p) => p.display().to_string(),
    };
    let files: Vec<Value> = jobs
        .iter()
        .map(|j| serde_json::json!({"sources": [url(&j.src)], "destinations": [url(&j.dst)], "filesize": j.size}))
        .collect();
    let verify = match &options.verify {
        None => Some("none"),
        Some(v) if v.required => Some("both"),
        Some(_) => None,
    };
    let streams = options.request.parallelism;
    serde_json::json!({
        "files": files,
        "params": {
            "retry": if options.retries == 0 { -1 } else { i64::from(options.retries) },
            "retry_delay": options.retry_wait.as_secs().max(1),
            "overwrite": true,
            "verify_checksum": verify,
            "nostreams": (streams > 0).then_some(streams),
        }
    })
}

fn check(status: u16, body: &[u8]) -> Result<(), ServiceError> {
    if (200..300).contains(&status) {
        return Ok(());
    }
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    Err(match status {
        400 => ServiceError::BadRequest(message),
        401 => ServiceError::Unauthorized(message),
        403 => ServiceError::Forbidden(message),
        404 => ServiceError::NotFound(message),
        409 => ServiceError::Conflict(message),
        413 => ServiceError::TooLarge(message),
        415 => ServiceError::UnsupportedMediaType(message),
        _ => ServiceError::Http(format!("the service answered {status}: {message}")),
    })
}

impl From<openssl::ssl::Error> for ServiceError {
    fn from(e: openssl::ssl::Error) -> Self {
        ServiceError::Tls(e.to_string())
    }
}
