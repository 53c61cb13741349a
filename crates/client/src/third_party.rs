//! Third-party transfers: the client sets up a data channel from one server to another and
//! drives both control channels; no data passes through the client. Both servers keep the
//! channel for the next file between the same pair.

use ferry_dtp::TransferOutcome;
use ferry_proto::opts::{Opts, RetrOpts, StripeLayout};
use ferry_proto::{Command, HostPort};

use crate::drive::{drive, Progress};
use crate::request::FileRequest;
use crate::session::DataSetup;
use crate::session::RemoteSession;
use crate::{ClientError, ErrorClass};

/// How long the other server of a third-party transfer may take to report after one failed.
const PEER_FAILURE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

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
    let req = dst.storable(req);
    let req = &*req;
    pair_transport(src, dst, req).await?;
    dst.set_disk_stack(req.disk_stack.as_deref()).await?;
    if dst.udt_accept_hangs() {
        return third_party_stream(src, src_path, dst, dst_path, req, on_progress).await;
    }
    src.binary_extended().await?;
    dst.binary_extended().await?;
    src.sender_parallelism(req.parallelism.max(1)).await?;
    src.sender_block_size(req.block_size.map(u64::from)).await?;
    src.buffers(req.tcp_buffer, true).await?;
    dst.buffers(req.tcp_buffer, false).await?;
    src.sender_congestion(req.congestion).await?;
    dst.frequent_restart_markers().await?;
    let mut result = third_party_inner(src, src_path, dst, dst_path, req, on_progress)
        .await
        .map(|o| ferry_dtp::TransferOutcome {
            streams: req.parallelism.max(1),
            ..o
        });
    if let Ok(o) = &mut result {
        // The client sees neither data connection: a ferry source says what its kernel saw.
        o.tcp = src.last_tcp_info().await;
    }
    if result.is_err() {
        src.reset_data();
        dst.reset_data();
    }
    result
}

/// A third-party copy in stream mode, one stream, the source listening: for a destination
/// that would hang accepting a MODE E connection over UDT with GSI (Globus' UDT driver, see
/// [`ferry_proto::stack::UDT_PARALLEL_FEATURE`]); it completes one it makes itself.
async fn third_party_stream(
    src: &mut RemoteSession,
    src_path: &str,
    dst: &mut RemoteSession,
    dst_path: &str,
    req: &FileRequest,
    on_progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<TransferOutcome, ClientError> {
    if req.is_partial() {
        return Err(ClientError::Unsupported(format!(
            "{} takes UDT data connections with GSI only in stream mode, which cannot copy part of a file",
            dst.server().authority()
        )));
    }
    tracing::warn!(
        server = %dst.server().authority(),
        "a Globus server never completes a MODE E data connection it accepts over UDT with GSI: stream mode, one stream, the source listening"
    );
    for s in [&mut *src, &mut *dst] {
        s.binary_type().await?;
        s.stream_mode().await?;
        s.reset_data();
    }
    let result = async {
        let addr = src.server_listen().await?;
        dst.expect_ok(&Command::port_or_eprt(HostPort(addr)))
            .await?;
        let store = Command::Stor(dst_path.into());
        let retrieve = Command::Retr(src_path.into());
        dst.ctl.send(&store).await?;
        if let Err(e) = src.ctl.send(&retrieve).await {
            dst.broken = true;
            return Err(e);
        }
        drive_pair(src, &retrieve, dst, &store, on_progress).await
    }
    .await;
    // A stream-mode connection ends with its file.
    src.reset_data();
    dst.reset_data();
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
    // The source server will connect to these: a destination must not aim it elsewhere.
    for a in &addrs {
        ferry_proto::data_address::check_server_data_address(dst.ctl.peer().ip(), *a)?;
    }
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
        pair_transport(src, dst, req).await?;
        dst.set_disk_stack(req.disk_stack.as_deref()).await?;
        src.binary_extended().await?;
        dst.binary_extended().await?;
        src.sender_parallelism(1).await?;
        src.buffers(req.tcp_buffer, true).await?;
        dst.buffers(req.tcp_buffer, false).await?;
        src.sender_congestion(req.congestion).await?;
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

/// Both servers on `req`'s transport, a QUIC one sharing one session key.
async fn pair_transport(
    src: &mut RemoteSession,
    dst: &mut RemoteSession,
    req: &FileRequest,
) -> Result<(), ClientError> {
    let (a, b) = (src.server.authority(), dst.server.authority());
    src.transport_with(req, Some(&b)).await?;
    dst.transport_with(req, Some(&a)).await
}
