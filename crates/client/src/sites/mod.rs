//! Site translation: rules that turn `host:path` into the URL of the site's transfer server.
//!
//! A rules file (TOML; the user's `~/.config/ferry/gcp.toml` is read before the system's
//! `/etc/ferry/gcp.toml`, or only `--sites FILE`):
//!
//! ```toml
//! [defaults]
//! protocol = "gsiftp"            # for hosts no rule names: gsiftp://HOST/PATH (or ftp)
//! shared = ["/cvmfs/vo.example.org/ferry/gcp-sites.toml"]   # remote sites' rules
//!
//! [[site]]
//! host = "*.cluster.example.org" # glob on the host as written
//! path = "/data/**"              # optional glob on the path
//! server = "gsiftp://dtn.example.org:2811"
//! strip = "/data"                # optional: taken off the front of the path
//! prefix = "/gpfs/project"       # put in front of it
//! home = "/gpfs/home/{user}"     # what a relative path is relative to
//! ```
//!
//! The first rule whose host (and path, if given) match wins. The operand's `user@` becomes the
//! URL's account (for gsiftp, the account the grid-mapfile maps to) unless the rule's `server`
//! names one itself (`ftp://anonymous@host`); `{user}` in `home` is that user, or the local one.
//! Without a matching rule, or with `--no-translate`, `host:/path` is `PROTOCOL://host/path`;
//! a relative path then has nothing to be relative to and is refused with a hint.
//!
//! `shared` names the shared section for remote sites (the seed's): rules files a virtual
//! organisation distributes (on CVMFS, a shared file system, by configuration management), in
//! which each site publishes the rules for its own hosts. They are tried after every local
//! rule, so a site's own file wins; only their `[[site]]` rules count (they name no further
//! files), and a missing one is skipped and shown by `--explain`.

mod names;

use std::path::{Path, PathBuf};

use globset::{Glob, GlobMatcher};
use serde::Deserialize;

use crate::Location;
pub use names::Name;

/// The URL an operand names (`host:path` through the rules in `sites`, unless `translate` is
/// false; a URL or a local path as written), and a line that says how it was found.
pub fn locate(name: &str, sites: &Sites, translate: bool) -> Result<(Location, String), String> {
    let (url, why) = match Name::parse(name)? {
        Name::Local(p) => return Ok((Location::Local(p), "a local path".into())),
        Name::Url(u) => (u, "a URL, used as written".to_string()),
        Name::Remote { user, host, path } => {
            let t = sites.url(user.as_deref(), &host, &path, translate)?;
            (t.url, t.reason)
        }
    };
    let loc = Location::parse(&url).map_err(|e| format!("{name} -> {url}: {e}"))?;
    Ok((loc, format!("{url} ({why})")))
}

/// A rules file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default)]
    defaults: Defaults,
    #[serde(default)]
    site: Vec<RuleText>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Defaults {
    #[serde(default = "gsiftp")]
    protocol: String,
    /// Rules files of the shared section, tried after every local rule.
    #[serde(default)]
    shared: Vec<PathBuf>,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            protocol: gsiftp(),
            shared: Vec::new(),
        }
    }
}

fn gsiftp() -> String {
    "gsiftp".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleText {
    host: String,
    path: Option<String>,
    server: String,
    #[serde(default)]
    strip: String,
    #[serde(default)]
    prefix: String,
    home: Option<String>,
}

/// One rule, compiled.
#[derive(Debug)]
struct Rule {
    /// Where it came from, for `--explain`: the file and its place in it.
    origin: String,
    text: RuleText,
    host: GlobMatcher,
    path: Option<GlobMatcher>,
}

/// Every rule in the order they are tried, and the protocol for hosts none names.
#[derive(Debug)]
pub struct Sites {
    rules: Vec<Rule>,
    protocol: String,
    /// The files read (and shared ones missing), for `--explain`.
    read: Vec<String>,
}

/// What a remote operand became, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Translated {
    /// The URL ferry copies from or to.
    pub url: String,
    /// Which rule matched, or that none did.
    pub reason: String,
}

impl Sites {
    /// The rules in `files` (missing files are skipped; a file that does not parse is an error).
    pub fn load(files: &[PathBuf]) -> Result<Sites, String> {
        let mut sites = Sites {
            rules: Vec::new(),
            protocol: gsiftp(),
            read: Vec::new(),
        };
        let mut protocol = None;
        let mut shared: Vec<PathBuf> = Vec::new();
        for file in files {
            let Some(parsed) = read_rules(file)? else {
                continue;
            };
            protocol.get_or_insert(parsed.defaults.protocol);
            for path in parsed.defaults.shared {
                if !shared.contains(&path) {
                    shared.push(path);
                }
            }
            for (i, rule) in parsed.site.into_iter().enumerate() {
                sites.rules.push(compile(file, "", i + 1, rule)?);
            }
            sites.read.push(file.display().to_string());
        }
        for file in &shared {
            let Some(parsed) = read_rules(file)? else {
                sites
                    .read
                    .push(format!("{} (shared, missing)", file.display()));
                continue;
            };
            for (i, rule) in parsed.site.into_iter().enumerate() {
                sites.rules.push(compile(file, " (shared)", i + 1, rule)?);
            }
            sites.read.push(format!("{} (shared)", file.display()));
        }
        if let Some(p) = protocol {
            check_protocol(&p)?;
            sites.protocol = p;
        }
        Ok(sites)
    }

    /// The default files: the user's, then the system's.
    pub fn default_files() -> Vec<PathBuf> {
        let mut files = Vec::new();
        let config = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")));
        if let Some(dir) = config {
            files.push(dir.join("ferry/gcp.toml"));
        }
        files.push(PathBuf::from("/etc/ferry/gcp.toml"));
        files
    }

    /// The files the rules came from.
    pub fn files_read(&self) -> &[String] {
        &self.read
    }

    /// The URL for `[user@]host:path`; `translate == false` ignores every rule.
    pub fn url(
        &self,
        user: Option<&str>,
        host: &str,
        path: &str,
        translate: bool,
    ) -> Result<Translated, String> {
        let rule = translate
            .then(|| {
                self.rules.iter().find(|r| {
                    r.host.is_match(host) && r.path.as_ref().is_none_or(|p| p.is_match(path))
                })
            })
            .flatten();
        let Some(rule) = rule else {
            let why = if translate {
                "no rule names this host"
            } else {
                "--no-translate"
            };
            if !path.starts_with('/') {
                return Err(format!(
                    "{host}:{path}: a path relative to your home needs a site rule with `home` \
                     ({why}); write {host}:/absolute/path"
                ));
            }
            return Ok(Translated {
                url: format!(
                    "{}://{}{}{}",
                    self.protocol,
                    user.map(|u| format!("{u}@")).unwrap_or_default(),
                    bracket(host),
                    escape(path)
                ),
                reason: format!("{why}: {}://HOST/PATH", self.protocol),
            });
        };
        let r = &rule.text;
        let absolute = if path.starts_with('/') {
            path.to_string()
        } else {
            let home = r.home.as_deref().ok_or_else(|| {
                format!(
                    "{host}:{path}: a relative path, and {} has no `home`; write {host}:/absolute/path",
                    rule.origin
                )
            })?;
            let who = user.map(str::to_string).unwrap_or_else(local_user);
            format!(
                "{}/{}",
                home.replace("{user}", &who).trim_end_matches('/'),
                path
            )
        };
        let rest = absolute.strip_prefix(r.strip.as_str()).unwrap_or(&absolute);
        let joined = if rest.starts_with('/') || rest.is_empty() {
            format!("{}{rest}", r.prefix.trim_end_matches('/'))
        } else {
            format!("{}/{rest}", r.prefix.trim_end_matches('/'))
        };
        let joined = if joined.is_empty() {
            "/".into()
        } else {
            joined
        };
        let (scheme, authority) = r.server.split_once("://").unwrap_or(("gsiftp", &r.server));
        let authority = authority.trim_end_matches('/');
        let authority = match user {
            Some(u) if !authority.contains('@') => format!("{u}@{authority}"),
            _ => authority.to_string(),
        };
        Ok(Translated {
            url: format!("{scheme}://{authority}{}", escape(&joined)),
            reason: format!("{}: host = \"{}\"", rule.origin, r.host),
        })
    }
}

/// A rules file, or `None` when there is none.
fn read_rules(file: &Path) -> Result<Option<RulesFile>, String> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    toml::from_str(&text)
        .map(Some)
        .map_err(|e| format!("{}: {e}", file.display()))
}

fn compile(file: &Path, kind: &str, n: usize, text: RuleText) -> Result<Rule, String> {
    let origin = format!("{}{kind} rule {n}", file.display());
    let glob = |pattern: &str| {
        Glob::new(pattern)
            .map(|g| g.compile_matcher())
            .map_err(|e| format!("{origin}: {e}"))
    };
    let host = glob(&text.host)?;
    let path = text.path.as_deref().map(glob).transpose()?;
    let scheme = text.server.split_once("://").map_or("", |(s, _)| s);
    check_protocol(scheme).map_err(|e| format!("{origin}: server = \"{}\": {e}", text.server))?;
    Ok(Rule {
        origin,
        text,
        host,
        path,
    })
}

fn check_protocol(p: &str) -> Result<(), String> {
    match p {
        "gsiftp" | "ftp" | "ftps" | "ftpes" => Ok(()),
        other => Err(format!(
            "protocol '{other}': gcp speaks gsiftp, ftp, ftps or ftpes"
        )),
    }
}

fn bracket(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// Percent-encodes what a URL path cannot hold as written.
fn escape(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        match b {
            b'%' | b' ' | b'#' | b'?' => out.push_str(&format!("%{b:02X}")),
            _ => out.push(b as char),
        }
    }
    out
}

fn local_user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "nobody".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sites(text: &str) -> (tempfile::TempDir, Sites) {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("gcp.toml");
        std::fs::write(&f, text).expect("write");
        let s = Sites::load(&[dir.path().join("missing.toml"), f]).expect("rules");
        (dir, s)
    }

    const RULES: &str = r#"
[defaults]
protocol = "ftp"

[[site]]
host = "*.cluster.example.org"
path = "/data/**"
server = "gsiftp://dtn.example.org:2811"
strip = "/data"
prefix = "/gpfs/project"
home = "/gpfs/home/{user}"

[[site]]
host = "*.cluster.example.org"
server = "gsiftp://dtn2.example.org"
home = "/home/{user}"
"#;

    #[test]
    fn the_first_matching_rule_translates_and_says_so() {
        let (_d, s) = sites(RULES);
        let t = s
            .url(None, "node7.cluster.example.org", "/data/run 1/x.h5", true)
            .expect("translated");
        assert_eq!(
            t.url,
            "gsiftp://dtn.example.org:2811/gpfs/project/run%201/x.h5"
        );
        assert!(
            t.reason
                .ends_with("gcp.toml rule 1: host = \"*.cluster.example.org\""),
            "{}",
            t.reason
        );
        // The path glob sends /scratch to the second rule; a user rides along.
        let t = s
            .url(Some("bob"), "n1.cluster.example.org", "/scratch/y", true)
            .expect("translated");
        assert_eq!(t.url, "gsiftp://bob@dtn2.example.org/scratch/y");
        assert!(t.reason.contains("rule 2"), "{}", t.reason);
        // Relative paths go under the rule's home.
        let t = s
            .url(Some("bob"), "n1.cluster.example.org", "notes.txt", true)
            .expect("translated");
        assert_eq!(t.url, "gsiftp://bob@dtn2.example.org/home/bob/notes.txt");
    }

    #[test]
    fn other_hosts_and_no_translate_use_the_default_protocol() {
        let (_d, s) = sites(RULES);
        let t = s.url(None, "elsewhere.org", "/x", true).expect("url");
        assert_eq!(t.url, "ftp://elsewhere.org/x");
        assert!(
            t.reason.starts_with("no rule names this host"),
            "{}",
            t.reason
        );
        let t = s
            .url(None, "n1.cluster.example.org", "/data/x", false)
            .expect("url");
        assert_eq!(t.url, "ftp://n1.cluster.example.org/data/x");
        assert_eq!(t.reason, "--no-translate: ftp://HOST/PATH");
        let t = s.url(Some("al"), "::1", "/x", true).expect("url");
        assert_eq!(t.url, "ftp://al@[::1]/x");
        let e = s
            .url(None, "elsewhere.org", "x", true)
            .expect_err("relative");
        assert!(e.contains("home"), "{e}");
    }

    #[test]
    fn shared_rules_come_after_every_local_one_and_missing_ones_are_shown() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vo = dir.path().join("vo-sites.toml");
        std::fs::write(
            &vo,
            "[[site]]\nhost = \"*.far.example.org\"\nserver = \"gsiftp://dtn.far.example.org\"\n\
             [[site]]\nhost = \"*.cluster.example.org\"\nserver = \"gsiftp://shadowed\"\n",
        )
        .expect("write");
        let local = dir.path().join("gcp.toml");
        let text = format!(
            "[defaults]\nshared = [\"{}\", \"{}\"]\n{}",
            vo.display(),
            dir.path().join("gone.toml").display(),
            RULES.replace("[defaults]\nprotocol = \"ftp\"\n", "")
        );
        std::fs::write(&local, text).expect("write");
        let s = Sites::load(&[local]).expect("rules");
        let t = s.url(None, "n1.far.example.org", "/x", true).expect("url");
        assert_eq!(t.url, "gsiftp://dtn.far.example.org/x");
        assert!(
            t.reason.contains("vo-sites.toml (shared) rule 1"),
            "{}",
            t.reason
        );
        // The site's own rule wins over the shared one for its hosts.
        let t = s
            .url(None, "n1.cluster.example.org", "/x", true)
            .expect("url");
        assert_eq!(t.url, "gsiftp://dtn2.example.org/x");
        assert!(
            s.files_read()
                .iter()
                .any(|f| f.ends_with("gone.toml (shared, missing)")),
            "{:?}",
            s.files_read()
        );
    }

    #[test]
    fn bad_rules_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("gcp.toml");
        for (text, says) in [
            (
                "[[site]]\nhost = \"a\"\nserver = \"http://x\"\n",
                "speaks gsiftp",
            ),
            ("[[site]]\nhost = \"[\"\nserver = \"ftp://x\"\n", "rule 1"),
            ("[[site]]\nhost = \"a\"\n", "server"),
            (
                "[[site]]\nhost = \"a\"\nserver = \"ftp://x\"\nport = 1\n",
                "port",
            ),
            ("[defaults]\nprotocol = \"sftp\"\n", "sftp"),
        ] {
            std::fs::write(&f, text).expect("write");
            let e = Sites::load(std::slice::from_ref(&f)).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
