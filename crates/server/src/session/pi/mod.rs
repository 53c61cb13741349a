//! The server PI as a state machine, with no sockets, no clock and no storage calls inside:
//! control lines go in, replies and requests come out. A request (log this user in, open a
//! passive listener, make a storage call, run a transfer) is carried out by the driver
//! (`session/driver.rs`), which hands the answer back through the matching `*_done` method,
//! and those replies come out in turn. Protocol tests drive it in memory (`pi/tests.rs`).

mod data_setup;
mod files;
mod login;
mod settings;
pub(crate) mod stacks;
#[cfg(test)]
mod tests;
mod transfer;

pub(crate) use settings::Settings;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

use ferry_dtp::{DtpError, PassiveRequest};
use ferry_proto::{Command, CommandError, Reply};
use ferry_storage::{StorageError, VirtualPath};

use crate::daemon::ServerContext;

pub(crate) use files::{Answer, StorageCall};
pub(crate) use login::{LoginKind, LoginRequest};
pub(crate) use transfer::TransferRun;

/// Consecutive unparseable lines after which a connection is dropped.
const MAX_BAD_LINES: u32 = 32;

/// What the PI asks of its driver.
pub(crate) enum Request {
    /// Check a login and set up the session's storage and data mover; answer with
    /// [`Pi::login_done`].
    Login(LoginRequest),
    /// Open passive listeners; answer with [`Pi::passive_done`].
    OpenPassive(PassiveRequest),
    /// Use these endpoints for the next transfer; answer with [`Pi::active_done`].
    SetActive(Vec<SocketAddr>),
    /// Drop cached data connections (a buffer or security change invalidates them). No answer.
    ForgetCache,
    /// The session chose this disk stack (`SITE SETDISKSTACK`), its data channels having this
    /// DCAU and PROT: the mover lets the stack's drivers start what they can before a transfer
    /// (a forwarder logs in to its children). No answer.
    PrepareDiskStack(ferry_proto::stack::StackSpec, ferry_dtp::ChannelSecurity),
    /// Run a call on the session's storage; answer with [`Pi::storage_done`].
    Storage(StorageCall),
    /// Run a transfer, reporting [`Pi::transfer_started`], its events ([`Pi::transfer_event`])
    /// and its end ([`Pi::transfer_done`]).
    Transfer(Box<TransferRun>),
    /// Say how the server is doing; answer with [`Pi::status_done`].
    Status,
}

/// The server-wide figures `SITE STATUS` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServerStatus {
    /// Seconds since the server started.
    pub(crate) uptime_s: u64,
    /// Control connections open now, and the most allowed.
    pub(crate) sessions: usize,
    pub(crate) sessions_max: usize,
    /// Transfers running now, and started since the server did.
    pub(crate) transfers_running: usize,
    pub(crate) transfers_started: u64,
}

/// The longest the reply to `SITE SETDISKSTACK` waits for what the stack's drivers prepare
/// ([`ferry_dtp::disk_stack::Ready`]): a forwarding tree's children logging in, level by
/// level, each a few round trips.
pub(crate) const PREPARE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Request {
    /// Whether replies held for a pipeline may wait for this request: storage calls and
    /// requests answered at once, not a login, a data connection or a transfer.
    pub(crate) fn is_quick(&self) -> bool {
        matches!(
            self,
            Request::Storage(_) | Request::ForgetCache | Request::Status
        )
    }
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Request::Login(l) => write!(f, "Login({})", l.name),
            Request::OpenPassive(p) => write!(f, "OpenPassive({p:?})"),
            Request::SetActive(a) => write!(f, "SetActive({a:?})"),
            Request::ForgetCache => f.write_str("ForgetCache"),
            Request::PrepareDiskStack(s, _) => write!(f, "PrepareDiskStack({s})"),
            Request::Storage(_) => f.write_str("Storage(..)"),
            Request::Transfer(t) => write!(f, "Transfer({} {})", t.verb, t.desc.path),
            Request::Status => f.write_str("Status"),
        }
    }
}

/// What comes out of the PI, in order.
#[derive(Debug)]
pub(crate) enum Output {
    /// Send this reply.
    Reply(Reply),
    /// Protect the session from the next line on (the 235 that ends GSI login is out).
    Protect(Box<ferry_gsi::SecurityContext>),
    /// Carry this out.
    Request(Request),
    /// Close the control connection.
    Close,
}

/// Where a login stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LoginState {
    /// Nobody yet.
    None,
    /// The driver is checking this login.
    Checking(String),
    /// Logged in.
    In {
        /// User name.
        name: String,
        /// Writes are refused.
        read_only: bool,
    },
}

/// A request the PI waits on: no other command is taken until it is answered.
#[derive(Debug)]
enum Pending {
    Login,
    Passive(data_setup::PassiveKind, std::net::IpAddr),
    Active(Vec<SocketAddr>),
    Storage(files::Then),
    Transfer(transfer::Running),
}

/// What a line that arrives during a transfer does.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Interrupt {
    /// Stop the transfer (ABOR).
    Abort,
    /// Nothing for the transfer: the line waits its turn (the driver queues it).
    Later,
    /// Answered at once (STAT); the reply is in the output.
    Answered,
}

/// The PI of one control connection.
pub(crate) struct Pi {
    ctx: Arc<ServerContext>,
    pub(crate) peer: SocketAddr,
    local: SocketAddr,
    pub(crate) settings: Settings,
    pub(crate) login: LoginState,
    /// `USER` given, waiting for `PASS`.
    user: Option<String>,
    rename_from: Option<VirtualPath>,
    symlink_from: Option<String>,
    /// AUTH GSSAPI accepted and ADAT tokens under way.
    gss: Option<Box<ferry_gsi::SecurityContext>>,
    /// The verified GSI identity once the security exchange is done.
    gsi_identity: Option<String>,
    /// The credential the client delegated, for data channels.
    delegated: Option<ferry_gsi::Credential>,
    /// The local account the grid-mapfile gave at USER, waiting for PASS.
    gsi_user: Option<String>,
    /// `SITE TASKID`: the client's name for its task, recorded with each transfer.
    pub(crate) task_id: Option<String>,
    /// What the kernel knew of the last transfer's data connections (`SITE TCPINFO`).
    last_tcp: Option<ferry_net::TcpStats>,
    pending: Option<Pending>,
    bad_lines: u32,
    closed: bool,
    out: VecDeque<Output>,
}

impl std::fmt::Debug for Pi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pi")
            .field("peer", &self.peer)
            .field("login", &self.login)
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

impl Pi {
    /// A new session from `peer` that arrived at `local`; its banner is the first output.
    pub(crate) fn new(ctx: Arc<ServerContext>, peer: SocketAddr, local: SocketAddr) -> Pi {
        let banner = match &ctx.config.banner {
            Some(b) => b.clone(),
            None => format!("ferry GridFTP Server {} ready.", crate::VERSION),
        };
        let mut pi = Pi {
            ctx,
            peer,
            local,
            settings: Settings::default(),
            login: LoginState::None,
            user: None,
            rename_from: None,
            symlink_from: None,
            gss: None,
            gsi_identity: None,
            delegated: None,
            gsi_user: None,
            task_id: None,
            last_tcp: None,
            pending: None,
            bad_lines: 0,
            closed: false,
            out: VecDeque::new(),
        };
        pi.settings.net_stack = pi.default_stack(stacks::StackKind::Net);
        pi.reply(220, banner);
        pi
    }

    /// The next output, in order.
    pub(crate) fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// Whether the session has a logged-in user (the driver's idle timeout applies, not the
    /// login timeout).
    pub(crate) fn is_logged_in(&self) -> bool {
        matches!(self.login, LoginState::In { .. })
    }

    /// The user name for logs.
    pub(crate) fn user_name(&self) -> &str {
        match &self.login {
            LoginState::In { name, .. } => name,
            _ => "-",
        }
    }

    /// A line too long to be a command.
    pub(crate) fn handle_too_long(&mut self) {
        self.reply(500, "Command line too long.");
        self.bad_line();
    }

    /// One control line (Telnet commands already removed, GSI already unwrapped).
    pub(crate) fn handle_line(&mut self, line: &[u8]) {
        if self.closed || self.pending.is_some() {
            // The driver holds lines until the PI is ready; one here is a driver bug, and
            // losing it silently would shift every later reply.
            self.reply(
                503,
                "Command received before the previous one was answered.",
            );
            return;
        }
        if line == crate::gsi::UNPROTECTED {
            self.reply(
                533,
                "Command protection level denied: send commands wrapped (ENC/MIC).",
            );
            return self.bad_line();
        }
        let cmd = match Command::parse(line) {
            Ok(c) => c,
            Err(e) => {
                self.send(command_error_reply(&e));
                return self.bad_line();
            }
        };
        self.bad_lines = 0;
        tracing::debug!(peer = %self.peer, "command {}", redact(&cmd));
        self.execute(cmd);
    }

    /// The driver's timer ran out (login or idle): 421 and close.
    pub(crate) fn timed_out(&mut self) {
        let why = if self.is_logged_in() {
            "Idle timeout"
        } else {
            "Login timeout"
        };
        self.reply(421, format!("{why}; closing control connection."));
        self.close();
    }

    fn bad_line(&mut self) {
        self.bad_lines += 1;
        if self.bad_lines >= MAX_BAD_LINES {
            // The reply to this line goes first, then the 421.
            self.out.push_back(Output::Reply(Reply::new(
                421,
                "Too many bad commands; closing control connection.",
            )));
            self.close();
        }
    }

    fn execute(&mut self, cmd: Command) {
        // A GSI-only server talks to nobody unauthenticated (as Globus: even FEAT gets 530).
        let before_gsi = self.gsi_only() && self.gsi_identity.is_none();
        if before_gsi && !matches!(cmd, Command::Auth(_) | Command::Adat(_) | Command::Quit) {
            return self.reply(530, "Must perform GSSAPI authentication.");
        }
        match cmd {
            Command::User(name) => return self.cmd_user(name),
            Command::Pass(pw) => return self.cmd_pass(pw),
            Command::Quit => {
                self.reply(221, "Goodbye.");
                return self.close();
            }
            Command::Feat => {
                let tcp = self.ctx.config.dc_whitelist.iter().any(|d| d == "tcp");
                let (cc, autotune) = if tcp {
                    (
                        super::text::offered_congestion(),
                        super::text::autotune_max(),
                    )
                } else {
                    ("", "")
                };
                let multicast = self
                    .ctx
                    .config
                    .fs_whitelist
                    .iter()
                    .any(|d| d == crate::multicast::NAME);
                let udt = self.ctx.config.dc_whitelist.iter().any(|d| d == "udt");
                return self.send(super::text::feat(cc, autotune, multicast, udt));
            }
            Command::Help(topic) => return self.send(super::text::help(topic.as_deref())),
            Command::Noop => return self.reply(200, "NOOP command successful."),
            Command::Syst => return self.reply(215, "UNIX Type: L8"),
            Command::Auth(mech) => return self.cmd_auth(&mech),
            Command::Adat(token) => return self.cmd_adat(&token),
            Command::Opts(ferry_proto::opts::Opts::Utf8(_)) => {
                return self.reply(200, "UTF8 mode is always on.")
            }
            Command::Lang(_) => return self.reply(200, "lang set to EN."),
            _ => {}
        }
        if !self.is_logged_in() {
            return self.reply(530, "Please login with USER and PASS.");
        }
        match cmd {
            Command::Retr(_)
            | Command::Stor(_)
            | Command::Stou(_)
            | Command::Appe(_)
            | Command::Eret(_)
            | Command::Esto(_)
            | Command::List(_)
            | Command::Nlst(_)
            | Command::Mlsd(_) => self.cmd_transfer(cmd),
            Command::Stat(None) => self.cmd_status(),
            Command::Pasv
            | Command::Epsv(_)
            | Command::Spas(_)
            | Command::Port(_)
            | Command::Eprt(_)
            | Command::Spor(_) => self.cmd_data_setup(cmd),
            Command::Site(site) => self.cmd_site(site),
            other => {
                if let Err(other) = self.cmd_setting(other) {
                    self.cmd_file(other);
                }
            }
        }
    }

    /// `STAT`: the server's status; a striped frontend lists its data nodes and which of them
    /// did not answer when last tried.
    fn cmd_status(&mut self) {
        let Some(nodes) = self.ctx.nodes.clone() else {
            return self.reply(212, "GridFTP server status.");
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
        self.send(Reply::multi(212, lines));
    }

    /// Whether this server logs in with GSI only (no anonymous or password logins).
    fn gsi_only(&self) -> bool {
        let c = &self.ctx.config;
        self.ctx.gsi.is_some() && !c.anonymous && c.password_file.is_none()
    }

    fn reply(&mut self, code: u16, text: impl Into<String>) {
        self.send(Reply::new(code, text));
    }

    fn send(&mut self, reply: Reply) {
        self.out.push_back(Output::Reply(reply));
    }

    fn request(&mut self, r: Request) {
        self.out.push_back(Output::Request(r));
    }

    fn close(&mut self) {
        if !self.closed {
            self.closed = true;
            self.out.push_back(Output::Close);
        }
    }

    /// Resolves a client path against the working directory.
    fn resolve(&self, path: &str) -> Result<VirtualPath, StorageError> {
        VirtualPath::resolve(&self.settings.cwd, path)
    }

    fn forget_cached_channel(&mut self) {
        if self.is_logged_in() {
            self.request(Request::ForgetCache);
        }
    }

    /// The reply for a storage error.
    fn storage_error(&mut self, e: &StorageError) {
        self.reply(e.reply_code(), e.to_string());
    }

    /// The description a DTP error on a data-setup request gets.
    fn dtp_error(&mut self, e: &DtpError) {
        self.reply(e.reply_code(), e.to_string());
    }
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
