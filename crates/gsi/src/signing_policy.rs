//! CA signing policies (`<hash>.signing_policy` beside each CA in the trusted directory): which
//! subjects a CA may sign, in the Globus EACL format.
//!
//! ```text
//! access_id_CA   X509   '/O=Grid/OU=Example/CN=Example CA'
//! pos_rights     globus CA:sign
//! cond_subjects  globus '"/O=Grid/OU=Example/*"'
//! ```
//!
//! No library reads this format; it is small. Patterns are globs (`*` any run of characters,
//! `?` one), matched against the whole one-line subject, case-sensitively as Globus does.

use crate::error::{GsiError, Result};

/// One CA's entry: its DN and the subject patterns it may sign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningPolicy {
    /// The CA's one-line DN (`access_id_CA X509 '…'`).
    pub ca: String,
    /// Whether `pos_rights globus CA:sign` was granted.
    pub may_sign: bool,
    /// The `cond_subjects` patterns.
    pub subjects: Vec<String>,
}

impl SigningPolicy {
    /// Whether this CA may have signed a certificate for `subject`.
    pub fn allows(&self, subject: &str) -> bool {
        self.may_sign
            && self
                .subjects
                .iter()
                .any(|p| glob(p.as_bytes(), subject.as_bytes()))
    }
}

/// Parses a signing-policy file into its CA entries.
pub fn parse(text: &str) -> Result<Vec<SigningPolicy>> {
    let mut out: Vec<SigningPolicy> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let bad = |why: &str| GsiError::SigningPolicy(format!("line {}: {why}", n + 1));
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let tokens = tokenize(line).ok_or_else(|| bad("unterminated quote"))?;
        let (keyword, args) = tokens.split_first().ok_or_else(|| bad("empty"))?;
        match keyword.as_str() {
            "access_id_CA" => {
                let [kind, dn] = args else {
                    return Err(bad("access_id_CA needs a type and a DN"));
                };
                if kind != "X509" {
                    return Err(bad("access_id_CA type must be X509"));
                }
                out.push(SigningPolicy {
                    ca: dn.clone(),
                    may_sign: false,
                    subjects: Vec::new(),
                });
            }
            "pos_rights" => {
                let last = out
                    .last_mut()
                    .ok_or_else(|| bad("pos_rights before access_id_CA"))?;
                if args.first().is_some_and(|a| a == "globus")
                    && args[1..].iter().any(|r| r == "CA:sign")
                {
                    last.may_sign = true;
                }
            }
            "cond_subjects" => {
                let last = out
                    .last_mut()
                    .ok_or_else(|| bad("cond_subjects before access_id_CA"))?;
                let [auth, list] = args else {
                    return Err(bad("cond_subjects needs globus and a list"));
                };
                if auth != "globus" {
                    continue;
                }
                let patterns =
                    tokenize(list).ok_or_else(|| bad("unterminated quote in subjects"))?;
                last.subjects.extend(patterns);
            }
            "neg_rights" => {}
            other => return Err(bad(&format!("unknown keyword {other}"))),
        }
    }
    Ok(out)
}

/// Splits on whitespace, keeping '…' and "…" together (quotes removed).
fn tokenize(line: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut tok = String::new();
        if c == '\'' || c == '"' {
            chars.next();
            loop {
                match chars.next() {
                    Some(q) if q == c => break,
                    Some(x) => tok.push(x),
                    None => return None,
                }
            }
        } else {
            while let Some(&x) = chars.peek() {
                if x.is_whitespace() {
                    break;
                }
                tok.push(x);
                chars.next();
            }
        }
        out.push(tok);
    }
    Some(out)
}

/// Glob match of the whole text: `*` any run, `?` one byte.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    const IGTF_STYLE: &str = r#"
# EACL for a test CA
 access_id_CA      X509         '/O=Grid/OU=Ferry Test/CN=Throwaway CA'
 pos_rights        globus        CA:sign
 cond_subjects     globus       '"/O=Grid/OU=Ferry Test/*"  "/O=Other/CN=exact"'
"#;

    #[test]
    fn a_ca_signs_only_subjects_its_policy_lists() {
        let p = parse(IGTF_STYLE).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].ca, "/O=Grid/OU=Ferry Test/CN=Throwaway CA");
        assert!(p[0].allows("/O=Grid/OU=Ferry Test/CN=Test User"));
        assert!(p[0].allows("/O=Other/CN=exact"));
        assert!(!p[0].allows("/O=Other/CN=exactly"));
        assert!(!p[0].allows("/O=Grid/OU=Evil/CN=Test User"));
        assert!(
            !p[0].allows("/o=grid/ou=ferry test/CN=x"),
            "case-sensitive, as Globus"
        );
    }

    #[test]
    fn without_ca_sign_rights_nothing_is_allowed() {
        let text = "access_id_CA X509 '/CN=CA'\ncond_subjects globus '\"*\"'\n";
        assert!(!parse(text).unwrap()[0].allows("/CN=anyone"));
    }

    #[test]
    fn malformed_files_are_errors_with_a_line_number() {
        let e = parse("pos_rights globus CA:sign\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1"), "{e}");
        assert!(parse("access_id_CA X509 '/CN=unterminated\n").is_err());
        assert!(parse("bogus_keyword x\n").is_err());
    }

    #[test]
    fn globs_match_whole_strings() {
        assert!(glob(b"/O=A/*", b"/O=A/CN=x"));
        assert!(glob(b"*", b""));
        assert!(glob(b"/CN=?", b"/CN=x"));
        assert!(!glob(b"/CN=?", b"/CN=xy"));
        assert!(glob(b"*/CN=*z", b"/O=a/CN=xyz"));
        assert!(!glob(b"/O=A", b"/O=A/CN=x"));
    }
}
