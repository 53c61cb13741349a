//! Who is asking: an X.509 client certificate or RFC 3820 proxy chain, checked by the same
//! [`TrustStore::verify`] that GSI control and data channels use, or a bearer token: one from
//! the admin's token file, or a JSON Web Token of a trusted issuer (validated as the HTTPS door
//! validates it: `ferry_site::TokenAuthority`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use ferry_gsi::https::PeerCertificate;
use ferry_gsi::{Credential, TrustStore};
use openssl::ssl::{SslAcceptor, SslRef};
use sha2::{Digest, Sha256};

use crate::ServiceError;

/// A caller the service has verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The user's DN (the end-entity subject, proxy CNs left off), or the token's name.
    pub dn: String,
    /// Sees and cancels every user's jobs.
    pub admin: bool,
    /// How it was proven.
    pub via: Via,
}

/// How a caller proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// A client certificate or proxy chain in the TLS handshake.
    Certificate,
    /// `Authorization: Bearer …`.
    Token,
}

/// What a connection's TLS handshake proved, before any request.
#[derive(Debug, Clone)]
pub enum Peer {
    /// No client certificate.
    Anonymous,
    /// A chain that verified.
    Verified(Identity),
    /// A chain that did not verify, and why (each request gets the reason as its 401).
    Refused(String),
}

/// The service's rules for callers.
#[derive(Debug)]
pub struct Auth {
    trust: Arc<TrustStore>,
    /// SHA-256 of each token → the identity it stands for.
    tokens: HashMap<[u8; 32], String>,
    /// Trusted token issuers, if any.
    issuers: Option<Arc<ferry_site::TokenAuthority>>,
    admins: Vec<String>,
    /// Dashboard sessions: SHA-256 of the cookie → who and until when (unix seconds).
    sessions: std::sync::Mutex<HashMap<[u8; 32], (Identity, i64)>>,
}

/// How long a dashboard session lasts.
pub const SESSION_SECONDS: i64 = 12 * 3600;

impl Auth {
    /// Rules from the CAs in `trust`, a token file (`TOKEN IDENTITY` per line, `#` comments)
    /// and the admins' DNs or token identities.
    pub fn new(
        trust: Arc<TrustStore>,
        token_file: Option<&Path>,
        admins: Vec<String>,
    ) -> Result<Auth, ServiceError> {
        let mut tokens = HashMap::new();
        if let Some(path) = token_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                ServiceError::Config(format!(
                    "cannot read the token file {}: {e}",
                    path.display()
                ))
            })?;
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let (token, who) = line.split_once(char::is_whitespace).ok_or_else(|| {
                    ServiceError::Config(format!(
                        "{}:{}: a line is TOKEN IDENTITY",
                        path.display(),
                        n + 1
                    ))
                })?;
                if token.len() < 16 {
                    return Err(ServiceError::Config(format!(
                        "{}:{}: a token of {} characters is too easy to guess; use at least 16",
                        path.display(),
                        n + 1,
                        token.len()
                    )));
                }
                tokens.insert(
                    Sha256::digest(token.as_bytes()).into(),
                    who.trim().to_owned(),
                );
            }
        }
        Ok(Auth {
            trust,
            tokens,
            issuers: None,
            admins,
            sessions: std::sync::Mutex::new(HashMap::new()),
        })
    }

    /// Also takes the JSON Web Tokens of `issuers`.
    pub fn with_issuers(mut self, issuers: Option<Arc<ferry_site::TokenAuthority>>) -> Auth {
        self.issuers = issuers;
        self
    }

    /// The CAs.
    pub fn trust(&self) -> &Arc<TrustStore> {
        &self.trust
    }

    fn is_admin(&self, dn: &str) -> bool {
        self.admins.iter().any(|a| ferry_gsi::dn::same(a, dn))
    }

    /// What a finished handshake proved.
    pub fn peer_of(&self, ssl: &SslRef) -> Peer {
        match ferry_gsi::https::peer_certificate(&self.trust, ssl) {
            PeerCertificate::None => Peer::Anonymous,
            PeerCertificate::Verified(v) => Peer::Verified(Identity {
                dn: v.identity().to_owned(),
                admin: self.is_admin(v.identity()),
                via: Via::Certificate,
            }),
            PeerCertificate::Refused(e) => {
                Peer::Refused(format!("the client certificate is not accepted: {e}"))
            }
        }
    }

    /// The identity a bearer token stands for: a token of the token file, or a JSON Web Token
    /// of a trusted issuer (its identity `SUB@ISSUER`); why not, when it stands for nobody.
    pub async fn token(&self, token: &str) -> Result<Identity, String> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(who) = self.tokens.get(&digest) {
            return Ok(self.identity(who.clone()));
        }
        let jwt_shaped = token.bytes().filter(|&b| b == b'.').count() == 2;
        match &self.issuers {
            Some(issuers) if jwt_shaped => match issuers.validate(token).await {
                Ok(bearer) => {
                    let who = format!(
                        "{}@{}",
                        bearer.subject.as_deref().unwrap_or("-"),
                        bearer.issuer
                    );
                    tracing::debug!(%who, id = ?bearer.id, "bearer token accepted");
                    Ok(self.identity(who))
                }
                Err(e) => Err(format!("the bearer token is refused: {e}")),
            },
            _ => Err("the bearer token is not known".into()),
        }
    }

    fn identity(&self, who: String) -> Identity {
        Identity {
            admin: self.is_admin(&who),
            dn: who,
            via: Via::Token,
        }
    }
}

impl Auth {
    /// A new dashboard session for `who`: the cookie value to set. Only its hash is kept.
    pub fn new_session(&self, who: Identity) -> String {
        let secret: [u8; 32] = rand::random();
        let value = hex::encode(secret);
        let now = crate::now();
        if let Ok(mut s) = self.sessions.lock() {
            s.retain(|_, (_, until)| *until > now);
            s.insert(
                Sha256::digest(value.as_bytes()).into(),
                (who, now + SESSION_SECONDS),
            );
        }
        value
    }

    /// Who a session cookie stands for, while it lasts.
    pub fn session(&self, value: &str) -> Option<Identity> {
        let digest: [u8; 32] = Sha256::digest(value.as_bytes()).into();
        let s = self.sessions.lock().ok()?;
        s.get(&digest)
            .filter(|(_, until)| *until > crate::now())
            .map(|(who, _)| who.clone())
    }
}

/// The service's TLS: its host credential, TLS 1.2 or later, and a client certificate asked
/// for but not required (token callers have none); [`Auth::peer_of`] then verifies the chain.
pub fn acceptor(host: &Credential) -> Result<SslAcceptor, ServiceError> {
    ferry_gsi::https::acceptor(host, &[]).map_err(|e| ServiceError::Tls(e.to_string()))
}

impl From<openssl::error::ErrorStack> for ServiceError {
    fn from(e: openssl::error::ErrorStack) -> Self {
        ServiceError::Tls(e.to_string())
    }
}
