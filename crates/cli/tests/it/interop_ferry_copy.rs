//! Interoperability: the `ferry` client (`ferry copy`, `ferry url-copy`, `ferry ls` ...) against
//! the real globus-gridftp-server (Debian's globus-gridftp-server-progs, run anonymously with
//! `-aa` as in the globus-url-copy suite), every transfer compared byte for byte.
//!
//! ```text
//! cargo test --release -p ferry-cli --test it interop_ferry_copy:: -- --test-threads=2
//! ```
//!
//! Without globus-gridftp-server every test prints why and passes; CI installs it. A failing
//! test prints the command, its messages and the client's control-channel dialogue (the client
//! runs with `RUST_LOG=ferry_client::control=debug`), then the tail of each server's log;
//! `FERRY_INTEROP_KEEP=1` keeps its directory and `FERRY_INTEROP_DIALOGUE=1` (with
//! `--nocapture`) prints the dialogue of every run.
//!
//! What globus-gridftp-server 13.24 did here that a client has to live with:
//!
//! - It answers `STOR`/`ESTO` with `150` only once the client's data connections are up (MODE E
//!   and stream mode alike), so a client that waits for the `150` before connecting waits
//!   forever; likewise a third-party destination answers only after the source, told with
//!   `RETR`, has connected to it. The put and third-party tests hang without that ordering.
//! - `ERET P <offset> -1` (partial retrieve "to the end") makes it drop the control connection,
//!   so the client names the length.
//! - When a third-party destination is killed, the source reports
//!   `500 Command failed. : callback failed. ... Connection reset by peer` at the same moment as
//!   the destination's control connection closes; only the latter says a retry can help.
//! - It sends `111 Range Marker` replies every 5 s as a receiver, and honours `REST a-b,c-d`
//!   before `STOR` (no truncation) and before `RETR` (sends only the complement), so two-party
//!   gets and puts resume from markers too, which globus-url-copy itself cannot do.
//! - Refusals use odd codes: `STOR` into a missing directory is `500`, `RMD` of a non-empty
//!   directory `451`, `MKD` of an existing one `553`.

use crate::common;

use std::fs::{self, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use common::server::free_port;
use common::{
    adler32, file_dir_url, file_url, make_dir, md5_hex, md5_of_file, random_bytes, run_ferry,
    run_ferry_with_input, spawn_ferry, write_file, write_marked_pattern_file, FerryOutput,
    FerryProcess, Sandbox, ServerKind, ServerUnderTest,
};

const MIB: usize = 1 << 20;

/// Returns from the calling test (which then passes) when globus-gridftp-server is missing.
macro_rules! require_globus_server {
    () => {
        if let Some(reason) = ServerKind::Globus.missing() {
            eprintln!("{reason}");
            return;
        }
    };
}

/// A Globus server with a client-side directory; the server is dropped (killed) first.
struct Setup {
    globus: ServerUnderTest,
    local: PathBuf,
    _sandbox: Sandbox,
}

fn setup() -> Setup {
    let sandbox = Sandbox::new();
    let globus = ServerUnderTest::start_kind(ServerKind::Globus, &sandbox.served_dir("globus"));
    let local = sandbox.local_dir("local");
    Setup {
        globus,
        local,
        _sandbox: sandbox,
    }
}

/// Two servers for third-party copies: source `a`, destination `b`.
struct Pair {
    a: ServerUnderTest,
    b: ServerUnderTest,
    _sandbox: Sandbox,
}

fn pair(a: ServerKind, b: ServerKind) -> Pair {
    let sandbox = Sandbox::new();
    let a = ServerUnderTest::start_kind(a, &sandbox.served_dir("root-a"));
    let b = ServerUnderTest::start_kind(b, &sandbox.served_dir("root-b"));
    Pair {
        a,
        b,
        _sandbox: sandbox,
    }
}

/// `ferry copy --json OPTIONS SRC DST`.
fn copy(options: &[&str], src: &str, dst: &str) -> FerryOutput {
    let args: Vec<&str> = ["copy", "--json"]
        .into_iter()
        .chain(options.iter().copied())
        .chain([src, dst])
        .collect();
    run_ferry(&args)
}

/// The one `done` event of a single-file copy.
#[track_caller]
fn done(out: &FerryOutput) -> serde_json::Value {
    let mut events = out.events_named("done");
    if events.len() != 1 {
        out.fail(&format!("expected one `done` event, got {}", events.len()));
    }
    events.remove(0)
}

/// Checks a field of the `done` event of a single-file copy.
#[track_caller]
fn assert_done(out: &FerryOutput, field: &str, expected: serde_json::Value) {
    let event = done(out);
    if event[field] != expected {
        out.fail(&format!(
            "`done` event has {field} = {}, expected {expected}: {event}",
            event[field]
        ));
    }
}

// 1. Gets and puts with 1, 4 and 8 streams.

const ROUND_TRIP_LEN: usize = 64 * MIB + 777;

fn get_with_streams(streams: u32, seed: u64) {
    require_globus_server!();
    let s = setup();
    let source = s.globus.path_of("source.bin");
    write_file(&source, &random_bytes(ROUND_TRIP_LEN, seed));
    let dest = s.local.join("copy.bin");
    let n = streams.to_string();
    let out = copy(
        &["-p", &n],
        &s.globus.url_for("source.bin"),
        &dest.display().to_string(),
    );
    out.assert_same_file(&source, &dest);
    assert_done(&out, "bytes", ROUND_TRIP_LEN.into());
    // Globus opens as many connections as `OPTS RETR Parallelism` asked for.
    assert_done(&out, "streams", streams.into());
}

fn put_with_streams(streams: u32, seed: u64) {
    require_globus_server!();
    let s = setup();
    let source = s.local.join("source.bin");
    write_file(&source, &random_bytes(ROUND_TRIP_LEN, seed));
    let n = streams.to_string();
    let out = copy(
        &["-p", &n],
        &source.display().to_string(),
        &s.globus.url_for("copy.bin"),
    );
    out.assert_same_file(&source, &s.globus.path_of("copy.bin"));
    assert_done(&out, "bytes", ROUND_TRIP_LEN.into());
    assert_done(&out, "streams", streams.into());
}

#[test]
fn get_with_1_stream_returns_the_file_byte_for_byte() {
    get_with_streams(1, 1);
}

#[test]
fn get_with_4_streams_returns_the_file_byte_for_byte() {
    get_with_streams(4, 2);
}

#[test]
fn get_with_8_streams_returns_the_file_byte_for_byte() {
    get_with_streams(8, 3);
}

#[test]
fn put_with_1_stream_stores_the_file_byte_for_byte() {
    put_with_streams(1, 4);
}

#[test]
fn put_with_4_streams_stores_the_file_byte_for_byte() {
    put_with_streams(4, 5);
}

#[test]
fn put_with_8_streams_stores_the_file_byte_for_byte() {
    put_with_streams(8, 6);
}

// 2. Partial transfers: written at the same offset, as globus-url-copy does.

const PARTIAL_SOURCE_LEN: usize = 10 * MIB;
const PARTIAL_OFFSET: usize = 1000;
const PARTIAL_LEN: usize = 5_000_000;

fn partial_get(streams: &str) {
    require_globus_server!();
    let s = setup();
    let bytes = random_bytes(PARTIAL_SOURCE_LEN, 21);
    write_file(&s.globus.path_of("source.bin"), &bytes);
    let dest = s.local.join("part.bin");
    let (off, len) = (PARTIAL_OFFSET.to_string(), PARTIAL_LEN.to_string());
    let out = copy(
        &["-p", streams, "--offset", &off, "--length", &len],
        &s.globus.url_for("source.bin"),
        &dest.display().to_string(),
    );
    // The range lands at its own offset of the new local file; the bytes before it are a hole.
    let mut expected = vec![0u8; PARTIAL_OFFSET + PARTIAL_LEN];
    expected[PARTIAL_OFFSET..]
        .copy_from_slice(&bytes[PARTIAL_OFFSET..PARTIAL_OFFSET + PARTIAL_LEN]);
    out.assert_bytes(&expected, &dest);
    assert_done(&out, "bytes", PARTIAL_LEN.into());
}

#[test]
fn partial_get_with_1_stream_writes_exactly_the_range_at_its_offset() {
    partial_get("1");
}

#[test]
fn partial_get_with_4_streams_writes_exactly_the_range_at_its_offset() {
    partial_get("4");
}

#[test]
fn partial_get_with_an_offset_and_no_length_copies_to_the_end_at_that_offset() {
    require_globus_server!();
    let s = setup();
    let bytes = random_bytes(PARTIAL_SOURCE_LEN, 22);
    write_file(&s.globus.path_of("source.bin"), &bytes);
    let dest = s.local.join("tail.bin");
    let offset = 6_000_000;
    let out = copy(
        &["--offset", &offset.to_string()],
        &s.globus.url_for("source.bin"),
        &dest.display().to_string(),
    );
    let mut expected = bytes.clone();
    expected[..offset].fill(0);
    out.assert_bytes(&expected, &dest);
    assert_done(&out, "bytes", (PARTIAL_SOURCE_LEN - offset).into());
}

fn partial_put(streams: &str) {
    require_globus_server!();
    let s = setup();
    let source = random_bytes(PARTIAL_SOURCE_LEN, 23);
    write_file(&s.local.join("source.bin"), &source);
    let existing = random_bytes(3 * MIB, 24);
    let dest = s.globus.path_of("existing.bin");
    write_file(&dest, &existing);
    let out = copy(
        &["-p", streams, "--offset", "1000", "--length", "2000000"],
        &s.local.join("source.bin").display().to_string(),
        &s.globus.url_for("existing.bin"),
    );
    // ESTO A 1000: the source's bytes 1000..2001000 land at 1000..2001000; the rest is untouched.
    let mut expected = existing.clone();
    expected[1000..2_001_000].copy_from_slice(&source[1000..2_001_000]);
    out.assert_bytes(&expected, &dest);
    assert_done(&out, "bytes", 2_000_000.into());
}

#[test]
fn partial_put_with_1_stream_overwrites_the_range_without_truncating() {
    partial_put("1");
}

#[test]
fn partial_put_with_4_streams_overwrites_the_range_without_truncating() {
    partial_put("4");
}

#[test]
fn partial_put_into_a_missing_file_creates_it_with_zeros_before_the_range() {
    require_globus_server!();
    let s = setup();
    let source = random_bytes(PARTIAL_SOURCE_LEN, 25);
    write_file(&s.local.join("source.bin"), &source);
    let out = copy(
        &["--offset", "1000", "--length", "5000"],
        &s.local.join("source.bin").display().to_string(),
        &s.globus.url_for("fresh.bin"),
    );
    let mut expected = vec![0u8; 6000];
    expected[1000..].copy_from_slice(&source[1000..6000]);
    out.assert_bytes(&expected, &s.globus.path_of("fresh.bin"));
}

// 3. Recursive copies.

/// Nested directories, empty files, empty directories and names with spaces.
fn write_tree(dir: &Path) {
    write_file(&dir.join("top.bin"), &random_bytes(100_000, 31));
    write_file(&dir.join("empty.bin"), &[]);
    write_file(&dir.join("name with spaces.bin"), &random_bytes(3000, 32));
    write_file(&dir.join("sub/nested.bin"), &random_bytes(300_000, 33));
    write_file(&dir.join("sub/empty too.bin"), &[]);
    write_file(
        &dir.join("sub/deeper/deepest.bin"),
        &random_bytes(1_500_000, 34),
    );
    write_file(
        &dir.join("dir with spaces/file with spaces.bin"),
        &random_bytes(2000, 35),
    );
    make_dir(&dir.join("sub/empty dir"));
}

/// Files in [`write_tree`].
const TREE_FILES: usize = 7;

#[test]
fn recursive_get_copies_nested_directories_empty_files_an_empty_directory_and_names_with_spaces() {
    require_globus_server!();
    let s = setup();
    let tree = s.globus.path_of("tree");
    write_tree(&tree);
    let dest = s.local.join("copy");
    let out = copy(
        &["-r"],
        &s.globus.dir_url_for("tree"),
        &format!("{}/", dest.display()),
    );
    out.assert_same_tree(&tree, &dest);
    if out.events_named("done").len() != TREE_FILES {
        out.fail(&format!("expected {TREE_FILES} `done` events"));
    }
}

/// Copies 120 small files from a server of `kind` and checks they came byte for byte and
/// that RETRs were pipelined: several sent before the first reply to them.
fn pipelined_get_from(kind: ServerKind) {
    let sandbox = Sandbox::new();
    let server = ServerUnderTest::start_kind(kind, &sandbox.served_dir("root"));
    let tree = server.path_of("many");
    for i in 0..120 {
        write_file(
            &tree.join(format!("d{}/f{i:03}.bin", i % 3)),
            &random_bytes(i * 53, 700 + i as u64),
        );
    }
    let dest = sandbox.local_dir("local").join("copy");
    let out = copy(
        &["-r"],
        &server.dir_url_for("many"),
        &format!("{}/", dest.display()),
    );
    out.assert_same_tree(&tree, &dest);
    // Every file verified after the pipeline, with the value the client summed.
    for ev in out.events_named("done") {
        if ev["checksum"].as_str().is_none_or(|c| c.len() != 8) {
            out.fail(&format!("a file was not verified: {ev}"));
        }
    }
    if cksms_to(&out, server.port()).len() != 120 {
        out.fail("expected one CKSM per file");
    }
    // In the dialogue of one session, a run of `> RETR` lines with no reply between them.
    let dialogue = out.dialogue();
    let mut longest = 0;
    let mut run = 0;
    for line in dialogue.lines() {
        if line.contains(" > RETR ") {
            run += 1;
            longest = longest.max(run);
        } else if line.contains(" < ") {
            run = 0;
        }
    }
    if longest < 4 {
        out.fail(&format!(
            "expected RETRs sent ahead of their replies (longest run {longest})"
        ));
    }
}

#[test]
fn a_recursive_get_of_small_files_from_globus_is_pipelined_and_byte_identical() {
    require_globus_server!();
    pipelined_get_from(ServerKind::Globus);
}

#[test]
fn a_recursive_get_of_small_files_from_ferry_is_pipelined_and_byte_identical() {
    pipelined_get_from(ServerKind::Ferry);
}

#[test]
fn a_file_refused_in_the_middle_of_a_pipelined_get_fails_alone_and_the_others_arrive_intact() {
    require_globus_server!();
    let s = setup();
    // Small files from one server are fetched with RETRs pipelined on one session; the one
    // Globus cannot read (it serves anonymous users as `nobody`) comes back 500 while the
    // commands after it are already queued at the server.
    let tree = s.globus.path_of("many");
    let count = 40;
    for i in 0..count {
        write_file(
            &tree.join(format!("f{i:02}.bin")),
            &random_bytes(1000 + 97 * i, 60 + i as u64),
        );
    }
    let refused = tree.join("f17.bin");
    fs::set_permissions(
        &refused,
        std::os::unix::fs::PermissionsExt::from_mode(0o000),
    )
    .unwrap();
    let dest = s.local.join("copy");
    let out = copy(
        &["-r", "--retries", "0"],
        &s.globus.dir_url_for("many"),
        &format!("{}/", dest.display()),
    );
    if out.code() == Some(0) {
        out.fail("expected a non-zero exit for the refused file");
    }
    let failed = out.events_named("failed");
    if failed.len() != 1 || !failed[0]["error"].to_string().contains("f17.bin") {
        out.fail(&format!(
            "expected one `failed` event naming f17.bin, got {failed:?}"
        ));
    }
    if out.events_named("done").len() != count - 1 {
        out.fail(&format!("expected {} `done` events", count - 1));
    }
    if out.events_named("started").len() != count {
        out.fail(&format!(
            "expected each of the {count} files announced once"
        ));
    }
    for i in (0..count).filter(|&i| i != 17) {
        let name = format!("f{i:02}.bin");
        if let Err(e) = common::files::compare_bytes(
            &random_bytes(1000 + 97 * i, 60 + i as u64),
            &dest.join(&name),
        ) {
            out.fail(&e);
        }
    }
}

#[test]
fn recursive_put_creates_nested_directories_empty_files_an_empty_directory_and_names_with_spaces() {
    require_globus_server!();
    let s = setup();
    let tree = s.local.join("tree");
    write_tree(&tree);
    make_dir(&s.globus.path_of("upload"));
    let out = copy(
        &["-r"],
        &format!("{}/", tree.display()),
        &s.globus.dir_url_for("upload/copy"),
    );
    out.assert_same_tree(&tree, &s.globus.path_of("upload/copy"));
}

#[test]
fn recursive_put_with_create_dirs_fills_a_missing_destination_parent() {
    require_globus_server!();
    let s = setup();
    let tree = s.local.join("tree");
    write_tree(&tree);
    let out = copy(
        &["-r", "--create-dirs"],
        &format!("{}/", tree.display()),
        &s.globus.dir_url_for("missing/parent/copy"),
    );
    out.assert_same_tree(&tree, &s.globus.path_of("missing/parent/copy"));
}

#[test]
fn recursive_get_with_create_dirs_fills_a_missing_destination_parent() {
    require_globus_server!();
    let s = setup();
    let tree = s.globus.path_of("tree");
    write_tree(&tree);
    let dest = s.local.join("missing/parent/copy");
    let out = copy(
        &["-r", "--create-dirs"],
        &s.globus.dir_url_for("tree"),
        &format!("{}/", dest.display()),
    );
    out.assert_same_tree(&tree, &dest);
}

#[test]
fn single_file_put_into_a_missing_directory_needs_create_dirs() {
    require_globus_server!();
    let s = setup();
    let source = s.local.join("one.bin");
    write_file(&source, &random_bytes(200_000, 36));
    let url = s.globus.url_for("no/such/dir/one.bin");
    let refused = copy(&[], &source.display().to_string(), &url);
    if refused.code() == Some(0) || refused.events_named("failed").len() != 1 {
        refused.fail("a put into a missing directory without --create-dirs should fail");
    }
    if s.globus.path_of("no").exists() {
        refused.fail("the failed put created directories");
    }
    copy(&["--create-dirs"], &source.display().to_string(), &url)
        .assert_same_file(&source, &s.globus.path_of("no/such/dir/one.bin"));
}

// 4. Third-party copies driven by `ferry copy URL URL`.

fn third_party(a: ServerKind, b: ServerKind, streams: &str, seed: u64) {
    require_globus_server!();
    let p = pair(a, b);
    let source = p.a.path_of("source.bin");
    write_file(&source, &random_bytes(ROUND_TRIP_LEN, seed));
    let out = copy(
        &["-p", streams],
        &p.a.url_for("source.bin"),
        &p.b.url_for("copy.bin"),
    );
    out.assert_same_file(&source, &p.b.path_of("copy.bin"));
    assert_done(&out, "bytes", ROUND_TRIP_LEN.into());
}

#[test]
fn third_party_ferry_to_globus_copies_the_file_byte_for_byte() {
    third_party(ServerKind::Ferry, ServerKind::Globus, "4", 41);
}

#[test]
fn third_party_globus_to_ferry_copies_the_file_byte_for_byte() {
    third_party(ServerKind::Globus, ServerKind::Ferry, "4", 42);
}

#[test]
fn third_party_globus_to_globus_with_1_stream_copies_the_file_byte_for_byte() {
    third_party(ServerKind::Globus, ServerKind::Globus, "1", 43);
}

#[test]
fn third_party_globus_to_globus_with_8_streams_copies_the_file_byte_for_byte() {
    third_party(ServerKind::Globus, ServerKind::Globus, "8", 44);
}

#[test]
fn recursive_third_party_globus_to_globus_copies_the_whole_tree() {
    require_globus_server!();
    let p = pair(ServerKind::Globus, ServerKind::Globus);
    let tree = p.a.path_of("tree");
    write_tree(&tree);
    let out = copy(&["-r"], &p.a.dir_url_for("tree"), &p.b.dir_url_for("copy"));
    out.assert_same_tree(&tree, &p.b.path_of("copy"));
}

#[test]
fn a_third_party_file_refused_by_globus_does_not_stop_the_next_one() {
    require_globus_server!();
    let p = pair(ServerKind::Globus, ServerKind::Globus);
    let refused = random_bytes(2 * MIB, 45);
    let accepted = random_bytes(300_000, 46);
    write_file(&p.a.path_of("refused.bin"), &refused);
    write_file(&p.a.path_of("accepted.bin"), &accepted);
    // A directory where the first file should go: Globus refuses the STOR while the source,
    // already told to RETR, is connecting to it. The next file reuses the same pair of servers.
    make_dir(&p.b.path_of("dst/refused.bin"));
    let args = [
        "copy",
        "--json",
        "--concurrency",
        "1",
        &p.a.url_for("refused.bin"),
        &p.a.url_for("accepted.bin"),
        &p.b.dir_url_for("dst"),
    ];
    let out = run_ferry(&args);
    if out.code() == Some(0) || out.events_named("failed").len() != 1 {
        out.fail("expected the refused file to fail and the copy to report it");
    }
    if out.events_named("done").len() != 1 {
        out.fail("expected the second file to be copied");
    }
    if let Err(e) = common::files::compare_bytes(&accepted, &p.b.path_of("dst/accepted.bin")) {
        out.fail(&e);
    }
}

/// A recursive third-party copy of 30 small files (pipelined) where the destination refuses
/// one in the middle: that file fails alone, every other arrives byte for byte, even though the
/// destination had STORs for the next files queued when it refused.
fn pipelined_third_party_with_a_refusal(a: ServerKind, b: ServerKind) {
    let p = pair(a, b);
    let tree = p.a.path_of("many");
    let count = 30;
    for i in 0..count {
        write_file(
            &tree.join(format!("f{i:02}.bin")),
            &random_bytes(500 + 311 * i, 900 + i as u64),
        );
    }
    // A directory where f11.bin should go: the destination refuses that STOR.
    make_dir(&p.b.path_of("copy/f11.bin"));
    let out = copy(
        &["-r", "--retries", "0"],
        &p.a.dir_url_for("many"),
        &p.b.dir_url_for("copy"),
    );
    if out.code() == Some(0) {
        out.fail("expected a non-zero exit for the refused file");
    }
    let failed = out.events_named("failed");
    if failed.len() != 1 || !failed[0]["error"].to_string().contains("f11.bin") {
        out.fail(&format!(
            "expected one `failed` event naming f11.bin, got {failed:?}"
        ));
    }
    if out.events_named("done").len() != count - 1 {
        out.fail(&format!("expected {} `done` events", count - 1));
    }
    for i in (0..count).filter(|&i| i != 11) {
        let name = format!("f{i:02}.bin");
        if let Err(e) = common::files::compare_bytes(
            &random_bytes(500 + 311 * i, 900 + i as u64),
            &p.b.path_of(&format!("copy/{name}")),
        ) {
            out.fail(&e);
        }
    }
}

#[test]
fn a_pipelined_third_party_copy_between_globus_servers_survives_a_refused_file() {
    require_globus_server!();
    pipelined_third_party_with_a_refusal(ServerKind::Globus, ServerKind::Globus);
}

#[test]
fn a_pipelined_third_party_copy_between_ferry_servers_survives_a_refused_file() {
    pipelined_third_party_with_a_refusal(ServerKind::Ferry, ServerKind::Ferry);
}

/// A recursive third-party copy between ferry servers whose source keeps a wrong ADLER32 for
/// one file (an XRootD record planted for its current mtime, so the source answers it without
/// reading the file): the pipeline's verification, which asks each server for every file's
/// checksum in one pipelined exchange, fails that file alone with exit 6 and removes its copy;
/// the others are verified and byte for byte.
#[test]
fn a_pipelined_third_party_copy_between_ferry_servers_catches_the_one_file_whose_checksum_differs()
{
    let p = pair(ServerKind::Ferry, ServerKind::Ferry);
    let tree = p.a.path_of("many");
    let count = 30;
    let data = |i: usize| random_bytes(700 + 257 * i, 1300 + i as u64);
    for i in 0..count {
        write_file(&tree.join(format!("f{i:02}.bin")), &data(i));
    }
    let liar = tree.join("f07.bin");
    let mtime = fs::metadata(&liar)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs() as i64);
    let wrong = (adler32(&data(7)) ^ 0x5a5a_5a5a).to_be_bytes().to_vec();
    let record = ferry_storage::cache::XrdCksRecord {
        alg: ferry_storage::ChecksumAlgorithm::Adler32,
        fm_time: mtime,
        cs_time: 5,
        value: wrong.clone(),
    };
    let name = ferry_storage::cache::xrdcks_name(ferry_storage::ChecksumAlgorithm::Adler32);
    rustix::fs::setxattr(
        &liar,
        name.as_str(),
        &record.encode(),
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap_or_else(|e| panic!("cannot set {name} on {}: {e}", liar.display()));
    let out = copy(
        &["-r", "--retries", "0"],
        &p.a.dir_url_for("many"),
        &p.b.dir_url_for("copy"),
    );
    out.assert_exit(6);
    let failed = out.events_named("failed");
    let error = failed
        .first()
        .map(|e| e["error"].to_string())
        .unwrap_or_default();
    if failed.len() != 1 || !error.contains("f07.bin") || !error.contains(&hex(&wrong)) {
        out.fail(&format!(
            "expected one `failed` event naming f07.bin and the source's wrong value, got {failed:?}"
        ));
    }
    if p.b.path_of("copy/f07.bin").exists() {
        out.fail("the copy whose checksum differs should have been removed");
    }
    let done = out.events_named("done");
    if done.len() != count - 1 || done.iter().any(|e| e["checksum"].is_null()) {
        out.fail(&format!("expected {} verified `done` events", count - 1));
    }
    for i in (0..count).filter(|&i| i != 7) {
        let copied = p.b.path_of(&format!("copy/f{i:02}.bin"));
        if let Err(e) = common::files::compare_bytes(&data(i), &copied) {
            out.fail(&e);
        }
    }
    for port in [p.a.port(), p.b.port()] {
        let asked = cksms_to(&out, port).len();
        if asked != count {
            out.fail(&format!(
                "expected {count} CKSMs to port {port}, got {asked}"
            ));
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// 5. Restart after the server is killed mid-transfer.

const RESTART_MIB: u64 = 768;
const RESTART_TOTAL: u64 = RESTART_MIB * MIB as u64;

/// Options of every restarted copy: small TCP buffers slow loopback down (to ~85 MB/s here), so
/// the Globus receiver's first `111 Range Marker` (after 5 s) comes before the end.
const RESTART_OPTIONS: [&str; 7] = ["-p", "4", "--tcp-bs", "4096", "--retries", "5", "--json"];

/// Waits until part of the file has reached `watched`, then kills `victim` with SIGKILL and
/// starts it again on the same port. When `receiver_is_globus`, waits for a `111` restart
/// marker if one comes in time. Returns the run and whether a marker had arrived.
fn kill_mid_transfer(
    mut run: FerryProcess,
    watched: &Path,
    victim: &mut ServerUnderTest,
    receiver_is_globus: bool,
) -> (FerryProcess, bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if run.has_exited() {
            run.wait(Duration::ZERO)
                .fail("the transfer ended before the server could be killed");
        }
        let size = fs::metadata(watched).map(|m| m.len()).unwrap_or(0);
        let marker = run.stderr_so_far().contains("Range Marker");
        let ready = if receiver_is_globus {
            (marker && size >= RESTART_TOTAL / 4) || size >= RESTART_TOTAL * 6 / 10
        } else {
            size >= RESTART_TOTAL / 3
        };
        if ready {
            victim.restart_same_port();
            eprintln!(
                "killed and restarted the {:?} server on port {} with {size} of {RESTART_TOTAL} \
                 bytes at the destination; range marker before the kill: {marker}",
                victim.kind(),
                victim.port()
            );
            return (run, marker);
        }
        if Instant::now() > deadline {
            run.wait(Duration::ZERO)
                .fail("too little data arrived within 120 s");
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Checks a restarted copy: success, identical bytes, a retry, and a resumption from the
/// stored ranges (`REST` to every server in `ports`) whenever the retry says it resumed.
#[track_caller]
fn assert_restarted(
    out: &FerryOutput,
    source: &Path,
    dest: &Path,
    marker_before_kill: bool,
    ports: &[u16],
) {
    out.assert_same_file(source, dest);
    let retries = out.events_named("retry");
    let Some(first) = retries.first() else {
        out.fail("expected a `retry` event after the server was killed");
    };
    let resumed = first["resumed_bytes"].as_u64().unwrap_or(0);
    eprintln!("the first retry resumed after {resumed} bytes");
    if marker_before_kill && resumed == 0 {
        out.fail("a 111 range marker arrived before the kill, so the retry should resume from it");
    }
    if resumed > 0 {
        for port in ports {
            if !out
                .commands_to(*port)
                .iter()
                .any(|c| c.starts_with("REST 0-"))
            {
                out.fail(&format!(
                    "the retry resumed after {resumed} bytes, so it should send REST ranges \
                     to the server on port {port}"
                ));
            }
        }
    }
}

#[test]
fn put_restarts_from_markers_after_globus_is_killed_mid_transfer() {
    require_globus_server!();
    let mut s = setup();
    let source = s.local.join("big.bin");
    write_marked_pattern_file(&source, RESTART_MIB, 51);
    let dest = s.globus.path_of("big.bin");
    let args: Vec<&str> = ["copy"].into_iter().chain(RESTART_OPTIONS).collect();
    let url = s.globus.url_for("big.bin");
    let source_arg = source.display().to_string();
    let run = spawn_ferry(&[&args[..], &[&source_arg, &url]].concat());
    let (run, marker) = kill_mid_transfer(run, &dest, &mut s.globus, true);
    let out = run.wait(Duration::from_secs(300));
    assert_restarted(&out, &source, &dest, marker, &[s.globus.port()]);
}

#[test]
fn get_restarts_from_markers_after_globus_is_killed_mid_transfer() {
    require_globus_server!();
    let mut s = setup();
    let source = s.globus.path_of("big.bin");
    write_marked_pattern_file(&source, RESTART_MIB, 52);
    let dest = s.local.join("big.bin");
    let args: Vec<&str> = ["copy"].into_iter().chain(RESTART_OPTIONS).collect();
    let url = s.globus.url_for("big.bin");
    let dest_arg = dest.display().to_string();
    let run = spawn_ferry(&[&args[..], &[&url, &dest_arg]].concat());
    let (run, marker) = kill_mid_transfer(run, &dest, &mut s.globus, false);
    let out = run.wait(Duration::from_secs(300));
    assert_restarted(&out, &source, &dest, marker, &[s.globus.port()]);
}

enum Victim {
    Source,
    Destination,
}

fn third_party_restart_after_killing(victim: Victim) {
    require_globus_server!();
    let mut p = pair(ServerKind::Globus, ServerKind::Globus);
    let source = p.a.path_of("big.bin");
    write_marked_pattern_file(&source, RESTART_MIB, 53);
    let dest = p.b.path_of("big.bin");
    let args: Vec<&str> = ["copy"].into_iter().chain(RESTART_OPTIONS).collect();
    let (src_url, dst_url) = (p.a.url_for("big.bin"), p.b.url_for("big.bin"));
    let run = spawn_ferry(&[&args[..], &[&src_url, &dst_url]].concat());
    let killed = match victim {
        Victim::Source => &mut p.a,
        Victim::Destination => &mut p.b,
    };
    let (run, marker) = kill_mid_transfer(run, &dest, killed, true);
    let out = run.wait(Duration::from_secs(300));
    assert_restarted(&out, &source, &dest, marker, &[p.a.port(), p.b.port()]);
}

#[test]
fn third_party_restarts_from_markers_after_the_globus_destination_is_killed() {
    third_party_restart_after_killing(Victim::Destination);
}

#[test]
fn third_party_restarts_from_markers_after_the_globus_source_is_killed() {
    third_party_restart_after_killing(Victim::Source);
}

/// One stream, files large enough that the client reads the rest of each on a thread of its
/// own (from 512 KiB blocks, which it asks the ferry server for): two files on one session,
/// the second on the connection the first handed back for caching.
#[test]
fn large_one_stream_gets_on_one_session_reuse_the_data_connection() {
    let sandbox = Sandbox::new();
    let server = ServerUnderTest::start_kind(ServerKind::Ferry, &sandbox.served_dir("root"));
    let local = sandbox.local_dir("local");
    let (a, b) = (server.path_of("a.bin"), server.path_of("b.bin"));
    write_file(&a, &random_bytes(48 * MIB + 17, 81));
    write_file(&b, &random_bytes(40 * MIB + 3, 82));
    let dest = format!("{}/", local.display());
    let args = [
        "copy",
        "--json",
        "-p",
        "1",
        "--concurrency",
        "1",
        &server.url_for("a.bin"),
        &server.url_for("b.bin"),
        &dest,
    ];
    let out = run_ferry(&args);
    out.assert_same_file(&a, &local.join("a.bin"));
    out.assert_same_file(&b, &local.join("b.bin"));
    let dialogue = out.dialogue();
    if !dialogue
        .lines()
        .any(|l| l.contains(" < ") && l.contains("reusing existing data connection"))
    {
        out.fail("expected the second RETR to reuse the data connection (125)");
    }
}

/// `SITE BLOCKSIZE` goes only to servers whose FEAT lists it: a one-stream get asks ferry for
/// 512 KiB blocks, `--block-size` asks for its own size, several streams leave the server's
/// choice, and Globus is asked nothing. Every copy is byte-identical.
#[test]
fn gets_ask_a_ferry_server_for_a_block_size_and_a_globus_server_for_none() {
    let sandbox = Sandbox::new();
    let ferry = ServerUnderTest::start_kind(ServerKind::Ferry, &sandbox.served_dir("ferry"));
    let local = sandbox.local_dir("local");
    let source = ferry.path_of("src.bin");
    write_file(&source, &random_bytes(5 * MIB + 11, 83));
    let cases: [(&[&str], Option<&str>); 3] = [
        (&["-p", "1"], Some("SITE BLOCKSIZE 524288")),
        (
            &["-p", "4", "--block-size", "1048576"],
            Some("SITE BLOCKSIZE 1048576"),
        ),
        (&["-p", "4"], None),
    ];
    for (i, (options, asked)) in cases.into_iter().enumerate() {
        let dest = local.join(format!("copy{i}.bin"));
        let out = copy(
            options,
            &ferry.url_for("src.bin"),
            &dest.display().to_string(),
        );
        out.assert_same_file(&source, &dest);
        let sent: Vec<String> = out
            .commands_to(ferry.port())
            .into_iter()
            .filter(|c| c.starts_with("SITE BLOCKSIZE"))
            .collect();
        if sent != asked.map(String::from).into_iter().collect::<Vec<_>>() {
            out.fail(&format!("{options:?}: expected {asked:?}, sent {sent:?}"));
        }
    }
    if let Some(reason) = ServerKind::Globus.missing() {
        eprintln!("{reason}");
        return;
    }
    let globus = ServerUnderTest::start_kind(ServerKind::Globus, &sandbox.served_dir("globus"));
    let source = globus.path_of("src.bin");
    write_file(&source, &random_bytes(5 * MIB + 13, 84));
    let dest = local.join("from-globus.bin");
    let out = copy(
        &["-p", "1"],
        &globus.url_for("src.bin"),
        &dest.display().to_string(),
    );
    out.assert_same_file(&source, &dest);
    if out
        .commands_to(globus.port())
        .iter()
        .any(|c| c.starts_with("SITE BLOCKSIZE"))
    {
        out.fail("SITE BLOCKSIZE was sent to a Globus server, whose FEAT does not list it");
    }
}

/// The same restart as above with one stream: the client is reading on its own thread when
/// the ferry server dies, and the retry resumes from the stored ranges.
#[test]
fn one_stream_get_restarts_after_the_ferry_server_is_killed_mid_transfer() {
    get_restarts_after_killing_a_ferry_server(&[], &["-p", "1", "--tcp-bs", "4096"], 54, false);
}

/// The restart over UDT, four streams: a killed server's UDT connections just go silent
/// (there is no reset as TCP has), so the control connection's end must fail the attempt at
/// once; the retry sends the ranges already stored as `REST` and the server sends the rest,
/// over UDT again. A flight flag of 2048 packets holds loopback to about 100 MB/s, so the
/// client's restart markers (every second) come before the kill.
#[test]
fn a_udt_get_restarts_from_its_ranges_after_the_ferry_server_is_killed() {
    get_restarts_after_killing_a_ferry_server(
        &["--dc-whitelist", "tcp,udt"],
        &["--transport", "udt:fc=2048", "-p", "4"],
        55,
        true,
    );
}

/// Gets a file from a ferry server started with `server_args`, kills and restarts the server
/// mid-get, and checks the retried copy (`options` go before the URLs). With `must_resume`
/// the retry must resume from stored ranges whether or not a marker was seen.
fn get_restarts_after_killing_a_ferry_server(
    server_args: &[&str],
    options: &[&str],
    seed: u64,
    must_resume: bool,
) {
    let sandbox = Sandbox::new();
    let mut server = ServerUnderTest::start_ferry_with(&sandbox.served_dir("root"), server_args);
    let source = server.path_of("big.bin");
    write_marked_pattern_file(&source, RESTART_MIB, seed);
    let dest = sandbox.local_dir("local").join("big.bin");
    let url = server.url_for("big.bin");
    let dest_arg = dest.display().to_string();
    let args: Vec<&str> = ["copy", "--retries", "5", "--json"]
        .into_iter()
        .chain(options.iter().copied())
        .chain([url.as_str(), dest_arg.as_str()])
        .collect();
    let mut run = spawn_ferry(&args);
    if must_resume {
        // The kill must come after the client stored a range (its markers come every second).
        let deadline = Instant::now() + Duration::from_secs(120);
        while !run.stdout_so_far().contains("\"event\":\"stored\"") {
            if run.has_exited() || Instant::now() > deadline {
                run.wait(Duration::ZERO)
                    .fail("no range was stored before the end (or within 120 s)");
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
    let (run, marker) = kill_mid_transfer(run, &dest, &mut server, false);
    let out = run.wait(Duration::from_secs(300));
    assert_restarted(
        &out,
        &source,
        &dest,
        marker || must_resume,
        &[server.port()],
    );
}

/// A client that vanishes mid-get over UDT (killed: no shutdown, no reply) costs the server
/// that transfer only: its transfer log has the failure with its code (426, the control
/// connection closed), and it serves the next copy at once.
#[test]
fn a_udt_client_killed_mid_get_leaves_the_ferry_server_serving() {
    let sandbox = Sandbox::new();
    let server = ServerUnderTest::start_ferry_with(
        &sandbox.served_dir("root"),
        &["--dc-whitelist", "tcp,udt"],
    );
    let source = server.path_of("big.bin");
    write_marked_pattern_file(&source, RESTART_MIB, 56);
    let local = sandbox.local_dir("local");
    let dest = local.join("big.bin");
    let url = server.url_for("big.bin");
    let dest_arg = dest.display().to_string();
    let mut run = spawn_ferry(&["copy", "--transport", "udt", "-p", "4", &url, &dest_arg]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while fs::metadata(&dest).map(|m| m.len()).unwrap_or(0) < RESTART_TOTAL / 4 {
        if run.has_exited() || Instant::now() > deadline {
            run.wait(Duration::ZERO)
                .fail("the get ended (or stalled) before the client could be killed");
        }
        thread::sleep(Duration::from_millis(10));
    }
    let killed = run.wait(Duration::ZERO);
    assert!(
        killed.status.is_none_or(|s| !s.success()),
        "the client was to be killed mid-get"
    );
    let small = server.path_of("small.bin");
    write_marked_pattern_file(&small, 8, 57);
    let again = local.join("small.bin");
    let out = copy(
        &["--transport", "udt", "-p", "2"],
        &server.url_for("small.bin"),
        &again.display().to_string(),
    );
    out.assert_same_file(&small, &again);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let log = server.log_tail(200);
        let said: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("big.bin") && (l.contains("code=4") || l.contains("code=5")))
            .collect();
        if !said.is_empty() {
            eprintln!("the server said:\n{}", said.join("\n"));
            break;
        }
        if Instant::now() > deadline {
            panic!("the server's log never said the vanished client's get failed:\n{log}");
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// A UDT client that is done ends its session cleanly: it closes its data connections (UDT's
/// shutdown, with a last ACK) and sends QUIT, and every UDT connection of the server ends at
/// once with no error, whichever goodbye comes first. (The case only the client's goodbye
/// saves, a lost last ACK, is the UDT core's simulation test.) The server logs each
/// connection's end at debug level with the error it ended on, if any.
#[test]
fn a_finished_udt_client_ends_the_servers_udt_connections_cleanly() {
    let sandbox = Sandbox::new();
    let server = ServerUnderTest::start_ferry_with(
        &sandbox.served_dir("root"),
        &["--dc-whitelist", "tcp,udt", "--log", "info,ferry_net=debug"],
    );
    let source = server.path_of("cached.bin");
    write_marked_pattern_file(&source, 4, 58);
    let local = sandbox.local_dir("local");
    let dest = local.join("cached.bin");
    let got = copy(
        &["--transport", "udt", "-p", "2"],
        &server.url_for("cached.bin"),
        &dest.display().to_string(),
    );
    got.assert_same_file(&source, &dest);
    let back = server.path_of("back.bin");
    let put = copy(
        &["--transport", "udt", "-p", "2"],
        &dest.display().to_string(),
        &server.url_for("back.bin"),
    );
    put.assert_same_file(&source, &back);
    // Two streams for the get and two for the put, each logged once when it ends (the
    // silence timeout, were there no goodbye, would end them with an error 30 s on).
    let deadline = Instant::now() + Duration::from_secs(90);
    let ended = loop {
        let log = server.log_tail(2_000);
        let ended: Vec<String> = log
            .lines()
            .filter(|l| l.contains("UDT connection closed"))
            .map(str::to_owned)
            .collect();
        if ended.len() >= 4 {
            break ended;
        }
        if Instant::now() > deadline {
            panic!("the server's UDT connections never ended:\n{log}");
        }
        thread::sleep(Duration::from_millis(200));
    };
    for line in &ended {
        assert!(
            line.contains("error=None"),
            "a server UDT connection ended on an error, not the client's goodbye:\n{}",
            ended.join("\n")
        );
    }
}

// 6. Checksums.

#[test]
fn verify_checksum_on_get_reports_the_md5_of_the_data() {
    require_globus_server!();
    let s = setup();
    let bytes = random_bytes(3 * MIB + 5, 61);
    write_file(&s.globus.path_of("sum.bin"), &bytes);
    let dest = s.local.join("sum.bin");
    let out = copy(
        &["--checksum", "MD5"],
        &s.globus.url_for("sum.bin"),
        &dest.display().to_string(),
    );
    out.assert_bytes(&bytes, &dest);
    assert_done(&out, "checksum", md5_hex(&bytes).into());
    if !out
        .commands_to(s.globus.port())
        .iter()
        .any(|c| c.starts_with("CKSM MD5 0 -1 "))
    {
        out.fail("expected CKSM MD5 0 -1 <path> to Globus");
    }
}

#[test]
fn verify_checksum_on_put_reports_the_md5_of_the_data() {
    require_globus_server!();
    let s = setup();
    let bytes = random_bytes(3 * MIB + 5, 62);
    let source = s.local.join("sum.bin");
    write_file(&source, &bytes);
    let out = copy(
        &["--checksum", "MD5"],
        &source.display().to_string(),
        &s.globus.url_for("sum.bin"),
    );
    out.assert_bytes(&bytes, &s.globus.path_of("sum.bin"));
    assert_done(&out, "checksum", md5_hex(&bytes).into());
}

#[test]
fn verify_checksum_adler32_third_party_asks_both_globus_servers() {
    require_globus_server!();
    let p = pair(ServerKind::Globus, ServerKind::Globus);
    let bytes = random_bytes(3 * MIB + 5, 63);
    write_file(&p.a.path_of("sum.bin"), &bytes);
    let out = copy(
        &["--verify-checksum", "--checksum-alg", "ADLER32"],
        &p.a.url_for("sum.bin"),
        &p.b.url_for("sum.bin"),
    );
    out.assert_bytes(&bytes, &p.b.path_of("sum.bin"));
    assert_done(&out, "checksum", format!("{:08x}", adler32(&bytes)).into());
    for port in [p.a.port(), p.b.port()] {
        if !out
            .commands_to(port)
            .iter()
            .any(|c| c.starts_with("CKSM ADLER32 0 -1 "))
        {
            out.fail(&format!(
                "expected CKSM ADLER32 to the server on port {port}"
            ));
        }
    }
}

#[test]
fn verify_checksum_fails_with_exit_6_when_the_destination_differs_from_the_source() {
    require_globus_server!();
    let s = setup();
    // A source whose every read differs: what Globus stored cannot match what the verification
    // reads from the source afterwards, so the comparison must catch a real mismatch.
    let out = copy(
        &["--checksum", "MD5", "--length", "4M"],
        "/dev/urandom",
        &s.globus.url_for("random.bin"),
    );
    out.assert_exit(6);
    let stored = s.globus.path_of("random.bin");
    let len = fs::metadata(&stored).map(|m| m.len()).unwrap_or(0);
    if len != 4 * MIB as u64 {
        out.fail(&format!("Globus stored {len} bytes, expected 4 MiB"));
    }
    let failed = out.events_named("failed");
    let error = failed
        .first()
        .and_then(|e| e["error"].as_str())
        .unwrap_or_else(|| out.fail("expected a `failed` event"));
    // The destination's checksum in the message is that of the bytes Globus really holds.
    let want = format!("has {}", md5_of_file(&stored));
    if !error.contains("checksum mismatch") || !error.contains(&want) {
        out.fail(&format!(
            "the failure should name the mismatch and the stored file's MD5 ({want}): {error}"
        ));
    }
}

/// The CKSM commands the client sent to the server on `port`.
fn cksms_to(out: &FerryOutput, port: u16) -> Vec<String> {
    out.commands_to(port)
        .into_iter()
        .filter(|c| c.starts_with("CKSM "))
        .collect()
}

/// By default a copy is verified with ADLER32: the server is asked once, and the client's own
/// end is the value it took while the bytes moved (it is not read again).
fn verified_by_default(kind: ServerKind, seed: u64) {
    let sandbox = Sandbox::new();
    let server = ServerUnderTest::start_kind(kind, &sandbox.served_dir("root"));
    let local = sandbox.local_dir("local");
    let bytes = random_bytes(5 * MIB + 3, seed);
    write_file(&server.path_of("in.bin"), &bytes);
    let want = serde_json::Value::from(format!("{:08x}", adler32(&bytes)));
    let dest = local.join("in.bin");
    let out = copy(
        &["-p", "4"],
        &server.url_for("in.bin"),
        &dest.display().to_string(),
    );
    out.assert_bytes(&bytes, &dest);
    assert_done(&out, "checksum", want.clone());
    let asked = cksms_to(&out, server.port());
    if asked.len() != 1 || !asked[0].starts_with("CKSM ADLER32 0 -1 ") {
        out.fail(&format!(
            "expected one CKSM ADLER32 0 -1 to the server: {asked:?}"
        ));
    }
    let out = copy(
        &["-p", "4"],
        &dest.display().to_string(),
        &server.url_for("back.bin"),
    );
    out.assert_bytes(&bytes, &server.path_of("back.bin"));
    assert_done(&out, "checksum", want);
    if cksms_to(&out, server.port()).len() != 1 {
        out.fail("expected one CKSM to the server");
    }
    // --no-verify asks nothing.
    let out = copy(
        &["--no-verify"],
        &server.url_for("in.bin"),
        &local.join("again.bin").display().to_string(),
    );
    assert_done(&out, "checksum", serde_json::Value::Null);
    if !cksms_to(&out, server.port()).is_empty() {
        out.fail("--no-verify sent CKSM");
    }
}

#[test]
fn by_default_gets_and_puts_with_globus_are_verified_with_adler32() {
    require_globus_server!();
    verified_by_default(ServerKind::Globus, 64);
}

#[test]
fn by_default_gets_and_puts_with_ferry_are_verified_with_adler32() {
    verified_by_default(ServerKind::Ferry, 65);
}

#[test]
fn by_default_a_third_party_copy_between_ferry_and_globus_asks_both_servers() {
    require_globus_server!();
    for (a, b, seed) in [
        (ServerKind::Ferry, ServerKind::Globus, 66),
        (ServerKind::Globus, ServerKind::Ferry, 67),
    ] {
        let p = pair(a, b);
        let bytes = random_bytes(3 * MIB + 1, seed);
        write_file(&p.a.path_of("tp.bin"), &bytes);
        let out = copy(&[], &p.a.url_for("tp.bin"), &p.b.url_for("tp.bin"));
        out.assert_bytes(&bytes, &p.b.path_of("tp.bin"));
        assert_done(&out, "checksum", format!("{:08x}", adler32(&bytes)).into());
        for port in [p.a.port(), p.b.port()] {
            if cksms_to(&out, port).len() != 1 {
                out.fail(&format!("expected one CKSM to the server on port {port}"));
            }
        }
    }
}

#[test]
fn a_checksum_value_the_source_does_not_have_fails_and_removes_the_destination() {
    let sandbox = Sandbox::new();
    let server = ServerUnderTest::start_kind(ServerKind::Ferry, &sandbox.served_dir("root"));
    let bytes = random_bytes(2 * MIB, 68);
    write_file(&server.path_of("in.bin"), &bytes);
    let dest = sandbox.local_dir("local").join("in.bin");
    let right = format!("{:08x}", adler32(&bytes));
    // FTS3 users give ADLER32 without its leading zeros and in either case.
    let given = right.trim_start_matches('0').to_ascii_uppercase();
    let out = copy(
        &["--checksum-value", &format!("adler32:{given}")],
        &server.url_for("in.bin"),
        &dest.display().to_string(),
    );
    out.assert_bytes(&bytes, &dest);
    assert_done(&out, "checksum", right.clone().into());

    let wrong = format!("{:08x}", adler32(&bytes) ^ 1);
    let out = copy(
        &["--checksum-value", &format!("ADLER32:{wrong}")],
        &server.url_for("in.bin"),
        &dest.display().to_string(),
    );
    out.assert_exit(6);
    let error = out
        .events_named("failed")
        .first()
        .and_then(|e| e["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| out.fail("expected a `failed` event"));
    if !error.contains(&right) || !error.contains(&wrong) || !error.contains("removed") {
        out.fail(&format!(
            "the failure should name {right}, {wrong} and the removal: {error}"
        ));
    }
    if dest.exists() {
        out.fail("the destination is still there");
    }
}

/// Overwrites bytes in the middle of a file, keeping its size.
fn corrupt(path: &Path, at: u64) {
    let mut file = OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    file.seek(SeekFrom::Start(at))
        .and_then(|_| file.write_all(b"CORRUPTED"))
        .unwrap_or_else(|e| panic!("corrupting {}: {e}", path.display()));
}

#[test]
fn sync_checksum_recopies_a_corrupted_globus_copy_that_sync_size_misses() {
    require_globus_server!();
    let s = setup();
    let bytes = random_bytes(8 * MIB + 3, 64);
    let source = s.local.join("data.bin");
    write_file(&source, &bytes);
    let (src, url) = (source.display().to_string(), s.globus.url_for("data.bin"));
    let stored = s.globus.path_of("data.bin");
    copy(&[], &src, &url).assert_bytes(&bytes, &stored);
    corrupt(&stored, 5 * MIB as u64);

    // The server's checksum shows the corruption the local MD5 of the source does not have.
    let cksum = run_ferry(&["cksum", "--json", &url]);
    cksum.assert_success();
    let reported = cksum.json()["checksum"].as_str().unwrap_or("").to_owned();
    if reported != md5_of_file(&stored) || reported == md5_hex(&bytes) {
        cksum.fail(&format!(
            "ferry cksum reported {reported}; the corrupted file's MD5 is {}, the source's {}",
            md5_of_file(&stored),
            md5_hex(&bytes)
        ));
    }

    let by_size = copy(&["--sync=size"], &src, &url);
    by_size.assert_success();
    assert_done(&by_size, "skipped", true.into());
    if md5_of_file(&stored) == md5_hex(&bytes) {
        by_size.fail("--sync size should have left the same-size corrupted copy alone");
    }

    let by_sum = copy(&["--sync=checksum"], &src, &url);
    by_sum.assert_bytes(&bytes, &stored);
    assert_done(&by_sum, "skipped", false.into());

    let again = copy(&["--sync=checksum"], &src, &url);
    again.assert_bytes(&bytes, &stored);
    assert_done(&again, "skipped", true.into());
}

#[test]
fn sync_checksum_recopies_a_corrupted_local_copy_of_a_globus_file() {
    require_globus_server!();
    let s = setup();
    let bytes = random_bytes(8 * MIB + 3, 65);
    write_file(&s.globus.path_of("data.bin"), &bytes);
    let dest = s.local.join("data.bin");
    let (url, dst) = (s.globus.url_for("data.bin"), dest.display().to_string());
    copy(&[], &url, &dst).assert_bytes(&bytes, &dest);
    corrupt(&dest, 1234);
    let out = copy(&["--sync=checksum", "--checksum-alg", "MD5"], &url, &dst);
    out.assert_bytes(&bytes, &dest);
    assert_done(&out, "skipped", false.into());
    assert_done(&out, "checksum", md5_hex(&bytes).into());
}

#[test]
fn sync_given_alone_before_the_paths_skips_a_file_of_the_same_size() {
    require_globus_server!();
    let s = setup();
    let bytes = random_bytes(MIB, 66);
    let source = s.local.join("data.bin");
    write_file(&source, &bytes);
    let (src, url) = (source.display().to_string(), s.globus.url_for("data.bin"));
    copy(&[], &src, &url).assert_bytes(&bytes, &s.globus.path_of("data.bin"));
    let out = copy(&["--sync"], &src, &url);
    out.assert_success();
    assert_done(&out, "skipped", true.into());
}

// 7. Exit codes.

#[test]
fn a_missing_remote_file_exits_4() {
    require_globus_server!();
    let s = setup();
    let dest = s.local.join("never.bin");
    let out = copy(
        &[],
        &s.globus.url_for("no-such-file.bin"),
        &dest.display().to_string(),
    );
    out.assert_exit(4);
    if dest.exists() {
        out.fail("a failed get left a local file behind");
    }
    let dir_dest = format!("{}/", s.local.join("never").display());
    run_ferry(&[
        "copy",
        "-r",
        &s.globus.dir_url_for("no-such-dir"),
        &dir_dest,
    ])
    .assert_exit(4);
}

#[test]
fn a_missing_third_party_source_exits_4() {
    require_globus_server!();
    let p = pair(ServerKind::Globus, ServerKind::Globus);
    copy(&[], &p.a.url_for("no-such-file.bin"), &p.b.url_for("x.bin")).assert_exit(4);
    if p.b.path_of("x.bin").exists() {
        panic!("a failed third-party copy created the destination");
    }
}

#[test]
fn a_refused_connection_exits_5() {
    require_globus_server!();
    let s = setup();
    let source = s.local.join("one.bin");
    write_file(&source, &random_bytes(1000, 71));
    // Nothing listens on a port that was free a moment ago.
    let url = format!("ftp://127.0.0.1:{}/one.bin", free_port());
    copy(&[], &url, &s.local.join("x.bin").display().to_string()).assert_exit(5);
    let put = copy(&["--retries", "1"], &source.display().to_string(), &url);
    put.assert_exit(5);
    if put.events_named("retry").len() != 1 {
        put.fail("expected one retry of the refused connection before giving up");
    }
}

#[test]
fn a_bad_password_against_a_ferry_password_file_exits_3() {
    require_globus_server!();
    let sandbox = Sandbox::new();
    let passwords = sandbox.path().join("passwd");
    let password_file = passwords.display().to_string();
    run_ferry_with_input(
        &["passwd", &password_file, "alice", "--stdin"],
        b"s3cret pass\n",
    )
    .assert_success();
    let server =
        ServerUnderTest::start_ferry_with_password_file(&sandbox.served_dir("root"), &passwords);
    let source = sandbox.local_dir("local").join("one.bin");
    let bytes = random_bytes(100_000, 72);
    write_file(&source, &bytes);
    let src = source.display().to_string();
    let url = |login: &str| format!("ftp://{login}127.0.0.1:{}/one.bin", server.port());
    copy(&[], &src, &url("alice:wrong@")).assert_exit(3);
    copy(&[], &src, &url("")).assert_exit(3);
    run_ferry(&["ls", &url("alice:wrong@")]).assert_exit(3);
    if server.path_of("one.bin").exists() {
        panic!("a refused login stored a file");
    }
    copy(&[], &src, &url("alice:s3cret%20pass@")).assert_bytes(&bytes, &server.path_of("one.bin"));
}

// 8. Remote file management against Globus.

#[test]
fn ls_json_lists_each_entry_with_its_kind_and_size() {
    require_globus_server!();
    let s = setup();
    write_tree(&s.globus.path_of("tree"));
    let out = run_ferry(&["ls", "--json", &s.globus.dir_url_for("tree")]);
    out.assert_success();
    let listed: Vec<(String, String, Option<u64>)> = out
        .json()
        .as_array()
        .unwrap_or_else(|| out.fail("expected a JSON array"))
        .iter()
        .map(|e| {
            let size = (e["kind"] == "file").then(|| e["size"].as_u64()).flatten();
            (
                e["name"].as_str().unwrap_or("").to_owned(),
                e["kind"].as_str().unwrap_or("").to_owned(),
                size,
            )
        })
        .collect();
    let expected: Vec<(String, String, Option<u64>)> = [
        ("dir with spaces", "dir", None),
        ("empty.bin", "file", Some(0)),
        ("name with spaces.bin", "file", Some(3000)),
        ("sub", "dir", None),
        ("top.bin", "file", Some(100_000)),
    ]
    .iter()
    .map(|(n, k, s)| ((*n).to_owned(), (*k).to_owned(), *s))
    .collect();
    if listed != expected {
        out.fail(&format!("listed {listed:?}, expected {expected:?}"));
    }
    let one = run_ferry(&["ls", "--json", &s.globus.url_for("tree/top.bin")]);
    one.assert_success();
    let entries = one.json();
    if entries.as_array().map(Vec::len) != Some(1) || entries[0]["size"] != 100_000 {
        one.fail("ls of one file should list just that file with its size");
    }
}

#[test]
fn stat_json_shows_the_facts_of_a_file_and_a_directory() {
    require_globus_server!();
    let s = setup();
    write_tree(&s.globus.path_of("tree"));
    let file = run_ferry(&["stat", "--json", &s.globus.url_for("tree/sub/nested.bin")]);
    file.assert_success();
    let facts = file.json();
    if facts["kind"] != "file"
        || facts["size"] != 300_000
        || !facts["name"].as_str().unwrap_or("").ends_with("nested.bin")
        || facts["modify"].as_str().map(str::len) != Some(14)
    {
        file.fail(&format!("unexpected facts {facts}"));
    }
    let dir = run_ferry(&["stat", "--json", &s.globus.url_for("tree/dir with spaces")]);
    dir.assert_success();
    if dir.json()["kind"] != "dir" {
        dir.fail("expected a directory");
    }
    run_ferry(&["stat", "--json", &s.globus.url_for("tree/nothing")]).assert_exit(4);
}

#[test]
fn cksum_json_matches_local_md5_and_adler32_whole_and_for_a_range() {
    require_globus_server!();
    let s = setup();
    let bytes = random_bytes(2 * MIB + 11, 81);
    write_file(&s.globus.path_of("sum.bin"), &bytes);
    let url = s.globus.url_for("sum.bin");
    let cases = [
        (vec!["cksum", "--json", &url], md5_hex(&bytes), "MD5"),
        (
            vec!["cksum", "--json", "-a", "adler32", &url],
            format!("{:08x}", adler32(&bytes)),
            "ADLER32",
        ),
        (
            vec![
                "cksum", "--json", "--offset", "1000", "--length", "70000", &url,
            ],
            md5_hex(&bytes[1000..71_000]),
            "MD5",
        ),
    ];
    for (args, want, algorithm) in cases {
        let out = run_ferry(&args);
        out.assert_success();
        let json = out.json();
        if json["checksum"] != want.as_str() || json["algorithm"] != algorithm {
            out.fail(&format!("expected {algorithm} {want}, got {json}"));
        }
    }
}

#[test]
fn mkdir_mv_and_rm_change_the_globus_tree() {
    require_globus_server!();
    let s = setup();
    write_tree(&s.globus.path_of("tree"));
    let g = &s.globus;
    run_ferry(&["mkdir", &g.url_for("made")]).assert_success();
    run_ferry(&["mkdir", "-p", &g.url_for("deep/er/est")]).assert_success();
    // An existing directory is fine with -p, an error without it.
    run_ferry(&["mkdir", "-p", &g.url_for("deep/er")]).assert_success();
    let again = run_ferry(&["mkdir", &g.url_for("made")]);
    if again.code() == Some(0) {
        again.fail("mkdir of an existing directory should fail");
    }
    run_ferry(&["mkdir", &g.url_for("no/parent")]).assert_exit(4);
    run_ferry(&["mv", &g.url_for("tree/sub"), &g.url_for("deep/moved sub")]).assert_success();
    run_ferry(&["rm", &g.url_for("tree/top.bin")]).assert_success();
    run_ferry(&["rm", "-r", &g.url_for("tree/dir with spaces")]).assert_success();
    assert!(g.path_of("made").is_dir());
    assert!(g.path_of("deep/er/est").is_dir());
    assert!(!g.path_of("no").exists());
    assert!(!g.path_of("tree/sub").exists());
    assert!(g.path_of("deep/moved sub/deeper/deepest.bin").is_file());
    assert!(!g.path_of("tree/top.bin").exists());
    assert!(!g.path_of("tree/dir with spaces").exists());
    assert!(g.path_of("tree/empty.bin").is_file());
    let listed = run_ferry(&["ls", "--json", &g.dir_url_for("tree")]);
    listed.assert_success();
    let names: Vec<String> = listed
        .json()
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if names != ["empty.bin", "name with spaces.bin"] {
        listed.fail(&format!("left {names:?}"));
    }
}

#[test]
fn rm_without_r_refuses_a_non_empty_directory_and_leaves_it() {
    require_globus_server!();
    let s = setup();
    write_tree(&s.globus.path_of("tree"));
    let out = run_ferry(&["rm", &s.globus.url_for("tree/sub")]);
    if out.code() == Some(0) {
        out.fail("rm of a non-empty directory without -r should fail");
    }
    assert!(s.globus.path_of("tree/sub/deeper/deepest.bin").is_file());
}

#[test]
fn rm_without_r_of_a_non_empty_directory_exits_1() {
    require_globus_server!();
    let s = setup();
    write_tree(&s.globus.path_of("tree"));
    run_ferry(&["rm", &s.globus.url_for("tree/sub")]).assert_exit(1);
}

// 9. `ferry url-copy` with globus-url-copy's spelling.

fn url_copy(args: &[&str]) -> FerryOutput {
    let args: Vec<&str> = ["url-copy"]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    run_ferry(&args)
}

#[test]
fn url_copy_parallel_verbose_get_and_put_move_every_byte() {
    require_globus_server!();
    let s = setup();
    let source = s.globus.path_of("source.bin");
    write_file(&source, &random_bytes(ROUND_TRIP_LEN, 91));
    let got = s.local.join("got.bin");
    let out = url_copy(&[
        "-p",
        "4",
        "-vb",
        &s.globus.url_for("source.bin"),
        &file_url(&got),
    ]);
    out.assert_same_file(&source, &got);
    if !out.stderr.contains("4 streams") {
        out.fail("-vb should print the file's figures with its 4 streams");
    }
    let out = url_copy(&[
        "-p",
        "4",
        "-vb",
        &file_url(&got),
        &s.globus.url_for("put.bin"),
    ]);
    out.assert_same_file(&source, &s.globus.path_of("put.bin"));
    if !out.stderr.contains("4 streams") {
        out.fail("-vb should print the file's figures with its 4 streams");
    }
}

#[test]
fn url_copy_recursive_create_dest_get_and_put_copy_the_tree() {
    require_globus_server!();
    let s = setup();
    let tree = s.globus.path_of("tree");
    write_tree(&tree);
    let got = s.local.join("missing/got");
    url_copy(&[
        "-r",
        "-cd",
        &s.globus.dir_url_for("tree"),
        &file_dir_url(&got),
    ])
    .assert_same_tree(&tree, &got);
    url_copy(&[
        "-r",
        "-cd",
        &file_dir_url(&got),
        &s.globus.dir_url_for("missing/put"),
    ])
    .assert_same_tree(&tree, &s.globus.path_of("missing/put"));
}

/// `ferry url-copy -restart` of 768 MiB while Globus is killed and restarted; `get` or put.
fn url_copy_restart(get: bool) {
    require_globus_server!();
    let mut s = setup();
    let (remote, local) = (s.globus.path_of("big.bin"), s.local.join("big.bin"));
    let (source, dest) = if get {
        (&remote, &local)
    } else {
        (&local, &remote)
    };
    write_marked_pattern_file(source, RESTART_MIB, 92);
    let (url, local_url) = (s.globus.url_for("big.bin"), file_url(&local));
    let (src, dst) = if get {
        (&url, &local_url)
    } else {
        (&local_url, &url)
    };
    let run = spawn_ferry(&[
        "url-copy",
        "-dbg",
        "-p",
        "4",
        "-tcp-bs",
        "4096",
        "-restart",
        "-rst-retries",
        "5",
        "-rst-interval",
        "1",
        src,
        dst,
    ]);
    let (run, marker) = kill_mid_transfer(run, dest, &mut s.globus, !get);
    let out = run.wait(Duration::from_secs(300));
    out.assert_same_file(source, dest);
    if !out.stderr.contains("retrying (attempt 2") {
        out.fail("expected a retry after the server was killed");
    }
    if marker && !out.stderr.contains("> REST 0-") {
        out.fail("a 111 range marker arrived before the kill, so the retry should send REST");
    }
}

#[test]
fn url_copy_restart_completes_a_put_after_globus_is_killed() {
    url_copy_restart(false);
}

#[test]
fn url_copy_restart_completes_a_get_after_globus_is_killed() {
    url_copy_restart(true);
}

// 10. gcp: scp-style names translated by site rules.

/// A rules file sending `lab*` hosts to the ferry server on `port`, `/data/…` to its root.
fn gcp_rules(dir: &Path, port: u16) -> PathBuf {
    let rules = dir.join("gcp.toml");
    write_file(
        &rules,
        format!(
            "[[site]]\nhost = \"lab*\"\nserver = \"ftp://anonymous@127.0.0.1:{port}\"\nstrip = \"/data\"\n\
             prefix = \"/\"\nhome = \"/homes/{{user}}\"\n"
        )
        .as_bytes(),
    );
    rules
}

#[test]
fn ferry_cp_translates_host_path_names_by_the_site_rules_and_explains() {
    let sandbox = Sandbox::new();
    let server = ServerUnderTest::start_kind(ServerKind::Ferry, &sandbox.served_dir("root"));
    let local = sandbox.local_dir("local");
    let rules = gcp_rules(&local, server.port());
    let bytes = random_bytes(3 * MIB + 7, 90);
    write_file(&server.path_of("in.bin"), &bytes);
    write_file(
        &server.path_of("homes/alice/notes.txt"),
        b"relative to the rule's home\n",
    );
    let dest = local.join("got.bin");
    let rules_arg = rules.display().to_string();
    let out = run_ferry(&[
        "cp",
        "--json",
        "--sites",
        &rules_arg,
        "--explain",
        "labhost:/data/in.bin",
        &dest.display().to_string(),
    ]);
    out.assert_bytes(&bytes, &dest);
    assert_done(&out, "checksum", format!("{:08x}", adler32(&bytes)).into());
    let url = format!("ftp://anonymous@127.0.0.1:{}/in.bin", server.port());
    if !out.stderr.contains(&format!(
        "gcp: labhost:/data/in.bin -> {url} ({rules_arg} rule 1: host = \"lab*\")"
    )) {
        out.fail("--explain should name the rule and the URL");
    }
    // user@host:relative goes under the rule's home; a copy back up lands where the rule says.
    let notes = local.join("notes.txt");
    let out = run_ferry(&[
        "cp",
        "-q",
        "--sites",
        &rules_arg,
        "alice@lab2:notes.txt",
        &notes.display().to_string(),
    ]);
    out.assert_bytes(b"relative to the rule's home\n", &notes);
    let out = run_ferry(&[
        "cp",
        "-q",
        "-n",
        "4",
        "--sites",
        &rules_arg,
        &dest.display().to_string(),
        "lab1:/data/back.bin",
    ]);
    out.assert_bytes(&bytes, &server.path_of("back.bin"));
    // --no-translate ignores the rules; --dry-run copies nothing.
    let out = run_ferry(&[
        "cp",
        "--sites",
        &rules_arg,
        "--no-translate",
        "--explain",
        "--dry-run",
        "labhost:/data/x",
        "/tmp/nowhere",
    ]);
    out.assert_exit(0);
    if !out
        .stderr
        .contains("labhost:/data/x -> gsiftp://labhost/data/x (--no-translate")
    {
        out.fail("--no-translate should use gsiftp://HOST/PATH");
    }
    // -p carries the modification time and mode both ways (MFMT and SITE CHMOD up).
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let stamp = |p: &Path, mtime: i64, mode: u32| {
        let f = fs::File::options().write(true).open(p).expect("open");
        f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(mtime as u64))
            .expect("mtime");
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).expect("chmod");
    };
    let kept = |p: &Path| {
        let m = fs::metadata(p).expect("stat");
        (m.mtime(), m.mode() & 0o7777)
    };
    // Readable by all: a root server serves anonymous users as ftp or nobody.
    stamp(&server.path_of("in.bin"), 1_577_934_245, 0o644);
    let pulled = local.join("pulled.bin");
    let out = run_ferry(&[
        "cp",
        "-p",
        "-q",
        "--sites",
        &rules_arg,
        "labhost:/data/in.bin",
        &pulled.display().to_string(),
    ]);
    out.assert_bytes(&bytes, &pulled);
    assert_eq!(kept(&pulled), (1_577_934_245, 0o644), "get with -p");
    stamp(&pulled, 1_600_000_000, 0o600);
    let out = run_ferry(&[
        "cp",
        "-p",
        "-q",
        "--sites",
        &rules_arg,
        &pulled.display().to_string(),
        "labhost:/data/pushed.bin",
    ]);
    out.assert_bytes(&bytes, &server.path_of("pushed.bin"));
    assert_eq!(
        kept(&server.path_of("pushed.bin")),
        (1_600_000_000, 0o600),
        "put with -p"
    );
    // A relative path without a rule's home is explained.
    let out = run_ferry(&["cp", "--sites", &rules_arg, "elsewhere:x", "/tmp/x"]);
    out.assert_exit(2);
    if !out.stderr.contains("absolute") {
        out.fail("a relative path with no rule should say how to write it");
    }
}

#[test]
fn the_binary_called_gcp_takes_ferry_cp_arguments() {
    let sandbox = Sandbox::new();
    let server = ServerUnderTest::start_kind(ServerKind::Ferry, &sandbox.served_dir("root"));
    let local = sandbox.local_dir("local");
    let rules = gcp_rules(&local, server.port());
    let bytes = random_bytes(100_000, 91);
    write_file(&server.path_of("in.bin"), &bytes);
    let gcp = local.join("gcp");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ferry"), &gcp).expect("link gcp");
    let dest = local.join("got.bin");
    let out = std::process::Command::new(&gcp)
        .env("XDG_CACHE_HOME", local.join("cache"))
        .args(["-q", "--sites"])
        .arg(&rules)
        .arg("labhost:/data/in.bin")
        .arg(&dest)
        .output()
        .expect("run gcp");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(fs::read(&dest).expect("copied") == bytes);
    let help = std::process::Command::new(&gcp)
        .arg("--help")
        .output()
        .expect("gcp --help");
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("Usage: gcp") && text.contains("--no-translate"),
        "{text}"
    );
}
