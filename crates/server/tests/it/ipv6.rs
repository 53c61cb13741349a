//! A server on IPv6 loopback: EPSV/EPRT data channels in stream mode and MODE E.

use crate::common;

use std::net::{Ipv6Addr, SocketAddr};

use common::*;

/// A server on `[::1]:0`, or `None` (with a message) where IPv6 loopback is unavailable.
async fn v6_server() -> Option<TestServer> {
    if std::net::TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).is_err() {
        eprintln!("skipping: cannot bind [::1] (no IPv6 loopback)");
        return None;
    }
    let srv =
        TestServer::start_with(|c| c.listen = SocketAddr::from((Ipv6Addr::LOCALHOST, 0))).await;
    assert!(srv.addr.is_ipv6());
    Some(srv)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_epsv_and_eprt_carry_mode_e_gets_and_puts() {
    let Some(srv) = v6_server().await else {
        return;
    };
    let data = random_bytes(2 * 1024 * 1024 + 77, 91);
    srv.write("v6.bin", &data);
    let mut c = srv.login().await;
    // get: ferry_client listens on ::1 and sends EPRT.
    for n in [1, 4] {
        let (got, used) = client_get(&mut c, "v6.bin", n).await;
        assert!(got == data, "bytes differ with {n} streams");
        assert_eq!(used, n);
    }
    // put: EPSV by hand, two connections, blocks framed by hand.
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let addr = epsv(&mut c).await;
    assert!(addr.is_ipv6());
    start_transfer(&mut c, "STOR up6.bin").await;
    let mut a = data_connect(addr).await;
    let mut b = data_connect(addr).await;
    let half = data.len() / 2;
    send_block(&mut b, half as u64, &data[half..]).await;
    send_block(&mut a, 0, &data[..half]).await;
    within(
        "EOD",
        tokio::io::AsyncWriteExt::write_all(
            &mut b,
            &ferry_proto::mode_e::BlockHeader::eod().encode(),
        ),
    )
    .await
    .unwrap();
    send_eof(&mut a, 2).await;
    expect_final(&mut c, 226).await;
    assert!(srv.read("up6.bin") == data, "bytes differ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_stream_mode_works_over_epsv_and_eprt_and_pasv_is_refused() {
    let Some(srv) = v6_server().await else {
        return;
    };
    let data = random_bytes(500_000, 92);
    srv.write("s6.bin", &data);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    let r = cmd(&mut c, "PASV").await;
    assert_eq!(r.code, 522, "PASV cannot carry an IPv6 address: {r}");

    let addr = epsv(&mut c).await;
    let mut conn = data_connect(addr).await;
    start_transfer(&mut c, "RETR s6.bin").await;
    let got = read_all(&mut conn).await;
    expect_final(&mut c, 226).await;
    assert!(got == data);

    let listener = port(&mut c).await; // EPRT |2|::1|port|
    start_transfer(&mut c, "STOR back6.bin").await;
    let mut conn = data_accept(&listener).await;
    write_all_and_close(&mut conn, &data).await;
    expect_final(&mut c, 226).await;
    assert!(srv.read("back6.bin") == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_stack_server_gives_ipv4_clients_ipv4_data_addresses() {
    if std::net::TcpListener::bind((Ipv6Addr::UNSPECIFIED, 0)).is_err() {
        eprintln!("skipping: cannot bind [::] (no IPv6)");
        return;
    }
    let srv =
        TestServer::start_with(|c| c.listen = SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))).await;
    let v4 = SocketAddr::from(([127, 0, 0, 1], srv.addr.port()));
    let mut c = within("connect", ferry_client::ControlClient::connect(v4))
        .await
        .expect("IPv4 client reaches the dual-stack server");
    within("login", c.login(USER, PASSWORD)).await.unwrap();
    let addr = pasv(&mut c).await;
    assert_eq!(addr.ip(), localhost(), "PASV names the IPv4 address");
    let data = random_bytes(300_000, 93);
    client_put(&mut c, &data, "dual.bin", 2).await.unwrap();
    let (got, _) = client_get(&mut c, "dual.bin", 2).await;
    assert!(got == data);
}
