//! Interoperability: the real `globus-url-copy` (Debian globus-gass-copy-progs) against the
//! GridFTP server under test, every transfer compared byte for byte.
//!
//! Server: `FERRY_INTEROP_SERVER=ferry` (default: `ferry serve --listen 127.0.0.1:0 --root DIR
//! --anonymous --anonymous-write`) or `FERRY_INTEROP_SERVER=globus` (globus-gridftp-server
//! 13.24 in anonymous mode), the reference every test was validated against first:
//!
//! ```text
//! FERRY_INTEROP_SERVER=globus cargo test -p ferry-cli --test it interop_globus_url_copy:: -- --test-threads=2
//! cargo test -p ferry-cli --test it interop_globus_url_copy:: -- --test-threads=2
//! ```
//!
//! Without globus-url-copy every test prints why and passes. A failing test prints the
//! control-channel dialogue (from `-dbg`) and the tail of each server's log;
//! `FERRY_INTEROP_KEEP=1` keeps its directory, and `FERRY_INTEROP_DIALOGUE=1` (with
//! `--nocapture`) prints the dialogue of every run.
//!
//! What globus-url-copy 10.12 did against globus-gridftp-server 13.24 here, as far as it matters
//! to a server (full sequences in docs/interop-notes.md):
//!
//! - Login `USER anonymous` / `PASS globus@` (not shown by `-dbg`), then `SITE HELP`, `FEAT`,
//!   `SITE CLIENTINFO ...` (250), `TYPE I`. No `QUIT`: the client just closes the connection.
//!   The URL path is the command path: `ftp://h:p/a/b.bin` sends `RETR /a/b.bin`.
//! - Stream get `PASV`, `RETR`; stream put `PASV`, `ALLO <size>` (not for empty files), `STOR`.
//! - `-p N`: `MODE E`; get adds `OPTS RETR Parallelism=N,N,N;` and `PORT` (the server connects);
//!   put sends `PASV` and the client connects N streams. The Globus receiver sends
//!   `112-Perf Marker` replies and `111 Range Marker 0-<size>` before `226`.
//! - `-off O -len L`: get sends `ERET P O L /path` and the client writes the bytes at offset O of
//!   the local file (bytes before O stay a hole of zeros); put sends `ALLO L`, `ESTO A O /path`
//!   and the server overwrites that range of the existing file without truncating it; MODE E range
//!   markers for ESTO are relative to the section (`111 Range Marker 0-L`).
//! - `-r`: get lists with `MLSD /dir/` (one data connection per listing and per file; empty
//!   directories are recreated locally); put with `-cd` sends `MKD /dst/sub/` (trailing slash) for
//!   every directory and, after a 550, walks `MKD` down from the top accepting 553 "exists".
//! - `-restart` recovers only **third-party** transfers: in two-party get/put the data channel
//!   error after a `kill -9` aborts globus-url-copy at once (exit 1), so restart is tested with
//!   two servers. On retry the client logs in again and sends `REST a-b,c-d` (the ranges from the
//!   receiver's `111 Range Marker` replies, sent every 5 s by Globus) to **both** servers before
//!   `STOR` and `RETR`. If the reconnect is refused the client gives up, so the server must be
//!   listening again within `-rst-interval`. `-tcp-bs N` sends `SITE RETRBUFSIZE N` to the sender
//!   and `SITE STORBUFSIZE N` to the receiver; the transfer fails if no buffer command is accepted.
//! - `-verify-checksum`: `CKSM MD5 0 -1 /path` (reply `213 <lowercase hex>`) before a get, after a
//!   put. `-checksum-alg ADLER32` works only third-party (`213 8ba179dc`); for get and put the
//!   client cannot compute adler32 locally and fails ("Unable to use checksum algorithm ADLER32").
//! - `-list url/`: `PASV`, `MLSD /dir/`; prints one indented name per line, directories with `/`.
//! - Third-party: `SIZE` to the source, `PASV` + `ALLO` + `STOR` to the destination (without
//!   waiting for its 150), then `PORT <destination's address>` + `RETR` to the source; with `-p N`
//!   `MODE E` on both and `OPTS RETR Parallelism=N,N,N;` to the source.
//! - `-fast -p 2 -r`: one `PORT` (get) or `PASV` (put); the MLSD and every later RETR/STOR reuse
//!   the MODE E data connections, answered `125 Beginning transfer; reusing existing data connection.`
//!
use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use common::{
    adler32, file_dir_url, file_url, make_dir, random_bytes, run_guc, spawn_guc, write_file,
    write_marked_pattern_file, Sandbox, ServerUnderTest,
};

const MIB: usize = 1 << 20;

/// One server under test with a client-side directory; the server is dropped (killed) first.
struct Setup {
    server: ServerUnderTest,
    local: PathBuf,
    _sandbox: Sandbox,
}

fn setup() -> Setup {
    let sandbox = Sandbox::new();
    let server = ServerUnderTest::start(&sandbox.served_dir("root"));
    let local = sandbox.local_dir("local");
    Setup {
        server,
        local,
        _sandbox: sandbox,
    }
}

/// Two servers under test (source `a`, destination `b`) for third-party transfers.
struct Pair {
    a: ServerUnderTest,
    b: ServerUnderTest,
    _sandbox: Sandbox,
}

fn pair() -> Pair {
    let sandbox = Sandbox::new();
    let a = ServerUnderTest::start(&sandbox.served_dir("root-a"));
    let b = ServerUnderTest::start(&sandbox.served_dir("root-b"));
    Pair {
        a,
        b,
        _sandbox: sandbox,
    }
}

fn get_round_trip(len: usize, seed: u64, options: &[&str]) {
    require_interop_tools!();
    let s = setup();
    let source = s.server.path_of("source.bin");
    write_file(&source, &random_bytes(len, seed));
    let dest = s.local.join("copy.bin");
    let (url, local_url) = (s.server.url_for("source.bin"), file_url(&dest));
    let args: Vec<&str> = options
        .iter()
        .copied()
        .chain([url.as_str(), &local_url])
        .collect();
    run_guc(&args).assert_same_file(&source, &dest);
}

fn put_round_trip(len: usize, seed: u64, options: &[&str]) {
    require_interop_tools!();
    let s = setup();
    let source = s.local.join("source.bin");
    write_file(&source, &random_bytes(len, seed));
    let dest = s.server.path_of("copy.bin");
    let (local_url, url) = (file_url(&source), s.server.url_for("copy.bin"));
    let args: Vec<&str> = options
        .iter()
        .copied()
        .chain([local_url.as_str(), &url])
        .collect();
    run_guc(&args).assert_same_file(&source, &dest);
}

// 1. Stream mode.

#[test]
fn stream_mode_get_returns_the_file_byte_for_byte() {
    get_round_trip(10 * MIB + 12_345, 1, &[]);
}

#[test]
fn stream_mode_put_stores_the_file_byte_for_byte() {
    put_round_trip(10 * MIB + 12_345, 2, &[]);
}

// 2. MODE E with parallel streams.

#[test]
fn mode_e_get_with_4_streams_returns_the_file_byte_for_byte() {
    get_round_trip(64 * MIB + 777, 3, &["-p", "4"]);
}

#[test]
fn mode_e_get_with_8_streams_returns_the_file_byte_for_byte() {
    get_round_trip(64 * MIB + 777, 4, &["-p", "8"]);
}

#[test]
fn mode_e_put_with_4_streams_stores_the_file_byte_for_byte() {
    put_round_trip(64 * MIB + 777, 5, &["-p", "4"]);
}

#[test]
fn mode_e_put_with_8_streams_stores_the_file_byte_for_byte() {
    put_round_trip(64 * MIB + 777, 6, &["-p", "8"]);
}

// 3. Partial transfers.

const PARTIAL_OFFSET: usize = 1000;
const PARTIAL_LEN: usize = 5_000_000;

fn partial_get(options: &[&str]) {
    require_interop_tools!();
    let s = setup();
    let bytes = random_bytes(10 * MIB, 7);
    write_file(&s.server.path_of("source.bin"), &bytes);
    let dest = s.local.join("part.bin");
    let (off, len) = (PARTIAL_OFFSET.to_string(), PARTIAL_LEN.to_string());
    let (url, local_url) = (s.server.url_for("source.bin"), file_url(&dest));
    let args: Vec<&str> = options
        .iter()
        .copied()
        .chain(["-off", &off, "-len", &len, &url, &local_url])
        .collect();
    let out = run_guc(&args);
    // globus-url-copy writes the range at its own offset of the local file, leaving a hole.
    let mut expected = vec![0u8; PARTIAL_OFFSET + PARTIAL_LEN];
    expected[PARTIAL_OFFSET..]
        .copy_from_slice(&bytes[PARTIAL_OFFSET..PARTIAL_OFFSET + PARTIAL_LEN]);
    out.assert_bytes(&expected, &dest);
}

#[test]
fn partial_get_in_stream_mode_returns_exactly_the_requested_range() {
    partial_get(&[]);
}

#[test]
fn partial_get_with_4_streams_returns_exactly_the_requested_range() {
    partial_get(&["-p", "4"]);
}

fn partial_put(options: &[&str]) {
    require_interop_tools!();
    let s = setup();
    let source = random_bytes(10 * MIB, 8);
    write_file(&s.local.join("source.bin"), &source);
    let existing = random_bytes(3 * MIB, 9);
    let dest = s.server.path_of("existing.bin");
    write_file(&dest, &existing);
    let (off, len) = ("1000", "2000000");
    let (local_url, url) = (
        file_url(&s.local.join("source.bin")),
        s.server.url_for("existing.bin"),
    );
    let args: Vec<&str> = options
        .iter()
        .copied()
        .chain(["-off", off, "-len", len, &local_url, &url])
        .collect();
    let out = run_guc(&args);
    // ESTO A 1000: the source's bytes 1000..2001000 land at 1000..2001000; the rest is untouched.
    let mut expected = existing.clone();
    expected[1000..2_001_000].copy_from_slice(&source[1000..2_001_000]);
    out.assert_bytes(&expected, &dest);
}

#[test]
fn partial_put_in_stream_mode_overwrites_the_range_without_truncating() {
    partial_put(&[]);
}

#[test]
fn partial_put_with_4_streams_overwrites_the_range_without_truncating() {
    partial_put(&["-p", "4"]);
}

// 4. Recursive transfers.

/// Nested directories, an empty file, an empty directory and names with spaces.
fn write_tree(dir: &Path) {
    write_file(&dir.join("top.bin"), &random_bytes(100_000, 41));
    write_file(&dir.join("empty.bin"), &[]);
    write_file(&dir.join("name with spaces.bin"), &random_bytes(3000, 42));
    write_file(&dir.join("sub/nested.bin"), &random_bytes(300_000, 43));
    write_file(
        &dir.join("sub/deeper/deepest.bin"),
        &random_bytes(1_500_000, 44),
    );
    write_file(
        &dir.join("dir with spaces/file with spaces.bin"),
        &random_bytes(2000, 45),
    );
    make_dir(&dir.join("sub/empty dir"));
}

#[test]
fn recursive_get_copies_nested_directories_empty_files_and_names_with_spaces() {
    require_interop_tools!();
    let s = setup();
    let tree = s.server.path_of("tree");
    write_tree(&tree);
    let dest = s.local.join("copy");
    run_guc(&[
        "-r",
        "-cd",
        &s.server.dir_url_for("tree"),
        &file_dir_url(&dest),
    ])
    .assert_same_tree(&tree, &dest);
}

#[test]
fn recursive_put_creates_nested_directories_empty_files_and_names_with_spaces() {
    require_interop_tools!();
    let s = setup();
    let tree = s.local.join("tree");
    write_tree(&tree);
    run_guc(&[
        "-r",
        "-cd",
        &file_dir_url(&tree),
        &s.server.dir_url_for("upload/copy"),
    ])
    .assert_same_tree(&tree, &s.server.path_of("upload/copy"));
}

// 5. Restart after the server is killed (third-party; see the module comment for why).

const RESTART_MIB: u64 = 768;

enum Victim {
    Source,
    Destination,
}

fn third_party_restart_after_killing(victim: Victim) {
    require_interop_tools!();
    let mut p = pair();
    let source = p.a.path_of("big.bin");
    write_marked_pattern_file(&source, RESTART_MIB, 51);
    let dest = p.b.path_of("big.bin");
    let total = RESTART_MIB * MIB as u64;
    let (src_url, dst_url) = (p.a.url_for("big.bin"), p.b.url_for("big.bin"));
    // Small TCP buffers slow loopback down (Globus: ~60 MB/s) so a 111 marker comes before the kill.
    let mut run = spawn_guc(&[
        "-p",
        "4",
        "-tcp-bs",
        "4096",
        "-restart",
        "-rst-retries",
        "10",
        "-rst-interval",
        "2",
        &src_url,
        &dst_url,
    ]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let marker_before_kill = loop {
        if run.has_exited() {
            run.wait(Duration::ZERO)
                .fail("the transfer ended before the server could be killed");
        }
        let size = fs::metadata(&dest).map(|m| m.len()).unwrap_or(0);
        let marker = run.stderr_so_far().contains("111 Range Marker");
        if (marker && size >= total / 4) || size >= total * 6 / 10 {
            break marker;
        }
        if Instant::now() > deadline {
            run.wait(Duration::ZERO)
                .fail("too little data arrived within 120 s");
        }
        thread::sleep(Duration::from_millis(10));
    };
    match victim {
        Victim::Source => p.a.restart_same_port(),
        Victim::Destination => p.b.restart_same_port(),
    }
    let out = run.wait(Duration::from_secs(300));
    out.assert_same_file(&source, &dest);
    let commands = out.commands();
    if commands.iter().filter(|c| c.contains("RETR ")).count() < 2 {
        out.fail("expected globus-url-copy to restart the transfer (a second RETR)");
    }
    let rest_ranges = commands
        .iter()
        .filter(|c| c.contains(" REST ") || c.starts_with("REST "));
    if marker_before_kill && rest_ranges.count() < 2 {
        out.fail(
            "a 111 range marker arrived before the kill, \
             so the retry should send REST ranges to both servers",
        );
    }
}

#[test]
fn third_party_restart_completes_the_file_after_the_destination_is_killed() {
    third_party_restart_after_killing(Victim::Destination);
}

#[test]
fn third_party_restart_completes_the_file_after_the_source_is_killed() {
    third_party_restart_after_killing(Victim::Source);
}

// 6. Checksums.

#[test]
fn verify_checksum_md5_succeeds_on_get() {
    require_interop_tools!();
    let s = setup();
    let source = s.server.path_of("sum.bin");
    write_file(&source, &random_bytes(3 * MIB + 5, 61));
    let dest = s.local.join("sum.bin");
    let out = run_guc(&[
        "-verify-checksum",
        &s.server.url_for("sum.bin"),
        &file_url(&dest),
    ]);
    out.assert_same_file(&source, &dest);
    if !out
        .commands()
        .iter()
        .any(|c| c.starts_with("CKSM MD5 0 -1 "))
    {
        out.fail("expected CKSM MD5 0 -1 <path>");
    }
}

#[test]
fn verify_checksum_md5_succeeds_on_put() {
    require_interop_tools!();
    let s = setup();
    let source = s.local.join("sum.bin");
    write_file(&source, &random_bytes(3 * MIB + 5, 62));
    let dest = s.server.path_of("sum.bin");
    let out = run_guc(&[
        "-verify-checksum",
        &file_url(&source),
        &s.server.url_for("sum.bin"),
    ]);
    out.assert_same_file(&source, &dest);
    if !out
        .commands()
        .iter()
        .any(|c| c.starts_with("CKSM MD5 0 -1 "))
    {
        out.fail("expected CKSM MD5 0 -1 <path>");
    }
}

#[test]
fn verify_checksum_adler32_succeeds_third_party_and_reports_the_right_value() {
    require_interop_tools!();
    let p = pair();
    let bytes = random_bytes(3 * MIB + 5, 63);
    let source = p.a.path_of("sum.bin");
    write_file(&source, &bytes);
    let out = run_guc(&[
        "-verify-checksum",
        "-checksum-alg",
        "ADLER32",
        &p.a.url_for("sum.bin"),
        &p.b.url_for("sum.bin"),
    ]);
    out.assert_same_file(&source, &p.b.path_of("sum.bin"));
    let expected = format!("213 {:08x}", adler32(&bytes));
    let answers = out
        .replies()
        .iter()
        .filter(|r| r.to_ascii_lowercase().ends_with(&expected))
        .count();
    if answers != 2 {
        out.fail(&format!("expected `{expected}` from both servers"));
    }
}

// 7. Listing.

#[test]
fn list_shows_every_name_in_the_directory() {
    require_interop_tools!();
    let s = setup();
    write_tree(&s.server.path_of("tree"));
    let out = run_guc(&["-list", &s.server.dir_url_for("tree")]);
    out.assert_success();
    let mut names: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with(' '))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    names.sort_unstable();
    let expected = [
        "dir with spaces/",
        "empty.bin",
        "name with spaces.bin",
        "sub/",
        "top.bin",
    ];
    if names != expected {
        out.fail(&format!(
            "listed {names:?}, expected {expected:?}\nstdout:\n{}",
            out.stdout
        ));
    }
}

// 8. Third-party transfers.

fn third_party(len: usize, seed: u64, options: &[&str]) {
    require_interop_tools!();
    let p = pair();
    let source = p.a.path_of("source.bin");
    write_file(&source, &random_bytes(len, seed));
    let (src_url, dst_url) = (p.a.url_for("source.bin"), p.b.url_for("copy.bin"));
    let args: Vec<&str> = options
        .iter()
        .copied()
        .chain([src_url.as_str(), &dst_url])
        .collect();
    run_guc(&args).assert_same_file(&source, &p.b.path_of("copy.bin"));
}

#[test]
fn third_party_transfer_in_stream_mode_copies_the_file_byte_for_byte() {
    third_party(10 * MIB + 99, 81, &[]);
}

#[test]
fn third_party_transfer_with_4_streams_copies_the_file_byte_for_byte() {
    third_party(64 * MIB + 99, 82, &["-p", "4"]);
}

// 9. Data channel reuse with -fast.

fn write_small_files(dir: &Path) {
    let sizes = random_bytes(50, 91);
    for (i, size) in sizes.iter().enumerate() {
        let len = usize::from(*size) * 256 + i;
        write_file(
            &dir.join(format!("small-{i:02}.bin")),
            &random_bytes(len, 100 + i as u64),
        );
    }
}

#[test]
fn fast_parallel_recursive_get_of_50_small_files_copies_every_byte() {
    require_interop_tools!();
    let s = setup();
    let dir = s.server.path_of("small");
    write_small_files(&dir);
    let dest = s.local.join("small");
    run_guc(&[
        "-fast",
        "-p",
        "2",
        "-r",
        "-cd",
        &s.server.dir_url_for("small"),
        &file_dir_url(&dest),
    ])
    .assert_same_tree(&dir, &dest);
}

#[test]
fn fast_parallel_recursive_put_of_50_small_files_copies_every_byte() {
    require_interop_tools!();
    let s = setup();
    let dir = s.local.join("small");
    write_small_files(&dir);
    run_guc(&[
        "-fast",
        "-p",
        "2",
        "-r",
        "-cd",
        &file_dir_url(&dir),
        &s.server.dir_url_for("small"),
    ])
    .assert_same_tree(&dir, &s.server.path_of("small"));
}
