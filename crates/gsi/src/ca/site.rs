//! A throw-away GSI site in one directory, as `ferry ca DIR` makes it: the CA (`ca/`), its
//! trusted-CA directory (`certificates/`), host credentials (`hosts/NAME/`), user credentials
//! (`users/NAME/`) and a grid-mapfile mapping the users to local accounts. Made again, it
//! keeps the CA and adds what is asked.

use std::path::{Path, PathBuf};

use super::{save_pair, CertificateAuthority, IssueSpec};
use crate::error::{GsiError, Result};

/// What the site is to hold.
#[derive(Debug, Clone)]
pub struct SiteSpec {
    /// Host names to issue certificates for (`localhost` also gets 127.0.0.1 and ::1).
    pub hosts: Vec<String>,
    /// Users, `NAME` or `NAME:ACCOUNT` (mapped to NAME's own account when none is given).
    pub users: Vec<String>,
    /// Days the certificates are valid (the CA twice as long).
    pub days: u32,
    /// RSA key size.
    pub bits: u32,
}

/// A credential the site issued.
#[derive(Debug, Clone)]
pub struct Issued {
    /// Its subject.
    pub subject: String,
    /// The directory of its certificate and key.
    pub dir: PathBuf,
    /// The local account a user is mapped to.
    pub account: Option<String>,
}

/// What making the site did.
#[derive(Debug, Clone)]
pub struct Site {
    /// The CA's subject.
    pub ca_subject: String,
    /// Whether the CA was made now (not found in the directory).
    pub fresh: bool,
    /// The trusted-CA directory (`X509_CERT_DIR`).
    pub cert_dir: PathBuf,
    /// The CA's hash, the name of its files there.
    pub hash: String,
    /// The hosts issued.
    pub hosts: Vec<Issued>,
    /// The users issued.
    pub users: Vec<Issued>,
    /// The grid-mapfile.
    pub gridmap: PathBuf,
}

/// Makes (or adds to) the site in `dir`. A new site with neither hosts nor users asked gets
/// `localhost` and `default_user`.
pub fn make_site(dir: &Path, spec: &SiteSpec, default_user: &str) -> Result<Site> {
    let ca_dir = dir.join("ca");
    let fresh = !ca_dir.join("cacert.pem").exists();
    let ca = if fresh {
        let mut tag = [0u8; 4];
        openssl::rand::rand_bytes(&mut tag)?;
        let subject = format!(
            "/O=Grid/OU=ferry-{:08x}/CN=ferry throw-away CA",
            u32::from_be_bytes(tag)
        );
        let ca = CertificateAuthority::create(&subject, spec.days.max(1) * 2, spec.bits)?;
        ca.save(&ca_dir)?;
        ca
    } else {
        CertificateAuthority::load(&ca_dir)?
    };
    let cert_dir = dir.join("certificates");
    let hash = ca.install(&cert_dir)?;
    let ca_subject = ca.subject();
    let base = ca_subject
        .rsplit_once('/')
        .map_or("", |(b, _)| b)
        .to_owned();
    let (mut hosts, mut users) = (spec.hosts.clone(), spec.users.clone());
    if fresh && hosts.is_empty() && users.is_empty() {
        hosts.push("localhost".into());
        users.push(default_user.into());
    }
    let mut site = Site {
        ca_subject,
        fresh,
        cert_dir,
        hash,
        hosts: Vec::new(),
        users: Vec::new(),
        gridmap: dir.join("grid-mapfile"),
    };
    for host in &hosts {
        let mut issue = IssueSpec::host(&base, host, spec.days);
        issue.bits = spec.bits;
        if host == "localhost" {
            issue.ips = vec!["127.0.0.1".into(), "::1".into()];
        }
        let cred = ca.issue(&issue)?;
        let at = dir.join("hosts").join(host);
        save_pair(&at, "hostcert.pem", "hostkey.pem", &cred)?;
        site.hosts.push(Issued {
            subject: cred.subject(),
            dir: at,
            account: None,
        });
    }
    for user in &users {
        let (name, account) = user.split_once(':').unwrap_or((user, user));
        let mut issue = IssueSpec::user(&format!("{base}/CN={name}"), spec.days);
        issue.bits = spec.bits;
        let cred = ca.issue(&issue)?;
        let at = dir.join("users").join(name);
        save_pair(&at, "usercert.pem", "userkey.pem", &cred)?;
        append_mapping(&site.gridmap, &cred.subject(), account)?;
        site.users.push(Issued {
            subject: cred.subject(),
            dir: at,
            account: Some(account.to_owned()),
        });
    }
    Ok(site)
}

/// Adds `"DN" account` to the grid-mapfile unless it is there.
fn append_mapping(gridmap: &Path, dn: &str, account: &str) -> Result<()> {
    use std::io::Write;
    let line = format!("\"{}\" {account}\n", dn.replace('"', "\\\""));
    let existing = std::fs::read_to_string(gridmap).unwrap_or_default();
    if existing.contains(line.trim_end()) {
        return Ok(());
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(gridmap)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(|e| GsiError::file(gridmap, e))
}
