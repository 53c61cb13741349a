//! A large upload on one stream is read on a thread of its own that polls its socket, within
//! the server's `polling-streams` budget. One test, alone in its process: it watches the
//! process's threads by name.

use crate::common;

use std::time::{Duration, Instant};

use common::*;

const MIB: usize = 1 << 20;

/// Threads of this process named like the DTP's polling receivers.
fn polling_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .flatten()
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.trim() == "ferry-recv")
                })
                .count()
        })
        .unwrap_or(0)
}

/// Waits up to `limit` for `polling_threads()` to equal `want`.
async fn threads_become(want: usize, limit: Duration) -> usize {
    let start = Instant::now();
    loop {
        let now = polling_threads();
        if now == want || start.elapsed() > limit {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Starts `STOR name` on one MODE E connection and sends the first `head` bytes of `data`.
async fn upload_head(
    c: &mut ferry_client::ControlClient,
    name: &str,
    data: &[u8],
    head: usize,
) -> tokio::net::TcpStream {
    let addr = pasv(c).await;
    start_transfer(c, &format!("STOR {name}")).await;
    let mut conn = data_connect(addr).await;
    send_blocks(&mut conn, data, 0, head).await;
    conn
}

/// Sends `data[from..to]` in 1 MiB blocks.
async fn send_blocks(conn: &mut tokio::net::TcpStream, data: &[u8], from: usize, to: usize) {
    for (i, piece) in data[from..to].chunks(MIB).enumerate() {
        send_block(conn, (from + i * MIB) as u64, piece).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_one_stream_upload_polls_on_its_own_thread_within_the_budget() {
    let srv = TestServer::start_with(|c| c.polling_streams = Some(1)).await;
    let data = random_bytes(48 * MIB + 5, 91);
    let mut c = srv.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;

    // Past 32 MiB the stream moves to its thread; a sender that vanishes there fails the
    // store with 426, and the thread ends.
    let conn = upload_head(&mut c, "cut.bin", &data, 40 * MIB).await;
    assert_eq!(
        threads_become(1, Duration::from_secs(10)).await,
        1,
        "no polling thread"
    );
    drop(conn);
    let (_, fin) = final_reply(&mut c).await;
    assert_eq!(fin.code, 426, "{fin}");
    assert_eq!(
        threads_become(0, Duration::from_secs(10)).await,
        0,
        "the thread stayed"
    );

    // Its permit came back: the next upload polls too, and arrives intact.
    let mut conn = upload_head(&mut c, "whole.bin", &data, 40 * MIB).await;
    assert_eq!(
        threads_become(1, Duration::from_secs(10)).await,
        1,
        "the permit was lost"
    );
    send_blocks(&mut conn, &data, 40 * MIB, data.len()).await;
    send_eof(&mut conn, 1).await;
    expect_final(&mut c, 226).await;
    assert!(srv.read("whole.bin") == data, "bytes differ");

    // A server with a budget of none reads every upload the ordinary way.
    let none = TestServer::start_with(|c| c.polling_streams = Some(0)).await;
    let mut c = none.login().await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "MODE E", 200).await;
    let mut conn = upload_head(&mut c, "plain.bin", &data, 40 * MIB).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(polling_threads(), 0, "polled without a permit");
    send_blocks(&mut conn, &data, 40 * MIB, data.len()).await;
    send_eof(&mut conn, 1).await;
    expect_final(&mut c, 226).await;
    assert!(none.read("plain.bin") == data, "bytes differ");
}
