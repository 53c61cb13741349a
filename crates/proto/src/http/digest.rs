//! Checksums in HTTP: `Want-Digest` / `Digest` (RFC 3230, what the grid's clients use) and
//! `Want-Repr-Digest` / `Repr-Digest` (RFC 9530), plus `Content-MD5`. Values travel as raw
//! bytes here; the encodings are the ones the IANA registries and davix read.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

/// Most algorithms read from one header (the rest are ignored).
pub const MAX_ALGORITHMS: usize = 16;

/// An algorithm both registries name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DigestAlgorithm {
    /// Adler-32: 4 bytes, written as 8 hex digits in RFC 3230.
    Adler32,
    /// CRC-32C: 4 bytes, written as 8 hex digits in RFC 3230.
    Crc32c,
    /// MD5.
    Md5,
    /// SHA-1 (`sha`).
    Sha,
    /// SHA-256.
    Sha256,
    /// SHA-512.
    Sha512,
}

/// A `Digest`, `Repr-Digest` or `Content-MD5` value that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {header} value for {algorithm}")]
pub struct DigestError {
    /// The header.
    pub header: &'static str,
    /// The algorithm whose value is bad.
    pub algorithm: String,
}

impl DigestAlgorithm {
    /// Every algorithm, most preferred first when a client leaves the choice to us.
    pub const ALL: [DigestAlgorithm; 6] = [
        DigestAlgorithm::Adler32,
        DigestAlgorithm::Md5,
        DigestAlgorithm::Crc32c,
        DigestAlgorithm::Sha256,
        DigestAlgorithm::Sha512,
        DigestAlgorithm::Sha,
    ];

    /// Reads a name from either registry, case-insensitively (`ADLER32` as gfal-sum sends it,
    /// `adler` as RFC 9530 names it).
    pub fn from_token(name: &str) -> Option<DigestAlgorithm> {
        let n = name.trim().to_ascii_lowercase();
        Some(match n.as_str() {
            "adler32" | "adler" => DigestAlgorithm::Adler32,
            "crc32c" => DigestAlgorithm::Crc32c,
            "md5" => DigestAlgorithm::Md5,
            "sha" | "sha1" | "sha-1" => DigestAlgorithm::Sha,
            "sha-256" | "sha256" => DigestAlgorithm::Sha256,
            "sha-512" | "sha512" => DigestAlgorithm::Sha512,
            _ => return None,
        })
    }

    /// The RFC 3230 name.
    pub fn rfc3230_name(self) -> &'static str {
        match self {
            DigestAlgorithm::Adler32 => "adler32",
            DigestAlgorithm::Crc32c => "crc32c",
            DigestAlgorithm::Md5 => "md5",
            DigestAlgorithm::Sha => "sha",
            DigestAlgorithm::Sha256 => "sha-256",
            DigestAlgorithm::Sha512 => "sha-512",
        }
    }

    /// The RFC 9530 name.
    pub fn rfc9530_name(self) -> &'static str {
        match self {
            DigestAlgorithm::Adler32 => "adler",
            other => other.rfc3230_name(),
        }
    }

    /// Raw digest length in bytes.
    pub fn digest_len(self) -> usize {
        match self {
            DigestAlgorithm::Adler32 | DigestAlgorithm::Crc32c => 4,
            DigestAlgorithm::Md5 => 16,
            DigestAlgorithm::Sha => 20,
            DigestAlgorithm::Sha256 => 32,
            DigestAlgorithm::Sha512 => 64,
        }
    }

    /// `name=value` for a `Digest` header: hex (8 digits) for the 32-bit sums, base64 for the
    /// hashes.
    pub fn rfc3230(self, raw: &[u8]) -> String {
        let value = match self {
            DigestAlgorithm::Adler32 | DigestAlgorithm::Crc32c => to_hex(raw),
            _ => B64.encode(raw),
        };
        format!("{}={value}", self.rfc3230_name())
    }

    /// `name=:base64:` for a `Repr-Digest` header.
    pub fn rfc9530(self, raw: &[u8]) -> String {
        format!("{}=:{}:", self.rfc9530_name(), B64.encode(raw))
    }
}

fn to_hex(raw: &[u8]) -> String {
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(s: &str, len: usize) -> Option<Vec<u8>> {
    if s.is_empty() || s.len() > len * 2 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let padded = format!("{s:0>width$}", width = len * 2);
    (0..len)
        .map(|i| u8::from_str_radix(&padded[i * 2..i * 2 + 2], 16).ok())
        .collect()
}

/// `Want-Digest: adler32, md5;q=0.5`: the algorithms we know, most wanted first (`q=0` means
/// not wanted).
pub fn parse_want_digest(header: &str) -> Vec<DigestAlgorithm> {
    let mut wanted: Vec<(u16, usize, DigestAlgorithm)> = Vec::new();
    for (i, item) in header.split(',').take(MAX_ALGORITHMS).enumerate() {
        let mut fields = item.split(';');
        let Some(alg) = fields.next().and_then(DigestAlgorithm::from_token) else {
            continue;
        };
        let q = fields
            .find_map(|f| f.trim().strip_prefix("q=").map(quality))
            .unwrap_or(1000);
        if q > 0 && !wanted.iter().any(|w| w.2 == alg) {
            wanted.push((q, i, alg));
        }
    }
    wanted.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    wanted.into_iter().map(|w| w.2).collect()
}

/// A q-value in thousandths; a malformed one counts as 0.
fn quality(s: &str) -> u16 {
    let s = s.trim();
    let Some((int, frac)) = s.split_once('.').or(Some((s, ""))) else {
        return 0;
    };
    match int {
        "1" => 1000,
        "0" => {
            let digits: String = frac.chars().take(3).collect();
            if !digits.bytes().all(|b| b.is_ascii_digit()) {
                return 0;
            }
            format!("{digits:0<3}").parse().unwrap_or(0)
        }
        _ => 0,
    }
}

/// `Want-Repr-Digest: sha-256=10, sha-512=3`: most wanted first; 0 means not wanted.
pub fn parse_want_repr_digest(header: &str) -> Vec<DigestAlgorithm> {
    let mut wanted: Vec<(u8, usize, DigestAlgorithm)> = Vec::new();
    for (i, item) in header.split(',').take(MAX_ALGORITHMS).enumerate() {
        let Some((name, pref)) = item.split_once('=') else {
            continue;
        };
        let (Some(alg), Ok(pref)) = (DigestAlgorithm::from_token(name), pref.trim().parse::<u8>())
        else {
            continue;
        };
        if (1..=10).contains(&pref) && !wanted.iter().any(|w| w.2 == alg) {
            wanted.push((pref, i, alg));
        }
    }
    wanted.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    wanted.into_iter().map(|w| w.2).collect()
}

/// The `name=value` items of a `Digest` or `Repr-Digest` header whose algorithm we know, in
/// order, values trimmed (at most [`MAX_ALGORITHMS`] items are looked at).
fn known_items(header: &str) -> impl Iterator<Item = (DigestAlgorithm, &str)> {
    header.split(',').take(MAX_ALGORITHMS).filter_map(|item| {
        let (name, value) = item.trim().split_once('=')?;
        Some((DigestAlgorithm::from_token(name)?, value.trim()))
    })
}

/// `Digest: adler32=03da0195, md5=<base64>`: the values of the algorithms we know (others
/// are skipped). md5 may also come as 32 hex digits, as davix writes it.
pub fn parse_digest(header: &str) -> Result<Vec<(DigestAlgorithm, Vec<u8>)>, DigestError> {
    let mut out = Vec::new();
    for (alg, value) in known_items(header) {
        let raw = match alg {
            DigestAlgorithm::Adler32 | DigestAlgorithm::Crc32c => from_hex(value, 4),
            DigestAlgorithm::Md5 if value.len() == 32 => from_hex(value, 16),
            _ => B64
                .decode(value)
                .ok()
                .filter(|r| r.len() == alg.digest_len()),
        };
        let raw = raw.ok_or_else(|| DigestError {
            header: "Digest",
            algorithm: alg.rfc3230_name().into(),
        })?;
        out.push((alg, raw));
    }
    Ok(out)
}

/// `Repr-Digest: sha-256=:<base64>:`.
pub fn parse_repr_digest(header: &str) -> Result<Vec<(DigestAlgorithm, Vec<u8>)>, DigestError> {
    let mut out = Vec::new();
    for (alg, value) in known_items(header) {
        let bad = || DigestError {
            header: "Repr-Digest",
            algorithm: alg.rfc9530_name().into(),
        };
        let inner = value
            .strip_prefix(':')
            .and_then(|v| v.strip_suffix(':'))
            .ok_or_else(bad)?;
        let raw = B64
            .decode(inner)
            .ok()
            .filter(|r| r.len() == alg.digest_len())
            .ok_or_else(bad)?;
        out.push((alg, raw));
    }
    Ok(out)
}

/// `Content-MD5: <base64>` (RFC 1864).
pub fn parse_content_md5(header: &str) -> Result<Vec<u8>, DigestError> {
    B64.decode(header.trim())
        .ok()
        .filter(|r| r.len() == 16)
        .ok_or(DigestError {
            header: "Content-MD5",
            algorithm: "md5".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use DigestAlgorithm::*;

    #[test]
    fn want_digest_is_ordered_by_q_and_skips_what_we_do_not_know() {
        assert_eq!(
            parse_want_digest("md5;q=0.5, ADLER32, foo, sha-256;q=0"),
            vec![Adler32, Md5]
        );
        assert_eq!(parse_want_digest("UNIXcksum"), vec![]);
        assert_eq!(
            parse_want_repr_digest("sha-512=3, sha-256=10, md5=0"),
            vec![Sha256, Sha512]
        );
    }

    #[test]
    fn values_are_written_in_the_encodings_clients_read() {
        assert_eq!(
            Adler32.rfc3230(&[0x03, 0xda, 0x01, 0x95]),
            "adler32=03da0195"
        );
        assert_eq!(Md5.rfc3230(&[0u8; 16]), "md5=AAAAAAAAAAAAAAAAAAAAAA==");
        assert_eq!(Sha256.rfc9530(&[0u8; 32]).len(), "sha-256=::".len() + 44);
        assert_eq!(Adler32.rfc9530(&[0, 0, 0, 1]), "adler=:AAAAAQ==:");
    }

    #[test]
    fn digest_values_decode_back_and_bad_ones_are_refused() {
        let d = parse_digest("adler32=3da0195, md5=AAAAAAAAAAAAAAAAAAAAAA==, x=1").unwrap();
        assert_eq!(
            d,
            vec![(Adler32, vec![0x03, 0xda, 0x01, 0x95]), (Md5, vec![0; 16])]
        );
        let hex_md5 = parse_digest("md5=000000000000000000000000000000ff").unwrap();
        assert_eq!(hex_md5[0].1[15], 0xff);
        assert!(parse_digest("adler32=xyz").is_err());
        assert!(parse_digest("md5=AAAA").is_err());
        let r = parse_repr_digest(&Sha256.rfc9530(&[7u8; 32])).unwrap();
        assert_eq!(r, vec![(Sha256, vec![7u8; 32])]);
        assert!(parse_repr_digest("sha-256=AAAA").is_err());
        assert_eq!(
            parse_content_md5("AAAAAAAAAAAAAAAAAAAAAA==").unwrap(),
            vec![0; 16]
        );
    }
}
