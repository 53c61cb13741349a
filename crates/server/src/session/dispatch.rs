//! Command dispatch: login, settings and the control-channel-only commands.

use std::sync::Arc;

use ferry_dtp::{ChannelSetup, Dtp, PassiveRequest};
use ferry_proto::command::{
    Dcau, EpsvArg, Protection, Structure, TransferMode, TransferType, TrevEvent,
};
use ferry_proto::hostport::HostPort;
use ferry_proto::opts::Opts;
use ferry_proto::{Command, CommandError, Reply};

use super::{ControlReader, Login, Session};
use crate::auth::ANONYMOUS_NAMES;

type Io = std::io::Result<()>;

impl Session {
    /// Parses and executes one line; the flag says whether the line was a valid command.
    pub(crate) async fn handle_line(
        &mut self,
        line: &[u8],
        reader: &mut ControlReader,
    ) -> (Io, bool) {
        if line == crate::gsi::UNPROTECTED {
            let text = "Command protection level denied: send commands wrapped (ENC/MIC).";
            return (self.reply(533, text).await, false);
        }
        let cmd = match Command::parse(line) {
            Ok(c) => c,
            Err(e) => return (self.send(&command_error_reply(&e)).await, false),
        };
        tracing::debug!(peer = %self.peer, "command {}", redact(&cmd));
        (self.execute(cmd, reader).await, true)
    }

    async fn execute(&mut self, cmd: Command, reader: &mut ControlReader) -> Io {
        // A GSI-only server talks to nobody unauthenticated (as Globus: even FEAT gets 530).
        let before_gsi = self.gsi_only() && self.gsi_identity.is_none();
        if before_gsi && !matches!(cmd, Command::Auth(_) | Command::Adat(_) | Command::Quit) {
            return self.reply(530, "Must perform GSSAPI authentication.").await;
        }
        match cmd {
            Command::User(name) => return self.cmd_user(name).await,
            Command::Pass(pw) => return Box::pin(self.cmd_pass(pw)).await,
            Command::Quit => {
                self.quit = true;
                return self.reply(221, "Goodbye.").await;
            }
            Command::Feat => return self.send(&super::text::feat()).await,
            Command::Help(topic) => return self.send(&super::text::help(topic.as_deref())).await,
            Command::Noop => return self.reply(200, "NOOP command successful.").await,
            Command::Syst => return self.reply(215, "UNIX Type: L8").await,
            Command::Auth(mech) => return self.cmd_auth(&mech).await,
            Command::Adat(token) => return self.cmd_adat(&token, reader).await,
            Command::Opts(Opts::Utf8(_)) => {
                return self.reply(200, "UTF8 mode is always on.").await
            }
            Command::Lang(_) => return self.reply(200, "lang set to EN.").await,
            _ => {}
        }
        if self.login.is_none() {
            return self.reply(530, "Please login with USER and PASS.").await;
        }
        match cmd {
            Command::Acct(_) => self.reply(202, "ACCT not needed.").await,
            Command::Type(t) => {
                self.transfer_type = t;
                let c = if t == TransferType::Ascii { 'A' } else { 'I' };
                self.reply(200, format!("Type set to {c}.")).await
            }
            Command::Mode(m) => {
                self.mode = m;
                let c = if m == TransferMode::Extended {
                    'E'
                } else {
                    'S'
                };
                self.reply(200, format!("Mode set to {c}.")).await
            }
            Command::Stru(Structure::File) => self.reply(200, "STRU F ok.").await,
            Command::Stru(_) => self.reply(504, "Only STRU F is supported.").await,
            Command::Pasv
            | Command::Port(_)
            | Command::Eprt(_)
            | Command::Spas(_)
            | Command::Spor(_)
                if self.epsv_all =>
            {
                self.reply(
                    501,
                    "EPSV ALL was sent: only EPSV may set up data connections.",
                )
                .await
            }
            Command::Pasv => self.cmd_passive(PassiveKind::Pasv).await,
            Command::Epsv(Some(EpsvArg::All)) => {
                self.epsv_all = true;
                self.reply(200, "EPSV ALL ok.").await
            }
            Command::Epsv(Some(EpsvArg::Protocol(p))) if p != 1 && p != 2 => {
                self.reply(522, "Network protocol not supported, use (1,2).")
                    .await
            }
            Command::Epsv(_) => self.cmd_passive(PassiveKind::Epsv).await,
            Command::Spas(v6) => self.cmd_passive(PassiveKind::Spas { v6 }).await,
            Command::Port(hp) | Command::Eprt(hp) => self.cmd_active(vec![hp]).await,
            Command::Spor(list) => self.cmd_active(list).await,
            Command::Rest(r) => {
                self.restart = Some(r);
                self.reply(
                    350,
                    "Restart Marker OK. Send STORE or RETR to initiate transfer.",
                )
                .await
            }
            Command::Allo(n) => {
                self.allo = Some(n);
                self.reply(200, "ALLO command successful.").await
            }
            Command::Sbuf(n) => {
                let n = clamp_buffer(n);
                self.tuning.send_buffer = Some(n);
                self.tuning.recv_buffer = Some(n);
                self.forget_cached_channel();
                self.reply(200, "SBUF Command Successful.").await
            }
            Command::Opts(o) => self.cmd_opts(o).await,
            Command::Dcau(Dcau::None) => {
                if self.dcau != Dcau::None {
                    self.forget_cached_channel();
                }
                self.dcau = Dcau::None;
                self.reply(200, "DCAU N.").await
            }
            Command::Dcau(d) if self.gsi_identity.is_some() => {
                if self.dcau != d {
                    self.forget_cached_channel();
                }
                let text = match &d {
                    Dcau::Subject(s) => format!("DCAU S {s}."),
                    _ => "DCAU A.".to_string(),
                };
                self.dcau = d;
                self.reply(200, text).await
            }
            Command::Dcau(_) => {
                self.reply(504, "Bad DCAU mode: only DCAU N without GSI.")
                    .await
            }
            Command::Pbsz(n) => {
                self.forget_cached_channel();
                self.reply(200, format!("PBSZ={n}")).await
            }
            Command::Prot(Protection::Clear) => {
                if self.prot != Protection::Clear {
                    self.forget_cached_channel();
                }
                self.prot = Protection::Clear;
                self.reply(200, "Protection level set to C.").await
            }
            Command::Prot(p @ (Protection::Safe | Protection::Private))
                if self.gsi_identity.is_some() =>
            {
                if self.prot != p {
                    self.forget_cached_channel();
                }
                self.prot = p;
                let c = if p == Protection::Safe { 'S' } else { 'P' };
                self.reply(200, format!("Protection level set to {c}."))
                    .await
            }
            Command::Prot(p) => {
                let c = match p {
                    Protection::Safe => 'S',
                    Protection::Confidential => 'E',
                    Protection::Private => 'P',
                    Protection::Clear => 'C',
                };
                self.reply(
                    536,
                    format!("{c} protection level not supported without GSI."),
                )
                .await
            }
            Command::Trev { event, interval } => {
                match event {
                    TrevEvent::Restart => self.restart_interval_s = interval,
                    TrevEvent::Perf => self.perf_interval_s = interval,
                }
                self.reply(200, "Command Successful.").await
            }
            Command::Abor => {
                self.reply(226, "Abort successful; no transfer in progress.")
                    .await
            }
            Command::Stat(None) => self.cmd_status().await,
            Command::Retr(_)
            | Command::Stor(_)
            | Command::Stou(_)
            | Command::Appe(_)
            | Command::Eret(_)
            | Command::Esto(_)
            | Command::List(_)
            | Command::Nlst(_)
            | Command::Mlsd(_) => Box::pin(self.cmd_transfer(cmd, reader)).await,
            other => Box::pin(self.cmd_file(other)).await,
        }
    }

    /// Whether this server logs in with GSI only (no anonymous or password logins).
    fn gsi_only(&self) -> bool {
        let c = &self.ctx.config;
        self.ctx.gsi.is_some() && !c.anonymous && c.password_file.is_none()
    }

    async fn cmd_auth(&mut self, mechanism: &str) -> Io {
        let Some(gsi) = self.ctx.gsi.as_ref() else {
            return self
                .reply(504, "GSI security is not enabled on this server.")
                .await;
        };
        if !mechanism.eq_ignore_ascii_case("GSSAPI") {
            return self.reply(504, "Unknown authentication type.").await;
        }
        if self.gsi_identity.is_some() || self.login.is_some() {
            return self.reply(503, "Already authenticated.").await;
        }
        match gsi.acceptor() {
            Ok(ctx) => {
                self.gss = Some(Box::new(ctx));
                self.reply(334, "Using authentication type; ADAT must follow.")
                    .await
            }
            Err(e) => self.reply(431, format!("Cannot start GSSAPI: {e}")).await,
        }
    }

    async fn cmd_adat(&mut self, token: &str, reader: &mut ControlReader) -> Io {
        use base64::Engine;
        let Some(mut gss) = self.gss.take() else {
            return self.reply(503, "Send AUTH GSSAPI first.").await;
        };
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(token.trim()) else {
            return self.reply(501, "ADAT token is not base64.").await;
        };
        let b64 = |t: &[u8]| base64::engine::general_purpose::STANDARD.encode(t);
        match gss.step(&bytes) {
            Ok(ferry_gsi::Step::Continue(out)) => {
                self.gss = Some(gss);
                self.reply(335, format!("ADAT={}", b64(&out))).await
            }
            Ok(ferry_gsi::Step::Done(last)) => {
                let identity = gss.peer().map(|p| p.identity().to_owned());
                let Some(identity) = identity else {
                    return self
                        .reply(535, "GSSAPI authentication failed: no peer.")
                        .await;
                };
                tracing::info!(peer = %self.peer, dn = %identity, tls = %gss.describe(), "GSSAPI authentication");
                self.delegated = gss.take_delegated();
                self.gsi_identity = Some(identity);
                // After a GSI login data channels are authenticated unless the client says
                // DCAU N, as with Globus.
                self.dcau = Dcau::Self_;
                // The 235 goes out in clear; everything after it is wrapped.
                match last {
                    Some(t) => self.reply(235, format!("ADAT={}", b64(&t))).await?,
                    None => self.reply(235, "GSSAPI Authentication successful.").await?,
                }
                self.protect(reader, *gss);
                Ok(())
            }
            Ok(ferry_gsi::Step::NeedMore) => {
                self.reply(535, "GSSAPI authentication failed: incomplete token.")
                    .await
            }
            Err(e) => {
                tracing::info!(peer = %self.peer, "GSSAPI authentication refused: {e}");
                self.reply(530, format!("GSSAPI authentication failed: {e}"))
                    .await
            }
        }
    }

    async fn cmd_user(&mut self, name: String) -> Io {
        if self.login.is_some() {
            return self.reply(503, "You are already logged in.").await;
        }
        if let (Some(identity), Some(gsi)) = (self.gsi_identity.clone(), self.ctx.gsi.as_ref()) {
            let requested = (name != ":globus-mapping:").then_some(name.as_str());
            return match gsi.authorizer.authorize(&identity, requested) {
                Ok(local) => {
                    let text = format!("Password required for {local}.");
                    self.gsi_user = Some(local);
                    self.reply(331, text).await
                }
                Err(e) => {
                    tracing::info!(peer = %self.peer, dn = %identity, "not authorized: {e}");
                    self.reply(530, format!("Login incorrect. : {e}")).await
                }
            };
        }
        let anonymous = self.ctx.config.anonymous && ANONYMOUS_NAMES.contains(&name.as_str());
        let text = if anonymous {
            "Guest login ok, send your email address as password.".to_string()
        } else {
            format!("Password required for {name}.")
        };
        self.user = Some(name);
        self.reply(331, text).await
    }

    async fn cmd_pass(&mut self, password: String) -> Io {
        if self.login.is_some() {
            return self.reply(503, "You are already logged in.").await;
        }
        if self.gsi_identity.is_some() {
            let Some(name) = self.gsi_user.take() else {
                return self.reply(503, "Login with USER first.").await;
            };
            return self.logged_in(name, false).await;
        }
        let Some(name) = self.user.take() else {
            return self.reply(503, "Login with USER first.").await;
        };
        let cfg = &self.ctx.config;
        let (ok, read_only) = if cfg.anonymous && ANONYMOUS_NAMES.contains(&name.as_str()) {
            (true, !cfg.anonymous_write)
        } else {
            let db = self.ctx.passwords.clone();
            let (n, p) = (name.clone(), password);
            let ok = tokio::task::spawn_blocking(move || db.verify(&n, &p))
                .await
                .unwrap_or(false);
            (ok, false)
        };
        if !ok {
            tracing::info!(peer = %self.peer, user = %name, "login refused");
            // Slow down guessing without holding a thread.
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            return self.reply(530, "Login incorrect.").await;
        }
        self.logged_in(name, read_only).await
    }

    /// Starts a logged-in session for `name`.
    async fn logged_in(&mut self, name: String, read_only: bool) -> Io {
        let storage = if read_only {
            Arc::clone(&self.ctx.storage_ro)
        } else {
            Arc::clone(&self.ctx.storage_rw)
        };
        // On a root server a GSI session works as its mapped account from here on, and an
        // anonymous one as `anonymous-user` when that is set: every file operation runs on
        // that account's identity thread (ferry_storage::identity).
        let cfg = &self.ctx.config;
        let account = if self.gsi_identity.is_some() {
            cfg.run_as_user.then(|| name.clone())
        } else if cfg.anonymous && ANONYMOUS_NAMES.contains(&name.as_str()) {
            cfg.anonymous_user.clone()
        } else {
            None
        };
        let storage = match crate::auth::storage_as(storage, account.clone()).await {
            Ok(s) => s,
            Err(e) => {
                let account = account.unwrap_or_default();
                tracing::warn!(peer = %self.peer, user = %name, account = %account, error = %e, "cannot run as the account");
                return self
                    .reply(
                        530,
                        format!("Login incorrect. : cannot run as {account}: {e}"),
                    )
                    .await;
            }
        };
        let dtp = match &self.ctx.nodes {
            Some(nodes) => {
                let delegated_pem = match &self.delegated {
                    Some(c) => match c.to_proxy_pem() {
                        Ok(p) => Some(String::from_utf8_lossy(&p).into_owned()),
                        Err(e) => {
                            tracing::warn!(peer = %self.peer, error = %e, "cannot pass the delegated credential to data nodes");
                            None
                        }
                    },
                    None => None,
                };
                let login = crate::striped::frontend::NodeLogin {
                    account: account.clone(),
                    read_only,
                    delegated_pem,
                };
                Box::new(crate::striped::frontend::RemoteDtp::new(
                    Arc::clone(nodes),
                    login,
                    Arc::clone(&storage),
                )) as Box<dyn ferry_dtp::DataMover>
            }
            None => {
                let mut dtp = Dtp::new(Arc::clone(&storage), Arc::clone(&self.ctx.pool), read_only);
                dtp.poll_lone_streams(Some(Arc::clone(&self.ctx.poll_budget)));
                dtp.use_disk_stacks(Arc::clone(&self.ctx.disk_stacks));
                dtp.use_transports(Arc::clone(&self.ctx.transports));
                if self.gsi_identity.is_some() {
                    dtp.set_security(self.data_security());
                }
                Box::new(dtp)
            }
        };
        tracing::info!(peer = %self.peer, user = %name, read_only, "logged in");
        self.login = Some(Login {
            name: name.clone(),
            storage,
            read_only,
            dtp,
        });
        self.reply(230, format!("User {name} logged in.")).await
    }

    /// `STAT`: the server's status; a striped frontend lists its data nodes and which of them
    /// did not answer when last tried.
    async fn cmd_status(&mut self) -> Io {
        let Some(nodes) = self.ctx.nodes.clone() else {
            return self.reply(212, "GridFTP server status.").await;
        };
        let missing = nodes.missing();
        let mut lines = vec![format!(
            "GridFTP server status: striped frontend, {} data nodes.",
            nodes.names().len()
        )];
        for n in nodes.names() {
            match missing.iter().find(|(m, _)| m == n) {
                Some((_, why)) => lines.push(format!(" data node {n}: not reachable ({why})")),
                None => lines.push(format!(" data node {n}: ok")),
            }
        }
        lines.push("End of status.".into());
        self.send(&Reply::multi(212, lines)).await
    }

    async fn cmd_opts(&mut self, opts: Opts) -> Io {
        match opts {
            Opts::Retr(r) => {
                if let Some(p) = r.parallelism {
                    self.parallelism = p.clamp(1, 64);
                }
                if let Some(m) = r.markers {
                    self.retr_markers_s = Some(m);
                }
                match (r.layout, r.block_size) {
                    (Some(ferry_proto::opts::StripeLayout::Partitioned), _) => {
                        self.layout = ferry_dtp::LayoutSpec::Partitioned;
                    }
                    (Some(ferry_proto::opts::StripeLayout::Blocked), size) => {
                        self.layout = ferry_dtp::LayoutSpec::Blocked(
                            size.unwrap_or(ferry_proto::stripe::DEFAULT_STRIPE_BLOCK)
                                .max(1),
                        );
                    }
                    (None, Some(size)) => {
                        if let ferry_dtp::LayoutSpec::Blocked(_) = self.layout {
                            self.layout = ferry_dtp::LayoutSpec::Blocked(size.max(1));
                        }
                    }
                    (None, None) => {}
                }
                self.reply(200, "OPTS Command Successful.").await
            }
            Opts::Cksm { .. } => self.reply(200, "OPTS Command Successful.").await,
            Opts::Mlst(facts) => {
                self.mlst_facts = facts;
                let shown = if self.mlst_facts.is_empty() {
                    String::new()
                } else {
                    self.mlst_facts.join(";") + ";"
                };
                self.reply(200, format!("MLST OPTS {shown}")).await
            }
            Opts::AllowDelayed { allow: false, .. } => {
                self.reply(200, "OPTS Command Successful.").await
            }
            _ => self.reply(500, "OPTS failed.").await,
        }
    }

    async fn cmd_passive(&mut self, kind: PassiveKind) -> Io {
        let ip = match self.local.ip() {
            std::net::IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .map(std::net::IpAddr::V4)
                .unwrap_or(self.local.ip()),
            v4 => v4,
        };
        let ip = self.ctx.config.data_interface.unwrap_or(ip);
        if matches!(kind, PassiveKind::Pasv) && ip.is_ipv6() {
            return self
                .reply(522, "Network protocol not supported; use EPSV.")
                .await;
        }
        let (range, tuning) = (self.ctx.config.port_range, self.tuning);
        let Some(login) = self.login.as_mut() else {
            return Ok(());
        };
        let req = PassiveRequest {
            ip,
            ports: range,
            tuning,
            striped: matches!(kind, PassiveKind::Spas { .. }),
            stack: self.net_stack.clone(),
        };
        let addrs = match login.dtp.open_passive(req).await {
            Ok(a) if !a.is_empty() => a,
            Ok(_) => {
                self.channel = None;
                return self.reply(425, "Cannot open passive listener.").await;
            }
            Err(e) => {
                self.channel = None;
                return self.reply(425, e.to_string()).await;
            }
        };
        let addr = addrs[0];
        if matches!(kind, PassiveKind::Pasv) && addr.is_ipv6() {
            return self
                .reply(522, "Network protocol not supported; use EPSV.")
                .await;
        }
        self.channel = Some(ChannelSetup::Passive);
        let hp = HostPort(addr);
        match kind {
            PassiveKind::Pasv => {
                let text = hp.pasv_reply_text().unwrap_or_default();
                self.reply(227, text).await
            }
            PassiveKind::Epsv if addr.ip() != ip => {
                // EPSV names only a port: the client would dial this host, not the node.
                self.channel = None;
                self.reply(
                    425,
                    format!("EPSV cannot name data node {addr}; use SPAS, PASV or PORT."),
                )
                .await
            }
            PassiveKind::Epsv => {
                self.reply(229, HostPort::epsv_reply_text(addr.port()))
                    .await
            }
            PassiveKind::Spas { v6 } => {
                let mut lines = vec!["Entering Striped Passive Mode.".to_string()];
                for a in &addrs {
                    let hp = HostPort(*a);
                    let line = if v6 || a.is_ipv6() {
                        hp.to_eprt_form()
                    } else {
                        hp.to_port_form().unwrap_or_else(|| hp.to_eprt_form())
                    };
                    lines.push(format!(" {line}"));
                }
                lines.push("End".into());
                self.send(&Reply::multi(229, lines)).await
            }
        }
    }

    async fn cmd_active(&mut self, list: Vec<HostPort>) -> Io {
        if list.is_empty() {
            return self.reply(501, "Illegal PORT command.").await;
        }
        if let Some(login) = self.login.as_mut() {
            let endpoints: Vec<std::net::SocketAddr> = list.iter().map(|h| h.0).collect();
            if let Err(e) = login.dtp.set_active(&endpoints).await {
                self.channel = None;
                return self.reply(e.reply_code(), e.to_string()).await;
            }
        }
        self.channel = Some(ChannelSetup::Active(list.iter().map(|h| h.0).collect()));
        self.reply(200, "PORT Command successful.").await
    }

    /// Drops cached data connections (a security or buffer change invalidates them).
    /// The credential this session's data connections authenticate with: the one the client
    /// delegated, else (as Globus) the host credential, under which DCAU A fails unless the
    /// client is the host itself.
    fn data_security(&self) -> Option<Arc<ferry_gsi::DataSecurity>> {
        let gsi = self.ctx.gsi.as_ref()?;
        let credential = self
            .delegated
            .clone()
            .unwrap_or_else(|| gsi.credential().clone());
        match ferry_gsi::DataSecurity::new(credential, gsi.trust()) {
            Ok(s) => Some(Arc::new(s)),
            Err(e) => {
                tracing::warn!(peer = %self.peer, error = %e, "no credential for data channels");
                None
            }
        }
    }

    pub(crate) fn forget_cached_channel(&mut self) {
        if let Some(login) = self.login.as_mut() {
            login.dtp.forget_cache();
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum PassiveKind {
    Pasv,
    Epsv,
    Spas { v6: bool },
}

/// Keeps buffer requests within what a socket option takes.
fn clamp_buffer(n: u64) -> u32 {
    n.clamp(4096, 1 << 30) as u32
}

/// The reply for a line that did not parse.
fn command_error_reply(e: &CommandError) -> Reply {
    let text = match e {
        CommandError::TooLong => "Command line too long.".to_string(),
        CommandError::NotText | CommandError::Malformed => {
            "Syntax error, command unrecognized.".to_string()
        }
        CommandError::Unknown(_) => "Invalid command.".to_string(),
        CommandError::BadArguments { .. } => {
            format!("Syntax error in parameters or arguments: {e}.")
        }
        CommandError::Unsupported { .. } => {
            format!("Command not implemented for that parameter: {e}.")
        }
        _ => format!("{e}."),
    };
    Reply::new(e.reply_code(), text)
}

/// The command for logs, without passwords.
fn redact(cmd: &Command) -> String {
    match cmd {
        Command::Pass(_) => "PASS ****".into(),
        c => c.to_string(),
    }
}
