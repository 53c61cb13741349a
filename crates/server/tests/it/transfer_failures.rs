//! Transfers that fail: peers that vanish, data connections that never come, full disks and
//! aborts. Each ends with an error reply (never 226 for lost data) and a usable session.
//!
//! Past 400 lines on purpose: every file under `tests/` is its own binary that links the whole
//! workspace (about a minute each in release on CI's 2 cores), so a peer's or a feature's
//! tests share one file rather than spreading over several binaries.

use crate::common;

use common::*;
use ferry_client::ControlClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The session still answers and can still move a file.
async fn session_still_works(srv: &TestServer, c: &mut ControlClient) {
    expect(c, "NOOP", 200).await;
    let data = random_bytes(100_000, 99);
    client_put(c, &data, "after-failure.bin", 2)
        .await
        .expect("a put after the failure");
    assert!(srv.read("after-failure.bin") == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mode_e_stor_whose_data_connection_closes_before_eod_fails_with_426() {
    let srv = TestServer::start().await;
    let data = random_bytes(100_000, 81);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "STOR cut.bin").await;
    let mut conn = data_connect(addr).await;
    send_block(&mut conn, 0, &data[..50_000]).await;
    drop(conn);
    let (_, fin) = final_reply(&mut c).await;
    assert_eq!(
        fin.code, 426,
        "lost data must not be reported complete: {fin}"
    );
    session_still_works(&srv, &mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mode_e_stor_cut_in_the_middle_of_a_block_fails_with_426() {
    let srv = TestServer::start().await;
    let data = random_bytes(100_000, 82);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "STOR cut.bin").await;
    let mut conn = data_connect(addr).await;
    // A header promising 100 000 bytes, then only half of them.
    let header = ferry_proto::mode_e::BlockHeader::data(0, 100_000).encode();
    within("write", conn.write_all(&header)).await.unwrap();
    within("write", conn.write_all(&data[..50_000]))
        .await
        .unwrap();
    drop(conn);
    let (_, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 426, "{fin}");
    session_still_works(&srv, &mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_mode_e_header_fails_the_store_with_426() {
    let srv = TestServer::start().await;
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "STOR junk.bin").await;
    let mut conn = data_connect(addr).await;
    // Offset and count that overflow together.
    let header = ferry_proto::mode_e::BlockHeader::data(u64::MAX - 5, 100).encode();
    within("write", conn.write_all(&header)).await.unwrap();
    let _ = within("write", conn.write_all(&[0u8; 100])).await;
    let (_, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 426, "{fin}");
    drop(conn);
    session_still_works(&srv, &mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_retr_whose_reader_closes_early_fails_with_426() {
    let srv = TestServer::start().await;
    // Far more than the loopback socket buffers can hold.
    let data = random_bytes(48 * 1024 * 1024, 83);
    srv.write("huge.bin", &data);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    let addr = pasv(&mut c).await;
    let mut conn = data_connect(addr).await;
    start_transfer(&mut c, "RETR huge.bin").await;
    let mut buf = vec![0u8; 64 * 1024];
    within("first bytes", conn.read_exact(&mut buf))
        .await
        .expect("some data arrives");
    assert!(buf == data[..buf.len()]);
    drop(conn);
    let (_, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 426, "{fin}");
    session_still_works(&srv, &mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mode_e_retr_whose_reader_closes_early_fails_with_426() {
    let srv = TestServer::start().await;
    let data = random_bytes(48 * 1024 * 1024, 84);
    srv.write("huge.bin", &data);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let listener = port(&mut c).await;
    start_transfer(&mut c, "RETR huge.bin").await;
    let mut conn = data_accept(&listener).await;
    let mut buf = vec![0u8; 64 * 1024];
    within("first bytes", conn.read_exact(&mut buf))
        .await
        .expect("some data arrives");
    drop(conn);
    let (_, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 426, "{fin}");
    session_still_works(&srv, &mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stor_without_a_data_connection_times_out_with_an_error() {
    let srv = TestServer::start_with(|c| c.data_idle_timeout = 1).await;
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    for mode in ["S", "E"] {
        expect(&mut c, &format!("MODE {mode}"), 200).await;
        pasv(&mut c).await;
        start_transfer(&mut c, "STOR never.bin").await;
        let (_, fin) = final_reply(&mut c).await;
        assert!(
            fin.code == 425 || fin.code == 426,
            "MODE {mode} STOR with no data connection: {fin}"
        );
    }
    // A connection that sends nothing times out too.
    expect(&mut c, "MODE E", 200).await;
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "STOR silent.bin").await;
    let conn = data_connect(addr).await;
    let (_, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 426, "silent MODE E connection: {fin}");
    drop(conn);
    // RETR with nobody connecting to the passive port.
    srv.write("r.bin", b"data");
    expect(&mut c, "MODE S", 200).await;
    pasv(&mut c).await;
    start_transfer(&mut c, "RETR r.bin").await;
    let (_, fin) = final_reply(&mut c).await;
    assert!(fin.code == 425 || fin.code == 426, "{fin}");
    session_still_works(&srv, &mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stor_to_a_full_device_fails_with_452_and_the_session_survives() {
    if !std::path::Path::new("/dev/full").exists() {
        eprintln!("skipping: /dev/full is missing");
        return;
    }
    let srv = TestServer::start_with(|c| {
        c.root = "/".into();
        c.anonymous_whole_fs = true;
        c.anonymous_write = true;
    })
    .await;
    let mut c = srv.login_anonymous().await;
    expect(&mut c, "TYPE I", 200).await;
    // Stream mode.
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "STOR /dev/full").await;
    let mut conn = data_connect(addr).await;
    let _ = within("write", conn.write_all(&random_bytes(256 * 1024, 85))).await;
    let _ = within("shutdown", conn.shutdown()).await;
    let (_, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 452, "{fin}");
    drop(conn);
    // MODE E.
    expect(&mut c, "MODE E", 200).await;
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "STOR /dev/full").await;
    let mut conn = data_connect(addr).await;
    let header = ferry_proto::mode_e::BlockHeader::data(0, 65_536).encode();
    let _ = within("write", conn.write_all(&header)).await;
    let _ = within("write", conn.write_all(&[7u8; 65_536])).await;
    let _ = within(
        "write",
        conn.write_all(&ferry_proto::mode_e::BlockHeader::eof(1).encode()),
    )
    .await;
    let (_, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 452, "{fin}");
    drop(conn);
    expect(&mut c, "NOOP", 200).await;
    expect(&mut c, "SIZE /dev/null", 213).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abor_during_a_transfer_answers_426_then_226() {
    if !std::path::Path::new("/dev/zero").exists() {
        eprintln!("skipping: /dev/zero is missing");
        return;
    }
    let srv = TestServer::start_with(|c| {
        c.root = "/".into();
        c.anonymous_whole_fs = true;
    })
    .await;
    let mut c = srv.login_anonymous().await;
    expect(&mut c, "TYPE I", 200).await;
    let addr = pasv(&mut c).await;
    let mut conn = data_connect(addr).await;
    start_transfer(&mut c, "RETR /dev/zero").await;
    // Read a little, slowly, then abort with the transfer still running.
    let mut buf = vec![0u8; 64 * 1024];
    for _ in 0..4 {
        within("zeros", conn.read_exact(&mut buf)).await.unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    c.send_line("ABOR").await.unwrap();
    let r = next_reply(&mut c).await;
    assert_eq!(r.code, 426, "{r}");
    let r = next_reply(&mut c).await;
    assert_eq!(r.code, 226, "{r}");
    drop(conn);
    expect(&mut c, "NOOP", 200).await;
    expect(&mut c, "SIZE /dev/null", 213).await;
}

/// ABOR as the Globus control library sends it (globus_ftp_control_abort): Telnet IP
/// (IAC 0xF4) in band, Telnet Synch (IAC DM, 0xFF 0xF2) as urgent data, then `ABOR\r\n`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abor_preceded_by_telnet_ip_and_synch_aborts_the_transfer() {
    if !std::path::Path::new("/dev/zero").exists() {
        eprintln!("skipping: /dev/zero is missing");
        return;
    }
    let srv = TestServer::start_with(|c| {
        c.root = "/".into();
        c.anonymous_whole_fs = true;
    })
    .await;
    let mut raw = RawControl::connect(srv.addr).await;
    for line in ["USER anonymous", "PASS x@y", "TYPE I"] {
        let r = raw.command(line).await;
        assert!(r.code < 400, "{line}: {r}");
    }
    let r = raw.command("PASV").await;
    let addr = ferry_proto::HostPort::from_pasv_reply(&r.text()).unwrap().0;
    let mut conn = data_connect(addr).await;
    let r = raw.command("RETR /dev/zero").await;
    assert_eq!(r.code, 150, "{r}");
    let mut buf = vec![0u8; 64 * 1024];
    within("zeros", conn.read_exact(&mut buf)).await.unwrap();
    let sock = socket2::SockRef::from(&raw.stream);
    sock.send(b"\xff\xf4").expect("send IP");
    sock.send_out_of_band(b"\xff\xf2").expect("send Synch");
    let r = raw.command("ABOR").await;
    assert_eq!(r.code, 426, "{r}");
    let r = raw.read_reply().await.expect("226 after 426");
    assert_eq!(r.code, 226, "{r}");
    drop(conn);
    // Telnet commands in front of an ordinary command are ignored too.
    raw.send_bytes(b"\xff\xf4\xff\xf2NOOP\r\n").await;
    let r = raw.read_reply().await.expect("NOOP reply");
    assert_eq!(r.code, 200, "{r}");
    let r = raw.command("SIZE /dev/null").await;
    assert_eq!(r.code, 213, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_transfer_does_not_disturb_others() {
    let srv = TestServer::start().await;
    let data = random_bytes(48 * 1024 * 1024, 86);
    srv.write("huge.bin", &data);
    {
        let mut c = srv.login().await;
        expect(&mut c, "TYPE I", 200).await;
        let addr = pasv(&mut c).await;
        let _conn = data_connect(addr).await;
        start_transfer(&mut c, "RETR huge.bin").await;
        // Both connections drop here with the transfer running.
    }
    let mut c = srv.login().await;
    let small = random_bytes(200_000, 87);
    srv.write("small.bin", &small);
    let (got, _) = client_get(&mut c, "small.bin", 2).await;
    assert!(got == small);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abor_during_a_mode_e_store_answers_426_then_226_and_keeps_what_arrived() {
    let srv = TestServer::start().await;
    let data = random_bytes(50_000, 88);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    expect(&mut c, "TREV RESTART 1", 200).await;
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "STOR partial.bin").await;
    let mut conn = data_connect(addr).await;
    send_block(&mut conn, 0, &data[..20_000]).await;
    // Wait until the server has written the block, then abort.
    let r = next_reply(&mut c).await;
    assert_eq!(r.code, 111, "{r}");
    c.send_line("ABOR").await.unwrap();
    let (_, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 426, "{fin}");
    let r = next_reply(&mut c).await;
    assert_eq!(r.code, 226, "{r}");
    assert!(srv.read("partial.bin") == data[..20_000]);
    drop(conn);
    session_still_works(&srv, &mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_to_a_closed_port_fails_with_425() {
    let srv = TestServer::start().await;
    srv.write("f.bin", b"data");
    let mut c = srv.login().await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let hp = ferry_proto::HostPort(closed).to_port_form().unwrap();
    for mode in ["S", "E"] {
        expect(&mut c, &format!("MODE {mode}"), 200).await;
        expect(&mut c, "TYPE I", 200).await;
        expect(&mut c, &format!("PORT {hp}"), 200).await;
        start_transfer(&mut c, "RETR f.bin").await;
        let (_, fin) = final_reply(&mut c).await;
        assert_eq!(fin.code, 425, "MODE {mode}: {fin}");
    }
    session_still_works(&srv, &mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pasv_with_every_port_of_the_range_taken_answers_425() {
    // A one-port range; a listener of our own holds the port.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().port();
    let srv = TestServer::start_with(|c| {
        c.port_range = Some(format!("{taken}-{taken}").parse().expect("port range"));
    })
    .await;
    let mut c = srv.login().await;
    let r = cmd(&mut c, "PASV").await;
    assert_eq!(r.code, 425, "{r}");
    expect(&mut c, "NOOP", 200).await;
    drop(holder);
    // Free again: the same session gets the port.
    let addr = pasv(&mut c).await;
    assert_eq!(addr.port(), taken);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_on_directories_and_missing_paths_fail_with_550() {
    let srv = TestServer::start().await;
    srv.write("dir/inside.txt", b"x");
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    for line in [
        "RETR dir",
        "RETR missing.bin",
        "STOR dir",
        "STOR no/such/dir/f.bin",
    ] {
        pasv(&mut c).await;
        // Refused before it began: the error alone, no 150 first (as Globus).
        let r = cmd(&mut c, line).await;
        assert_eq!(r.code, 550, "'{line}': {r}");
    }
    assert!(srv.path("dir").is_dir());
    assert_eq!(srv.read("dir/inside.txt"), b"x");
    assert!(!srv.path("no").exists());
    session_still_works(&srv, &mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_a_in_mode_e_is_refused_and_the_session_survives() {
    let srv = TestServer::start().await;
    srv.write("t.txt", b"text\n");
    let mut c = srv.login().await;
    expect(&mut c, "TYPE A", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let _listener = port(&mut c).await;
    let r = cmd(&mut c, "RETR t.txt").await;
    let fin = if r.is_preliminary() {
        final_reply(&mut c).await.1
    } else {
        r
    };
    assert_eq!(fin.code, 504, "{fin}");
    session_still_works(&srv, &mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mode_e_protocol_violations_fail_the_store_with_426() {
    let srv = TestServer::start_with(|c| c.data_idle_timeout = 2).await;
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    // An EOF block announcing fewer EODs than arrive.
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "STOR v1.bin").await;
    let mut conn = data_connect(addr).await;
    send_block(&mut conn, 0, b"hello").await;
    send_eof(&mut conn, 0).await;
    let (_, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 426, "EOF announcing 0 EODs: {fin}");
    drop(conn);
    // CLOSE before EOD.
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "STOR v2.bin").await;
    let mut conn = data_connect(addr).await;
    let mut header = ferry_proto::mode_e::BlockHeader::data(0, 5);
    header.descriptor = ferry_proto::mode_e::Descriptor(ferry_proto::mode_e::Descriptor::CLOSE);
    within("write", conn.write_all(&header.encode()))
        .await
        .unwrap();
    within("write", conn.write_all(b"hello")).await.unwrap();
    drop(conn);
    let (_, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 426, "CLOSE before EOD: {fin}");
    // An EOF block announcing more connections than ever come: the idle timeout ends it.
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "STOR v3.bin").await;
    let mut conn = data_connect(addr).await;
    send_block(&mut conn, 0, b"hello").await;
    send_eof(&mut conn, 5).await;
    let (_, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 426, "missing connections: {fin}");
    drop(conn);
    session_still_works(&srv, &mut c).await;
}
