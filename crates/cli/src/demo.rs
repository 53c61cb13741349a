//! `ferry demo`: ferry's main job end to end on one machine, with figures.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use ferry_client::{ControlClient, TransferOptions};
use ferry_proto::Command;
use ferry_server::{Server, ServerConfig};
use md5::{Digest, Md5};

/// `ferry demo` flags.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Size of the generated file (suffixes K, M, G).
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    size: u64,
    /// Parallel streams.
    #[arg(long, short = 'p', default_value_t = 4)]
    parallel: u32,
    /// Keep the temporary directory.
    #[arg(long)]
    keep: bool,
    /// Where to make the temporary directory. [default: /dev/shm when it has room for three
    /// copies, so the figures measure ferry rather than the disk; else the system temp dir]
    #[arg(long, value_name = "DIR")]
    dir: Option<std::path::PathBuf>,
}

/// Picks the parent of the demo's temporary directory.
fn demo_parent(args: &DemoArgs) -> std::path::PathBuf {
    if let Some(d) = &args.dir {
        return d.clone();
    }
    let shm = std::path::Path::new("/dev/shm");
    match free_bytes(shm) {
        Some(free) if free / 3 > args.size.saturating_add(64 << 20) => shm.to_path_buf(),
        _ => std::env::temp_dir(),
    }
}

/// Bytes an unprivileged user may still write on `path`'s file system.
fn free_bytes(path: &Path) -> Option<u64> {
    let fs = rustix::fs::statvfs(path).ok()?;
    Some(fs.f_bavail.saturating_mul(fs.f_frsize))
}

pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M') => (&s[..s.len() - 1], 1 << 20),
        Some('G') => (&s[..s.len() - 1], 1 << 30),
        Some('T') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("bad size '{s}'"))
}

pub(crate) fn run(args: DemoArgs) -> anyhow::Result<()> {
    super::serve::init_logging(Some("warn"));
    let parent = demo_parent(&args);
    let dir = tempfile::Builder::new()
        .prefix("ferry-demo.")
        .tempdir_in(&parent)
        .with_context(|| format!("cannot make a directory in {}", parent.display()))?;
    let served = dir.path().join("served");
    std::fs::create_dir(&served)?;
    // Started as root, the server serves anonymous users as an unprivileged account (ftp or
    // nobody), which must be able to write the upload.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&served, std::fs::Permissions::from_mode(0o777))?;
    }
    let original = dir.path().join("original.bin");
    let back = dir.path().join("back.bin");
    println!(
        "ferry demo: {} in {}",
        human(args.size),
        dir.path().display()
    );
    let t = Instant::now();
    let want = write_random(&original, args.size)?;
    println!(
        "  generated {} of random data in {:.1} s (md5 {want})",
        human(args.size),
        t.elapsed().as_secs_f64()
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let config = ServerConfig {
            listen: "127.0.0.1:0".parse()?,
            root: served.clone(),
            anonymous: true,
            anonymous_write: true,
            ..ServerConfig::default()
        };
        let server = Server::bind(config).await?;
        let addr = server.local_addr()?;
        tokio::spawn(server.run());
        println!("  server listening on {addr}, root {}", served.display());

        let opts = TransferOptions {
            parallelism: args.parallel,
            ..TransferOptions::default()
        };
        let mut ctl = ControlClient::connect(addr).await?;
        ctl.login("anonymous", "demo@").await?;
        let o = ferry_client::put(&mut ctl, &original, "/demo.bin", &opts).await?;
        report("put", o.bytes, o.streams, o.duration);
        let o = ferry_client::get(&mut ctl, "/demo.bin", &back, &opts).await?;
        report("get", o.bytes, o.streams, o.duration);
        let r = ctl
            .expect_ok(&Command::Cksm {
                algorithm: "MD5".into(),
                offset: 0,
                length: None,
                path: "/demo.bin".into(),
            })
            .await?;
        let server_sum = r.text();
        ctl.command(&Command::Quit).await.ok();
        let got = md5_file(&back)?;
        println!("  md5: original {want}, on server {server_sum}, copied back {got}");
        if server_sum != want || got != want {
            bail!("checksums differ: the copy is corrupt");
        }
        println!("  verified: all three checksums agree");
        Ok::<(), anyhow::Error>(())
    })?;
    if args.keep {
        let kept = dir.keep();
        println!("  kept {}", kept.display());
    }
    Ok(())
}

fn report(what: &str, bytes: u64, streams: u32, d: std::time::Duration) {
    let secs = d.as_secs_f64().max(1e-9);
    println!(
        "  {what}: {} in {secs:.2} s over {streams} streams = {:.1} MB/s ({:.2} Gbit/s)",
        human(bytes),
        bytes as f64 / secs / 1e6,
        bytes as f64 * 8.0 / secs / 1e9
    );
}

use crate::present::human_bytes as human;

/// Writes `size` bytes of fast pseudo-random data and returns their MD5.
fn write_random(path: &Path, size: u64) -> anyhow::Result<String> {
    use rand::{RngCore, SeedableRng};
    let mut rng = rand::rngs::SmallRng::from_entropy();
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut h = Md5::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        rng.fill_bytes(&mut buf[..n]);
        h.update(&buf[..n]);
        f.write_all(&buf[..n])?;
        left -= n as u64;
    }
    f.flush()?;
    Ok(hex::encode(h.finalize()))
}

fn md5_file(path: &Path) -> anyhow::Result<String> {
    let file = std::fs::File::open(path).with_context(|| format!("open {}", path.display()))?;
    let mut sum = Md5::new();
    std::io::copy(
        &mut std::io::BufReader::with_capacity(1 << 20, file),
        &mut sum,
    )?;
    Ok(hex::encode(sum.finalize()))
}
