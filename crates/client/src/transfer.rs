//! Two-party transfers of one file on a session: the client's end runs the same DTP as the
//! server, and the data channel is kept for the next file.

use std::path::Path;

use ferry_dtp::{ChannelSetup, Direction, TransferOutcome};
use ferry_proto::command::Protection;
use ferry_proto::opts::{Opts, RetrOpts, StripeLayout};
use ferry_proto::{Command, HostPort};

use crate::drive::{drive, Progress};
use crate::request::FileRequest;
use crate::session::{DataSetup, RemoteSession};
use crate::{ClientError, ErrorClass};

/// The MODE E block size a client asks a ferry server for when it receives one clear stream
/// (`SITE BLOCKSIZE`): twice the server's default, sent in one write. The client's lone stream
/// drains its socket without sleeping, and then the sender is the busy side; half the writes
/// took 7 % off a 4 GiB loopback get (median of 20 alternating rounds). Servers keep their
/// 256 KiB default for everyone else: globus-url-copy gained nothing from larger blocks, and
/// ferry's own server, receiving, lost 13 %.
const LONE_STREAM_BLOCK: u64 = 2 * ferry_dtp::IO_CHUNK as u64;

/// How long the other server of a third-party transfer may take to report after one failed.
const PEER_FAILURE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

impl RemoteSession {
    /// The client DTP's description of its end, with this session's DCAU and PROT.
    fn describe(
        &self,
        req: &FileRequest,
        direction: Direction,
        local: &Path,
        channel: ChannelSetup,
    ) -> Result<ferry_dtp::TransferDescription, ClientError> {
        let mut desc = req.local_description(direction, local, channel)?;
        desc.security = self.channel_security.clone();
        Ok(desc)
    }

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
        let lone = req.parallelism <= 1 && self.channel_security.prot == Protection::Clear;
        let block = req.block_size.map(u64::from);
        self.sender_block_size(block.or(lone.then_some(LONE_STREAM_BLOCK)))
            .await?;
        self.buffers(req.tcp_buffer, true).await?;
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
            self.binary_extended().await?;
            self.sender_parallelism(1).await?;
            self.buffers(req.tcp_buffer, true).await?;
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
        self.frequent_restart_markers().await?;
        // Striped (`--stripe`): one connection group per data node the server lists in its
        // SPAS reply, each given the blocks the layout assigns its stripe.
        let (addrs, layout) = match req.stripe {
            Some(layout) => (self.server_listen_striped().await?, layout),
            None => (vec![self.server_listen().await?], Default::default()),
        };
        let mut desc = self.describe(req, Direction::Send, local, ChannelSetup::Active(addrs))?;
        desc.layout = layout;
        self.start_and_drive(
            req.rest_command(),
            req.store_command(remote),
            &desc,
            on_progress,
        )
        .await
    }

    /// Sends REST (if any) and the transfer command, then drives the transfer to its final
    /// reply; the 150 is read while the data connections open, since Globus waits for them.
    /// On failure the session's data channel is forgotten, so the next file sets up a new one.
    async fn start_and_drive(
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
    src.sender_block_size(req.block_size.map(u64::from)).await?;
    src.buffers(req.tcp_buffer, true).await?;
    dst.buffers(req.tcp_buffer, false).await?;
    dst.frequent_restart_markers().await?;
    let result = third_party_inner(src, src_path, dst, dst_path, req, on_progress)
        .await
        .map(|o| ferry_dtp::TransferOutcome {
            streams: req.parallelism.max(1),
            ..o
        });
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
    let retrieve = src.retrieve_command(req, src_path).await?;
    connect_pair(src, dst, req.stripe.map(|l| (l, req.parallelism.max(1)))).await?;
    if let Some(rest) = req.rest_command() {
        dst.expect_ok(&rest).await?;
        src.expect_ok(&rest).await?;
    }
    // A Globus destination answers STOR only once the source has connected to it, so the RETR
    // goes out before either 150 is read, as globus-url-copy does.
    let store = req.store_command(dst_path);
    dst.ctl.send(&store).await?;
    if let Err(e) = src.ctl.send(&retrieve).await {
        dst.broken = true;
        return Err(e);
    }
    drive_pair(src, &retrieve, dst, &store, on_progress).await
}

/// Tells the source to connect to the destination's listener (or, striped, to every address
/// the destination's `SPAS` lists, with the layout in `OPTS RETR`), unless the two already
/// share a cached data channel.
async fn connect_pair(
    src: &mut RemoteSession,
    dst: &mut RemoteSession,
    stripe: Option<(ferry_dtp::LayoutSpec, u32)>,
) -> Result<(), ClientError> {
    let reuse =
        matches!((&src.data, &dst.data), (DataSetup::ToPeer(a), DataSetup::FromPeer(b)) if a == b);
    if reuse {
        return Ok(());
    }
    let Some((layout, parallelism)) = stripe else {
        let addr = dst.server_listen().await?;
        src.expect_ok(&Command::port_or_eprt(HostPort(addr)))
            .await?;
        src.data = DataSetup::ToPeer(vec![addr]);
        dst.data = DataSetup::FromPeer(vec![addr]);
        return Ok(());
    };
    let spas = Command::Spas(!dst.ctl.peer().is_ipv4());
    let r = dst.expect_ok(&spas).await?;
    let addrs: Vec<std::net::SocketAddr> = ferry_proto::HostPort::from_spas_reply(&r.lines)
        .map_err(|e| ClientError::Address(format!("{spas} reply: {e}")))?
        .into_iter()
        .map(|h| h.0)
        .collect();
    // One OPTS with the parallelism too, as globus-url-copy sends it.
    let p = parallelism;
    let (layout, block_size) = match layout {
        ferry_dtp::LayoutSpec::Blocked(block) => (StripeLayout::Blocked, Some(block)),
        ferry_dtp::LayoutSpec::Partitioned => (StripeLayout::Partitioned, None),
    };
    let opts = RetrOpts {
        parallelism: Some(p),
        layout: Some(layout),
        block_size,
        markers: None,
    };
    src.expect_ok(&Command::Opts(Opts::Retr(opts))).await?;
    let spor = addrs.iter().map(|a| HostPort(*a)).collect();
    src.expect_ok(&Command::Spor(spor)).await?;
    src.data = DataSetup::ToPeer(addrs.clone());
    dst.data = DataSetup::FromPeer(addrs);
    Ok(())
}

/// Reads both servers' replies to one sent RETR/STOR pair until both are final.
async fn drive_pair(
    src: &mut RemoteSession,
    retrieve: &Command,
    dst: &mut RemoteSession,
    store: &Command,
    on_progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<TransferOutcome, ClientError> {
    let mut ignore = |_p: Progress| {};
    let (mut s, mut d) = (None, None);
    {
        let src_run = drive(&mut src.ctl, None, retrieve, &mut ignore);
        let dst_run = drive(&mut dst.ctl, None, store, on_progress);
        tokio::pin!(src_run, dst_run);
        // After one side fails, the other gets a moment to report too: when a server dies, its
        // peer's data-channel error (Globus: `500 ... Connection reset by peer`) races the
        // lost control connection, and only the latter says a retry can help.
        let mut give_up: Option<tokio::time::Instant> = None;
        while s.is_none() || d.is_none() {
            tokio::select! {
                r = &mut src_run, if s.is_none() => s = Some(r),
                r = &mut dst_run, if d.is_none() => d = Some(r),
                _ = tokio::time::sleep_until(give_up.unwrap_or_else(tokio::time::Instant::now)),
                    if give_up.is_some() => break,
            }
            let failed = matches!(s, Some(Err(_))) || matches!(d, Some(Err(_)));
            if failed && give_up.is_none() {
                give_up = Some(tokio::time::Instant::now() + PEER_FAILURE_GRACE);
            }
        }
    }
    // A side still waiting for data that will not come is mid-transfer: its control connection
    // is dropped (closing it makes the server abort).
    if s.is_none() {
        src.broken = true;
    }
    if d.is_none() {
        dst.broken = true;
    }
    match (s, d) {
        (Some(Ok(_)), Some(Ok(outcome))) => Ok(outcome),
        (s, d) => [s, d]
            .into_iter()
            .flatten()
            .filter_map(Result::err)
            .reduce(|first, e| {
                if first.class() != ErrorClass::Network && e.class() == ErrorClass::Network {
                    e
                } else {
                    first
                }
            })
            .map_or(Err(ClientError::Closed), Err),
    }
}

/// Third-party copies of many whole files between one pair of sessions with up to `window`
/// STOR/RETR pairs outstanding, so each server starts the next file as soon as the previous
/// one ends (globus-url-copy's `-pp`). Callbacks and failure handling as for
/// [`RemoteSession::get_pipelined`]: on the first failure both sessions are marked broken and
/// `Err((k, error))` names the file; every file from `k` on must be copied again the ordinary
/// way, because a destination that refused file `k` may have stored the bytes meant for it
/// under the next queued name before the client could stop it.
pub async fn third_party_pipelined(
    src: &mut RemoteSession,
    dst: &mut RemoteSession,
    files: &[(&str, &str)],
    req: &FileRequest,
    window: usize,
    on_start: &mut (dyn FnMut(usize) + Send),
    on_done: &mut (dyn FnMut(usize, TransferOutcome) + Send),
) -> Result<(), (usize, ClientError)> {
    let result =
        third_party_pipelined_inner(src, dst, files, req, window.max(1), on_start, on_done).await;
    if result.is_err() {
        for s in [&mut *src, &mut *dst] {
            s.broken = true;
            s.reset_data();
        }
    }
    result
}

async fn third_party_pipelined_inner(
    src: &mut RemoteSession,
    dst: &mut RemoteSession,
    files: &[(&str, &str)],
    req: &FileRequest,
    window: usize,
    on_start: &mut (dyn FnMut(usize) + Send),
    on_done: &mut (dyn FnMut(usize, TransferOutcome) + Send),
) -> Result<(), (usize, ClientError)> {
    let setup = async {
        src.binary_extended().await?;
        dst.binary_extended().await?;
        src.sender_parallelism(1).await?;
        src.buffers(req.tcp_buffer, true).await?;
        dst.buffers(req.tcp_buffer, false).await?;
        dst.frequent_restart_markers().await?;
        connect_pair(src, dst, req.stripe.map(|l| (l, 1))).await
    };
    setup.await.map_err(|e| (0, e))?;
    let stores: Vec<Command> = files
        .iter()
        .map(|(_, d)| Command::Stor((*d).into()))
        .collect();
    let retrieves: Vec<Command> = files
        .iter()
        .map(|(s, _)| Command::Retr((*s).into()))
        .collect();
    let mut sent = window.min(files.len());
    // STORs first: a Globus destination answers only once the source has connected.
    dst.ctl
        .send_all(&stores[..sent])
        .await
        .map_err(|e| (0, e))?;
    src.ctl
        .send_all(&retrieves[..sent])
        .await
        .map_err(|e| (0, e))?;
    let mut ignore = |_p: Progress| {};
    for k in 0..files.len() {
        on_start(k);
        let outcome = drive_pair(src, &retrieves[k], dst, &stores[k], &mut ignore)
            .await
            .map_err(|e| (k, e))?;
        if sent < files.len() {
            let next = async {
                dst.ctl.send(&stores[sent]).await?;
                src.ctl.send(&retrieves[sent]).await
            };
            next.await.map_err(|e| (k + 1, e))?;
            sent += 1;
        }
        on_done(k, outcome);
    }
    Ok(())
}
