//! An issuer's keys: its JSON Web Key Set (RFC 7517) as `jwks_uri` serves it, read into
//! OpenSSL public keys, and the cache that says when the set is fetched again.
//!
//! The cache keeps a set for an hour before it looks again (WLCG asks for at least an hour),
//! fetches at once for a key id it does not know, but not more than once a minute (a stream of
//! tokens naming made-up keys must not become a stream of fetches), and keeps the last good set
//! for as long as the issuer cannot be reached.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::ecdsa::EcdsaSig;
use openssl::nid::Nid;
use openssl::pkey::{Id, PKey, Public};
use openssl::rsa::Rsa;
use serde_json::Value;

use crate::error::TokenError;
use crate::jwt::Algorithm;

/// The smallest RSA key accepted.
pub const MIN_RSA_BITS: u32 = 2048;
/// A good set is fetched again after this long.
pub const REFRESH_S: u64 = 3600;
/// Fetches are this far apart at least (after a failure, or for an unknown key id).
pub const RETRY_S: u64 = 60;

/// One public key of an issuer.
#[derive(Debug, Clone)]
pub struct VerifyingKey {
    /// Its key id.
    pub kid: String,
    /// The algorithm the set binds it to, if it does.
    alg: Option<String>,
    key: PKey<Public>,
}

fn field<'a>(jwk: &'a Value, name: &str) -> Result<&'a str, TokenError> {
    jwk.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| TokenError::Key(format!("no {name}")))
}

fn number(jwk: &Value, name: &str) -> Result<BigNum, TokenError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(field(jwk, name)?)
        .map_err(|e| TokenError::Key(format!("{name} is not base64url: {e}")))?;
    BigNum::from_slice(&bytes).map_err(|e| TokenError::Key(e.to_string()))
}

fn ssl(e: openssl::error::ErrorStack) -> TokenError {
    TokenError::Key(e.to_string())
}

impl VerifyingKey {
    /// The key a JWK describes: `kty` RSA (`n`, `e`) or EC on P-256 or P-384 (`x`, `y`).
    pub fn from_jwk(jwk: &Value) -> Result<VerifyingKey, TokenError> {
        let kid = field(jwk, "kid")?.to_string();
        let key = match field(jwk, "kty")? {
            "RSA" => {
                let rsa = Rsa::from_public_components(number(jwk, "n")?, number(jwk, "e")?)
                    .map_err(ssl)?;
                if rsa.size() * 8 < MIN_RSA_BITS {
                    return Err(TokenError::Key(format!(
                        "a {}-bit RSA key is too weak",
                        rsa.size() * 8
                    )));
                }
                PKey::from_rsa(rsa).map_err(ssl)?
            }
            "EC" => {
                let nid = match field(jwk, "crv")? {
                    "P-256" => Nid::X9_62_PRIME256V1,
                    "P-384" => Nid::SECP384R1,
                    other => return Err(TokenError::Key(format!("curve {other} is not accepted"))),
                };
                let group = EcGroup::from_curve_name(nid).map_err(ssl)?;
                let (x, y) = (number(jwk, "x")?, number(jwk, "y")?);
                let ec = EcKey::from_public_key_affine_coordinates(&group, &x, &y).map_err(ssl)?;
                ec.check_key().map_err(ssl)?;
                PKey::from_ec_key(ec).map_err(ssl)?
            }
            other => return Err(TokenError::Key(format!("key type {other} is not accepted"))),
        };
        let alg = jwk.get("alg").and_then(Value::as_str).map(str::to_string);
        Ok(VerifyingKey { kid, alg, key })
    }

    /// Checks `signature` over `signed` by `alg` with this key; the key must be of the kind
    /// `alg` names (and its `alg`, where the set gives one).
    pub fn verify(
        &self,
        alg: Algorithm,
        signed: &[u8],
        signature: &[u8],
    ) -> Result<(), TokenError> {
        if self.alg.as_deref().is_some_and(|a| a != alg.name()) {
            return Err(TokenError::Key(format!(
                "key {} is for {}, not {}",
                self.kid,
                self.alg.as_deref().unwrap_or_default(),
                alg.name()
            )));
        }
        let good = match alg {
            Algorithm::Rs256 | Algorithm::Rs384 | Algorithm::Rs512 => {
                if self.key.id() != Id::RSA {
                    return Err(TokenError::Key(format!("key {} is not RSA", self.kid)));
                }
                let mut v = openssl::sign::Verifier::new(alg.digest(), &self.key).map_err(ssl)?;
                v.update(signed).map_err(ssl)?;
                v.verify(signature).unwrap_or(false)
            }
            Algorithm::Es256 | Algorithm::Es384 => {
                let (curve, len) = match alg {
                    Algorithm::Es256 => (Nid::X9_62_PRIME256V1, 32),
                    _ => (Nid::SECP384R1, 48),
                };
                let ec = self
                    .key
                    .ec_key()
                    .map_err(|_| TokenError::Key(format!("key {} is not EC", self.kid)))?;
                if ec.group().curve_name() != Some(curve) {
                    return Err(TokenError::Key(format!(
                        "key {} is not on {}'s curve",
                        self.kid,
                        alg.name()
                    )));
                }
                // JWS carries R || S, each the curve's size (RFC 7518 §3.4), not DER.
                if signature.len() != 2 * len {
                    return Err(TokenError::Signature);
                }
                let r = BigNum::from_slice(&signature[..len]).map_err(ssl)?;
                let s = BigNum::from_slice(&signature[len..]).map_err(ssl)?;
                let sig = EcdsaSig::from_private_components(r, s).map_err(ssl)?;
                let digest = openssl::hash::hash(alg.digest(), signed).map_err(ssl)?;
                sig.verify(&digest, &ec).unwrap_or(false)
            }
        };
        if good {
            Ok(())
        } else {
            Err(TokenError::Signature)
        }
    }
}

/// An issuer's key set.
#[derive(Debug, Clone, Default)]
pub struct KeySet {
    keys: Vec<VerifyingKey>,
}

impl KeySet {
    /// Reads a JWKS document (`{"keys": [...]}`). Keys of other uses (`use` not `sig`) or kinds
    /// are passed over; a set with no usable key is an error.
    pub fn parse(jwks: &[u8]) -> Result<KeySet, TokenError> {
        let doc: Value = serde_json::from_slice(jwks)
            .map_err(|e| TokenError::Key(format!("the key set is not JSON: {e}")))?;
        let Some(list) = doc.get("keys").and_then(Value::as_array) else {
            return Err(TokenError::Key("the key set has no keys array".into()));
        };
        let mut keys = Vec::new();
        let mut passed = Vec::new();
        for jwk in list {
            if jwk
                .get("use")
                .and_then(Value::as_str)
                .is_some_and(|u| u != "sig")
            {
                continue;
            }
            match VerifyingKey::from_jwk(jwk) {
                Ok(k) => keys.push(k),
                Err(e) => passed.push(e.to_string()),
            }
        }
        if keys.is_empty() {
            return Err(TokenError::Key(format!(
                "no usable signing key in the set ({})",
                passed.join("; ")
            )));
        }
        Ok(KeySet { keys })
    }

    /// The key of id `kid`.
    pub fn get(&self, kid: &str) -> Option<&VerifyingKey> {
        self.keys.iter().find(|k| k.kid == kid)
    }

    /// How many keys it holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// What the cache says of a key id.
#[derive(Debug)]
pub enum Lookup<'a> {
    /// The key.
    Found(&'a VerifyingKey),
    /// Not known: fetch the set now, give it to [`KeyCache::fetched`], then look again.
    Fetch,
    /// Not known, and the set was fetched too recently to fetch it again.
    Unknown,
    /// No set was ever had; why the last fetch failed.
    NoKeys(String),
}

/// One issuer's key set over time. The caller fetches; this says when, and keeps what came.
#[derive(Debug, Clone, Default)]
pub struct KeyCache {
    set: Option<KeySet>,
    fetched_at: Option<u64>,
    tried_at: Option<u64>,
    failure: Option<String>,
}

impl KeyCache {
    /// An empty cache: the first lookup asks for a fetch.
    pub fn new() -> KeyCache {
        KeyCache::default()
    }

    fn may_try(&self, now: u64) -> bool {
        self.tried_at
            .is_none_or(|t| now >= t.saturating_add(RETRY_S))
    }

    /// Whether a fetch is due at `now` (unix seconds): none yet, or the set is an hour old, and
    /// the last try a minute ago at least.
    pub fn due(&self, now: u64) -> bool {
        let stale = self
            .fetched_at
            .is_none_or(|f| now >= f.saturating_add(REFRESH_S));
        stale && self.may_try(now)
    }

    /// The key `kid`, or what to do for it.
    pub fn lookup(&self, kid: &str, now: u64) -> Lookup<'_> {
        if let Some(key) = self.set.as_ref().and_then(|s| s.get(kid)) {
            return Lookup::Found(key);
        }
        if self.may_try(now) {
            return Lookup::Fetch;
        }
        match (&self.set, &self.failure) {
            (None, Some(why)) => Lookup::NoKeys(why.clone()),
            (None, None) => Lookup::NoKeys("not fetched yet".into()),
            (Some(_), _) => Lookup::Unknown,
        }
    }

    /// Keeps what a fetch at `now` gave: a new set, or the failure (the last good set stays).
    pub fn fetched(&mut self, result: Result<KeySet, String>, now: u64) {
        self.tried_at = Some(now);
        match result {
            Ok(set) => {
                self.set = Some(set);
                self.fetched_at = Some(now);
                self.failure = None;
            }
            Err(why) => self.failure = Some(why),
        }
    }

    /// Why the last fetch failed, while it did.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }
}
