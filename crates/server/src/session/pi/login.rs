//! The login flow: `AUTH`/`ADAT` (the GSS exchange runs in memory, in `ferry_gsi`), `USER`
//! and `PASS`. Checking a password and setting up the session's storage and mover are the
//! driver's: the PI asks with [`Request::Login`] and replies when [`Pi::login_done`] answers.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ferry_proto::command::Dcau;
use ferry_proto::Reply;

use super::{LoginState, Pending, Pi, Request};
use crate::auth::ANONYMOUS_NAMES;

/// How a login is checked.
#[derive(Debug)]
pub(crate) enum LoginKind {
    /// A password-file user and the password given.
    Password(String),
    /// An anonymous login (the configuration allows it).
    Anonymous,
    /// A GSI identity the grid-mapfile mapped to this account, with any delegated credential.
    Gsi {
        /// The certificate subject.
        identity: String,
        /// What the client delegated.
        delegated: Option<ferry_gsi::Credential>,
    },
}

/// A login for the driver to check and set up.
#[derive(Debug)]
pub(crate) struct LoginRequest {
    /// The user (the local account, for GSI).
    pub(crate) name: String,
    /// How to check it.
    pub(crate) kind: LoginKind,
}

impl Pi {
    /// `AUTH GSSAPI`: starts the GSS exchange that `ADAT` continues.
    pub(super) fn cmd_auth(&mut self, mechanism: &str) {
        let Some(gsi) = self.ctx.gsi.as_ref() else {
            return self.reply(504, "GSI security is not enabled on this server.");
        };
        if !mechanism.eq_ignore_ascii_case("GSSAPI") {
            return self.reply(504, "Unknown authentication type.");
        }
        if self.gsi_identity.is_some() || self.login != LoginState::None {
            return self.reply(503, "Already authenticated.");
        }
        match gsi.acceptor() {
            Ok(ctx) => {
                self.gss = Some(Box::new(ctx));
                self.reply(334, "Using authentication type; ADAT must follow.");
            }
            Err(e) => self.reply(431, format!("Cannot start GSSAPI: {e}")),
        }
    }

    /// `ADAT`: one step of the GSS exchange; once it completes, commands are wrapped.
    pub(super) fn cmd_adat(&mut self, token: &str) {
        let Some(mut gss) = self.gss.take() else {
            return self.reply(503, "Send AUTH GSSAPI first.");
        };
        let Ok(bytes) = B64.decode(token.trim()) else {
            return self.reply(501, "ADAT token is not base64.");
        };
        match gss.step(&bytes) {
            Ok(ferry_gsi::Step::Continue(out)) => {
                self.gss = Some(gss);
                self.reply(335, format!("ADAT={}", B64.encode(out)));
            }
            Ok(ferry_gsi::Step::Done(last)) => {
                let Some(identity) = gss.peer().map(|p| p.identity().to_owned()) else {
                    return self.reply(535, "GSSAPI authentication failed: no peer.");
                };
                tracing::info!(peer = %self.peer, dn = %identity, tls = %gss.describe(), "GSSAPI authentication");
                self.delegated = gss.take_delegated();
                self.gsi_identity = Some(identity);
                // After a GSI login data channels are authenticated unless the client says
                // DCAU N, as with Globus.
                self.settings.dcau = Dcau::Self_;
                // The 235 goes out in clear; everything after it is wrapped.
                match last {
                    Some(t) => self.reply(235, format!("ADAT={}", B64.encode(t))),
                    None => self.reply(235, "GSSAPI Authentication successful."),
                }
                self.out.push_back(super::Output::Protect(gss));
            }
            Ok(ferry_gsi::Step::NeedMore) => {
                self.reply(535, "GSSAPI authentication failed: incomplete token.")
            }
            Err(e) => {
                self.ctx.shared.metrics.gsi_failed(e.reason());
                tracing::info!(peer = %self.peer, "GSSAPI authentication refused: {e}");
                self.reply(530, format!("GSSAPI authentication failed: {e}"));
            }
        }
    }

    pub(super) fn cmd_user(&mut self, name: String) {
        if self.login != LoginState::None {
            return self.reply(503, "You are already logged in.");
        }
        if let (Some(identity), Some(gsi)) = (self.gsi_identity.clone(), self.ctx.gsi.as_ref()) {
            let requested = (name != ":globus-mapping:").then_some(name.as_str());
            return match gsi.authorizer.authorize(&identity, requested) {
                Ok(local) => {
                    let text = format!("Password required for {local}.");
                    self.gsi_user = Some(local);
                    self.reply(331, text);
                }
                Err(e) => {
                    let m = &self.ctx.shared.metrics;
                    m.gsi_failed("not_authorized");
                    m.login_failed(crate::metrics::AuthKind::Gsi);
                    tracing::info!(peer = %self.peer, dn = %identity, "not authorized: {e}");
                    self.reply(530, format!("Login incorrect. : {e}"));
                }
            };
        }
        let text = if self.anonymous(&name) {
            "Guest login ok, send your email address as password.".to_string()
        } else {
            format!("Password required for {name}.")
        };
        self.user = Some(name);
        self.reply(331, text);
    }

    pub(super) fn cmd_pass(&mut self, password: String) {
        if self.login != LoginState::None {
            return self.reply(503, "You are already logged in.");
        }
        let request = if let Some(identity) = self.gsi_identity.clone() {
            let Some(name) = self.gsi_user.take() else {
                return self.reply(503, "Login with USER first.");
            };
            LoginRequest {
                name,
                kind: LoginKind::Gsi {
                    identity,
                    delegated: self.delegated.clone(),
                },
            }
        } else {
            let Some(name) = self.user.take() else {
                return self.reply(503, "Login with USER first.");
            };
            let kind = if self.anonymous(&name) {
                LoginKind::Anonymous
            } else {
                LoginKind::Password(password)
            };
            LoginRequest { name, kind }
        };
        self.login = LoginState::Checking(request.name.clone());
        self.pending = Some(Pending::Login);
        self.request(Request::Login(request));
    }

    /// The driver's answer to [`Request::Login`]: logged in (and whether read-only), or the
    /// refusal to send.
    pub(crate) fn login_done(&mut self, result: Result<bool, Reply>) {
        if !matches!(self.pending.take(), Some(Pending::Login)) {
            return;
        }
        let LoginState::Checking(name) = std::mem::replace(&mut self.login, LoginState::None)
        else {
            return;
        };
        match result {
            Ok(read_only) => {
                tracing::info!(peer = %self.peer, user = %name, read_only, "logged in");
                self.reply(230, format!("User {name} logged in."));
                self.login = LoginState::In { name, read_only };
            }
            Err(reply) => {
                tracing::info!(peer = %self.peer, user = %name, "login refused");
                self.send(reply);
            }
        }
    }

    /// Whether `name` logs in anonymously here.
    fn anonymous(&self, name: &str) -> bool {
        self.ctx.config.anonymous && ANONYMOUS_NAMES.contains(&name)
    }

    /// Whether the session logged in with GSI.
    pub(super) fn is_gsi(&self) -> bool {
        self.gsi_identity.is_some()
    }

    /// Whether the session logged in anonymously.
    pub(super) fn is_anonymous(&self) -> bool {
        !self.is_gsi() && matches!(&self.login, LoginState::In { name, .. } if self.anonymous(name))
    }
}
