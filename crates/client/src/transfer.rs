//! Two-party transfers: the client's end runs the same DTP as the server.

use std::net::SocketAddr;
use std::sync::Arc;

use ferry_dtp::{
    BufferPool, ChannelSetup, Direction, Dtp, DtpEvent, MarkerIntervals, Section, StripeInfo,
    TransferDescription, TransferOutcome, TransferSource,
};
use ferry_net::{SocketTuning, StackSpec};
use ferry_proto::command::TransferMode;
use ferry_proto::hostport::HostPort;
use ferry_proto::RangeSet;
use ferry_storage::{PosixStorage, Storage, VirtualPath};
use tokio::sync::mpsc;

use crate::{ClientError, ControlClient};

/// How to move one file.
#[derive(Debug, Clone)]
pub struct TransferOptions {
    /// Parallel data connections (MODE E).
    pub parallelism: u32,
    /// MODE E block size in bytes.
    pub block_size: u32,
    /// Socket buffers.
    pub tuning: SocketTuning,
}

impl Default for TransferOptions {
    fn default() -> Self {
        TransferOptions {
            parallelism: 4,
            block_size: 1 << 20,
            tuning: SocketTuning::default(),
        }
    }
}

fn local_dtp(block: u32) -> Result<Dtp, ClientError> {
    let storage: Arc<dyn Storage> = Arc::new(PosixStorage::open(std::path::Path::new("/"), false)?);
    Ok(Dtp::new(
        storage,
        BufferPool::new(block as usize, 16),
        false,
    ))
}

fn local_path(p: &std::path::Path) -> Result<VirtualPath, ClientError> {
    let abs = std::path::absolute(p)?;
    Ok(VirtualPath::resolve(
        &VirtualPath::root(),
        &abs.to_string_lossy(),
    )?)
}

fn description(
    direction: Direction,
    path: VirtualPath,
    opts: &TransferOptions,
    channel: ChannelSetup,
) -> TransferDescription {
    TransferDescription {
        id: 0,
        direction,
        source: TransferSource::File,
        path,
        mode: TransferMode::Extended,
        ascii: false,
        section: Section {
            file_offset: 0,
            length: None,
        },
        restart: RangeSet::new(),
        truncate: true,
        create_new: false,
        parallelism: opts.parallelism,
        block_size: opts.block_size,
        tuning: opts.tuning,
        channel,
        stack: StackSpec::default(),
        markers: MarkerIntervals::default(),
        stripe: StripeInfo::default(),
        idle_timeout_ms: 600_000,
    }
}

async fn setup(ctl: &mut ControlClient) -> Result<(), ClientError> {
    ctl.expect_ok("TYPE I").await?;
    ctl.expect_ok("MODE E").await?;
    Ok(())
}

/// Uploads `local` to `remote` in MODE E with parallel streams (the server listens).
pub async fn put(
    ctl: &mut ControlClient,
    local: &std::path::Path,
    remote: &str,
    opts: &TransferOptions,
) -> Result<TransferOutcome, ClientError> {
    setup(ctl).await?;
    let r = ctl.expect_ok("PASV").await?;
    let addr = HostPort::from_pasv_reply(&r.text())
        .map_err(|e| ClientError::Address(e.to_string()))?
        .0;
    let mut dtp = local_dtp(opts.block_size)?;
    let desc = description(
        Direction::Send,
        local_path(local)?,
        opts,
        ChannelSetup::Active(vec![addr]),
    );
    ctl.expect_ok(&format!("STOR {remote}")).await?;
    let (tx, _rx) = mpsc::channel::<DtpEvent>(16);
    let outcome = dtp.run(&desc, &tx).await;
    finish(ctl, outcome).await
}

/// Downloads `remote` to `local` in MODE E with parallel streams (the client listens).
pub async fn get(
    ctl: &mut ControlClient,
    remote: &str,
    local: &std::path::Path,
    opts: &TransferOptions,
) -> Result<TransferOutcome, ClientError> {
    setup(ctl).await?;
    let mut dtp = local_dtp(opts.block_size)?;
    let ip = ctl.local_addr()?.ip();
    let addr: SocketAddr = dtp
        .channel()
        .open_passive(ip, None, opts.tuning)
        .map_err(ferry_dtp::DtpError::Connect)?;
    let hp = HostPort(addr);
    let cmd = match hp.to_port_form() {
        Some(p) => format!("PORT {p}"),
        None => format!("EPRT {}", hp.to_eprt_form()),
    };
    ctl.expect_ok(&cmd).await?;
    let n = opts.parallelism.max(1);
    ctl.expect_ok(&format!("OPTS RETR Parallelism={n},{n},{n};"))
        .await?;
    let desc = description(
        Direction::Receive,
        local_path(local)?,
        opts,
        ChannelSetup::Passive,
    );
    ctl.expect_ok(&format!("RETR {remote}")).await?;
    let (tx, _rx) = mpsc::channel::<DtpEvent>(16);
    let outcome = dtp.run(&desc, &tx).await;
    finish(ctl, outcome).await
}

/// Reads the server's final reply (skipping markers) and combines it with the local outcome.
async fn finish(
    ctl: &mut ControlClient,
    outcome: Result<TransferOutcome, ferry_dtp::DtpError>,
) -> Result<TransferOutcome, ClientError> {
    let reply = loop {
        let r = ctl.read_reply().await?;
        if r.code != 111 && r.code != 112 && !r.is_preliminary() {
            break r;
        }
    };
    let outcome = outcome?;
    if reply.code != 226 {
        return Err(ClientError::Refused {
            command: "transfer".into(),
            reply,
        });
    }
    Ok(outcome)
}
