//! Transfers with servers that do not offer MODE E (plain FTP servers): stream mode (RFC 959),
//! one data connection per file that the server listens for, the end of the file marked by
//! its close, and restart by `REST <offset>` (RFC 3659's REST STREAM).

use std::path::Path;

use ferry_dtp::{ChannelSetup, Direction, TransferOutcome};
use ferry_proto::command::{Restart, TransferMode};
use ferry_proto::{Command, RangeSet};

use crate::drive::Progress;
use crate::request::FileRequest;
use crate::session::DataSetup;
use crate::session::RemoteSession;
use crate::ClientError;

/// The bytes from the start of the file a restart can skip in stream mode: the stored range
/// that begins at 0 (stream mode resends everything after the first gap).
pub(crate) fn stored_prefix(stored: &RangeSet) -> u64 {
    match stored.iter().next() {
        Some((0, end)) => end,
        _ => 0,
    }
}

impl RemoteSession {
    /// Downloads `remote` into `local` in stream mode.
    pub(crate) async fn get_stream(
        &mut self,
        remote: &str,
        local: &Path,
        req: &FileRequest,
        on_progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<TransferOutcome, ClientError> {
        let req = self.stream_request(req, "retrieve")?;
        // REST goes right before RETR (RFC 959): a server may forget it at PASV.
        let addr = self.passive().await?;
        let rest = self.stream_restart(&req).await?;
        if rest.is_none() && !req.restart.is_empty() {
            on_progress(Progress::StartedOver);
        }
        let req = FileRequest {
            restart: rest.map(|n| RangeSet::from_range(0, n)).unwrap_or_default(),
            ..req
        };
        let desc = self.stream_description(&req, Direction::Receive, local, addr)?;
        self.stream_transfer(Command::Retr(remote.into()), &desc, on_progress)
            .await
    }

    /// Uploads `local` to `remote` in stream mode. A restart appends (`APPE`) after the bytes
    /// the server holds; a server that refuses (ProFTPD without `AllowStoreRestart on`
    /// answers 451) gets the whole file again with `STOR`.
    pub(crate) async fn put_stream(
        &mut self,
        local: &Path,
        remote: &str,
        req: &FileRequest,
        on_progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<TransferOutcome, ClientError> {
        let mut req = self.stream_request(req, "store")?;
        let skip = stored_prefix(&req.restart);
        if skip > 0 {
            req.restart = RangeSet::from_range(0, skip);
            let addr = self.passive().await?;
            let desc = self.stream_description(&req, Direction::Send, local, addr)?;
            match self
                .stream_transfer(Command::Appe(remote.into()), &desc, on_progress)
                .await
            {
                Err(ClientError::Refused { reply, .. }) if reply.code >= 450 => {
                    tracing::info!(
                        "{} refused to append ({} {}): sending the whole file again",
                        self.server.authority(),
                        reply.code,
                        reply.text().trim()
                    );
                    on_progress(Progress::StartedOver);
                }
                done => return done,
            }
        }
        req.restart = RangeSet::new();
        let addr = self.passive().await?;
        let desc = self.stream_description(&req, Direction::Send, local, addr)?;
        self.stream_transfer(Command::Stor(remote.into()), &desc, on_progress)
            .await
    }

    /// What a stream-mode transfer can do of `req`: one stream, the whole file.
    fn stream_request(&self, req: &FileRequest, what: &str) -> Result<FileRequest, ClientError> {
        if req.is_partial() {
            return Err(ClientError::Unsupported(format!(
                "{} does not offer MODE E, so it cannot {what} part of a file (ERET/ESTO); \
                 copy the whole file",
                self.server.authority()
            )));
        }
        if req.stripe.is_some() {
            return Err(ClientError::Unsupported(format!(
                "{} does not offer MODE E, which striping needs",
                self.server.authority()
            )));
        }
        Ok(FileRequest {
            parallelism: 1,
            ..req.clone()
        })
    }

    /// `REST <offset>` for a get that resumes, when the server takes it: `Some(offset)`; from a
    /// server that refuses REST the whole file comes again.
    async fn stream_restart(&mut self, req: &FileRequest) -> Result<Option<u64>, ClientError> {
        let skip = stored_prefix(&req.restart);
        if skip == 0 {
            return Ok(None);
        }
        let r = self.command(&Command::Rest(Restart::Stream(skip))).await?;
        if r.code == 350 {
            return Ok(Some(skip));
        }
        tracing::info!(
            "{} refused REST {skip} ({} {}): getting the whole file again",
            self.server.authority(),
            r.code,
            r.text().trim()
        );
        Ok(None)
    }

    fn stream_description(
        &self,
        req: &FileRequest,
        direction: Direction,
        local: &Path,
        server: std::net::SocketAddr,
    ) -> Result<ferry_dtp::TransferDescription, ClientError> {
        let mut desc = self.describe(req, direction, local, ChannelSetup::Active(vec![server]))?;
        desc.mode = TransferMode::Stream;
        desc.stack = self.data_stack.clone();
        Ok(desc)
    }

    /// Sends the transfer command (after any REST) and drives it; the listener the server
    /// opened serves this one transfer.
    async fn stream_transfer(
        &mut self,
        command: Command,
        desc: &ferry_dtp::TransferDescription,
        on_progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<TransferOutcome, ClientError> {
        self.data = DataSetup::None;
        self.start_and_drive(None, command, desc, on_progress).await
    }
}
