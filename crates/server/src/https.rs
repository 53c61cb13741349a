//! The HTTPS door (`[https]`, `--https-listen`), built from the same loaded configuration as
//! the GridFTP door: the same storage and checksum cache, password file, accounts, grid-mapfile
//! and CAs, transfer log and metrics registry.

use std::sync::Arc;

use ferry_door::{DoorContext, DoorMetrics, X509Logins};

use crate::config::ServerConfig;
use crate::daemon::{Shared, StartError};
use crate::prepare::Prepared;

/// The door's view of `config` as `p` loaded it.
pub(crate) fn door_context(
    config: &ServerConfig,
    p: &Prepared,
    shared: &Shared,
    metrics: DoorMetrics,
) -> Result<DoorContext, StartError> {
    // A clear-text-only door takes no credential.
    let tls = match config.https.listen {
        Some(_) => {
            let credential = match &p.gsi {
                Some(g) => g.credential().clone(),
                None => crate::gsi::load_host_credential(config)?,
            };
            Some(ferry_gsi::https::acceptor(
                &credential,
                ferry_door::alpn(config.https.prefer_http2),
            )?)
        }
        None => None,
    };
    // A new authority at each load: a reload's issuers take over, the old refresher ends.
    let tokens = ferry_site::TokenAuthority::new(&config.tokens)
        .map_err(|e| crate::config::ConfigError::Invalid(format!("[[tokens.issuer]]: {e}")))?;
    if let Some(t) = &tokens {
        t.spawn_refresher();
    }
    let gsiftp = match config.https.tpc_gsiftp_credential {
        ferry_door::config::GsiftpCredential::None => None,
        ferry_door::config::GsiftpCredential::Host => Some(Arc::new(gsiftp_setup(config, p)?)),
    };
    let x509 = p.gsi.as_ref().map(|g| X509Logins {
        trust: g.trust(),
        authorizer: Arc::clone(&g.authorizer),
    });
    Ok(DoorContext {
        https: config.https.clone(),
        storage_rw: Arc::clone(&p.storage_rw),
        storage_ro: Arc::clone(&p.storage_ro),
        passwords: p.passwords.clone(),
        accounts: p.accounts.clone(),
        anonymous: config.anonymous,
        anonymous_write: config.anonymous_write,
        run_as_user: config.run_as_user,
        x509,
        tokens,
        tls,
        site_secret: match &config.https.token_secret_file {
            Some(file) => std::sync::Arc::new(token_secret(file)?),
            None => ferry_door::process_secret(),
        },
        gsiftp,
        ca_dir: Some(config.cert_dir.clone().unwrap_or_else(|| {
            ferry_gsi::TrustStore::default_dir(&ferry_gsi::credential::process_env)
        })),
        transfer_checksums: config.transfer_checksum_algorithms(),
        log: Arc::clone(&shared.translog),
        host: shared.host.clone(),
        metrics,
    })
}

/// The GridFTP client setup of copies with `gsiftp://` servers: the host credential, the
/// site's CAs, data channels authenticated (DCAU A) and clear.
fn gsiftp_setup(config: &ServerConfig, p: &Prepared) -> Result<ferry_client::GsiSetup, StartError> {
    let (credential, trust) = match &p.gsi {
        Some(g) => (g.credential().clone(), g.trust()),
        None => {
            let dir = config.cert_dir.clone().unwrap_or_else(|| {
                ferry_gsi::TrustStore::default_dir(&ferry_gsi::credential::process_env)
            });
            let trust = ferry_gsi::TrustStore::load(&dir).map_err(|e| {
                crate::config::ConfigError::Invalid(format!(
                    "https.tpc-gsiftp-credential: the CA directory {}: {e}",
                    dir.display()
                ))
            })?;
            (crate::gsi::load_host_credential(config)?, Arc::new(trust))
        }
    };
    ferry_client::GsiSetup::with_credential(ferry_client::GsiOptions::default(), credential, trust)
        .map_err(|e| {
            crate::config::ConfigError::Invalid(format!("https.tpc-gsiftp-credential: {e}")).into()
        })
}

/// The secret of `https.token-secret-file`: base64 of at least 32 bytes.
fn token_secret(file: &std::path::Path) -> Result<Vec<u8>, StartError> {
    use base64::Engine as _;
    let bad = |why: String| {
        crate::config::ConfigError::Invalid(format!(
            "https.token-secret-file {}: {why}",
            file.display()
        ))
    };
    let text = std::fs::read_to_string(file).map_err(|e| bad(e.to_string()))?;
    let secret = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| bad(format!("not base64: {e}")))?;
    if secret.len() < 32 {
        return Err(bad(format!("{} bytes; give at least 32", secret.len())).into());
    }
    Ok(secret)
}

/// `--check-config`'s line for the door: the TLS credential loads and which logins it takes.
pub(crate) fn report(
    config: &ServerConfig,
    p: &Prepared,
    addr: std::net::SocketAddr,
) -> Result<String, StartError> {
    let credential = match &p.gsi {
        Some(g) => g.credential().clone(),
        None => crate::gsi::load_host_credential(config)?,
    };
    ferry_gsi::https::acceptor(&credential, ferry_door::alpn(config.https.prefer_http2))?;
    let mut logins = Vec::new();
    if p.gsi.is_some() {
        logins.push("X.509 certificates and proxies");
    }
    if config.https.basic_auth && !p.passwords.is_empty() {
        logins.push("HTTP Basic");
    }
    if !config.tokens.issuer.is_empty() {
        logins.push("bearer tokens");
    }
    if config.anonymous {
        logins.push("anonymous");
    }
    Ok(format!(
        "HTTPS door on https://{addr}/: TLS with {}; logins: {}",
        credential.subject(),
        if logins.is_empty() {
            "none".to_string()
        } else {
            logins.join(", ")
        }
    ))
}
