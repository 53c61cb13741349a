//! Bearer tokens as WLCG and OSG storage uses them: a JSON Web Token (RFC 7519) signed by an
//! issuer the site trusts, carrying what its bearer may do as scopes.
//!
//! - [`jwt`]: the compact JWS, split and decoded; signatures verified with the issuer's keys.
//! - [`keys`]: an issuer's JSON Web Key Set, RS256 and ES256 (and their stronger kin) only, and
//!   the cache that says when to fetch it again.
//! - [`claims`]: the time, issuer, audience and profile checks.
//! - [`scope`]: the WLCG (`storage.read:/path`) and SciTokens (`read:/path`) scopes, and the
//!   operations they grant on paths matched component by component.
//! - [`issuer`]: an issuer as the admin configures it, and the whole validation.
//! - [`discovery`]: where a client finds its token (WLCG Bearer Token Discovery).
//! - [`site_issued`]: the tokens ("macaroons") a door issues for third-party copies.
//!
//! Sans-IO like `ferry-proto` and `ferry-gsi`: nothing here opens a socket or reads the clock;
//! callers fetch key sets and pass the time. Signatures are OpenSSL's.
//!
//! Written on OpenSSL rather than a JOSE crate: ferry links OpenSSL already, the two JOSE crates
//! that verify with it or with ring either select keys through `'static` verifiers or bring a
//! second crypto stack, and what is needed here (two algorithm families, a key-size floor, `kid`
//! required, `none` and HMAC refused) is short enough to keep in view.

#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod claims;
pub mod discovery;
pub mod error;
pub mod issuer;
pub mod jwt;
pub mod keys;
pub mod scope;
pub mod site_issued;

pub use claims::{Claims, Profile};
pub use error::TokenError;
pub use issuer::{AccountRule, Bearer, Issuer, IssuerConfig, Issuers};
pub use jwt::Jwt;
pub use keys::{KeyCache, KeySet, Lookup};
pub use scope::{Grant, Grants, Operation, Right};
