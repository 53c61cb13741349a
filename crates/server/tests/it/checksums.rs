//! CKSM against digests computed in the test with independent implementations.

use crate::common;

use common::*;
use md5::Digest as _;

fn md5_hex(b: &[u8]) -> String {
    hex::encode(md5::Md5::digest(b))
}

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(b))
}

fn adler32_hex(b: &[u8]) -> String {
    let mut a = adler2::Adler32::new();
    a.write_slice(b);
    format!("{:08x}", a.checksum())
}

fn crc32c_hex(b: &[u8]) -> String {
    format!("{:08x}", crc32c::crc32c(b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cksm_matches_md5_adler32_crc32c_and_sha256_for_whole_files_and_windows() {
    let srv = TestServer::start().await;
    // Larger than the server's 1 MiB checksum chunk, so windows cross chunk boundaries.
    let data = random_bytes(3 * 1024 * 1024 + 12_345, 21);
    srv.write("sum.bin", &data);
    srv.write("empty.bin", b"");
    let mut c = srv.login().await;
    type Fun = fn(&[u8]) -> String;
    let algs: [(&str, Fun); 4] = [
        ("MD5", md5_hex),
        ("ADLER32", adler32_hex),
        ("CRC32C", crc32c_hex),
        ("SHA256", sha256_hex),
    ];
    let len = data.len() as u64;
    let windows: [(u64, Option<u64>); 6] = [
        (0, None),
        (0, Some(len)),
        (1000, Some(4096)),
        (1_048_000, Some(2_000_000)),
        (12_345, None),
        (len - 10, Some(10)),
    ];
    for (alg, f) in algs {
        for (off, l) in windows {
            let end = l.map_or(len, |l| off + l) as usize;
            let want = f(&data[off as usize..end]);
            let l_arg = l.map_or("-1".to_string(), |l| l.to_string());
            let line = format!("CKSM {alg} {off} {l_arg} sum.bin");
            let r = expect(&mut c, &line, 213).await;
            assert_eq!(r.text(), want, "'{line}'");
        }
        let r = expect(&mut c, &format!("CKSM {alg} 0 -1 empty.bin"), 213).await;
        assert_eq!(r.text(), f(b""), "{alg} of an empty file");
    }
    // Lower-case algorithm names work too.
    let r = expect(&mut c, "CKSM md5 0 -1 sum.bin", 213).await;
    assert_eq!(r.text(), md5_hex(&data));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cksm_of_a_missing_file_is_550_and_of_an_unknown_algorithm_is_504() {
    let srv = TestServer::start().await;
    srv.write("there.bin", b"abc");
    srv.write("dir/x", b"x");
    let mut c = srv.login().await;
    expect(&mut c, "CKSM MD5 0 -1 not-there.bin", 550).await;
    expect(&mut c, "CKSM WHIRLPOOL 0 -1 there.bin", 504).await;
    let r = cmd(&mut c, "CKSM MD5 0 -1 dir").await;
    assert_eq!(r.code, 550, "checksum of a directory: {r}");
    let r = cmd(&mut c, "CKSM MD5 zero -1 there.bin").await;
    assert_eq!(r.code, 501, "{r}");
    // The session goes on.
    let r = expect(&mut c, "CKSM MD5 0 -1 there.bin", 213).await;
    assert_eq!(r.text(), md5_hex(b"abc"));
}
