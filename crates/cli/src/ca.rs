//! `ferry ca`: a throw-away certification authority with host and user certificates, a
//! trusted-CA directory and a grid-mapfile, for tests and first GSI steps.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use ferry_gsi::ca::{make_site, SiteSpec};

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
    let spec = SiteSpec {
        hosts: a.hosts,
        users: a.users,
        days: a.days,
        bits: a.bits,
    };
    let user = std::env::var("USER").unwrap_or_else(|_| "ferry-user".into());
    let site = make_site(&a.dir, &spec, &user).context("making the CA")?;
    let (dn, hash) = (&site.ca_subject, &site.hash);
    let new = if site.fresh { "new" } else { "existing" };
    println!("CA            {dn} ({new})");
    let certs = site.cert_dir.display();
    println!("trusted CAs   {certs} ({hash}.0, {hash}.signing_policy)");
    for host in &site.hosts {
        println!("host          {} in {}", host.subject, host.dir.display());
    }
    for user in &site.users {
        let account = user.account.as_deref().unwrap_or_default();
        let at = user.dir.display();
        println!("user          {} → {account} in {at}", user.subject);
    }
    if let Some(user) = site.users.first() {
        println!("\nTo use it:");
        println!("  export X509_CERT_DIR={}", abs(&site.cert_dir).display());
        println!(
            "  ferry proxy init --cert {} --key {}",
            abs(&user.dir.join("usercert.pem")).display(),
            abs(&user.dir.join("userkey.pem")).display()
        );
        println!("  grid-mapfile: {}", abs(&site.gridmap).display());
    }
    Ok(())
}

fn abs(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_owned())
}
