//! The little DER this crate reads and writes itself: finding an extension in a certificate
//! and the ProxyCertInfo structure (RFC 3820 §3.8).
//!
//! The `openssl` crate verifies proxy chains but neither lists a certificate's extensions by
//! OID nor encodes ProxyCertInfo, and a full X.509 parser would be a dozen crates for two
//! structures. Everything here is bounded by its input and fails with an error, never a panic.

use crate::error::{GsiError, Result};

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const BOOLEAN: u8 = 0x01;
const OCTET_STRING: u8 = 0x04;
const OID: u8 = 0x06;
const EXPLICIT_3: u8 = 0xa3;

/// id-pe-proxyCertInfo, 1.3.6.1.5.5.7.1.14 (RFC 3820).
pub(crate) const OID_PROXY_CERT_INFO: &[u8] = &[0x2b, 6, 1, 5, 5, 7, 1, 14];
/// The pre-RFC Globus ProxyCertInfo, 1.3.6.1.4.1.3536.1.222.
pub(crate) const OID_PROXY_CERT_INFO_GT3: &[u8] = &[0x2b, 6, 1, 4, 1, 0x9b, 0x50, 1, 0x81, 0x5e];
/// id-ppl-inheritAll, 1.3.6.1.5.5.7.21.1: an impersonation proxy.
pub(crate) const OID_INHERIT_ALL: &[u8] = &[0x2b, 6, 1, 5, 5, 7, 21, 1];
/// id-ppl-independent, 1.3.6.1.5.5.7.21.2.
pub(crate) const OID_INDEPENDENT: &[u8] = &[0x2b, 6, 1, 5, 5, 7, 21, 2];
/// Globus' limited-proxy policy language, 1.3.6.1.4.1.3536.1.1.1.9.
pub(crate) const OID_LIMITED: &[u8] = &[0x2b, 6, 1, 4, 1, 0x9b, 0x50, 1, 1, 1, 9];

/// One tag-length-value: the tag, the contents and what follows.
fn tlv(input: &[u8]) -> Result<(u8, &[u8], &[u8])> {
    let bad = |why: &str| GsiError::decode("DER", why);
    let (&tag, rest) = input.split_first().ok_or_else(|| bad("truncated tag"))?;
    if tag & 0x1f == 0x1f {
        return Err(bad("multi-byte tags are not used in X.509"));
    }
    let (&first, mut rest) = rest.split_first().ok_or_else(|| bad("truncated length"))?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return Err(bad("bad length"));
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |a, &b| (a << 8) | usize::from(b));
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return Err(bad("contents run past the end"));
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

fn expect(input: &[u8], want: u8) -> Result<(&[u8], &[u8])> {
    let (tag, body, rest) = tlv(input)?;
    if tag != want {
        return Err(GsiError::decode(
            "DER",
            format!("tag {tag:#04x} where {want:#04x} was expected"),
        ));
    }
    Ok((body, rest))
}

/// One extension: `(oid, critical, value)`, borrowed from the certificate.
pub(crate) type Extension<'a> = (&'a [u8], bool, &'a [u8]);

/// Every extension of a DER certificate.
pub(crate) fn extensions(cert: &[u8]) -> Result<Vec<Extension<'_>>> {
    let (certificate, _) = expect(cert, SEQUENCE)?;
    let (tbs, _) = expect(certificate, SEQUENCE)?;
    let mut rest = tbs;
    let mut out = Vec::new();
    // [0] version, serial, signature, issuer, validity, subject, spki, [1], [2], then [3].
    while !rest.is_empty() {
        let (tag, body, next) = tlv(rest)?;
        rest = next;
        if tag != EXPLICIT_3 {
            continue;
        }
        let (mut exts, _) = expect(body, SEQUENCE)?;
        while !exts.is_empty() {
            let (ext, next) = expect(exts, SEQUENCE)?;
            exts = next;
            let (id, mut fields) = expect(ext, OID)?;
            let mut critical = false;
            if let Ok((BOOLEAN, b, after)) = tlv(fields) {
                critical = b.first().is_some_and(|&v| v != 0);
                fields = after;
            }
            let (value, _) = expect(fields, OCTET_STRING)?;
            out.push((id, critical, value));
        }
    }
    Ok(out)
}

/// The `(critical, value)` of the extension `oid` in a DER certificate, if present.
pub(crate) fn find_extension<'a>(cert: &'a [u8], oid: &[u8]) -> Result<Option<(bool, &'a [u8])>> {
    Ok(extensions(cert)?
        .into_iter()
        .find(|(id, _, _)| *id == oid)
        .map(|(_, c, v)| (c, v)))
}

/// id-ce-keyUsage, 2.5.29.15.
pub(crate) const OID_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x0f];
/// id-ce-extKeyUsage, 2.5.29.37.
pub(crate) const OID_EXT_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x25];

/// id-ce-basicConstraints, 2.5.29.19.
pub(crate) const OID_BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];

/// Whether a basicConstraints value says `cA TRUE`.
pub(crate) fn basic_constraints_ca(value: &[u8]) -> Result<bool> {
    let (body, _) = expect(value, SEQUENCE)?;
    Ok(match tlv(body) {
        Ok((BOOLEAN, b, _)) => b.first().is_some_and(|&v| v != 0),
        _ => false,
    })
}

/// What a ProxyCertInfo says: the path length limit and the policy language OID's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProxyCertInfo {
    pub(crate) path_len: Option<u64>,
    pub(crate) language: Vec<u8>,
}

impl ProxyCertInfo {
    /// Parses the RFC 3820 form; the GT3 form puts the policy first and the path length in
    /// an explicit [1], which `gt3` selects.
    pub(crate) fn parse(value: &[u8], gt3: bool) -> Result<ProxyCertInfo> {
        let (body, _) = expect(value, SEQUENCE)?;
        let mut rest = body;
        let mut path_len = None;
        let mut language = None;
        while !rest.is_empty() {
            let (tag, inner, next) = tlv(rest)?;
            rest = next;
            match tag {
                INTEGER if !gt3 => path_len = Some(unsigned(inner)?),
                0xa1 if gt3 => {
                    let (int, _) = expect(inner, INTEGER)?;
                    path_len = Some(unsigned(int)?);
                }
                SEQUENCE => {
                    let (oid, _) = expect(inner, OID)?;
                    language = Some(oid.to_vec());
                }
                _ => {}
            }
        }
        let language =
            language.ok_or_else(|| GsiError::decode("ProxyCertInfo", "no policy language"))?;
        Ok(ProxyCertInfo { path_len, language })
    }

    /// The pre-RFC (GT3) DER encoding: the policy, then the path length as an explicit [1].
    pub(crate) fn encode_gt3(&self) -> Vec<u8> {
        let mut policy = Vec::new();
        push_tlv(&mut policy, OID, &self.language);
        let mut body = Vec::new();
        push_tlv(&mut body, SEQUENCE, &policy);
        if let Some(n) = self.path_len {
            let mut int = Vec::new();
            push_tlv(&mut int, INTEGER, &minimal_unsigned(n));
            push_tlv(&mut body, 0xa1, &int);
        }
        let mut out = Vec::new();
        push_tlv(&mut out, SEQUENCE, &body);
        out
    }

    /// The RFC 3820 DER encoding.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut policy = Vec::new();
        push_tlv(&mut policy, OID, &self.language);
        let mut body = Vec::new();
        if let Some(n) = self.path_len {
            push_tlv(&mut body, INTEGER, &minimal_unsigned(n));
        }
        push_tlv(&mut body, SEQUENCE, &policy);
        let mut out = Vec::new();
        push_tlv(&mut out, SEQUENCE, &body);
        out
    }
}

fn unsigned(int: &[u8]) -> Result<u64> {
    // Nine bytes only for a leading zero (a positive value with its top bit set): any more
    // would not fit the u64 and be cut silently.
    if int.is_empty() || int.len() > 9 || int[0] & 0x80 != 0 || (int.len() == 9 && int[0] != 0) {
        return Err(GsiError::decode("DER", "path length out of range"));
    }
    Ok(int.iter().fold(0u64, |a, &b| (a << 8) | u64::from(b)))
}

fn push_tlv(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag);
    let n = body.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes = (n as u32).to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (4 - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(body);
}

/// Runs every DER reader of this module over arbitrary bytes, for the fuzzer: each must return
/// a value or an error, never panic or read out of bounds.
#[doc(hidden)]
pub fn fuzz_readers(bytes: &[u8]) {
    if let Ok(exts) = extensions(bytes) {
        for (oid, _, value) in exts {
            let _ = (oid.len(), basic_constraints_ca(value));
        }
    }
    let _ = find_extension(bytes, OID_PROXY_CERT_INFO);
    let _ = basic_constraints_ca(bytes);
    for gt3 in [false, true] {
        if let Ok(info) = ProxyCertInfo::parse(bytes, gt3) {
            // What parses re-encodes and parses back to the same value.
            let again = if gt3 {
                info.encode_gt3()
            } else {
                info.encode()
            };
            let back = ProxyCertInfo::parse(&again, gt3).expect("re-encoded ProxyCertInfo parses");
            assert_eq!(back.path_len, info.path_len);
            assert_eq!(back.language, info.language);
        }
    }
}

/// The shortest DER INTEGER contents for a non-negative value.
fn minimal_unsigned(n: u64) -> Vec<u8> {
    let bytes = n.to_be_bytes();
    let skip = bytes.iter().take_while(|&&b| b == 0).count().min(7);
    let mut int = bytes[skip..].to_vec();
    if int[0] & 0x80 != 0 {
        int.insert(0, 0);
    }
    int
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_cert_info_round_trips() {
        for info in [
            ProxyCertInfo {
                path_len: None,
                language: OID_INHERIT_ALL.to_vec(),
            },
            ProxyCertInfo {
                path_len: Some(0),
                language: OID_LIMITED.to_vec(),
            },
            ProxyCertInfo {
                path_len: Some(200),
                language: OID_INDEPENDENT.to_vec(),
            },
        ] {
            assert_eq!(ProxyCertInfo::parse(&info.encode(), false).unwrap(), info);
        }
    }

    #[test]
    fn path_lengths_beyond_64_bits_are_refused_not_cut() {
        assert_eq!(
            unsigned(&[0, 0xff, 0, 0, 0, 0, 0, 0, 1]).unwrap(),
            0xff00_0000_0000_0001
        );
        // 2^64 + 1 would read as 1 were the top byte dropped.
        assert!(unsigned(&[1, 0, 0, 0, 0, 0, 0, 0, 1]).is_err());
        assert!(unsigned(&[0x80]).is_err());
        assert!(unsigned(&[]).is_err());
    }

    #[test]
    fn the_inherit_all_encoding_is_the_one_openssl_writes() {
        let info = ProxyCertInfo {
            path_len: None,
            language: OID_INHERIT_ALL.to_vec(),
        };
        assert_eq!(
            info.encode(),
            [0x30, 0x0c, 0x30, 0x0a, 0x06, 0x08, 0x2b, 6, 1, 5, 5, 7, 21, 1]
        );
    }

    #[test]
    fn truncated_and_garbage_input_is_an_error_not_a_panic() {
        let good = ProxyCertInfo {
            path_len: Some(3),
            language: OID_INHERIT_ALL.to_vec(),
        }
        .encode();
        for n in 0..good.len() {
            let _ = ProxyCertInfo::parse(&good[..n], false);
            let _ = find_extension(&good[..n], OID_PROXY_CERT_INFO);
        }
        assert!(
            find_extension(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff], OID_PROXY_CERT_INFO).is_err()
        );
        assert!(tlv(&[0x1f, 0x01, 0x00]).is_err());
    }
}
