//! TLS to PostgreSQL, asked for in the URL as libpq asks for it (what PostgreSQL admins
//! know): `sslmode`, `sslrootcert`, `sslcert`, `sslkey`. tokio-postgres knows only
//! `sslmode=disable|prefer|require` and refuses keys it does not know, so these four are taken
//! out of the URL here and become an OpenSSL connector; the rest of the URL goes to the client
//! as it was written.
//!
//! Where this differs from libpq: no default files under `~/.postgresql/` (a service's home is
//! no place for its database's trust roots), so `verify-ca`/`verify-full` without `sslrootcert`
//! check against the system's store, as `sslrootcert=system` does.

use std::path::{Path, PathBuf};

use openssl::pkey::PKey;
use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
use openssl::x509::store::X509StoreBuilder;
use openssl::x509::X509;
use postgres::config::{Host, SslMode as WireMode};
use postgres_openssl::MakeTlsConnector;

use super::redact;
use crate::ServiceError;

/// libpq's `sslmode`, weakest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum SslMode {
    /// Never TLS.
    Disable,
    /// Without TLS first; with TLS (unchecked) if the server refuses that.
    Allow,
    /// With TLS first (unchecked) if the server offers it; without if that fails.
    Prefer,
    /// TLS or nothing; the certificate is checked only when `sslrootcert` is given.
    Require,
    /// TLS, and the server's chain leads to a trusted root.
    VerifyCa,
    /// TLS, a trusted chain, and a certificate for the host connected to.
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> Option<SslMode> {
        Some(match s {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }
}

/// Where the server's certificate chain must lead.
#[derive(Debug)]
enum Roots {
    /// The certificates in this PEM file, and no others.
    File(PathBuf),
    /// The system's store (`sslrootcert=system`, as libpq 16 spells it).
    System,
}

/// The TLS half of a database URL.
#[derive(Debug)]
struct TlsParams {
    mode: SslMode,
    roots: Option<Roots>,
    /// The client's certificate (PEM, a chain allowed) and its key.
    client: Option<(PathBuf, PathBuf)>,
}

/// Connects to the database `url` names, with TLS as its libpq parameters ask.
pub(super) fn connect(url: &str) -> Result<postgres::Client, ServiceError> {
    let (rest, params) = split(url)?;
    let mut config: postgres::Config = rest.parse().map_err(|e| bad(url, causes(&e)))?;
    let hosts = config.get_hosts();
    // libpq never uses TLS on a Unix socket, whatever sslmode says; nor could the server.
    let local = !hosts.is_empty() && hosts.iter().all(|h| matches!(h, Host::Unix(_)));
    if params.mode == SslMode::Disable || local {
        config.ssl_mode(WireMode::Disable);
        return config
            .connect(postgres::NoTls)
            .map_err(|e| unreachable(url, causes(&e)));
    }
    let tls = connector(&params, url)?;
    // allow and prefer try the other way when the server turned the first down, in libpq's
    // order; a server that answers prefer's TLS request with 'N' is already taken without TLS
    // by tokio-postgres's own Prefer.
    let tries: &[(WireMode, &str)] = match params.mode {
        SslMode::Allow => &[
            (WireMode::Disable, "without TLS"),
            (WireMode::Require, "with TLS"),
        ],
        SslMode::Prefer => &[
            (WireMode::Prefer, "with TLS"),
            (WireMode::Disable, "without TLS"),
        ],
        _ => &[(WireMode::Require, "")],
    };
    let mut failures = Vec::new();
    for (mode, how) in tries {
        config.ssl_mode(*mode);
        let e = match config.connect(tls.clone()) {
            Ok(client) => return Ok(client),
            Err(e) => e,
        };
        failures.push(if how.is_empty() {
            causes(&e)
        } else {
            format!("{how}: {}", causes(&e))
        });
        if !reached_server(&e) {
            break;
        }
    }
    let mut why = failures.join("; ");
    if why.contains("certificate verify failed") {
        let roots = match &params.roots {
            Some(Roots::File(path)) => format!("sslrootcert {}", path.display()),
            _ => "the system's trusted roots".to_owned(),
        };
        let what = if params.mode == SslMode::VerifyFull {
            "or is not for this host name"
        } else {
            "(its host name is not checked in this mode)"
        };
        why = format!("the server's certificate failed to verify against {roots} {what}: {why}");
    }
    Err(unreachable(url, why))
}

/// Takes libpq's TLS parameters out of `url`: the URL without them, and them.
fn split(url: &str) -> Result<(String, TlsParams), ServiceError> {
    // The query starts at the first '?' after the credentials, as tokio-postgres reads it,
    // so a '?' in a password stays in the password.
    let creds_end = url.find('@').map_or(0, |at| at + 1);
    let Some(q) = url[creds_end..].find('?').map(|q| creds_end + q) else {
        return Ok((
            url.to_owned(),
            TlsParams::from_parts(None, None, None, None, url)?,
        ));
    };
    let (mut mode, mut roots, mut cert, mut key) = (None, None, None, None);
    let mut kept = Vec::new();
    for pair in url[q + 1..].split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match decode(k).as_deref() {
            Some("sslmode") => &mut mode,
            Some("sslrootcert") => &mut roots,
            Some("sslcert") => &mut cert,
            Some("sslkey") => &mut key,
            _ => {
                kept.push(pair);
                continue;
            }
        };
        let value = decode(v)
            .ok_or_else(|| bad(url, format!("the value of {k} is not UTF-8 once decoded")))?;
        *slot = Some(value);
    }
    let mut rest = url[..q].to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    Ok((rest, TlsParams::from_parts(mode, roots, cert, key, url)?))
}

impl TlsParams {
    /// Checks the parameters' values and how they combine, as libpq does.
    fn from_parts(
        mode: Option<String>,
        roots: Option<String>,
        cert: Option<String>,
        key: Option<String>,
        url: &str,
    ) -> Result<TlsParams, ServiceError> {
        let mode = match mode.as_deref() {
            None => None,
            Some(m) => Some(SslMode::parse(m).ok_or_else(|| {
                bad(
                    url,
                    format!(
                        "sslmode={m:?} is not one of disable, allow, prefer, require, \
                         verify-ca, verify-full"
                    ),
                )
            })?),
        };
        let roots = roots.map(|r| match r.as_str() {
            "system" => Roots::System,
            _ => Roots::File(r.into()),
        });
        // libpq 16: the system's store is trusted only with the host name checked, since
        // any public CA would otherwise vouch for any server.
        let mode = match (mode, &roots) {
            (Some(m), Some(Roots::System)) if m < SslMode::VerifyFull => {
                return Err(bad(
                    url,
                    format!(
                        "weak sslmode {:?} may not be used with sslrootcert=system (use \
                         \"verify-full\")",
                        mode_name(m)
                    ),
                ));
            }
            (None, Some(Roots::System)) => SslMode::VerifyFull,
            (m, _) => m.unwrap_or(SslMode::Prefer),
        };
        let client = match (cert, key) {
            (None, None) => None,
            (Some(c), Some(k)) => Some((c.into(), k.into())),
            (Some(_), None) => return Err(bad(url, "sslcert is given without sslkey")),
            (None, Some(_)) => return Err(bad(url, "sslkey is given without sslcert")),
        };
        Ok(TlsParams {
            mode,
            roots,
            client,
        })
    }
}

fn mode_name(m: SslMode) -> &'static str {
    match m {
        SslMode::Disable => "disable",
        SslMode::Allow => "allow",
        SslMode::Prefer => "prefer",
        SslMode::Require => "require",
        SslMode::VerifyCa => "verify-ca",
        SslMode::VerifyFull => "verify-full",
    }
}

/// The OpenSSL connector the parameters describe; every file is read here, before any
/// connection, so a bad one is named rather than failing a handshake.
fn connector(p: &TlsParams, url: &str) -> Result<MakeTlsConnector, ServiceError> {
    let ossl = |what: &str, e: openssl::error::ErrorStack| bad(url, format!("{what}: {e}"));
    let mut b = SslConnector::builder(SslMethod::tls_client())
        .map_err(|e| ossl("cannot set up OpenSSL", e))?;
    // libpq 17 names its protocol too; servers before 17 ignore it.
    postgres_openssl::set_postgresql_alpn(&mut b).map_err(|e| ossl("ALPN", e))?;
    // As libpq: a root file given is checked against in every mode, not only verify-*.
    let check_chain = match &p.roots {
        Some(Roots::File(path)) => {
            let certs = X509::stack_from_pem(&read(url, "sslrootcert", path)?)
                .map_err(|e| ossl(&format!("sslrootcert {}", path.display()), e))?;
            if certs.is_empty() {
                return Err(bad(
                    url,
                    format!("sslrootcert {} holds no PEM certificate", path.display()),
                ));
            }
            let mut store = X509StoreBuilder::new().map_err(|e| ossl("sslrootcert", e))?;
            for c in certs {
                store.add_cert(c).map_err(|e| ossl("sslrootcert", e))?;
            }
            b.set_cert_store(store.build());
            true
        }
        // The builder starts with the system's store.
        Some(Roots::System) => true,
        None => p.mode >= SslMode::VerifyCa,
    };
    b.set_verify(if check_chain {
        SslVerifyMode::PEER
    } else {
        SslVerifyMode::NONE
    });
    if let Some((cert, key)) = &p.client {
        let chain = X509::stack_from_pem(&read(url, "sslcert", cert)?)
            .map_err(|e| ossl(&format!("sslcert {}", cert.display()), e))?;
        let mut chain = chain.into_iter();
        let leaf = chain.next().ok_or_else(|| {
            bad(
                url,
                format!("sslcert {} holds no PEM certificate", cert.display()),
            )
        })?;
        b.set_certificate(&leaf)
            .map_err(|e| ossl(&format!("sslcert {}", cert.display()), e))?;
        for c in chain {
            b.add_extra_chain_cert(c)
                .map_err(|e| ossl(&format!("sslcert {}", cert.display()), e))?;
        }
        let pkey = PKey::private_key_from_pem(&read(url, "sslkey", key)?).map_err(|e| {
            ossl(
                &format!(
                    "sslkey {} is not an unencrypted PEM private key",
                    key.display()
                ),
                e,
            )
        })?;
        // OpenSSL checks here that the key is the certificate's.
        b.set_private_key(&pkey).map_err(|e| {
            ossl(
                &format!(
                    "sslkey {} is not the key of sslcert {}",
                    key.display(),
                    cert.display()
                ),
                e,
            )
        })?;
    }
    let mut tls = MakeTlsConnector::new(b.build());
    let full = p.mode == SslMode::VerifyFull;
    tls.set_callback(move |c, _host| {
        c.set_verify_hostname(full);
        Ok(())
    });
    Ok(tls)
}

/// A file named by parameter `param`, or an error that names both.
fn read(url: &str, param: &str, path: &Path) -> Result<Vec<u8>, ServiceError> {
    std::fs::read(path).map_err(|e| {
        bad(
            url,
            format!("{param} {}: cannot read it: {e}", path.display()),
        )
    })
}

/// Undoes a URL's %-escapes, as tokio-postgres does for the parameters it reads; `None`
/// when the result is not UTF-8.
fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit));
        match (b[i], hex) {
            (b'%', Some(h)) => {
                let h = std::str::from_utf8(h).ok()?;
                out.push(u8::from_str_radix(h, 16).ok()?);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Whether a failed try got as far as a server: a refused or lost TCP connection fails the
/// same way with TLS and without, so libpq does not try the other way then.
fn reached_server(e: &postgres::Error) -> bool {
    !std::error::Error::source(e).is_some_and(|c| c.is::<std::io::Error>())
}

/// An error and its causes, one after another: tokio-postgres's own text is only its kind
/// ("db error", "error performing TLS handshake"), the server's or OpenSSL's words are in
/// its source.
fn causes(e: &postgres::Error) -> String {
    let mut text = e.to_string();
    let mut next = std::error::Error::source(e);
    while let Some(cause) = next {
        // postgres-openssl's handshake error already holds the words of its own sources.
        let words = cause.to_string();
        if !text.contains(&words) {
            text.push_str(": ");
            text.push_str(&words);
        }
        next = cause.source();
    }
    text
}

/// A URL that cannot be used as written.
fn bad(url: &str, why: impl std::fmt::Display) -> ServiceError {
    ServiceError::Database(format!("{why} (in {})", redact(url)))
}

/// A server that could not be reached or refused the session.
fn unreachable(url: &str, why: String) -> ServiceError {
    ServiceError::Database(format!("cannot connect to {}: {why}", redact(url)))
}
