//! HTTP third-party copy bridged to GridFTP: a `COPY` whose `Source` or `Destination` is a
//! `gsiftp://` server, run by the door's own GridFTP client with the host credential
//! (`[https] tpc-gsiftp-credential = "host"`), against ferry's GridFTP door and a Globus
//! server. Every copy compares the bytes; every failure is checked to leave no file.

use crate::common::globus::GlobusGsi;
use crate::common::https::tpc_outcome as outcome;
use crate::common::https::{require_tool, HttpsSite, Login, SiteOptions};
use crate::common::random_bytes;

/// A door that bridges to GridFTP with its host credential, mapped to `nobody` everywhere.
fn bridging_site() -> HttpsSite {
    HttpsSite::start_with(SiteOptions {
        host_in_gridmap: true,
        config: "[https]\ntpc-gsiftp-credential = \"host\"\n".into(),
        ..SiteOptions::default()
    })
}

#[test]
fn the_door_pulls_from_and_pushes_to_a_gridftp_server_in_one_copy() {
    let Some(curl) = require_tool("curl", "curl") else {
        return;
    };
    let site = bridging_site();
    let data = random_bytes((9 << 20) + 13, 61);
    site.put_local("data/src.bin", &data);
    site.mkdir_local("out");
    let gsiftp = |path: &str| format!("gsiftp://localhost:{}{path}", site.gridftp_port());
    let copy = |headers: &[String], path: &str| {
        let mut args = vec!["-X", "COPY"];
        for h in headers {
            args.extend(["-H", h.as_str()]);
        }
        site.curl(&curl, Login::Proxy, &args, path)
    };

    // Pull over four streams from the site's own GridFTP door.
    let pulled = copy(
        &[
            format!("Source: {}", gsiftp("/data/src.bin")),
            "X-Number-Of-Streams: 4".into(),
        ],
        "/out/pulled.bin",
    );
    assert_eq!(pulled.status, 202, "{}", pulled.text());
    let text = pulled.text();
    assert!(text.starts_with("Perf Marker\n"), "{text}");
    assert!(
        text.contains(&format!(
            "RemoteConnections: tcp:127.0.0.1:{}",
            site.gridftp_port()
        )),
        "{text}"
    );
    assert_eq!(
        outcome(&text),
        ("success: Created".to_owned(), Some(data.len() as u64)),
        "{text}"
    );
    assert_eq!(std::fs::read(site.path("out/pulled.bin")).unwrap(), data);

    // Push, streams of ferry's choosing.
    let pushed = copy(
        &[format!("Destination: {}", gsiftp("/out/pushed.bin"))],
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
            log.iter().any(|l| l["command"] == method
                && l["result"] == "ok"
                && l["bytes"] == data.len() as u64),
            "{method}: {log:?}"
        );
    }

    // Refusals with FTS3's words, and nothing left behind.
    let r = copy(
        &[format!("Source: {}", gsiftp("/data/nothing.bin"))],
        "/out/never.bin",
    );
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(
        r.text().starts_with("failure: No such file or directory"),
        "{}",
        r.text()
    );
    let r = copy(
        &[
            format!("Source: {}", gsiftp("/data/src.bin")),
            "Overwrite: F".into(),
        ],
        "/out/pulled.bin",
    );
    assert_eq!(r.status, 412, "{}", r.text());
    let r = copy(
        &[
            format!("Destination: {}", gsiftp("/out/pulled.bin")),
            "Overwrite: F".into(),
        ],
        "/data/src.bin",
    );
    assert_eq!(r.status, 412, "{}", r.text());
    let r = copy(
        &[format!("Destination: {}", gsiftp("/no/such/dir/x.bin"))],
        "/data/src.bin",
    );
    let (last, _) = outcome(&r.text());
    assert!(
        r.status == 202 && last.starts_with("failure: ") || r.status >= 400,
        "{} {}",
        r.status,
        r.text()
    );
    let r = copy(
        &[format!("Source: {}", gsiftp("/data/src.bin"))],
        "/no/such/dir/x.bin",
    );
    assert!(r.status >= 400, "{} {}", r.status, r.text());
    assert!(!site.path("out/never.bin").exists());
    assert!(site.temp_files().is_empty(), "{:?}", site.temp_files());
}

#[test]
fn gsiftp_peers_are_refused_with_the_reason_where_the_admin_lent_no_credential() {
    let Some(curl) = require_tool("curl", "curl") else {
        return;
    };
    let site = HttpsSite::start();
    site.put_local("data/src.bin", b"x");
    let source = format!(
        "Source: gsiftp://localhost:{}/data/src.bin",
        site.gridftp_port()
    );
    let r = site.curl(
        &curl,
        Login::Proxy,
        &["-X", "COPY", "-H", &source],
        "/data/copy.bin",
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("tpc-gsiftp-credential"), "{}", r.text());
    assert!(!site.path("data/copy.bin").exists());
}

#[test]
fn the_door_bridges_to_a_globus_gridftp_server_both_ways() {
    let Some(curl) = require_tool("curl", "curl") else {
        return;
    };
    let site = bridging_site();
    let Some(globus) = GlobusGsi::start(site.dir(), &site.dir().join("ca"), "globus", &[]) else {
        return;
    };
    let data = random_bytes((20 << 20) + 5, 62);
    std::fs::write(globus.root.join("src.bin"), &data).unwrap();
    site.put_local("data/src.bin", &data);
    site.mkdir_local("out");
    let at_globus = |name: &str| {
        format!(
            "gsiftp://localhost:{}{}/{name}",
            globus.port,
            globus.root.display()
        )
    };

    let source = format!("Source: {}", at_globus("src.bin"));
    let pulled = site.curl(
        &curl,
        Login::Proxy,
        &["-X", "COPY", "-H", &source],
        "/out/from-globus.bin",
    );
    assert_eq!(
        outcome(&pulled.text()),
        ("success: Created".to_owned(), Some(data.len() as u64)),
        "{}",
        pulled.text()
    );
    assert_eq!(
        std::fs::read(site.path("out/from-globus.bin")).unwrap(),
        data
    );

    let dest = format!("Destination: {}", at_globus("to-globus.bin"));
    let pushed = site.curl(
        &curl,
        Login::Proxy,
        &[
            "-X",
            "COPY",
            "-H",
            &dest,
            "-H",
            "RequireChecksumVerification: true",
        ],
        "/data/src.bin",
    );
    assert_eq!(
        outcome(&pushed.text()),
        ("success: Created".to_owned(), Some(data.len() as u64)),
        "{}",
        pushed.text()
    );
    assert_eq!(
        std::fs::read(globus.root.join("to-globus.bin")).unwrap(),
        data
    );
    assert!(site.temp_files().is_empty(), "{:?}", site.temp_files());
}
