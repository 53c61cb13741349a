use std::net::UdpSocket;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + i / 4093) as u8).collect()
}

async fn pair(options: &str) -> (DataConn, DataConn) {
    let listener = Udt
        .listen(
            "127.0.0.1".parse().unwrap(),
            None,
            SocketTuning::default(),
            options,
        )
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (accepted, connected) = tokio::join!(
        listener.accept(),
        Udt.connect(addr, SocketTuning::default(), options)
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
    let listener = Udt
        .listen(
            "127.0.0.1".parse().unwrap(),
            None,
            SocketTuning::default(),
            "",
        )
        .unwrap();
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
                .connect(addr, SocketTuning::default(), "")
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
        .connect(addr, SocketTuning::default(), "")
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
