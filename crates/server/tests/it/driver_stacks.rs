//! `SITE SETNETSTACK` (alias `SETDCSTACK`) and `SITE SETDISKSTACK`, as Globus answers them:
//! `250 OK.`, or a multi-line 500 naming the driver, after which the session is on the default
//! stack and transfers go on.

use crate::common;

use common::*;

/// Asserts a Globus-style refusal: `500-<what> failed.`, the reason, `500 End.`.
fn assert_refused(r: &ferry_proto::Reply, first: &str, why: &str) {
    assert_eq!(r.code, 500, "{r}");
    let text = r.text();
    assert!(text.starts_with(first), "{r}");
    assert!(text.contains(why), "{r}");
    assert!(text.ends_with("End."), "{r}");
}

const DISK: &str = "Setting filesystem driver stack failed.";
const NET: &str = "Setting data channel driver stack failed.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_stacks_are_admitted_by_the_whitelist_and_the_drivers_this_build_has() {
    let srv = TestServer::start().await;
    srv.write("f.bin", &random_bytes(300_000, 3));
    let mut c = srv.login().await;
    expect(&mut c, "SITE SETDISKSTACK file", 250).await;
    expect(&mut c, "SITE SETDISKSTACK DEFAULT", 250).await;
    let r = cmd(&mut c, "SITE SETDISKSTACK file,gridftp_multicast").await;
    assert_refused(&r, DISK, "gridftp_multicast driver not whitelisted");
    // Names are exact, as in Globus.
    let r = cmd(&mut c, "SITE SETDISKSTACK FILE").await;
    assert_refused(&r, DISK, "FILE driver not whitelisted");
    let r = cmd(&mut c, "SITE SETDISKSTACK file:opt=1").await;
    assert_refused(&r, DISK, "file driver: takes no options");
    // The refused stack left the default one: files still move, byte for byte.
    let (got, _) = client_get(&mut c, "f.bin", 2).await;
    assert_eq!(got, srv.read("f.bin"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_whitelist_without_file_refuses_it_and_one_naming_a_missing_driver_admits_nothing_more(
) {
    let srv = TestServer::start_with(|c| {
        c.fs_whitelist = vec!["popen".into()];
        c.dc_whitelist = vec!["tcp".into()];
    })
    .await;
    let mut c = srv.login().await;
    let r = cmd(&mut c, "SITE SETDISKSTACK file").await;
    assert_refused(&r, DISK, "file driver not whitelisted");
    // Whitelisted, but no such driver here: Globus answers the same (it never loaded it).
    let r = cmd(&mut c, "SITE SETDISKSTACK popen").await;
    assert_refused(&r, DISK, "popen driver not whitelisted");
    // `default` needs no whitelist entry.
    expect(&mut c, "SITE SETDISKSTACK default", 250).await;
    let r = cmd(&mut c, "SITE SETNETSTACK tcp,gsi").await;
    assert_refused(&r, NET, "gsi driver not whitelisted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_stacks_take_globus_url_copys_spellings_and_refuse_unknown_transports() {
    let srv = TestServer::start().await;
    let data = random_bytes(2 << 20, 5);
    srv.write("f.bin", &data);
    let mut c = srv.login().await;
    expect(&mut c, "SITE SETNETSTACK tcp", 250).await;
    // What globus-url-copy -dcstack tcp sends on a gsiftp URL with DCAU.
    expect(&mut c, "SITE SETNETSTACK tcp,gsi", 250).await;
    expect(&mut c, "SITE SETDCSTACK tcp", 250).await;
    let r = cmd(&mut c, "SITE SETNETSTACK udt,gsi").await;
    assert_refused(&r, NET, "udt driver not whitelisted");
    let r = cmd(&mut c, "SITE SETNETSTACK tcp,").await;
    assert_refused(&r, NET, " driver not whitelisted");
    let (got, _) = client_get(&mut c, "f.bin", 4).await;
    assert_eq!(got, data);
    expect(&mut c, "SITE SETNETSTACK default", 250).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_chooses_the_congestion_control_of_the_data_connections_with_a_tcp_option() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("transfers.jsonl");
    let log_cfg = log.clone();
    let srv = TestServer::start_with(move |c| c.log_transfer = Some(log_cfg)).await;
    let data = random_bytes(4 << 20, 7);
    srv.write("f.bin", &data);
    let mut c = srv.login().await;
    // FEAT says what this host offers; reno is in every Linux kernel.
    let feat = cmd(&mut c, "FEAT").await;
    let line = feat
        .lines
        .iter()
        .find(|l| l.starts_with(" TCP-CONGESTION "))
        .unwrap_or_else(|| panic!("no TCP-CONGESTION in {feat}"));
    assert!(line.contains("reno;"), "{line}");
    // And how much one socket may buffer here, the third values of tcp_rmem and tcp_wmem.
    let third = |key: &str| -> String {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{key}"))
            .unwrap()
            .split_whitespace()
            .nth(2)
            .unwrap()
            .to_string()
    };
    let want = format!(
        " TCP-AUTOTUNE-MAX rmem={};wmem={};",
        third("tcp_rmem"),
        third("tcp_wmem")
    );
    assert!(feat.lines.contains(&want), "{want:?} not in {feat}");

    expect(&mut c, "SITE SETNETSTACK tcp:congestion=reno", 250).await;
    // Nothing to say before a transfer.
    expect(&mut c, "SITE TCPINFO", 550).await;
    let (got, _) = client_get(&mut c, "f.bin", 4).await;
    assert_eq!(got, data);
    // What a client steering a third-party copy asks of the sender afterwards.
    let r = expect(&mut c, "SITE TCPINFO", 200).await;
    let facts = ferry_net::TcpStats::from_facts(r.text().trim()).expect("facts");
    assert_eq!(
        (facts.connections, facts.congestion.as_str()),
        (4, "reno"),
        "{r}"
    );
    // TCP_INFO is read when the last block is written, not when the kernel has sent it: the
    // tail still in the send queue is not counted yet (seen: 4 129 890 of 4 194 304 bytes).
    assert!(
        facts.bytes_sent > 0 && facts.bytes_sent <= 2 * data.len() as u64,
        "{r}"
    );
    // An unknown name is refused with what the kernel allows, and the session is back on
    // the default stack (the system's congestion control).
    let r = cmd(&mut c, "SITE SETNETSTACK tcp:congestion=nosuchcc").await;
    assert_refused(&r, NET, "nosuchcc");
    assert!(r.text().contains("tcp_allowed_congestion_control"), "{r}");
    let r = cmd(&mut c, "SITE SETNETSTACK tcp:window=1").await;
    assert_refused(&r, NET, "unknown option");
    let (got, _) = client_get(&mut c, "f.bin", 2).await;
    assert_eq!(got, data);
    drop(c);

    let lines = log_lines(&log);
    let tcp: Vec<&serde_json::Value> = lines.iter().map(|l| &l["tcp"]).collect();
    assert_eq!(tcp.len(), 2, "{lines:?}");
    assert_eq!(tcp[0]["congestion"], "reno", "{lines:?}");
    assert_eq!(tcp[0]["connections"], 4, "{lines:?}");
    // Read, as SITE TCPINFO's, when the last block is written: the kernel may still hold the
    // tail (seen in CI: 4 129 820 of 4 194 304 bytes).
    let sent = tcp[0]["bytes_sent"].as_u64().unwrap();
    assert!(sent > 0 && sent <= 2 * data.len() as u64, "{lines:?}");
    let system = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap();
    assert_eq!(tcp[1]["congestion"], system.trim(), "{lines:?}");
    assert_eq!(tcp[1]["connections"], 2, "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_sets_the_servers_congestion_control_and_an_unknown_one_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("transfers.jsonl");
    let log_cfg = log.clone();
    let srv = TestServer::start_with(move |c| {
        c.log_transfer = Some(log_cfg);
        c.data_congestion = Some(ferry_net::Congestion::new("reno").unwrap());
    })
    .await;
    let data = random_bytes(1 << 20, 8);
    let mut c = srv.login().await;
    client_put(&mut c, &data, "up.bin", 2).await.expect("put");
    let (got, _) = client_get(&mut c, "up.bin", 2).await;
    assert_eq!(got, data);
    drop(c);
    let lines = log_lines(&log);
    // The server's own connections, receiving and sending, have the configured one.
    assert!(
        lines.iter().all(|l| l["tcp"]["congestion"] == "reno"),
        "{lines:?}"
    );

    let bad = ferry_server::ServerConfig {
        anonymous: true,
        root: std::env::temp_dir(),
        data_congestion: Some(ferry_net::Congestion::new("nosuchcc").unwrap()),
        ..Default::default()
    };
    let err = bad.validate().unwrap_err().to_string();
    assert!(err.contains("--data-congestion nosuchcc"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_is_chosen_only_where_the_admin_whitelists_it_and_its_options_are_checked() {
    // The default whitelist (tcp, gsi), as Globus': QUIC is refused by name.
    let srv = TestServer::start().await;
    let mut c = srv.login().await;
    let r = cmd(&mut c, "SITE SETNETSTACK quic,gsi").await;
    assert_refused(&r, NET, "quic driver not whitelisted");

    let srv = TestServer::start_with(|c| {
        c.dc_whitelist = vec!["tcp".into(), "quic".into(), "gsi".into()];
    })
    .await;
    let mut c = srv.login().await;
    expect(&mut c, "SITE SETNETSTACK quic", 250).await;
    expect(&mut c, "SITE SETNETSTACK quic,gsi", 250).await;
    expect(
        &mut c,
        "SITE SETDCSTACK quic:congestion=cubic;window=33554432",
        250,
    )
    .await;
    let r = cmd(&mut c, "SITE SETNETSTACK quic:congestion=vegas").await;
    assert_refused(&r, NET, "quic driver: unknown congestion control");
    let r = cmd(&mut c, "SITE SETNETSTACK quic:window=4096").await;
    assert_refused(&r, NET, "quic driver: window 4096 is outside");
    // A passive listener on the QUIC stack is a UDP port: nothing listens on its TCP twin.
    expect(&mut c, "SITE SETNETSTACK quic", 250).await;
    let r = cmd(&mut c, "PASV").await;
    assert_eq!(r.code, 227, "{r}");
    let addr = ferry_proto::hostport::HostPort::from_pasv_reply(&r.text())
        .unwrap()
        .0;
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "{addr} takes TCP"
    );
    assert!(
        std::net::UdpSocket::bind(addr).is_err(),
        "{addr} is not bound for UDP"
    );
}
