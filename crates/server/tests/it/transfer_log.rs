//! The transfer log: one JSON line per transfer.

use crate::common;

use common::*;
use std::collections::HashMap;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_transfer_appends_one_json_line_with_user_command_path_bytes_streams_and_result() {
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("transfers.jsonl");
    let log_cfg = log.clone();
    let srv = TestServer::start_with(move |c| c.log_transfer = Some(log_cfg)).await;
    let data = random_bytes(300_000, 101);
    let mut c = srv.login().await;

    client_put(&mut c, &data, "up.bin", 2).await.expect("put");
    let (got, _) = client_get(&mut c, "up.bin", 4).await;
    assert!(got == data);
    // A stream-mode listing and a transfer that fails in the DTP.
    expect(&mut c, "MODE S", 200).await;
    let addr = pasv(&mut c).await;
    let mut conn = data_connect(addr).await;
    start_transfer(&mut c, "NLST").await;
    read_all(&mut conn).await;
    expect_final(&mut c, 226).await;
    pasv(&mut c).await;
    // Refused before it began (no 150), and still logged.
    expect(&mut c, "RETR missing.bin", 550).await;

    let mut anon = srv.login_anonymous().await;
    client_get(&mut anon, "up.bin", 1).await;

    let lines = log_lines(&log);
    assert_eq!(lines.len(), 5, "one line per transfer: {lines:#?}");
    let n = data.len() as u64;
    let expect_line = |i: usize, user: &str, command: &str, path: &str, bytes: Option<u64>| {
        let l = &lines[i];
        assert_eq!(l["user"], user, "{l}");
        assert_eq!(l["command"], command, "{l}");
        assert_eq!(l["path"], path, "{l}");
        if let Some(b) = bytes {
            assert_eq!(l["bytes"], b, "{l}");
        }
        assert!(l["streams"].is_u64(), "{l}");
        assert!(l["result"].is_string(), "{l}");
        l
    };
    let put = expect_line(0, USER, "STOR", "/up.bin", Some(n));
    assert_eq!(put["streams"], 2, "{put}");
    assert_eq!(put["result"], "ok");
    assert_eq!(put["mode"], "E");
    let get = expect_line(1, USER, "RETR", "/up.bin", Some(n));
    assert_eq!(get["streams"], 4, "{get}");
    assert_eq!(get["result"], "ok");
    let list = expect_line(2, USER, "NLST", "/", None);
    assert_eq!(list["result"], "ok");
    assert_eq!(list["mode"], "S");
    let failed = expect_line(3, USER, "RETR", "/missing.bin", Some(0));
    assert_ne!(failed["result"], "ok", "{failed}");
    let anon_get = expect_line(4, "anonymous", "RETR", "/up.bin", Some(n));
    assert_eq!(anon_get["streams"], 1);
    // Whole-file transfers carry the ADLER32 they took while moving; listings and failures none.
    let mut a = adler2::Adler32::new();
    a.write_slice(&data);
    let adler = format!("{:08x}", a.checksum());
    for l in [put, get, anon_get] {
        assert_eq!(l["checksums"]["ADLER32"], adler.as_str(), "{l}");
    }
    assert!(list.get("checksums").is_none() && failed.get("checksums").is_none());
    for l in &lines {
        assert!(l["time"].as_f64().is_some_and(|t| t > 0.0), "{l}");
        assert!(l["duration_s"].as_f64().is_some(), "{l}");
        assert!(
            l["peer"]
                .as_str()
                .is_some_and(|p| p.starts_with("127.0.0.1:")),
            "{l}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_transfer_is_logged_as_failed_with_the_bytes_it_moved() {
    if !std::path::Path::new("/dev/zero").exists() {
        eprintln!("skipping: /dev/zero is missing");
        return;
    }
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("transfers.jsonl");
    let log_cfg = log.clone();
    let srv = TestServer::start_with(move |c| {
        c.root = "/".into();
        c.anonymous_whole_fs = true;
        c.log_transfer = Some(log_cfg);
    })
    .await;
    let mut c = srv.login_anonymous().await;
    expect(&mut c, "TYPE I", 200).await;
    let addr = pasv(&mut c).await;
    let mut conn = data_connect(addr).await;
    start_transfer(&mut c, "RETR /dev/zero").await;
    let mut buf = vec![0u8; 256 * 1024];
    within(
        "zeros",
        tokio::io::AsyncReadExt::read_exact(&mut conn, &mut buf),
    )
    .await
    .unwrap();
    c.send_line("ABOR").await.unwrap();
    assert_eq!(next_reply(&mut c).await.code, 426);
    assert_eq!(next_reply(&mut c).await.code, 226);
    drop(conn);
    expect(&mut c, "NOOP", 200).await;
    let lines = log_lines(&log);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let l = &lines[0];
    assert_eq!(l["command"], "RETR", "{l}");
    assert_ne!(l["result"], "ok", "{l}");
    // At least what the client read before aborting; before this fix a failed transfer was
    // logged with 0 bytes.
    assert!(
        l["bytes"].as_u64().is_some_and(|b| b >= buf.len() as u64),
        "{l}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_globus_format_writes_globus_fields_for_each_successful_transfer() {
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("transfer.log");
    let log_cfg = log.clone();
    let srv = TestServer::start_with(move |c| {
        c.log_transfer = Some(log_cfg);
        c.log_transfer_format = ferry_server::TransferLogFormat::Globus;
    })
    .await;
    let data = random_bytes(300_000, 7);
    let mut c = srv.login().await;
    client_put(&mut c, &data, "up.bin", 2).await.expect("put");
    expect(&mut c, "SITE TASKID fts-job-42", 250).await;
    let (got, _) = client_get(&mut c, "up.bin", 4).await;
    assert!(got == data);
    pasv(&mut c).await;
    // A failure: Globus logs successful transfers only, and so does this format.
    expect(&mut c, "RETR missing.bin", 550).await;

    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<HashMap<&str, &str>> = text
        .lines()
        .map(|l| {
            l.split(' ')
                .filter_map(|kv| kv.split_once('='))
                .collect::<HashMap<_, _>>()
        })
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    let order = [
        "DATE", "HOST", "PROG", "NL.EVNT", "START", "USER", "FILE", "BUFFER", "BLOCK", "NBYTES",
        "VOLUME", "STREAMS", "STRIPES", "DEST", "TYPE", "CODE", "TASKID",
    ];
    for line in text.lines() {
        let keys: Vec<&str> = line
            .split(' ')
            .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
            .collect();
        assert_eq!(keys, order, "{line}");
    }
    let n = data.len().to_string();
    for (l, ty, streams, task) in [
        (&lines[0], "STOR", "2", "none"),
        (&lines[1], "RETR", "4", "fts-job-42"),
    ] {
        assert_eq!(l["TYPE"], ty, "{l:?}");
        assert_eq!(l["TASKID"], task, "{l:?}");
        assert_eq!(l["NBYTES"], n, "{l:?}");
        assert_eq!(l["STREAMS"], streams, "{l:?}");
        assert_eq!(l["USER"], USER);
        assert_eq!(l["FILE"], "/up.bin");
        assert_eq!(l["NL.EVNT"], "FTP_INFO");
        assert_eq!(l["CODE"], "226");
        assert_eq!(l["DEST"], "[127.0.0.1]");
        assert_eq!(l["STRIPES"], "1");
        // YYYYMMDDhhmmss.uuuuuu, and a start no later than the end.
        for k in ["DATE", "START"] {
            let (secs, micros) = l[k].split_once('.').unwrap();
            assert!(secs.len() == 14 && micros.len() == 6, "{k}={}", l[k]);
        }
        assert!(l["START"] <= l["DATE"], "{l:?}");
    }
}
