use super::*;
use serde_json::json;

fn job(body: Value) -> Result<(NewJob, JobOptions), ServiceError> {
    parse(&body, "/CN=u", Defaults::default(), false)
}

#[test]
fn fts3_clients_body_is_taken_and_its_unused_fields_listed() {
    // As fts-rest-transfer-submit sends it (fts3 3.14): many nulls, "n" for no checksum.
    let body = json!({
        "files": [{"sources": ["gsiftp://a.example/x"], "destinations": ["gsiftp://b.example:2812/y"],
                   "selection_strategy": "orderly", "checksum": "ADLER32", "filesize": null,
                   "activity": "default", "metadata": null}],
        "params": {"verify_checksum": "n", "reuse": null, "spacetoken": null, "bring_online": null,
                   "overwrite": false, "copy_pin_lifetime": -1, "job_metadata": null, "retry": 0,
                   "retry_delay": 0, "priority": null, "s3alternate": false, "nostreams": null,
                   "multihop": false, "unmanaged_tokens": false}
    });
    let (j, o) = job(body).unwrap();
    assert_eq!(j.verify, "none");
    assert_eq!(j.retry, 3, "FTS3's 0: the service's default");
    assert_eq!(j.priority, 3);
    assert_eq!(o, JobOptions::default());
    assert_eq!(
        j.files[0].link,
        "gsiftp://a.example:2811 → gsiftp://b.example:2812"
    );
    assert_eq!(j.files[0].checksum.as_deref(), Some("ADLER32"));
    for f in [
        "params.copy_pin_lifetime",
        "files[].selection_strategy",
        "files[].activity",
    ] {
        assert!(
            j.ignored.contains(&f.to_owned()),
            "{f} not in {:?}",
            j.ignored
        );
    }
    for f in ["reuse", "s3alternate", "multihop"] {
        assert!(
            !j.ignored.iter().any(|i| i.contains(f)),
            "null and false are not asked for: {:?}",
            j.ignored
        );
    }
    let body = json!({"files": [{"sources": ["gsiftp://a/x"], "destinations": ["gsiftp://b/y"]}],
                      "params": {"retry": -1}});
    assert_eq!(job(body).unwrap().0.retry, 0, "negative: no retries");
}

#[test]
fn wrong_types_and_bad_values_are_refused_by_name() {
    let file = json!({"sources": ["gsiftp://a/x"], "destinations": ["gsiftp://b/y"]});
    let cases = [
        (json!([]), "JSON object"),
        (json!({"files": []}), "empty"),
        (json!({"files": "x"}), "\"files\" must be a list"),
        (
            json!({"files": [file], "params": {"retry": "many"}}),
            "params.retry",
        ),
        (
            json!({"files": [file], "params": {"priority": 9}}),
            "params.priority",
        ),
        (
            json!({"files": [file], "params": {"overwrite": 3}}),
            "params.overwrite",
        ),
        (
            json!({"files": [file], "params": {"verify_checksum": "maybe"}}),
            "verify_checksum",
        ),
        (
            json!({"files": [file], "params": {"job_id": "a b"}}),
            "job_id",
        ),
        (
            json!({"files": [{"sources": [], "destinations": ["gsiftp://b/y"]}]}),
            "files[0].sources",
        ),
        (
            json!({"files": [{"sources": [7], "destinations": ["gsiftp://b/y"]}]}),
            "files[0].sources",
        ),
        (
            json!({"files": [{"sources": ["http://a/x"], "destinations": ["gsiftp://b/y"]}]}),
            "unsupported URL scheme",
        ),
        (
            json!({"files": [{"sources": ["/etc/shadow"], "destinations": ["gsiftp://b/y"]}]}),
            "service's host",
        ),
        (
            json!({"files": [{"sources": ["gsiftp://a/x"], "destinations": ["gsiftp://b/y"], "filesize": -1}]}),
            "filesize",
        ),
        (
            json!({"files": [{"sources": ["gsiftp://a/x"], "destinations": ["gsiftp://b/y"], "checksum": "CRC99:1"}]}),
            "unknown algorithm",
        ),
        (
            json!({"files": [{"sources": ["gsiftp://a/x"], "destinations": ["gsiftp://b/y"], "checksum": "ADLER32:zz'; DROP TABLE jobs;--"}]}),
            "hexadecimal",
        ),
        (
            json!({"files": [{"sources": ["gsiftp://a/x\r\nDELE y"], "destinations": ["gsiftp://b/y"]}]}),
            "one line",
        ),
    ];
    for (body, want) in cases {
        match job(body.clone()) {
            Err(ServiceError::BadRequest(m)) => assert!(m.contains(want), "{body}: {m}"),
            other => panic!("{body}: {other:?}"),
        }
    }
}

#[test]
fn a_refused_url_is_not_echoed_with_its_password() {
    for url in [
        "ftp://bob:hunter22@host:port/x",
        "ftp://bob:hunter22@bad_host/x",
    ] {
        let body = json!({"files": [{"sources": [url], "destinations": ["gsiftp://b/y"]}]});
        match job(body) {
            Err(ServiceError::BadRequest(m)) => {
                assert!(!m.contains("hunter22") && m.contains("bob:***@"), "{m}")
            }
            other => panic!("{url}: {other:?}"),
        }
    }
}

#[test]
fn job_settings_are_read() {
    let body = json!({
        "files": [{"sources": ["gsiftp://a/x"], "destinations": ["gsiftp://b/y"], "filesize": 10,
                   "checksum": "adler32:0A0B0C0D", "metadata": {"k": 1}}],
        "params": {"verify_checksum": true, "retry": "2", "retry_delay": 5, "priority": 5,
                   "overwrite": true, "job_id": "my-job.1", "nostreams": 8, "buffer_size": 4194304,
                   "timeout": 600, "job_metadata": {"run": 7}}
    });
    let (j, o) = job(body).unwrap();
    assert_eq!(j.job_id, "my-job.1");
    assert_eq!(
        (j.retry, j.retry_delay, j.priority, j.overwrite),
        (2, 5, 5, true)
    );
    assert_eq!(j.verify, "both");
    assert_eq!(j.files[0].checksum.as_deref(), Some("ADLER32:0a0b0c0d"));
    assert_eq!(j.files[0].filesize, Some(10));
    assert_eq!(j.files[0].metadata.as_deref(), Some("{\"k\":1}"));
    assert_eq!(j.metadata.as_deref(), Some("{\"run\":7}"));
    assert_eq!(
        o,
        JobOptions {
            nostreams: Some(8),
            buffer_size: Some(4194304),
            timeout: Some(600)
        }
    );
    assert!(j.ignored.is_empty(), "{:?}", j.ignored);
}

#[test]
fn job_ids_are_uuids() {
    let id = new_job_id();
    assert_eq!(id.len(), 36);
    assert_eq!(&id[14..15], "4");
    assert_ne!(id, new_job_id());
}

#[test]
fn per_file_tokens_are_refused_with_the_reason_and_never_echoed() {
    for key in ["source_tokens", "destination_tokens"] {
        let body = json!({"files": [{"sources": ["gsiftp://a/x"], "destinations": ["gsiftp://b/y"],
                                     key: ["eyJhbGciOi.secret-token.sig"]}]});
        match job(body) {
            Err(ServiceError::BadRequest(m)) => {
                assert!(m.contains(key) && m.contains("bearer token"), "{m}");
                assert!(!m.contains("secret-token"), "{m}");
            }
            other => panic!("{key}: {other:?}"),
        }
    }
    // FTS3's client sends empty lists and nulls when no token is given.
    let body = json!({"files": [{"sources": ["gsiftp://a/x"], "destinations": ["gsiftp://b/y"],
                                 "source_tokens": [], "destination_tokens": null}]});
    assert!(job(body).is_ok());
}
