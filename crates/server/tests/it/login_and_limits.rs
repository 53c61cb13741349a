//! Logins (password file and anonymous), what a session may do before and after, connection
//! limits and control-channel timeouts.

use crate::common;

use common::*;
use ferry_client::{ClientError, ControlClient};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_before_login_are_refused_with_530() {
    let srv = TestServer::start().await;
    srv.write("f.txt", b"hello");
    let mut c = srv.connect().await;
    for line in [
        "PWD",
        "CWD /",
        "TYPE I",
        "MODE E",
        "PASV",
        "EPSV",
        "PORT 127,0,0,1,4,1",
        "RETR f.txt",
        "STOR g.txt",
        "LIST",
        "NLST",
        "MLSD",
        "MLST f.txt",
        "SIZE f.txt",
        "MDTM f.txt",
        "MKD d",
        "DELE f.txt",
        "RNFR f.txt",
        "CKSM MD5 0 -1 f.txt",
        "SITE CHMOD 777 f.txt",
        "SITE WHOAMI",
        "STAT",
    ] {
        let r = cmd(&mut c, line).await;
        assert_eq!(r.code, 530, "'{line}' before login: {r}");
    }
    // A few are allowed before login.
    expect(&mut c, "NOOP", 200).await;
    expect(&mut c, "FEAT", 211).await;
    expect(&mut c, "HELP", 214).await;
    assert_eq!(srv.read("f.txt"), b"hello");
    assert!(!srv.path("g.txt").exists() && !srv.path("d").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_refused_with_530_and_a_retry_with_the_right_one_works() {
    let srv = TestServer::start().await;
    let mut c = srv.connect().await;
    expect(&mut c, &format!("USER {USER}"), 331).await;
    let r = expect(&mut c, "PASS not-the-password", 530).await;
    assert!(r.text().contains("Login incorrect"), "{r}");
    expect(&mut c, "PWD", 530).await;
    expect(&mut c, "USER mallory", 331).await;
    expect(&mut c, &format!("PASS {PASSWORD}"), 530).await;
    expect(&mut c, &format!("PASS {PASSWORD}"), 503).await;
    expect(&mut c, &format!("USER {USER}"), 331).await;
    expect(&mut c, &format!("PASS {PASSWORD}"), 230).await;
    expect(&mut c, "PWD", 257).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_is_refused_when_anonymous_logins_are_off() {
    let srv = TestServer::start_with(|c| c.anonymous = false).await;
    let mut c = srv.connect().await;
    expect(&mut c, "USER anonymous", 331).await;
    expect(&mut c, "PASS guest@example.org", 530).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_login_is_read_only() {
    let srv = TestServer::start().await;
    let data = random_bytes(10_000, 7);
    srv.write("pub.bin", &data);
    srv.write("dir/inner.txt", b"x");
    let mut c = srv.login_anonymous().await;
    // Reading works.
    let (got, _) = client_get(&mut c, "pub.bin", 2).await;
    assert_eq!(got, data);
    expect(&mut c, "SIZE pub.bin", 213).await;
    // Every change is refused with 550.
    for line in [
        "MKD newdir",
        "DELE pub.bin",
        "RMD dir",
        "RNFR pub.bin",
        "SITE CHMOD 600 pub.bin",
        "SITE UTIME 20200101000000 pub.bin",
        "MFMT 20200101000000 pub.bin",
        "SITE SYMLINK pub.bin link",
        "SITE RDEL dir",
    ] {
        let r = cmd(&mut c, line).await;
        assert_eq!(r.code, 550, "'{line}' as anonymous: {r}");
    }
    for line in ["STOR up.bin", "APPE pub.bin", "STOU", "ESTO A 0 pub.bin"] {
        pasv(&mut c).await;
        let r = cmd(&mut c, line).await;
        assert_eq!(r.code, 550, "'{line}' as anonymous: {r}");
    }
    let err = client_put(&mut c, b"nope", "up2.bin", 1).await;
    assert!(
        matches!(&err, Err(ClientError::Refused { reply, .. }) if reply.code == 550),
        "MODE E put as anonymous: {err:?}"
    );
    expect(&mut c, "NOOP", 200).await;
    assert_eq!(srv.read("pub.bin"), data);
    assert!(srv.path("dir/inner.txt").exists());
    for name in ["newdir", "up.bin", "up2.bin", "link"] {
        assert!(!srv.path(name).exists(), "{name} must not exist");
    }
    assert_eq!(std::fs::read_dir(&srv.root).unwrap().count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_write_lets_anonymous_users_change_files() {
    let srv = TestServer::start_with(|c| c.anonymous_write = true).await;
    srv.write("old.txt", b"old");
    let mut c = srv.login_anonymous().await;
    expect(&mut c, "MKD newdir", 257).await;
    expect(&mut c, "DELE old.txt", 250).await;
    let data = random_bytes(50_000, 8);
    client_put(&mut c, &data, "newdir/up.bin", 2)
        .await
        .expect("anonymous put");
    assert_eq!(srv.read("newdir/up.bin"), data);
    assert!(!srv.path("old.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_after_login_is_refused_with_503() {
    let srv = TestServer::start().await;
    let mut c = srv.login().await;
    let r = expect(&mut c, "USER anonymous", 503).await;
    assert!(r.text().contains("already logged in"), "{r}");
    expect(&mut c, "PASS x", 503).await;
    let r = expect(&mut c, "SITE WHOAMI", 200).await;
    assert_eq!(r.text(), USER, "still the first user");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_get_421_and_a_freed_slot_is_reused() {
    let srv = TestServer::start_with(|c| c.connections_max = 2).await;
    let mut first = srv.connect().await;
    let _second = srv.login().await;
    match within("third connect", ControlClient::connect(srv.addr)).await {
        Err(ClientError::Refused { reply, .. }) => {
            assert_eq!(reply.code, 421, "{reply}")
        }
        other => panic!("third connection should get 421, got {other:?}"),
    }
    expect(&mut first, "QUIT", 221).await;
    drop(first);
    // The slot frees when the server notices the close; retry until it has.
    let mut c = within("a connection after QUIT", async {
        loop {
            match ControlClient::connect(srv.addr).await {
                Ok(c) => break c,
                Err(ClientError::Refused { reply, .. }) if reply.code == 421 => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await
                }
                Err(e) => panic!("connect: {e}"),
            }
        }
    })
    .await;
    c.login(USER, PASSWORD).await.expect("login in freed slot");
    expect(&mut c, "NOOP", 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_does_not_log_in_gets_421_and_is_closed() {
    let srv = TestServer::start_with(|c| c.control_preauth_timeout = 1).await;
    let mut c = srv.connect().await;
    let r = next_reply(&mut c).await;
    assert_eq!(r.code, 421, "{r}");
    match within("close after 421", c.read_reply()).await {
        Err(ClientError::Closed) | Err(ClientError::Io(_)) => {}
        other => panic!("connection should be closed, got {other:?}"),
    }
    // USER without PASS is not a login either.
    let mut c = srv.connect().await;
    expect(&mut c, &format!("USER {USER}"), 331).await;
    let r = next_reply(&mut c).await;
    assert_eq!(r.code, 421, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_trickling_bytes_without_logging_in_is_still_closed() {
    // control_preauth_timeout is "seconds a connection has to log in": a client that sends a
    // byte now and then, never a whole command, must not hold its connection forever.
    let srv = TestServer::start_with(|c| c.control_preauth_timeout = 1).await;
    let mut raw = RawControl::connect(srv.addr).await;
    for b in b"NOOPxxxxxxxx" {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        raw.send_bytes(&[*b]).await;
    }
    // Complete the line: a session still open answers it (500); a closed one cannot.
    raw.send_bytes(b"\r\n").await;
    let r = raw.read_reply().await;
    assert!(
        r.as_ref().is_none_or(|r| r.code == 421),
        "expected 421 or a close, got {r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_timeout_does_not_apply_after_login() {
    let srv = TestServer::start_with(|c| c.control_preauth_timeout = 1).await;
    let mut c = srv.login().await;
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    expect(&mut c, "NOOP", 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_logged_in_session_gets_421_and_is_closed() {
    let srv = TestServer::start_with(|c| c.control_idle_timeout = 1).await;
    let mut c = srv.login().await;
    let r = next_reply(&mut c).await;
    assert_eq!(r.code, 421, "{r}");
    match within("close after 421", c.read_reply()).await {
        Err(ClientError::Closed) | Err(ClientError::Io(_)) => {}
        other => panic!("connection should be closed, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn site_status_counts_the_sessions_and_transfers_of_the_whole_server() {
    let srv = TestServer::start().await;
    srv.write("f.txt", b"hello");
    let mut a = srv.login().await;
    let _b = srv.login().await;
    let r = ok(&mut a, "SITE STATUS").await;
    assert!(r.text().contains("sessions 2 of "), "{r}");
    assert!(r.text().contains("transfers 0 running"), "{r}");
    assert!(r.text().contains("transfers 0 started"), "{r}");
    let (got, _) = client_get(&mut a, "f.txt", 1).await;
    assert_eq!(got, b"hello");
    let r = ok(&mut a, "SITE STATUS").await;
    assert!(r.text().contains("transfers 0 running"), "{r}");
    assert!(r.text().contains("transfers 1 started"), "{r}");
}

/// One upload takes at most `data_streams_max` data connections; the rest are closed as they
/// come (the reviewer's 19 983 idle connections held a descriptor and a buffer each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_takes_no_more_data_connections_than_its_bound() {
    use tokio::io::AsyncReadExt;
    let srv = TestServer::start_with(|c| c.data_streams_max = 4).await;
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let addr = pasv(&mut c).await;
    let mut reads = tokio::task::JoinSet::new();
    for _ in 0..10 {
        let mut conn = data_connect(addr).await;
        reads.spawn(async move {
            let mut b = [0u8; 1];
            let _ = conn.read(&mut b).await;
            conn
        });
    }
    start_transfer(&mut c, "STOR many.bin").await;
    for closed in 0..6 {
        within(
            &format!("connection {closed} past the bound to close"),
            reads.join_next(),
        )
        .await
        .expect("a reader")
        .expect("reader task");
    }
    // The four taken are still held for the upload; nothing else closed.
    assert_eq!(reads.len(), 4);
    assert!(
        reads.try_join_next().is_none(),
        "a fifth connection was closed"
    );
    let r = cmd(&mut c, "ABOR").await;
    assert!(r.code == 426 || r.code == 226 || r.code == 225, "{r}");
}
