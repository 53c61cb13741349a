//! Restart (111) and performance (112) markers during slow MODE E stores.

use crate::common;

use common::*;
use ferry_client::ControlClient;
use ferry_proto::{PerfMarker, RangeSet, RestartMarker};
use tokio::net::TcpStream;

/// A logged-in MODE E session with `markers` (TREV lines) set, `store` (STOR or ESTO) started
/// on a passive data connection: the client's end of both.
async fn slow_store(srv: &TestServer, markers: &[&str], store: &str) -> (ControlClient, TcpStream) {
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    for m in markers {
        expect(&mut c, m, 200).await;
    }
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, store).await;
    let conn = data_connect(addr).await;
    (c, conn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_markers_cover_exactly_the_bytes_received_so_far() {
    let srv = TestServer::start().await;
    let data = random_bytes(60_000, 71);
    let (mut c, mut conn) = slow_store(&srv, &["TREV RESTART 1"], "STOR slow.bin").await;
    send_block(&mut conn, 0, &data[..10_000]).await;
    send_block(&mut conn, 30_000, &data[30_000..35_000]).await;
    let mut sent = RangeSet::from_range(0, 10_000);
    sent.insert(30_000, 35_000);

    // Markers are incremental: their union grows to what was sent, and never beyond it.
    let mut marked = RangeSet::new();
    while marked != sent {
        let r = next_reply(&mut c).await;
        let m = RestartMarker::from_reply(&r).unwrap_or_else(|| panic!("expected 111, got {r}"));
        marked.merge(&m.0);
        let mut beyond = marked.clone();
        beyond.subtract(&sent);
        assert!(beyond.is_empty(), "marker {r} covers bytes not sent");
    }

    // The rest of the file, then the final markers and 226.
    send_block(&mut conn, 10_000, &data[10_000..30_000]).await;
    send_block(&mut conn, 35_000, &data[35_000..]).await;
    send_eof(&mut conn, 1).await;
    let (prelim, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 226, "{fin}");
    for r in &prelim {
        let m = RestartMarker::from_reply(r).unwrap_or_else(|| panic!("expected 111, got {r}"));
        marked.merge(&m.0);
    }
    assert_eq!(marked, RangeSet::from_range(0, data.len() as u64));
    assert!(srv.read("slow.bin") == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_still_arriving_is_marked_as_far_as_it_is_written() {
    // A slow stream's large block (here 16 MiB, of which 6 MiB come): what is written counts
    // before the block ends, so a client that stops the transfer resumes after it.
    use tokio::io::AsyncWriteExt;
    let srv = TestServer::start().await;
    let data = random_bytes(6 << 20, 72);
    let (mut c, mut conn) = slow_store(&srv, &["TREV RESTART 1"], "STOR part.bin").await;
    let header = ferry_proto::mode_e::BlockHeader::data(0, 16 << 20).encode();
    conn.write_all(&header).await.expect("header");
    conn.write_all(&data).await.expect("part of the payload");
    let sent = RangeSet::from_range(0, data.len() as u64);
    let mut marked = RangeSet::new();
    while marked.total() < (4 << 20) {
        let r = next_reply(&mut c).await;
        let m = RestartMarker::from_reply(&r).unwrap_or_else(|| panic!("expected 111, got {r}"));
        marked.merge(&m.0);
        let mut beyond = marked.clone();
        beyond.subtract(&sent);
        assert!(beyond.is_empty(), "marker {r} covers bytes not sent");
    }
    // Everything marked is on disk as sent.
    let on_disk = srv.read("part.bin");
    for (start, end) in marked.iter() {
        let (s, e) = (start as usize, end as usize);
        assert!(
            on_disk.len() >= e && on_disk[s..e] == data[s..e],
            "marked {s}-{e}"
        );
    }
    // The sender goes away mid-block: the transfer fails, and what was marked stays.
    drop(conn);
    let (_, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 426, "{fin}");
    let kept = srv.read("part.bin");
    for (start, end) in marked.iter() {
        let (s, e) = (start as usize, end as usize);
        assert!(
            kept.len() >= e && kept[s..e] == data[s..e],
            "marked {s}-{e}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn perf_markers_arrive_as_112_multiline_replies_during_a_store() {
    let srv = TestServer::start().await;
    let data = random_bytes(40_000, 72);
    let (mut c, mut conn) =
        slow_store(&srv, &["TREV PERF 1", "TREV RESTART 0"], "STOR perf.bin").await;
    send_block(&mut conn, 0, &data[..25_000]).await;
    let r = next_reply(&mut c).await;
    assert_eq!(r.code, 112, "{r}");
    assert!(r.lines.len() >= 5, "multi-line: {r}");
    assert_eq!(r.lines[0], "Perf Marker");
    let m = PerfMarker::from_reply(&r).unwrap_or_else(|| panic!("well-formed perf marker: {r}"));
    assert_eq!((m.stripe_index, m.total_stripes), (0, 1));
    assert!(m.stripe_bytes <= 25_000, "{r}");
    let now_tenths = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        / 100;
    assert!(
        m.timestamp_tenths <= now_tenths,
        "timestamp not in the future: {r}"
    );
    // Wait for a marker that has seen the whole first block.
    let mut bytes = m.stripe_bytes;
    while bytes < 25_000 {
        let r = next_reply(&mut c).await;
        bytes = PerfMarker::from_reply(&r)
            .unwrap_or_else(|| panic!("expected 112, got {r}"))
            .stripe_bytes;
    }
    assert_eq!(bytes, 25_000);
    send_block(&mut conn, 25_000, &data[25_000..]).await;
    send_eof(&mut conn, 1).await;
    let (prelim, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 226, "{fin}");
    assert!(
        prelim.iter().all(|r| r.code == 112),
        "only perf markers: {prelim:?}"
    );
    assert!(srv.read("perf.bin") == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opts_retr_markers_send_perf_markers_on_a_slow_read() {
    let srv = TestServer::start().await;
    // Far more than loopback socket buffers hold, so the transfer cannot finish unread.
    let data = random_bytes(32 * 1024 * 1024, 73);
    srv.write("big.bin", &data);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    expect(&mut c, "OPTS RETR Markers=1;", 200).await;
    let listener = port(&mut c).await;
    start_transfer(&mut c, "RETR big.bin").await;
    let mut conn = data_accept(&listener).await;
    // Read nothing until a perf marker shows the server is stalled on us.
    let r = next_reply(&mut c).await;
    let m = PerfMarker::from_reply(&r).unwrap_or_else(|| panic!("expected 112, got {r}"));
    assert!(m.stripe_bytes < data.len() as u64, "{r}");
    let got = read_mode_e(&mut conn).await;
    let (prelim, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 226, "{fin}");
    assert!(prelim.iter().all(|r| r.code == 112), "{prelim:?}");
    assert!(assemble(&got, data.len()) == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_markers_for_esto_count_from_the_start_of_the_section() {
    let srv = TestServer::start().await;
    srv.write("sec.bin", &[1u8; 50_000]);
    let patch = random_bytes(8_000, 74);
    let (mut c, mut conn) = slow_store(&srv, &["TREV RESTART 1"], "ESTO A 20000 sec.bin").await;
    send_block(&mut conn, 0, &patch[..3000]).await;
    let mut marked = RangeSet::new();
    while marked != RangeSet::from_range(0, 3000) {
        let r = next_reply(&mut c).await;
        let m = RestartMarker::from_reply(&r).unwrap_or_else(|| panic!("expected 111, got {r}"));
        marked.merge(&m.0);
        assert!(
            marked.iter().all(|(_, end)| end <= 3000),
            "marker {r} is not relative to the section"
        );
    }
    send_block(&mut conn, 3000, &patch[3000..]).await;
    send_eof(&mut conn, 1).await;
    expect_final(&mut c, 226).await;
    let stored = srv.read("sec.bin");
    assert!(stored[20_000..28_000] == patch[..]);
    assert!(stored[..20_000]
        .iter()
        .chain(&stored[28_000..])
        .all(|&b| b == 1));
}
