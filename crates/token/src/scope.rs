//! What a token lets its bearer do: the storage scopes of the WLCG profile and of SciTokens,
//! turned into rights on paths of this site, and the operations those rights allow.
//!
//! - WLCG: `storage.read:/p`, `storage.create:/p`, `storage.modify:/p`, `storage.stage:/p`,
//!   `storage.poll:/p`. The path is required (a storage scope without one refuses the token).
//!   `create` writes new files and directories but neither overwrites nor deletes; `modify`
//!   does both and more, but does not read; `stage` does not read either (whatever 1.0 said).
//! - SciTokens: `read:/p` and `write:/p` (the path defaults to `/`); `write` is create and
//!   modify, as scitokens-cpp maps it.
//! - Every storage scope allows stat on its paths. Other scopes (`openid`, `compute.*`) grant
//!   nothing here.
//!
//! Paths are relative to the issuer's base path on the site, and match by whole components:
//! `/foo` covers `/foo` and `/foo/bar`, never `/foobar`. A scope path ending in `/` names a
//! directory: it covers what is below it and listing it, not a file of its name. The leading
//! directories of a scope's path may be looked at (stat), and made where the scope writes.
//! `..`, an encoded `/`, `\` or NUL in a scope's path refuses the token; a path asked for is
//! normalised (`//`, `.`, `..`) before it is matched, and one that climbs above `/` matches
//! nothing.

use crate::claims::Profile;
use crate::error::TokenError;

/// A right a scope grants on a path and below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right {
    /// Read files and list directories (`storage.read`, `read`).
    Read,
    /// Create new files and directories (`storage.create`; `write` with `Modify`).
    Create,
    /// Create, overwrite, delete, rename (`storage.modify`; `write` with `Create`).
    Modify,
    /// Bring files online (`storage.stage`).
    Stage,
    /// Ask where files are (`storage.poll`).
    Poll,
}

/// An operation on a path, as a door asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Read a file (GET).
    Read,
    /// List a directory (PROPFIND with depth).
    List,
    /// Look at one entry: size, checksum, type (HEAD, PROPFIND depth 0).
    Stat,
    /// Write a file that is not there (PUT of a new file).
    Create,
    /// Make a directory (MKCOL, or the parents of an upload).
    Mkdir,
    /// Write over a file that is there.
    Overwrite,
    /// Remove a file or directory.
    Delete,
    /// Rename (both names).
    Rename,
    /// Bring a file online.
    Stage,
}

impl Operation {
    /// The scope a token needs for it, for the refusal's message.
    pub fn needs(self) -> &'static str {
        match self {
            Operation::Read | Operation::List => "storage.read (read)",
            Operation::Stat => "a storage scope",
            Operation::Create | Operation::Mkdir => "storage.create or storage.modify (write)",
            Operation::Overwrite | Operation::Delete | Operation::Rename => {
                "storage.modify (write)"
            }
            Operation::Stage => "storage.stage",
        }
    }
}

impl Right {
    /// Whether this right allows `op` on a path it covers.
    pub fn allows(self, op: Operation) -> bool {
        use Operation as O;
        match self {
            Right::Read => matches!(op, O::Read | O::List | O::Stat),
            Right::Create => matches!(op, O::Create | O::Mkdir | O::Rename | O::Stat),
            Right::Modify => matches!(
                op,
                O::Create | O::Mkdir | O::Overwrite | O::Delete | O::Rename | O::Stat
            ),
            Right::Stage => matches!(op, O::Stage | O::Stat),
            Right::Poll => op == O::Stat,
        }
    }
}

/// One right on one path of the site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The right.
    pub right: Right,
    /// The site path it covers (normalised, `/` or without a trailing `/`).
    pub path: String,
    /// The scope named a directory (a trailing `/`).
    pub dir_only: bool,
}

/// Everything a token grants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants(pub Vec<Grant>);

/// `path` normalised: `//` and `.` dropped, `..` applied; `None` when it climbs above `/`, is not
/// absolute, or holds NUL.
pub fn normalize(path: &str) -> Option<String> {
    if !path.starts_with('/') || path.contains('\0') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// Whether `path` is `top` or below it, by whole components.
pub fn within(path: &str, top: &str) -> bool {
    top == "/"
        || path == top
        || (path.len() > top.len() && path.starts_with(top) && path.as_bytes()[top.len()] == b'/')
}

/// A scope's path, checked, decoded and normalised; whether it names a directory.
fn scope_path(scope: &str, raw: &str) -> Result<(String, bool), TokenError> {
    let bad = |why: &str| Err(TokenError::Scope(scope.to_string(), why.to_string()));
    if !raw.starts_with('/') {
        return bad("the path is not absolute");
    }
    if raw.contains('\\') || raw.contains('\0') {
        return bad("the path holds \\ or NUL");
    }
    if raw.to_ascii_lowercase().contains("%2f") {
        return bad("the path holds an encoded /");
    }
    let decoded = match percent_decode(raw) {
        Some(d) if !d.contains('%') && !d.contains('\0') => d,
        _ => return bad("the path's %-escapes are not single and valid"),
    };
    if decoded.split('/').any(|s| s == "..") {
        return bad("the path holds ..");
    }
    let path = normalize(&decoded).ok_or(TokenError::Scope(
        scope.to_string(),
        "the path is not a path".into(),
    ))?;
    Ok((path.clone(), raw.ends_with('/') && path != "/"))
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `base` joined with a scope path (both normalised).
fn under(base: &str, path: &str) -> String {
    match (base, path) {
        ("/", p) => p.to_string(),
        (b, "/") => b.to_string(),
        (b, p) => format!("{b}{p}"),
    }
}

impl Grants {
    /// The grants of `scopes` (a token's `scope` claim) for a token of `profile` whose issuer's
    /// paths start at `base` on this site.
    pub fn parse(scopes: &[String], profile: Profile, base: &str) -> Result<Grants, TokenError> {
        let base = normalize(base).ok_or(TokenError::Scope(
            base.to_string(),
            "the issuer's base path is not a path".into(),
        ))?;
        let mut grants = Vec::new();
        for scope in scopes {
            let (rights, raw): (&[Right], &str) = match profile {
                Profile::Wlcg => {
                    let Some(rest) = scope.strip_prefix("storage.") else {
                        continue;
                    };
                    let (name, path) = match rest.split_once(':') {
                        Some((n, p)) if !p.is_empty() => (n, p),
                        _ => {
                            return Err(TokenError::Scope(
                                scope.clone(),
                                "a storage scope needs a path".into(),
                            ))
                        }
                    };
                    let rights: &[Right] = match name {
                        "read" => &[Right::Read],
                        "create" => &[Right::Create],
                        "modify" => &[Right::Modify],
                        "stage" => &[Right::Stage],
                        "poll" => &[Right::Poll],
                        _ => continue,
                    };
                    (rights, path)
                }
                Profile::SciTokens => {
                    let (name, path) = scope.split_once(':').unwrap_or((scope, "/"));
                    let rights: &[Right] = match name {
                        "read" => &[Right::Read],
                        "write" => &[Right::Create, Right::Modify],
                        _ => continue,
                    };
                    (rights, if path.is_empty() { "/" } else { path })
                }
            };
            let (path, dir_only) = scope_path(scope, raw)?;
            for &right in rights {
                grants.push(Grant {
                    right,
                    path: under(&base, &path),
                    dir_only,
                });
            }
        }
        Ok(Grants(grants))
    }

    /// These grants narrowed to `restricted` site paths (an issuer's `restricted-paths`): a
    /// grant inside one stays, one above them is cut down to them, the others go.
    pub fn restricted_to(self, restricted: &[String]) -> Grants {
        if restricted.is_empty() {
            return self;
        }
        let mut kept = Vec::new();
        for g in self.0 {
            for r in restricted {
                if within(&g.path, r) {
                    kept.push(g.clone());
                    break;
                }
                if within(r, &g.path) {
                    kept.push(Grant {
                        path: r.clone(),
                        ..g.clone()
                    });
                }
            }
        }
        Grants(kept)
    }

    /// Whether the grants allow `op` on the site path `path`.
    pub fn allow(&self, op: Operation, path: &str) -> bool {
        let Some(path) = normalize(path) else {
            return false;
        };
        self.0.iter().any(|g| {
            let covered = within(&path, &g.path)
                && !(g.dir_only
                    && path == g.path
                    && !matches!(op, Operation::List | Operation::Mkdir | Operation::Stat));
            if covered {
                return g.right.allows(op);
            }
            // The directories leading to a grant's path: seen by all, made by writers.
            within(&g.path, &path)
                && match op {
                    Operation::Stat => true,
                    Operation::Mkdir => matches!(g.right, Right::Create | Right::Modify),
                    _ => false,
                }
        })
    }

    /// Whether nothing is granted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests;
