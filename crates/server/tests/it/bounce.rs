//! FTP bounce (RFC 2577): a session names no service port for its data, names another host
//! only where it may be one end of a third-party copy, and its passive listener takes data
//! connections only from the client's own host unless the same holds.

use std::net::SocketAddr;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};

use crate::common::*;

/// A data connection to `addr` from the loopback address `from`.
async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::new(from.parse().unwrap(), 0)).unwrap();
    within("data connect", s.connect(addr)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_to_a_service_port_is_refused_for_every_session() {
    let srv = TestServer::start_with(|c| c.allow_third_party = vec!["password".into()]).await;
    for mut c in [srv.login().await, srv.login_anonymous().await] {
        expect(&mut c, "PORT 127,0,0,1,0,25", 504).await;
        expect(&mut c, "EPRT |1|127.0.0.1|22|", 504).await;
        expect(&mut c, "PORT 127,0,0,1,0,0", 504).await;
        ok(&mut c, "PORT 127,0,0,1,200,10").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_to_another_host_needs_a_session_that_may_be_third_party() {
    let srv = TestServer::start().await;
    let mut anon = srv.login_anonymous().await;
    let r = expect(&mut anon, "PORT 127,0,0,2,200,10", 504).await;
    assert!(r.text().contains("own address"), "{r}");
    expect(&mut anon, "EPRT |1|127.0.0.2|51210|", 504).await;
    let mut user = srv.login().await;
    expect(&mut user, "PORT 127,0,0,2,200,10", 504).await;
    // Its own address is fine.
    ok(&mut user, "EPRT |1|127.0.0.1|51210|").await;

    let srv = TestServer::start_with(|c| c.allow_third_party = vec!["password".into()]).await;
    let mut user = srv.login().await;
    ok(&mut user, "PORT 127,0,0,2,200,10").await;
    let mut anon = srv.login_anonymous().await;
    expect(&mut anon, "PORT 127,0,0,2,200,10", 504).await;
}

/// Another host's connection to a passive listener gets nothing (it used to receive the next
/// RETR's data); the client's own connection gets the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passive_listener_takes_data_only_from_the_control_peer() {
    let srv = TestServer::start().await;
    srv.write("f.bin", b"private bytes");
    let mut c = srv.login().await;
    let addr = pasv(&mut c).await;
    // The stranger is first in the accept queue: it is accepted, closed, and the client's
    // connection is taken instead.
    let mut stranger = connect_from("127.0.0.2", addr).await;
    let mut own = connect_from("127.0.0.1", addr).await;
    start_transfer(&mut c, "RETR f.bin").await;
    let mut data = Vec::new();
    within("data", own.read_to_end(&mut data)).await.unwrap();
    expect_final(&mut c, 226).await;
    assert_eq!(data, b"private bytes");
    let mut got = Vec::new();
    let n = within(
        "the stranger's connection to end",
        stranger.read_to_end(&mut got),
    )
    .await;
    assert!(got.is_empty(), "a stranger received {got:?} ({n:?})");
}

/// Where the admin allows it, a password session's listener takes any host (a third-party
/// copy's other server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_session_takes_data_from_another_host() {
    let srv = TestServer::start_with(|c| c.allow_third_party = vec!["password".into()]).await;
    srv.write("f.bin", b"shared bytes");
    let mut c = srv.login().await;
    let addr = pasv(&mut c).await;
    let mut other = connect_from("127.0.0.2", addr).await;
    start_transfer(&mut c, "RETR f.bin").await;
    let mut data = Vec::new();
    within("data", other.read_to_end(&mut data)).await.unwrap();
    expect_final(&mut c, 226).await;
    assert_eq!(data, b"shared bytes");
}

/// The `SITE SETDISKSTACK` that makes this server forward an upload to `child`.
fn forward_to(child: SocketAddr) -> String {
    let d = ferry_proto::multicast::Destination::parse(&format!("ftp://{child}/forwarded.bin"))
        .unwrap();
    format!(
        "SITE SETDISKSTACK {}",
        ferry_proto::multicast::first_hop_stack(None, &[d])
    )
}

/// Uploads `data` as `name` in stream mode; the final reply.
async fn upload(
    c: &mut ferry_client::ControlClient,
    name: &str,
    data: &[u8],
) -> ferry_proto::Reply {
    use tokio::io::AsyncWriteExt;
    let addr = pasv(c).await;
    let mut conn = data_connect(addr).await;
    let r = cmd(c, &format!("STOR {name}")).await;
    if !r.is_preliminary() {
        return r;
    }
    let _ = conn.write_all(data).await;
    drop(conn);
    final_reply(c).await.1
}

/// A client names the children of a multicast node; the node logs in to them and sends the
/// data. Without the admin's networks it forwards nowhere; with them, a child elsewhere (here
/// loopback, outside 10.0.0.0/8) is refused before any login, and gets nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multicast_node_forwards_only_into_the_networks_its_admin_names() {
    let child = TestServer::start_with(|c| c.anonymous_write = true).await;
    let whitelist = |c: &mut ferry_server::ServerConfig| {
        c.anonymous_write = true;
        c.fs_whitelist = vec!["file".into(), "gridftp_multicast".into()];
    };
    let node = TestServer::start_with(whitelist).await;
    let mut c = node.login_anonymous().await;
    let r = cmd(&mut c, &forward_to(child.addr)).await;
    assert!(
        r.code >= 500 && r.text().contains("--multicast-allow-to"),
        "{r}"
    );

    let node = TestServer::start_with(|c| {
        whitelist(c);
        c.multicast_allow_to = vec!["10.0.0.0/8".into()];
    })
    .await;
    let mut c = node.login_anonymous().await;
    ok(&mut c, &forward_to(child.addr)).await;
    let r = upload(&mut c, "up.bin", b"for the tree only").await;
    assert!(
        r.code >= 400,
        "the forward to a loopback child succeeded: {r}"
    );
    assert!(
        !child.path("forwarded.bin").exists(),
        "the child got the file"
    );

    // Where the admin allows loopback, the same tree works.
    let node = TestServer::start_with(|c| {
        whitelist(c);
        c.multicast_allow_to = vec!["127.0.0.0/8".into()];
    })
    .await;
    let mut c = node.login_anonymous().await;
    ok(&mut c, &forward_to(child.addr)).await;
    let r = upload(&mut c, "up.bin", b"for the tree only").await;
    assert_eq!(r.code, 226, "{r}");
    assert_eq!(child.read("forwarded.bin"), b"for the tree only");
}
