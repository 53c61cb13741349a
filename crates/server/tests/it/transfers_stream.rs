//! Stream-mode transfers driven by hand over PASV and PORT, with the bytes compared: RETR,
//! STOR, APPE, STOU, REST and TYPE A.

use crate::common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_retr_over_pasv_delivers_the_file() {
    let srv = TestServer::start().await;
    let data = random_bytes(3 * 1024 * 1024 + 7, 31);
    srv.write("dl.bin", &data);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    let addr = pasv(&mut c).await;
    let mut conn = data_connect(addr).await;
    start_transfer(&mut c, "RETR dl.bin").await;
    let got = read_all(&mut conn).await;
    expect_final(&mut c, 226).await;
    assert_eq!(got.len(), data.len());
    assert!(got == data, "bytes differ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_stor_over_pasv_stores_the_bytes() {
    let srv = TestServer::start().await;
    let data = random_bytes(2 * 1024 * 1024 + 3, 32);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "STOR up.bin").await;
    let mut conn = data_connect(addr).await;
    write_all_and_close(&mut conn, &data).await;
    expect_final(&mut c, 226).await;
    assert!(srv.read("up.bin") == data, "bytes differ");
    // STOR over an existing file replaces it entirely.
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "STOR up.bin").await;
    let mut conn = data_connect(addr).await;
    write_all_and_close(&mut conn, b"short").await;
    expect_final(&mut c, 226).await;
    assert_eq!(srv.read("up.bin"), b"short");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_retr_over_port_delivers_the_file() {
    let srv = TestServer::start().await;
    let data = random_bytes(1024 * 1024 + 99, 33);
    srv.write("dl.bin", &data);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    let listener = port(&mut c).await;
    start_transfer(&mut c, "RETR dl.bin").await;
    let mut conn = data_accept(&listener).await;
    let got = read_all(&mut conn).await;
    expect_final(&mut c, 226).await;
    assert!(got == data, "bytes differ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_stor_over_port_stores_the_bytes() {
    let srv = TestServer::start().await;
    let data = random_bytes(1024 * 1024 + 5, 34);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    let listener = port(&mut c).await;
    start_transfer(&mut c, "STOR up.bin").await;
    let mut conn = data_accept(&listener).await;
    write_all_and_close(&mut conn, &data).await;
    expect_final(&mut c, 226).await;
    assert!(srv.read("up.bin") == data, "bytes differ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_a_converts_line_ends_both_ways() {
    let srv = TestServer::start().await;
    srv.write("unix.txt", b"one\ntwo\n\nthree");
    let mut c = srv.login().await;
    expect(&mut c, "TYPE A", 200).await;
    let addr = pasv(&mut c).await;
    let mut conn = data_connect(addr).await;
    start_transfer(&mut c, "RETR unix.txt").await;
    let got = read_all(&mut conn).await;
    expect_final(&mut c, 226).await;
    assert_eq!(got, b"one\r\ntwo\r\n\r\nthree");

    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "STOR dos.txt").await;
    let mut conn = data_connect(addr).await;
    write_all_and_close(&mut conn, b"a\r\nb\r\n").await;
    expect_final(&mut c, 226).await;
    assert_eq!(srv.read("dos.txt"), b"a\nb\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appe_appends_and_creates_missing_files() {
    let srv = TestServer::start().await;
    srv.write("log.txt", b"first line\n");
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "APPE log.txt").await;
    let mut conn = data_connect(addr).await;
    write_all_and_close(&mut conn, b"second line\n").await;
    expect_final(&mut c, 226).await;
    assert_eq!(srv.read("log.txt"), b"first line\nsecond line\n");

    let addr = pasv(&mut c).await;
    start_transfer(&mut c, "APPE new.txt").await;
    let mut conn = data_connect(addr).await;
    write_all_and_close(&mut conn, b"fresh").await;
    expect_final(&mut c, 226).await;
    assert_eq!(srv.read("new.txt"), b"fresh");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stou_stores_under_a_new_unique_name_announced_in_the_150_reply() {
    let srv = TestServer::start().await;
    srv.write("report", b"existing");
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    let mut names = Vec::new();
    for (arg, body) in [("STOU", &b"one"[..]), ("STOU report", &b"two"[..])] {
        let addr = pasv(&mut c).await;
        let r = expect(&mut c, arg, 150).await;
        let text = r.text();
        let name = text
            .strip_prefix("FILE: ")
            .unwrap_or_else(|| panic!("150 FILE: <name>, got {r}"))
            .to_string();
        let mut conn = data_connect(addr).await;
        write_all_and_close(&mut conn, body).await;
        expect_final(&mut c, 226).await;
        assert_eq!(srv.read(&name), body, "{name}");
        names.push(name);
    }
    assert_ne!(names[0], names[1]);
    assert!(names[1].starts_with("report") && names[1] != "report");
    assert_eq!(
        srv.read("report"),
        b"existing",
        "the named file is untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_then_stream_retr_sends_from_the_offset() {
    let srv = TestServer::start().await;
    let data = random_bytes(500_000, 35);
    srv.write("r.bin", &data);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    let addr = pasv(&mut c).await;
    expect(&mut c, "REST 123456", 350).await;
    let mut conn = data_connect(addr).await;
    start_transfer(&mut c, "RETR r.bin").await;
    let got = read_all(&mut conn).await;
    expect_final(&mut c, 226).await;
    assert!(got == data[123_456..], "tail differs");
    // REST applies to one transfer only.
    let addr = pasv(&mut c).await;
    let mut conn = data_connect(addr).await;
    start_transfer(&mut c, "RETR r.bin").await;
    let got = read_all(&mut conn).await;
    expect_final(&mut c, 226).await;
    assert!(got == data, "whole file after a restarted one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_then_stream_stor_writes_from_the_offset_without_truncating() {
    let srv = TestServer::start().await;
    srv.write("doc.txt", b"hello world, and more");
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    let addr = pasv(&mut c).await;
    expect(&mut c, "REST 6", 350).await;
    start_transfer(&mut c, "STOR doc.txt").await;
    let mut conn = data_connect(addr).await;
    write_all_and_close(&mut conn, b"WORLD").await;
    expect_final(&mut c, 226).await;
    assert_eq!(srv.read("doc.txt"), b"hello WORLD, and more");
}
