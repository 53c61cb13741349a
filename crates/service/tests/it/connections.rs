//! The REST API's connections under a flood: connections that never authenticate (idle, or
//! stopped mid-handshake) are closed within seconds, one address gets a share, and clients that
//! authenticate keep getting in.

use std::time::{Duration, Instant};

use ferry_service::client::Method;
use ferry_service::ConnectionLimits;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::api::site_with;

/// A TCP connection to `port` from the loopback address `from` (127.0.0.x: another address
/// than the real client's, as a flood from elsewhere would be).
async fn idle_from(from: &str, port: u16) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(format!("{from}:0").parse().unwrap())?;
    socket.connect(([127, 0, 0, 1], port).into()).await
}

/// Whether the server has closed `conn` (reads its end) within `within`.
async fn closed_within(conn: &mut (impl AsyncRead + Unpin), within: Duration) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(within, conn.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eleven_hundred_idle_connections_do_not_lock_out_a_real_client() {
    let s = site_with(false, None).await;
    let started = Instant::now();
    let mut flood = Vec::new();
    for _ in 0..1100 {
        // A server that stopped accepting leaves connects waiting in its backlog.
        match tokio::time::timeout(Duration::from_secs(3), idle_from("127.0.0.2", s.port)).await {
            Ok(Ok(c)) => flood.push(c),
            Ok(Err(e)) => {
                eprintln!(
                    "skipping: cannot open 1100 connections ({e}; raise `ulimit -n` above 2300)"
                );
                return;
            }
            Err(_) => break,
        }
    }
    // A real client gets in at once and is answered.
    let alice = s.as_user(&s.alice);
    let me = tokio::time::timeout(
        Duration::from_secs(10),
        alice.json(Method::GET, "/whoami", None),
    )
    .await
    .expect("the real client is answered while the flood holds its connections")
    .unwrap();
    assert_eq!(me["dn"][0], "/O=Test/CN=Alice");
    // As many as the address may hold waited for their handshake; the rest were closed.
    let mut closed = 0;
    for c in flood.iter_mut() {
        if closed_within(c, Duration::from_millis(200)).await {
            closed += 1;
        }
    }
    let defaults = ConnectionLimits::default();
    assert!(
        closed >= 1100 - defaults.per_address_unauthenticated,
        "only {closed} of {} idle connections from one address were closed",
        flood.len()
    );
    // The flood's survivors are gone once the handshake's time is up.
    for c in flood.iter_mut() {
        assert!(
            closed_within(c, defaults.handshake + Duration::from_secs(3)).await,
            "an idle connection outlived the handshake's deadline"
        );
    }
    assert!(started.elapsed() < defaults.handshake + Duration::from_secs(20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_connections_get_seconds_and_a_share_and_make_room_for_real_clients() {
    let limits = ConnectionLimits {
        total: 16,
        unauthenticated: 8,
        per_address: 64,
        per_address_unauthenticated: 64,
        handshake: Duration::from_secs(2),
        first_request: Duration::from_secs(2),
        unauthenticated_for: Duration::from_secs(3),
        idle: Duration::from_secs(30),
    };
    let s = site_with(false, Some(limits)).await;
    // Idle connections from many addresses fill the unauthenticated share; each new one
    // pushes out the oldest that has not authenticated.
    let mut flood = Vec::new();
    for i in 0..40 {
        flood.push(
            idle_from(&format!("127.0.1.{}", i + 1), s.port)
                .await
                .unwrap(),
        );
    }
    let alice = s.as_user(&s.alice);
    let me = tokio::time::timeout(
        Duration::from_secs(1),
        alice.json(Method::GET, "/whoami", None),
    )
    .await
    .expect("a client with a certificate is answered at once")
    .unwrap();
    assert_eq!(me["dn"][0], "/O=Test/CN=Alice");
    // A token client, anonymous at the handshake, authenticates with its first request.
    let bob = s.with_token(crate::api::BOB_TOKEN);
    let me = tokio::time::timeout(
        Duration::from_secs(1),
        bob.json(Method::GET, "/whoami", None),
    )
    .await
    .expect("a token client is answered at once")
    .unwrap();
    assert_eq!(me["dn"][0], "/O=Test/CN=Bob");
    // What is left of the flood is gone once the handshake's time is up.
    for c in flood.iter_mut() {
        assert!(closed_within(c, Duration::from_secs(4)).await);
    }

    // A TLS client that completes its handshake and then says nothing is closed once the
    // first request's time is up; one that asks only what needs no credential, once the
    // time to authenticate is.
    let mut silent = tls_from("127.0.2.1", s.port).await;
    let mut chatty = tls_from("127.0.2.2", s.port).await;
    let started = Instant::now();
    let mut answers = 0;
    let closed = loop {
        let asked = chatty
            .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await;
        let mut buf = vec![0u8; 4096];
        match tokio::time::timeout(Duration::from_secs(2), chatty.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 && asked.is_ok() => answers += 1,
            _ => break started.elapsed(),
        }
        if started.elapsed() > Duration::from_secs(15) {
            panic!("an unauthenticated connection lived on ({answers} answers)");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(answers >= 1, "it was served while it had time");
    assert!(closed_within(&mut silent, Duration::from_millis(100)).await);
    assert!(
        closed < limits.unauthenticated_for + limits.first_request + Duration::from_secs(3),
        "closed after {closed:?}"
    );
}

/// A TLS connection (no client certificate) to `port` from `from`, its handshake done.
async fn tls_from(from: &str, port: u16) -> tokio_openssl::SslStream<TcpStream> {
    use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
    let tcp = idle_from(from, port).await.unwrap();
    let mut b = SslConnector::builder(SslMethod::tls()).unwrap();
    b.set_verify(SslVerifyMode::NONE);
    let ssl = b
        .build()
        .configure()
        .unwrap()
        .verify_hostname(false)
        .into_ssl("localhost")
        .unwrap();
    let mut tls = tokio_openssl::SslStream::new(ssl, tcp).unwrap();
    std::pin::Pin::new(&mut tls).connect().await.unwrap();
    tls
}
