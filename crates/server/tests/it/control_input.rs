//! Hostile or broken control-channel input: the session answers 500 (or hangs up) and the
//! server keeps serving everyone else.

use crate::common;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_text_gets_500_and_the_session_still_answers_noop() {
    let srv = TestServer::start().await;
    let mut c = srv.connect().await;
    let r = cmd(&mut c, "HELLO WORLD this is not ftp").await;
    assert_eq!(r.code, 500, "{r}");
    let r = cmd(&mut c, "!!@@##").await;
    assert_eq!(r.code, 500, "{r}");
    expect(&mut c, "NOOP", 200).await;
    c.login(USER, PASSWORD).await.expect("login after garbage");
    let r = cmd(&mut c, "XYZZY plugh").await;
    assert_eq!(r.code, 500, "{r}");
    expect(&mut c, "NOOP", 200).await;
    expect(&mut c, "PWD", 257).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_byte_value_gets_500_or_a_hangup_and_other_clients_still_transfer() {
    let srv = TestServer::start().await;
    let data = random_bytes(300_000, 1);
    srv.write("keep.bin", &data);

    let mut raw = RawControl::connect(srv.addr).await;
    let mut all: Vec<u8> = (0u8..=255).collect();
    all.extend_from_slice(b"\r\n");
    raw.send_bytes(&all).await;
    // Two lines: 0x00-0x09 and 0x0b-0xff; each is 500 unless the server hangs up.
    let mut answered = 0;
    while answered < 2 {
        match raw.read_reply().await {
            Some(r) => {
                assert_eq!(r.code, 500, "binary line: {r}");
                answered += 1;
            }
            None => break,
        }
    }
    if answered == 2 {
        raw.send_bytes(b"NOOP\r\n").await;
        let r = raw.read_reply().await.expect("NOOP answered");
        assert_eq!(r.code, 200, "{r}");
    }

    let mut other = srv.login().await;
    let (got, _) = client_get(&mut other, "keep.bin", 2).await;
    assert_eq!(got, data);
    expect(&mut other, "NOOP", 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_binary_lines_is_answered_500_until_the_server_hangs_up() {
    let srv = TestServer::start().await;
    let data = random_bytes(100_000, 2);
    srv.write("keep.bin", &data);

    // The server tolerates 32 consecutive bad lines. Exactly that many leaves no unread input
    // behind when it hangs up, so the close is a clean FIN and its last reply is readable.
    let mut raw = within("connect", TcpStream::connect(srv.addr))
        .await
        .expect("connect");
    let mut junk = Vec::new();
    for seed in 0..32u64 {
        let mut line = random_bytes(200, seed);
        line.retain(|&b| b != b'\n');
        line.insert(0, 0xff);
        line.extend_from_slice(b"\r\n");
        junk.extend_from_slice(&line);
    }
    within("send junk", raw.write_all(&junk))
        .await
        .expect("send junk");
    let mut text = Vec::new();
    within("read until close", raw.read_to_end(&mut text))
        .await
        .expect("server closes cleanly");
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("220 "), "banner first: {text}");
    let (last, middle) = lines[1..].split_last().expect("replies after the banner");
    assert_eq!(middle.len(), 32, "one 500 per bad line: {text}");
    assert!(
        middle.iter().all(|l| l.starts_with("500 ")),
        "only 500s: {text}"
    );
    assert!(last.starts_with("421 "), "then 421 and close: {text}");

    let mut other = srv.login().await;
    let (got, _) = client_get(&mut other, "keep.bin", 1).await;
    assert_eq!(got, data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlong_line_gets_500_too_long_and_the_session_still_works() {
    let srv = TestServer::start().await;
    let mut c = srv.login().await;
    let long = "A".repeat(100 * 1024);
    within("send long line", c.send_line(&long))
        .await
        .expect("send");
    let r = next_reply(&mut c).await;
    assert_eq!(r.code, 500, "{r}");
    assert!(r.text().contains("too long"), "{r}");
    expect(&mut c, "NOOP", 200).await;
    expect(&mut c, "PWD", 257).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_half_open_connections_do_not_stop_a_login_and_get() {
    let srv = TestServer::start().await;
    let data = random_bytes(1 << 20, 3);
    srv.write("big.bin", &data);
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(
            within("half-open connect", TcpStream::connect(srv.addr))
                .await
                .expect("connect"),
        );
    }
    let mut c = srv.login().await;
    let (got, _) = client_get(&mut c, "big.bin", 4).await;
    assert_eq!(got, data);
    expect(&mut c, "NOOP", 200).await;
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_sent_during_a_transfer_are_answered_after_it_in_order_and_stat_at_once() {
    let srv = TestServer::start().await;
    let data = random_bytes(30_000, 4);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "STOR piped.bin").await;
    let mut conn = data_connect(addr).await;
    send_block(&mut conn, 0, &data[..10_000]).await;
    // STAT is answered while the transfer runs; the others wait for it to end.
    c.send_line("NOOP").await.unwrap();
    c.send_line("STAT").await.unwrap();
    let r = next_reply(&mut c).await;
    assert_eq!(r.code, 213, "STAT during a transfer: {r}");
    c.send_line("PWD").await.unwrap();
    c.send_line("SIZE piped.bin").await.unwrap();
    send_block(&mut conn, 10_000, &data[10_000..]).await;
    send_eof(&mut conn, 1).await;
    expect_final(&mut c, 226).await;
    assert_eq!(next_reply(&mut c).await.code, 200, "NOOP");
    assert_eq!(next_reply(&mut c).await.code, 257, "PWD");
    let r = next_reply(&mut c).await;
    assert_eq!(
        (r.code, r.text()),
        (213, "30000".to_string()),
        "SIZE after the store"
    );
    assert!(srv.read("piped.bin") == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telnet_commands_and_bare_lf_line_ends_are_tolerated() {
    let srv = TestServer::start().await;
    let mut raw = RawControl::connect(srv.addr).await;
    raw.send_bytes(b"NOOP\n").await;
    assert_eq!(raw.read_reply().await.unwrap().code, 200);
    // Telnet option negotiation and IP in front of commands are dropped.
    raw.send_bytes(b"\xff\xfb\x18\xff\xf4NOOP\r\n").await;
    assert_eq!(raw.read_reply().await.unwrap().code, 200);
    raw.send_bytes(format!("user {USER}\r\npass {PASSWORD}\r\n").as_bytes())
        .await;
    assert_eq!(
        raw.read_reply().await.unwrap().code,
        331,
        "verbs are case-insensitive"
    );
    assert_eq!(raw.read_reply().await.unwrap().code, 230);
    raw.send_bytes(b"\r\n").await;
    assert_eq!(raw.read_reply().await.unwrap().code, 500, "empty line");
    assert_eq!(raw.command("PWD").await.code, 257);
}
