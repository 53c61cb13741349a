//! HTTP third-party copy with ferry's door as the active party: `COPY` with `Source` (pull)
//! and with a `Destination` on another server (push), driven by curl as davix and gfal2 send
//! it, with the door itself and a lying source as the passive party. Every copy compares the
//! bytes, and every failure is checked to leave no file.

use std::path::Path;

use crate::common::https::tpc_outcome as outcome;
use crate::common::https::{require_tool, HttpsSite, Login};
use crate::common::pysource::PySource;
use crate::common::random_bytes;
use crate::common::xrootd::Xrootd;

#[test]
fn curl_drives_pull_and_push_and_every_byte_arrives() {
    let Some(curl) = require_tool("curl", "curl") else {
        return;
    };
    let site = HttpsSite::start();
    let data = random_bytes((5 << 20) + 77, 51);
    site.put_local("data/src.bin", &data);
    site.mkdir_local("out");
    let auth = format!("TransferHeaderAuthorization: {}", site.basic_auth());
    let me = Login::Password(
        crate::common::https::PASSWORD_USER,
        crate::common::https::PASSWORD,
    );

    // Pull: the door GETs its own file (as the passive party) with the forwarded credential.
    let source = format!("Source: {}", site.url("/data/src.bin"));
    let pulled = site.curl(
        &curl,
        me,
        &[
            "-X",
            "COPY",
            "-H",
            &source,
            "-H",
            &auth,
            "-H",
            "Credential: none",
        ],
        "/out/pulled.bin",
    );
    assert_eq!(pulled.status, 202, "{}", pulled.text());
    assert!(
        pulled
            .header("content-type")
            .is_some_and(|t| t.contains("perf-marker")),
        "{}",
        pulled.headers
    );
    let text = pulled.text();
    assert!(text.starts_with("Perf Marker\n"), "{text}");
    assert!(text.contains("RemoteConnections: tcp:127.0.0.1:"), "{text}");
    assert_eq!(
        outcome(&text),
        ("success: Created".to_owned(), Some(data.len() as u64)),
        "{text}"
    );
    assert_eq!(std::fs::read(site.path("out/pulled.bin")).unwrap(), data);
    assert!(site.temp_files().is_empty(), "{:?}", site.temp_files());

    // Push: the request's Host names another server than the Destination's, so the door PUTs.
    let dest = format!("Destination: {}", site.url("/out/pushed.bin"));
    let alias = format!("Host: door-alias:{}", site.port());
    let pushed = site.curl(
        &curl,
        me,
        &["-X", "COPY", "-H", &dest, "-H", &alias, "-H", &auth],
        "/data/src.bin",
    );
    assert_eq!(pushed.status, 202, "{}", pushed.text());
    assert_eq!(
        outcome(&pushed.text()),
        ("success: Created".to_owned(), Some(data.len() as u64)),
        "{}",
        pushed.text()
    );
    assert_eq!(std::fs::read(site.path("out/pushed.bin")).unwrap(), data);
    let log = site.transfer_log();
    for method in ["COPY-PULL", "COPY-PUSH"] {
        assert!(
            log.iter()
                .any(|l| l["command"] == method && l["result"] == "ok"),
            "{method}: {log:?}"
        );
    }

    // Refused before anything moves, with the reason.
    let copy = |extra: &[&str], path: &str| {
        let mut args = vec!["-X", "COPY"];
        args.extend(extra);
        site.curl(&curl, me, &args, path)
    };
    let missing = format!("Source: {}", site.url("/data/nothing.bin"));
    let r = copy(&["-H", &missing, "-H", &auth], "/out/never.bin");
    assert_eq!(
        r.status,
        404,
        "a missing source stays not found: {}",
        r.text()
    );
    assert!(
        r.text()
            .starts_with("failure: Remote side failed with status code 404"),
        "{}",
        r.text()
    );
    let r = copy(&["-H", &source], "/out/never.bin");
    assert!(
        matches!(r.status, 401 | 403),
        "no credential forwarded: {} {}",
        r.status,
        r.text()
    );
    let r = copy(
        &["-H", &source, "-H", &auth, "-H", "Overwrite: F"],
        "/out/pulled.bin",
    );
    assert_eq!(r.status, 412, "{}", r.text());
    let both = format!("Destination: {}", site.url("/out/x"));
    let r = copy(&["-H", &source, "-H", &both], "/out/never.bin");
    assert_eq!(r.status, 400, "{}", r.text());
    let r = copy(
        &["-H", &source, "-H", "Credential: gridsite"],
        "/out/never.bin",
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let r = copy(&["-H", "Source: s3://localhost/x"], "/out/never.bin");
    assert_eq!(r.status, 400, "{}", r.text());
    let r = copy(
        &[
            "-H",
            &source,
            "-H",
            "TransferHeaderHost: evil.example",
            "-H",
            &auth,
        ],
        "/out/hosted.bin",
    );
    assert_eq!(r.status, 202, "a forwarded Host is dropped: {}", r.text());
    assert_eq!(std::fs::read(site.path("out/hosted.bin")).unwrap(), data);
    assert!(!site.path("out/never.bin").exists());
}

/// A clear-text HTTP source that answers every GET with `body_len` bytes of a pattern, the
/// header lines `headers` (Python bytes-literal escapes) and, where `cut_at` is shorter, only
/// that many bytes before it closes.
fn lying_source(dir: &Path, body_len: usize, headers: &str, cut_at: usize) -> PySource {
    PySource::start(
        dir,
        &format!(
            r#"
body = bytes((i * 7) % 251 for i in range({body_len}))
def handle(c, head):
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: {body_len}\r\n{headers}Connection: close\r\n\r\n")
    c.sendall(body[:{cut_at}])
"#
        ),
    )
}

#[test]
fn a_source_that_lies_about_its_length_or_digest_leaves_no_file() {
    let Some(curl) = require_tool("curl", "curl") else {
        return;
    };
    let site = HttpsSite::start();
    site.mkdir_local("out");
    let me = Login::Password(
        crate::common::https::PASSWORD_USER,
        crate::common::https::PASSWORD,
    );
    let pull = |source: &PySource, path: &str, extra: &[&str]| {
        let header = format!("Source: {}", source.url());
        let mut args = vec!["-X", "COPY", "-H", header.as_str()];
        args.extend(extra);
        site.curl(&curl, me, &args, path)
    };

    // It promises 1 MiB and closes after 300 000 bytes.
    let short = lying_source(site.dir(), 1 << 20, "", 300_000);
    let r = pull(&short, "/out/short.bin", &[]);
    assert_eq!(r.status, 202, "{}", r.text());
    let (last, _) = outcome(&r.text());
    assert!(last.starts_with("failure: "), "{}", r.text());
    assert!(!site.path("out/short.bin").exists());

    // Its Digest does not match its bytes.
    let liar = lying_source(
        site.dir(),
        200_000,
        "Digest: adler32=00000001\\r\\n",
        200_000,
    );
    let r = pull(&liar, "/out/liar.bin", &[]);
    let (last, _) = outcome(&r.text());
    assert!(
        last.starts_with("failure: ") && last.contains("CHECKSUM MISMATCH"),
        "{}",
        r.text()
    );
    assert!(!site.path("out/liar.bin").exists());
    // Unless the client asks for no verification.
    let r = pull(
        &liar,
        "/out/liar.bin",
        &["-H", "RequireChecksumVerification: false"],
    );
    assert_eq!(outcome(&r.text()).0, "success: Created", "{}", r.text());
    let want: Vec<u8> = (0..200_000u32).map(|i| ((i * 7) % 251) as u8).collect();
    assert_eq!(std::fs::read(site.path("out/liar.bin")).unwrap(), want);
    assert!(site.temp_files().is_empty(), "{:?}", site.temp_files());
}

#[test]
fn ferry_and_xrootd_pull_and_push_to_each_other() {
    let Some(curl) = require_tool("curl", "curl") else {
        return;
    };
    let site = HttpsSite::start();
    let Some(xrd) = Xrootd::start(&site) else {
        return;
    };
    let me = Login::Password(
        crate::common::https::PASSWORD_USER,
        crate::common::https::PASSWORD,
    );
    let data = random_bytes((7 << 20) + 13, 53);
    site.put_local("data/src.bin", &data);
    site.mkdir_local("out");
    let on_xrootd = xrd.root.join("x.bin");
    std::fs::write(&on_xrootd, &data).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&on_xrootd, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let check = |text: &str, what: &str| {
        assert_eq!(outcome(text).0, "success: Created", "{what}: {text}");
    };

    // ferry pulls from XRootD, and pushes to it.
    let source = format!("Source: {}", xrd.url("/x.bin"));
    let r = site.curl(
        &curl,
        me,
        &["-X", "COPY", "-H", &source],
        "/out/from-xrootd.bin",
    );
    assert_eq!(r.status, 202, "{}", r.text());
    check(&r.text(), "ferry pulls from XRootD");
    assert_eq!(
        std::fs::read(site.path("out/from-xrootd.bin")).unwrap(),
        data
    );
    let dest = format!("Destination: {}", xrd.url("/pushed-by-ferry.bin"));
    let r = site.curl(&curl, me, &["-X", "COPY", "-H", &dest], "/data/src.bin");
    check(&r.text(), "ferry pushes to XRootD");
    assert_eq!(
        std::fs::read(xrd.root.join("pushed-by-ferry.bin")).unwrap(),
        data
    );

    // XRootD pulls from ferry, and pushes to it, with the credential handed on to ferry.
    let auth = format!("TransferHeaderAuthorization: {}", site.basic_auth());
    let from_ferry = format!("Source: {}", site.url("/data/src.bin"));
    let text = xrd.copy(&site, &curl, "/pulled-by-xrootd.bin", &[&from_ferry, &auth]);
    check(&text, "XRootD pulls from ferry");
    assert_eq!(
        std::fs::read(xrd.root.join("pulled-by-xrootd.bin")).unwrap(),
        data
    );
    let to_ferry = format!("Destination: {}", site.url("/out/pushed-by-xrootd.bin"));
    let text = xrd.copy(&site, &curl, "/x.bin", &[&to_ferry, &auth]);
    check(&text, "XRootD pushes to ferry");
    assert_eq!(
        std::fs::read(site.path("out/pushed-by-xrootd.bin")).unwrap(),
        data
    );
    let log = site.transfer_log();
    assert!(
        log.iter()
            .any(|l| l["command"] == "PUT" && l["path"] == "/out/pushed-by-xrootd.bin"),
        "{log:?}"
    );
}

#[test]
fn tokens_the_door_issues_grant_their_path_and_activities_only() {
    let Some(curl) = require_tool("curl", "curl") else {
        return;
    };
    let site = HttpsSite::start();
    let data = random_bytes(100_000, 57);
    site.put_local("data/f.bin", &data);
    site.put_local("data/other.bin", b"other");
    let me = Login::Password(
        crate::common::https::PASSWORD_USER,
        crate::common::https::PASSWORD,
    );
    let ask = |login: Login<'_>, path: &str, body: &str| {
        site.curl(
            &curl,
            login,
            &[
                "-X",
                "POST",
                "-H",
                "Content-Type: application/macaroon-request",
                "--data-binary",
                body,
            ],
            path,
        )
    };
    let r = ask(
        me,
        "/data/f.bin",
        r#"{"caveats": ["activity:DOWNLOAD,LIST"], "validity": "PT10M"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let answer: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(answer["expires_in"], 600);
    let token = answer["macaroon"].as_str().unwrap().to_owned();
    let got = site.curl(&curl, Login::Bearer(&token), &[], "/data/f.bin");
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.body, data);
    let r = site.curl(&curl, Login::Bearer(&token), &[], "/data/other.bin");
    assert_eq!(r.status, 403, "another path: {}", r.text());
    let r = site.curl(
        &curl,
        Login::Bearer(&token),
        &["-X", "DELETE"],
        "/data/f.bin",
    );
    assert_eq!(r.status, 403, "an activity not given: {}", r.text());
    assert!(site.path("data/f.bin").exists());
    let forged = format!("{token}x");
    let r = site.curl(&curl, Login::Bearer(&forged), &[], "/data/f.bin");
    assert_eq!(r.status, 401, "{}", r.text());
    // A token cannot hand on more than its asker holds.
    let r = ask(
        Login::Bearer(&token),
        "/data/f.bin",
        r#"{"caveats": ["activity:MANAGE"]}"#,
    );
    assert_eq!(r.status, 403, "{}", r.text());
    // Only macaroon requests, and no anonymous asker.
    let r = site.curl(
        &curl,
        me,
        &["-X", "POST", "--data-binary", "x=1"],
        "/data/f.bin",
    );
    assert_eq!(r.status, 415, "{}", r.text());
    assert!(r.body.len() < 200, "a POST never answers with the file");
    let r = ask(me, "/data/f.bin", r#"{"caveats": ["path:/"]}"#);
    assert_eq!(r.status, 400, "{}", r.text());
}

#[test]
fn gfal2_with_only_a_proxy_copies_between_ferry_and_xrootd_both_ways() {
    let Some(gfal) = crate::https_door::Gfal::find(&["gfal-copy"]) else {
        return;
    };
    let site = HttpsSite::start();
    let Some(xrd) = Xrootd::start(&site) else {
        return;
    };
    let data = random_bytes((4 << 20) + 99, 59);
    site.put_local("data/src.bin", &data);
    site.put_local("data/for-xrootd.bin", &data);
    site.mkdir_local("out");
    let ferry_url = |p: &str| site.davs(p);
    let xrootd_url = |p: &str| format!("davs://localhost:{}{p}", xrd.port);
    // gfal2 asks each end for a token (POST application/macaroon-request), then sends COPY to
    // the active end with the other's token in TransferHeaderAuthorization.
    for (mode, from, to, check) in [
        (
            "pull",
            ferry_url("/data/src.bin"),
            ferry_url("/out/pulled.bin"),
            site.path("out/pulled.bin"),
        ),
        (
            "pull",
            xrootd_url("/x.bin"),
            ferry_url("/out/from-xrootd.bin"),
            site.path("out/from-xrootd.bin"),
        ),
        (
            "pull",
            ferry_url("/data/for-xrootd.bin"),
            xrootd_url("/from-ferry.bin"),
            xrd.root.join("from-ferry.bin"),
        ),
        (
            "push",
            ferry_url("/data/src.bin"),
            xrootd_url("/pushed-by-ferry.bin"),
            xrd.root.join("pushed-by-ferry.bin"),
        ),
    ] {
        if from.contains("/x.bin") {
            let x = xrd.root.join("x.bin");
            std::fs::write(&x, &data).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&x, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let run = gfal.run(&site, 0, &["--copy-mode", mode, &from, &to]);
        run.assert_ok();
        assert_eq!(
            std::fs::read(&check).unwrap(),
            data,
            "{mode} {from} -> {to}"
        );
    }
    // Each copy ran between the servers, not streamed through gfal2: ferry's log has its own
    // copies as the active party, XRootD's its pull from ferry.
    let log = site.transfer_log();
    for (command, path) in [
        ("COPY-PULL", "/out/pulled.bin"),
        ("COPY-PULL", "/out/from-xrootd.bin"),
        ("COPY-PUSH", "/data/src.bin"),
    ] {
        assert!(
            log.iter()
                .any(|l| l["command"] == command && l["path"] == path && l["result"] == "ok"),
            "{command} {path}: {log:?}"
        );
    }
    // XRootD logs no successful pull; ferry logs the token it issued for that file being used
    // (gfal2 streaming the copy itself would have read with its proxy).
    assert!(
        site.server_log().lines().any(|l| l.contains("site-issued token accepted")
            && l.contains("/data/for-xrootd.bin")),
        "{}",
        site.server_log()
    );
}
