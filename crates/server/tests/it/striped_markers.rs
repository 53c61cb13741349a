//! A striped frontend with two in-process data nodes, driven by hand: SPAS lists both nodes,
//! a slow striped store gets 112 markers from each node (its `Stripe Index`, the stripe count)
//! and 111 markers that never claim a byte no node has written; the file is whole at the end.

use crate::common;

use std::net::SocketAddr;

use common::*;
use ferry_proto::{HostPort, PerfMarker, RangeSet, RestartMarker};
use ferry_server::{Server, ServerConfig};

async fn data_node(root: &std::path::Path, ip: [u8; 4], secret: &std::path::Path) -> SocketAddr {
    let config = ServerConfig {
        listen: SocketAddr::from((ip, 0)),
        root: root.to_path_buf(),
        data_node: true,
        ipc_secret_file: Some(secret.to_path_buf()),
        // The frontend's test sessions work as whoever runs the tests (root in CI).
        allow_root_sessions: true,
        ..ServerConfig::default()
    };
    let server = Server::bind(config).await.expect("data node starts");
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.run());
    addr
}

/// A frontend (TestServer) with two data nodes on 127.0.0.2 and .3 over one root; `None` where
/// those addresses are not local. Keep the returned directories alive for the test.
async fn two_node_cluster() -> Option<(TestServer, std::path::PathBuf, [tempfile::TempDir; 2])> {
    if std::net::TcpListener::bind("127.0.0.2:0").is_err() {
        eprintln!("skipping: 127.0.0.2 is not a local address here");
        return None;
    }
    let keep = tempfile::tempdir().unwrap();
    let secret = keep.path().join("secret");
    std::fs::write(&secret, "a secret of the test cluster").unwrap();
    let nodes_dir = tempfile::tempdir().unwrap();
    let root = nodes_dir.path().to_path_buf();
    let a = data_node(&root, [127, 0, 0, 2], &secret).await;
    let b = data_node(&root, [127, 0, 0, 3], &secret).await;
    let srv = TestServer::start_with(|c| {
        c.root = root.clone();
        c.remote_nodes = vec![a.to_string(), b.to_string()];
        c.ipc_secret_file = Some(secret.clone());
    })
    .await;
    Some((srv, root, [keep, nodes_dir]))
}

/// Sends a transfer command that must end in 425.
async fn start_transfer_refused(c: &mut ferry_client::ControlClient, line: &str) {
    c.send_line(line).await.unwrap();
    let (_, fin) = final_reply(c).await;
    assert_eq!(fin.code, 425, "{fin}");
}

fn spas_addrs(r: &ferry_proto::Reply) -> Vec<SocketAddr> {
    HostPort::from_spas_reply(&r.lines)
        .unwrap()
        .into_iter()
        .map(|h| h.0)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_striped_store_reports_markers_per_node() {
    let Some((srv, root, _dirs)) = two_node_cluster().await else {
        return;
    };

    let data = random_bytes(96_000, 93);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    expect(&mut c, "TREV PERF 1", 200).await;
    expect(&mut c, "TREV RESTART 1", 200).await;
    let r = expect(&mut c, "SPAS", 229).await;
    let addrs = spas_addrs(&r);
    assert_eq!(addrs.len(), 2, "{r}");
    assert_eq!(addrs[0].ip().to_string(), "127.0.0.2", "{r}");
    assert_eq!(addrs[1].ip().to_string(), "127.0.0.3", "{r}");
    start_transfer(&mut c, "STOR striped.bin").await;
    let mut s0 = data_connect(addrs[0]).await;
    let mut s1 = data_connect(addrs[1]).await;
    // Stripe 0 gets the first half, stripe 1 a piece of the second; then a pause so markers
    // come while the transfer is still open.
    send_block(&mut s0, 0, &data[..48_000]).await;
    send_block(&mut s1, 48_000, &data[48_000..60_000]).await;
    let mut sent = RangeSet::from_range(0, 60_000);
    let mut marked = RangeSet::new();
    let mut per_stripe = [0u64; 2];
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while per_stripe != [48_000, 12_000] || marked != sent {
        assert!(
            tokio::time::Instant::now() < deadline,
            "markers: {per_stripe:?} {marked}"
        );
        let r = next_reply(&mut c).await;
        if let Some(m) = PerfMarker::from_reply(&r) {
            assert_eq!(m.total_stripes, 2, "{r}");
            per_stripe[m.stripe_index as usize] = m.stripe_bytes;
        } else if let Some(m) = RestartMarker::from_reply(&r) {
            marked.merge(&m.0);
            let mut beyond = marked.clone();
            beyond.subtract(&sent);
            assert!(beyond.is_empty(), "marker {r} covers bytes not written");
        } else {
            panic!("expected a marker, got {r}");
        }
    }
    send_block(&mut s1, 60_000, &data[60_000..]).await;
    sent.insert(60_000, data.len() as u64);
    send_eof(&mut s0, 1).await;
    send_eof(&mut s1, 1).await;
    let (prelim, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 226, "{fin}");
    for r in &prelim {
        if let Some(m) = RestartMarker::from_reply(r) {
            marked.merge(&m.0);
        }
    }
    assert_eq!(marked, sent);
    assert!(std::fs::read(root.join("striped.bin")).unwrap() == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abor_stops_every_node_and_the_next_striped_store_works() {
    let Some((srv, root, _dirs)) = two_node_cluster().await else {
        return;
    };
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let r = expect(&mut c, "SPAS", 229).await;
    let addrs = spas_addrs(&r);
    start_transfer(&mut c, "STOR aborted.bin").await;
    let mut s0 = data_connect(addrs[0]).await;
    let _s1 = data_connect(addrs[1]).await;
    send_block(&mut s0, 0, &[7u8; 10_000]).await;
    c.send_line("ABOR").await.unwrap();
    let r = next_reply(&mut c).await;
    assert_eq!(r.code, 426, "{r}");
    let r = next_reply(&mut c).await;
    assert_eq!(r.code, 226, "{r}");

    // The aborted data channel is gone: a store on it is refused, and names no node as down.
    start_transfer_refused(&mut c, "STOR again.bin").await;
    let r = expect(&mut c, "STAT", 212).await;
    assert!(!r.to_string().contains("not reachable"), "{r}");

    // A new data channel: both nodes answer again and a whole store goes through.
    let data = random_bytes(70_000, 94);
    let r = expect(&mut c, "SPAS", 229).await;
    let addrs = spas_addrs(&r);
    assert_eq!(addrs.len(), 2, "{r}");
    start_transfer(&mut c, "STOR after.bin").await;
    let mut s0 = data_connect(addrs[0]).await;
    let mut s1 = data_connect(addrs[1]).await;
    send_block(&mut s0, 0, &data[..30_000]).await;
    send_block(&mut s1, 30_000, &data[30_000..]).await;
    send_eof(&mut s0, 1).await;
    send_eof(&mut s1, 1).await;
    let (_, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 226, "{fin}");
    assert!(std::fs::read(root.join("after.bin")).unwrap() == data);
}
