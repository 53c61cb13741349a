//! The claims every token is checked for, whatever it grants: who issued it, for whom, when it
//! is valid, and which profile it follows.
//!
//! - WLCG JWT profile 1.0 (`wlcg.ver` "1.0", the value even tokens written to later versions of
//!   the document carry): `iss`, `exp`, `iat`, `aud` required; valid for at most 6 h.
//! - SciTokens 2.0 (`ver` "scitoken:2.0", also "scitokens:2.0" as scitokens-cpp accepts):
//!   `aud` required.
//!
//! Times get 60 s of leeway each way (clocks differ; WLCG asks relying parties to accept tokens
//! up to 60 s past expiry).

use serde_json::{Map, Value};

use crate::error::TokenError;

/// Clock difference allowed on every time claim, in seconds.
pub const LEEWAY_S: i64 = 60;
/// The longest validity a WLCG token may claim (profile 1.0: relying parties must refuse
/// longer).
pub const WLCG_MAX_LIFETIME_S: i64 = 6 * 3600;
/// WLCG's audience for any relying party: accepted only where an issuer lists it.
pub const WLCG_ANY: &str = "https://wlcg.cern.ch/jwt/v1/any";
/// SciTokens' audience for any server: accepted only where an issuer lists it.
pub const SCITOKENS_ANY: &str = "ANY";

/// Which profile a token follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// WLCG JWT profile 1.0: `storage.*` scopes, `wlcg.groups`.
    Wlcg,
    /// SciTokens 2.0: `read:` and `write:` scopes.
    SciTokens,
}

/// A token's claims, read and typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// The issuer.
    pub iss: String,
    /// The subject (not used to authorise: scopes are).
    pub sub: Option<String>,
    /// Audiences.
    pub aud: Vec<String>,
    /// Expiry (unix seconds).
    pub exp: i64,
    /// Not before.
    pub nbf: Option<i64>,
    /// Issued at.
    pub iat: Option<i64>,
    /// The token's id.
    pub jti: Option<String>,
    /// The `scope` claim, split at spaces.
    pub scopes: Vec<String>,
    /// `wlcg.groups`.
    pub groups: Vec<String>,
    /// The profile.
    pub profile: Profile,
}

fn string(map: &Map<String, Value>, name: &'static str) -> Result<Option<String>, TokenError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(TokenError::Claim(name, "not a string".into())),
    }
}

fn time(map: &Map<String, Value>, name: &'static str) -> Result<Option<i64>, TokenError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map(Some)
            .ok_or_else(|| TokenError::Claim(name, "not a time".into())),
        Some(_) => Err(TokenError::Claim(name, "not a number".into())),
    }
}

fn strings(map: &Map<String, Value>, name: &'static str) -> Result<Vec<String>, TokenError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| TokenError::Claim(name, "holds a non-string".into()))
            })
            .collect(),
        Some(_) => Err(TokenError::Claim(name, "not a string or a list".into())),
    }
}

impl Claims {
    /// Reads the claims of `map` and tells its profile.
    pub fn read(map: &Map<String, Value>) -> Result<Claims, TokenError> {
        let profile = match (string(map, "wlcg.ver")?, string(map, "ver")?) {
            (Some(v), _) if v == "1.0" => Profile::Wlcg,
            (None, Some(v)) if v == "scitoken:2.0" || v == "scitokens:2.0" => Profile::SciTokens,
            _ => return Err(TokenError::Profile),
        };
        let iss = string(map, "iss")?.ok_or(TokenError::Claim("iss", "missing".into()))?;
        let exp = time(map, "exp")?.ok_or(TokenError::Claim("exp", "missing".into()))?;
        let iat = time(map, "iat")?;
        if profile == Profile::Wlcg && iat.is_none() {
            return Err(TokenError::Claim(
                "iat",
                "missing (WLCG requires it)".into(),
            ));
        }
        let aud = strings(map, "aud")?;
        if aud.is_empty() {
            return Err(TokenError::Claim("aud", "missing".into()));
        }
        Ok(Claims {
            iss,
            sub: string(map, "sub")?,
            aud,
            exp,
            nbf: time(map, "nbf")?,
            iat,
            jti: string(map, "jti")?,
            scopes: string(map, "scope")?
                .map(|s| s.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default(),
            groups: strings(map, "wlcg.groups")?,
            profile,
        })
    }

    /// Whether the token is valid at `now` (unix seconds).
    pub fn check_time(&self, now: i64) -> Result<(), TokenError> {
        if now > self.exp.saturating_add(LEEWAY_S) {
            return Err(TokenError::Expired(now - self.exp));
        }
        let start = match (self.nbf, self.iat) {
            (Some(n), Some(i)) => Some(n.max(i)),
            (n, i) => n.or(i),
        };
        if let Some(start) = start {
            if now < start.saturating_sub(LEEWAY_S) {
                return Err(TokenError::NotYetValid(start - now));
            }
            let lifetime = self.exp.saturating_sub(start);
            if self.profile == Profile::Wlcg && lifetime > WLCG_MAX_LIFETIME_S {
                return Err(TokenError::TooLong(lifetime, WLCG_MAX_LIFETIME_S));
            }
        }
        Ok(())
    }

    /// Whether one of the token's audiences is one of `accepted` (compared exactly, as WLCG
    /// says; the "any" audiences only where listed).
    pub fn check_audience(&self, accepted: &[String]) -> Result<(), TokenError> {
        if self.aud.iter().any(|a| accepted.iter().any(|b| a == b)) {
            return Ok(());
        }
        Err(TokenError::Audience(format!("{:?}", self.aud)))
    }
}
