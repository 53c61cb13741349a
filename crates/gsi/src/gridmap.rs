//! Authorization: who a verified identity may act as. A trait, and the grid-mapfile.
//!
//! ```text
//! # comment
//! "/O=Grid/OU=Example/CN=Jane Doe" jane,jdoe
//! /O=Grid/OU=Example/CN=Robot robot
//! ```
//! The DN is quoted (`\"` and `\xHH` escapes inside) or runs to the first blank; the names
//! after it are separated by commas, the first being the default. DNs compare as Globus
//! compares them (`crate::dn::same`).

use std::path::Path;

use crate::dn;
use crate::error::{GsiError, Result};

/// Decides which local account a verified identity acts as.
pub trait Authorizer: Send + Sync {
    /// The local account for `identity` (a one-line DN): `requested` when the client named
    /// one (`USER name`) and it is allowed, else the default. Errors say why not.
    fn authorize(&self, identity: &str, requested: Option<&str>) -> Result<String>;
}

/// A parsed grid-mapfile.
#[derive(Debug, Clone, Default)]
pub struct GridMap {
    entries: Vec<(String, Vec<String>)>,
}

impl GridMap {
    /// Parses grid-mapfile text.
    pub fn parse(text: &str) -> Result<GridMap> {
        let mut entries: Vec<(String, Vec<String>)> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim_start();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad =
                |why: &str| GsiError::NotAuthorized(format!("grid-mapfile line {}: {why}", n + 1));
            let (dn, rest) = split_dn(line).ok_or_else(|| bad("unterminated quoted DN"))?;
            let users: Vec<String> = rest
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|u| !u.is_empty())
                .map(str::to_owned)
                .collect();
            if users.is_empty() {
                return Err(bad("a DN with no local user"));
            }
            // Several lines for one DN add names; the first line's first name stays the default.
            match entries.iter_mut().find(|(d, _)| *d == dn) {
                Some((_, names)) => names.extend(users),
                None => entries.push((dn, users)),
            }
        }
        Ok(GridMap { entries })
    }

    /// Reads a grid-mapfile.
    pub fn load(path: &Path) -> Result<GridMap> {
        let text = std::fs::read_to_string(path).map_err(|e| GsiError::file(path, e))?;
        GridMap::parse(&text)
    }

    /// Every local name `identity` maps to, the default first.
    pub fn users(&self, identity: &str) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|(d, _)| dn::same(d, identity))
            .flat_map(|(_, u)| u.iter().map(String::as_str))
            .collect()
    }
}

impl Authorizer for GridMap {
    fn authorize(&self, identity: &str, requested: Option<&str>) -> Result<String> {
        let users = self.users(identity);
        let Some(default) = users.first() else {
            return Err(GsiError::NotAuthorized(format!(
                "Gridmap lookup failure: Could not map {identity}"
            )));
        };
        match requested {
            None => Ok(default.to_string()),
            Some(r) if users.contains(&r) => Ok(r.to_string()),
            Some(r) => Err(GsiError::NotAuthorized(format!(
                "{identity} is not allowed to act as {r}"
            ))),
        }
    }
}

/// The DN at the start of a line (unescaped) and the rest.
fn split_dn(line: &str) -> Option<(String, &str)> {
    if let Some(body) = line.strip_prefix('"') {
        let mut dn = Vec::new();
        let bytes = body.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'"' => return Some((String::from_utf8_lossy(&dn).into_owned(), &body[i + 1..])),
                b'\\' if bytes.get(i + 1) == Some(&b'x') => {
                    let hex = body.get(i + 2..i + 4)?;
                    dn.push(u8::from_str_radix(hex, 16).ok()?);
                    i += 4;
                }
                b'\\' => {
                    dn.push(*bytes.get(i + 1)?);
                    i += 2;
                }
                b => {
                    dn.push(b);
                    i += 1;
                }
            }
        }
        None
    } else {
        let end = line.find(char::is_whitespace).unwrap_or(line.len());
        Some((line[..end].to_owned(), &line[end..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAP: &str = r#"
# users
"/O=Grid/OU=Example/CN=Jane Doe" jane,jdoe
"/O=Grid/OU=Example/CN=Quote \"Q\" Person"   quentin
/O=Grid/OU=Example/CN=Robot robot
"/O=Grid/OU=Example/CN=Jane Doe" janet
"/O=Grid/OU=Example/CN=Hex \x41" hexa
"#;

    #[test]
    fn quoted_unquoted_and_escaped_dns_map_to_their_users() {
        let m = GridMap::parse(MAP).unwrap();
        assert_eq!(
            m.authorize("/O=Grid/OU=Example/CN=Jane Doe", None).unwrap(),
            "jane"
        );
        assert_eq!(
            m.authorize("/O=Grid/OU=Example/CN=Quote \"Q\" Person", None)
                .unwrap(),
            "quentin"
        );
        assert_eq!(
            m.authorize("/O=Grid/OU=Example/CN=Robot", None).unwrap(),
            "robot"
        );
        assert_eq!(
            m.authorize("/O=Grid/OU=Example/CN=Hex A", None).unwrap(),
            "hexa"
        );
    }

    #[test]
    fn a_dn_may_act_as_any_listed_user_and_no_other() {
        let m = GridMap::parse(MAP).unwrap();
        let jane = "/o=grid/ou=example/cn=jane doe";
        assert_eq!(m.users(jane), ["jane", "jdoe", "janet"]);
        assert_eq!(m.authorize(jane, Some("janet")).unwrap(), "janet");
        assert!(m.authorize(jane, Some("robot")).is_err());
    }

    #[test]
    fn an_unmapped_dn_is_refused_with_globus_words() {
        let m = GridMap::parse(MAP).unwrap();
        let e = m
            .authorize("/O=Grid/CN=Stranger", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("Could not map /O=Grid/CN=Stranger"), "{e}");
    }

    #[test]
    fn several_dns_may_share_a_user() {
        let m = GridMap::parse("\"/CN=a\" shared\n\"/CN=b\" shared\n").unwrap();
        assert_eq!(m.authorize("/CN=a", None).unwrap(), "shared");
        assert_eq!(m.authorize("/CN=b", None).unwrap(), "shared");
    }

    #[test]
    fn broken_lines_are_errors() {
        assert!(GridMap::parse("\"/CN=unterminated jane\n").is_err());
        assert!(GridMap::parse("\"/CN=nobody\"\n").is_err());
    }
}
