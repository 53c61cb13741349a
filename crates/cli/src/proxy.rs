//! `ferry proxy init | info | destroy`: grid-proxy-init, grid-proxy-info and grid-proxy-destroy.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use ferry_gsi::credential::{process_env, user_cert_paths};
use ferry_gsi::{Credential, ProxyOptions, TrustStore, VerifyOptions};

/// `ferry proxy` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ProxyCmd {
    /// Make a proxy certificate from your user certificate (grid-proxy-init).
    Init(InitArgs),
    /// Show a proxy's subject, identity, type and time left (grid-proxy-info).
    Info(InfoArgs),
    /// Delete a proxy (grid-proxy-destroy).
    Destroy {
        /// The proxy file (default: X509_USER_PROXY, else /tmp/x509up_u<uid>).
        #[arg(long, short = 'f')]
        file: Option<PathBuf>,
    },
}

/// Arguments of `ferry proxy init`.
#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// User certificate (default: X509_USER_CERT, else ~/.globus/usercert.pem).
    #[arg(long)]
    cert: Option<PathBuf>,
    /// User key (default: X509_USER_KEY, else ~/.globus/userkey.pem).
    #[arg(long)]
    key: Option<PathBuf>,
    /// Where to write the proxy (default: X509_USER_PROXY, else /tmp/x509up_u<uid>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Lifetime as HOURS:MINUTES.
    #[arg(long, default_value = "12:00", value_parser = parse_hm)]
    valid: Duration,
    /// RSA key size of the proxy.
    #[arg(long, default_value_t = 2048)]
    bits: u32,
    /// Proxy format: rfc (RFC 3820, default), draft (pre-RFC GT3, grid-proxy-init -draft) or
    /// old (legacy GT2, grid-proxy-init -old) for services that need them.
    #[arg(long, value_name = "FORMAT", default_value = "rfc", value_parser = ["rfc", "draft", "old"])]
    format: String,
    /// Make a limited proxy.
    #[arg(long)]
    limited: bool,
    /// Trusted CAs to check the certificate against (default: X509_CERT_DIR, else
    /// ~/.globus/certificates, else /etc/grid-security/certificates).
    #[arg(long)]
    cert_dir: Option<PathBuf>,
    /// Read the key's passphrase from this file (else asked on the terminal when needed).
    #[arg(long)]
    passphrase_file: Option<PathBuf>,
    /// Print nothing on success.
    #[arg(short, long)]
    quiet: bool,
}

/// Arguments of `ferry proxy info`.
#[derive(Debug, Args)]
pub(crate) struct InfoArgs {
    /// The proxy file (default: X509_USER_PROXY, else /tmp/x509up_u<uid>).
    #[arg(long, short = 'f')]
    file: Option<PathBuf>,
    /// Print nothing; exit 0 when the proxy exists and is valid for --valid more, else 1.
    #[arg(long, short = 'e')]
    exists: bool,
    /// With --exists: required time left, HOURS:MINUTES.
    #[arg(long, value_parser = parse_hm)]
    valid: Option<Duration>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(cmd: ProxyCmd) -> u8 {
    let r = match cmd {
        ProxyCmd::Init(a) => init(a),
        ProxyCmd::Info(a) => return info(a),
        ProxyCmd::Destroy { file } => destroy(&proxy_path(file)),
    };
    match r {
        Ok(()) => crate::exit::OK,
        Err(e) => {
            eprintln!("ferry: {e:#}");
            1
        }
    }
}

fn proxy_path(explicit: Option<PathBuf>) -> PathBuf {
    ferry_gsi::credential::proxy_path(explicit, &process_env)
}

fn init(a: InitArgs) -> anyhow::Result<()> {
    let (default_cert, default_key) = user_cert_paths(&process_env);
    let cert = a.cert.unwrap_or(default_cert);
    let key = a.key.unwrap_or(default_key);
    let passphrase = match &a.passphrase_file {
        Some(f) => Some(
            std::fs::read_to_string(f)
                .with_context(|| format!("reading {}", f.display()))?
                .trim_end_matches(['\r', '\n'])
                .as_bytes()
                .to_vec(),
        ),
        None => None,
    };
    let user = match Credential::load_cert_key(&cert, &key, passphrase.as_deref()) {
        Ok(c) => c,
        Err(e) if passphrase.is_none() && e.to_string().contains("encrypted") => {
            let pass = rpassword::prompt_password(format!(
                "Enter GRID pass phrase for {}: ",
                cert.display()
            ))
            .context("reading the pass phrase")?;
            Credential::load_cert_key(&cert, &key, Some(pass.as_bytes()))?
        }
        Err(e) => return Err(e.into()),
    };
    let cert_dir = a
        .cert_dir
        .unwrap_or_else(|| TrustStore::default_dir(&process_env));
    let identity = user.identity()?;
    if !a.quiet {
        println!("Your identity: {identity}");
    }
    match TrustStore::load(&cert_dir) {
        Ok(trust) => {
            trust
                .verify(&user.cert, &user.chain, VerifyOptions::default())
                .context("your certificate does not verify against the trusted CAs")?;
        }
        Err(e) => eprintln!("ferry: warning: not checking the certificate: {e}"),
    }
    let options = ProxyOptions {
        lifetime: a.valid,
        limited: a.limited,
        path_len: None,
        format: Some(match a.format.as_str() {
            "old" => ferry_gsi::ProxyFormat::Legacy,
            "draft" => ferry_gsi::ProxyFormat::Gt3,
            _ => ferry_gsi::ProxyFormat::Rfc3820,
        }),
    };
    let proxy = ferry_gsi::proxy::create_proxy(&user, a.bits, &options)?;
    let out = proxy_path(a.out);
    proxy.save_proxy(&out)?;
    if !a.quiet {
        let left = proxy.seconds_left()?.max(0);
        let what = if a.limited { "limited proxy" } else { "proxy" };
        println!("Creating {what} ... Done");
        println!(
            "Your proxy is valid for {} (written to {})",
            hms(left),
            out.display()
        );
    }
    Ok(())
}

fn info(a: InfoArgs) -> u8 {
    let path = proxy_path(a.file);
    let proxy = match Credential::load_proxy(&path) {
        Ok(p) => p,
        Err(e) => {
            if !a.exists {
                eprintln!("ferry: {e}");
            }
            return 1;
        }
    };
    let left = proxy.seconds_left().unwrap_or(-1);
    if a.exists {
        let need = a.valid.map(|d| d.as_secs() as i64).unwrap_or(0);
        return if left > need { 0 } else { 1 };
    }
    let kind = proxy
        .kind()
        .map(|k| k.describe())
        .unwrap_or_else(|e| e.to_string());
    let identity = proxy.identity().unwrap_or_else(|e| e.to_string());
    let bits = proxy.key.bits();
    let issuer = ferry_gsi::dn::one_line(proxy.cert.issuer_name());
    if a.json {
        let v = serde_json::json!({
            "subject": proxy.subject(), "issuer": issuer, "identity": identity, "type": kind,
            "strength": bits, "path": path, "timeleft_s": left.max(0),
        });
        println!("{v}");
    } else {
        println!("subject  : {}", proxy.subject());
        println!("issuer   : {issuer}");
        println!("identity : {identity}");
        println!("type     : {kind}");
        println!("strength : {bits} bits");
        println!("path     : {}", path.display());
        println!(
            "timeleft : {}{}",
            hms(left.max(0)),
            if left <= 0 { "  (EXPIRED)" } else { "" }
        );
    }
    0
}

fn destroy(path: &Path) -> anyhow::Result<()> {
    ferry_gsi::credential::destroy_proxy(path)
        .with_context(|| format!("no proxy removed at {}", path.display()))
}

fn parse_hm(s: &str) -> Result<Duration, String> {
    let (h, m) = s.split_once(':').unwrap_or((s, "0"));
    let h: u64 = h
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: expected HOURS:MINUTES"))?;
    let m: u64 = m
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: expected HOURS:MINUTES"))?;
    if m >= 60 {
        return Err(format!("{s:?}: minutes must be below 60"));
    }
    Ok(Duration::from_secs(h * 3600 + m * 60))
}

fn hms(secs: i64) -> String {
    format!("{}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}
