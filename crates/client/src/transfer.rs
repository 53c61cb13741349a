//! Two-party transfers on a session (one file, or many pipelined): the client's end runs the
//! same DTP as the server, and the data channel is kept for the next file. Third-party
//! transfers are in `third_party.rs`.

use std::path::Path;

use ferry_dtp::{ChannelSetup, Direction, TransferOutcome};
use ferry_proto::command::{Protection, TransferMode};
use ferry_proto::Command;

use crate::drive::{drive, Progress};
use crate::request::FileRequest;
use crate::session::RemoteSession;
use crate::ClientError;

/// The MODE E block size a client asks a ferry server for when it receives one clear stream
/// (`SITE BLOCKSIZE`): twice the server's default, sent in one write. The client's lone stream
/// drains its socket without sleeping, and then the sender is the busy side; half the writes
/// took 7 % off a 4 GiB loopback get (median of 20 alternating rounds). Servers keep their
/// 256 KiB default for everyone else: globus-url-copy gained nothing from larger blocks, and
/// ferry's own server, receiving, lost 13 %.
const LONE_STREAM_BLOCK: u64 = 2 * ferry_dtp::IO_CHUNK as u64;

impl RemoteSession {
    /// The client DTP's description of its end, with this session's DCAU and PROT.
    pub(crate) fn describe(
        &self,
        req: &FileRequest,
        direction: Direction,
        local: &Path,
        channel: ChannelSetup,
    ) -> Result<ferry_dtp::TransferDescription, ClientError> {
        let mut desc = req.local_description(direction, local, channel)?;
        desc.security = self.channel_security.clone();
        desc.stack = self.data_stack.clone();
        Ok(desc)
    }

    /// Downloads `remote` into `local` (MODE E: the client listens, the server connects; in
    /// stream mode from a server without MODE E).
    pub async fn get(
        &mut self,
        remote: &str,
        local: &Path,
        req: &FileRequest,
        on_progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<TransferOutcome, ClientError> {
        self.transport(req).await?;
        if self.binary().await? == TransferMode::Stream {
            return self.get_stream(remote, local, req, on_progress).await;
        }
        self.sender_parallelism(req.parallelism.max(1)).await?;
        let lone = req.parallelism <= 1 && self.channel_security.prot == Protection::Clear;
        let block = req.block_size.map(u64::from);
        self.sender_block_size(block.or(lone.then_some(LONE_STREAM_BLOCK)))
            .await?;
        self.buffers(req.tcp_buffer, true).await?;
        self.sender_congestion(req.congestion).await?;
        self.listen_for_server(req.tuning()).await?;
        let desc = self.describe(req, Direction::Receive, local, ChannelSetup::Passive)?;
        let retrieve = self.retrieve_command(req, remote).await?;
        self.start_and_drive(req.rest_command(), retrieve, &desc, on_progress)
            .await
    }

    /// Downloads many whole files over one cached data channel with up to `window` RETRs
    /// outstanding: the server starts each file the moment the previous one ends instead of a
    /// round trip later, as globus-url-copy's `-pp` does. Files go one after another on the
    /// channel, each ending with its EOF block, so the client's DTP reads them in order.
    ///
    /// Calls `on_start(k)` as file `k` begins and `on_done(k, outcome)` as it completes. On the
    /// first failure the session is marked broken (the server still holds the queued commands,
    /// and the data channel may be mid-file) and `Err((k, error))` names the file that failed:
    /// files from `k` on are not done and should go the ordinary way, with its retries.
    pub async fn get_pipelined(
        &mut self,
        files: &[(&str, &Path)],
        req: &FileRequest,
        window: usize,
        on_start: &mut (dyn FnMut(usize) + Send),
        on_done: &mut (dyn FnMut(usize, TransferOutcome) + Send),
    ) -> Result<(), (usize, ClientError)> {
        let result = self
            .get_pipelined_inner(files, req, window.max(1), on_start, on_done)
            .await;
        if result.is_err() {
            self.broken = true;
            self.reset_data();
        }
        result
    }

    async fn get_pipelined_inner(
        &mut self,
        files: &[(&str, &Path)],
        req: &FileRequest,
        window: usize,
        on_start: &mut (dyn FnMut(usize) + Send),
        on_done: &mut (dyn FnMut(usize, TransferOutcome) + Send),
    ) -> Result<(), (usize, ClientError)> {
        let setup = async {
            self.transport(req).await?;
            self.binary_extended().await?;
            self.sender_parallelism(1).await?;
            self.buffers(req.tcp_buffer, true).await?;
            self.sender_congestion(req.congestion).await?;
            self.listen_for_server(req.tuning()).await
        };
        setup.await.map_err(|e| (0, e))?;
        let commands: Vec<Command> = files
            .iter()
            .map(|(remote, _)| Command::Retr((*remote).into()))
            .collect();
        let mut sent = window.min(commands.len());
        self.ctl
            .send_all(&commands[..sent])
            .await
            .map_err(|e| (0, e))?;
        let mut ignore = |_p: Progress| {};
        for (k, (_, local)) in files.iter().enumerate() {
            on_start(k);
            let desc = self
                .describe(req, Direction::Receive, local, ChannelSetup::Passive)
                .map_err(|e| (k, e))?;
            let outcome = drive(
                &mut self.ctl,
                Some((&mut self.dtp, &desc)),
                &commands[k],
                &mut ignore,
            )
            .await
            .map_err(|e| (k, e))?;
            if sent < commands.len() {
                self.ctl
                    .send(&commands[sent])
                    .await
                    .map_err(|e| (k + 1, e))?;
                sent += 1;
            }
            on_done(k, outcome);
        }
        Ok(())
    }

    /// Uploads `local` to `remote` (MODE E, or stream mode to a server without it; the server
    /// listens, the client connects).
    pub async fn put(
        &mut self,
        local: &Path,
        remote: &str,
        req: &FileRequest,
        on_progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<TransferOutcome, ClientError> {
        let req = self.storable(req);
        let req = &*req;
        let Some(desc) = self.put_channel(req, local).await? else {
            return self.put_stream(local, remote, req, on_progress).await;
        };
        self.start_and_drive(
            req.rest_command(),
            req.store_command(remote),
            &desc,
            on_progress,
        )
        .await
    }

    /// Readies the session for a put of `req` (every setting but its disk stack, the server
    /// listening) and opens its data connections now rather than at the transfer (see
    /// [`ferry_dtp::Dtp::connect_ahead`]): the next [`RemoteSession::put`] with the same
    /// settings then sends its STOR and starts on them. Nothing is connected for a put that
    /// would go in stream mode. The disk stack is the caller's to set after
    /// ([`RemoteSession::set_disk_stack`]): a multicast node's connections to its child are
    /// open before the child hears of its own share of the tree, so the node is ready without
    /// waiting for the levels below.
    pub async fn ready_put(&mut self, req: &FileRequest) -> Result<(), ClientError> {
        let req = FileRequest {
            disk_stack: self.disk_stack.clone(),
            ..self.storable(req).into_owned()
        };
        if let Some(desc) = self.put_channel(&req, Path::new("/")).await? {
            self.dtp.connect_ahead(&desc).await?;
        }
        Ok(())
    }

    /// Everything a put sends before its STOR, and the DTP's description of the client's end;
    /// `None` when the put goes in stream mode.
    async fn put_channel(
        &mut self,
        req: &FileRequest,
        local: &Path,
    ) -> Result<Option<ferry_dtp::TransferDescription>, ClientError> {
        self.transport(req).await?;
        self.set_disk_stack(req.disk_stack.as_deref()).await?;
        if self.udt_accept_hangs() {
            tracing::warn!(
                server = %self.server().authority(),
                "a Globus server never completes a MODE E data connection it accepts over UDT with GSI: stream mode, one stream"
            );
            self.binary_type().await?;
            self.stream_mode().await?;
            return Ok(None);
        }
        if self.binary().await? == TransferMode::Stream {
            return Ok(None);
        }
        self.buffers(req.tcp_buffer, false).await?;
        self.frequent_restart_markers().await?;
        // Striped (`--stripe`): one connection group per data node the server lists in its
        // SPAS reply, each given the blocks the layout assigns its stripe.
        let (addrs, layout) = match req.stripe {
            Some(layout) => (self.server_listen_striped().await?, layout),
            None => (vec![self.server_listen().await?], Default::default()),
        };
        let mut desc = self.describe(req, Direction::Send, local, ChannelSetup::Active(addrs))?;
        desc.layout = layout;
        Ok(Some(desc))
    }

    /// Sends REST (if any) and the transfer command, then drives the transfer to its final
    /// reply; the 150 is read while the data connections open, since Globus waits for them.
    /// On failure the session's data channel is forgotten, so the next file sets up a new one.
    pub(crate) async fn start_and_drive(
        &mut self,
        rest: Option<Command>,
        command: Command,
        desc: &ferry_dtp::TransferDescription,
        on_progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<TransferOutcome, ClientError> {
        let result = async {
            if let Some(rest) = rest {
                self.expect_ok(&rest).await?;
            }
            self.ctl.send(&command).await?;
            drive(
                &mut self.ctl,
                Some((&mut self.dtp, desc)),
                &command,
                on_progress,
            )
            .await
        }
        .await;
        if result.is_err() {
            self.reset_data();
        }
        result
    }
}
