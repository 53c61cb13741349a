//! Which local account each kind of login works as: anonymous sessions as the anonymous
//! account, password users as the account their password-file line (or the default) names,
//! GSI sessions as the account the grid-mapfile maps them to. A server started as root never
//! serves a session as root unless the admin said so (`allow-root-sessions`): a root process
//! serving anonymous users as itself hands them `/etc/shadow`.

use crate::passwords::PasswordDb;

/// Accounts tried, in order, for anonymous sessions when the admin named none.
pub const ANONYMOUS_DEFAULTS: &[&str] = &["ftp", "nobody"];

/// The settings that decide who sessions work as (the same for both doors).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountPolicy {
    /// Anonymous logins are on.
    pub anonymous: bool,
    /// The account anonymous sessions work as (`None`: `ftp`, else `nobody`).
    pub anonymous_user: Option<String>,
    /// A password file is configured.
    pub password_file: bool,
    /// The account password users without one of their own work as.
    pub password_account: Option<String>,
    /// X.509 (GSI) logins are on.
    pub gsi: bool,
    /// X.509 sessions work as their mapped account (else as this process).
    pub run_as_user: bool,
    /// Sessions may work as root.
    pub allow_root_sessions: bool,
}

/// Why the accounts of a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AccountError(String);

/// The accounts sessions work as, resolved once per configuration (start and reload).
#[derive(Debug, Clone, Default)]
pub struct Accounts {
    /// The process is root and switches each session to its account.
    switching: bool,
    /// Sessions may work as root (the admin's `allow-root-sessions`).
    allow_root: bool,
    /// Anonymous sessions' account.
    anonymous: Option<String>,
    /// Password users without an account of their own.
    password_default: Option<String>,
}

/// A local account as the report shows it.
fn describe(name: &str) -> String {
    match ferry_storage::Identity::lookup(name) {
        Ok(id) => format!("{name} (uid {}, gid {})", id.uid, id.gid),
        Err(_) => format!("{name} (no such account here)"),
    }
}

impl Accounts {
    /// Resolves `config`'s accounts; started as root, every account must exist and none may be
    /// root unless `allow_root_sessions`.
    pub fn resolve(
        config: &AccountPolicy,
        passwords: &PasswordDb,
    ) -> Result<Accounts, AccountError> {
        Accounts::resolve_as(config, passwords, ferry_storage::Identity::can_switch())
    }

    fn resolve_as(
        config: &AccountPolicy,
        passwords: &PasswordDb,
        switching: bool,
    ) -> Result<Accounts, AccountError> {
        let allow_root = config.allow_root_sessions;
        let anonymous = match (&config.anonymous_user, config.anonymous) {
            (_, false) => None,
            (Some(a), true) => Some(a.clone()),
            (None, true) => ANONYMOUS_DEFAULTS
                .iter()
                .find(|a| ferry_storage::Identity::lookup(a).is_ok())
                .map(|a| (*a).to_string()),
        };
        let accounts = Accounts {
            switching,
            allow_root,
            anonymous,
            password_default: config.password_account.clone(),
        };
        if !switching {
            return Ok(accounts);
        }
        let check = |who: &str, account: &str| -> Result<(), AccountError> {
            let id = ferry_storage::Identity::lookup(account)
                .map_err(|e| AccountError(format!("{who} would run as {account}: {e}")))?;
            if id.uid == 0 && !allow_root {
                return Err(AccountError(format!(
                    "{who} would run as {account}, which is root: name an unprivileged account, \
                     or pass --allow-root-sessions to mean it"
                )));
            }
            Ok(())
        };
        if config.anonymous {
            let Some(a) = &accounts.anonymous else {
                return Err(AccountError(format!(
                    "anonymous sessions need an unprivileged account to run as and none of {} \
                     exists: pass --anonymous-user ACCOUNT",
                    ANONYMOUS_DEFAULTS.join(", ")
                )));
            };
            check("anonymous sessions", a)?;
        }
        for user in passwords.users() {
            let Some(account) = accounts.password_account(passwords, user) else {
                if allow_root {
                    // Works as this process, root, as the admin allowed.
                    continue;
                }
                return Err(AccountError(format!(
                    "password user {user} has no account to run as: add one to its line \
                     (ferry passwd --account ACCOUNT), or set --password-account ACCOUNT for every \
                     password user"
                )));
            };
            check(&format!("password user {user}"), &account)?;
        }
        if config.gsi && !config.run_as_user && !allow_root {
            return Err(AccountError(
                "run-as-user = false serves every GSI session as this process, which is root: \
                 pass --allow-root-sessions to mean it"
                    .into(),
            ));
        }
        Ok(accounts)
    }

    /// The account a password user works as.
    fn password_account(&self, passwords: &PasswordDb, user: &str) -> Option<String> {
        passwords
            .account_of(user)
            .map(str::to_string)
            .or_else(|| self.password_default.clone())
    }

    /// The account an anonymous session works as (`None`: the process's own, not root).
    pub fn anonymous(&self) -> Option<String> {
        self.anonymous.clone()
    }

    /// The account password user `user` works as.
    pub fn password(&self, passwords: &PasswordDb, user: &str) -> Option<String> {
        self.password_account(passwords, user)
    }

    /// Whether a session may work as root.
    pub fn allow_root(&self) -> bool {
        self.allow_root
    }

    /// A line per kind of login: the account it works as (`--check-config`, the start-up log).
    pub fn report(&self, config: &AccountPolicy, passwords: &PasswordDb) -> Vec<String> {
        let mut out = Vec::new();
        if !self.switching {
            let me = ferry_storage::Identity::of_process().map_or_else(
                |e| e.to_string(),
                |id| format!("{} (uid {})", id.name, id.uid),
            );
            out.push(format!(
                "sessions of every kind work as this process's own account {me}: only a \
                 server started as root switches accounts"
            ));
            return out;
        }
        if let Some(a) = self.anonymous.as_deref().filter(|_| config.anonymous) {
            out.push(format!("anonymous sessions work as {}", describe(a)));
        }
        if config.password_file {
            let mut users: Vec<&str> = passwords.users().collect();
            users.sort_unstable();
            let each: Vec<String> = users
                .iter()
                .map(|u| {
                    let a = self.password_account(passwords, u).unwrap_or_default();
                    format!("{u} as {}", describe(&a))
                })
                .collect();
            out.push(format!("password users work as: {}", each.join(", ")));
        }
        if config.gsi {
            out.push(if config.run_as_user {
                "GSI sessions work as the account the grid-mapfile maps them to".to_string()
            } else {
                "GSI sessions work as this process (root): run-as-user = false".to_string()
            });
        }
        if self.allow_root {
            out.push("sessions may work as root (allow-root-sessions)".into());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> AccountPolicy {
        AccountPolicy {
            anonymous: true,
            run_as_user: true,
            ..AccountPolicy::default()
        }
    }

    #[test]
    fn a_root_server_refuses_anonymous_sessions_as_root() {
        let mut c = config();
        c.anonymous_user = Some("root".into());
        let e = Accounts::resolve_as(&c, &PasswordDb::default(), true).unwrap_err();
        assert!(e.to_string().contains("which is root"), "{e}");
        c.allow_root_sessions = true;
        Accounts::resolve_as(&c, &PasswordDb::default(), true).unwrap();
    }

    #[test]
    fn a_root_server_serves_anonymous_as_an_unprivileged_default() {
        let a = Accounts::resolve_as(&config(), &PasswordDb::default(), true).unwrap();
        let name = a.anonymous().expect("ftp or nobody exists");
        assert!(ANONYMOUS_DEFAULTS.contains(&name.as_str()), "{name}");
        assert_ne!(ferry_storage::Identity::lookup(&name).unwrap().uid, 0);
    }

    #[test]
    fn a_root_server_refuses_password_users_without_an_account() {
        let mut c = config();
        c.anonymous = false;
        c.password_file = true;
        let db = PasswordDb::parse(
            "alice:$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$2d6cdvVv3DWKaO7e6kzE0YKpAdl0m6Qw0nX7bgaRHzk\n",
            "p",
        )
        .unwrap();
        let e = Accounts::resolve_as(&c, &db, true).unwrap_err();
        assert!(e.to_string().contains("alice has no account"), "{e}");
        c.password_account = Some("root".into());
        let e = Accounts::resolve_as(&c, &db, true).unwrap_err();
        assert!(e.to_string().contains("which is root"), "{e}");
        c.password_account = Some("nobody".into());
        let a = Accounts::resolve_as(&c, &db, true).unwrap();
        assert_eq!(a.password(&db, "alice").as_deref(), Some("nobody"));
        // Told so, a user without an account works as the server itself.
        c.password_account = None;
        c.allow_root_sessions = true;
        Accounts::resolve_as(&c, &db, true).unwrap();
    }

    #[test]
    fn gsi_without_run_as_user_on_a_root_server_needs_allow_root_sessions() {
        let mut c = config();
        c.anonymous = false;
        c.gsi = true;
        c.run_as_user = false;
        assert!(Accounts::resolve_as(&c, &PasswordDb::default(), true).is_err());
        assert!(Accounts::resolve_as(&c, &PasswordDb::default(), false).is_ok());
        c.allow_root_sessions = true;
        assert!(Accounts::resolve_as(&c, &PasswordDb::default(), true).is_ok());
    }
}
