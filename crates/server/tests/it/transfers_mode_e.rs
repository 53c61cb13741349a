//! MODE E transfers: ferry_client gets and puts with parallel streams, and hand-framed blocks
//! for settings order, data-channel reuse, restarts and partial transfers.
//!
//! Past 400 lines on purpose: every file under `tests/` is its own binary that links the whole
//! workspace (about a minute each in release on CI's 2 cores), so a peer's or a feature's
//! tests share one file rather than spreading over several binaries.

use crate::common;

use common::*;
use ferry_proto::RangeSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_get_with_1_4_and_8_streams_delivers_identical_bytes() {
    let srv = TestServer::start().await;
    let data = random_bytes(5 * 1024 * 1024 + 4321, 51);
    srv.write("src.bin", &data);
    let mut c = srv.login().await;
    for n in [1, 4, 8] {
        let (got, used) = client_get(&mut c, "src.bin", n).await;
        assert_eq!(got.len(), data.len(), "{n} streams");
        assert!(got == data, "bytes differ with {n} streams");
        assert_eq!(used, n, "the server opened {n} streams");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_put_with_1_4_and_8_streams_stores_identical_bytes() {
    let srv = TestServer::start().await;
    let data = random_bytes(5 * 1024 * 1024 + 1234, 52);
    let mut c = srv.login().await;
    for n in [1, 4, 8] {
        let name = format!("put{n}.bin");
        let used = client_put(&mut c, &data, &name, n)
            .await
            .unwrap_or_else(|e| panic!("put with {n} streams: {e}"));
        assert_eq!(used, n);
        assert!(srv.read(&name) == data, "bytes differ with {n} streams");
    }
    // A smaller put over an existing file truncates it.
    client_put(&mut c, b"tiny", "put1.bin", 2).await.unwrap();
    assert_eq!(srv.read("put1.bin"), b"tiny");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_retr_sends_one_eof_with_the_stream_count_and_eod_on_the_others() {
    let srv = TestServer::start().await;
    let data = random_bytes(1024 * 1024 + 17, 53);
    srv.write("p.bin", &data);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    expect(&mut c, "OPTS RETR Parallelism=3,3,3;", 200).await;
    let listener = port(&mut c).await;
    start_transfer(&mut c, "RETR p.bin").await;
    let mut readers = Vec::new();
    for _ in 0..3 {
        let mut conn = data_accept(&listener).await;
        readers.push(tokio::spawn(async move { read_mode_e(&mut conn).await }));
    }
    let mut all = RangeSet::new();
    let mut eofs = Vec::new();
    for r in readers {
        let got = within("stream reader", r).await.expect("reader");
        got.assert_blocks_match(&data, 0);
        all.merge(&got.ranges());
        eofs.extend(got.eof_count);
    }
    expect_final(&mut c, 226).await;
    assert_eq!(eofs, [3], "exactly one EOF block announcing 3 EODs");
    assert_eq!(all, RangeSet::from_range(0, data.len() as u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pasv_before_mode_e_and_type_i_still_receives_a_correct_mode_e_store() {
    let srv = TestServer::start().await;
    let data = random_bytes(300_000, 54);
    let mut c = srv.login().await;
    let addr = pasv(&mut c).await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    start_transfer(&mut c, "STOR order.bin").await;
    // Two connections, blocks out of order, EOF on the second.
    let mut a = data_connect(addr).await;
    let mut b = data_connect(addr).await;
    send_block(&mut a, 200_000, &data[200_000..]).await;
    send_block(&mut b, 100_000, &data[100_000..200_000]).await;
    send_block(&mut a, 0, &data[..100_000]).await;
    within(
        "EOD",
        tokio::io::AsyncWriteExt::write_all(
            &mut a,
            &ferry_proto::mode_e::BlockHeader::eod().encode(),
        ),
    )
    .await
    .unwrap();
    send_eof(&mut b, 2).await;
    expect_final(&mut c, 226).await;
    assert!(srv.read("order.bin") == data, "bytes differ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mode_e_then_pasv_then_mode_s_stores_in_stream_mode() {
    let srv = TestServer::start().await;
    let data = random_bytes(200_000, 55);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let addr = pasv(&mut c).await;
    expect(&mut c, "MODE S", 200).await;
    start_transfer(&mut c, "STOR plain.bin").await;
    let mut conn = data_connect(addr).await;
    write_all_and_close(&mut conn, &data).await;
    expect_final(&mut c, 226).await;
    assert!(srv.read("plain.bin") == data, "stream bytes stored as sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_mode_e_retr_reuses_the_data_connection_and_answers_125() {
    let srv = TestServer::start().await;
    let one = random_bytes(400_000, 56);
    let two = random_bytes(250_000, 57);
    srv.write("one.bin", &one);
    srv.write("two.bin", &two);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let listener = port(&mut c).await;
    expect(&mut c, "RETR one.bin", 150).await;
    let mut conn = data_accept(&listener).await;
    let got = read_mode_e(&mut conn).await;
    expect_final(&mut c, 226).await;
    assert_eq!(got.eof_count, Some(1));
    assert!(!got.close, "the connection is kept for reuse");
    assert!(assemble(&got, one.len()) == one);

    let r = expect(&mut c, "RETR two.bin", 125).await;
    assert!(r.text().contains("reusing"), "{r}");
    let got = read_mode_e(&mut conn).await;
    expect_final(&mut c, 226).await;
    got.assert_blocks_match(&two, 0);
    assert_eq!(got.ranges(), RangeSet::from_range(0, two.len() as u64));

    // A new PORT forgets the cached connection: the next RETR starts fresh with 150.
    let listener = port(&mut c).await;
    expect(&mut c, "RETR one.bin", 150).await;
    let mut fresh = data_accept(&listener).await;
    let got = read_mode_e(&mut fresh).await;
    expect_final(&mut c, 226).await;
    assert!(assemble(&got, one.len()) == one);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_mode_e_stor_reuses_the_data_connection_and_answers_125() {
    let srv = TestServer::start().await;
    let one = random_bytes(100_000, 58);
    let two = random_bytes(70_000, 59);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let addr = pasv(&mut c).await;
    expect(&mut c, "STOR one.bin", 150).await;
    let mut conn = data_connect(addr).await;
    send_block(&mut conn, 0, &one).await;
    send_eof(&mut conn, 1).await;
    expect_final(&mut c, 226).await;
    expect(&mut c, "STOR two.bin", 125).await;
    send_block(&mut conn, 0, &two).await;
    send_eof(&mut conn, 1).await;
    expect_final(&mut c, 226).await;
    assert!(srv.read("one.bin") == one);
    assert!(srv.read("two.bin") == two);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_ranges_then_stor_fills_the_gaps_without_truncating() {
    let srv = TestServer::start().await;
    let full = random_bytes(30_000, 60);
    let mut partial = full.clone();
    partial[10_000..20_000].fill(0);
    partial[25_000..27_000].fill(0);
    srv.write("holes.bin", &partial);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let addr = pasv(&mut c).await;
    expect(&mut c, "REST 0-10000,20000-25000,27000-30000", 350).await;
    start_transfer(&mut c, "STOR holes.bin").await;
    let mut conn = data_connect(addr).await;
    send_block(&mut conn, 25_000, &full[25_000..27_000]).await;
    send_block(&mut conn, 10_000, &full[10_000..20_000]).await;
    send_eof(&mut conn, 1).await;
    expect_final(&mut c, 226).await;
    let stored = srv.read("holes.bin");
    assert_eq!(stored.len(), full.len(), "not truncated");
    assert!(stored == full, "gaps filled, the rest kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retr_with_rest_ranges_sends_only_the_complement() {
    let srv = TestServer::start().await;
    let data = random_bytes(200_000, 61);
    srv.write("r.bin", &data);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let listener = port(&mut c).await;
    expect(&mut c, "REST 0-1000,5000-6000,150000-200000", 350).await;
    start_transfer(&mut c, "RETR r.bin").await;
    let mut conn = data_accept(&listener).await;
    let got = read_mode_e(&mut conn).await;
    expect_final(&mut c, 226).await;
    got.assert_blocks_match(&data, 0);
    let mut want = RangeSet::from_range(1000, 5000);
    want.insert(6000, 150_000);
    assert_eq!(got.ranges(), want);
    assert_eq!(got.bytes(), 4000 + 144_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eret_partial_sends_the_section_with_offsets_from_zero() {
    let srv = TestServer::start().await;
    let data = random_bytes(500_000, 62);
    srv.write("e.bin", &data);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let listener = port(&mut c).await;
    start_transfer(&mut c, "ERET P 100000 150000 e.bin").await;
    let mut conn = data_accept(&listener).await;
    let got = read_mode_e(&mut conn).await;
    expect_final(&mut c, 226).await;
    got.assert_blocks_match(&data, 100_000);
    assert_eq!(got.ranges(), RangeSet::from_range(0, 150_000));
    // A section running past the end is cut at the end.
    let listener = port(&mut c).await;
    start_transfer(&mut c, "ERET P 450000 100000 e.bin").await;
    let mut conn = data_accept(&listener).await;
    let got = read_mode_e(&mut conn).await;
    expect_final(&mut c, 226).await;
    got.assert_blocks_match(&data, 450_000);
    assert_eq!(got.ranges(), RangeSet::from_range(0, 50_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn esto_adjusted_writes_at_the_offset_without_truncating() {
    let srv = TestServer::start().await;
    let base = random_bytes(100_000, 63);
    let patch = random_bytes(20_000, 64);
    srv.write("p.bin", &base);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "ESTO A 30000 p.bin").await;
    let mut conn = data_connect(addr).await;
    send_block(&mut conn, 10_000, &patch[10_000..]).await;
    send_block(&mut conn, 0, &patch[..10_000]).await;
    send_eof(&mut conn, 1).await;
    expect_final(&mut c, 226).await;
    let mut want = base.clone();
    want[30_000..50_000].copy_from_slice(&patch);
    let stored = srv.read("p.bin");
    assert_eq!(stored.len(), base.len(), "not truncated");
    assert!(stored == want, "patched at the offset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mode_e_appe_appends() {
    let srv = TestServer::start().await;
    let head = random_bytes(70_000, 65);
    let tail = random_bytes(30_000, 66);
    srv.write("a.bin", &head);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "APPE a.bin").await;
    let mut conn = data_connect(addr).await;
    send_block(&mut conn, 0, &tail).await;
    send_eof(&mut conn, 1).await;
    expect_final(&mut c, 226).await;
    let mut want = head.clone();
    want.extend_from_slice(&tail);
    assert!(srv.read("a.bin") == want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eret_with_rest_ranges_sends_the_complement_within_the_section() {
    let srv = TestServer::start().await;
    let data = random_bytes(100_000, 67);
    srv.write("s.bin", &data);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let listener = port(&mut c).await;
    // Ranges count from the first byte of the section.
    expect(&mut c, "REST 0-2000,4000-5000", 350).await;
    start_transfer(&mut c, "ERET P 10000 8000 s.bin").await;
    let mut conn = data_accept(&listener).await;
    let got = read_mode_e(&mut conn).await;
    expect_final(&mut c, 226).await;
    got.assert_blocks_match(&data, 10_000);
    let mut want = RangeSet::from_range(2000, 4000);
    want.insert(5000, 8000);
    assert_eq!(got.ranges(), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mode_e_store_waits_for_every_eod_the_eof_block_announced() {
    let srv = TestServer::start().await;
    let data = random_bytes(80_000, 68);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    expect(&mut c, "TREV RESTART 1", 200).await;
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "STOR late.bin").await;
    // The first connection sends its half and the EOF block announcing two EODs.
    let mut first = data_connect(addr).await;
    send_block(&mut first, 0, &data[..40_000]).await;
    send_eof(&mut first, 2).await;
    // Once a restart marker shows the server has read it, the second connection arrives.
    let mut marked = RangeSet::new();
    while !marked.contains_range(0, 40_000) {
        let r = next_reply(&mut c).await;
        let m = ferry_proto::RestartMarker::from_reply(&r)
            .unwrap_or_else(|| panic!("the transfer must still run, got {r}"));
        marked.merge(&m.0);
    }
    let mut second = data_connect(addr).await;
    send_block(&mut second, 40_000, &data[40_000..]).await;
    within(
        "EOD",
        tokio::io::AsyncWriteExt::write_all(
            &mut second,
            &ferry_proto::mode_e::BlockHeader::eod().encode(),
        ),
    )
    .await
    .unwrap();
    expect_final(&mut c, 226).await;
    assert!(srv.read("late.bin") == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallelism_raised_between_gets_adds_connections_to_the_reused_ones() {
    let srv = TestServer::start().await;
    let data = random_bytes(600_000, 69);
    srv.write("g.bin", &data);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    expect(&mut c, "OPTS RETR Parallelism=2,2,2;", 200).await;
    let listener = port(&mut c).await;
    start_transfer(&mut c, "RETR g.bin").await;
    let mut conns = vec![data_accept(&listener).await, data_accept(&listener).await];
    let mut all = RangeSet::new();
    let mut readers = Vec::new();
    for mut conn in conns.drain(..) {
        readers.push(tokio::spawn(async move {
            let got = read_mode_e(&mut conn).await;
            (conn, got)
        }));
    }
    for r in readers {
        let (conn, got) = within("reader", r).await.unwrap();
        got.assert_blocks_match(&data, 0);
        all.merge(&got.ranges());
        conns.push(conn);
    }
    expect_final(&mut c, 226).await;
    assert_eq!(all, RangeSet::from_range(0, data.len() as u64));

    expect(&mut c, "OPTS RETR Parallelism=3,3,3;", 200).await;
    start_transfer(&mut c, "RETR g.bin").await;
    conns.push(data_accept(&listener).await);
    let mut readers = Vec::new();
    for mut conn in conns {
        readers.push(tokio::spawn(async move { read_mode_e(&mut conn).await }));
    }
    let mut all = RangeSet::new();
    let mut eofs = Vec::new();
    for r in readers {
        let got = within("reader", r).await.unwrap();
        got.assert_blocks_match(&data, 0);
        all.merge(&got.ranges());
        eofs.extend(got.eof_count);
    }
    expect_final(&mut c, 226).await;
    assert_eq!(eofs, [3], "the EOF block counts reused and new connections");
    assert_eq!(all, RangeSet::from_range(0, data.len() as u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spas_and_spor_carry_mode_e_transfers() {
    let srv = TestServer::start().await;
    let data = random_bytes(250_000, 70);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let r = expect(&mut c, "SPAS", 229).await;
    assert_eq!(r.lines.last().map(String::as_str), Some("End"), "{r}");
    let addrs = ferry_proto::HostPort::from_spas_reply(&r.lines).expect("SPAS addresses");
    assert_eq!(addrs.len(), 1, "one stripe: {r}");
    start_transfer(&mut c, "STOR striped.bin").await;
    let mut conn = data_connect(addrs[0].0).await;
    send_block(&mut conn, 0, &data).await;
    send_eof(&mut conn, 1).await;
    expect_final(&mut c, 226).await;
    assert!(srv.read("striped.bin") == data);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hp = ferry_proto::HostPort(listener.local_addr().unwrap());
    expect(&mut c, &format!("SPOR {}", hp.to_port_form().unwrap()), 200).await;
    start_transfer(&mut c, "RETR striped.bin").await;
    let mut conn = data_accept(&listener).await;
    let got = read_mode_e(&mut conn).await;
    expect_final(&mut c, 226).await;
    assert!(assemble(&got, data.len()) == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_block_that_carries_eod_is_accepted() {
    let srv = TestServer::start().await;
    let data = random_bytes(20_000, 75);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "STOR eod.bin").await;
    let mut a = data_connect(addr).await;
    let mut b = data_connect(addr).await;
    // GFD.20 allows the last data block to carry EOD itself.
    let mut header = ferry_proto::mode_e::BlockHeader::data(10_000, 10_000);
    header.descriptor = ferry_proto::mode_e::Descriptor(ferry_proto::mode_e::Descriptor::EOD);
    within(
        "write",
        tokio::io::AsyncWriteExt::write_all(&mut a, &header.encode()),
    )
    .await
    .unwrap();
    within(
        "write",
        tokio::io::AsyncWriteExt::write_all(&mut a, &data[10_000..]),
    )
    .await
    .unwrap();
    send_block(&mut b, 0, &data[..10_000]).await;
    send_eof(&mut b, 2).await;
    expect_final(&mut c, 226).await;
    assert!(srv.read("eod.bin") == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_one_stream_retr_with_rest_gaps_then_an_eret_on_the_cached_connection() {
    let srv = TestServer::start().await;
    let len = 40 * 1024 * 1024 + 12_345;
    let data = random_bytes(len, 71);
    srv.write("big.bin", &data);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let listener = port(&mut c).await;
    // Gaps that blocks straddle, so some writes carry pieces of two ranges.
    expect(&mut c, "REST 0-1000,262000-263000,10485760-10486000", 350).await;
    start_transfer(&mut c, "RETR big.bin").await;
    let mut conn = data_accept(&listener).await;
    let got = read_mode_e(&mut conn).await;
    expect_final(&mut c, 226).await;
    got.assert_blocks_match(&data, 0);
    let mut want = RangeSet::from_range(1000, 262_000);
    want.insert(263_000, 10_485_760);
    want.insert(10_486_000, len as u64);
    assert_eq!(got.ranges(), want);
    assert_eq!(got.eof_count, Some(1));
    assert!(
        got.blocks.iter().all(|b| b.data.len() <= 256 * 1024),
        "blocks keep the one-stream size a whole-block reader expects"
    );
    // The connection stays cached: a large partial get reuses it, offsets from the section.
    let r = expect(&mut c, "ERET P 5000 36000001 big.bin", 125).await;
    assert!(r.text().contains("reusing"), "{r}");
    let got = read_mode_e(&mut conn).await;
    expect_final(&mut c, 226).await;
    got.assert_blocks_match(&data, 5000);
    assert_eq!(got.ranges(), RangeSet::from_range(0, 36_000_001));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_one_stream_client_get_finishes_on_its_own_thread_with_identical_bytes() {
    // Past the size at which the client's lone receiving stream moves to a thread of its own.
    let srv = TestServer::start().await;
    let data = random_bytes(48 * 1024 * 1024 + 999, 72);
    srv.write("big.bin", &data);
    let mut c = srv.login().await;
    let (got, used) = client_get(&mut c, "big.bin", 1).await;
    assert_eq!(used, 1);
    assert_eq!(got.len(), data.len());
    assert!(got == data, "bytes differ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn site_blocksize_sets_the_block_size_of_this_sessions_mode_e_sends() {
    let srv = TestServer::start().await;
    let len = 3 * 1024 * 1024 + 4321;
    let data = random_bytes(len, 73);
    srv.write("src.bin", &data);
    let mut c = srv.login().await;
    let feat = expect(&mut c, "FEAT", 211).await;
    assert!(
        feat.lines.iter().any(|l| l.trim() == "SITE BLOCKSIZE"),
        "{feat}"
    );
    for bad in [
        "SITE BLOCKSIZE 4095",
        "SITE BLOCKSIZE 67108865",
        "SITE BLOCKSIZE lots",
    ] {
        expect(&mut c, bad, 501).await;
    }
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let listener = port(&mut c).await;
    // One stream: every block but the last has the asked size (sent as two of the server's
    // 64 KiB buffers at a time), and `0` returns to the configured 64 KiB.
    let mut conn = None;
    for (asked, size) in [
        ("524288", 512 * 1024),
        ("0", 64 * 1024),
        ("1000000", 1_000_000),
    ] {
        expect(&mut c, &format!("SITE BLOCKSIZE {asked}"), 200).await;
        start_transfer(&mut c, "RETR src.bin").await;
        let conn = match conn.as_mut() {
            Some(cached) => cached,
            None => conn.insert(data_accept(&listener).await),
        };
        let got = read_mode_e(conn).await;
        expect_final(&mut c, 226).await;
        got.assert_blocks_match(&data, 0);
        assert_eq!(got.bytes(), len as u64, "SITE BLOCKSIZE {asked}");
        let (last, whole) = got.blocks.split_last().expect("blocks");
        assert!(
            whole.iter().all(|b| b.data.len() == size) && last.data.len() <= size,
            "SITE BLOCKSIZE {asked}: block sizes {:?}",
            got.blocks.iter().map(|b| b.data.len()).collect::<Vec<_>>()
        );
    }
}
