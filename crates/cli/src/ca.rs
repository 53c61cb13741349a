//! `ferry ca`: a throw-away certification authority with host and user certificates, a
//! trusted-CA directory and a grid-mapfile, for tests and first GSI steps.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use ferry_gsi::{CertificateAuthority, IssueSpec};

/// Arguments of `ferry ca`.
#[derive(Debug, Args)]
pub(crate) struct CaArgs {
    /// Directory for the CA and everything it issues (made if missing; an existing CA there is reused).
    #[arg(default_value = "ferry-ca")]
    dir: PathBuf,
    /// Issue a host certificate for this name or address (repeatable; default: localhost, first time).
    #[arg(long = "host", value_name = "NAME")]
    hosts: Vec<String>,
    /// Issue a user certificate with this CN, mapped to a local account: NAME or NAME:ACCOUNT
    /// (repeatable; default: the current user, first time).
    #[arg(long = "user", value_name = "NAME[:ACCOUNT]")]
    users: Vec<String>,
    /// Days the certificates stay valid.
    #[arg(long, default_value_t = 365)]
    days: u32,
    /// RSA key size.
    #[arg(long, default_value_t = 2048)]
    bits: u32,
}

pub(crate) fn run(a: CaArgs) -> anyhow::Result<()> {
    let ca_dir = a.dir.join("ca");
    let (ca, fresh) = if ca_dir.join("cacert.pem").exists() {
        (
            CertificateAuthority::load(&ca_dir).context("loading the existing CA")?,
            false,
        )
    } else {
        let tag: u32 = rand::random();
        let subject = format!("/O=Grid/OU=ferry-{tag:08x}/CN=ferry throw-away CA");
        let ca = CertificateAuthority::create(&subject, a.days.max(1) * 2, a.bits)?;
        ca.save(&ca_dir)?;
        (ca, true)
    };
    let cert_dir = a.dir.join("certificates");
    let hash = ca.install(&cert_dir)?;
    let ca_dn = ca.subject();
    let base = ca_dn
        .rsplit_once('/')
        .map(|(b, _)| b.to_owned())
        .unwrap_or_default();
    println!(
        "CA            {ca_dn} ({})",
        if fresh { "new" } else { "existing" }
    );
    println!(
        "trusted CAs   {} ({hash}.0, {hash}.signing_policy)",
        cert_dir.display()
    );

    let mut hosts = a.hosts.clone();
    let mut users = a.users.clone();
    if fresh && hosts.is_empty() && users.is_empty() {
        hosts.push("localhost".into());
        users.push(std::env::var("USER").unwrap_or_else(|_| "ferry-user".into()));
    }
    for host in &hosts {
        let mut spec = IssueSpec::host(&base, host, a.days);
        spec.bits = a.bits;
        if host == "localhost" {
            spec.ips = vec!["127.0.0.1".into(), "::1".into()];
        }
        let cred = ca.issue(&spec)?;
        let dir = a.dir.join("hosts").join(host);
        ferry_gsi::ca::save_pair(&dir, "hostcert.pem", "hostkey.pem", &cred)?;
        println!("host          {} in {}", cred.subject(), dir.display());
    }
    let gridmap = a.dir.join("grid-mapfile");
    for user in &users {
        let (name, account) = user.split_once(':').unwrap_or((user, user));
        let mut spec = IssueSpec::user(&format!("{base}/CN={name}"), a.days);
        spec.bits = a.bits;
        let cred = ca.issue(&spec)?;
        let dir = a.dir.join("users").join(name);
        ferry_gsi::ca::save_pair(&dir, "usercert.pem", "userkey.pem", &cred)?;
        append_mapping(&gridmap, &cred.subject(), account)?;
        println!(
            "user          {} → {account} in {}",
            cred.subject(),
            dir.display()
        );
    }
    if let Some(user) = users.first() {
        let name = user.split_once(':').map(|(n, _)| n).unwrap_or(user);
        let dir = a.dir.join("users").join(name);
        println!("\nTo use it:");
        println!("  export X509_CERT_DIR={}", abs(&cert_dir).display());
        println!(
            "  ferry proxy init --cert {} --key {}",
            abs(&dir.join("usercert.pem")).display(),
            abs(&dir.join("userkey.pem")).display()
        );
        println!("  grid-mapfile: {}", abs(&gridmap).display());
    }
    Ok(())
}

fn append_mapping(gridmap: &Path, dn: &str, account: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let line = format!("\"{}\" {account}\n", dn.replace('"', "\\\""));
    let existing = std::fs::read_to_string(gridmap).unwrap_or_default();
    if existing.contains(line.trim_end()) {
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(gridmap)
        .with_context(|| format!("writing {}", gridmap.display()))?;
    f.write_all(line.as_bytes())?;
    Ok(())
}

fn abs(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_owned())
}
