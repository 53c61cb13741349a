//! A logged-in control connection with the settings it has sent, so each command goes out only
//! when a value changes, and the data channel it holds open for reuse between files.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_dtp::{BufferPool, DataMover, Dtp};
use ferry_net::SocketTuning;
use ferry_proto::command::{Dcau, Protection, TransferMode, TransferType, TrevEvent};
use ferry_proto::hostport::HostPort;
use ferry_proto::opts::{Opts, RetrOpts};
use ferry_proto::site::SiteCommand;
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
    mode_e: bool,
    parallelism: Option<u32>,
    retr_buf: Option<u32>,
    stor_buf: Option<u32>,
    /// The MODE E block size asked for with `SITE BLOCKSIZE`; `None`: the server's own.
    block_size: Option<u64>,
    features: Vec<String>,
    rtt: Duration,
    /// DCAU and PROT the server holds for this session (DCAU N and PROT C on plain FTP).
    pub(crate) channel_security: ferry_dtp::ChannelSecurity,
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
    /// Connects, logs in (with GSI for `gsiftp://`, as `gsi` says), reads FEAT and measures
    /// the control channel's round trip.
    pub async fn connect(url: &RemoteUrl, gsi: &GsiSetup) -> Result<RemoteSession, ClientError> {
        let addr = resolve(url).await?;
        let mut ctl = ControlClient::connect(addr).await?;
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
        Ok(RemoteSession {
            ctl,
            server: url.with_path("/"),
            dtp,
            data: DataSetup::None,
            broken: false,
            type_image: false,
            trev_sent: false,
            mode_e: false,
            parallelism: None,
            retr_buf: None,
            stor_buf: None,
            block_size: None,
            features,
            rtt,
            channel_security,
        })
    }

    /// The server this session talks to (path `/`).
    pub fn server(&self) -> &RemoteUrl {
        &self.server
    }

    /// Round trip of one command on the control channel, measured at login.
    pub fn rtt(&self) -> Duration {
        self.rtt
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

    /// TYPE I and MODE E, once.
    pub(crate) async fn binary_extended(&mut self) -> Result<(), ClientError> {
        if !self.type_image {
            self.expect_ok(&Command::Type(TransferType::Image)).await?;
            self.type_image = true;
        }
        if !self.mode_e {
            self.expect_ok(&Command::Mode(TransferMode::Extended))
                .await?;
            self.mode_e = true;
        }
        Ok(())
    }

    /// Asks a receiving server for restart markers every second (`TREV RESTART 1`), once, so
    /// an interrupted upload resumes from at most a second before the failure instead of the
    /// server's default 5 s. Servers without TREV keep their default; that is no error.
    pub(crate) async fn frequent_restart_markers(&mut self) -> Result<(), ClientError> {
        if !self.trev_sent {
            self.trev_sent = true;
            self.ctl
                .command(&Command::Trev {
                    event: TrevEvent::Restart,
                    interval: 1,
                })
                .await?;
        }
        Ok(())
    }

    /// `OPTS RETR Parallelism=n,n,n;` when the server will send.
    pub(crate) async fn sender_parallelism(&mut self, n: u32) -> Result<(), ClientError> {
        if self.parallelism != Some(n) {
            self.expect_ok(&parallelism_opts(n)).await?;
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
        self.expect_ok(&Command::Site(SiteCommand::BlockSize(bytes.unwrap_or(0))))
            .await?;
        self.block_size = bytes;
        Ok(())
    }

    /// Asks the server for socket buffers of `bytes` for sending (`retr`) or receiving, trying
    /// the commands Globus servers know; buffers are a hint, so refusals are not errors.
    pub(crate) async fn buffers(
        &mut self,
        bytes: Option<u32>,
        retr: bool,
    ) -> Result<(), ClientError> {
        let Some(n) = bytes else { return Ok(()) };
        let size = u64::from(n);
        let (cached, commands) = if retr {
            let site = Command::Site(SiteCommand::RetrBufSize(size));
            (&mut self.retr_buf, [site, Command::Sbuf(size)])
        } else {
            let site = Command::Site(SiteCommand::StorBufSize(size));
            (&mut self.stor_buf, [site, Command::Sbuf(size)])
        };
        if *cached == Some(n) {
            return Ok(());
        }
        *cached = Some(n);
        for cmd in &commands {
            let r = self.ctl.command(cmd).await?;
            if r.is_success() {
                // A buffer change invalidates cached data connections on the server.
                self.data = DataSetup::None;
                DataMover::forget(&mut self.dtp);
                break;
            }
        }
        Ok(())
    }

    /// Sets up a local listener and tells the server to connect to it (for gets).
    pub(crate) async fn listen_for_server(
        &mut self,
        tuning: SocketTuning,
    ) -> Result<(), ClientError> {
        if self.data == DataSetup::Listening && self.dtp.is_listening() {
            return Ok(());
        }
        let ip = self.ctl.local_addr()?.ip();
        let cmd = listen_locally(&mut self.dtp, ip, tuning).await?;
        self.expect_ok(&cmd).await?;
        self.data = DataSetup::Listening;
        Ok(())
    }

    /// Asks the server to listen (PASV, or EPSV on IPv6) and returns where.
    pub(crate) async fn server_listen(&mut self) -> Result<SocketAddr, ClientError> {
        if let DataSetup::ServerPassive(a) = self.data {
            return Ok(a);
        }
        let peer = self.ctl.peer();
        let addr = if peer.is_ipv4() {
            let r = self.expect_ok(&Command::Pasv).await?;
            HostPort::from_pasv_reply(&r.text())
                .map_err(|e| ClientError::Address(e.to_string()))?
                .0
        } else {
            let r = self.expect_ok(&Command::Epsv(None)).await?;
            let port = HostPort::port_from_epsv_reply(&r.text())
                .map_err(|e| ClientError::Address(e.to_string()))?;
            SocketAddr::new(peer.ip(), port)
        };
        self.data = DataSetup::ServerPassive(addr);
        Ok(addr)
    }

    /// Has a striped server listen on every data node (`SPAS`) and returns the addresses, or
    /// those it gave before for the cached channel.
    pub(crate) async fn server_listen_striped(&mut self) -> Result<Vec<SocketAddr>, ClientError> {
        if let DataSetup::ServerStriped(a) = &self.data {
            return Ok(a.clone());
        }
        let spas = Command::Spas(!self.ctl.peer().is_ipv4());
        let r = self.expect_ok(&spas).await?;
        let addrs: Vec<SocketAddr> = HostPort::from_spas_reply(&r.lines)
            .map_err(|e| ClientError::Address(format!("{spas} reply: {e}")))?
            .into_iter()
            .map(|h| h.0)
            .collect();
        self.data = DataSetup::ServerStriped(addrs.clone());
        Ok(addrs)
    }

    /// Forgets every data channel (after an error, or when a transfer could not reuse it).
    pub(crate) fn reset_data(&mut self) {
        self.data = DataSetup::None;
        DataMover::forget(&mut self.dtp);
    }
}

/// Opens a listener on the client's own DTP (its default net stack) and returns the PORT or
/// EPRT command that names it to a server.
pub(crate) async fn listen_locally(
    dtp: &mut Dtp,
    ip: std::net::IpAddr,
    tuning: SocketTuning,
) -> Result<Command, ClientError> {
    let req = ferry_dtp::PassiveRequest {
        ip,
        ports: None,
        tuning,
        striped: false,
        stack: ferry_proto::stack::StackSpec::default_net(),
    };
    let addrs = DataMover::open_passive(dtp, req).await?;
    let addr = addrs
        .first()
        .copied()
        .ok_or(ferry_dtp::DtpError::NoDataChannel)?;
    Ok(Command::port_or_eprt(HostPort(addr)))
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
