//! Shared harness for the server's integration tests: an in-process server on loopback with a
//! temporary root, a logged-in control client, and hand-driven data connections (stream mode
//! and MODE E blocks).
//!
//! Past 400 lines on purpose: one harness that every test of this crate shares, so each test
//! reads as the protocol steps it checks.
#![allow(dead_code)]

mod audit;
pub use audit::audit_kept_checksums;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use ferry_client::{ClientError, ControlClient, TransferOptions};
use ferry_proto::mode_e::{BlockHeader, Descriptor, HEADER_LEN};
use ferry_proto::{HostPort, RangeSet, Reply};
use ferry_server::{Server, ServerConfig};
use rand::{RngCore, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The password-file user every server knows.
pub const USER: &str = "alice";
/// Alice's password.
pub const PASSWORD: &str = "s3cret-pw";
/// The longest any single network wait may take before the test fails instead of hanging.
pub const WAIT: Duration = Duration::from_secs(30);

/// Awaits `fut`, failing the test (naming `what`) if it takes longer than [`WAIT`].
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {WAIT:?} waiting for {what}"),
    }
}

/// The password-file text for [`USER`]/[`PASSWORD`], hashed once per test binary (argon2 is slow).
fn password_file_text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("passwd");
        ferry_server::auth::set_password(&f, USER, PASSWORD, None).expect("set_password");
        std::fs::read_to_string(&f).expect("read password file")
    })
}

/// A running in-process server. `base` holds `root/` (the server's root unless a test set
/// another), the password file and anything a test keeps outside the root.
pub struct TestServer {
    pub addr: SocketAddr,
    pub root: PathBuf,
    pub config: ServerConfig,
    base: tempfile::TempDir,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
        if !std::thread::panicking() {
            audit_kept_checksums(self.base.path());
        }
    }
}

/// The configuration every test starts from: loopback, a fresh root, password logins for
/// [`USER`], read-only anonymous logins, small MODE E blocks so transfers have many of them.
pub fn base_config(base: &Path) -> ServerConfig {
    let root = base.join("root");
    std::fs::create_dir_all(&root).expect("create root");
    let passwd = base.join("passwd");
    std::fs::write(&passwd, password_file_text()).expect("write password file");
    ServerConfig {
        listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        root,
        anonymous: true,
        anonymous_write: false,
        password_file: Some(passwd),
        block_size: Some(64 * 1024),
        // The tests' files belong to whoever runs them (root in CI): sessions work as that
        // user, which a root server allows only when told so. The account rules themselves
        // are tested in the server's unit tests and the CLI's run_as tests.
        allow_root_sessions: true,
        anonymous_user: ferry_storage::Identity::of_process().ok().map(|id| id.name),
        ..ServerConfig::default()
    }
}

impl TestServer {
    /// A server with [`base_config`].
    pub async fn start() -> TestServer {
        TestServer::start_with(|_| {}).await
    }

    /// A server with [`base_config`] changed by `adjust`.
    pub async fn start_with(adjust: impl FnOnce(&mut ServerConfig)) -> TestServer {
        TestServer::try_start_with(adjust)
            .await
            .expect("server starts")
    }

    /// Like [`TestServer::start_with`], but returns the bind error (for IPv6 availability).
    pub async fn try_start_with(
        adjust: impl FnOnce(&mut ServerConfig),
    ) -> Result<TestServer, String> {
        TestServer::try_start_with_drivers(adjust, ferry_server::Drivers::default()).await
    }

    /// A server offering `drivers` (a test's own transport or disk-stack driver).
    pub async fn try_start_with_drivers(
        adjust: impl FnOnce(&mut ServerConfig),
        drivers: ferry_server::Drivers,
    ) -> Result<TestServer, String> {
        let base = tempfile::tempdir().expect("tempdir");
        let mut config = base_config(base.path());
        adjust(&mut config);
        let server = Server::bind_with(config.clone(), drivers)
            .await
            .map_err(|e| e.to_string())?;
        let addr = server.local_addr().expect("local_addr");
        let task = tokio::spawn(server.run());
        Ok(TestServer {
            addr,
            root: config.root.clone(),
            config,
            base,
            task,
        })
    }

    /// The temporary directory that holds the root (for things that must stay outside it).
    pub fn base(&self) -> &Path {
        self.base.path()
    }

    /// A path beneath the root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Writes a file beneath the root.
    pub fn write(&self, rel: &str, data: &[u8]) {
        let p = self.path(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("create parent");
        }
        std::fs::write(p, data).expect("write file under root");
    }

    /// Reads a file beneath the root.
    pub fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.path(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    }

    /// Connects and reads the banner.
    pub async fn connect(&self) -> ControlClient {
        within("banner", ControlClient::connect(self.addr))
            .await
            .expect("connect and banner")
    }

    /// Connects and logs in as [`USER`].
    pub async fn login(&self) -> ControlClient {
        let mut c = self.connect().await;
        within("login", c.login(USER, PASSWORD))
            .await
            .expect("password login");
        c
    }

    /// Connects and logs in anonymously.
    pub async fn login_anonymous(&self) -> ControlClient {
        let mut c = self.connect().await;
        within("anonymous login", c.login("anonymous", "test@example.org"))
            .await
            .expect("anonymous login");
        c
    }
}

/// The lines of a JSON transfer log (`--log-transfer`), each parsed.
#[allow(dead_code)] // not every test binary reads a transfer log
pub fn log_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("transfer log exists")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("JSON line {l:?}: {e}")))
        .collect()
}

/// Sends `line` and returns its reply, whatever the code.
pub async fn cmd(c: &mut ControlClient, line: &str) -> Reply {
    within(line, c.command_line(line))
        .await
        .unwrap_or_else(|e| panic!("'{line}': {e}"))
}

/// Sends `line` and requires a reply with exactly `code`.
pub async fn expect(c: &mut ControlClient, line: &str, code: u16) -> Reply {
    let r = cmd(c, line).await;
    assert_eq!(r.code, code, "'{line}' got: {r}");
    r
}

/// Sends `line` and requires a 2xx or 3xx reply.
pub async fn ok(c: &mut ControlClient, line: &str) -> Reply {
    let r = cmd(c, line).await;
    assert!(
        (200..400).contains(&r.code),
        "'{line}' should succeed, got: {r}"
    );
    r
}

/// Reads the next reply.
pub async fn next_reply(c: &mut ControlClient) -> Reply {
    within("reply", c.read_reply()).await.expect("read reply")
}

/// Reads replies until one that is not preliminary (1xx); returns the 1xx ones and the final one.
pub async fn final_reply(c: &mut ControlClient) -> (Vec<Reply>, Reply) {
    let mut prelim = Vec::new();
    loop {
        let r = next_reply(c).await;
        if r.is_preliminary() {
            prelim.push(r);
        } else {
            return (prelim, r);
        }
    }
}

/// Reads replies (markers allowed) until the transfer's final reply, requiring `code`.
pub async fn expect_final(c: &mut ControlClient, code: u16) -> Reply {
    let (_, r) = final_reply(c).await;
    assert_eq!(r.code, code, "final transfer reply: {r}");
    r
}

/// Sends a transfer command and requires the 150/125 reply that starts it.
pub async fn start_transfer(c: &mut ControlClient, line: &str) -> Reply {
    let r = cmd(c, line).await;
    assert!(
        r.code == 150 || r.code == 125,
        "'{line}' should start a transfer, got: {r}"
    );
    r
}

/// `PASV`: the server's data address.
pub async fn pasv(c: &mut ControlClient) -> SocketAddr {
    let r = expect(c, "PASV", 227).await;
    HostPort::from_pasv_reply(&r.text())
        .unwrap_or_else(|e| panic!("PASV reply {r}: {e}"))
        .0
}

/// `EPSV`: the server's data address (the control peer's IP with the announced port).
pub async fn epsv(c: &mut ControlClient) -> SocketAddr {
    let r = expect(c, "EPSV", 229).await;
    let port =
        HostPort::port_from_epsv_reply(&r.text()).unwrap_or_else(|e| panic!("EPSV reply {r}: {e}"));
    SocketAddr::new(c.peer().ip(), port)
}

/// Listens on the control connection's local address and sends `PORT` (IPv4) or `EPRT`.
pub async fn port(c: &mut ControlClient) -> TcpListener {
    let ip = c.local_addr().expect("local addr").ip();
    let listener = TcpListener::bind(SocketAddr::new(ip, 0))
        .await
        .expect("bind local data listener");
    let hp = HostPort(listener.local_addr().expect("listener addr"));
    let line = match hp.to_port_form() {
        Some(p) => format!("PORT {p}"),
        None => format!("EPRT {}", hp.to_eprt_form()),
    };
    expect(c, &line, 200).await;
    listener
}

/// Connects a data connection.
pub async fn data_connect(addr: SocketAddr) -> TcpStream {
    within("data connect", TcpStream::connect(addr))
        .await
        .expect("data connect")
}

/// Accepts one data connection.
pub async fn data_accept(l: &TcpListener) -> TcpStream {
    within("data accept", l.accept())
        .await
        .expect("data accept")
        .0
}

/// Reads a stream-mode data connection to its end.
pub async fn read_all(conn: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    within("data to end", conn.read_to_end(&mut out))
        .await
        .expect("read data");
    out
}

/// Writes a stream-mode payload and closes the sending side (end of data).
pub async fn write_all_and_close(conn: &mut TcpStream, data: &[u8]) {
    within("data write", conn.write_all(data))
        .await
        .expect("write data");
    within("data shutdown", conn.shutdown())
        .await
        .expect("shutdown data");
}

/// Sends one MODE E data block.
pub async fn send_block(conn: &mut TcpStream, offset: u64, data: &[u8]) {
    let header = BlockHeader::data(offset, data.len() as u64).encode();
    within("block header", conn.write_all(&header))
        .await
        .expect("write header");
    within("block payload", conn.write_all(data))
        .await
        .expect("write payload");
}

/// Sends the MODE E EOF block (with EOD) announcing `eod_count` connections.
pub async fn send_eof(conn: &mut TcpStream, eod_count: u64) {
    within(
        "EOF block",
        conn.write_all(&BlockHeader::eof(eod_count).encode()),
    )
    .await
    .expect("write EOF");
}

/// One received MODE E data block.
#[derive(Debug, Clone)]
pub struct Block {
    pub offset: u64,
    pub data: Vec<u8>,
}

/// What one MODE E connection carried until its EOD.
#[derive(Debug, Clone)]
pub struct ModeEData {
    pub blocks: Vec<Block>,
    /// The EOD count from the EOF block, if this connection carried it.
    pub eof_count: Option<u64>,
    /// Whether the sender set CLOSE.
    pub close: bool,
}

impl ModeEData {
    /// The byte ranges the blocks covered.
    pub fn ranges(&self) -> RangeSet {
        let mut set = RangeSet::new();
        for b in &self.blocks {
            if !b.data.is_empty() {
                set.insert(b.offset, b.offset + b.data.len() as u64);
            }
        }
        set
    }

    /// Payload bytes received.
    pub fn bytes(&self) -> u64 {
        self.blocks.iter().map(|b| b.data.len() as u64).sum()
    }

    /// Checks every block against `expected` at `offset + shift` and that blocks do not overlap.
    pub fn assert_blocks_match(&self, expected: &[u8], shift: u64) {
        let mut seen = RangeSet::new();
        for b in &self.blocks {
            let end = b.offset + b.data.len() as u64;
            assert!(
                !seen.contains_range(b.offset, end) || b.data.is_empty(),
                "block {}..{end} sent twice",
                b.offset
            );
            seen.insert(b.offset, end);
            let at = (b.offset + shift) as usize;
            assert_eq!(
                &b.data[..],
                &expected[at..at + b.data.len()],
                "block at wire offset {} differs",
                b.offset
            );
        }
    }
}

/// Reads MODE E blocks from one connection until a block with EOD.
pub async fn read_mode_e(conn: &mut TcpStream) -> ModeEData {
    within("MODE E blocks", async {
        let mut blocks = Vec::new();
        loop {
            let mut hb = [0u8; HEADER_LEN];
            conn.read_exact(&mut hb).await.expect("read block header");
            let h = BlockHeader::decode(&hb);
            let mut data = vec![0u8; h.payload_len() as usize];
            conn.read_exact(&mut data)
                .await
                .expect("read block payload");
            if !data.is_empty() || !h.descriptor.has(Descriptor::EOD) {
                blocks.push(Block {
                    offset: h.offset,
                    data,
                });
            }
            if h.descriptor.has(Descriptor::EOD) {
                return ModeEData {
                    blocks,
                    eof_count: h.descriptor.has(Descriptor::EOF).then_some(h.offset),
                    close: h.descriptor.has(Descriptor::CLOSE),
                };
            }
        }
    })
    .await
}

/// Reassembles blocks into a buffer of `len` bytes.
pub fn assemble(data: &ModeEData, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    for b in &data.blocks {
        let at = b.offset as usize;
        out[at..at + b.data.len()].copy_from_slice(&b.data);
    }
    out
}

/// `n` pseudo-random bytes (seeded, so a failure reproduces).
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

/// MODE E transfer options with `streams` connections and 64 KiB blocks.
pub fn streams(n: u32) -> TransferOptions {
    TransferOptions {
        parallelism: n,
        block_size: Some(64 * 1024),
        ..TransferOptions::default()
    }
}

/// Downloads `remote` with ferry_client in MODE E and returns its bytes and the stream count.
pub async fn client_get(c: &mut ControlClient, remote: &str, n: u32) -> (Vec<u8>, u32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let local = dir.path().join("got");
    let outcome = within(
        "client get",
        ferry_client::get(c, remote, &local, &streams(n)),
    )
    .await
    .unwrap_or_else(|e| panic!("get {remote}: {e}"));
    (
        std::fs::read(&local).expect("read local copy"),
        outcome.streams,
    )
}

/// Uploads `data` to `remote` with ferry_client in MODE E; returns the stream count.
pub async fn client_put(
    c: &mut ControlClient,
    data: &[u8],
    remote: &str,
    n: u32,
) -> Result<u32, ClientError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let local = dir.path().join("up");
    std::fs::write(&local, data).expect("write local file");
    within(
        "client put",
        ferry_client::put(c, &local, remote, &streams(n)),
    )
    .await
    .map(|o| o.streams)
}

/// The IPv4 loopback address.
pub fn localhost() -> IpAddr {
    IpAddr::V4(Ipv4Addr::LOCALHOST)
}

/// A control connection driven with raw bytes (for input `ControlClient` cannot send).
pub struct RawControl {
    pub stream: TcpStream,
    parser: ferry_proto::ReplyParser,
}

impl RawControl {
    /// Connects and checks the 220 banner.
    pub async fn connect(addr: SocketAddr) -> RawControl {
        let stream = within("connect", TcpStream::connect(addr))
            .await
            .expect("connect");
        let mut c = RawControl {
            stream,
            parser: ferry_proto::ReplyParser::new(),
        };
        let banner = c.read_reply().await.expect("banner");
        assert_eq!(banner.code, 220, "{banner}");
        c
    }

    /// Writes bytes as they are (a write error is ignored: the server may have hung up).
    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        let _ = within("raw write", self.stream.write_all(bytes)).await;
    }

    /// Sends one command line and returns its reply.
    pub async fn command(&mut self, line: &str) -> Reply {
        self.send_bytes(format!("{line}\r\n").as_bytes()).await;
        self.read_reply()
            .await
            .unwrap_or_else(|| panic!("'{line}': connection closed"))
    }

    /// The next reply, `None` once the server has closed the connection.
    pub async fn read_reply(&mut self) -> Option<Reply> {
        within("raw reply", async {
            loop {
                if let Some(r) = self.parser.next_reply().expect("well-formed reply") {
                    return Some(r);
                }
                let mut buf = [0u8; 4096];
                match self.stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => self.parser.feed(&buf[..n]),
                }
            }
        })
        .await
    }
}
