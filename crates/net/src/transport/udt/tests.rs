use std::net::UdpSocket;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::SocketTuning;

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + i / 4093) as u8).collect()
}

/// A UDT listener on a free loopback port.
fn local_listener(options: &str) -> DataListener {
    Udt.listen(Bind {
        ip: "127.0.0.1".parse().unwrap(),
        range: None,
        tuning: SocketTuning::default(),
        options,
    })
    .unwrap()
}

async fn pair(options: &str) -> (DataConn, DataConn) {
    let listener = local_listener(options);
    let addr = listener.local_addr().unwrap();
    let (accepted, connected) = tokio::join!(
        listener.accept(),
        Udt.connect(Dial {
            addr,
            tuning: SocketTuning::default(),
            options
        })
    );
    (accepted.unwrap(), connected.unwrap())
}

async fn send_and_check(mut from: DataConn, mut to: DataConn, len: usize) {
    let d = data(len);
    let sent = d.clone();
    let writer = tokio::spawn(async move {
        from.write_all(&sent).await.unwrap();
        from.shutdown().await.unwrap();
    });
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), to.read_to_end(&mut got))
        .await
        .expect("transfer hung")
        .unwrap();
    writer.await.unwrap();
    assert_eq!(got.len(), d.len());
    assert!(got == d, "bytes differ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_cross_in_both_directions_and_end_cleanly() {
    let (accepted, connected) = pair("").await;
    send_and_check(connected, accepted, 20 << 20).await;
    let (accepted, connected) = pair("cc=udt;mss=9000").await;
    send_and_check(accepted, connected, 8 << 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_listener_takes_parallel_streams_and_ignores_garbage() {
    let listener = local_listener("");
    let addr = listener.local_addr().unwrap();
    let noise = UdpSocket::bind("127.0.0.1:0").unwrap();
    for junk in [
        &b"hello"[..],
        &[0xFF; 48],
        &[0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ] {
        noise.send_to(junk, addr).unwrap();
    }
    let mut tasks = Vec::new();
    for i in 0..4 {
        tasks.push(tokio::spawn(async move {
            let mut c = Udt
                .connect(Dial {
                    addr,
                    tuning: SocketTuning::default(),
                    options: "",
                })
                .await
                .unwrap();
            c.write_all(&data(1 << 20 | i)).await.unwrap();
            c.shutdown().await.unwrap();
        }));
    }
    let mut lens = Vec::new();
    for _ in 0..4 {
        let mut s = listener.accept().await.unwrap();
        noise.send_to(&[0u8; 1500], addr).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert!(got == data(got.len()));
        lens.push(got.len());
    }
    for t in tasks {
        t.await.unwrap();
    }
    lens.sort_unstable();
    assert_eq!(lens, vec![1 << 20, 1 << 20 | 1, 1 << 20 | 2, 1 << 20 | 3]);
}

#[tokio::test]
async fn a_port_with_no_listener_fails_the_connect_with_a_reason() {
    let idle = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = idle.local_addr().unwrap();
    let e = Udt
        .connect(Dial {
            addr,
            tuning: SocketTuning::default(),
            options: "",
        })
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("handshake"), "{e}");
}

#[test]
fn bad_options_are_refused_before_any_socket() {
    assert!(Udt.accept_options("mss=9000;fc=4096").is_ok());
    assert!(Udt.accept_options("nodelay=1").is_err());
}

/// A handshake datagram to the listener (socket id 0).
fn handshake_datagram(hs: &ferry_udt::handshake::Handshake) -> Vec<u8> {
    let mut out = vec![0u8; 128];
    let n = ferry_udt::packet::write_control(
        &mut out,
        0,
        0,
        &ferry_udt::packet::Control::Handshake(*hs),
    );
    out.truncate(n);
    out
}

/// The handshake in a datagram from the listener, if it is one.
fn handshake_in(datagram: &[u8]) -> Option<ferry_udt::handshake::Handshake> {
    match ferry_udt::packet::Packet::parse(datagram).ok()? {
        ferry_udt::packet::Packet::Control {
            body: ferry_udt::packet::Control::Handshake(hs),
            ..
        } => Some(hs),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_handshakes_open_nothing_and_the_listener_serves_on() {
    use ferry_udt::handshake::{self, Handshake};
    let listener = local_listener("");
    let addr = listener.local_addr().unwrap();
    let forger = UdpSocket::bind("127.0.0.1:0").unwrap();
    let victim = UdpSocket::bind("127.0.0.1:0").unwrap();
    // The flood comes from its own socket: its 2 000 cookies overflow that socket's buffer,
    // and would drop the answers the forger waits for below.
    let flooder = UdpSocket::bind("127.0.0.1:0").unwrap();
    for s in [&forger, &flooder] {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    }
    let request = Handshake {
        version: handshake::VERSION,
        socket_type: handshake::STREAM,
        isn: 99,
        mss: 1500,
        flight_flag: 8192,
        request_type: handshake::REQUEST,
        id: 4242,
        cookie: 0,
        peer_ip: handshake::ip_words(addr.ip()),
    };
    // A flood of first requests: each gets a cookie back and leaves no state.
    for i in 0..2_000 {
        let hs = Handshake {
            id: i + 1,
            ..request
        };
        flooder.send_to(&handshake_datagram(&hs), addr).unwrap();
    }
    let mut buf = [0u8; 1500];
    let (n, _) = flooder.recv_from(&mut buf).unwrap();
    let answer = handshake_in(&buf[..n]).expect("the listener answers a request with a cookie");
    assert_eq!(answer.request_type, handshake::REQUEST);
    forger.send_to(&handshake_datagram(&request), addr).unwrap();
    let (n, _) = forger.recv_from(&mut buf).unwrap();
    let answer = handshake_in(&buf[..n]).expect("the listener answers a request with a cookie");
    assert_eq!(answer.request_type, handshake::REQUEST);
    let cookie = answer.cookie;
    let response = Handshake {
        request_type: handshake::RESPONSE,
        id: 4242,
        ..request
    };
    // Guessed cookies, and the forger's good cookie replayed from another address (a spoofed
    // source never sees the cookie meant for it): nothing opens.
    for guess in [0, 1, cookie ^ 1, cookie.wrapping_add(1), u32::MAX] {
        let hs = Handshake {
            cookie: guess,
            ..response
        };
        forger.send_to(&handshake_datagram(&hs), addr).unwrap();
    }
    victim
        .send_to(&handshake_datagram(&Handshake { cookie, ..response }), addr)
        .unwrap();
    // The right cookie with a version the listener does not speak: refused, not opened.
    let wrong = Handshake {
        version: 5,
        cookie,
        ..response
    };
    forger.send_to(&handshake_datagram(&wrong), addr).unwrap();
    let refused = loop {
        let (n, _) = forger
            .recv_from(&mut buf)
            .expect("the listener answers a wrong version");
        match handshake_in(&buf[..n]) {
            Some(hs) if hs.request_type == handshake::REQUEST => continue,
            Some(hs) => break hs,
            None => panic!("the listener sent a non-handshake to a forger"),
        }
    };
    assert_eq!(refused.request_type, handshake::REFUSED);
    // A real client connects after all that, and it is the first and only one accepted.
    let mut real = Udt
        .connect(Dial {
            addr,
            tuning: SocketTuning::default(),
            options: "",
        })
        .await
        .unwrap();
    let mut accepted = tokio::time::timeout(Duration::from_secs(10), listener.accept())
        .await
        .expect("the real client was not accepted")
        .unwrap();
    assert_eq!(
        accepted.peer_addr().unwrap().port(),
        real.local_addr().unwrap().port(),
        "a forged handshake was accepted before the real one"
    );
    real.write_all(&data(1 << 20)).await.unwrap();
    real.shutdown().await.unwrap();
    let mut got = Vec::new();
    accepted.read_to_end(&mut got).await.unwrap();
    assert!(got == data(1 << 20), "bytes differ");
}
