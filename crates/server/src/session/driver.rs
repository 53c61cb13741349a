//! The async driver of one control connection: it reads lines off the socket into the
//! sans-IO PI (`pi/`), writes the replies that come out, and carries out the PI's requests —
//! logins, storage calls on the blocking pool, the data mover's operations and transfers,
//! during which it keeps reading the control channel (ABOR, STAT, pipelined commands).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_dtp::{
    relay, DataMover, Dtp, DtpError, DtpEvent, RelaySink, Relayed, TransferDescription,
    TransferOutcome, Watch,
};
use ferry_proto::clock;
use ferry_proto::command::TransferMode;
use ferry_proto::line::LineEvent;
use ferry_proto::Reply;
use ferry_storage::{Storage, StorageError};
use tokio::io::AsyncWriteExt;

use super::pi::{
    Answer, Interrupt, LoginKind, LoginRequest, Output, Pi, Request, ServerStatus, StorageCall,
    TransferRun, PREPARE_WAIT,
};
use super::{queue_line, strip_telnet, ControlReader, ControlWriter};
use crate::daemon::ServerContext;
use crate::metrics::AuthKind;
use ferry_site::TransferRecord;

/// The longest a reply is held back while a later pipelined command is carried out.
const HOLD_REPLIES: Duration = Duration::from_millis(5);

/// What the driver holds for a logged-in session: the storage its calls run on and the mover
/// that moves its data (its own DTP, or a striped frontend's DTPs on the data nodes).
pub(super) struct Driver {
    pub(super) ctx: Arc<ServerContext>,
    pub(super) reader: ControlReader,
    pub(super) wr: ControlWriter,
    storage: Option<Arc<dyn Storage>>,
    mover: Option<Box<dyn DataMover>>,
    /// Set by a successful login: counts the session in the metrics while it lives.
    session: Option<LoggedIn>,
    /// Transfers and bytes this session moved (its closing log line).
    pub(super) transfers: u64,
    pub(super) bytes: u64,
}

impl Driver {
    pub(super) fn new(ctx: Arc<ServerContext>, reader: ControlReader, wr: ControlWriter) -> Driver {
        Driver {
            ctx,
            reader,
            wr,
            storage: None,
            mover: None,
            session: None,
            transfers: 0,
            bytes: 0,
        }
    }

    /// Runs the session until the PI closes it or the client goes.
    pub(super) async fn run(&mut self, pi: &mut Pi) {
        // The login timeout counts from the connection, not from the last byte: a client that
        // trickles bytes (or NOOPs) without logging in must not hold its connection forever.
        let login_deadline = tokio::time::Instant::now()
            + Duration::from_secs(self.ctx.config.control_preauth_timeout.max(1));
        loop {
            match self.drain(pi).await {
                Ok(true) => {}
                Ok(false) | Err(_) => break,
            }
            let r = &self.reader;
            if r.eof && r.pending.is_empty() && r.framer.buffered() == 0 {
                break;
            }
            let event = match self.reader.next_buffered() {
                Some(ev) => ev,
                None => {
                    // Nothing more buffered: the replies held for a pipeline go out now.
                    if self.wr.flush().await.is_err() {
                        break;
                    }
                    self.reader.framer.shrink();
                    let deadline = if pi.is_logged_in() {
                        let idle = Duration::from_secs(self.ctx.config.control_idle_timeout.max(1));
                        tokio::time::Instant::now() + idle
                    } else {
                        login_deadline
                    };
                    match tokio::time::timeout_at(deadline, self.reader.fill()).await {
                        Ok(Ok(true)) => continue,
                        Ok(Ok(false)) | Ok(Err(_)) => break,
                        Err(_) => {
                            pi.timed_out();
                            continue;
                        }
                    }
                }
            };
            match event {
                LineEvent::TooLong => pi.handle_too_long(),
                LineEvent::Line(line) => pi.handle_line(&strip_telnet(&line)),
            }
        }
        let _ = self.wr.flush().await;
        let _ = self.wr.wr.shutdown().await;
    }

    /// Writes the PI's replies and carries out its requests until it has nothing more to say;
    /// false once it closed the session.
    async fn drain(&mut self, pi: &mut Pi) -> std::io::Result<bool> {
        while let Some(out) = pi.poll_output() {
            match out {
                Output::Reply(r) => self.wr.hold(&r.to_bytes())?,
                Output::Protect(ctx) => self.protect(*ctx),
                Output::Close => return Ok(false),
                Output::Request(req) => self.carry_out(req, pi).await?,
            }
        }
        Ok(true)
    }

    /// Protects the session from the next line on: commands are unwrapped, replies wrapped.
    fn protect(&mut self, ctx: ferry_gsi::SecurityContext) {
        let shared = Arc::new(std::sync::Mutex::new(ctx));
        self.reader.security = Some(Arc::clone(&shared));
        self.wr.security = Some(shared);
    }

    async fn carry_out(&mut self, req: Request, pi: &mut Pi) -> std::io::Result<()> {
        // Held replies wait only for storage calls (a pipeline of CKSMs, say) and quick answers;
        // a login, a data connection or a transfer may take long, and the client may be waiting
        // for an earlier reply before it connects.
        if !req.is_quick() {
            self.wr.flush().await?;
        }
        match req {
            Request::Login(login) => {
                let r = self.login(login, pi.peer).await;
                pi.login_done(r);
            }
            Request::OpenPassive(p) => {
                let r = match self.mover.as_mut() {
                    Some(m) => m.open_passive(p).await,
                    None => Err(DtpError::NoDataChannel),
                };
                pi.passive_done(r);
            }
            Request::SetActive(endpoints) => {
                let r = match self.mover.as_mut() {
                    Some(m) => m.set_active(&endpoints).await,
                    None => Err(DtpError::NoDataChannel),
                };
                pi.active_done(r);
            }
            Request::ForgetCache => {
                if let Some(m) = self.mover.as_mut() {
                    m.forget_cache();
                }
            }
            Request::PrepareDiskStack(stack, security) => {
                if let Some(m) = self.mover.as_mut() {
                    let ready = m.prepare_disk_stack(&stack, &security);
                    let _ = tokio::time::timeout(PREPARE_WAIT, ready).await;
                }
            }
            Request::Storage(mut call) => {
                let r = match self.storage.clone() {
                    Some(s) => match call.at_hand(&*s) {
                        Some(answer) => Ok(answer),
                        None => {
                            self.held_while(async move { blocking(&s, call).await })
                                .await?
                        }
                    },
                    None => Err(StorageError::PermissionDenied("not logged in".into())),
                };
                pi.storage_done(r);
            }
            Request::Transfer(run) => self.transfer(*run, pi).await?,
            Request::Status => {
                let s = &self.ctx.shared;
                let relaxed = std::sync::atomic::Ordering::Relaxed;
                pi.status_done(ServerStatus {
                    uptime_s: s.started.elapsed().as_secs(),
                    sessions: s.connections.load(relaxed),
                    sessions_max: self.ctx.config.connections_max,
                    transfers_running: s.transfers_running.load(relaxed),
                    transfers_started: s.next_transfer.load(relaxed).saturating_sub(1),
                });
            }
        }
        Ok(())
    }

    /// Awaits `call`; replies held for a pipeline go out if it takes longer than
    /// [`HOLD_REPLIES`] (a checksum of a large file, a slow file system), so holding them never
    /// delays a reply by more than that.
    async fn held_while<T>(
        &mut self,
        call: impl std::future::Future<Output = T>,
    ) -> std::io::Result<T> {
        if !self.wr.holds() {
            return Ok(call.await);
        }
        tokio::pin!(call);
        tokio::select! {
            r = &mut call => return Ok(r),
            () = tokio::time::sleep(HOLD_REPLIES) => {}
        }
        self.wr.flush().await?;
        Ok(call.await)
    }

    /// Checks a login and sets up its storage and mover; `Ok(read_only)` or the refusal.
    async fn login(&mut self, req: LoginRequest, peer: SocketAddr) -> Result<bool, Reply> {
        let cfg = &self.ctx.config;
        let name = req.name;
        let auth = match req.kind {
            LoginKind::Password(_) => AuthKind::Password,
            LoginKind::Anonymous => AuthKind::Anonymous,
            LoginKind::Gsi { .. } => AuthKind::Gsi,
        };
        let metrics = &self.ctx.shared.metrics;
        let (read_only, account, gsi) = match req.kind {
            LoginKind::Password(password) => {
                let db = self.ctx.passwords.clone();
                let n = name.clone();
                let ok = tokio::task::spawn_blocking(move || db.verify(&n, &password))
                    .await
                    .unwrap_or(false);
                if !ok {
                    metrics.login_failed(auth);
                    // Slow down guessing without holding a thread.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    return Err(Reply::new(530, "Login incorrect."));
                }
                let account = self.ctx.accounts.password(&self.ctx.passwords, &name);
                (false, account, None)
            }
            LoginKind::Anonymous => (!cfg.anonymous_write, self.ctx.accounts.anonymous(), None),
            // On a root server a GSI session works as its mapped account from here on: every
            // file operation runs on that account's identity thread (ferry_storage::identity).
            LoginKind::Gsi {
                identity,
                delegated,
            } => {
                tracing::debug!(peer = %peer, dn = %identity, account = %name, "GSI login");
                (
                    false,
                    cfg.run_as_user.then(|| name.clone()),
                    Some(delegated),
                )
            }
        };
        let storage = if read_only {
            Arc::clone(&self.ctx.storage_ro)
        } else {
            Arc::clone(&self.ctx.storage_rw)
        };
        let allow_root = self.ctx.accounts.allow_root();
        let storage = match ferry_site::identity::storage_as(storage, account.clone(), allow_root)
            .await
        {
            Ok(s) => s,
            Err(e) => {
                metrics.login_failed(auth);
                let account = account.unwrap_or_default();
                tracing::warn!(peer = %peer, user = %name, account = %account, error = %e, "cannot run as the account");
                return Err(Reply::new(
                    530,
                    format!("Login incorrect. : cannot run as {account}: {e}"),
                ));
            }
        };
        let mover: Box<dyn DataMover> = match &self.ctx.nodes {
            Some(nodes) => {
                let delegated_pem = match gsi.as_ref().and_then(|d| d.as_ref()) {
                    Some(c) => match c.to_proxy_pem() {
                        Ok(p) => Some(String::from_utf8_lossy(&p).into_owned()),
                        Err(e) => {
                            tracing::warn!(peer = %peer, error = %e, "cannot pass the delegated credential to data nodes");
                            None
                        }
                    },
                    None => None,
                };
                let login = crate::striped::frontend::NodeLogin {
                    account,
                    read_only,
                    delegated_pem,
                };
                Box::new(crate::striped::frontend::RemoteDtp::new(
                    Arc::clone(nodes),
                    login,
                    Arc::clone(&storage),
                ))
            }
            None => {
                let mut dtp = Dtp::new(Arc::clone(&storage), Arc::clone(&self.ctx.pool), read_only);
                dtp.poll_lone_streams(Some(Arc::clone(&self.ctx.poll_budget)));
                dtp.limit_streams(ferry_dtp::StreamLimits {
                    per_transfer: cfg.data_streams_max,
                    server: Some(Arc::clone(&self.ctx.shared.data_permits)),
                });
                dtp.use_disk_stacks(Arc::clone(&self.ctx.disk_stacks));
                dtp.use_transports(Arc::clone(&self.ctx.transports));
                if let Some(delegated) = gsi {
                    let was_delegated = delegated.is_some();
                    let security = self.data_security(delegated, peer);
                    if was_delegated {
                        dtp.set_delegated(security.clone());
                    }
                    dtp.set_security(security);
                }
                Box::new(dtp)
            }
        };
        self.storage = Some(storage);
        self.mover = Some(mover);
        metrics.logged_in(auth);
        self.session = Some(LoggedIn {
            ctx: Arc::clone(&self.ctx),
            auth,
        });
        Ok(read_only)
    }

    /// The credential this session's data connections authenticate with: the one the client
    /// delegated, else (as Globus) the host credential, under which DCAU A fails unless the
    /// client is the host itself.
    fn data_security(
        &self,
        delegated: Option<ferry_gsi::Credential>,
        peer: SocketAddr,
    ) -> Option<Arc<ferry_gsi::DataSecurity>> {
        let gsi = self.ctx.gsi.as_ref()?;
        let credential = delegated.unwrap_or_else(|| gsi.credential().clone());
        match ferry_gsi::DataSecurity::new(credential, gsi.trust()) {
            Ok(s) => Some(Arc::new(s)),
            Err(e) => {
                tracing::warn!(peer = %peer, error = %e, "no credential for data channels");
                None
            }
        }
    }

    /// Runs a transfer on the mover, relaying its events through the PI.
    async fn transfer(&mut self, run: TransferRun, pi: &mut Pi) -> std::io::Result<()> {
        let TransferRun { mut desc, verb } = run;
        desc.id = self
            .ctx
            .shared
            .next_transfer
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(mover) = self.mover.as_mut() else {
            pi.transfer_done(&Err(DtpError::NoDataChannel), false, "");
            return Ok(());
        };
        pi.transfer_started(mover.will_reuse(&desc));
        let started = Instant::now();
        let running = RunningTransfer::count(Arc::clone(&self.ctx));
        let mut sink = ControlSink {
            pi: &mut *pi,
            wr: &mut self.wr,
            reader: &mut self.reader,
            stopped: None,
        };
        let relayed = relay(&mut **mover, &desc, &mut sink).await;
        drop(running);
        let stopped = sink.stopped;
        // A control channel that fails while the data moves (a reply or marker that cannot
        // be written to a client that died) ends the session, but the transfer is still
        // counted and logged, as aborted.
        let (result, lost) = match relayed {
            Ok(Relayed::Finished(r)) => (r, None),
            Ok(Relayed::Stopped) => (
                Err(DtpError::Connection(
                    stopped.unwrap_or("aborted by client").into(),
                )),
                None,
            ),
            Err(e) => (
                Err(DtpError::Connection(format!(
                    "control connection lost: {e}"
                ))),
                Some(e),
            ),
        };
        let moved = mover.bytes_moved();
        let note = mover.note();
        let data_peer = mover.data_peer(&desc);
        let aborted = stopped.is_some() || lost.is_some();
        self.ctx
            .shared
            .metrics
            .transfer_finished(&desc, &result, moved, aborted);
        self.transfers += 1;
        self.bytes += result.as_ref().map_or(moved, |o| o.bytes);
        log_transfer(
            &self.ctx, pi, verb, &desc, started, &result, moved, data_peer,
        );
        if let Some(e) = lost {
            return Err(e);
        }
        pi.transfer_done(&result, stopped.is_some(), &note);
        Ok(())
    }
}

/// Logs a finished transfer (and writes the transfer log): `moved` counts a failed one;
/// `data_peer` is the host at the other end of the data channel, when known.
#[allow(clippy::too_many_arguments)]
fn log_transfer(
    ctx: &ServerContext,
    pi: &Pi,
    verb: &'static str,
    desc: &TransferDescription,
    started: Instant,
    result: &Result<TransferOutcome, DtpError>,
    moved: u64,
    data_peer: Option<std::net::IpAddr>,
) {
    let (bytes, streams, outcome, code) = match result {
        Ok(o) => (o.bytes, o.streams, "ok".to_string(), 226),
        Err(e) => (moved, 0, e.to_string(), e.reply_code()),
    };
    let checksums = match result {
        Ok(o) => o
            .checksums
            .iter()
            .map(|t| (t.algorithm.name(), t.value.as_str()))
            .collect(),
        Err(_) => Default::default(),
    };
    let tcp = result.as_ref().ok().and_then(|o| o.tcp.as_ref());
    let result = outcome.as_str();
    let secs = started.elapsed().as_secs_f64();
    let user = pi.user_name();
    tracing::info!(
        peer = %pi.peer, user, verb, path = %desc.path, bytes, streams, secs, code, result, "transfer"
    );
    let restarted = !desc.restart.is_empty();
    let globus_type = match (&desc.source, desc.direction) {
        (ferry_dtp::TransferSource::Listing { .. }, _) => verb,
        // As Globus: ERET for a part of the file (a RETR after REST stays RETR), ESTO for a
        // store that does not replace the file (appending, resuming, ESTO itself).
        (_, ferry_dtp::Direction::Send) => {
            if desc.section.file_offset > 0 || desc.section.length.is_some() {
                "ERET"
            } else {
                "RETR"
            }
        }
        (_, ferry_dtp::Direction::Receive) => {
            if !desc.truncate || restarted {
                "ESTO"
            } else {
                "STOR"
            }
        }
    };
    let tuning = &desc.tuning;
    ctx.shared.translog.write(
        &TransferRecord {
            time: clock::now_since_epoch().as_secs_f64(),
            user,
            peer: pi.peer.to_string(),
            command: verb,
            path: desc.path.as_str(),
            bytes,
            streams,
            mode: if desc.mode == TransferMode::Extended {
                "E"
            } else {
                "S"
            },
            transport: desc.stack.bottom(),
            duration_s: secs,
            result,
            code,
            task_id: pi.task_id.as_deref(),
            checksums,
            tcp,
            data_peer,
            globus_type,
            buffer: tuning.send_buffer.or(tuning.recv_buffer).unwrap_or(0),
            block: desc
                .block_size
                .or(ctx.config.block_size)
                .unwrap_or(ferry_dtp::IO_CHUNK as u32),
            stripes: ctx.nodes.as_ref().map_or(1, |n| n.len()),
        },
        &ctx.shared.host,
    );
}

/// The PI's end of a relayed transfer: the PI words the events, and while the data moves the
/// control channel is read: ABOR and a lost client stop the transfer, STAT is answered, other
/// commands wait their turn (pipelining).
struct ControlSink<'a> {
    pi: &'a mut Pi,
    wr: &'a mut ControlWriter,
    reader: &'a mut ControlReader,
    /// Why the control channel stopped the transfer.
    stopped: Option<&'static str>,
}

impl ControlSink<'_> {
    /// Writes what the PI said (replies only, while a transfer runs).
    async fn flush(&mut self) -> std::io::Result<()> {
        while let Some(out) = self.pi.poll_output() {
            if let Output::Reply(r) = out {
                tracing::trace!(code = r.code, "reply during a transfer");
                self.wr.write_all(&r.to_bytes()).await?;
            }
        }
        Ok(())
    }

    fn stop(&mut self, why: &'static str) -> Watch {
        self.stopped = Some(why);
        Watch::Stop
    }
}

impl RelaySink for ControlSink<'_> {
    type Error = std::io::Error;

    async fn event(&mut self, ev: DtpEvent) -> std::io::Result<()> {
        self.pi.transfer_event(&ev);
        self.flush().await
    }

    async fn watch(&mut self) -> std::io::Result<Watch> {
        if self.reader.eof {
            return std::future::pending().await;
        }
        if !matches!(self.reader.fill().await, Ok(true)) {
            // The client went away: stop moving data for it.
            return Ok(self.stop("control connection closed"));
        }
        while let Some(ev) = self.reader.next_from_wire() {
            if let LineEvent::Line(l) = &ev {
                match self.pi.during_transfer(&strip_telnet(l)) {
                    Interrupt::Abort => return Ok(self.stop("aborted by client")),
                    Interrupt::Answered => {
                        self.flush().await?;
                        continue;
                    }
                    Interrupt::Later => {}
                }
            }
            if !queue_line(self.reader, ev) {
                return Ok(self.stop("too many commands queued during the transfer"));
            }
        }
        Ok(Watch::Continue)
    }
}

/// Runs a storage call on the blocking pool.
async fn blocking(storage: &Arc<dyn Storage>, call: StorageCall) -> Result<Answer, StorageError> {
    let s = Arc::clone(storage);
    match tokio::task::spawn_blocking(move || call.run(&*s)).await {
        Ok(r) => r,
        Err(e) => Err(StorageError::Io {
            path: String::new(),
            source: std::io::Error::other(e.to_string()),
        }),
    }
}

/// One transfer in `SITE STATUS`'s running count, for as long as it lives (also when the
/// session's task ends mid-transfer).
struct RunningTransfer(Arc<ServerContext>);

impl RunningTransfer {
    fn count(ctx: Arc<ServerContext>) -> RunningTransfer {
        ctx.shared
            .transfers_running
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ctx.shared.metrics.transfer_started();
        RunningTransfer(ctx)
    }
}

impl Drop for RunningTransfer {
    fn drop(&mut self) {
        let s = &self.0.shared;
        s.transfers_running
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        s.metrics.transfer_ended();
    }
}

/// A logged-in session, counted in the metrics until it ends (however its task ends).
struct LoggedIn {
    ctx: Arc<ServerContext>,
    auth: AuthKind,
}

impl Drop for LoggedIn {
    fn drop(&mut self) {
        self.ctx.shared.metrics.logged_out(self.auth);
    }
}
