//! The REST API over real HTTPS, in process: FTS3's calls with proxies and tokens, who sees
//! what, and the unhappy paths (no or bad credentials, malformed bodies, foreign delegations).
//! Transfers here go to a closed port, so they fail fast and show their errors; real copies
//! are in the CLI's `transfer_service` tests.

use std::time::{Duration, Instant};

use ferry_gsi::{CertificateAuthority, Credential, IssueSpec, TrustStore};
use ferry_service::client::{Method, ServiceClient};
use ferry_service::{Config, Defaults, Limits, Service, ServiceError};
use openssl::pkey::PKey;
use openssl::rsa::Rsa;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

pub(crate) const ADMIN_TOKEN: &str = "admin-token-0123456789abcdef";
pub(crate) const BOB_TOKEN: &str = "bob-token-0123456789abcdef";

pub(crate) struct Site {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) url: String,
    pub(crate) port: u16,
    pub(crate) trust: TrustStore,
    ca: CertificateAuthority,
    pub(crate) alice: Credential,
    pub(crate) bob: Credential,
    stop: CancellationToken,
}

impl Drop for Site {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn proxy_of(user: &Credential) -> Credential {
    let key = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
    let cert =
        ferry_gsi::proxy::sign_proxy(user, &key, &ferry_gsi::ProxyOptions::default()).unwrap();
    let mut chain = vec![user.cert.clone()];
    chain.extend(user.chain.iter().cloned());
    Credential::new(cert, key, chain).unwrap()
}

async fn site() -> Site {
    site_with(false, None).await
}

/// A service; `allow_local`: jobs may name its host's files; `connections`: other limits than
/// the default ones.
pub(crate) async fn site_with(
    allow_local: bool,
    connections: Option<ferry_service::ConnectionLimits>,
) -> Site {
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::create("/O=Test/CN=Test CA", 2, 2048).unwrap();
    let certs = dir.path().join("certificates");
    ca.install(&certs).unwrap();
    let host = ca
        .issue(&IssueSpec::host("/O=Test", "localhost", 2))
        .unwrap();
    ferry_gsi::ca::save_pair(dir.path(), "hostcert.pem", "hostkey.pem", &host).unwrap();
    let alice = ca.issue(&IssueSpec::user("/O=Test/CN=Alice", 2)).unwrap();
    let bob = ca.issue(&IssueSpec::user("/O=Test/CN=Bob", 2)).unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        format!("# robots\n{ADMIN_TOKEN} admin-robot\n{BOB_TOKEN} /O=Test/CN=Bob\n"),
    )
    .unwrap();
    let config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        database: dir
            .path()
            .join("db/queue.db")
            .to_string_lossy()
            .into_owned(),
        host_id: "api-test".into(),
        host_cert: dir.path().join("hostcert.pem"),
        host_key: dir.path().join("hostkey.pem"),
        cert_dir: certs.clone(),
        token_file: Some(tokens),
        token_issuers: Default::default(),
        admins: vec!["admin-robot".into()],
        limits: Limits::default(),
        defaults: Defaults::default(),
        allow_local,
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        path_cache: None,
    };
    let mut service = Service::bind(&config).await.unwrap();
    if let Some(limits) = connections {
        service = service.with_connection_limits(limits);
    }
    let port = service.local_addr().unwrap().port();
    let stop = CancellationToken::new();
    tokio::spawn(service.serve(stop.clone()));
    Site {
        url: format!("https://localhost:{port}"),
        port,
        trust: TrustStore::load(&certs).unwrap(),
        dir,
        ca,
        alice,
        bob,
        stop,
    }
}

impl Site {
    pub(crate) fn as_user(&self, cred: &Credential) -> ServiceClient {
        ServiceClient::new(&self.url, &self.trust, Some(proxy_of(cred)), None).unwrap()
    }
    pub(crate) fn with_token(&self, token: &str) -> ServiceClient {
        ServiceClient::new(&self.url, &self.trust, None, Some(token.into())).unwrap()
    }
    pub(crate) fn anonymous(&self) -> ServiceClient {
        ServiceClient::new(&self.url, &self.trust, None, None).unwrap()
    }
}

/// A job whose file goes to a closed port: it fails at once with a network error. `retry` as
/// FTS3 spells it (negative: none).
fn doomed(retry: i32, delay: u32) -> Value {
    json!({"files": [{"sources": ["ftp://127.0.0.1:1/x"], "destinations": ["ftp://127.0.0.1:1/y"]}],
           "params": {"retry": retry, "retry_delay": delay}})
}

pub(crate) async fn wait_state(c: &ServiceClient, id: &str, want: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let j = c
            .json(Method::GET, &format!("/jobs/{id}"), None)
            .await
            .unwrap();
        if j["job_state"] == want {
            return j;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} stayed {}",
            j["job_state"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fts3_calls_work_with_a_proxy_and_each_user_sees_only_their_jobs() {
    let s = site().await;
    let alice = s.as_user(&s.alice);
    let root = alice.json(Method::GET, "/", None).await.unwrap();
    assert!(root["api"]["major"].is_u64(), "{root}");
    // FTS3's client builds endpoint + "/" + "/whoami".
    let me = alice.json(Method::GET, "//whoami", None).await.unwrap();
    assert_eq!(me["dn"][0], "/O=Test/CN=Alice", "proxy CNs left off: {me}");
    assert_eq!(me["method"], "certificate");

    // Delegation: none, then one, then not renewed while more than two hours are left.
    let id = me["delegation_id"].as_str().unwrap().to_owned();
    let none = alice
        .json(Method::GET, &format!("/delegation/{id}"), None)
        .await
        .unwrap();
    assert!(none.is_null(), "{none}");
    assert!(alice.delegate_if_needed().await.unwrap());
    let d = alice
        .json(Method::GET, &format!("/delegation/{id}"), None)
        .await
        .unwrap();
    assert!(d["termination_time"].is_string(), "{d}");
    assert!(
        !alice.delegate_if_needed().await.unwrap(),
        "not renewed with 12 h left"
    );

    // A job, failing (closed port) with its reason and its attempt recorded.
    let job = alice
        .json(Method::POST, "/jobs", Some(&doomed(-1, 0)))
        .await
        .unwrap();
    let job_id = job["job_id"].as_str().unwrap().to_owned();
    let j = wait_state(&alice, &job_id, "FAILED").await;
    assert_eq!(j["user_dn"], "/O=Test/CN=Alice");
    let files = alice
        .json(Method::GET, &format!("/jobs/{job_id}/files"), None)
        .await
        .unwrap();
    let reason = files[0]["reason"].as_str().unwrap_or_default().to_owned();
    assert!(reason.contains("Connection refused"), "{files}");
    let file_id = files[0]["file_id"].as_i64().unwrap();
    let tries = alice
        .json(
            Method::GET,
            &format!("/jobs/{job_id}/files/{file_id}/retries"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(tries.as_array().unwrap().len(), 1, "{tries}");
    assert_eq!(tries[0]["retryable"], true);
    let dm = alice
        .json(Method::GET, &format!("/jobs/{job_id}/dm"), None)
        .await
        .unwrap();
    assert_eq!(dm, json!([]));

    // Bob (a proxy) and Bob's token see none of it and cannot cancel it.
    let bob = s.as_user(&s.bob);
    for c in [&bob, &s.with_token(BOB_TOKEN)] {
        let e = c
            .json(Method::GET, &format!("/jobs/{job_id}"), None)
            .await
            .unwrap_err();
        assert!(matches!(e, ServiceError::NotFound(_)), "{e}");
        let e = c
            .json(Method::DELETE, &format!("/jobs/{job_id}"), None)
            .await
            .unwrap_err();
        assert!(matches!(e, ServiceError::NotFound(_)), "{e}");
        let listed = c
            .json(Method::GET, "/jobs?state_in=FAILED", None)
            .await
            .unwrap();
        assert_eq!(listed, json!([]));
        let e = c
            .json(Method::GET, "/jobs?user_dn=/O=Test/CN=Alice", None)
            .await
            .unwrap_err();
        assert!(matches!(e, ServiceError::Forbidden(_)), "{e}");
        let e = c
            .json(Method::GET, &format!("/delegation/{id}"), None)
            .await
            .unwrap_err();
        assert!(matches!(e, ServiceError::Forbidden(_)), "{e}");
    }
    // The admin's token sees everyone's.
    let admin = s.with_token(ADMIN_TOKEN);
    let all = admin
        .json(Method::GET, "/jobs?state_in=FAILED", None)
        .await
        .unwrap();
    assert_eq!(all[0]["job_id"], job_id.as_str());
    let who = admin.json(Method::GET, "/whoami", None).await.unwrap();
    assert_eq!(
        (who["method"].as_str(), who["is_root"].as_bool()),
        (Some("token"), Some(true))
    );

    // A client-chosen id makes a re-submission harmless; another body under it is refused.
    let mut body = doomed(-1, 0);
    body["params"]["job_id"] = json!("alice-run-7");
    let a = alice
        .json(Method::POST, "/jobs", Some(&body))
        .await
        .unwrap();
    let b = alice
        .json(Method::POST, "/jobs", Some(&body))
        .await
        .unwrap();
    assert_eq!(
        (a["job_id"].as_str(), b["job_id"].as_str()),
        (Some("alice-run-7"), Some("alice-run-7"))
    );
    body["params"]["priority"] = json!(5);
    let e = alice
        .json(Method::POST, "/jobs", Some(&body))
        .await
        .unwrap_err();
    assert!(matches!(e, ServiceError::Conflict(_)), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_retry_is_cancelled_at_once_and_several_jobs_at_a_time() {
    let s = site().await;
    let alice = s.as_user(&s.alice);
    let one = alice
        .json(Method::POST, "/jobs", Some(&doomed(5, 3600)))
        .await
        .unwrap();
    let two = alice
        .json(Method::POST, "/jobs", Some(&doomed(5, 3600)))
        .await
        .unwrap();
    let (one, two) = (
        one["job_id"].as_str().unwrap(),
        two["job_id"].as_str().unwrap(),
    );
    // Each failed once and waits an hour for its retry.
    for id in [one, two] {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let f = alice
                .json(Method::GET, &format!("/jobs/{id}/files"), None)
                .await
                .unwrap();
            if f[0]["retry"] == 1 && f[0]["file_state"] == "SUBMITTED" {
                assert!(f[0]["reason"].is_string(), "{f}");
                break;
            }
            assert!(Instant::now() < deadline, "{f}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let cancelled = alice
        .json(Method::DELETE, &format!("/jobs/{one},{two}"), None)
        .await
        .unwrap();
    assert_eq!(cancelled.as_array().map(Vec::len), Some(2), "{cancelled}");
    for j in cancelled.as_array().unwrap() {
        assert_eq!(j["job_state"], "CANCELED", "{j}");
    }
    let f = alice
        .json(Method::GET, &format!("/jobs/{one}/files"), None)
        .await
        .unwrap();
    assert_eq!(f[0]["file_state"], "CANCELED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_a_clear_4xx_and_nothing_is_stored() {
    let s = site().await;
    let alice = s.as_user(&s.alice);
    // No credential, an unknown token.
    let e = s
        .anonymous()
        .json(Method::GET, "/whoami", None)
        .await
        .unwrap_err();
    assert!(
        matches!(e, ServiceError::Unauthorized(ref m) if m.contains("certificate")),
        "{e}"
    );
    let e = s
        .with_token("no-such-token-0123456789")
        .json(Method::GET, "/jobs", None)
        .await
        .unwrap_err();
    assert!(matches!(e, ServiceError::Unauthorized(_)), "{e}");
    // The root answers without a credential (FTS3's client asks it first).
    assert!(s.anonymous().json(Method::GET, "/", None).await.is_ok());

    let raw = |body: Vec<u8>| {
        let c = s.as_user(&s.alice);
        async move {
            c.request(Method::POST, "/jobs", Some((body, "application/json")))
                .await
                .unwrap()
        }
    };
    let (status, body) = raw(b"{\"files\": [".to_vec()).await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    let msg: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        msg["message"].as_str().unwrap().contains("not JSON"),
        "{msg}"
    );
    let (status, _) = raw(
        json!({"files": [{"sources": "gsiftp://a/x", "destinations": ["gsiftp://b/y"]}]})
            .to_string()
            .into_bytes(),
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = raw(vec![b' '; 40 << 20]).await;
    assert_eq!(status, 413, "a body over the limit");
    // Paths on the service's host are not for users.
    let (status, body) = raw(
        json!({"files": [{"sources": ["file:///etc/shadow"], "destinations": ["gsiftp://b/y"]}]})
            .to_string()
            .into_bytes(),
    )
    .await;
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).contains("service's host"));

    // SQL-shaped strings are data: stored and read back as sent.
    let nasty = "ftp://127.0.0.1:1/x'); DROP TABLE jobs; --";
    let job = alice
        .json(
            Method::POST,
            "/jobs",
            Some(&json!({"files": [{"sources": [nasty], "destinations": ["ftp://127.0.0.1:1/\" OR 1=1 --"],
                                    "metadata": {"k": "'; DELETE FROM files; --"}}],
                         "params": {"retry": -1, "job_metadata": "1; DROP TABLE delegations"}})),
        )
        .await
        .unwrap();
    let id = job["job_id"].as_str().unwrap();
    let files = alice
        .json(Method::GET, &format!("/jobs/{id}/files"), None)
        .await
        .unwrap();
    assert_eq!(files[0]["source_surl"], nasty);
    assert_eq!(files[0]["file_metadata"]["k"], "'; DELETE FROM files; --");
    let e = alice
        .json(Method::GET, "/jobs/x'%20OR%20'1'='1", None)
        .await
        .unwrap_err();
    assert!(matches!(e, ServiceError::NotFound(_)), "{e}");

    // Only the one good job was stored.
    let all = alice
        .json(
            Method::GET,
            "/jobs?state_in=SUBMITTED,ACTIVE,FINISHED,FINISHEDDIRTY,FAILED,CANCELED",
            None,
        )
        .await
        .unwrap();
    assert_eq!(all.as_array().map(Vec::len), Some(1), "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_untrusted_and_mismatched_credentials_are_refused() {
    let s = site().await;
    // An expired user certificate's proxy.
    let mut spec = IssueSpec::user("/O=Test/CN=Old", 1);
    spec.not_before = -7200;
    spec.not_after = -60;
    let old = s.ca.issue(&spec).unwrap();
    let key = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
    // sign_proxy keeps the proxy within its issuer's life: it is as expired as its user's.
    let expired = ferry_gsi::proxy::sign_proxy(&old, &key, &ferry_gsi::ProxyOptions::default())
        .expect("a proxy of an expired certificate");
    let expired = Credential::new(expired, key, vec![old.cert.clone()]).unwrap();
    let c = ServiceClient::new(&s.url, &s.trust, Some(expired), None).unwrap();
    let e = c.json(Method::GET, "/whoami", None).await.unwrap_err();
    assert!(
        matches!(e, ServiceError::Unauthorized(ref m) if m.contains("not accepted")),
        "{e}"
    );
    // A CA the service does not trust.
    let other = CertificateAuthority::create("/O=Else/CN=Else CA", 2, 2048).unwrap();
    let stranger = other
        .issue(&IssueSpec::user("/O=Test/CN=Alice", 1))
        .unwrap();
    let c = ServiceClient::new(&s.url, &s.trust, Some(proxy_of(&stranger)), None).unwrap();
    let e = c.json(Method::GET, "/whoami", None).await.unwrap_err();
    assert!(
        matches!(e, ServiceError::Unauthorized(ref m) if m.contains("not accepted")),
        "{e}"
    );

    // A delegation answered with a proxy for another key, and one with no request.
    let alice = s.as_user(&s.alice);
    let id = alice.json(Method::GET, "/whoami", None).await.unwrap()["delegation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _) = alice
        .request(
            Method::PUT,
            &format!("/delegation/{id}/credential"),
            Some((b"x".to_vec(), "text/plain")),
        )
        .await
        .unwrap();
    assert_eq!(status, 400, "no request outstanding");
    let (status, _) = alice
        .request(Method::GET, &format!("/delegation/{id}/request"), None)
        .await
        .unwrap();
    assert_eq!(status, 200);
    let (_, other_req) = ferry_service::delegation::new_request().unwrap();
    let signed = ferry_service::delegation::sign_request(
        &s.alice,
        other_req.as_bytes(),
        Duration::from_secs(3600),
    )
    .unwrap();
    let (status, body) = alice
        .request(
            Method::PUT,
            &format!("/delegation/{id}/credential"),
            Some((signed, "application/x-pem-file")),
        )
        .await
        .unwrap();
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("not for the key"));
    // A job whose gsiftp ends need the user's credential fails saying so when none is delegated.
    let job = alice
        .json(Method::POST, "/jobs", Some(&json!({"files": [{"sources": ["gsiftp://127.0.0.1:1/x"], "destinations": ["gsiftp://127.0.0.1:1/y"]}]})))
        .await
        .unwrap();
    let id = job["job_id"].as_str().unwrap();
    wait_state(&alice, id, "FAILED").await;
    let f = alice
        .json(Method::GET, &format!("/jobs/{id}/files"), None)
        .await
        .unwrap();
    assert!(
        f[0]["reason"].as_str().unwrap().contains("no credential"),
        "{f}"
    );
}

/// Where scripts/install-deps puts schemathesis (PyPI).
const SCHEMATHESIS: &str = "/opt/ferry-test/schemathesis/bin/st";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_and_no_answer_outside_the_openapi_document() {
    if !std::path::Path::new(SCHEMATHESIS).exists() {
        assert!(
            std::env::var_os("FERRY_REQUIRE_FTPD").is_none(),
            "schemathesis is not in {SCHEMATHESIS}, though scripts/install-deps ran as root"
        );
        eprintln!(
            "skipping: {SCHEMATHESIS} is missing (bash scripts/install-deps as root installs it)"
        );
        return;
    }
    let s = site().await;
    let url = format!("{}/openapi.json", s.url);
    // Every check but use_after_free: a cancelled job stays readable, as in FTS3 (DELETE
    // /jobs/ID cancels; it does not remove).
    // Its cache goes to the working directory: a temporary one, not the source tree.
    let cwd = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(SCHEMATHESIS)
        .current_dir(cwd.path())
        .args(["run", &url, "--tls-verify", "false", "--checks", "all"])
        .args(["--exclude-checks", "use_after_free", "--max-examples", "25"])
        .args(["-H", &format!("Authorization: Bearer {ADMIN_TOKEN}")])
        .args(["--seed", "20261126"])
        .env("NO_COLOR", "1")
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found problems:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("passed"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_sites_page_cannot_submit_or_reset_a_delegation_and_fts3s_calls_still_work() {
    let s = site().await;
    let alice = s.as_user(&s.alice);
    let own = format!("https://localhost:{}", s.port);
    let body = || Some((doomed(-1, 0).to_string().into_bytes(), "application/json"));
    // A page elsewhere, through Alice's browser (which presents her certificate): refused,
    // whichever way the browser says so.
    for browser in [
        vec![
            ("origin", "https://evil.example"),
            ("sec-fetch-site", "cross-site"),
        ],
        vec![("sec-fetch-site", "cross-site")],
        vec![("sec-fetch-site", "same-site")],
        vec![("origin", "https://evil.example")],
        vec![("origin", "null")],
    ] {
        let (status, answer) = alice
            .request_with_headers(Method::POST, "/jobs", body(), &browser)
            .await
            .unwrap();
        assert_eq!(
            status,
            403,
            "{browser:?}: {}",
            String::from_utf8_lossy(&answer)
        );
    }
    // A form posts text/plain (no CORS preflight): not JSON to this API, whatever it holds.
    for content_type in ["text/plain", "application/x-www-form-urlencoded"] {
        let (status, answer) = alice
            .request(
                Method::POST,
                "/jobs",
                Some((doomed(-1, 0).to_string().into_bytes(), content_type)),
            )
            .await
            .unwrap();
        assert_eq!(
            status,
            415,
            "{content_type}: {}",
            String::from_utf8_lossy(&answer)
        );
    }
    let jobs = alice
        .json(Method::GET, "/jobs?state_in=SUBMITTED,ACTIVE,FAILED", None)
        .await
        .unwrap();
    assert_eq!(jobs, json!([]), "nothing was queued");

    // The delegation request (GET, as FTS3 asks it) replaces the pending key: not for
    // another site's page either, and the key stays as it was.
    let id = alice.json(Method::GET, "/whoami", None).await.unwrap()["delegation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let request = format!("/delegation/{id}/request");
    let (status, _) = alice
        .request_with_headers(
            Method::GET,
            &request,
            None,
            &[("sec-fetch-site", "cross-site")],
        )
        .await
        .unwrap();
    assert_eq!(status, 403);
    let (status, _) = alice
        .request_with_headers(
            Method::GET,
            &request,
            None,
            &[("origin", "https://evil.example")],
        )
        .await
        .unwrap();
    assert_eq!(status, 403);
    let (status, _) = alice
        .request(
            Method::PUT,
            &format!("/delegation/{id}/credential"),
            Some((b"x".to_vec(), "text/plain")),
        )
        .await
        .unwrap();
    assert_eq!(
        status, 400,
        "no request outstanding: the refused ones made none"
    );

    // FTS3's client as it calls (no browser headers; its own Content-Type on submissions;
    // the signed proxy sent without one) and the service's own pages are served.
    assert!(alice.delegate_if_needed().await.unwrap());
    let (status, answer) = alice
        .request_with_headers(
            Method::POST,
            "/jobs",
            body(),
            &[("origin", own.as_str()), ("sec-fetch-site", "same-origin")],
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let (status, answer) = alice
        .request(
            Method::POST,
            "/jobs",
            Some((
                doomed(-1, 0).to_string().into_bytes(),
                "application/json; charset=utf-8",
            )),
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let (status, _) = alice.request(Method::GET, &request, None).await.unwrap();
    assert_eq!(status, 200);
    // A link from elsewhere to the dashboard still opens it (reading changes nothing).
    let (status, _) = alice
        .request_with_headers(
            Method::GET,
            "/dashboard",
            None,
            &[("sec-fetch-site", "cross-site")],
        )
        .await
        .unwrap();
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_each_user_only_their_own_links_and_decisions() {
    let s = site().await;
    let alice = s.as_user(&s.alice);
    let bob = s.with_token(BOB_TOKEN);
    let admin = s.with_token(ADMIN_TOKEN);
    let to = |host: &str| {
        json!({"files": [{"sources": [format!("ftp://{host}:1/x")], "destinations": [format!("ftp://{host}:1/y")]}],
               "params": {"retry": -1, "overwrite": true}})
    };
    for (c, host) in [(&alice, "127.0.0.1"), (&bob, "127.0.0.2")] {
        let job = c
            .json(Method::POST, "/jobs", Some(&to(host)))
            .await
            .unwrap();
        wait_state(c, job["job_id"].as_str().unwrap(), "FAILED").await;
    }
    let alices = "ftp://127.0.0.1:1 → ftp://127.0.0.1:1";
    let bobs = "ftp://127.0.0.2:1 → ftp://127.0.0.2:1";
    // The optimizer's decisions on each link, as the scheduler keeps them.
    let db_path = s.dir.path().join("db/queue.db");
    let db = tokio::task::spawn_blocking(move || {
        ferry_service::db::Db::open(db_path.to_str().unwrap(), "dashboard-test")
    })
    .await
    .unwrap()
    .unwrap();
    for link in [alices, bobs] {
        db.insert_decision(ferry_service::db::DecisionRow {
            link: link.into(),
            time: 1,
            from: 4,
            to: 5,
            throughput: 1.0,
            reason: "more pays".into(),
        })
        .await
        .unwrap();
    }
    let links_of = |state: &Value, key: &str| -> Vec<String> {
        let mut l: Vec<String> = state[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["link"].as_str().unwrap().to_owned())
            .collect();
        l.sort();
        l.dedup();
        l
    };
    // The counts the dashboard reads are folded once a second.
    let deadline = Instant::now() + Duration::from_secs(10);
    let all = loop {
        let all = admin
            .json(Method::GET, "/dashboard/state", None)
            .await
            .unwrap();
        if links_of(&all, "links").len() == 2 || Instant::now() > deadline {
            break all;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(links_of(&all, "links"), vec![alices, bobs], "{all}");
    assert_eq!(links_of(&all, "decisions"), vec![alices, bobs], "{all}");
    for (c, own) in [(&alice, alices), (&bob, bobs)] {
        let mine = c.json(Method::GET, "/dashboard/state", None).await.unwrap();
        assert_eq!(links_of(&mine, "links"), vec![own], "{mine}");
        assert_eq!(links_of(&mine, "decisions"), vec![own], "{mine}");
        assert_eq!(mine["links"][0]["failed"], 1, "{mine}");
        let files = mine["files"].as_array().unwrap();
        assert!(files.iter().all(|f| f["link"] == own), "{mine}");
    }
}

#[test]
fn the_submission_fuzzers_seeds_are_read_as_the_api_reads_them() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/submit_parse");
    // The committed seeds only: a fuzzing run leaves its own inputs beside them.
    let mut seeds: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("seed-"))
        })
        .collect();
    seeds.sort();
    assert!(seeds.len() >= 4, "{seeds:?}");
    for seed in seeds {
        let body = std::fs::read(&seed).unwrap();
        let name = seed.file_name().unwrap().to_string_lossy().into_owned();
        let parsed = ferry_service::submit::parse_body(&body, "/CN=u", Defaults::default(), true);
        match parsed {
            Ok((job, _)) => {
                assert!(!name.contains("refused"), "{name} was accepted");
                for f in &job.files {
                    let (src, dst) = (
                        ferry_client::Location::parse(&f.source).unwrap(),
                        ferry_client::Location::parse(&f.dest).unwrap(),
                    );
                    assert_eq!(f.link, ferry_service::submit::link(&src, &dst), "{name}");
                }
            }
            Err(e) => assert!(name.contains("refused"), "{name}: {e}"),
        }
    }
}
