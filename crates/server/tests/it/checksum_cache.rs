//! Checksums kept with the file: what a transfer summed is in the file's extended attributes
//! (read here by Python's `os.getxattr` and checked against `zlib.adler32`), `CKSM` answers from
//! them without reading the file, and a changed file is read again.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// What Python sees of `path`: its Adler-32, ferry's record and XRootD's decoded
/// `user.XrdCks.adler32` record (name, fmTime, csTime, hex value), `-` where absent.
fn python_view(path: &std::path::Path) -> Vec<String> {
    let script = r#"
import os, struct, sys, zlib
p = sys.argv[1]
data = open(p, 'rb').read()
print('%08x' % (zlib.adler32(data) & 0xffffffff))
def attr(name):
    try:
        return os.getxattr(p, name)
    except OSError:
        return None
own = attr('user.ferry.checksums')
print(own.decode() if own is not None else '-')
rec = attr('user.XrdCks.adler32')
if rec is None:
    print('-')
else:
    name, fm, cs, r1, r2, ln, value = struct.unpack('>16sqihbB64s', rec)
    print(len(rec), name.rstrip(b'\0').decode(), fm, cs, value[:ln].hex())
print(os.stat(p).st_mtime_ns)
"#;
    let out = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(script)
        .arg(path)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf8")
        .lines()
        .map(str::to_string)
        .collect()
}

/// Replaces the file's bytes with others of the same size and sets its mtime back to the
/// nanosecond: what only a cached answer can still call the old checksum.
fn swap_bytes_keeping_the_version(path: &std::path::Path, seed: u64) {
    let before = std::fs::metadata(path).expect("stat");
    let mtime = before.modified().expect("mtime");
    let other = random_bytes(before.len() as usize, seed);
    std::fs::write(path, &other).expect("write");
    let f = std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open");
    f.set_modified(mtime).expect("set mtime");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_received_over_four_streams_is_kept_and_cksm_answers_without_reading() {
    let srv = TestServer::start().await;
    let data = random_bytes(5 * 1024 * 1024 + 777, 91);
    let mut c = srv.login().await;
    client_put(&mut c, &data, "up.bin", 4).await.expect("put");
    let path = srv.path("up.bin");
    let view = python_view(&path);
    let adler = &view[0];
    let mtime_ns: u128 = view[3].parse().expect("mtime");
    let (secs, nanos) = (mtime_ns / 1_000_000_000, mtime_ns % 1_000_000_000);
    assert_eq!(
        view[1],
        format!("1 {} {secs} {nanos} adler32:{adler}", data.len()),
        "ferry's record names the exact version"
    );
    let xrd: Vec<&str> = view[2].split(' ').collect();
    assert_eq!(xrd[..3], ["96", "adler32", &secs.to_string()]);
    assert!(xrd[3].parse::<i32>().expect("csTime") >= 0);
    assert_eq!(xrd[4], adler);

    let r = expect(&mut c, "CKSM ADLER32 0 -1 up.bin", 213).await;
    assert_eq!(&r.text(), adler);
    // Same size, same mtime to the nanosecond, other bytes: the answer is still the kept value,
    // so it did not read the file; a window of it is read.
    swap_bytes_keeping_the_version(&path, 92);
    let r = expect(&mut c, "CKSM ADLER32 0 -1 up.bin", 213).await;
    assert_eq!(&r.text(), adler, "answered from the record");
    let now = std::fs::read(&path).expect("read");
    let r = expect(&mut c, "CKSM ADLER32 0 1000 up.bin", 213).await;
    let mut a = adler2::Adler32::new();
    a.write_slice(&now[..1000]);
    assert_eq!(
        r.text(),
        format!("{:08x}", a.checksum()),
        "a part is always read"
    );

    // An ordinary change moves the mtime: the record is stale and CKSM reads the file.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&path, b"changed").expect("write");
    let r = expect(&mut c, "CKSM ADLER32 0 -1 up.bin", 213).await;
    assert_eq!(r.text(), python_view(&path)[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_out_of_order_store_keeps_the_checksum_of_the_whole_file() {
    let srv = TestServer::start().await;
    let full = random_bytes(300_000, 93);
    let mut partial = full.clone();
    partial[100_000..200_000].fill(0);
    partial[250_000..270_000].fill(0);
    srv.write("holes.bin", &partial);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let addr = pasv(&mut c).await;
    expect(&mut c, "REST 0-100000,200000-250000,270000-300000", 350).await;
    start_transfer(&mut c, "STOR holes.bin").await;
    let mut conn = data_connect(addr).await;
    send_block(&mut conn, 250_000, &full[250_000..270_000]).await;
    send_block(&mut conn, 150_000, &full[150_000..200_000]).await;
    send_block(&mut conn, 100_000, &full[100_000..150_000]).await;
    send_eof(&mut conn, 1).await;
    expect_final(&mut c, 226).await;
    assert!(srv.read("holes.bin") == full);
    let view = python_view(&srv.path("holes.bin"));
    assert!(
        view[1].ends_with(&format!(" adler32:{}", view[0])),
        "{view:?}"
    );
    assert!(view[2].ends_with(&view[0]), "{view:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_sent_is_kept_too_and_a_new_mtime_keeps_the_value() {
    let srv = TestServer::start().await;
    let data = random_bytes(2 * 1024 * 1024 + 5, 94);
    srv.write("src.bin", &data);
    let path = srv.path("src.bin");
    assert_eq!(python_view(&path)[1], "-");
    let mut c = srv.login().await;
    let (got, _) = client_get(&mut c, "src.bin", 4).await;
    assert!(got == data);
    let view = python_view(&path);
    assert!(
        view[1].ends_with(&format!(" adler32:{}", view[0])),
        "{view:?}"
    );

    // MFMT changes the mtime, not the bytes: the records follow it.
    expect(&mut c, "MFMT 20200102030405 src.bin", 250).await;
    let view = python_view(&path);
    assert!(
        view[1].starts_with(&format!("1 {} 1577934245 0 ", data.len())),
        "{view:?}"
    );
    assert!(view[2].contains(" 1577934245 "), "{view:?}");
    swap_bytes_keeping_the_version(&path, 95);
    let r = expect(&mut c, "CKSM ADLER32 0 -1 src.bin", 213).await;
    assert_eq!(
        r.text(),
        view[0],
        "answered from the record kept across MFMT"
    );

    // Opening it for writing drops the records, even before a byte lands.
    expect(&mut c, "MODE E", 200).await;
    client_put(&mut c, b"new", "src.bin", 1).await.expect("put");
    let view = python_view(&path);
    assert!(
        view[1].ends_with(&format!(" adler32:{}", view[0])),
        "{view:?}"
    );
    assert_eq!(srv.read("src.bin"), b"new");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checksum_cache_off_writes_no_attribute_and_reads_every_time() {
    let srv = TestServer::start_with(|c| c.checksum_cache = ferry_storage::CacheMode::Off).await;
    let data = random_bytes(1024 * 1024, 96);
    let mut c = srv.login().await;
    client_put(&mut c, &data, "up.bin", 4).await.expect("put");
    let path = srv.path("up.bin");
    let view = python_view(&path);
    assert_eq!((view[1].as_str(), view[2].as_str()), ("-", "-"));
    let r = expect(&mut c, "CKSM ADLER32 0 -1 up.bin", 213).await;
    assert_eq!(r.text(), view[0]);
    assert_eq!(python_view(&path)[1], "-");
    swap_bytes_keeping_the_version(&path, 97);
    let r = expect(&mut c, "CKSM ADLER32 0 -1 up.bin", 213).await;
    assert_eq!(r.text(), python_view(&path)[0], "read again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checksum_cache_memory_answers_from_memory_and_leaves_the_file_alone() {
    let srv = TestServer::start_with(|c| c.checksum_cache = ferry_storage::CacheMode::Memory).await;
    let data = random_bytes(1024 * 1024, 98);
    let mut c = srv.login().await;
    client_put(&mut c, &data, "up.bin", 4).await.expect("put");
    let path = srv.path("up.bin");
    let view = python_view(&path);
    assert_eq!((view[1].as_str(), view[2].as_str()), ("-", "-"));
    swap_bytes_keeping_the_version(&path, 99);
    let r = expect(&mut c, "CKSM ADLER32 0 -1 up.bin", 213).await;
    assert_eq!(r.text(), view[0], "answered from memory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_whose_checksum_is_kept_is_sent_without_summing_it_again() {
    let log_dir = tempfile::tempdir().expect("tempdir");
    let log = log_dir.path().join("transfers.jsonl");
    let log_cfg = log.clone();
    let srv = TestServer::start_with(move |c| c.log_transfer = Some(log_cfg)).await;
    let data = random_bytes(3 * 1024 * 1024, 100);
    let mut c = srv.login().await;
    client_put(&mut c, &data, "kept.bin", 4).await.expect("put");
    let kept = python_view(&srv.path("kept.bin"))[0].clone();
    // Other bytes under the same version: a send that summed would log their ADLER32; one that
    // used the kept value logs the kept one.
    swap_bytes_keeping_the_version(&srv.path("kept.bin"), 101);
    let (got, _) = client_get(&mut c, "kept.bin", 4).await;
    assert!(got == srv.read("kept.bin"));
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["command"], "RETR");
    assert_eq!(
        lines[1]["checksums"]["ADLER32"],
        kept.as_str(),
        "{}",
        lines[1]
    );
    // The swapped bytes under a kept value would fail the suite's audit of kept checksums.
    std::fs::remove_file(srv.path("kept.bin")).expect("remove");
}
