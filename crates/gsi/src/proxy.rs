//! Proxy certificates: signing new ones, as grid-proxy-init and GSI delegation do. Telling
//! them apart is `certkind.rs`'s (re-exported here), which the credential and the trust store
//! read without the signing.

use std::time::Duration;

use ferry_proto::clock::unix_now;
use openssl::asn1::{Asn1Integer, Asn1Object, Asn1OctetString, Asn1Time};
use openssl::bn::BigNum;
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{HasPublic, PKeyRef};
use openssl::x509::extension::KeyUsage;
use openssl::x509::{X509Extension, X509NameBuilder, X509Ref, X509};

pub use crate::certkind::{classify, time_to_unix, CertKind, ProxyFormat, ProxyPolicy};
use crate::credential::Credential;
use crate::der::{self, ProxyCertInfo};
use crate::error::{GsiError, Result};

/// What a new proxy should be.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    /// How long it lives; never past its issuer's end.
    pub lifetime: Duration,
    /// A limited proxy (what globus-url-copy delegates); otherwise impersonation. A proxy
    /// signed by a limited proxy is limited whatever this says.
    pub limited: bool,
    /// How many proxies may be signed below it; `None` for no limit.
    pub path_len: Option<u64>,
    /// The format; `None` takes the issuer's when it is a proxy (a legacy or draft proxy
    /// signs proxies of its own kind, as Globus requires of a chain), else RFC 3820.
    pub format: Option<ProxyFormat>,
}

impl Default for ProxyOptions {
    fn default() -> ProxyOptions {
        ProxyOptions {
            lifetime: Duration::from_secs(12 * 3600),
            limited: false,
            path_len: None,
            format: None,
        }
    }
}

/// Signs a proxy for `public_key` with `issuer`'s credential, RFC 3820 unless the issuer is a
/// legacy or draft proxy (see [`ProxyOptions::format`]): subject = issuer's subject plus a CN
/// that is also the serial number (derived from the key, as Globus does; `proxy` or `limited
/// proxy` for legacy proxies), valid from five minutes ago (clock skew) until the lifetime or
/// the issuer's end.
pub fn sign_proxy<T: HasPublic>(
    issuer: &Credential,
    public_key: &PKeyRef<T>,
    options: &ProxyOptions,
) -> Result<X509> {
    let issuer_kind = classify(&issuer.cert, issuer.chain.first().map(|c| &**c))?;
    // Only the two languages every GSI peer enforces: ferry never makes independent or
    // restricted proxies.
    let language = if options.limited || issuer_kind.is_limited() {
        der::OID_LIMITED
    } else {
        der::OID_INHERIT_ALL
    };
    sign_with_language(issuer, public_key, options, language)
}

/// A new proxy of `user` (grid-proxy-init): a fresh RSA key of `bits`, signed as `options`
/// say, above `user`'s own chain.
pub fn create_proxy(user: &Credential, bits: u32, options: &ProxyOptions) -> Result<Credential> {
    let key = openssl::pkey::PKey::from_rsa(openssl::rsa::Rsa::generate(bits)?)?;
    let cert = sign_proxy(user, &key, options)?;
    let chain = user.certs().into_iter().map(X509Ref::to_owned).collect();
    Credential::new(cert, key, chain)
}

/// [`sign_proxy`] with the ProxyCertInfo policy language given (DER OID content bytes); a
/// legacy proxy is limited when `language` is Globus' limited one.
pub(crate) fn sign_with_language<T: HasPublic>(
    issuer: &Credential,
    public_key: &PKeyRef<T>,
    options: &ProxyOptions,
    language: &[u8],
) -> Result<X509> {
    let issuer_kind = classify(&issuer.cert, issuer.chain.first().map(|c| &**c))?;
    if issuer_kind == CertKind::Ca {
        return Err(GsiError::Protocol(
            "a CA certificate cannot sign a proxy; use a user or host credential".into(),
        ));
    }
    let limited = language == der::OID_LIMITED;
    let serial = serial_for(public_key)?;
    let format = options.format.unwrap_or(match issuer_kind {
        CertKind::Proxy { format, .. } => format,
        _ => ProxyFormat::Rfc3820,
    });

    let mut name = X509NameBuilder::new()?;
    for entry in issuer.cert.subject_name().entries() {
        name.append_entry(entry)?;
    }
    let cn = match format {
        ProxyFormat::Legacy if limited => "limited proxy".to_string(),
        ProxyFormat::Legacy => "proxy".to_string(),
        _ => serial.to_string(),
    };
    name.append_entry_by_nid(Nid::COMMONNAME, &cn)?;
    let name = name.build();

    let now = unix_now();
    let not_after = now.saturating_add(options.lifetime.as_secs() as i64);
    let issuer_end = time_to_unix(issuer.cert.not_after())?;
    let not_after = not_after.min(issuer_end);

    let mut b = X509::builder()?;
    b.set_version(2)?;
    let serial_bn = BigNum::from_dec_str(&serial.to_string())?;
    let serial_number = Asn1Integer::from_bn(&serial_bn)?;
    b.set_serial_number(&serial_number)?;
    b.set_subject_name(&name)?;
    b.set_issuer_name(issuer.cert.subject_name())?;
    b.set_pubkey(public_key)?;
    let (from, until) = (
        Asn1Time::from_unix(now - 300)?,
        Asn1Time::from_unix(not_after)?,
    );
    b.set_not_before(&from)?;
    b.set_not_after(&until)?;
    b.append_extension(end_entity_key_usage()?)?;
    let info = ProxyCertInfo {
        path_len: options.path_len,
        language: language.to_vec(),
    };
    match format {
        ProxyFormat::Rfc3820 => {
            let oid = Asn1Object::from_str("1.3.6.1.5.5.7.1.14")?;
            let value = Asn1OctetString::new_from_bytes(&info.encode())?;
            b.append_extension(X509Extension::new_from_der(&oid, true, &value)?)?;
        }
        ProxyFormat::Gt3 => {
            let oid = Asn1Object::from_str("1.3.6.1.4.1.3536.1.222")?;
            let value = Asn1OctetString::new_from_bytes(&info.encode_gt3())?;
            b.append_extension(X509Extension::new_from_der(&oid, true, &value)?)?;
        }
        // The subject says it all.
        ProxyFormat::Legacy => {}
    }
    b.sign(&issuer.key, signing_digest(&issuer.cert))?;
    Ok(b.build())
}

/// The key usage of user, host and proxy certificates: signing and key exchange, never
/// certificate signing.
pub(crate) fn end_entity_key_usage() -> Result<X509Extension> {
    Ok(KeyUsage::new()
        .critical()
        .digital_signature()
        .key_encipherment()
        .data_encipherment()
        .build()?)
}

/// The digest the issuer's own certificate was signed with (Globus signs proxies the same
/// way), SHA-256 when that cannot be told.
pub(crate) fn signing_digest(cert: &X509Ref) -> MessageDigest {
    cert.signature_algorithm()
        .object()
        .nid()
        .signature_algorithms()
        .and_then(|a| MessageDigest::from_nid(a.digest))
        .filter(|d| d.size() >= 32)
        .unwrap_or_else(MessageDigest::sha256)
}

/// The proxy's serial number and CN: the first four bytes of the SHA-1 of its public key, as
/// a positive number.
fn serial_for<T: HasPublic>(key: &PKeyRef<T>) -> Result<u32> {
    let digest = openssl::hash::hash(MessageDigest::sha1(), &key.public_key_to_der()?)?;
    Ok(u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) & 0x7fff_ffff)
}
