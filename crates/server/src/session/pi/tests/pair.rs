//! The in-memory harness: a `ClientPi` and the server `Pi` joined through byte buffers, with a
//! fake driver between them.

use std::net::SocketAddr;
use std::sync::Arc;

use ferry_dtp::{DtpError, DtpEvent, TransferDescription, TransferOutcome};
use ferry_gsi::{protect, SecurityContext};
use ferry_proto::command::MAX_COMMAND_LINE;
use ferry_proto::line::{LineEvent, LineFramer};
use ferry_proto::{ClientPi, Reply, ReplyParser};
use ferry_storage::{PosixStorage, Storage};

use crate::daemon::ServerContext;
use crate::session::pi::{Interrupt, LoginKind, Output, Pi, Request};
use crate::ServerConfig;

/// How the fake mover ends the next transfer.
#[derive(Debug, Clone)]
pub(super) enum Script {
    /// Begins, sends these events, and completes.
    Complete(Vec<DtpEvent>),
    /// Fails before it begins (the file cannot be opened, the connection never came).
    FailsBeforeBegin(fn() -> DtpError),
    /// Begins, then the client's next line (its ABOR) arrives while the data moves.
    AbortedByClient,
}

/// A client PI and a server PI joined in memory, with the fake driver between them.
pub(super) struct Pair {
    pub(super) client: ClientPi,
    pub(super) server: Pi,
    pub(super) framer: LineFramer,
    pub(super) storage: Arc<dyn Storage>,
    pub(super) root: tempfile::TempDir,
    /// What the fake mover's listeners are.
    pub(super) passive: Vec<SocketAddr>,
    /// Transfers the server PI asked for.
    pub(super) transfers: Vec<TransferDescription>,
    pub(super) active: Vec<Vec<SocketAddr>>,
    pub(super) forgot: usize,
    /// The disk stacks the PI asked the mover to prepare, with the DCAU/PROT it gave.
    pub(super) prepared: Vec<(ferry_proto::stack::StackSpec, ferry_dtp::ChannelSecurity)>,
    pub(super) script: Script,
    pub(super) closed: bool,
    /// Once GSI login is done: the server's context (replies wrapped, commands unwrapped) and
    /// the client's (commands wrapped, replies unwrapped).
    pub(super) server_gss: Option<SecurityContext>,
    pub(super) client_gss: Option<SecurityContext>,
    /// The client's wire on a protected session, before its replies are opened.
    pub(super) wire: ReplyParser,
    /// The next line goes out unwrapped even on a protected session.
    pub(super) send_clear: bool,
}

impl Pair {
    pub(super) fn new() -> Pair {
        Pair::with(|_| {})
    }

    /// A pair whose server configuration `adjust` changes.
    pub(super) fn with(adjust: impl FnOnce(&mut ServerConfig)) -> Pair {
        let root = tempfile::tempdir().expect("tempdir");
        let mut config = ServerConfig {
            root: root.path().to_path_buf(),
            anonymous: true,
            ..ServerConfig::default()
        };
        adjust(&mut config);
        let ctx = Arc::new(ServerContext::for_tests(config));
        let storage: Arc<dyn Storage> =
            Arc::new(PosixStorage::open(root.path(), false).expect("storage"));
        let peer: SocketAddr = "192.0.2.7:40000".parse().unwrap();
        let local: SocketAddr = "192.0.2.1:2811".parse().unwrap();
        let mut pair = Pair {
            client: ClientPi::new(),
            server: Pi::new(ctx, peer, local),
            framer: LineFramer::new(MAX_COMMAND_LINE),
            storage,
            root,
            passive: vec!["192.0.2.1:50000".parse().unwrap()],
            transfers: Vec::new(),
            active: Vec::new(),
            forgot: 0,
            prepared: Vec::new(),
            script: Script::Complete(Vec::new()),
            closed: false,
            server_gss: None,
            client_gss: None,
            wire: ReplyParser::new(),
            send_clear: false,
        };
        let banner = pair.pump_until_final();
        assert_eq!(banner.last().map(|r| r.code), Some(220));
        pair
    }

    pub(super) fn logged_in() -> Pair {
        Pair::logged_in_with(|_| {})
    }

    /// [`Pair::logged_in`] on a server whose configuration `adjust` changes.
    pub(super) fn logged_in_with(adjust: impl FnOnce(&mut ServerConfig)) -> Pair {
        let mut p = Pair::with(adjust);
        p.expect("USER alice", 331);
        p.expect("PASS right", 230);
        p
    }

    /// Sends a line and returns every reply up to its final one.
    pub(super) fn line(&mut self, line: &str) -> Vec<Reply> {
        self.client.send_line(line);
        self.pump_until_final()
    }

    /// Sends a line and checks the final reply's code.
    pub(super) fn expect(&mut self, line: &str, code: u16) -> Reply {
        let replies = self.line(line);
        let last = replies.last().cloned().expect("a reply");
        assert_eq!(last.code, code, "{line} → {replies:?}");
        last
    }

    pub(super) fn codes(&mut self, line: &str) -> Vec<u16> {
        self.line(line).iter().map(|r| r.code).collect()
    }

    pub(super) fn pump_until_final(&mut self) -> Vec<Reply> {
        let bytes = self.client.poll_transmit();
        match self.client_gss.as_mut() {
            Some(gss) if !self.send_clear => {
                for line in bytes.split_inclusive(|&b| b == b'\n') {
                    let line = line.strip_suffix(b"\r\n").unwrap_or(line);
                    let wrapped = protect::wrap_command(gss, line).expect("wrap a command");
                    self.framer.feed(&wrapped);
                }
            }
            _ => self.framer.feed(&bytes),
        }
        self.send_clear = false;
        let mut replies = Vec::new();
        loop {
            self.drain();
            while let Some(a) = self.client.poll_reply().expect("replies parse") {
                let last = a.last;
                replies.push(a.reply);
                if last {
                    return replies;
                }
            }
            if self.closed {
                return replies;
            }
            match self.framer.next_event() {
                Some(LineEvent::Line(l)) => match self.server_gss.as_mut() {
                    None => self.server.handle_line(&l),
                    Some(gss) => match protect::unwrap_command(gss, &l) {
                        Some(plain) => {
                            let plain = plain.strip_suffix(b"\r\n").unwrap_or(&plain).to_vec();
                            self.server.handle_line(&plain)
                        }
                        None => self.server.handle_line(crate::gsi::UNPROTECTED),
                    },
                },
                Some(LineEvent::TooLong) => self.server.handle_too_long(),
                None => panic!("no final reply; so far {replies:?}"),
            }
        }
    }

    /// Carries out the server PI's requests the way the fake driver does.
    pub(super) fn drain(&mut self) {
        while let Some(out) = self.server.poll_output() {
            match out {
                Output::Reply(r) => {
                    let bytes = match self.server_gss.as_mut() {
                        Some(gss) => protect::wrap_reply(gss, &r.to_bytes()).expect("wrap"),
                        None => r.to_bytes(),
                    };
                    self.client_receives(&bytes);
                }
                Output::Protect(ctx) => self.server_gss = Some(*ctx),
                Output::Close => self.closed = true,
                Output::Request(req) => self.answer(req),
            }
        }
    }

    /// What the client does with bytes off the wire: opens protected replies once it has a
    /// context.
    pub(super) fn client_receives(&mut self, bytes: &[u8]) {
        let Some(gss) = self.client_gss.as_mut() else {
            return self.client.feed(bytes);
        };
        self.wire.feed(bytes);
        while let Some(raw) = self.wire.next_reply().expect("wire replies parse") {
            if !protect::is_protected_reply(raw.code) {
                self.client.feed(&raw.to_bytes());
                continue;
            }
            for line in &raw.lines {
                let plain = protect::unwrap_reply_line(gss, line).expect("open a reply");
                self.client.feed(&plain);
            }
        }
    }

    pub(super) fn answer(&mut self, req: Request) {
        match req {
            Request::Login(l) => {
                let r = match l.kind {
                    LoginKind::Password(pw) if l.name == "alice" && pw == "right" => Ok(false),
                    LoginKind::Anonymous => Ok(true),
                    LoginKind::Gsi { .. } => Ok(false),
                    _ => Err(Reply::new(530, "Login incorrect.")),
                };
                self.server.login_done(r);
            }
            Request::OpenPassive(p) => {
                let addrs = if p.striped {
                    self.passive.clone()
                } else {
                    self.passive[..1].to_vec()
                };
                self.server.passive_done(Ok(addrs));
            }
            Request::SetActive(a) => {
                self.active.push(a);
                self.server.active_done(Ok(()));
            }
            Request::ForgetCache => self.forgot += 1,
            Request::PrepareDiskStack(stack, security) => self.prepared.push((stack, security)),
            Request::Storage(mut call) => {
                let r = match call.at_hand(&*self.storage) {
                    Some(answer) => Ok(answer),
                    None => call.run(&*self.storage),
                };
                self.server.storage_done(r);
            }
            Request::Transfer(run) => {
                self.transfers.push(run.desc.clone());
                self.server.transfer_started(false);
                let outcome = TransferOutcome {
                    bytes: 1000,
                    streams: run.desc.parallelism,
                    duration: std::time::Duration::ZERO,
                    reused: false,
                    checksums: Vec::new(),
                    checksum_read_back: 0,
                    tcp: None,
                };
                match self.script.clone() {
                    Script::Complete(events) => {
                        self.server.transfer_event(&DtpEvent::Begin);
                        for ev in &events {
                            self.server.transfer_event(ev);
                        }
                        self.server.transfer_done(&Ok(outcome), false, "");
                    }
                    Script::FailsBeforeBegin(e) => {
                        self.server.transfer_done(&Err(e()), false, "");
                    }
                    Script::AbortedByClient => {
                        self.server.transfer_event(&DtpEvent::Begin);
                        let Some(LineEvent::Line(abor)) = self.framer.next_event() else {
                            panic!("the test sends ABOR behind the transfer command");
                        };
                        assert_eq!(self.server.during_transfer(&abor), Interrupt::Abort);
                        let stopped = Err(DtpError::Connection("aborted by client".into()));
                        self.server.transfer_done(&stopped, true, "");
                    }
                }
            }
            Request::Status => self.server.status_done(crate::session::pi::ServerStatus {
                uptime_s: 42,
                sessions: 3,
                sessions_max: 100,
                transfers_running: 1,
                transfers_started: 7,
            }),
        }
    }

    pub(super) fn last_transfer(&self) -> &TransferDescription {
        self.transfers.last().expect("a transfer ran")
    }
}
