//! A client's lone receiving stream: past 32 MiB it reads on a thread of its own. Stopping the
//! transfer (dropping its future) must stop that thread and close the connection, and a
//! sender that dies mid-block must fail the transfer, not hang it.

use std::sync::Arc;
use std::time::Duration;

use ferry_dtp::{
    BufferPool, ChannelSetup, Direction, Dtp, DtpError, TransferDescription, TransferOutcome,
};
use ferry_proto::mode_e::BlockHeader;
use ferry_storage::{PosixStorage, Storage, VirtualPath};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const BLOCK: usize = 256 * 1024;

fn receive_into(dir: &std::path::Path, addr: std::net::SocketAddr) -> (Dtp, TransferDescription) {
    let storage: Arc<dyn Storage> = Arc::new(PosixStorage::open(dir, false).expect("storage"));
    let mut dtp = Dtp::new(storage, BufferPool::new(ferry_dtp::IO_CHUNK, 4), false);
    dtp.poll_lone_streams(Some(ferry_dtp::PollBudget::new(1)));
    let desc = TransferDescription {
        id: 1,
        truncate: true,
        idle_timeout_ms: 60_000,
        ..TransferDescription::new(
            Direction::Receive,
            VirtualPath::resolve(&VirtualPath::root(), "/got.bin").expect("path"),
            ChannelSetup::Active(vec![addr]),
        )
    };
    (dtp, desc)
}

/// A receiving transfer into a new directory, running on its own task (which hands the DTP back
/// with the result, so cached connections live on), and the sender's end of its connection.
struct Receiving {
    dir: tempfile::TempDir,
    transfer: tokio::task::JoinHandle<(Result<TransferOutcome, DtpError>, Dtp)>,
    conn: TcpStream,
}

async fn start_receiving() -> Receiving {
    start_receiving_with_idle(60_000).await
}

async fn start_receiving_with_idle(idle_timeout_ms: u64) -> Receiving {
    let dir = tempfile::tempdir().expect("tempdir");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let (mut dtp, mut desc) = receive_into(dir.path(), listener.local_addr().expect("addr"));
    desc.idle_timeout_ms = idle_timeout_ms;
    let transfer = tokio::spawn(async move {
        let (events, _keep) = tokio::sync::mpsc::channel(64);
        let r = dtp.run(&desc, &events).await;
        (r, dtp)
    });
    let (conn, _) = listener.accept().await.expect("accept");
    Receiving {
        dir,
        transfer,
        conn,
    }
}

/// Sends `blocks` full blocks of a byte pattern from offset 0.
async fn send_blocks(conn: &mut TcpStream, blocks: usize) {
    let payload = vec![0x5a; BLOCK];
    for i in 0..blocks {
        let header = BlockHeader::data((i * BLOCK) as u64, BLOCK as u64).encode();
        conn.write_all(&header).await.expect("header");
        conn.write_all(&payload).await.expect("payload");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_transfer_stops_the_receiving_thread_and_closes_the_connection() {
    let Receiving {
        transfer, mut conn, ..
    } = start_receiving().await;
    // 48 MiB: past the hand-over to the receiving thread, then the sender stalls.
    send_blocks(&mut conn, 192).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!transfer.is_finished(), "the transfer waits for more data");
    transfer.abort();
    let _ = transfer.await;
    // The thread saw the stop and dropped the socket: the sender reads end of file.
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut byte))
        .await
        .expect("the receiving side closed the connection within 10 s");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "expected the connection closed, got {read:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_that_dies_mid_block_fails_the_transfer_on_the_receiving_thread() {
    let Receiving {
        dir,
        transfer,
        mut conn,
    } = start_receiving().await;
    send_blocks(&mut conn, 160).await;
    // Half a block, then the sender goes away.
    let header = BlockHeader::data((160 * BLOCK) as u64, BLOCK as u64).encode();
    conn.write_all(&header).await.expect("header");
    conn.write_all(&vec![1u8; BLOCK / 2]).await.expect("half");
    drop(conn);
    let (result, _dtp) = tokio::time::timeout(Duration::from_secs(10), transfer)
        .await
        .expect("the transfer ends within 10 s")
        .expect("task");
    let err = result.expect_err("a transfer cut mid-block fails");
    assert!(
        err.to_string().contains("closed before end of data"),
        "unexpected error: {err}"
    );
    // What arrived whole is on disk.
    let stored = std::fs::read(dir.path().join("got.bin")).expect("stored file");
    assert!(stored.len() >= 160 * BLOCK);
    assert!(stored[..160 * BLOCK].iter().all(|&b| b == 0x5a));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_sender_times_out_on_the_receiving_thread() {
    let Receiving {
        transfer, mut conn, ..
    } = start_receiving_with_idle(1_000).await;
    // Past the hand-over, then nothing: the thread sleeps in poll(2) and must give up at the
    // idle timeout, keeping the connection open meanwhile.
    send_blocks(&mut conn, 160).await;
    let (result, _dtp) = tokio::time::timeout(Duration::from_secs(15), transfer)
        .await
        .expect("the transfer ends within 15 s")
        .expect("task");
    let err = result.expect_err("a stalled transfer times out");
    assert!(
        matches!(err, DtpError::IdleTimeout(_)),
        "unexpected error: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_lone_stream_hands_its_connection_back_after_the_eod() {
    let Receiving {
        dir,
        transfer,
        mut conn,
    } = start_receiving().await;
    send_blocks(&mut conn, 144).await;
    conn.write_all(&BlockHeader::eof(1).encode())
        .await
        .expect("eof");
    let (result, _dtp) = tokio::time::timeout(Duration::from_secs(20), transfer)
        .await
        .expect("done within 20 s")
        .expect("task");
    result.expect("transfer succeeds");
    let stored = std::fs::read(dir.path().join("got.bin")).expect("stored file");
    assert_eq!(stored.len(), 144 * BLOCK);
    assert!(stored.iter().all(|&b| b == 0x5a));
    // The connection was kept (cached), not closed: the sender sees no end of file.
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_millis(300), conn.read(&mut byte)).await;
    assert!(
        read.is_err(),
        "the receiver kept the connection open for reuse: {read:?}"
    );
}
