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
    Adler32(adler2::Adler32),
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
            ChecksumAlgorithm::Adler32 => State::Adler32(adler2::Adler32::new()),
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
            State::Adler32(h) => h.write_slice(data),
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
            State::Adler32(h) => format!("{:08x}", h.checksum()),
            State::Crc32c(crc) => format!("{crc:08x}"),
            State::Sha1(h) => hex::encode(h.finalize()),
            State::Sha256(h) => hex::encode(h.finalize()),
            State::Sha512(h) => hex::encode(h.finalize()),
        }
    }
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
