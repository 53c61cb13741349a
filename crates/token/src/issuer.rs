//! The issuers a site trusts, as its admin writes them (`[[tokens.issuer]]` in `ferry.toml`),
//! and the validation of a token against them: issuer, signature, times, audience, profile,
//! then the scopes as rights on the site's paths.

use serde::{Deserialize, Serialize};

use crate::claims::Claims;
use crate::error::TokenError;
use crate::jwt::Jwt;
use crate::keys::VerifyingKey;
use crate::scope::{normalize, Grant, Grants, Operation, Right};

/// One trusted issuer, as configured.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct IssuerConfig {
    /// The issuer (`iss`, compared exactly): an `https://` URL.
    pub url: String,
    /// Where its scopes' paths start on this site (`/` by default).
    #[serde(default = "root")]
    pub base_path: String,
    /// Audiences a token must name one of: this server's own names (`https://host[:port]`),
    /// and WLCG's or SciTokens' "any" only where listed.
    pub audiences: Vec<String>,
    /// The local account its bearers act as.
    pub account: String,
    /// Site paths its tokens are confined to, whatever they say.
    #[serde(default)]
    pub restricted_paths: Vec<String>,
    /// Accounts for particular subjects or groups, tried in order before `account`.
    #[serde(default)]
    pub map: Vec<AccountRule>,
}

/// One line of an issuer's account mapping (`[[tokens.issuer.map]]`): bearers whose `sub` is
/// `sub`, or whose `wlcg.groups` holds `group` (compared exactly), act as `account`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct AccountRule {
    /// A subject (`sub`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub: Option<String>,
    /// A group (`wlcg.groups` entry, such as `/atlas/production`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The local account.
    pub account: String,
    /// Group-based authorisation (WLCG profile): a token matched by this rule's group that
    /// carries no storage scope may do what the account may, within the issuer's base path and
    /// restricted paths; the account's file permissions decide. A token with storage scopes
    /// is held to its scopes whatever this says.
    #[serde(default)]
    pub group_access: bool,
}

impl AccountRule {
    fn matches(&self, claims: &Claims) -> bool {
        match (&self.sub, &self.group) {
            (Some(sub), None) => claims.sub.as_deref() == Some(sub.as_str()),
            (None, Some(group)) => claims.groups.iter().any(|g| g == group),
            _ => false,
        }
    }
}

fn root() -> String {
    "/".to_string()
}

/// An issuer ready to validate with: its configuration checked, its paths normalised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issuer {
    /// The configuration.
    pub config: IssuerConfig,
}

/// The issuers of a site.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Issuers {
    issuers: Vec<Issuer>,
}

/// Who a valid token speaks for, and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bearer {
    /// The issuer.
    pub issuer: String,
    /// The token's subject (for logs; scopes authorise).
    pub subject: Option<String>,
    /// The local account.
    pub account: String,
    /// `wlcg.groups`.
    pub groups: Vec<String>,
    /// What it may do.
    pub grants: Grants,
    /// When it expires (unix seconds).
    pub expires: i64,
    /// Its `jti`, for logs.
    pub id: Option<String>,
}

impl Bearer {
    /// Whether the token allows `op` on the site path `path`; the scope it lacks when not.
    pub fn may(&self, op: Operation, path: &str) -> Result<(), &'static str> {
        if self.grants.allow(op, path) {
            Ok(())
        } else {
            Err(op.needs())
        }
    }
}

impl Issuers {
    /// The issuers of `configs`, checked: `https://` URLs, each once, absolute paths, at least
    /// one audience and an account.
    pub fn new(configs: Vec<IssuerConfig>) -> Result<Issuers, String> {
        let mut issuers: Vec<Issuer> = Vec::new();
        for mut c in configs {
            if !c.url.starts_with("https://") {
                return Err(format!("issuer {}: its url must be https://", c.url));
            }
            if issuers.iter().any(|i| i.config.url == c.url) {
                return Err(format!("issuer {} is configured twice", c.url));
            }
            if c.audiences.is_empty() {
                return Err(format!("issuer {}: give at least one audience", c.url));
            }
            if c.account.is_empty() {
                return Err(format!(
                    "issuer {}: give the account its bearers act as",
                    c.url
                ));
            }
            for rule in &c.map {
                if rule.sub.is_some() == rule.group.is_some() {
                    return Err(format!(
                        "issuer {}: a map line names either sub or group (account {})",
                        c.url, rule.account
                    ));
                }
                if rule.account.is_empty() {
                    return Err(format!("issuer {}: a map line without an account", c.url));
                }
                if rule.group_access && rule.group.is_none() {
                    return Err(format!(
                        "issuer {}: group-access is for a map line that names a group",
                        c.url
                    ));
                }
            }
            c.base_path = normalize(&c.base_path).ok_or_else(|| {
                format!(
                    "issuer {}: base-path {:?} is not absolute",
                    c.url, c.base_path
                )
            })?;
            for p in &mut c.restricted_paths {
                *p = normalize(p).ok_or_else(|| {
                    format!("issuer {}: restricted path {p:?} is not absolute", c.url)
                })?;
            }
            issuers.push(Issuer { config: c });
        }
        Ok(Issuers { issuers })
    }

    /// Whether any issuer is configured.
    pub fn is_empty(&self) -> bool {
        self.issuers.is_empty()
    }

    /// The configured issuers.
    pub fn iter(&self) -> impl Iterator<Item = &Issuer> {
        self.issuers.iter()
    }

    /// Reads `token` and finds its issuer, trusting nothing yet: the caller then finds the key
    /// `jwt.kid` of that issuer and calls [`Issuers::validate`].
    pub fn inspect(&self, token: &str) -> Result<(Jwt, &Issuer), TokenError> {
        let jwt = Jwt::decode(token)?;
        let iss = jwt
            .issuer()
            .ok_or(TokenError::Claim("iss", "missing".into()))?;
        let issuer = self
            .issuers
            .iter()
            .find(|i| i.config.url == iss)
            .ok_or_else(|| TokenError::Issuer(iss.to_string()))?;
        Ok((jwt, issuer))
    }

    /// Validates `jwt` of `issuer` with `key` at `now` (unix seconds): the signature first,
    /// then the claims, then the scopes.
    pub fn validate(
        &self,
        jwt: &Jwt,
        issuer: &Issuer,
        key: &VerifyingKey,
        now: i64,
    ) -> Result<Bearer, TokenError> {
        jwt.verify(key)?;
        let claims = Claims::read(&jwt.claims)?;
        if claims.iss != issuer.config.url {
            return Err(TokenError::Issuer(claims.iss));
        }
        claims.check_time(now)?;
        claims.check_audience(&issuer.config.audiences)?;
        let rule = issuer.config.map.iter().find(|r| r.matches(&claims));
        let mut grants = Grants::parse(&claims.scopes, claims.profile, &issuer.config.base_path)?;
        if grants.is_empty() && rule.is_some_and(|r| r.group_access) {
            // Group-based: everything under the base path; the account's permissions decide.
            grants = Grants(
                [Right::Read, Right::Modify, Right::Stage]
                    .into_iter()
                    .map(|right| Grant {
                        right,
                        path: issuer.config.base_path.clone(),
                        dir_only: false,
                    })
                    .collect(),
            );
        }
        let grants = grants.restricted_to(&issuer.config.restricted_paths);
        let account = rule.map_or(&issuer.config.account, |r| &r.account).clone();
        Ok(Bearer {
            issuer: claims.iss,
            subject: claims.sub,
            account,
            groups: claims.groups,
            grants,
            expires: claims.exp,
            id: claims.jti,
        })
    }
}

#[cfg(test)]
mod tests;
