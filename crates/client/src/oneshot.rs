//! One-file transfers on a bare control connection, for tests and tools that manage the
//! control channel themselves. They send the transfer settings every time and keep nothing.

use std::path::Path;
use std::sync::Arc;

use ferry_dtp::{BufferPool, ChannelSetup, Direction, Dtp, TransferOutcome};
use ferry_proto::command::{TransferMode, TransferType};
use ferry_proto::hostport::HostPort;
use ferry_proto::site::SiteCommand;
use ferry_proto::stack::StackSpec;
use ferry_proto::Command;
use ferry_storage::{PosixStorage, Storage};

use crate::drive::drive;
use crate::request::FileRequest;
use crate::{ClientError, ControlClient};

/// Stream count and block size for [`get`] and [`put`].
pub type TransferOptions = FileRequest;

fn local_dtp(block: Option<u32>) -> Result<Dtp, ClientError> {
    let storage: Arc<dyn Storage> = Arc::new(PosixStorage::open(Path::new("/"), false)?);
    let mut dtp = Dtp::new(
        storage,
        BufferPool::new(
            ferry_dtp::IO_CHUNK.min(block.map_or(usize::MAX, |b| b as usize)),
            16,
        ),
        false,
    );
    dtp.poll_lone_streams(Some(crate::poll_budget()));
    Ok(dtp)
}

/// Uploads `local` to `remote` in MODE E (the server listens).
pub async fn put(
    ctl: &mut ControlClient,
    local: &Path,
    remote: &str,
    req: &FileRequest,
) -> Result<TransferOutcome, ClientError> {
    let stack = net_stack(ctl, req).await?;
    binary_extended(ctl).await?;
    let r = ctl.expect_ok(&Command::Pasv).await?;
    let addr = HostPort::from_pasv_reply(&r.text())
        .map_err(|e| ClientError::Address(e.to_string()))?
        .0;
    ferry_proto::data_address::check_server_data_address(ctl.peer().ip(), addr)?;
    let mut dtp = local_dtp(req.block_size)?;
    let mut desc =
        req.local_description(Direction::Send, local, ChannelSetup::Active(vec![addr]))?;
    desc.stack = stack;
    let cmd = req.store_command(remote);
    ctl.send(&cmd).await?;
    drive(ctl, Some((&mut dtp, &desc)), &cmd, &mut |_| {}).await
}

/// Downloads `remote` to `local` in MODE E (the client listens).
pub async fn get(
    ctl: &mut ControlClient,
    remote: &str,
    local: &Path,
    req: &FileRequest,
) -> Result<TransferOutcome, ClientError> {
    let stack = net_stack(ctl, req).await?;
    binary_extended(ctl).await?;
    let mut dtp = local_dtp(req.block_size)?;
    let ip = ctl.local_addr()?.ip();
    let cmd =
        crate::data_channel::listen_locally(&mut dtp, ip, req.tuning(), stack.clone()).await?;
    ctl.expect_ok(&cmd).await?;
    let n = req.parallelism.max(1);
    ctl.expect_ok(&crate::session::parallelism_opts(n)).await?;
    let mut desc = req.local_description(Direction::Receive, local, ChannelSetup::Passive)?;
    desc.stack = stack;
    let cmd = ctl.retrieve_command(req, remote).await?;
    ctl.send(&cmd).await?;
    drive(ctl, Some((&mut dtp, &desc)), &cmd, &mut |_| {}).await
}

/// The net stack `req` asks for, set on the server (a fresh session is on its default).
async fn net_stack(ctl: &mut ControlClient, req: &FileRequest) -> Result<StackSpec, ClientError> {
    let Some(t) = req.explicit_transport() else {
        return Ok(StackSpec::default_net());
    };
    let stack =
        StackSpec::parse(t).map_err(|e| ClientError::Usage(format!("transport {t:?}: {e}")))?;
    // One key per control connection: this one-shot session has no other name to go by.
    let this = ctl.local_addr()?.to_string();
    let stack = crate::session_key::bound(stack, &this, None);
    ctl.expect_ok(&Command::Site(SiteCommand::SetNetStack(stack.to_string())))
        .await?;
    Ok(stack)
}

async fn binary_extended(ctl: &mut ControlClient) -> Result<(), ClientError> {
    ctl.expect_ok(&Command::Type(TransferType::Image)).await?;
    ctl.expect_ok(&Command::Mode(TransferMode::Extended))
        .await?;
    Ok(())
}
