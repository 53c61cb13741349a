//! A JSON Web Token in JWS compact form (RFC 7515 §7.1): `HEADER.CLAIMS.SIGNATURE`, each part
//! base64url without padding. [`Jwt::decode`] reads it without trusting it; [`Jwt::verify`]
//! checks its signature with one of its issuer's keys.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use openssl::hash::MessageDigest;
use serde_json::{Map, Value};

use crate::error::TokenError;
use crate::keys::VerifyingKey;

/// The longest token read: WLCG tokens are about 1 KiB, and a request header holds a few.
pub const MAX_TOKEN: usize = 16 * 1024;

/// A signature algorithm ferry accepts: RSA PKCS#1 v1.5 and ECDSA with SHA-2. `none`, HMAC
/// (which a public key would turn into a shared secret) and the rest are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256 (WLCG's MUST).
    Rs256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    Rs384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    Rs512,
    /// ECDSA on P-256 with SHA-256 (WLCG's MUST).
    Es256,
    /// ECDSA on P-384 with SHA-384.
    Es384,
}

impl Algorithm {
    /// The algorithm `alg` names, if accepted.
    pub fn from_name(alg: &str) -> Result<Algorithm, TokenError> {
        Ok(match alg {
            "RS256" => Algorithm::Rs256,
            "RS384" => Algorithm::Rs384,
            "RS512" => Algorithm::Rs512,
            "ES256" => Algorithm::Es256,
            "ES384" => Algorithm::Es384,
            other => return Err(TokenError::Algorithm(other.to_string())),
        })
    }

    /// Its JOSE name.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Rs256 => "RS256",
            Algorithm::Rs384 => "RS384",
            Algorithm::Rs512 => "RS512",
            Algorithm::Es256 => "ES256",
            Algorithm::Es384 => "ES384",
        }
    }

    /// The digest it signs.
    pub(crate) fn digest(self) -> MessageDigest {
        match self {
            Algorithm::Rs256 | Algorithm::Es256 => MessageDigest::sha256(),
            Algorithm::Rs384 | Algorithm::Es384 => MessageDigest::sha384(),
            Algorithm::Rs512 => MessageDigest::sha512(),
        }
    }
}

/// A decoded token: its header's algorithm and key id, its claims, and what was signed.
#[derive(Debug, Clone)]
pub struct Jwt {
    /// The signature algorithm.
    pub alg: Algorithm,
    /// The issuer's key that signed it.
    pub kid: String,
    /// The claims, not yet checked.
    pub claims: Map<String, Value>,
    /// `HEADER.CLAIMS` as sent: what the signature covers.
    signed: String,
    signature: Vec<u8>,
}

fn part(text: &str, what: &str) -> Result<Vec<u8>, TokenError> {
    URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|e| TokenError::Malformed(format!("the {what} is not base64url: {e}")))
}

fn object(bytes: &[u8], what: &str) -> Result<Map<String, Value>, TokenError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(TokenError::Malformed(format!(
            "the {what} is not a JSON object"
        ))),
        Err(e) => Err(TokenError::Malformed(format!(
            "the {what} is not JSON: {e}"
        ))),
    }
}

impl Jwt {
    /// Reads `token` (compact JWS), refusing what could never verify: another shape, an
    /// algorithm not accepted, no `kid`, a critical extension.
    pub fn decode(token: &str) -> Result<Jwt, TokenError> {
        if token.len() > MAX_TOKEN {
            return Err(TokenError::Malformed(format!(
                "longer than {MAX_TOKEN} bytes"
            )));
        }
        let mut parts = token.split('.');
        let (Some(h), Some(c), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed(
                "not three dot-separated parts (a JWE or an opaque token?)".into(),
            ));
        };
        let header = object(&part(h, "header")?, "header")?;
        let alg = match header.get("alg") {
            Some(Value::String(a)) => Algorithm::from_name(a)?,
            _ => return Err(TokenError::Malformed("the header has no alg".into())),
        };
        if header.contains_key("crit") {
            // RFC 7515 §4.1.11: extensions this verifier does not know make the token invalid.
            return Err(TokenError::Malformed(
                "the header names critical extensions".into(),
            ));
        }
        let kid = match header.get("kid") {
            Some(Value::String(k)) if !k.is_empty() => k.clone(),
            _ => return Err(TokenError::NoKeyId),
        };
        let claims = object(&part(c, "claims")?, "claims")?;
        let signature = part(s, "signature")?;
        Ok(Jwt {
            alg,
            kid,
            claims,
            signed: format!("{h}.{c}"),
            signature,
        })
    }

    /// The `iss` claim, unverified: which issuer's keys to verify with.
    pub fn issuer(&self) -> Option<&str> {
        self.claims.get("iss").and_then(Value::as_str)
    }

    /// Checks the signature with `key`.
    pub fn verify(&self, key: &VerifyingKey) -> Result<(), TokenError> {
        key.verify(self.alg, self.signed.as_bytes(), &self.signature)
    }
}
