//! The site's bearer-token authority: the issuers the admin trusts (`[[tokens.issuer]]`), each
//! issuer's keys fetched over HTTPS as WLCG says (`<iss>/.well-known/openid-configuration`, then
//! its `jwks_uri`) and kept in a [`KeyCache`], and the validation of a presented token against
//! them. The checks themselves are `ferry-token`'s; this is the I/O above it.
//!
//! Issuers' HTTPS is verified against the system's trusted CAs, or the file and directory that
//! `SSL_CERT_FILE` and `SSL_CERT_DIR` name (OpenSSL's own variables), with host name checks.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferry_token::keys::{KeyCache, KeySet, Lookup};
use ferry_token::{Bearer, IssuerConfig, Issuers, TokenError};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use openssl::ssl::{SslConnector, SslMethod};
use serde::Deserialize;

/// How long one fetch (connection, TLS, request and answer) may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest issuer document read.
const MAX_DOCUMENT: usize = 1 << 20;
/// How often the refresher looks for key sets that are due.
const REFRESH_EVERY: Duration = Duration::from_secs(60);

/// The `[tokens]` table of `ferry.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TokensConfig {
    /// The trusted issuers (`[[tokens.issuer]]`).
    pub issuer: Vec<IssuerConfig>,
}

/// Where an issuer's key set comes from: HTTPS in service, a fixed set in tests.
pub trait KeySource: Send + Sync + std::fmt::Debug {
    /// The JWKS document of `issuer`, or why it cannot be had.
    fn jwks<'a>(
        &'a self,
        issuer: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<u8>, String>> + Send + 'a>>;
}

/// The trusted issuers and their keys.
#[derive(Debug)]
pub struct TokenAuthority {
    issuers: Issuers,
    keys: HashMap<String, tokio::sync::Mutex<KeyCache>>,
    source: Arc<dyn KeySource>,
}

fn unix_now() -> u64 {
    ferry_proto::clock::now_since_epoch().as_secs()
}

impl TokenAuthority {
    /// The authority of `config`, fetching keys over HTTPS; `None` when no issuer is configured.
    pub fn new(config: &TokensConfig) -> Result<Option<Arc<TokenAuthority>>, String> {
        Self::with_source(config, Arc::new(HttpsKeys::new()?))
    }

    /// [`TokenAuthority::new`] with keys from `source`.
    pub fn with_source(
        config: &TokensConfig,
        source: Arc<dyn KeySource>,
    ) -> Result<Option<Arc<TokenAuthority>>, String> {
        let issuers = Issuers::new(config.issuer.clone())?;
        if issuers.is_empty() {
            return Ok(None);
        }
        let keys = issuers
            .iter()
            .map(|i| {
                (
                    i.config.url.clone(),
                    tokio::sync::Mutex::new(KeyCache::new()),
                )
            })
            .collect();
        Ok(Some(Arc::new(TokenAuthority {
            issuers,
            keys,
            source,
        })))
    }

    /// Validates `token` now: its issuer, its key (fetched when unknown, at most once a minute),
    /// its signature, claims and scopes.
    pub async fn validate(&self, token: &str) -> Result<Bearer, TokenError> {
        let (jwt, issuer) = self.issuers.inspect(token)?;
        let url = &issuer.config.url;
        let Some(cache) = self.keys.get(url) else {
            return Err(TokenError::Issuer(url.clone()));
        };
        let now = unix_now();
        // Held across a fetch: tokens of the issuer wait for it rather than fetch again.
        let mut cache = cache.lock().await;
        loop {
            match cache.lookup(&jwt.kid, now) {
                Lookup::Found(key) => {
                    return self.issuers.validate(&jwt, issuer, key, now as i64);
                }
                Lookup::Fetch => {
                    let got = self.fetch(url).await;
                    if let Err(why) = &got {
                        tracing::warn!(issuer = %url, %why, "cannot fetch the issuer's keys");
                    }
                    cache.fetched(got, now);
                }
                Lookup::Unknown => {
                    return Err(TokenError::UnknownKey {
                        issuer: url.clone(),
                        kid: jwt.kid.clone(),
                    })
                }
                Lookup::NoKeys(why) => {
                    return Err(TokenError::NoKeys {
                        issuer: url.clone(),
                        why,
                    })
                }
            }
        }
    }

    async fn fetch(&self, issuer: &str) -> Result<KeySet, String> {
        let doc = self.source.jwks(issuer).await?;
        KeySet::parse(&doc).map_err(|e| e.to_string())
    }

    /// Fetches every key set that is due (an hour old, or never had), keeping the last good
    /// set of an issuer that cannot be reached.
    pub async fn refresh_due(&self) {
        for (url, cache) in &self.keys {
            let now = unix_now();
            if !cache.lock().await.due(now) {
                continue;
            }
            let got = self.fetch(url).await;
            match &got {
                Ok(set) => tracing::debug!(issuer = %url, keys = set.len(), "issuer keys fetched"),
                Err(why) => {
                    tracing::warn!(issuer = %url, %why, "cannot refresh the issuer's keys; the last ones stay")
                }
            }
            cache.lock().await.fetched(got, now);
        }
    }

    /// Refreshes key sets in the background for as long as the authority lives.
    pub fn spawn_refresher(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(me) = weak.upgrade() else { return };
                me.refresh_due().await;
                drop(me);
                tokio::time::sleep(REFRESH_EVERY).await;
            }
        })
    }
}

/// Issuers' key sets over HTTPS.
#[derive(Debug)]
pub struct HttpsKeys {
    connector: SslConnector,
}

/// What an issuer's metadata says of its keys.
#[derive(Deserialize)]
struct Metadata {
    jwks_uri: String,
}

impl HttpsKeys {
    /// A fetcher trusting the system's CAs (or `SSL_CERT_FILE`/`SSL_CERT_DIR`).
    pub fn new() -> Result<HttpsKeys, String> {
        let builder = SslConnector::builder(SslMethod::tls_client()).map_err(|e| e.to_string())?;
        Ok(HttpsKeys {
            connector: builder.build(),
        })
    }

    /// The body of a `GET url` that answered 200.
    async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
        let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        if uri.scheme_str() != Some("https") {
            return Err(format!("{url}: not https://"));
        }
        let host = uri.host().ok_or_else(|| format!("{url}: no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(443);
        let work = async {
            let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            let ssl = self
                .connector
                .configure()
                .and_then(|c| c.into_ssl(&host))
                .map_err(|e| e.to_string())?;
            let mut tls = tokio_openssl::SslStream::new(ssl, tcp).map_err(|e| e.to_string())?;
            std::pin::Pin::new(&mut tls)
                .connect()
                .await
                .map_err(|e| format!("{url}: TLS: {e}"))?;
            let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            let path = uri.path_and_query().map_or("/", |p| p.as_str());
            let authority = uri.authority().map_or(host.clone(), |a| a.to_string());
            let req = http::Request::get(path)
                .header(http::header::HOST, authority)
                .header(http::header::ACCEPT, "application/json")
                .body(Empty::<Bytes>::new())
                .map_err(|e| e.to_string())?;
            let answer = send
                .send_request(req)
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            let status = answer.status();
            let body = Limited::new(answer.into_body(), MAX_DOCUMENT)
                .collect()
                .await
                .map_err(|e| format!("{url}: {e}"))?
                .to_bytes();
            if status != http::StatusCode::OK {
                return Err(format!("{url} answered {status}"));
            }
            Ok(body.to_vec())
        };
        tokio::time::timeout(FETCH_TIMEOUT, work)
            .await
            .map_err(|_| format!("{url}: no answer in {} s", FETCH_TIMEOUT.as_secs()))?
    }
}

impl KeySource for HttpsKeys {
    fn jwks<'a>(
        &'a self,
        issuer: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<u8>, String>> + Send + 'a>>
    {
        Box::pin(async move {
            let iss = issuer.trim_end_matches('/');
            let metadata = self
                .get(&format!("{iss}/.well-known/openid-configuration"))
                .await?;
            let m: Metadata = serde_json::from_slice(&metadata)
                .map_err(|e| format!("{iss}'s openid-configuration: {e}"))?;
            if !m.jwks_uri.starts_with("https://") {
                return Err(format!("{iss}'s jwks_uri {} is not https://", m.jwks_uri));
            }
            self.get(&m.jwks_uri).await
        })
    }
}
