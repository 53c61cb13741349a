//! Why a token was refused, in words a log and a `WWW-Authenticate` reason can carry (never the
//! token itself).

/// Why a token is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// Not a compact JWS (three base64url parts, JSON header and claims).
    #[error("malformed token: {0}")]
    Malformed(String),
    /// An algorithm that is not accepted (`none`, HMAC, or unknown).
    #[error("signature algorithm {0:?} is not accepted (RS256, RS384, RS512, ES256, ES384)")]
    Algorithm(String),
    /// The header names no key.
    #[error("the token names no key (kid)")]
    NoKeyId,
    /// The issuer has no key of that id (after a fetch of its keys, where one was allowed).
    #[error("issuer {issuer} has no key {kid:?}")]
    UnknownKey {
        /// The issuer.
        issuer: String,
        /// The key id the token named.
        kid: String,
    },
    /// The issuer's keys could not be had.
    #[error("the keys of issuer {issuer} could not be fetched: {why}")]
    NoKeys {
        /// The issuer.
        issuer: String,
        /// Why.
        why: String,
    },
    /// A key set or key that cannot be used.
    #[error("unusable key: {0}")]
    Key(String),
    /// The signature does not verify.
    #[error("the signature does not verify")]
    Signature,
    /// An issuer the site does not trust.
    #[error("issuer {0:?} is not trusted here")]
    Issuer(String),
    /// Past its expiry.
    #[error("the token expired {0} s ago")]
    Expired(i64),
    /// Before its `nbf` or `iat`.
    #[error("the token is not valid for another {0} s")]
    NotYetValid(i64),
    /// Valid for longer than the profile allows.
    #[error("the token is valid for {0} s, longer than the {1} s its profile allows")]
    TooLong(i64, i64),
    /// Not meant for this server.
    #[error("the token's audience {0} does not name this server")]
    Audience(String),
    /// A claim is missing or of the wrong kind.
    #[error("claim {0}: {1}")]
    Claim(&'static str, String),
    /// Neither WLCG 1.0 nor SciTokens 2.0.
    #[error("neither a WLCG (wlcg.ver 1.0) nor a SciTokens 2.0 token")]
    Profile,
    /// A scope that the token must not carry (a storage scope without a path, a path with `..`).
    #[error("scope {0:?}: {1}")]
    Scope(String, String),
}

impl TokenError {
    /// A short label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            TokenError::Malformed(_) => "malformed",
            TokenError::Algorithm(_) => "algorithm",
            TokenError::NoKeyId | TokenError::UnknownKey { .. } => "unknown_key",
            TokenError::NoKeys { .. } => "no_keys",
            TokenError::Key(_) => "key",
            TokenError::Signature => "signature",
            TokenError::Issuer(_) => "issuer",
            TokenError::Expired(_) => "expired",
            TokenError::NotYetValid(_) => "not_yet_valid",
            TokenError::TooLong(..) => "lifetime",
            TokenError::Audience(_) => "audience",
            TokenError::Claim(..) | TokenError::Profile => "claims",
            TokenError::Scope(..) => "scope",
        }
    }
}
