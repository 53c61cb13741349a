//! Two-party transfers of one file on a session: the client's end runs the same DTP as the
//! server, and the data channel is kept for the next file.

use std::path::Path;

use ferry_dtp::{ChannelSetup, Direction, TransferOutcome};

use crate::drive::{drive, Progress};
use crate::request::FileRequest;
use crate::session::{DataSetup, RemoteSession};
use crate::ClientError;

impl RemoteSession {
    /// Downloads `remote` into `local` (MODE E; the client listens, the server connects).
    pub async fn get(
        &mut self,
        remote: &str,
        local: &Path,
        req: &FileRequest,
        on_progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<TransferOutcome, ClientError> {
        self.binary_extended().await?;
        self.sender_parallelism(req.parallelism.max(1)).await?;
        self.buffers(req.tcp_buffer, true).await?;
        self.listen_for_server(req.tuning()).await?;
        let desc = req.local_description(Direction::Receive, local, ChannelSetup::Passive)?;
        let result = self
            .start_and_drive(
                req.rest_command(),
                req.retrieve_command(remote),
                Some(desc),
                on_progress,
            )
            .await;
        if result.is_err() {
            self.reset_data();
        }
        result
    }

    /// Uploads `local` to `remote` (MODE E; the server listens, the client connects).
    pub async fn put(
        &mut self,
        local: &Path,
        remote: &str,
        req: &FileRequest,
        on_progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<TransferOutcome, ClientError> {
        self.binary_extended().await?;
        self.buffers(req.tcp_buffer, false).await?;
        let addr = self.server_listen().await?;
        let desc =
            req.local_description(Direction::Send, local, ChannelSetup::Active(vec![addr]))?;
        let result = self
            .start_and_drive(
                req.rest_command(),
                req.store_command(remote),
                Some(desc),
                on_progress,
            )
            .await;
        if result.is_err() {
            self.reset_data();
        }
        result
    }

    /// Sends REST (if any) and the transfer command, checks the preliminary reply, then drives
    /// the transfer to its final reply.
    async fn start_and_drive(
        &mut self,
        rest: Option<String>,
        command: String,
        desc: Option<ferry_dtp::TransferDescription>,
        on_progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<TransferOutcome, ClientError> {
        if let Some(rest) = rest {
            self.expect_ok(&rest).await?;
        }
        let first = self.command(&command).await?;
        if !first.is_preliminary() {
            return Err(ClientError::Refused {
                command,
                reply: first,
            });
        }
        match &desc {
            Some(d) => drive(&mut self.ctl, Some((&mut self.dtp, d)), on_progress).await,
            None => drive(&mut self.ctl, None, on_progress).await,
        }
    }
}

/// Third-party transfer of one file: `src` sends straight to `dst`; no data passes through the
/// client. Both servers keep the data channel for the next file between the same pair.
pub async fn third_party(
    src: &mut RemoteSession,
    src_path: &str,
    dst: &mut RemoteSession,
    dst_path: &str,
    req: &FileRequest,
    on_progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<TransferOutcome, ClientError> {
    src.binary_extended().await?;
    dst.binary_extended().await?;
    src.sender_parallelism(req.parallelism.max(1)).await?;
    src.buffers(req.tcp_buffer, true).await?;
    dst.buffers(req.tcp_buffer, false).await?;
    let result = third_party_inner(src, src_path, dst, dst_path, req, on_progress).await;
    if result.is_err() {
        src.reset_data();
        dst.reset_data();
    }
    result
}

async fn third_party_inner(
    src: &mut RemoteSession,
    src_path: &str,
    dst: &mut RemoteSession,
    dst_path: &str,
    req: &FileRequest,
    on_progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<TransferOutcome, ClientError> {
    let reuse =
        matches!((&src.data, &dst.data), (DataSetup::ToPeer(a), DataSetup::FromPeer(b)) if a == b);
    if !reuse {
        let addr = dst.server_listen().await?;
        let hp = ferry_proto::HostPort(addr);
        let cmd = match hp.to_port_form() {
            Some(p) => format!("PORT {p}"),
            None => format!("EPRT {}", hp.to_eprt_form()),
        };
        src.expect_ok(&cmd).await?;
        src.data = DataSetup::ToPeer(vec![addr]);
        dst.data = DataSetup::FromPeer(vec![addr]);
    }
    if let Some(rest) = req.rest_command() {
        dst.expect_ok(&rest).await?;
        src.expect_ok(&rest).await?;
    }
    let store = req.store_command(dst_path);
    let r = dst.command(&store).await?;
    if !r.is_preliminary() {
        return Err(ClientError::Refused {
            command: store,
            reply: r,
        });
    }
    let retrieve = req.retrieve_command(src_path);
    let r = src.command(&retrieve).await?;
    if !r.is_preliminary() {
        // The destination is waiting for data that will not come: abort it.
        let _ = dst.command("ABOR").await;
        return Err(ClientError::Refused {
            command: retrieve,
            reply: r,
        });
    }
    let mut ignore = |_p: Progress| {};
    let (s, d) = tokio::join!(
        drive(&mut src.ctl, None, &mut ignore),
        drive(&mut dst.ctl, None, on_progress)
    );
    s?;
    d
}
