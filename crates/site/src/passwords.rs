//! Password logins: argon2id hashes in a `user:hash[:account]` file, shared by both doors.

use std::collections::HashMap;
use std::path::Path;

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

/// User names that log in anonymously when anonymous access is on.
pub const ANONYMOUS_NAMES: &[&str] = &["anonymous", "ftp"];

/// Password entries loaded from a file.
#[derive(Debug, Default, Clone)]
pub struct PasswordDb {
    entries: HashMap<String, Entry>,
}

/// One password user: the argon2 hash, and the local account the user works as.
#[derive(Debug, Clone)]
struct Entry {
    hash: String,
    account: Option<String>,
}

/// Password-file problems.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not `user:$argon2...[:account]`.
    #[error("{path}:{line}: expected 'user:$argon2id$...' or 'user:$argon2id$...:account' (write entries with 'ferry passwd')")]
    Malformed {
        /// File.
        path: String,
        /// 1-based line number.
        line: usize,
    },
    /// A user name with characters that do not belong in one.
    #[error("invalid user name '{0}': use letters, digits, '.', '_' and '-'")]
    BadUserName(String),
    /// Hashing failed.
    #[error("cannot hash password: {0}")]
    Hash(String),
}

impl PasswordDb {
    /// Loads `user:hash[:account]` lines; `#` starts a comment. Plain-text passwords are refused.
    pub fn load(path: &Path) -> Result<PasswordDb, AuthError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| AuthError::Io {
            path: p.clone(),
            source,
        })?;
        Self::parse(&text, &p)
    }

    /// Parses the text of a password file (`path` names it in errors).
    pub fn parse(text: &str, path: &str) -> Result<PasswordDb, AuthError> {
        let mut entries = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let malformed = || AuthError::Malformed {
                path: path.into(),
                line: i + 1,
            };
            // An argon2 PHC string has no ':', so a third field is the account.
            let mut fields = line.splitn(3, ':');
            let user = fields.next().unwrap_or_default();
            let hash = fields.next().ok_or_else(malformed)?;
            let account = fields.next().map(str::trim);
            if !valid_user_name(user)
                || PasswordHash::new(hash).is_err()
                || !hash.starts_with("$argon2")
                || account.is_some_and(|a| !valid_user_name(a))
            {
                return Err(malformed());
            }
            entries.insert(
                user.to_string(),
                Entry {
                    hash: hash.to_string(),
                    account: account.map(str::to_string),
                },
            );
        }
        Ok(PasswordDb { entries })
    }

    /// Whether `password` is right for `user`. Unknown users cost the same time as known ones.
    pub fn verify(&self, user: &str, password: &str) -> bool {
        const DUMMY: &str = "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$2d6cdvVv3DWKaO7e6kzE0YKpAdl0m6Qw0nX7bgaRHzk";
        let (hash, known) = match self.entries.get(user) {
            Some(e) => (e.hash.as_str(), true),
            None => (DUMMY, false),
        };
        let ok = PasswordHash::new(hash).map(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        });
        known && ok.unwrap_or(false)
    }

    /// The local account `user`'s line names, if it names one.
    pub fn account_of(&self, user: &str) -> Option<&str> {
        self.entries.get(user).and_then(|e| e.account.as_deref())
    }

    /// The users, in no particular order.
    pub fn users(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Number of users.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no users.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Whether `name` is acceptable as a user name in a password file.
pub fn valid_user_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@'))
}

/// A salted argon2id hash of `password`.
pub fn hash_password(password: &str) -> Result<String, AuthError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| AuthError::Hash(e.to_string()))
}

/// Adds or replaces `user`'s entry in the password file at `path` (created if missing),
/// keeping other lines and comments. `account` names the local account the user works as;
/// `None` keeps the one the old line named, if any.
pub fn set_password(
    path: &Path,
    user: &str,
    password: &str,
    account: Option<&str>,
) -> Result<(), AuthError> {
    if !valid_user_name(user) {
        return Err(AuthError::BadUserName(user.into()));
    }
    if let Some(a) = account.filter(|a| !valid_user_name(a)) {
        return Err(AuthError::BadUserName(a.into()));
    }
    let p = path.display().to_string();
    let old = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => return Err(AuthError::Io { path: p, source }),
    };
    let hash = hash_password(password)?;
    let mut out = String::new();
    let mut replaced = false;
    let entry = |account: Option<&str>| match account {
        Some(a) => format!("{user}:{hash}:{a}\n"),
        None => format!("{user}:{hash}\n"),
    };
    for line in old.lines() {
        let mut fields = line.splitn(3, ':');
        if fields.next() == Some(user) {
            let kept = fields.nth(1).map(str::trim);
            out.push_str(&entry(account.or(kept)));
            replaced = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !replaced {
        out.push_str(&entry(account));
    }
    let tmp = path.with_extension("tmp");
    write_private(&tmp, out.as_bytes()).map_err(|source| AuthError::Io {
        path: tmp.display().to_string(),
        source,
    })?;
    std::fs::rename(&tmp, path).map_err(|source| AuthError::Io { path: p, source })
}

fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(data)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_file_round_trip_verifies_only_the_right_password() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("passwd");
        set_password(&f, "alice", "s3cret", None).unwrap();
        set_password(&f, "bob", "other", None).unwrap();
        set_password(&f, "alice", "new", None).unwrap();
        let db = PasswordDb::load(&f).unwrap();
        assert_eq!(db.len(), 2);
        assert!(db.verify("alice", "new"));
        assert!(!db.verify("alice", "s3cret"));
        assert!(!db.verify("carol", "new"));
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            !text.contains("new") && !text.contains("other"),
            "no plain text in the file"
        );
    }

    #[test]
    fn a_line_may_name_the_account_and_a_new_password_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("passwd");
        set_password(&f, "alice", "one", Some("data")).unwrap();
        set_password(&f, "bob", "two", None).unwrap();
        set_password(&f, "alice", "three", None).unwrap();
        let db = PasswordDb::load(&f).unwrap();
        assert!(db.verify("alice", "three"));
        assert_eq!(db.account_of("alice"), Some("data"));
        assert_eq!(db.account_of("bob"), None);
        assert!(set_password(&f, "carol", "x", Some("bad:name")).is_err());
        assert!(PasswordDb::parse("alice:$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$2d6cdvVv3DWKaO7e6kzE0YKpAdl0m6Qw0nX7bgaRHzk:a b\n", "f").is_err());
    }

    #[test]
    fn plain_text_entries_are_refused() {
        assert!(PasswordDb::parse("alice:secret\n", "f").is_err());
        assert!(PasswordDb::parse("# comment\n\n", "f").unwrap().is_empty());
    }
}
