//! HTTP third-party pulls in several streams (`X-Number-Of-Streams`, or ferry's choice) from
//! ferry's door and from XRootD, and the sources that must fail a copy with a reason and leave
//! nothing (one that stalls, one that redirects to itself for ever), one that ignores ranges
//! (read in one stream), and a COPY whose source is its own target.

use crate::common::https::tpc_outcome as outcome;
use crate::common::https::{require_tool, HttpsSite, Login, SiteOptions, PASSWORD, PASSWORD_USER};
use crate::common::pysource::PySource;
use crate::common::random_bytes;
use crate::common::xrootd::Xrootd;

const ME: Login<'static> = Login::Password(PASSWORD_USER, PASSWORD);

#[test]
fn a_pull_in_several_streams_arrives_whole_from_ferry_and_from_xrootd() {
    let Some(curl) = require_tool("curl", "curl") else {
        return;
    };
    let site = HttpsSite::start();
    let data = random_bytes((24 << 20) + 5, 71);
    site.put_local("data/src.bin", &data);
    site.mkdir_local("out");
    let auth = format!("TransferHeaderAuthorization: {}", site.basic_auth());
    let source = format!("Source: {}", site.url("/data/src.bin"));
    let pull = |path: &str, extra: &[&str]| {
        let mut args = vec!["-X", "COPY", "-H", &source, "-H", &auth];
        args.extend(extra);
        site.curl(&curl, ME, &args, path)
    };

    let gets_before = |site: &HttpsSite| {
        site.transfer_log()
            .iter()
            .filter(|l| l["command"] == "GET" && l["path"] == "/data/src.bin")
            .count()
    };
    for (path, streams) in [("/out/four.bin", "4"), ("/out/chosen.bin", "0")] {
        let before = gets_before(&site);
        let r = pull(path, &["-H", &format!("X-Number-Of-Streams: {streams}")]);
        assert_eq!(r.status, 202, "{}", r.text());
        assert_eq!(
            outcome(&r.text()),
            ("success: Created".to_owned(), Some(data.len() as u64)),
            "{}",
            r.text()
        );
        assert_eq!(std::fs::read(site.path(path)).unwrap(), data, "{path}");
        // The passive side (the same door) served one GET per stream.
        assert_eq!(gets_before(&site) - before, 4, "{path}");
    }
    assert!(
        site.server_log()
            .contains("third-party copy pulls in 4 streams"),
        "{}",
        site.server_log()
    );
    // One stream where asked: the first answer carries the whole file.
    let before = gets_before(&site);
    let r = pull("/out/one.bin", &["-H", "X-Number-Of-Streams: 1"]);
    assert_eq!(outcome(&r.text()).0, "success: Created", "{}", r.text());
    assert_eq!(std::fs::read(site.path("out/one.bin")).unwrap(), data);
    assert_eq!(gets_before(&site) - before, 1);

    let Some(xrootd) = Xrootd::start(&site) else {
        return;
    };
    std::fs::write(xrootd.root.join("src.bin"), &data).unwrap();
    let from = format!("Source: {}", xrootd.url("/src.bin"));
    let r = site.curl(
        &curl,
        ME,
        &["-X", "COPY", "-H", &from, "-H", "X-Number-Of-Streams: 3"],
        "/out/from-xrootd.bin",
    );
    assert_eq!(
        outcome(&r.text()),
        ("success: Created".to_owned(), Some(data.len() as u64)),
        "{}",
        r.text()
    );
    assert_eq!(
        std::fs::read(site.path("out/from-xrootd.bin")).unwrap(),
        data
    );
    assert!(
        site.server_log()
            .contains("third-party copy pulls in 3 streams"),
        "XRootD takes range requests: {}",
        site.server_log()
    );
    assert!(site.temp_files().is_empty(), "{:?}", site.temp_files());
}

#[test]
fn stalled_and_looping_sources_fail_with_a_reason_and_range_ignoring_ones_go_in_one_stream() {
    let Some(curl) = require_tool("curl", "curl") else {
        return;
    };
    let site = HttpsSite::start_with(SiteOptions {
        config: "[https]\ntpc-stall-timeout = 1\n".into(),
        ..SiteOptions::default()
    });
    site.mkdir_local("out");
    let pull = |source: &str, path: &str, extra: &[&str]| {
        let header = format!("Source: {source}");
        let mut args = vec!["-X", "COPY", "-H", header.as_str()];
        args.extend(extra);
        site.curl(&curl, ME, &args, path)
    };

    // Sends a little, then nothing.
    let stalls = PySource::start(
        site.dir(),
        r#"
def handle(c, head):
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n" + b"x" * 1000)
    time.sleep(60)
"#,
    );
    let started = std::time::Instant::now();
    let r = pull(&stalls.url(), "/out/stalled.bin", &[]);
    assert_eq!(r.status, 202, "{}", r.text());
    let (last, _) = outcome(&r.text());
    assert!(
        last.starts_with("failure: ") && last.contains("no bytes have moved"),
        "{}",
        r.text()
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(40),
        "the stall was not cut short: {:?}",
        started.elapsed()
    );
    assert!(!site.path("out/stalled.bin").exists());

    // Redirects to itself for ever.
    let loops = PySource::start(
        site.dir(),
        r#"
def handle(c, head):
    c.sendall(("HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:%d/f\r\nContent-Length: 0\r\n\r\n" % PORT).encode())
"#,
    );
    let r = pull(&loops.url(), "/out/looped.bin", &[]);
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(r.text().contains("redirects"), "{}", r.text());
    assert!(!site.path("out/looped.bin").exists());

    // Says it takes ranges, then answers every range request with the whole file: the first
    // answer carries it all.
    let ignores = PySource::start(
        site.dir(),
        r#"
body = bytes(range(256)) * 40960
def handle(c, head):
    c.sendall(b"HTTP/1.1 200 OK\r\nAccept-Ranges: bytes\r\nContent-Length: %d\r\n\r\n" % len(body))
    c.sendall(body)
"#,
    );
    let r = pull(
        &ignores.url(),
        "/out/ignored.bin",
        &["-H", "X-Number-Of-Streams: 2"],
    );
    assert_eq!(outcome(&r.text()).0, "success: Created", "{}", r.text());
    let want: Vec<u8> = (0..40960).flat_map(|_| 0..=255u8).collect();
    assert_eq!(std::fs::read(site.path("out/ignored.bin")).unwrap(), want);
    assert!(
        site.server_log()
            .contains("the source takes no range requests"),
        "{}",
        site.server_log()
    );

    // A source that is the target itself: the file is read whole before it is replaced.
    let data = random_bytes(3 << 20, 72);
    site.put_local("out/self.bin", &data);
    let auth = format!("TransferHeaderAuthorization: {}", site.basic_auth());
    let r = pull(&site.url("/out/self.bin"), "/out/self.bin", &["-H", &auth]);
    assert_eq!(outcome(&r.text()).0, "success: Created", "{}", r.text());
    assert_eq!(std::fs::read(site.path("out/self.bin")).unwrap(), data);
    assert!(site.temp_files().is_empty(), "{:?}", site.temp_files());
}

/// A source of 20 MiB with an entity tag (read from `etag` in its directory) that takes range
/// requests, sends only the first 3 MiB of a whole-file GET while `break` is there, and appends
/// each answer's byte count to `served`.
fn breaking_source(dir: &std::path::Path) -> PySource {
    std::fs::write(dir.join("etag"), "\"v1\"").unwrap();
    PySource::start(
        dir,
        r#"
import os
body = bytes(range(256)) * 81920
D = os.path.dirname(os.path.abspath(__file__))
def handle(c, head):
    rng = None
    for line in head.decode().split("\r\n")[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == "range":
            rng = v.strip()
    etag = open(os.path.join(D, "etag")).read().strip().encode()
    if rng:
        a, b = (int(x) for x in rng.split("=")[1].split("-"))
        sent = body[a:b + 1]
        c.sendall(b"HTTP/1.1 206 Partial Content\r\nETag: " + etag + b"\r\nContent-Range: bytes %d-%d/%d\r\nContent-Length: %d\r\n\r\n" % (a, b, len(body), len(sent)))
    else:
        sent = body[:3 << 20] if os.path.exists(os.path.join(D, "break")) else body
        c.sendall(b"HTTP/1.1 200 OK\r\nETag: " + etag + b"\r\nAccept-Ranges: bytes\r\nContent-Length: %d\r\n\r\n" % len(body))
    c.sendall(sent)
    with open(os.path.join(D, "served"), "a") as f:
        f.write("%d\n" % len(sent))
"#,
    )
}

fn served(dir: &std::path::Path) -> u64 {
    let text = std::fs::read_to_string(dir.join("served")).unwrap_or_default();
    let _ = std::fs::remove_file(dir.join("served"));
    text.lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .sum()
}

/// The bytes the record of `target`'s failed pull says are on disk.
fn kept(site: &HttpsSite, dir: &str) -> u64 {
    let record = std::fs::read_dir(site.path(dir))
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().ends_with(".state"))
        .expect("a failed pull keeps a record of its bytes");
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(record.path()).unwrap()).unwrap();
    state["stored"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[1].as_u64().unwrap() - r[0].as_u64().unwrap())
        .sum()
}

#[test]
fn a_pull_that_broke_off_fetches_only_what_is_missing_when_retried() {
    let Some(curl) = require_tool("curl", "curl") else {
        return;
    };
    let site = HttpsSite::start();
    site.mkdir_local("out");
    let dir = site.dir().join("source");
    std::fs::create_dir_all(&dir).unwrap();
    let source = breaking_source(&dir);
    let body: Vec<u8> = (0..81920).flat_map(|_| 0..=255u8).collect();
    let size = body.len() as u64;
    let pull = |streams: &str| {
        let header = format!("Source: {}", source.url());
        let streams = format!("X-Number-Of-Streams: {streams}");
        site.curl(
            &curl,
            ME,
            &["-X", "COPY", "-H", &header, "-H", &streams],
            "/out/resumed.bin",
        )
    };

    for streams in ["1", "4"] {
        // The whole-file answer breaks off after 3 MiB: the copy fails and keeps its bytes.
        std::fs::write(dir.join("break"), "").unwrap();
        let r = pull(streams);
        assert!(
            outcome(&r.text()).0.starts_with("failure: "),
            "{}",
            r.text()
        );
        assert!(!site.path("out/resumed.bin").exists());
        let stored = kept(&site, "out");
        assert!(stored >= 2 << 20, "streams {streams}: kept {stored}");
        served(&dir);

        // Retried, it asks only for what is missing, and the file is whole.
        std::fs::remove_file(dir.join("break")).unwrap();
        let r = pull(streams);
        assert_eq!(outcome(&r.text()).0, "success: Created", "{}", r.text());
        assert_eq!(std::fs::read(site.path("out/resumed.bin")).unwrap(), body);
        let missing = size - stored;
        let moved = served(&dir);
        eprintln!(
            "streams {streams}: {stored} bytes kept, {missing} missing, {moved} moved by the retry"
        );
        assert!(
            moved >= missing && moved * 100 <= missing * 105,
            "streams {streams}: {moved} bytes moved for {missing} missing"
        );
        assert!(site.temp_files().is_empty(), "{:?}", site.temp_files());
        std::fs::remove_file(site.path("out/resumed.bin")).unwrap();
    }

    // A source whose file changed since the failure is fetched whole again.
    std::fs::write(dir.join("break"), "").unwrap();
    let r = pull("1");
    assert!(
        outcome(&r.text()).0.starts_with("failure: "),
        "{}",
        r.text()
    );
    std::fs::remove_file(dir.join("break")).unwrap();
    std::fs::write(dir.join("etag"), "\"v2\"").unwrap();
    served(&dir);
    let r = pull("1");
    assert_eq!(outcome(&r.text()).0, "success: Created", "{}", r.text());
    assert_eq!(std::fs::read(site.path("out/resumed.bin")).unwrap(), body);
    assert!(served(&dir) >= size);
    assert!(site.temp_files().is_empty(), "{:?}", site.temp_files());
}

#[test]
fn networks_the_admin_denies_are_refused_before_any_byte_moves() {
    let Some(curl) = require_tool("curl", "curl") else {
        return;
    };
    let site = HttpsSite::start_with(SiteOptions {
        config: "[https]\ntpc-deny-networks = [\"127.0.0.0/8\", \"::1/128\"]\n".into(),
        ..SiteOptions::default()
    });
    site.mkdir_local("out");
    site.put_local("data/src.bin", b"never sent");
    let dir = site.dir().join("source");
    std::fs::create_dir_all(&dir).unwrap();
    let source = breaking_source(&dir);
    let copy =
        |header: String, path: &str| site.curl(&curl, ME, &["-X", "COPY", "-H", &header], path);
    for (header, path) in [
        (format!("Source: {}", source.url()), "/out/denied.bin"),
        (
            format!("Source: http://localhost:{}/f", source.port),
            "/out/denied.bin",
        ),
        (
            format!("Destination: http://localhost:{}/f", source.port),
            "/data/src.bin",
        ),
        (
            format!(
                "Source: gsiftp://localhost:{}/data/src.bin",
                site.gridftp_port()
            ),
            "/out/denied.bin",
        ),
    ] {
        let r = copy(header.clone(), path);
        assert_eq!(r.status, 403, "{header}: {}", r.text());
        assert!(
            r.text().contains("tpc-deny-networks"),
            "{header}: {}",
            r.text()
        );
    }
    assert_eq!(served(&dir), 0, "the source was never asked");
    assert!(!site.path("out/denied.bin").exists());
    assert!(site.temp_files().is_empty(), "{:?}", site.temp_files());
}
