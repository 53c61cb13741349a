//! Protocol tests in memory: the client PI (`ferry_proto::ClientPi`) talks to the server PI
//! through byte buffers, and a fake driver answers the server PI's requests — logins from a
//! fixed table, listeners at fixed addresses, storage calls on a temporary root, transfers as
//! the test scripts them. No sockets and no clock: each test runs in milliseconds.
//!
//! Past 400 lines on purpose: the harness and the tests it serves read together.

use std::net::SocketAddr;
use std::sync::Arc;

use ferry_dtp::{
    ChannelSetup, Direction, DtpError, DtpEvent, TransferDescription, TransferOutcome,
};
use ferry_gsi::{protect, SecurityContext};
use ferry_proto::command::{TransferMode, MAX_COMMAND_LINE};
use ferry_proto::line::{LineEvent, LineFramer};
use ferry_proto::{ClientPi, RangeSet, Reply, ReplyParser};
use ferry_storage::{PosixStorage, Storage, StorageError};

use super::{Interrupt, LoginKind, Output, Pi, Request};
use crate::daemon::ServerContext;
use crate::ServerConfig;

/// How the fake mover ends the next transfer.
#[derive(Debug, Clone)]
enum Script {
    /// Begins, sends these events, and completes.
    Complete(Vec<DtpEvent>),
    /// Fails before it begins (the file cannot be opened, the connection never came).
    FailsBeforeBegin(fn() -> DtpError),
    /// Begins, then the client's next line (its ABOR) arrives while the data moves.
    AbortedByClient,
}

/// A client PI and a server PI joined in memory, with the fake driver between them.
struct Pair {
    client: ClientPi,
    server: Pi,
    framer: LineFramer,
    storage: Arc<dyn Storage>,
    root: tempfile::TempDir,
    /// What the fake mover's listeners are.
    passive: Vec<SocketAddr>,
    /// Transfers the server PI asked for.
    transfers: Vec<TransferDescription>,
    active: Vec<Vec<SocketAddr>>,
    forgot: usize,
    script: Script,
    closed: bool,
    /// Once GSI login is done: the server's context (replies wrapped, commands unwrapped) and
    /// the client's (commands wrapped, replies unwrapped).
    server_gss: Option<SecurityContext>,
    client_gss: Option<SecurityContext>,
    /// The client's wire on a protected session, before its replies are opened.
    wire: ReplyParser,
    /// The next line goes out unwrapped even on a protected session.
    send_clear: bool,
}

impl Pair {
    fn new() -> Pair {
        Pair::with(|_| {})
    }

    /// A pair whose server configuration `adjust` changes.
    fn with(adjust: impl FnOnce(&mut ServerConfig)) -> Pair {
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

    fn logged_in() -> Pair {
        let mut p = Pair::new();
        p.expect("USER alice", 331);
        p.expect("PASS right", 230);
        p
    }

    /// Sends a line and returns every reply up to its final one.
    fn line(&mut self, line: &str) -> Vec<Reply> {
        self.client.send_line(line);
        self.pump_until_final()
    }

    /// Sends a line and checks the final reply's code.
    fn expect(&mut self, line: &str, code: u16) -> Reply {
        let replies = self.line(line);
        let last = replies.last().cloned().expect("a reply");
        assert_eq!(last.code, code, "{line} → {replies:?}");
        last
    }

    fn codes(&mut self, line: &str) -> Vec<u16> {
        self.line(line).iter().map(|r| r.code).collect()
    }

    fn pump_until_final(&mut self) -> Vec<Reply> {
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
    fn drain(&mut self) {
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
    fn client_receives(&mut self, bytes: &[u8]) {
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

    fn answer(&mut self, req: Request) {
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
            Request::Storage(call) => {
                let r = call(&*self.storage);
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
        }
    }

    fn last_transfer(&self) -> &TransferDescription {
        self.transfers.last().expect("a transfer ran")
    }
}

#[test]
fn a_password_login_an_anonymous_login_and_a_wrong_password() {
    let mut p = Pair::new();
    p.expect("PWD", 530);
    p.expect("USER alice", 331);
    p.expect("PASS wrong", 530);
    p.expect("PASS right", 503);
    p.expect("USER alice", 331);
    let r = p.expect("PASS right", 230);
    assert_eq!(r.text(), "User alice logged in.");
    p.expect("USER bob", 503);

    let mut anon = Pair::new();
    let r = anon.expect("USER anonymous", 331);
    assert!(r.text().contains("Guest login ok"), "{r:?}");
    anon.expect("PASS me@example.org", 230);
    anon.expect("TYPE I", 200);
    anon.expect("PASV", 227);
    anon.expect("STOR up.bin", 550);
    assert!(
        anon.transfers.is_empty(),
        "a read-only login stores nothing"
    );
}

#[test]
fn feat_names_the_gridftp_extensions_and_opts_set_what_the_next_transfer_uses() {
    let mut p = Pair::new();
    let feat = p.line("FEAT");
    let feat = feat.last().unwrap();
    assert_eq!(feat.code, 211);
    for ext in [
        " PARALLEL",
        " ERET",
        " ESTO",
        " SPAS",
        " SPOR",
        " DCAU",
        " MLST ",
    ] {
        assert!(
            feat.lines.iter().any(|l| l.starts_with(ext)),
            "FEAT lacks {ext}: {feat:?}"
        );
    }
    p.expect("OPTS UTF8 ON", 200);
    p.expect("USER alice", 331);
    p.expect("PASS right", 230);
    p.expect("OPTS RETR Parallelism=8,8,8;", 200);
    p.expect("OPTS RETR StripeLayout=Blocked;BlockSize=1048576;", 200);
    p.expect("OPTS MLST Type;Size;", 200);
    p.expect("OPTS RETR Bogus", 501);
    p.expect("PASV", 227);
    p.expect("RETR f", 226);
    let d = p.last_transfer();
    assert_eq!(d.parallelism, 8);
    assert_eq!(d.layout, ferry_dtp::LayoutSpec::Blocked(1 << 20));
}

#[test]
fn a_mode_e_get_is_described_from_the_session_settings() {
    let mut p = Pair::logged_in();
    p.expect("TYPE I", 200);
    p.expect("MODE E", 200);
    p.expect("OPTS RETR Parallelism=4,4,4;", 200);
    p.expect("SITE BLOCKSIZE 1048576", 200);
    p.expect("SBUF 4194304", 200);
    let pasv = p.expect("PASV", 227);
    assert_eq!(pasv.text(), "Entering Passive Mode (192,0,2,1,195,80)");
    p.script = Script::Complete(vec![DtpEvent::Perf {
        stripe_index: 0,
        stripe_count: 1,
        bytes: 500,
        timestamp_tenths: 17_000_000_000,
    }]);
    let replies = p.line("RETR data/big.bin");
    let codes: Vec<u16> = replies.iter().map(|r| r.code).collect();
    assert_eq!(codes, [150, 112, 226]);
    let d = p.last_transfer();
    assert_eq!(d.direction, Direction::Send);
    assert_eq!(d.mode, TransferMode::Extended);
    assert!(!d.ascii);
    assert_eq!(d.path.as_str(), "/data/big.bin");
    assert_eq!(d.parallelism, 4);
    assert_eq!(d.block_size, Some(1 << 20));
    assert_eq!(d.tuning.send_buffer, Some(4 << 20));
    assert_eq!(d.channel, ChannelSetup::Passive);
    assert!(d.restart.is_empty());
    assert!(
        p.forgot >= 1,
        "a buffer change drops cached data connections"
    );
}

#[test]
fn a_mode_e_put_with_rest_ranges_keeps_them_and_asks_for_restart_markers() {
    let mut p = Pair::logged_in();
    p.expect("TYPE I", 200);
    p.expect("MODE E", 200);
    p.expect("TREV RESTART 1", 200);
    p.expect("PORT 192,0,2,9,4,1", 200);
    assert_eq!(p.active, [vec!["192.0.2.9:1025".parse().unwrap()]]);
    p.expect("REST 0-1000,2000-3000", 350);
    let mut ranges = RangeSet::new();
    ranges.insert(0, 1000);
    ranges.insert(2000, 3000);
    p.script = Script::Complete(vec![DtpEvent::Restart(ranges.clone())]);
    assert_eq!(p.codes("STOR up.bin"), [150, 111, 226]);
    let d = p.last_transfer().clone();
    assert_eq!(d.direction, Direction::Receive);
    assert_eq!(d.restart, ranges);
    assert_eq!(d.markers.restart_ms, Some(1000));
    assert!(matches!(d.channel, ChannelSetup::Active(ref a) if a.len() == 1));
    // REST applies to one transfer only.
    p.expect("STOR again.bin", 226);
    assert!(p.last_transfer().restart.is_empty());
}

#[test]
fn eret_and_esto_describe_sections_and_bad_modules_are_refused() {
    let mut p = Pair::logged_in();
    p.expect("MODE E", 200);
    p.expect("PASV", 227);
    p.expect("ERET P 100 50 f", 226);
    let s = p.last_transfer().section;
    assert_eq!((s.file_offset, s.length), (100, Some(50)));
    p.expect("ESTO A 4096 g", 226);
    let d = p.last_transfer();
    assert_eq!(
        (d.direction, d.section.file_offset),
        (Direction::Receive, 4096)
    );
    p.expect("ERET X=\"1\" f", 504);
    p.expect("ERET P 1 f", 501);
}

#[test]
fn spas_lists_every_stripe_and_spor_takes_every_endpoint() {
    let mut p = Pair::logged_in();
    p.passive = vec![
        "192.0.2.21:50000".parse().unwrap(),
        "192.0.2.22:50001".parse().unwrap(),
    ];
    let spas = p.expect("SPAS", 229);
    assert_eq!(
        spas.lines,
        [
            "Entering Striped Passive Mode.",
            " 192,0,2,21,195,80",
            " 192,0,2,22,195,81",
            "End"
        ]
    );
    p.expect("SPOR 192,0,2,31,4,1 192,0,2,32,4,2", 200);
    assert_eq!(p.active.last().map(Vec::len), Some(2));
    p.expect("SPOR", 501);
}

#[test]
fn dcau_and_prot_need_gsi_beyond_none_and_clear() {
    let mut p = Pair::logged_in();
    p.expect("DCAU A", 504);
    p.expect("DCAU N", 200);
    p.expect("PBSZ 1048576", 200);
    let r = p.expect("PROT P", 536);
    assert_eq!(r.text(), "P protection level not supported without GSI.");
    p.expect("PROT S", 536);
    p.expect("PROT C", 200);
    p.expect("PASV", 227);
    p.expect("RETR f", 226);
    let sec = &p.last_transfer().security;
    assert_eq!(sec.dcau, ferry_proto::command::Dcau::None);
    assert_eq!(sec.prot, ferry_proto::command::Protection::Clear);
}

#[test]
fn a_retr_of_a_missing_file_gets_one_550_and_no_150() {
    let mut p = Pair::logged_in();
    p.expect("PASV", 227);
    p.script = Script::FailsBeforeBegin(|| {
        DtpError::Storage(StorageError::NotFound("/missing.bin".into()))
    });
    let replies = p.line("RETR missing.bin");
    assert_eq!(
        replies.iter().map(|r| r.code).collect::<Vec<_>>(),
        [550],
        "{replies:?}"
    );
    // The session goes on in step: the next reply answers the next command.
    p.expect("NOOP", 200);
    p.script = Script::Complete(Vec::new());
    assert_eq!(p.codes("RETR present.bin"), [150, 226]);
}

#[test]
fn abor_during_a_transfer_is_426_then_226_and_drops_cached_connections() {
    let mut p = Pair::logged_in();
    p.expect("PASV", 227);
    p.script = Script::AbortedByClient;
    let before = p.forgot;
    p.client.send_line("RETR f");
    assert_eq!(p.codes("ABOR"), [150, 426]);
    let abor = p.pump_until_final();
    assert_eq!(abor.iter().map(|r| r.code).collect::<Vec<_>>(), [226]);
    assert_eq!(abor[0].text(), "Abort successful.");
    assert_eq!(p.forgot, before + 1);
    // With nothing running, ABOR still answers.
    assert_eq!(p.codes("ABOR"), [226]);
}

#[test]
fn transfers_without_a_data_channel_or_login_and_bad_lines_get_their_errors() {
    let mut p = Pair::new();
    p.expect("RETR f", 530);
    p.expect("USER alice", 331);
    p.expect("PASS right", 230);
    p.expect("RETR f", 425);
    p.expect("FROB", 500);
    p.expect("TYPE Q", 501);
    p.expect("MODE X", 501);
    p.expect("PORT 1,2,3", 501);
    p.expect("EPSV ALL", 200);
    p.expect("PASV", 501);
    p.expect("EPSV 3", 501);
    p.expect("SITE SETNETSTACK udt", 500);
    p.expect("SITE SETDISKSTACK nope", 500);
    p.expect("SITE SETNETSTACK tcp", 250);
    assert!(p.transfers.is_empty());
}

#[test]
fn file_commands_run_on_storage_through_the_driver() {
    let mut p = Pair::logged_in();
    let r = p.expect("MKD d", 257);
    assert_eq!(r.text(), "Directory \"/d\" created successfully.");
    p.expect("CWD d", 250);
    assert_eq!(p.expect("PWD", 257).text(), "\"/d\" is current directory.");
    std::fs::write(p.root.path().join("d/f.txt"), b"hello").unwrap();
    assert_eq!(p.expect("SIZE f.txt", 213).text(), "5");
    p.expect("SIZE nothing", 550);
    p.expect("RNTO g.txt", 503);
    p.expect("RNFR f.txt", 350);
    p.expect("RNTO g.txt", 250);
    assert!(p.root.path().join("d/g.txt").exists());
    p.expect("CWD g.txt", 550);
    p.expect("CDUP", 250);
    p.expect("CKSM ADLER32 0 -1 d/g.txt", 213);
    p.expect("DELE d/g.txt", 250);
    p.expect("RMD d", 250);
    // APPE starts where the file ends.
    std::fs::write(p.root.path().join("log"), b"0123456789").unwrap();
    p.expect("PASV", 227);
    p.expect("APPE log", 226);
    assert_eq!(p.last_transfer().section.file_offset, 10);
}

#[test]
fn thirty_two_bad_lines_in_a_row_close_the_session_after_their_replies() {
    let mut p = Pair::new();
    for _ in 0..31 {
        p.expect("NOT-A-COMMAND", 500);
    }
    assert_eq!(p.codes("NOT-A-COMMAND"), [500]);
    let rest = p.pump_until_final();
    assert_eq!(rest.iter().map(|r| r.code).collect::<Vec<_>>(), [421]);
    assert!(p.closed);
}

/// A CA, a host credential, a user credential and a grid-mapfile in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    user: ferry_gsi::Credential,
    trust: Arc<ferry_gsi::TrustStore>,
}

impl Pki {
    const USER_DN: &'static str = "/O=ferry test/CN=Alice";

    fn new() -> Pki {
        use ferry_gsi::ca::{save_pair, CertificateAuthority, IssueSpec};
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = CertificateAuthority::create("/O=ferry test/CN=Test CA", 1, 2048).expect("CA");
        let certs = dir.path().join("certificates");
        ca.install(&certs).expect("install the CA");
        let host = ca
            .issue(&IssueSpec::host("/O=ferry test", "localhost", 1))
            .expect("host credential");
        save_pair(dir.path(), "hostcert.pem", "hostkey.pem", &host).expect("save host");
        let user = ca
            .issue(&IssueSpec::user(Pki::USER_DN, 1))
            .expect("user credential");
        let gridmap = format!("\"{}\" alice\n", Pki::USER_DN);
        std::fs::write(dir.path().join("grid-mapfile"), gridmap).expect("gridmap");
        let trust = Arc::new(ferry_gsi::TrustStore::load(&certs).expect("trust store"));
        Pki { dir, user, trust }
    }

    fn configure(&self, c: &mut ServerConfig) {
        let d = self.dir.path();
        c.gsi = true;
        c.anonymous = false;
        c.host_cert = Some(d.join("hostcert.pem"));
        c.host_key = Some(d.join("hostkey.pem"));
        c.cert_dir = Some(d.join("certificates"));
        c.gridmap = Some(d.join("grid-mapfile"));
    }
}

#[test]
fn a_gsi_login_protects_every_later_line_and_opens_dcau_and_prot() {
    use base64::engine::general_purpose::STANDARD as B64;
    use base64::Engine;
    let pki = Pki::new();
    let mut p = Pair::with(|c| pki.configure(c));
    p.expect("FEAT", 530);
    p.expect("AUTH GSSAPI", 334);
    let config = ferry_gsi::ContextConfig::new(pki.user.clone(), Arc::clone(&pki.trust));
    let (mut ctx, mut token) = SecurityContext::initiator(config).expect("initiator");
    loop {
        let r = p.line(&format!("ADAT {}", B64.encode(&token)));
        let r = r.last().expect("a reply").clone();
        let answer = r
            .text()
            .trim()
            .strip_prefix("ADAT=")
            .map(|t| B64.decode(t).unwrap());
        match (r.code, answer) {
            (335, Some(t)) => match ctx.step(&t).expect("a step") {
                ferry_gsi::Step::Continue(next) | ferry_gsi::Step::Done(Some(next)) => token = next,
                other => panic!("the exchange stalled: {other:?}"),
            },
            (235, last) => {
                if let Some(t) = last {
                    ctx.step(&t).expect("the last step");
                }
                break;
            }
            _ => panic!("ADAT refused: {r:?}"),
        }
    }
    assert!(ctx.is_established());
    p.client_gss = Some(ctx);
    let r = p.expect("USER :globus-mapping:", 331);
    assert_eq!(r.text(), "Password required for alice.");
    p.expect("PASS dummy", 230);
    // After a GSI login data channels default to DCAU A; the client may name a subject.
    p.expect("PASV", 227);
    p.expect("RETR f", 226);
    assert_eq!(
        p.last_transfer().security.dcau,
        ferry_proto::command::Dcau::Self_
    );
    p.expect("DCAU S /O=ferry test/CN=Peer", 200);
    p.expect("PBSZ 1048576", 200);
    p.expect("PROT P", 200);
    p.expect("RETR f", 226);
    let sec = &p.last_transfer().security;
    assert_eq!(
        sec.dcau,
        ferry_proto::command::Dcau::Subject("/O=ferry test/CN=Peer".into())
    );
    assert_eq!(sec.prot, ferry_proto::command::Protection::Private);
    // A line in clear on a protected session is refused, and the session goes on.
    p.send_clear = true;
    p.expect("NOOP", 533);
    p.expect("NOOP", 200);
}
