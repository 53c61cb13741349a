//! Checksums taken while the bytes move (issue 21): two DTPs on loopback, the sender on many
//! streams with small blocks so they arrive out of order, a restarted transfer, stream mode.
//! Both ends' values are checked against an independent computation: Python's `zlib.adler32`
//! and `hashlib` (CRC32C, which Python lacks, against the crc32c crate's one-shot value).

use std::path::Path;
use std::sync::Arc;

use ferry_dtp::{
    BufferPool, ChannelSetup, DataMover, Direction, Dtp, PassiveRequest, TransferDescription,
    TransferOutcome,
};
use ferry_proto::command::TransferMode;
use ferry_proto::stack::StackSpec;
use ferry_proto::RangeSet;
use ferry_storage::{ChecksumAlgorithm, PosixStorage, Storage, VirtualPath};

fn dtp(dir: &Path) -> Dtp {
    let storage: Arc<dyn Storage> = Arc::new(PosixStorage::open(dir, false).expect("storage"));
    Dtp::new(storage, BufferPool::new(ferry_dtp::IO_CHUNK, 16), false)
}

const LOOPBACK: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// Opens the receiver's passive listener on `ip`; its addresses.
async fn listen(receiver: &mut Dtp, ip: std::net::IpAddr) -> Vec<std::net::SocketAddr> {
    receiver
        .open_passive(PassiveRequest {
            ip,
            ports: None,
            tuning: Default::default(),
            striped: false,
            stack: StackSpec::default_net(),
            admit_only: None,
        })
        .await
        .expect("passive")
}

fn path(name: &str) -> VirtualPath {
    VirtualPath::resolve(&VirtualPath::root(), name).expect("path")
}

/// Independent values of `file`: Python's for what it has, crc32c's one-shot for CRC32C.
fn independent(file: &Path) -> Option<Vec<(ChecksumAlgorithm, String)>> {
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())?;
    let script = "import sys, zlib, hashlib\n\
                  d = open(sys.argv[1], 'rb').read()\n\
                  print('%08x' % zlib.adler32(d))\n\
                  for h in ('md5', 'sha1', 'sha256', 'sha512'):\n    print(hashlib.new(h, d).hexdigest())\n";
    let out = std::process::Command::new(python)
        .args(["-c", script])
        .arg(file)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let mut lines = text.lines().map(str::to_string);
    use ChecksumAlgorithm::*;
    let mut values = vec![(Adler32, lines.next()?)];
    for alg in [Md5, Sha1, Sha256, Sha512] {
        values.push((alg, lines.next()?));
    }
    let data = std::fs::read(file).expect("read");
    values.push((Crc32c, format!("{:08x}", crc32c::crc32c(&data))));
    Some(values)
}

fn check(outcome: &TransferOutcome, file: &Path, what: &str) {
    let Some(want) = independent(file) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have python3 for the independent checksums"
        );
        eprintln!("skipping the independent check of {what}: no python3");
        return;
    };
    assert!(!outcome.checksums.is_empty(), "{what}: no checksums");
    for (alg, value) in want {
        if !outcome.checksums.iter().any(|t| t.algorithm == alg) {
            continue;
        }
        let got = outcome
            .checksums
            .iter()
            .find(|t| t.algorithm == alg)
            .unwrap_or_else(|| panic!("{what}: no {alg}"));
        assert_eq!(got.value, value, "{what}: {alg}");
    }
}

/// Moves `src/name` to `dst/name` over `streams` streams (MODE E, `block` bytes per block) or
/// in stream mode, both ends taking every checksum; `restart` is what `dst` already holds.
#[allow(clippy::too_many_arguments)]
async fn transfer(
    ip: std::net::IpAddr,
    src: &Path,
    dst: &Path,
    name: &str,
    mode: TransferMode,
    streams: u32,
    block: u32,
    restart: RangeSet,
    algorithms: &[ChecksumAlgorithm],
) -> (TransferOutcome, TransferOutcome) {
    let mut receiver = dtp(dst);
    let mut sender = dtp(src);
    let addrs = listen(&mut receiver, ip).await;
    let base = |direction, channel| TransferDescription {
        mode,
        restart: restart.clone(),
        truncate: restart.is_empty(),
        parallelism: streams,
        block_size: Some(block),
        idle_timeout_ms: 30_000,
        checksums: algorithms.to_vec(),
        ..TransferDescription::new(direction, path(name), channel)
    };
    let rdesc = base(Direction::Receive, ChannelSetup::Passive);
    let sdesc = base(Direction::Send, ChannelSetup::Active(addrs));
    let (rev, _rkeep) = tokio::sync::mpsc::channel(256);
    let (sev, _skeep) = tokio::sync::mpsc::channel(256);
    let (r, s) = tokio::join!(receiver.run(&rdesc, &rev), sender.run(&sdesc, &sev));
    (r.expect("receive"), s.expect("send"))
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_streams_of_small_blocks_out_of_order_give_both_ends_the_files_checksums() {
    let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let data = pattern(3_000_017, 1);
    std::fs::write(src.path().join("f.bin"), &data).unwrap();
    let all = ChecksumAlgorithm::all();
    let (r, s) = transfer(
        LOOPBACK,
        src.path(),
        dst.path(),
        "/f.bin",
        TransferMode::Extended,
        8,
        65_536,
        RangeSet::new(),
        all,
    )
    .await;
    assert!(std::fs::read(dst.path().join("f.bin")).unwrap() == data);
    assert_eq!(r.streams, 8);
    assert_eq!(r.checksums.len(), all.len());
    check(&r, &dst.path().join("f.bin"), "receiver, 8 streams");
    check(&s, &src.path().join("f.bin"), "sender, 8 streams");

    // ADLER32 and CRC32C combine: nothing is read back at either end, whatever the order.
    let (r, s) = transfer(
        LOOPBACK,
        src.path(),
        dst.path(),
        "/f.bin",
        TransferMode::Extended,
        8,
        65_536,
        RangeSet::new(),
        &JOINABLE,
    )
    .await;
    assert_eq!((r.checksum_read_back, s.checksum_read_back), (0, 0));
    assert_eq!(r.checksums.len(), 2);
    check(
        &r,
        &dst.path().join("f.bin"),
        "receiver, 8 streams, joinable",
    );
    check(&s, &src.path().join("f.bin"), "sender, 8 streams, joinable");
}

const JOINABLE: [ChecksumAlgorithm; 2] = [ChecksumAlgorithm::Adler32, ChecksumAlgorithm::Crc32c];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_transfer_sums_the_whole_file_at_both_ends() {
    let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let data = pattern(2_500_000, 2);
    std::fs::write(src.path().join("r.bin"), &data).unwrap();
    // The receiver holds two ranges from an earlier attempt; the rest is zeros.
    let mut partial = vec![0u8; data.len()];
    let mut held = RangeSet::new();
    for (a, b) in [(0usize, 300_000usize), (1_000_000, 1_700_000)] {
        partial[a..b].copy_from_slice(&data[a..b]);
        held.insert(a as u64, b as u64);
    }
    for algorithms in [ChecksumAlgorithm::all(), &JOINABLE[..]] {
        std::fs::write(dst.path().join("r.bin"), &partial).unwrap();
        let (r, s) = transfer(
            LOOPBACK,
            src.path(),
            dst.path(),
            "/r.bin",
            TransferMode::Extended,
            4,
            131_072,
            held.clone(),
            algorithms,
        )
        .await;
        assert!(std::fs::read(dst.path().join("r.bin")).unwrap() == data);
        assert_eq!(r.bytes, 1_500_000, "only the missing bytes moved");
        assert_eq!(r.checksums.len(), algorithms.len());
        check(&r, &dst.path().join("r.bin"), "receiver, restarted");
        check(&s, &src.path().join("r.bin"), "sender, restarted");
        if algorithms == JOINABLE {
            // Only the held ranges are read back, at both ends.
            assert_eq!(
                (r.checksum_read_back, s.checksum_read_back),
                (1_000_000, 1_000_000)
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_mode_and_one_stream_sum_in_order() {
    let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let data = pattern(1_234_567, 3);
    std::fs::write(src.path().join("s.bin"), &data).unwrap();
    for mode in [TransferMode::Stream, TransferMode::Extended] {
        let (r, s) = transfer(
            LOOPBACK,
            src.path(),
            dst.path(),
            "/s.bin",
            mode,
            1,
            262_144,
            RangeSet::new(),
            ChecksumAlgorithm::all(),
        )
        .await;
        assert!(std::fs::read(dst.path().join("s.bin")).unwrap() == data);
        // One stream in order: every algorithm, MD5 and the SHAs too, with nothing read back.
        assert_eq!(
            (r.checksum_read_back, s.checksum_read_back),
            (0, 0),
            "{mode:?}"
        );
        assert_eq!(r.checksums.len(), ChecksumAlgorithm::all().len());
        check(
            &r,
            &dst.path().join("s.bin"),
            &format!("receiver, {mode:?}"),
        );
        check(&s, &src.path().join("s.bin"), &format!("sender, {mode:?}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_checksums_are_taken_unless_asked_or_for_part_of_a_file() {
    let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(src.path().join("p.bin"), pattern(100_000, 4)).unwrap();
    let mut receiver = dtp(dst.path());
    let mut sender = dtp(src.path());
    let addrs = listen(&mut receiver, LOOPBACK).await;
    let mut rdesc = TransferDescription {
        truncate: true,
        idle_timeout_ms: 30_000,
        ..TransferDescription::new(Direction::Receive, path("/p.bin"), ChannelSetup::Passive)
    };
    let mut sdesc = TransferDescription {
        idle_timeout_ms: 30_000,
        checksums: vec![ChecksumAlgorithm::Adler32],
        ..TransferDescription::new(Direction::Send, path("/p.bin"), ChannelSetup::Active(addrs))
    };
    // An ERET-like part: the sender sums nothing; the receiver was not asked.
    sdesc.section.length = Some(50_000);
    rdesc.checksums.clear();
    let (rev, _rk) = tokio::sync::mpsc::channel(64);
    let (sev, _sk) = tokio::sync::mpsc::channel(64);
    let (r, s) = tokio::join!(receiver.run(&rdesc, &rev), sender.run(&sdesc, &sev));
    let (r, s) = (r.expect("receive"), s.expect("send"));
    assert_eq!(r.bytes, 50_000);
    assert!(r.checksums.is_empty(), "{:?}", r.checksums);
    assert!(s.checksums.is_empty(), "{:?}", s.checksums);
}

/// This host's address on a network interface, if it has one: the address a socket would send
/// from towards a documentation address (nothing is sent).
fn off_loopback_address() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// A peer off loopback makes the sender use sendfile, whose bytes never reach user space:
/// they are read back from the page cache for the sums.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sender_using_sendfile_sums_what_it_sent() {
    let Some(ip) = off_loopback_address() else {
        eprintln!("skipping: no address off loopback here, so no sendfile");
        return;
    };
    let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let data = pattern(2_000_003, 5);
    std::fs::write(src.path().join("z.bin"), &data).unwrap();
    for algorithms in [ChecksumAlgorithm::all(), &JOINABLE[..]] {
        let (r, s) = transfer(
            ip,
            src.path(),
            dst.path(),
            "/z.bin",
            TransferMode::Extended,
            4,
            262_144,
            RangeSet::new(),
            algorithms,
        )
        .await;
        assert!(std::fs::read(dst.path().join("z.bin")).unwrap() == data);
        assert_eq!(s.checksums.len(), algorithms.len());
        check(&r, &dst.path().join("z.bin"), "receiver, sendfile");
        check(&s, &src.path().join("z.bin"), "sender, sendfile");
        if algorithms == JOINABLE {
            assert_eq!(s.checksum_read_back, 0, "summed as sent, not afterwards");
        }
    }
}
