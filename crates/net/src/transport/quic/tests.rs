use super::*;
use std::net::{IpAddr, Ipv4Addr};

use crate::PortRange;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 4093) as u8).collect()
}

fn listen(options: &str) -> DataListener {
    Quic.listen(Bind {
        ip: LOOPBACK,
        range: None,
        tuning: SocketTuning::default(),
        options,
    })
    .unwrap()
}

/// A DCAU N connection to `addr`, handshake done.
async fn dial(addr: SocketAddr, options: &str) -> DataConn {
    Quic.connect(Dial {
        addr,
        tuning: SocketTuning::default(),
        options,
    })
    .await
    .unwrap()
    .establish(true, None)
    .await
    .unwrap()
}

/// The next DCAU N connection of `listener`, handshake done.
async fn take(listener: &DataListener) -> DataConn {
    listener
        .accept()
        .await
        .unwrap()
        .establish(false, None)
        .await
        .unwrap()
}

#[test]
fn options_name_the_controller_and_the_window_and_nothing_else() {
    let o = Options::parse("").unwrap();
    assert_eq!(o.congestion, Controller::Bbr);
    assert_eq!(o.window(&SocketTuning::default()), DEFAULT_WINDOW);
    let o = Options::parse("congestion=cubic;window=33554432").unwrap();
    assert_eq!(
        (o.congestion, o.window),
        (Controller::Cubic, Some(32 << 20))
    );
    assert_eq!(
        Options::parse("congestion=NewReno").unwrap().congestion,
        Controller::NewReno
    );
    // A buffer size asked for sets the window, but never below 1 MiB.
    let tuned = |b| SocketTuning {
        recv_buffer: Some(b),
        ..Default::default()
    };
    assert_eq!(Options::parse("").unwrap().window(&tuned(4096)), MIN_WINDOW);
    assert_eq!(
        Options::parse("").unwrap().window(&tuned(100 << 20)),
        100 << 20
    );
    assert!(Options::parse("parallel=streams").unwrap().shared);
    assert!(!Options::parse("parallel=Connections").unwrap().shared);
    assert!(!Options::parse("").unwrap().shared);
    assert_eq!(Options::parse("").unwrap().max_payload, 8952);
    assert_eq!(Options::parse("mtu=1452").unwrap().max_payload, 1452);
    assert_eq!(Options::parse("mtu=65507").unwrap().max_payload, 65507);
    for bad in [
        "mtu=1199",
        "mtu=65508",
        "mtu=jumbo",
        "parallel=yes",
        "congestion=vegas",
        "window=big",
        "window=4096",
        "mss=9000",
        "congestion",
    ] {
        let e = Quic.accept_options(bad).unwrap_err().to_string();
        assert!(e.starts_with("quic driver: "), "{bad}: {e}");
    }
}

#[tokio::test]
async fn bytes_cross_both_ways_and_a_dropped_sender_still_delivers_them_all() {
    let listener = listen("");
    let addr = listener.local_addr().unwrap();
    let data = pattern(24 << 20);
    // The connecting side sends: everything written before the drop arrives, then EOF.
    let sent = data.clone();
    let sender = tokio::spawn(async move {
        let mut c = dial(addr, "").await;
        c.write_all(&sent).await.unwrap();
        drop(c);
    });
    let mut a = take(&listener).await;
    assert_eq!(a.peer_addr().unwrap().ip(), LOOPBACK);
    let mut got = Vec::new();
    a.read_to_end(&mut got).await.unwrap();
    sender.await.unwrap();
    assert!(
        got == data,
        "{} of {} bytes, or different",
        got.len(),
        data.len()
    );

    // The connecting side receives (MODE E's receiver may be the one that connects): the
    // preamble makes the connection known before it carries data.
    let receiver = tokio::spawn(async move {
        let mut c = dial(addr, "congestion=cubic").await;
        let mut got = Vec::new();
        c.read_to_end(&mut got).await.unwrap();
        got
    });
    let mut a = take(&listener).await;
    let small = pattern(300_000);
    a.write_all(&small).await.unwrap();
    a.shutdown().await.unwrap();
    drop(a);
    assert!(receiver.await.unwrap() == small);
}

#[tokio::test]
async fn garbage_datagrams_are_dropped_and_a_wrong_preamble_is_refused_by_name() {
    let listener = listen("");
    let addr = listener.local_addr().unwrap();
    let junk = std::net::UdpSocket::bind((LOOPBACK, 0)).unwrap();
    for n in [1usize, 20, 1200, 1500] {
        // Long-header-looking and random bytes alike.
        let mut d = pattern(n);
        d[0] = 0xc3;
        junk.send_to(&d, addr).unwrap();
        junk.send_to(&pattern(n)[..], addr).unwrap();
    }
    // A real QUIC peer that speaks something else on its stream: the transfer that takes it
    // fails with the reason, and the peer is told it.
    let o = Options::parse("").unwrap();
    let ep = endpoint(
        udp::listening(LOOPBACK, None, &SocketTuning::default(), Buffers::default()).unwrap(),
        None,
        datagrams::DEFAULT_MAX_PAYLOAD,
    )
    .unwrap();
    let config = client_config(&o, &SocketTuning::default(), None, &Refusal::default()).unwrap();
    let stranger = tokio::spawn(async move {
        let conn = ep.connect_with(config, addr, "x").unwrap().await.unwrap();
        let (mut s, _r) = conn.open_bi().await.unwrap();
        s.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
        conn.closed().await
    });
    let refused = listener
        .accept()
        .await
        .unwrap()
        .establish(false, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("not a ferry data connection"), "{refused}");
    let why = stranger.await.unwrap();
    assert!(
        why.to_string().contains("not a ferry data connection"),
        "{why}"
    );
    // The garbage made no connection: the next one is a real peer's.
    let client = tokio::spawn(async move {
        let mut c = dial(addr, "").await;
        c.write_all(b"hello").await.unwrap();
    });
    let mut a = take(&listener).await;
    let mut got = Vec::new();
    a.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"hello");
    client.await.unwrap();
}

#[tokio::test]
async fn a_peer_gone_mid_transfer_is_an_error_not_a_hang_or_an_end() {
    let listener = listen("");
    let addr = listener.local_addr().unwrap();
    let (started, reading) = tokio::sync::oneshot::channel();
    let reader = tokio::spawn(async move {
        let mut a = take(&listener).await;
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0;
        let mut started = Some(started);
        loop {
            match a.read(&mut buf).await {
                Ok(0) => return Ok(n),
                Ok(k) => {
                    n += k;
                    if let Some(s) = started.take() {
                        let _ = s.send(());
                    }
                }
                Err(e) => return Err(e),
            }
        }
    });
    // Built by hand (not boxed in a DataConn) to reach the connection and kill it.
    let ep = endpoint(
        udp::listening(LOOPBACK, None, &SocketTuning::default(), Buffers::default()).unwrap(),
        None,
        datagrams::DEFAULT_MAX_PAYLOAD,
    )
    .unwrap();
    let mut c = QuicStream {
        local: ep.local_addr().unwrap(),
        state: State::Dialing(ep),
        peer: addr,
        options: Options::parse("").unwrap(),
        tuning: SocketTuning::default(),
        secured: Established::Plain,
        more: None,
    };
    c.establish(true, None).await.unwrap();
    c.write_all(&pattern(1 << 20)).await.unwrap();
    reading.await.unwrap();
    // The sending process dies: its connection closes with an error code, not a FIN.
    c.open().unwrap().conn.close(7u8.into(), b"killed");
    let got = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("the reader hung")
        .unwrap();
    assert!(
        got.is_err(),
        "a cut connection read as a clean end: {got:?}"
    );
}

#[tokio::test]
async fn a_port_range_is_honoured_and_a_second_listener_takes_another_port() {
    let range = Some(PortRange {
        lo: 42300,
        hi: 42309,
    });
    let a = Quic
        .listen(Bind {
            ip: LOOPBACK,
            range,
            tuning: SocketTuning::default(),
            options: "",
        })
        .unwrap();
    let b = Quic
        .listen(Bind {
            ip: LOOPBACK,
            range,
            tuning: SocketTuning::default(),
            options: "",
        })
        .unwrap();
    let (pa, pb) = (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    );
    assert!((42300..=42309).contains(&pa) && (42300..=42309).contains(&pb) && pa != pb);
}

/// `bind=` with a session key of 32 bytes `b`.
fn bind(b: u8) -> String {
    format!("bind={}", format!("{b:02x}").repeat(32))
}

#[tokio::test]
async fn a_session_key_binds_each_connection_and_any_other_peer_is_refused_by_both_ends() {
    let key = bind(0x5a);
    let listener = listen(&key);
    let addr = listener.local_addr().unwrap();
    let dialer_key = key.clone();
    let client = tokio::spawn(async move {
        let mut c = dial(addr, &dialer_key).await;
        c.write_all(b"bound").await.unwrap();
    });
    let mut a = take(&listener).await;
    let mut got = Vec::new();
    a.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"bound");
    client.await.unwrap();

    // Another session's key, none at all, or one the listener was not given: the listener
    // refuses the connection (the transfer taking it fails with the reason), the connecting
    // side hears why, and no byte of data moves.
    for (listener_opts, dialer_opts, says) in [
        (key.clone(), bind(0x5b), "does not prove this session's key"),
        (key.clone(), String::new(), "proves no session key"),
        (String::new(), key.clone(), "was not given"),
    ] {
        let listener = listen(&listener_opts);
        let addr = listener.local_addr().unwrap();
        let dialer = tokio::spawn(async move {
            let c = Quic
                .connect(Dial {
                    addr,
                    tuning: SocketTuning::default(),
                    options: &dialer_opts,
                })
                .await
                .unwrap();
            c.establish(true, None).await.map(drop)
        });
        let refused = listener
            .accept()
            .await
            .unwrap()
            .establish(false, None)
            .await
            .unwrap_err();
        assert!(
            matches!(refused, NetError::Security(_)) && refused.to_string().contains(says),
            "{refused}"
        );
        let theirs = tokio::time::timeout(Duration::from_secs(10), dialer)
            .await
            .expect("the connecting side hung")
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(theirs, NetError::Security(_)) && theirs.to_string().contains(says),
            "{theirs}"
        );
    }
}

#[tokio::test]
async fn a_listener_that_cannot_prove_the_key_is_refused_by_the_connecting_side() {
    // A QUIC peer in the middle: it takes the connection and answers as a bound listener
    // would, but its proof cannot be made for this TLS session without the key.
    let o = Options::parse("").unwrap();
    let server = server_config(&o, &SocketTuning::default(), None, &Refusal::default()).unwrap();
    let ep = endpoint(
        udp::listening(LOOPBACK, None, &SocketTuning::default(), Buffers::default()).unwrap(),
        Some(server),
        datagrams::DEFAULT_MAX_PAYLOAD,
    )
    .unwrap();
    let addr = ep.local_addr().unwrap();
    let middle = tokio::spawn(async move {
        let conn = ep.accept().await.unwrap().await.unwrap();
        let (mut send, mut recv) = conn.accept_bi().await.unwrap();
        let mut first = [0u8; 8 + 32];
        recv.read_exact(&mut first).await.unwrap();
        assert_eq!(&first[..8], binding::BOUND);
        // Its proof replayed: the roles differ, so even the peer's own bytes do not pass.
        send.write_all(binding::BOUND).await.unwrap();
        send.write_all(&first[8..]).await.unwrap();
        conn.closed().await
    });
    let e = Quic
        .connect(Dial {
            addr,
            tuning: SocketTuning::default(),
            options: &bind(0x5a),
        })
        .await
        .unwrap()
        .establish(true, None)
        .await
        .unwrap_err();
    assert!(
        matches!(e, NetError::Security(_)) && e.to_string().contains("does not prove"),
        "{e}"
    );
    drop(tokio::time::timeout(Duration::from_secs(10), middle).await);
}

#[tokio::test]
async fn forged_stateless_resets_mid_transfer_end_nothing_and_every_byte_arrives() {
    // RFC 9000 §10.3: a stateless reset is any short-header datagram whose last 16 bytes are
    // the reset token of one of the connection's IDs. Forged ones, aimed at both ends while
    // data flows, must neither end the transfer nor pass for its end.
    let listener = listen("");
    let addr = listener.local_addr().unwrap();
    let data = pattern(16 << 20);
    let sent = data.clone();
    let (ready, dialer_addr) = tokio::sync::oneshot::channel();
    let sender = tokio::spawn(async move {
        let mut c = dial(addr, "").await;
        let _ = ready.send(SocketAddr::new(LOOPBACK, c.local_addr().unwrap().port()));
        for chunk in sent.chunks(1 << 20) {
            c.write_all(chunk).await.unwrap();
            tokio::task::yield_now().await;
        }
        drop(c);
    });
    let mut a = take(&listener).await;
    let dialer_addr = dialer_addr.await.unwrap();
    let forger = std::net::UdpSocket::bind((LOOPBACK, 0)).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut k = 0usize;
    loop {
        let n = a.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        for len in [21usize, 43, 1200] {
            let mut d = pattern(len + k);
            d.truncate(len);
            d[0] = 0x40 | (d[0] & 0x3f);
            k += 1;
            forger.send_to(&d, addr).unwrap();
            forger.send_to(&d, dialer_addr).unwrap();
        }
    }
    sender.await.unwrap();
    assert!(k > 0, "no forged reset was sent while data flowed");
    assert!(
        got == data,
        "{} of {} bytes, or different",
        got.len(),
        data.len()
    );
}

#[tokio::test]
async fn parallel_streams_share_one_connection_each_proving_the_key_and_carrying_its_own_bytes() {
    let sent = |k: u8| -> Vec<u8> { pattern(1 << 20).iter().map(|b| b.wrapping_add(k)).collect() };
    for (options, one_connection) in [
        (format!("parallel=streams;{}", bind(0x11)), true),
        (bind(0x11), false),
    ] {
        let listener = listen(&options);
        let addr = listener.local_addr().unwrap();
        let dialers: Vec<_> = (0..4u8)
            .map(|k| {
                let options = options.clone();
                tokio::spawn(async move {
                    let mut c = dial(addr, &options).await;
                    let local = c.local_addr().unwrap();
                    c.write_all(&sent(k)).await.unwrap();
                    local
                })
            })
            .collect();
        let mut got = Vec::new();
        for _ in 0..4 {
            let mut a = take(&listener).await;
            let mut v = Vec::new();
            a.read_to_end(&mut v).await.unwrap();
            got.push(v);
        }
        let mut ports = Vec::new();
        for d in dialers {
            ports.push(d.await.unwrap().port());
        }
        got.sort_by_key(|v| v[0]);
        for (k, v) in got.iter().enumerate() {
            assert!(*v == sent(k as u8), "{options}: stream {k} differs");
        }
        ports.dedup();
        assert_eq!(
            ports.len() == 1,
            one_connection,
            "{options}: local ports {ports:?}"
        );
    }
}

/// Two endpoints of ferry's making on loopback (MTU 65536), one connection between them with
/// `options` at both ends; the sender's connection once `n` bytes crossed.
async fn sender_after(options: &str, n: usize) -> quinn::Connection {
    let o = Options::parse(options).unwrap();
    let t = SocketTuning::default();
    let mk = |server| {
        endpoint(
            udp::listening(LOOPBACK, None, &t, Buffers::default()).unwrap(),
            server,
            o.max_payload,
        )
    };
    let listening = mk(Some(
        server_config(&o, &t, None, &Refusal::default()).unwrap(),
    ))
    .unwrap();
    let addr = listening.local_addr().unwrap();
    let receiver = tokio::spawn(async move {
        let conn = listening.accept().await.unwrap().await.unwrap();
        let (_send, mut recv) = conn.accept_bi().await.unwrap();
        let got = recv.read_to_end(usize::MAX).await.unwrap();
        (got, listening)
    });
    let connecting = mk(None).unwrap();
    let config = client_config(&o, &t, None, &Refusal::default()).unwrap();
    let conn = connecting
        .connect_with(config, addr, "ferry")
        .unwrap()
        .await
        .unwrap();
    let (mut send, _recv) = conn.open_bi().await.unwrap();
    let sent = pattern(n);
    send.write_all(&sent).await.unwrap();
    send.finish().unwrap();
    let (got, _listening) = receiver.await.unwrap();
    assert!(
        got == sent,
        "{} of {} bytes, or different",
        got.len(),
        sent.len()
    );
    conn
}

#[tokio::test]
async fn datagrams_grow_to_the_bound_where_the_path_carries_them_and_no_black_hole_is_seen() {
    // Batches of seven 8952-byte datagrams fit a GSO send; ten (quinn's batch) would not, and
    // quinn would lose each batch, call the path a black hole and drop to 1200 bytes.
    let conn = sender_after("", 64 << 20).await;
    let path = conn.stats().path;
    assert_eq!(
        (path.current_mtu, path.black_holes_detected),
        (datagrams::DEFAULT_MAX_PAYLOAD, 0),
        "{path:?}"
    );
    // A bound asked for holds, as does the largest one (one datagram a send).
    for (options, mtu) in [("mtu=1452", 1452), ("mtu=65507", 65507)] {
        let path = sender_after(options, 16 << 20).await.stats().path;
        assert_eq!(
            (path.current_mtu, path.black_holes_detected),
            (mtu, 0),
            "{options}: {path:?}"
        );
    }
}
