//! A sending transfer's data connections made ahead (`Dtp::connect_ahead`), as a forwarding
//! node does for its children before their data comes: they are made at once, the next
//! transfer to the same endpoints runs on exactly them (it makes no others), and a transfer to
//! other endpoints drops them.

use std::sync::Arc;
use std::time::Duration;

use ferry_dtp::{BufferPool, ChannelSetup, Direction, Dtp, TransferDescription};
use ferry_proto::mode_e::{BlockHeader, Descriptor, HEADER_LEN};
use ferry_storage::{PosixStorage, Storage, VirtualPath};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

const SIZE: usize = 3 << 20;

fn pattern() -> Vec<u8> {
    (0..SIZE).map(|i| (i * 31 % 251) as u8).collect()
}

/// A DTP that sends `/src.bin` (the pattern) from a new directory.
fn sender() -> (tempfile::TempDir, Dtp) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("src.bin"), pattern()).expect("write source");
    let storage: Arc<dyn Storage> =
        Arc::new(PosixStorage::open(dir.path(), false).expect("storage"));
    (
        dir,
        Dtp::new(storage, BufferPool::new(ferry_dtp::IO_CHUNK, 8), false),
    )
}

fn send_to(addr: std::net::SocketAddr, streams: u32) -> TransferDescription {
    TransferDescription {
        id: 1,
        parallelism: streams,
        idle_timeout_ms: 20_000,
        ..TransferDescription::new(
            Direction::Send,
            VirtualPath::resolve(&VirtualPath::root(), "/src.bin").expect("path"),
            ChannelSetup::Active(vec![addr]),
        )
    }
}

async fn accept(listener: &TcpListener) -> TcpStream {
    tokio::time::timeout(Duration::from_secs(5), listener.accept())
        .await
        .expect("a connection within 5 s")
        .expect("accept")
        .0
}

/// Reads MODE E blocks from `conn` into `file` until its EOD; true if it carried the EOF.
async fn read_blocks(conn: &mut TcpStream, file: &mut [u8]) -> bool {
    loop {
        let mut head = [0u8; HEADER_LEN];
        conn.read_exact(&mut head).await.expect("block header");
        let h = BlockHeader::decode(&head);
        if h.descriptor.has(Descriptor::EOD) {
            return h.descriptor.has(Descriptor::EOF);
        }
        let at = h.offset as usize;
        conn.read_exact(&mut file[at..at + h.count as usize])
            .await
            .expect("block payload");
    }
}

#[tokio::test]
async fn connections_made_ahead_carry_the_next_transfer_and_no_others_are_made() {
    let (_dir, mut dtp) = sender();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let desc = send_to(listener.local_addr().expect("addr"), 3);

    dtp.connect_ahead(&desc).await.expect("connect ahead");
    let mut conns = Vec::new();
    for _ in 0..3 {
        conns.push(accept(&listener).await);
    }
    // No transfer yet, and nothing more: and with the listener gone, a transfer that made
    // connections of its own would fail.
    drop(listener);

    let (events, mut heard) = tokio::sync::mpsc::channel(64);
    let transfer = tokio::spawn(async move {
        let r = dtp.run(&desc, &events).await;
        (r, dtp)
    });
    let mut got = vec![0u8; SIZE];
    let mut eofs = 0;
    for c in &mut conns {
        eofs += usize::from(read_blocks(c, &mut got).await);
    }
    let (outcome, _dtp) = transfer.await.expect("transfer task");
    let outcome = outcome.expect("the transfer on the connections made ahead");
    while heard.try_recv().is_ok() {}
    assert_eq!(eofs, 1);
    assert_eq!((outcome.bytes, outcome.streams), (SIZE as u64, 3));
    assert!(got == pattern(), "the bytes differ");
}

#[tokio::test]
async fn a_transfer_to_other_endpoints_drops_the_connections_made_ahead() {
    let (_dir, mut dtp) = sender();
    let early = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    dtp.connect_ahead(&send_to(early.local_addr().expect("addr"), 1))
        .await
        .expect("connect ahead");
    let mut unused = accept(&early).await;

    let other = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let desc = send_to(other.local_addr().expect("addr"), 1);
    let (events, _heard) = tokio::sync::mpsc::channel(64);
    let transfer = tokio::spawn(async move { dtp.run(&desc, &events).await });
    let mut conn = accept(&other).await;
    let mut got = vec![0u8; SIZE];
    assert!(read_blocks(&mut conn, &mut got).await);
    transfer.await.expect("task").expect("transfer");
    assert!(got == pattern(), "the bytes differ");
    // The early connection was closed, unused.
    let mut byte = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(5), unused.read(&mut byte))
        .await
        .expect("closed within 5 s")
        .expect("read");
    assert_eq!(n, 0);
}
