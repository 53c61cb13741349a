//! FTS3's `overwrite: false` against destination servers that answer badly: a check that
//! drops the connection or answers something unclear never lets a copy write, on any attempt
//! nor in a pipeline; a clear "no such file" does, and a destination that is there stays.
//! Passwords in the URLs stay out of what the service shows.

use std::time::{Duration, Instant};

use ferry_service::client::{Method, ServiceClient};
use serde_json::{json, Value};

use crate::api::{site_with, wait_state};
use crate::fake_ftp::{mlst_file, Act, FakeFtp};

async fn files(c: &ServiceClient, job: &str) -> Value {
    c.json(Method::GET, &format!("/jobs/{job}/files"), None)
        .await
        .unwrap()
}

async fn submit(c: &ServiceClient, files: Value, retry: i64) -> String {
    let body =
        json!({"files": files, "params": {"overwrite": false, "retry": retry, "retry_delay": 0}});
    c.json(Method::POST, "/jobs", Some(&body)).await.unwrap()["job_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A job's end, whichever it is.
async fn ended(c: &ServiceClient, job: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let j = c
            .json(Method::GET, &format!("/jobs/{job}"), None)
            .await
            .unwrap();
        if !matches!(j["job_state"].as_str(), Some("SUBMITTED" | "ACTIVE")) {
            return j;
        }
        assert!(Instant::now() < deadline, "job {job} did not end: {j}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_whose_check_drops_or_answers_unclearly_is_not_written_on_any_attempt() {
    // The first MLST drops the connection; the second is refused without saying why, and
    // the directory cannot be listed; the third is "try later".
    let dst = FakeFtp::start(|cmd, seen| match cmd.split(' ').next() {
        Some("MLST") => match seen.count("MLST") {
            0 => Act::Drop,
            1 => Act::Say("550 Requested action not taken.".into()),
            _ => Act::Say("450 Busy, try later.".into()),
        },
        Some("MLSD" | "LIST" | "NLST") => Act::Say("451 Cannot list now.".into()),
        _ => Act::Plain,
    });
    let s = site_with(true, None).await;
    let alice = s.as_user(&s.alice);
    let src = s.dir.path().join("src.bin");
    std::fs::write(&src, vec![7u8; 1000]).unwrap();
    let job = submit(
        &alice,
        json!([{"sources": [src.to_str().unwrap()], "destinations": [dst.url("", "/dst.bin")]}]),
        2,
    )
    .await;
    let j = ended(&alice, &job).await;
    let f = files(&alice, &job).await;
    {
        let seen = dst.seen.lock().unwrap();
        assert_eq!(
            (seen.count("STOR"), seen.count("APPE"), seen.stored.len()),
            (0, 0, 0),
            "the destination was written: {:?}",
            seen.commands
        );
        assert_eq!(
            seen.count("MLST"),
            3,
            "each attempt asked again: {:?}",
            seen.commands
        );
    }
    assert_eq!(j["job_state"], "FAILED", "{j}");
    assert_eq!(f[0]["attempts"], 3, "{f}");
    let reason = f[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("could not learn whether the destination"),
        "{reason}"
    );
    let id = f[0]["file_id"].as_i64().unwrap();
    let tries = alice
        .json(
            Method::GET,
            &format!("/jobs/{job}/files/{id}/retries"),
            None,
        )
        .await
        .unwrap();
    assert!(
        tries
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["retryable"] == true),
        "{tries}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_copies_nothing_whose_destination_check_fails() {
    // Small files between two servers go as one pipeline; the destination cannot be listed
    // and drops every MLST. The source must not even be asked for a file.
    let src = FakeFtp::start(|_, _| Act::Plain);
    let dst = FakeFtp::start(|cmd, _| match cmd.split(' ').next() {
        Some("MLST") => Act::Drop,
        Some("MLSD" | "LIST" | "NLST") => Act::Say("451 Cannot list now.".into()),
        _ => Act::Plain,
    });
    let s = site_with(false, None).await;
    let alice = s.as_user(&s.alice);
    let list: Vec<Value> = ["a", "b", "c"]
        .iter()
        .map(|n| {
            json!({"sources": [src.url("", &format!("/d/{n}"))],
                   "destinations": [dst.url("", &format!("/d/{n}"))], "filesize": 10})
        })
        .collect();
    let job = submit(&alice, Value::Array(list), 1).await;
    let j = ended(&alice, &job).await;
    assert_eq!(j["job_state"], "FAILED", "{j}");
    let f = files(&alice, &job).await;
    for file in f.as_array().unwrap() {
        assert_eq!(file["attempts"], 2, "{f}");
        assert!(
            file["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("could not learn whether the destination"),
            "{f}"
        );
    }
    let (src_seen, dst_seen) = (src.seen.lock().unwrap(), dst.seen.lock().unwrap());
    assert_eq!(
        src_seen.connections, 0,
        "the source was asked: {:?}",
        src_seen.commands
    );
    assert_eq!(dst_seen.count("STOR"), 0, "{:?}", dst_seen.commands);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clear_no_such_file_is_written_and_a_destination_that_is_there_is_kept() {
    let dst = FakeFtp::start(|cmd, _| match cmd.split_once(' ') {
        Some(("MLST", "/absent.bin")) => {
            Act::Say("550 /absent.bin: No such file or directory.".into())
        }
        Some(("MLST", path)) => mlst_file(path, 5),
        _ => Act::Plain,
    });
    let s = site_with(true, None).await;
    let alice = s.as_user(&s.alice);
    let src = s.dir.path().join("src.bin");
    std::fs::write(&src, vec![7u8; 1000]).unwrap();
    let src = src.to_str().unwrap();

    let job = submit(
        &alice,
        json!([{"sources": [src], "destinations": [dst.url("", "/absent.bin")]}]),
        0,
    )
    .await;
    wait_state(&alice, &job, "FINISHED").await;
    assert_eq!(dst.seen.lock().unwrap().stored, vec![1000]);

    // There already, behind a login whose password must not show anywhere.
    let job = submit(
        &alice,
        json!([{"sources": [src], "destinations": [dst.url("alice:pl41n-s3cret@", "/present.bin")]}]),
        3,
    )
    .await;
    wait_state(&alice, &job, "FAILED").await;
    assert_eq!(dst.seen.lock().unwrap().stored, vec![1000], "not written");
    let f = files(&alice, &job).await;
    assert_eq!(f[0]["attempts"], 1, "not retried: {f}");
    let reason = f[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("exists"), "{reason}");
    let state = alice
        .json(Method::GET, "/dashboard/state", None)
        .await
        .unwrap();
    let id = f[0]["file_id"].as_i64().unwrap();
    let tries = alice
        .json(
            Method::GET,
            &format!("/jobs/{job}/files/{id}/retries"),
            None,
        )
        .await
        .unwrap();
    for shown in [f.to_string(), state.to_string(), tries.to_string()] {
        assert!(!shown.contains("pl41n-s3cret"), "{shown}");
    }
    assert!(reason.contains("alice:***@"), "{reason}");
}
