//! A logged-in control connection with the settings it has sent, so each command goes out only
//! when a value changes, and the data channel it holds open for reuse between files.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_dtp::{BufferPool, Dtp};
use ferry_proto::command::{Dcau, Protection, TransferMode, TransferType, TrevEvent};
use ferry_proto::opts::{Opts, RetrOpts};
use ferry_proto::site::SiteCommand;
use ferry_proto::stack::StackSpec;
use ferry_proto::{Command, Reply};
use ferry_storage::{PosixStorage, Storage};

use crate::gsi::GsiSetup;
use crate::request::FileRequest;
use crate::url::{RemoteUrl, Scheme};
use crate::{ClientError, ControlClient};

/// The data channel a session has set up and may reuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DataSetup {
    /// Nothing usable.
    None,
    /// We listen locally and told the server with PORT/EPRT (gets).
    Listening,
    /// The server listens at this address (PASV/EPSV answer; puts).
    ServerPassive(SocketAddr),
    /// A striped server listens on all these (SPAS answer; striped puts).
    ServerStriped(Vec<SocketAddr>),
    /// The server connects to another server (third-party source).
    ToPeer(Vec<SocketAddr>),
    /// The server listens for another server (third-party destination).
    FromPeer(Vec<SocketAddr>),
}

/// One logged-in session.
#[derive(Debug)]
pub struct RemoteSession {
    pub(crate) ctl: ControlClient,
    pub(crate) server: RemoteUrl,
    pub(crate) dtp: Dtp,
    pub(crate) data: DataSetup,
    /// The control connection is out of step with the server (a transfer was left running):
    /// [`crate::Sessions`] drops it and logs in again.
    pub(crate) broken: bool,
    type_image: bool,
    trev_sent: bool,
    /// The transfer mode the server is in (stream until MODE E is accepted).
    mode: TransferMode,
    /// Whether the server takes MODE E; `None` until asked.
    pub(crate) mode_e_offered: Option<bool>,
    parallelism: Option<u32>,
    pub(crate) retr_buf: Option<u32>,
    pub(crate) stor_buf: Option<u32>,
    /// The MODE E block size asked for with `SITE BLOCKSIZE`; `None`: the server's own.
    block_size: Option<u64>,
    /// The congestion control asked of the server with `SITE SETNETSTACK tcp:congestion=`;
    /// `None`: its default.
    pub(crate) congestion: Option<ferry_net::Congestion>,
    pub(crate) features: Vec<String>,
    rtt: Duration,
    /// DCAU and PROT the server holds for this session (DCAU N and PROT C on plain FTP).
    pub(crate) channel_security: ferry_dtp::ChannelSecurity,
    /// The net stack of this session's data connections, both ends: TCP (the server's
    /// default), another transport asked with `SITE SETNETSTACK`, or TLS on FTPS.
    pub(crate) data_stack: StackSpec,
    /// Net stacks the server refused, with its answer ([`RemoteSession::offers`]).
    refused_stacks: Vec<(StackSpec, String)>,
    /// The disk stack last set with `SITE SETDISKSTACK` (`None`: the server's default).
    pub(crate) disk_stack: Option<String>,
    /// Data addresses the server names must be its own control address (a forwarder's child).
    pub(crate) data_at_peer_only: bool,
}

/// Login name and password for a URL: its own, else anonymous.
fn credentials(url: &RemoteUrl) -> (String, String) {
    match (&url.user, &url.password) {
        (Some(u), Some(p)) => (u.clone(), p.clone()),
        (Some(u), None) => (u.clone(), String::new()),
        _ => ("anonymous".into(), "ferry@".into()),
    }
}

impl RemoteSession {
    /// The streams ferry chooses for a file of `size` bytes with this server (by its size and
    /// the control channel's round trip), where the user did not say.
    pub fn auto_streams(&self, size: Option<u64>) -> u32 {
        crate::request::auto_parallelism(size, self.rtt)
    }

    /// The server's control address.
    pub fn peer(&self) -> std::net::SocketAddr {
        self.ctl.peer()
    }

    /// From now on, a data address the server names must be the server's own (one a
    /// forwarder was told to reach, not a third host its reply points at).
    pub fn require_data_at_peer(&mut self) {
        self.data_at_peer_only = true;
    }

    /// The storage this session's own end reads and writes, in place of the local file
    /// system at `/`: a server that moves a file of its own users' storage with a remote
    /// server (the HTTPS door bridging a copy to GridFTP) gives it theirs, and local paths are
    /// then paths in it.
    pub fn use_storage(&mut self, storage: Arc<dyn Storage>) {
        self.dtp.use_storage(storage);
    }

    /// Connects, logs in (with GSI for `gsiftp://`, as `gsi` says), reads FEAT and measures
    /// the control channel's round trip.
    pub async fn connect(url: &RemoteUrl, gsi: &GsiSetup) -> Result<RemoteSession, ClientError> {
        let addr = resolve(url).await?;
        let tls = url
            .scheme
            .is_tls()
            .then(|| crate::ftps::connector(gsi.options().ca_file.as_deref()))
            .transpose()?;
        let mut ctl = match (&tls, url.scheme) {
            (Some(connector), Scheme::Ftps) => {
                ControlClient::connect_tls(addr, connector, &url.host).await?
            }
            _ => ControlClient::connect(addr).await?,
        };
        if let (Some(connector), Scheme::FtpEs) = (&tls, url.scheme) {
            ctl.start_tls(connector, &url.host).await?;
        }
        let mut data_security = None;
        let (user, password) = if url.scheme == Scheme::GsiFtp {
            let loaded = gsi.load()?;
            let target = gsi.target(url, addr.ip());
            let mut config =
                ferry_gsi::ContextConfig::new(loaded.credential.clone(), Arc::clone(&loaded.trust));
            config.delegation = gsi.options().delegation;
            config.sni = target.sni();
            ctl.authenticate_gsi(config, &target).await?;
            data_security = Some(Arc::clone(&loaded.data));
            // The grid-mapfile picks the account unless the URL names one.
            (
                url.user
                    .clone()
                    .unwrap_or_else(|| ":globus-mapping:".into()),
                String::from("dummy"),
            )
        } else {
            credentials(url)
        };
        ctl.login(&user, &password).await.map_err(|e| match e {
            ClientError::Refused { reply, .. } if reply.code == 530 => ClientError::Auth(format!(
                "{} refused the login of '{user}': {}",
                url.authority(),
                reply.text()
            )),
            other => other,
        })?;
        let started = Instant::now();
        let feat = ctl.command(&Command::Feat).await?;
        let rtt = started.elapsed();
        let features = if feat.code == 211 {
            feat.lines
                .iter()
                .skip(1)
                .map(|l| l.trim().to_ascii_uppercase())
                .collect()
        } else {
            Vec::new()
        };
        let storage: Arc<dyn Storage> =
            Arc::new(PosixStorage::open(std::path::Path::new("/"), false)?);
        let mut dtp = Dtp::new(storage, BufferPool::new(ferry_dtp::IO_CHUNK, 16), false);
        dtp.poll_lone_streams(Some(crate::poll_budget()));
        let mut channel_security = ferry_dtp::ChannelSecurity::default();
        if let Some(data) = data_security {
            // After a GSI login the server's data channels default to DCAU A and PROT C.
            let wanted = gsi.channel_security();
            let dcau = match &wanted.dcau {
                Dcau::None => Dcau::None,
                _ => Dcau::Self_,
            };
            ctl.expect_ok(&Command::Dcau(dcau)).await?;
            if wanted.prot != Protection::Clear {
                ctl.expect_ok(&Command::Pbsz(1 << 20)).await?;
                let p = if wanted.prot == Protection::Safe {
                    Protection::Safe
                } else {
                    Protection::Private
                };
                ctl.expect_ok(&Command::Prot(p)).await?;
            }
            dtp.set_security(Some(data));
            channel_security = wanted;
        }
        let mut data_stack = StackSpec::default_net();
        let mut mode_e_offered = None;
        if let Some(connector) = tls {
            // Every data connection in TLS too; the client makes them all (passive stream
            // mode), each resuming this connection's session.
            ctl.expect_ok(&Command::Pbsz(0)).await?;
            ctl.expect_ok(&Command::Prot(Protection::Private)).await?;
            let data = crate::ftps::FtpsData::new(connector, &url.host, ctl.tls_session());
            dtp.use_transports(Arc::new(ferry_net::Transports::standard().with(data)));
            data_stack = StackSpec::single(crate::ftps::FTPS_TRANSPORT);
            mode_e_offered = Some(false);
        }
        Ok(RemoteSession {
            ctl,
            server: url.with_path("/"),
            dtp,
            data: DataSetup::None,
            broken: false,
            type_image: false,
            trev_sent: false,
            mode: TransferMode::Stream,
            mode_e_offered,
            parallelism: None,
            retr_buf: None,
            stor_buf: None,
            block_size: None,
            congestion: None,
            features,
            rtt,
            channel_security,
            data_stack,
            refused_stacks: Vec::new(),
            data_at_peer_only: false,
            disk_stack: None,
        })
    }

    /// Ends the session: the cached data connections are closed (over UDT this is the only
    /// goodbye the server's side gets; without it the server's connections wait out its
    /// silence timeout) and QUIT is sent, each bounded in time. The 221 is not waited for: it
    /// would cost a round trip after the work is done, and nothing depends on it (Globus'
    /// client sends no QUIT at all and just closes). A session out of step with its server
    /// only closes its data connections.
    pub async fn close(mut self) {
        ferry_dtp::DataMover::close(&mut self.dtp).await;
        if self.is_broken() {
            return;
        }
        let limit = Duration::from_secs(2) + self.rtt * 2;
        match tokio::time::timeout(limit, self.ctl.send(&Command::Quit)).await {
            Ok(Ok(())) => tracing::debug!("session ended"),
            Ok(Err(e)) => tracing::debug!(error = %e, "QUIT failed"),
            Err(_) => tracing::debug!("QUIT could not be sent"),
        }
    }

    /// The server this session talks to (path `/`).
    pub fn server(&self) -> &RemoteUrl {
        &self.server
    }

    /// Round trip of one command on the control channel, measured at login.
    pub fn rtt(&self) -> Duration {
        self.rtt
    }

    /// Whether the session is out of step with its server (a pipelined exchange failed part
    /// way, or a deferred command was refused): it takes no more commands.
    pub(crate) fn is_broken(&self) -> bool {
        self.broken || self.ctl.out_of_step()
    }

    /// Whether FEAT listed a feature (by name prefix, as the Globus client matches).
    pub fn has_feature(&self, name: &str) -> bool {
        let name = name.to_ascii_uppercase();
        self.features.iter().any(|f| f.starts_with(&name))
    }

    /// Sends a command and requires a non-error reply.
    pub async fn expect_ok(&mut self, cmd: &Command) -> Result<Reply, ClientError> {
        self.ctl.expect_ok(cmd).await
    }

    /// Sends one command and returns its reply.
    pub async fn command(&mut self, cmd: &Command) -> Result<Reply, ClientError> {
        self.ctl.command(cmd).await
    }

    /// The command that retrieves `req` of `path`, asking the server for the size when a
    /// section runs to the end of the file.
    pub(crate) async fn retrieve_command(
        &mut self,
        req: &FileRequest,
        path: &str,
    ) -> Result<Command, ClientError> {
        self.ctl.retrieve_command(req, path).await
    }

    /// TYPE I, once.
    pub(crate) async fn binary_type(&mut self) -> Result<(), ClientError> {
        if !self.type_image {
            self.ctl.defer(&Command::Type(TransferType::Image), false);
            self.type_image = true;
        }
        Ok(())
    }

    /// Whether the server takes MODE E (extended block mode, which parallel streams, partial
    /// transfers and restart markers need). FEAT has no word for MODE E itself; a server whose
    /// FEAT lists `PARALLEL` (GridFTP's parallelism, which only MODE E carries; Globus and
    /// ferry list it) takes it, and MODE E then leaves with the next command instead of costing a
    /// round trip of its own (a refusal would still fail that command, named). Elsewhere the
    /// first call sends `MODE E`, as globus-url-copy does: a refusal (plain FTP servers answer
    /// 501 or 504) means no, and the session stays in stream mode.
    pub async fn offers_mode_e(&mut self) -> Result<bool, ClientError> {
        if let Some(offered) = self.mode_e_offered {
            return Ok(offered);
        }
        if self.has_feature("PARALLEL") {
            self.ctl
                .defer(&Command::Mode(TransferMode::Extended), false);
            self.mode = TransferMode::Extended;
            self.mode_e_offered = Some(true);
            return Ok(true);
        }
        let r = self
            .ctl
            .command(&Command::Mode(TransferMode::Extended))
            .await?;
        let offered = r.is_success();
        if offered {
            self.mode = TransferMode::Extended;
        } else {
            tracing::info!(
                "{} does not offer MODE E ({} {}): stream mode, one connection per file",
                self.server.authority(),
                r.code,
                r.text().trim()
            );
        }
        self.mode_e_offered = Some(offered);
        Ok(offered)
    }

    /// Whether a MODE E data connection this server accepts would hang: UDT with the GSI
    /// layer to a server that does not say it takes them (Globus' UDT driver; see
    /// [`ferry_proto::stack::UDT_PARALLEL_FEATURE`]).
    pub(crate) fn udt_accept_hangs(&self) -> bool {
        self.data_stack.bottom() == "udt"
            && self.data_stack.has(ferry_net::GSI_LAYER)
            && !self.has_feature(ferry_proto::stack::UDT_PARALLEL_FEATURE)
    }

    /// Stream mode (MODE S) for the next transfer, from MODE E if the session was in it.
    pub(crate) async fn stream_mode(&mut self) -> Result<(), ClientError> {
        if self.mode == TransferMode::Extended {
            self.ctl.defer(&Command::Mode(TransferMode::Stream), false);
            self.mode = TransferMode::Stream;
        }
        Ok(())
    }

    /// TYPE I, and MODE E when the server offers it: the mode this session's transfers use.
    pub(crate) async fn binary(&mut self) -> Result<TransferMode, ClientError> {
        self.binary_type().await?;
        if !self.offers_mode_e().await? {
            return Ok(TransferMode::Stream);
        }
        if self.mode != TransferMode::Extended {
            self.ctl
                .defer(&Command::Mode(TransferMode::Extended), false);
            self.mode = TransferMode::Extended;
        }
        Ok(TransferMode::Extended)
    }

    /// TYPE I and MODE E, which the caller needs: a server without MODE E is refused with the
    /// reason.
    pub(crate) async fn binary_extended(&mut self) -> Result<(), ClientError> {
        match self.binary().await? {
            TransferMode::Extended => Ok(()),
            TransferMode::Stream => Err(ClientError::Unsupported(format!(
                "{} does not offer MODE E (extended block mode), which this transfer needs",
                self.server.authority()
            ))),
        }
    }

    /// Asks a receiving server for restart markers every second (`TREV RESTART 1`), once, so
    /// an interrupted upload resumes from at most a second before the failure instead of the
    /// server's default 5 s. Servers without TREV keep their default; that is no error.
    pub(crate) async fn frequent_restart_markers(&mut self) -> Result<(), ClientError> {
        if !self.trev_sent {
            self.trev_sent = true;
            let trev = Command::Trev {
                event: TrevEvent::Restart,
                interval: 1,
            };
            self.ctl.defer(&trev, true);
        }
        Ok(())
    }

    /// `OPTS RETR Parallelism=n,n,n;` when the server will send.
    pub(crate) async fn sender_parallelism(&mut self, n: u32) -> Result<(), ClientError> {
        if self.parallelism != Some(n) {
            self.ctl.defer(&parallelism_opts(n), false);
            self.parallelism = Some(n);
        }
        Ok(())
    }

    /// Asks the server to send MODE E blocks of `bytes`, or of its own choosing for `None`,
    /// with `SITE BLOCKSIZE`: a ferry extension, sent only to servers whose FEAT lists it (MODE E
    /// leaves the block size to the sender, and other servers keep theirs).
    pub(crate) async fn sender_block_size(
        &mut self,
        bytes: Option<u64>,
    ) -> Result<(), ClientError> {
        if self.block_size == bytes || !self.has_feature("SITE BLOCKSIZE") {
            return Ok(());
        }
        self.ctl.defer(
            &Command::Site(SiteCommand::BlockSize(bytes.unwrap_or(0))),
            false,
        );
        self.block_size = bytes;
        Ok(())
    }

    /// Puts the server's data channels, and this client's end of them, on `req`'s transport
    /// (`SITE SETNETSTACK quic`), or back on TCP (`default`) after another. A refusal (a
    /// Globus server, or one whose admin's `--dc-whitelist` leaves it out) is an error that
    /// names the server and its answer; the server is back on its default stack, as Globus
    /// leaves it. FTPS sessions keep their TLS-over-TCP data channels.
    pub(crate) async fn transport(&mut self, req: &FileRequest) -> Result<(), ClientError> {
        self.transport_with(req, None).await
    }

    /// [`RemoteSession::transport`] for a third-party copy with `peer`: a QUIC session key
    /// shared with it (`session_key`).
    pub(crate) async fn transport_with(
        &mut self,
        req: &FileRequest,
        peer: Option<&str>,
    ) -> Result<(), ClientError> {
        if self.data_stack.bottom() == crate::ftps::FTPS_TRANSPORT {
            return match req.explicit_transport() {
                None => Ok(()),
                Some(t) => Err(ClientError::Unsupported(format!(
                    "{}: FTPS data channels are TLS over TCP; transport {t} needs a GridFTP server",
                    self.server.authority()
                ))),
            };
        }
        let want = match req.explicit_transport() {
            Some(t) => self.with_gsi_layer(
                StackSpec::parse(t)
                    .map_err(|e| ClientError::Usage(format!("transport {t:?}: {e}")))?,
            ),
            None => StackSpec::default_net(),
        };
        let want = crate::session_key::bound(want, &self.server.authority(), peer);
        if self.data_stack == want {
            return Ok(());
        }
        let arg = if want == StackSpec::default_net() {
            "default".to_string()
        } else {
            want.to_string()
        };
        let r = self
            .ctl
            .command(&Command::Site(SiteCommand::SetNetStack(arg)))
            .await?;
        // Connections the server holds were made under the old stack, and a congestion
        // control asked with `tcp:congestion=` went with it.
        self.reset_data();
        self.congestion = None;
        if r.is_success() {
            self.data_stack = want;
            return Ok(());
        }
        self.data_stack = StackSpec::default_net();
        Err(ClientError::Unsupported(format!(
            "{} refused data channel transport {}: {} {}",
            self.server.authority(),
            crate::session_key::unkeyed(want),
            r.code,
            r.text().trim().replace('\n', " / ")
        )))
    }

    /// `stack` with the `gsi` layer right above its transport when DCAU is on and the
    /// transport is a plain byte stream, as globus-url-copy writes it (`udt` → `udt,gsi`): a
    /// Globus server reads a stack without it as "no GSI on the data channel", whatever DCAU
    /// says.
    fn with_gsi_layer(&self, mut stack: StackSpec) -> StackSpec {
        let plain = ferry_net::Transports::standard()
            .transport_of(&stack)
            .is_ok_and(|(t, _)| !t.secures_itself());
        let dcau = !matches!(self.channel_security.dcau, Dcau::None);
        if dcau && plain && !stack.has(ferry_net::GSI_LAYER) && !stack.drivers.is_empty() {
            stack.drivers.insert(
                1,
                ferry_proto::stack::DriverSpec::named(ferry_net::GSI_LAYER),
            );
        }
        stack
    }

    /// Whether the server takes `stack` for its data channels (`SITE SETNETSTACK`): `Err`
    /// with its answer when it refuses. Asked once per session; a server that takes it stays
    /// on it, as [`RemoteSession::transport`] would leave it.
    pub(crate) async fn offers(
        &mut self,
        stack: &StackSpec,
    ) -> Result<Result<(), String>, ClientError> {
        if self.data_stack == *stack {
            return Ok(Ok(()));
        }
        if let Some((_, answer)) = self.refused_stacks.iter().find(|(s, _)| s == stack) {
            return Ok(Err(answer.clone()));
        }
        if self.data_stack.bottom() == crate::ftps::FTPS_TRANSPORT {
            return Ok(Err(
                "an FTPS session's data channels are TLS over TCP".into()
            ));
        }
        let req = FileRequest {
            transport: Some(stack.to_string()),
            ..FileRequest::default()
        };
        match self.transport(&req).await {
            Ok(()) => Ok(Ok(())),
            Err(ClientError::Unsupported(why)) => {
                let answer = why
                    .split_once(": ")
                    .map_or(why.as_str(), |(_, a)| a)
                    .to_string();
                self.refused_stacks.push((stack.clone(), answer.clone()));
                Ok(Err(answer))
            }
            Err(e) => Err(e),
        }
    }
}

async fn resolve(url: &RemoteUrl) -> Result<SocketAddr, ClientError> {
    let mut addrs = tokio::net::lookup_host((url.host.as_str(), url.port))
        .await
        .map_err(|e| ClientError::Network(format!("cannot resolve {}: {e}", url.host)))?;
    addrs
        .next()
        .ok_or_else(|| ClientError::Network(format!("{} has no address", url.host)))
}

/// `OPTS RETR Parallelism=n,n,n;`.
pub(crate) fn parallelism_opts(n: u32) -> Command {
    Command::Opts(Opts::Retr(RetrOpts {
        parallelism: Some(n),
        ..RetrOpts::default()
    }))
}
