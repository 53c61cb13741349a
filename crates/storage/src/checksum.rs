//! Checksums for CKSM: MD5, ADLER32, CRC32C, SHA1, SHA256, SHA512; lowercase hex like Globus.

use std::fmt;

use sha2::Digest;

use crate::{FileHandle, StorageError};

/// Bytes read per `read_at` call while checksumming.
const CHUNK: usize = 1 << 20;

/// A checksum algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ChecksumAlgorithm {
    /// MD5 (32 hex digits).
    Md5,
    /// Adler-32 (8 hex digits, `%08x`).
    Adler32,
    /// CRC-32C, Castagnoli (8 hex digits).
    Crc32c,
    /// SHA-1.
    Sha1,
    /// SHA-256.
    Sha256,
    /// SHA-512.
    Sha512,
}

impl ChecksumAlgorithm {
    /// Parses a name case-insensitively (`MD5`, `ADLER32`, `CRC32C`, `SHA1`, `SHA256`, `SHA512`).
    pub fn from_name(name: &str) -> Option<ChecksumAlgorithm> {
        ChecksumAlgorithm::all()
            .iter()
            .copied()
            .find(|alg| alg.name().eq_ignore_ascii_case(name))
    }

    /// The upper-case name used on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            ChecksumAlgorithm::Md5 => "MD5",
            ChecksumAlgorithm::Adler32 => "ADLER32",
            ChecksumAlgorithm::Crc32c => "CRC32C",
            ChecksumAlgorithm::Sha1 => "SHA1",
            ChecksumAlgorithm::Sha256 => "SHA256",
            ChecksumAlgorithm::Sha512 => "SHA512",
        }
    }

    /// Every algorithm, in FEAT order.
    pub fn all() -> &'static [ChecksumAlgorithm] {
        &[
            ChecksumAlgorithm::Md5,
            ChecksumAlgorithm::Adler32,
            ChecksumAlgorithm::Crc32c,
            ChecksumAlgorithm::Sha1,
            ChecksumAlgorithm::Sha256,
            ChecksumAlgorithm::Sha512,
        ]
    }
}

impl fmt::Display for ChecksumAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The running state of one algorithm.
#[derive(Clone)]
enum State {
    Md5(md5::Md5),
    Adler32(simd_adler32::Adler32),
    Crc32c(u32),
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
}

/// An incremental checksum.
#[derive(Clone)]
pub struct Checksummer {
    state: State,
}

impl Checksummer {
    /// Starts a checksum.
    pub fn new(algorithm: ChecksumAlgorithm) -> Checksummer {
        let state = match algorithm {
            ChecksumAlgorithm::Md5 => State::Md5(md5::Md5::new()),
            ChecksumAlgorithm::Adler32 => State::Adler32(simd_adler32::Adler32::new()),
            ChecksumAlgorithm::Crc32c => State::Crc32c(0),
            ChecksumAlgorithm::Sha1 => State::Sha1(sha1::Sha1::new()),
            ChecksumAlgorithm::Sha256 => State::Sha256(sha2::Sha256::new()),
            ChecksumAlgorithm::Sha512 => State::Sha512(sha2::Sha512::new()),
        };
        Checksummer { state }
    }

    /// The algorithm this checksummer computes.
    pub fn algorithm(&self) -> ChecksumAlgorithm {
        match self.state {
            State::Md5(_) => ChecksumAlgorithm::Md5,
            State::Adler32(_) => ChecksumAlgorithm::Adler32,
            State::Crc32c(_) => ChecksumAlgorithm::Crc32c,
            State::Sha1(_) => ChecksumAlgorithm::Sha1,
            State::Sha256(_) => ChecksumAlgorithm::Sha256,
            State::Sha512(_) => ChecksumAlgorithm::Sha512,
        }
    }

    /// Feeds bytes.
    pub fn update(&mut self, data: &[u8]) {
        match &mut self.state {
            State::Md5(h) => h.update(data),
            State::Adler32(h) => h.write(data),
            State::Crc32c(crc) => *crc = crc32c::crc32c_append(*crc, data),
            State::Sha1(h) => h.update(data),
            State::Sha256(h) => h.update(data),
            State::Sha512(h) => h.update(data),
        }
    }

    /// Lowercase hex digest.
    pub fn finish_hex(self) -> String {
        match self.state {
            State::Md5(h) => hex::encode(h.finalize()),
            State::Adler32(h) => format!("{:08x}", h.finish()),
            State::Crc32c(crc) => format!("{crc:08x}"),
            State::Sha1(h) => hex::encode(h.finalize()),
            State::Sha256(h) => hex::encode(h.finalize()),
            State::Sha512(h) => hex::encode(h.finalize()),
        }
    }
}

/// The digest of one contiguous byte range for an algorithm whose digests of neighbouring
/// ranges combine into the digest of both without the bytes (ADLER32, CRC32C): what lets
/// blocks that arrive out of order on parallel streams be summed where they land.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Joinable {
    algorithm: ChecksumAlgorithm,
    value: u32,
    len: u64,
}

impl Joinable {
    /// Whether `algorithm`'s digests combine (ADLER32 and CRC32C do; MD5 and the SHAs don't).
    pub fn supports(algorithm: ChecksumAlgorithm) -> bool {
        matches!(
            algorithm,
            ChecksumAlgorithm::Adler32 | ChecksumAlgorithm::Crc32c
        )
    }

    /// The digest of no bytes; `None` for an algorithm whose digests do not combine.
    pub fn empty(algorithm: ChecksumAlgorithm) -> Option<Joinable> {
        let value = match algorithm {
            ChecksumAlgorithm::Adler32 => 1,
            ChecksumAlgorithm::Crc32c => 0,
            _ => return None,
        };
        Some(Joinable {
            algorithm,
            value,
            len: 0,
        })
    }

    /// Extends the range with the bytes right after it.
    pub fn update(&mut self, data: &[u8]) {
        self.value = match self.algorithm {
            ChecksumAlgorithm::Crc32c => crc32c::crc32c_append(self.value, data),
            _ => {
                let mut h = simd_adler32::Adler32::from_checksum(self.value);
                h.write(data);
                h.finish()
            }
        };
        self.len += data.len() as u64;
    }

    /// The digest of this range followed by `next` (which must start where this ends).
    pub fn join(self, next: Joinable) -> Joinable {
        debug_assert_eq!(self.algorithm, next.algorithm);
        let value = match self.algorithm {
            ChecksumAlgorithm::Crc32c => crc32c_combine(self.value, next.value, next.len),
            _ => adler32_combine(self.value, next.value, next.len),
        };
        Joinable {
            algorithm: self.algorithm,
            value,
            len: self.len + next.len,
        }
    }

    /// Bytes covered.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it covers no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The algorithm.
    pub fn algorithm(&self) -> ChecksumAlgorithm {
        self.algorithm
    }

    /// Lowercase hex, as CKSM answers it.
    pub fn hex(&self) -> String {
        format!("{:08x}", self.value)
    }
}

/// The largest prime below 2^16, Adler-32's modulus.
const ADLER_BASE: u64 = 65521;

/// zlib's `adler32_combine`: the Adler-32 of `A‖B` from Adler-32(A), Adler-32(B) and len(B).
/// With a and b the low and high halves: a(AB) = a(A) + a(B) - 1 and
/// b(AB) = b(A) + b(B) + len(B)·(a(A) - 1), both mod 65521.
pub fn adler32_combine(adler_a: u32, adler_b: u32, len_b: u64) -> u32 {
    let rem = len_b % ADLER_BASE;
    let a1 = u64::from(adler_a & 0xffff);
    let b1 = u64::from(adler_a >> 16);
    let a2 = u64::from(adler_b & 0xffff);
    let b2 = u64::from(adler_b >> 16);
    // Every term is below 2^34, so nothing overflows before the reductions.
    let a = (a1 + a2 + ADLER_BASE - 1) % ADLER_BASE;
    let b = (b1 + b2 + rem * a1 + ADLER_BASE - rem) % ADLER_BASE;
    ((b << 16) | a) as u32
}

/// Transfers are combined in ranges of up to 2^64 bytes, which `crc32c_combine` takes as a
/// `usize`: ferry runs on 64-bit hosts only, and says so at compile time rather than sum a
/// range of more than 4 GiB wrong on a 32-bit one.
const _: () = assert!(usize::BITS >= 64, "ferry needs a 64-bit target");

/// The CRC-32C of `A‖B` from CRC-32C(A), CRC-32C(B) and len(B).
pub fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    crc32c::crc32c_combine(crc_a, crc_b, len_b as usize)
}

impl fmt::Debug for Checksummer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checksummer")
            .field("algorithm", &self.algorithm())
            .finish_non_exhaustive()
    }
}

/// Checksum of `[offset, offset + length)` of an open file (`None` = to end of file), read in
/// 1 MiB chunks with `read_at`. A window reaching past the end covers the bytes that exist, as
/// Globus does. Without a length, only regular files are accepted: a device such as `/dev/zero`
/// has no end.
pub fn checksum_handle(
    handle: &dyn FileHandle,
    algorithm: ChecksumAlgorithm,
    offset: u64,
    length: Option<u64>,
) -> Result<String, StorageError> {
    if length.is_none() && !handle.is_regular() {
        return Err(StorageError::Invalid(
            "not a regular file; a checksum length is required".into(),
        ));
    }
    let mut sum = Checksummer::new(algorithm);
    let mut buf = vec![0u8; CHUNK];
    let mut pos = offset;
    let mut left = length.unwrap_or(u64::MAX);
    while left > 0 {
        let want = usize::try_from(left).map_or(CHUNK, |l| l.min(CHUNK));
        let n = handle.read_at(&mut buf[..want], pos)?;
        if n == 0 {
            break;
        }
        sum.update(&buf[..n]);
        pos = pos.saturating_add(n as u64);
        left -= n as u64;
    }
    Ok(sum.finish_hex())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex_of(alg: ChecksumAlgorithm, data: &[u8]) -> String {
        let mut sum = Checksummer::new(alg);
        sum.update(data);
        sum.finish_hex()
    }

    #[test]
    fn known_answers() {
        use ChecksumAlgorithm::*;
        let cases: &[(ChecksumAlgorithm, &[u8], &str)] = &[
            (Md5, b"", "d41d8cd98f00b204e9800998ecf8427e"),
            (Md5, b"abc", "900150983cd24fb0d6963f7d28e17f72"),
            (Adler32, b"", "00000001"),
            (Adler32, b"abc", "024d0127"),
            (Adler32, b"Wikipedia", "11e60398"),
            (Crc32c, b"", "00000000"),
            (Crc32c, b"123456789", "e3069283"),
            (Sha1, b"", "da39a3ee5e6b4b0d3255bfef95601890afd80709"),
            (Sha1, b"abc", "a9993e364706816aba3e25717850c26c9cd0d89d"),
            (
                Sha256,
                b"",
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            ),
            (
                Sha256,
                b"abc",
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            ),
            (
                Sha512,
                b"abc",
                "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a\
                 2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
            ),
        ];
        for (alg, data, want) in cases {
            assert_eq!(hex_of(*alg, data), *want, "{alg} of {data:?}");
        }
    }

    #[test]
    fn incremental_updates_equal_one_shot() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for alg in ChecksumAlgorithm::all() {
            let mut sum = Checksummer::new(*alg);
            for chunk in data.chunks(333) {
                sum.update(chunk);
            }
            assert_eq!(sum.finish_hex(), hex_of(*alg, &data), "{alg}");
        }
    }

    /// An in-memory file, to test windows without touching the disk.
    #[derive(Debug)]
    struct Mem(Vec<u8>);

    impl FileHandle for Mem {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, StorageError> {
            let start = (offset as usize).min(self.0.len());
            let n = buf.len().min(self.0.len() - start);
            buf[..n].copy_from_slice(&self.0[start..start + n]);
            Ok(n)
        }
        fn write_all_at(&self, _: &[u8], _: u64) -> Result<(), StorageError> {
            Err(StorageError::PermissionDenied("mem".into()))
        }
        fn size(&self) -> Result<u64, StorageError> {
            Ok(self.0.len() as u64)
        }
        fn is_regular(&self) -> bool {
            true
        }
        fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
            None
        }
        fn sync(&self) -> Result<(), StorageError> {
            Ok(())
        }
        fn set_len(&self, _: u64) -> Result<(), StorageError> {
            Ok(())
        }
    }

    #[test]
    fn handle_windows_cover_offset_and_length() {
        let data: Vec<u8> = (0..(3 * CHUNK + 17)).map(|i| (i % 253) as u8).collect();
        let file = Mem(data.clone());
        let alg = ChecksumAlgorithm::Md5;
        let whole = checksum_handle(&file, alg, 0, None).unwrap();
        assert_eq!(whole, hex_of(alg, &data));
        let window = checksum_handle(&file, alg, 5, Some(CHUNK as u64 + 3)).unwrap();
        assert_eq!(window, hex_of(alg, &data[5..CHUNK + 8]));
        let tail = checksum_handle(&file, alg, CHUNK as u64, None).unwrap();
        assert_eq!(tail, hex_of(alg, &data[CHUNK..]));
        let past_end = checksum_handle(&file, alg, data.len() as u64 - 2, Some(100)).unwrap();
        assert_eq!(past_end, hex_of(alg, &data[data.len() - 2..]));
        let empty = checksum_handle(&file, alg, 3, Some(0)).unwrap();
        assert_eq!(empty, hex_of(alg, b""));
    }

    /// The SIMD Adler-32 agrees with the scalar one (adler2) on data of every length around
    /// its block sizes.
    #[test]
    fn simd_adler32_equals_the_scalar_one() {
        let data: Vec<u8> = (0..70_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        for n in [
            0, 1, 15, 16, 31, 32, 63, 64, 5551, 5552, 5553, 65_521, 70_000,
        ] {
            let mut scalar = adler2::Adler32::new();
            scalar.write_slice(&data[..n]);
            assert_eq!(
                hex_of(ChecksumAlgorithm::Adler32, &data[..n]),
                format!("{:08x}", scalar.checksum()),
                "{n} bytes"
            );
        }
    }

    fn joinable_of(alg: ChecksumAlgorithm, data: &[u8]) -> Joinable {
        let mut j = Joinable::empty(alg).expect("joinable");
        j.update(data);
        j
    }

    proptest::proptest! {
        /// Joining the digests of A and B gives the digest of A‖B, for every split, lengths
        /// around Adler-32's modulus included.
        #[test]
        fn joined_digests_equal_the_digest_of_the_whole(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..140_000),
            cut in 0.0f64..=1.0,
            pad in proptest::prop_oneof![
                proptest::prelude::Just(0usize),
                proptest::prelude::Just(65_520),
                proptest::prelude::Just(65_521),
                proptest::prelude::Just(65_522),
            ],
        ) {
            let mut data = data;
            data.extend(std::iter::repeat_n(0xa5u8, pad));
            let at = ((data.len() as f64) * cut) as usize;
            for alg in [ChecksumAlgorithm::Adler32, ChecksumAlgorithm::Crc32c] {
                let (a, b) = data.split_at(at);
                let joined = joinable_of(alg, a).join(joinable_of(alg, b));
                proptest::prop_assert_eq!(joined.hex(), hex_of(alg, &data));
                proptest::prop_assert_eq!(joined.len(), data.len() as u64);
                // Joining with nothing changes nothing, on either side.
                let empty = Joinable::empty(alg).expect("joinable");
                proptest::prop_assert_eq!(empty.join(joined), joined);
                proptest::prop_assert_eq!(joined.join(empty), joined);
            }
        }
    }

    #[test]
    fn only_adler32_and_crc32c_join() {
        for alg in ChecksumAlgorithm::all() {
            assert_eq!(
                Joinable::empty(*alg).is_some(),
                Joinable::supports(*alg),
                "{alg}"
            );
        }
        assert!(Joinable::supports(ChecksumAlgorithm::Adler32));
        assert!(!Joinable::supports(ChecksumAlgorithm::Md5));
        // A long run of zeros after real data: the length term of the combine at work.
        let alg = ChecksumAlgorithm::Adler32;
        let zeros = vec![0u8; 3 * 65_521 + 7];
        let mut whole = b"ferry".to_vec();
        whole.extend(&zeros);
        assert_eq!(
            joinable_of(alg, b"ferry")
                .join(joinable_of(alg, &zeros))
                .hex(),
            hex_of(alg, &whole)
        );
    }

    #[test]
    fn names_round_trip_case_insensitively() {
        for alg in ChecksumAlgorithm::all() {
            assert_eq!(ChecksumAlgorithm::from_name(alg.name()), Some(*alg));
            assert_eq!(
                ChecksumAlgorithm::from_name(&alg.name().to_lowercase()),
                Some(*alg)
            );
        }
        assert_eq!(
            ChecksumAlgorithm::from_name("adler32"),
            Some(ChecksumAlgorithm::Adler32)
        );
        assert_eq!(ChecksumAlgorithm::from_name("CRC32"), None);
    }

    #[test]
    fn all_is_in_feat_order() {
        let names: Vec<_> = ChecksumAlgorithm::all().iter().map(|a| a.name()).collect();
        assert_eq!(
            names,
            ["MD5", "ADLER32", "CRC32C", "SHA1", "SHA256", "SHA512"]
        );
    }
}
