//! Who is asking, and the storage they see: an X.509 client certificate or proxy mapped
//! through the grid-mapfile, HTTP Basic checked against the password file, a bearer token of
//! a trusted issuer (working as the issuer's account, within the token's scopes), or
//! anonymous; each works as the account the GridFTP door would give the same login
//! (`ferry_site::accounts`). A connection remembers who it proved to be.

use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ferry_gsi::https::PeerCertificate;
use ferry_site::TokenAuthority;
use ferry_storage::Storage;
use ferry_token::claims::LEEWAY_S;
use ferry_token::{Bearer, TokenError};
use http::{header, HeaderMap, StatusCode};
use sha2::{Digest as _, Sha256};
use tokio::sync::OnceCell;

use crate::context::DoorContext;
use crate::reply::{self, Reply};

/// A login the door accepted.
#[derive(Debug)]
pub(crate) struct Principal {
    /// The name the transfer log shows: the DN's account, the password user, `anonymous`.
    pub(crate) user: String,
    /// Writes are refused.
    pub(crate) read_only: bool,
    /// The root as this login sees it (on a root server, through its account's identity).
    pub(crate) storage: Arc<dyn Storage>,
    /// A bearer token's grants: what this login may do beyond what its account may.
    pub(crate) token: Option<Arc<Bearer>>,
    /// The account it works as (`None`: the server's own).
    pub(crate) account: Option<String>,
}

/// The last Basic login of a connection: user, SHA-256 of `user:password`, the login.
type LastPassword = Option<(String, [u8; 32], Arc<Principal>)>;

/// The last token of a connection: SHA-256 of the token, the login.
type LastToken = Option<([u8; 32], Arc<Principal>)>;

/// What one connection proved: its certificate once, its last Basic login, its last token.
#[derive(Debug)]
pub(crate) struct ConnAuth {
    /// The connection is clear text: no passwords cross it.
    clear: bool,
    certificate: PeerCertificate,
    by_certificate: OnceCell<Result<Arc<Principal>, (StatusCode, String)>>,
    by_password: Mutex<LastPassword>,
    by_token: Mutex<LastToken>,
    anonymous: OnceCell<Result<Arc<Principal>, (StatusCode, String)>>,
}

impl ConnAuth {
    /// The login of this connection's last token, if it is `digest`'s and has not expired
    /// (`leeway` seconds allowed).
    fn cached_token(&self, digest: &[u8; 32], leeway: i64) -> Option<Arc<Principal>> {
        let now = ferry_proto::clock::now_since_epoch().as_secs() as i64;
        let cached = self.by_token.lock().ok()?;
        let (d, p) = cached.as_ref()?;
        let live = p.token.as_ref().is_some_and(|t| now <= t.expires + leeway);
        (d == digest && live).then(|| Arc::clone(p))
    }

    /// Keeps `p` as the login of the token `digest` for the connection's next requests.
    fn remember_token(&self, digest: [u8; 32], p: &Arc<Principal>) {
        if let Ok(mut cached) = self.by_token.lock() {
            *cached = Some((digest, Arc::clone(p)));
        }
    }

    pub(crate) fn new(certificate: PeerCertificate) -> ConnAuth {
        ConnAuth {
            clear: false,
            certificate,
            by_certificate: OnceCell::new(),
            by_password: Mutex::new(None),
            by_token: Mutex::new(None),
            anonymous: OnceCell::new(),
        }
    }
}

impl ConnAuth {
    /// A clear-text connection.
    pub(crate) fn clear() -> ConnAuth {
        ConnAuth {
            clear: true,
            ..ConnAuth::new(PeerCertificate::None)
        }
    }

    /// Whether the connection is clear text.
    pub(crate) fn is_clear(&self) -> bool {
        self.clear
    }
}

fn unauthorized(ctx: &DoorContext, why: &str) -> Reply {
    let mut r = reply::status(StatusCode::UNAUTHORIZED, why);
    if ctx.https.basic_auth && !ctx.passwords.is_empty() {
        r.headers_mut().append(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Basic realm=\"ferry\", charset=\"UTF-8\""),
        );
    }
    if ctx.tokens.is_some() {
        r.headers_mut().append(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer realm=\"ferry\""),
        );
    }
    r
}

/// The login of this request, or the 401/403 that refuses it.
pub(crate) async fn principal(
    ctx: &DoorContext,
    conn: &ConnAuth,
    headers: &HeaderMap,
) -> Result<Arc<Principal>, Reply> {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if let Some(value) = authorization {
        let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
        if scheme.eq_ignore_ascii_case("basic") {
            if conn.clear {
                return Err(reply::status(
                    StatusCode::FORBIDDEN,
                    "passwords are not taken over clear-text HTTP: use https://",
                ));
            }
            return basic(ctx, conn, rest.trim()).await;
        }
        if scheme.eq_ignore_ascii_case("bearer") {
            if ferry_token::site_issued::is_site_issued(rest.trim()) {
                if conn.clear {
                    return Err(reply::status(
                        StatusCode::FORBIDDEN,
                        "tokens are not taken over clear-text HTTP: use https://",
                    ));
                }
                return site_issued(ctx, conn, rest.trim()).await;
            }
            let Some(tokens) = &ctx.tokens else {
                return Err(unauthorized(
                    ctx,
                    "bearer tokens are not accepted by this server: use an X.509 certificate or proxy",
                ));
            };
            if conn.clear {
                return Err(reply::status(
                    StatusCode::FORBIDDEN,
                    "tokens are not taken over clear-text HTTP: use https://",
                ));
            }
            return bearer(ctx, conn, tokens, rest.trim()).await;
        }
        return Err(unauthorized(
            ctx,
            &format!("authorization scheme '{scheme}' is not supported"),
        ));
    }
    if let Some(x509) = &ctx.x509 {
        match &conn.certificate {
            PeerCertificate::None => {}
            PeerCertificate::Refused(e) => {
                return Err(reply::status(
                    StatusCode::FORBIDDEN,
                    format!("the client certificate is not accepted: {e}"),
                ))
            }
            PeerCertificate::Verified(v) => {
                let r = conn
                    .by_certificate
                    .get_or_init(|| async {
                        let dn = v.identity().to_string();
                        let account = x509
                            .authorizer
                            .authorize(&dn, None)
                            .map_err(|e| (StatusCode::FORBIDDEN, format!("{dn}: {e}")))?;
                        let as_account = ctx.run_as_user.then(|| account.clone());
                        login(ctx, account, as_account, false, None).await
                    })
                    .await;
                return r.clone().map_err(|(s, why)| reply::status(s, why));
            }
        }
    }
    if ctx.anonymous {
        let r = conn
            .anonymous
            .get_or_init(|| async {
                login(
                    ctx,
                    "anonymous".into(),
                    ctx.accounts.anonymous(),
                    !ctx.anonymous_write,
                    None,
                )
                .await
            })
            .await;
        return r.clone().map_err(|(s, why)| reply::status(s, why));
    }
    Err(unauthorized(
        ctx,
        "authentication required: an X.509 certificate or proxy, a bearer token, or a user name and password",
    ))
}

async fn basic(ctx: &DoorContext, conn: &ConnAuth, encoded: &str) -> Result<Arc<Principal>, Reply> {
    if !ctx.https.basic_auth || ctx.passwords.is_empty() {
        return Err(unauthorized(ctx, "password logins are not accepted here"));
    }
    let decoded = B64
        .decode(encoded)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| unauthorized(ctx, "malformed Basic credentials"))?;
    let (user, password) = decoded
        .split_once(':')
        .ok_or_else(|| unauthorized(ctx, "malformed Basic credentials"))?;
    let digest: [u8; 32] = Sha256::digest(decoded.as_bytes()).into();
    if let Ok(cached) = conn.by_password.lock() {
        if let Some((u, d, p)) = cached.as_ref() {
            if u == user && *d == digest {
                return Ok(Arc::clone(p));
            }
        }
    }
    let (db, u, pw) = (
        ctx.passwords.clone(),
        user.to_string(),
        password.to_string(),
    );
    let ok = tokio::task::spawn_blocking(move || db.verify(&u, &pw))
        .await
        .unwrap_or(false);
    if !ok {
        // As the GridFTP door: slow down guessing without holding a thread.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        return Err(unauthorized(ctx, "login incorrect"));
    }
    let account = ctx.accounts.password(&ctx.passwords, user);
    let p = login(ctx, user.to_string(), account, false, None)
        .await
        .map_err(|(s, why)| reply::status(s, why))?;
    if let Ok(mut cached) = conn.by_password.lock() {
        *cached = Some((user.to_string(), digest, Arc::clone(&p)));
    }
    Ok(p)
}

/// A refused token: 401 with RFC 6750's `invalid_token` and why (never the token).
fn invalid_token(e: &TokenError) -> Reply {
    let why = e.to_string();
    let mut r = reply::status(
        StatusCode::UNAUTHORIZED,
        format!("the token is refused: {why}"),
    );
    let value = format!(
        "Bearer error=\"invalid_token\", error_description=\"{}\"",
        why.replace(['"', '\\'], "'")
    );
    if let Ok(v) = header::HeaderValue::from_str(&value) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    r
}

/// A bearer token's login: validated once per connection (until it expires), working as its
/// issuer's account.
async fn bearer(
    ctx: &DoorContext,
    conn: &ConnAuth,
    tokens: &TokenAuthority,
    token: &str,
) -> Result<Arc<Principal>, Reply> {
    let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    if let Some(p) = conn.cached_token(&digest, LEEWAY_S) {
        return Ok(p);
    }
    let bearer = tokens.validate(token).await.map_err(|e| {
        tracing::info!(reason = %e, "bearer token refused");
        ctx.metrics.token_refused(e.label());
        invalid_token(&e)
    })?;
    tracing::debug!(issuer = %bearer.issuer, subject = ?bearer.subject, id = ?bearer.id, account = %bearer.account, "bearer token accepted");
    let account = ctx.run_as_user.then(|| bearer.account.clone());
    let p = login(
        ctx,
        bearer.account.clone(),
        account,
        false,
        Some(Arc::new(bearer)),
    )
    .await
    .map_err(|(s, why)| reply::status(s, why))?;
    conn.remember_token(digest, &p);
    Ok(p)
}

/// A token this server issued (`POST` `application/macaroon-request`): its asker's account,
/// held to the activities and path it names.
async fn site_issued(
    ctx: &DoorContext,
    conn: &ConnAuth,
    token: &str,
) -> Result<Arc<Principal>, Reply> {
    let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    let now = ferry_proto::clock::now_since_epoch().as_secs() as i64;
    if let Some(p) = conn.cached_token(&digest, 0) {
        return Ok(p);
    }
    let issued = ferry_token::site_issued::verify(&ctx.site_secret, token, now).map_err(|e| {
        tracing::info!(reason = %e, "site-issued token refused");
        ctx.metrics.token_refused(e.label());
        invalid_token(&e)
    })?;
    tracing::debug!(user = %issued.user, id = %issued.id, path = %issued.path, "site-issued token accepted");
    let bearer = Bearer {
        issuer: "this server".into(),
        subject: Some(issued.user.clone()),
        account: issued.account.clone().unwrap_or_default(),
        groups: Vec::new(),
        grants: issued.grants(),
        expires: issued.exp,
        id: Some(issued.id.clone()),
    };
    let p = login(
        ctx,
        issued.user,
        issued.account,
        false,
        Some(Arc::new(bearer)),
    )
    .await
    .map_err(|(s, why)| reply::status(s, why))?;
    conn.remember_token(digest, &p);
    Ok(p)
}

async fn login(
    ctx: &DoorContext,
    user: String,
    account: Option<String>,
    read_only: bool,
    token: Option<Arc<Bearer>>,
) -> Result<Arc<Principal>, (StatusCode, String)> {
    let base = if read_only {
        Arc::clone(&ctx.storage_ro)
    } else {
        Arc::clone(&ctx.storage_rw)
    };
    let storage = ferry_site::identity::storage_as(
        base,
        account.clone(),
        ctx.accounts.allow_root(),
    )
    .await
    .map_err(|e| {
        tracing::warn!(user = %user, account = ?account, error = %e, "cannot run as the account");
        (
            StatusCode::FORBIDDEN,
            format!(
                "cannot work as {}: {e}",
                account.as_deref().unwrap_or("this server's account")
            ),
        )
    })?;
    Ok(Arc::new(Principal {
        user,
        read_only,
        storage,
        token,
        account,
    }))
}
