//! The control channel from the client's side.

use std::net::SocketAddr;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ferry_gsi::{protect, ContextConfig, SecurityContext, Step, Target, Verified};
use ferry_proto::reply::MAX_REPLY_BYTES;
use ferry_proto::{ClientPi, Command, Reply, ReplyParser};
use openssl::ssl::{SslConnector, SslSession};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_openssl::SslStream;

use crate::ClientError;

/// The control connection's socket: clear, or in TLS (FTPS) from the start or after
/// `AUTH TLS`.
#[derive(Debug)]
enum ControlStream {
    Tcp(TcpStream),
    Tls(Box<SslStream<TcpStream>>),
    /// Only while the TLS handshake of `AUTH TLS` runs (and after it failed).
    Upgrading,
}

impl ControlStream {
    async fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            ControlStream::Tcp(s) => s.read(buf).await,
            ControlStream::Tls(s) => s.read(buf).await,
            ControlStream::Upgrading => Err(not_connected()),
        }
    }

    async fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            ControlStream::Tcp(s) => s.write_all(buf).await,
            ControlStream::Tls(s) => s.write_all(buf).await,
            ControlStream::Upgrading => Err(not_connected()),
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            ControlStream::Tcp(s) => s.local_addr(),
            ControlStream::Tls(s) => s.get_ref().local_addr(),
            ControlStream::Upgrading => Err(not_connected()),
        }
    }
}

/// Longest a reply may take from its first byte to its last. Silence before a reply is not
/// bounded (a server says nothing until a long transfer's 226); a reply begun and never
/// finished, such as an endless banner sent a line at a time, fails the read instead.
const REPLY_DEADLINE: Duration = Duration::from_secs(60);

/// Bound on a protected (GSI `63x`) reply on the wire: every line of the reply it carries is
/// wrapped, a token header added, and base64-encoded, so it runs to a few times as long.
const PROTECTED_REPLY_BYTES: usize = 4 * MAX_REPLY_BYTES;

fn not_connected() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        "the control connection's TLS handshake failed",
    )
}

/// A connected control channel: the sans-IO [`ClientPi`] run on a TCP connection, with GSI
/// protection (RFC 2228 as GSI does it) between the two once a GSI login is done.
#[derive(Debug)]
pub struct ControlClient {
    stream: ControlStream,
    pi: ClientPi,
    peer: SocketAddr,
    /// After a GSI login: every command leaves wrapped (`ENC`), every `63x` reply is opened.
    gss: Option<Box<SecurityContext>>,
    /// The wire's replies on a protected session, before they are opened.
    wire: ReplyParser,
    /// Commands queued with [`ControlClient::defer`] whose replies are not read yet, oldest
    /// first: they leave with the next command and their replies come before its own.
    deferred: std::collections::VecDeque<Deferred>,
    /// Set when a deferred command was refused: replies after it were not read, so the
    /// connection is out of step and takes no more commands.
    out_of_step: bool,
    /// When the first byte of the reply being read came (kept across dropped reads).
    reply_since: Option<tokio::time::Instant>,
    /// [`REPLY_DEADLINE`]; shorter in tests.
    reply_deadline: Duration,
}

/// A command sent ahead of the one whose reply a caller waits for.
#[derive(Debug)]
struct Deferred {
    shown: String,
    /// A refusal is logged and the session goes on (the server keeps its default).
    may_refuse: bool,
}

impl ControlClient {
    /// Connects and reads the 220 banner.
    pub async fn connect(addr: SocketAddr) -> Result<ControlClient, ClientError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        ControlClient::greeted(ControlStream::Tcp(stream), addr).await
    }

    /// Connects in TLS from the first byte (implicit FTPS, `ftps://`), checking the server's
    /// certificate against `host`, and reads the banner.
    pub async fn connect_tls(
        addr: SocketAddr,
        connector: &SslConnector,
        host: &str,
    ) -> Result<ControlClient, ClientError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let tls = crate::ftps::handshake(connector, host, stream, None)
            .await
            .map_err(|why| ClientError::Auth(format!("TLS with {addr}: {why}")))?;
        ControlClient::greeted(ControlStream::Tls(Box::new(tls)), addr).await
    }

    /// `AUTH TLS` and the handshake, before login (explicit FTPS, `ftpes://`).
    pub async fn start_tls(
        &mut self,
        connector: &SslConnector,
        host: &str,
    ) -> Result<(), ClientError> {
        let r = self.command(&Command::Auth("TLS".into())).await?;
        if r.code != 234 {
            return Err(ClientError::Auth(format!(
                "{} refused AUTH TLS ({} {}): it does not offer FTP over TLS",
                self.peer,
                r.code,
                r.text().trim()
            )));
        }
        if self.pi.has_buffered_input() {
            // Bytes after the 234 in clear would be read as replies that came over TLS
            // (the injection of CVE-2021-22947).
            return Err(ClientError::Auth(format!(
                "{} sent more after 234 to AUTH TLS, before the TLS handshake: refusing the \
                 connection, as something on the path may be injecting replies",
                self.peer
            )));
        }
        let ControlStream::Tcp(tcp) = std::mem::replace(&mut self.stream, ControlStream::Upgrading)
        else {
            return Err(ClientError::Auth(
                "AUTH TLS on a connection already in TLS".into(),
            ));
        };
        let tls = crate::ftps::handshake(connector, host, tcp, None)
            .await
            .map_err(|why| ClientError::Auth(format!("TLS with {}: {why}", self.peer)))?;
        self.stream = ControlStream::Tls(Box::new(tls));
        Ok(())
    }

    /// The TLS session of the control connection, which FTPS data connections resume.
    pub(crate) fn tls_session(&self) -> Option<SslSession> {
        match &self.stream {
            ControlStream::Tls(s) => s.ssl().session().map(ToOwned::to_owned),
            _ => None,
        }
    }

    async fn greeted(
        stream: ControlStream,
        addr: SocketAddr,
    ) -> Result<ControlClient, ClientError> {
        let mut c = ControlClient {
            stream,
            pi: ClientPi::new(),
            peer: addr,
            gss: None,
            wire: ReplyParser::with_max_bytes(PROTECTED_REPLY_BYTES),
            deferred: std::collections::VecDeque::new(),
            out_of_step: false,
            reply_since: None,
            reply_deadline: REPLY_DEADLINE,
        };
        let banner = c.read_reply().await?;
        if banner.code != 220 {
            return Err(ClientError::Refused {
                command: "(connect)".into(),
                reply: banner,
            });
        }
        Ok(c)
    }

    /// The server's control address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The local address of the control connection.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    /// Queues a command whose reply the caller does not wait for: it leaves with the next
    /// command sent (one write, one round trip for both), and its reply is read and checked
    /// before that command's. A refusal then fails that read, naming the deferred command, and
    /// leaves the connection out of step (it takes no more commands), unless `may_refuse`.
    /// Only for commands with one reply and no preliminary one (settings: TYPE, MODE, OPTS,
    /// SITE BLOCKSIZE, SITE SETNETSTACK, TREV, PORT).
    pub(crate) fn defer(&mut self, cmd: &Command, may_refuse: bool) {
        let shown = shown(cmd);
        // Logged as any command sent (tests and users read the dialogue from these lines); it
        // leaves with the next one.
        tracing::debug!("{} > {shown}", self.peer);
        self.pi.send(cmd);
        self.deferred.push_back(Deferred { shown, may_refuse });
    }

    /// Whether a refused deferred command left the connection out of step.
    pub(crate) fn out_of_step(&self) -> bool {
        self.out_of_step
    }

    /// Reads the next complete reply (opened, on a protected session), after the replies of
    /// any deferred commands.
    pub async fn read_reply(&mut self) -> Result<Reply, ClientError> {
        if self.out_of_step {
            return Err(ClientError::Network(format!(
                "{}: the control connection is out of step after a refused command",
                self.peer
            )));
        }
        if !self.deferred.is_empty() {
            // Deferred commands nothing followed yet leave now.
            self.transmit().await?;
        }
        // Cancel-safe (a transfer's watch drops this future when data moves): an entry leaves
        // the queue only once its reply has been read.
        while !self.deferred.is_empty() {
            let r = self.next_reply().await?;
            let Some(d) = self.deferred.pop_front() else {
                break;
            };
            if r.code < 400 {
                continue;
            }
            if d.may_refuse {
                tracing::info!(
                    "{} refused {}: {} {}",
                    self.peer,
                    d.shown,
                    r.code,
                    r.text().trim()
                );
                continue;
            }
            self.out_of_step = true;
            return Err(ClientError::Refused {
                command: d.shown,
                reply: r,
            });
        }
        self.next_reply().await
    }

    /// Reads the next complete reply from the wire. Cancel-safe: what was read is kept in the
    /// parser until a later call takes it.
    ///
    /// The parsers bound a reply's size; once its first byte has come, [`REPLY_DEADLINE`]
    /// bounds the time to its end.
    async fn next_reply(&mut self) -> Result<Reply, ClientError> {
        loop {
            if let Some(a) = self.pi.poll_reply()? {
                let r = a.reply;
                // Bytes left over are the start of the next reply.
                self.reply_since = self.mid_reply().then(tokio::time::Instant::now);
                tracing::debug!("{} < {}", self.peer, r.text().replace('\n', "\n    "));
                return Ok(r);
            }
            let since = if self.mid_reply() {
                Some(
                    *self
                        .reply_since
                        .get_or_insert_with(tokio::time::Instant::now),
                )
            } else {
                self.reply_since = None;
                None
            };
            let mut buf = [0u8; 4096];
            let read = self.stream.read(&mut buf);
            let n = match since {
                None => read.await?,
                Some(since) => {
                    match tokio::time::timeout_at(since + self.reply_deadline, read).await {
                        Ok(n) => n?,
                        Err(_) => {
                            return Err(ClientError::Network(format!(
                                "{}: a reply was still unfinished {} s after it began: \
                                 giving up on the server",
                                self.peer,
                                self.reply_deadline.as_secs_f32()
                            )))
                        }
                    }
                }
            };
            if n == 0 {
                return Err(ClientError::Closed);
            }
            let Some(gss) = self.gss.as_mut() else {
                self.pi.feed(&buf[..n]);
                continue;
            };
            self.wire.feed(&buf[..n]);
            while let Some(raw) = self.wire.next_reply()? {
                if !protect::is_protected_reply(raw.code) {
                    self.pi.feed(&raw.to_bytes());
                    continue;
                }
                // Each line carries one wrapped line of the real reply, CRLF included.
                for line in &raw.lines {
                    let plain = protect::unwrap_reply_line(gss, line).map_err(|e| {
                        ClientError::Auth(format!("cannot open a protected reply: {e}"))
                    })?;
                    self.pi.feed(&plain);
                }
            }
        }
    }

    /// Whether part of a reply has come and not the rest.
    fn mid_reply(&self) -> bool {
        self.pi.has_buffered_input() || self.wire.has_buffered()
    }

    /// Sends several commands in one write (pipelining; never passwords).
    pub async fn send_all(&mut self, commands: &[Command]) -> Result<(), ClientError> {
        for cmd in commands {
            tracing::debug!("{} > {cmd}", self.peer);
            self.pi.send(cmd);
        }
        self.transmit().await
    }

    /// Writes what the PI has queued: as is, or each line wrapped on a GSI session.
    async fn transmit(&mut self) -> Result<(), ClientError> {
        let bytes = self.pi.poll_transmit();
        let wire = match self.gss.as_mut() {
            None => bytes,
            Some(gss) => {
                let mut out = Vec::with_capacity(bytes.len() * 2);
                for line in bytes.split_inclusive(|&b| b == b'\n') {
                    let line = line.strip_suffix(b"\r\n").unwrap_or(line);
                    let wrapped = protect::wrap_command(gss, line)
                        .map_err(|e| ClientError::Auth(format!("cannot protect a command: {e}")))?;
                    out.extend_from_slice(&wrapped);
                }
                out
            }
        };
        self.stream.write_all(&wire).await?;
        Ok(())
    }

    /// Logs in with GSI: `AUTH GSSAPI`, the `ADAT` exchange (delegating as `config` says),
    /// and the check that the server is `target`. Every later command is wrapped.
    pub async fn authenticate_gsi(
        &mut self,
        mut config: ContextConfig,
        target: &Target,
    ) -> Result<Verified, ClientError> {
        // The name is checked inside the exchange, before the delegation flag: a server that
        // is not `target` never gets the proxy.
        config.target = Some(target.clone());
        let server = self.peer;
        let refused = move |what: &str, r: &Reply| {
            ClientError::Auth(format!(
                "{server} refused GSI authentication at {what}: {} {}",
                r.code,
                r.text()
            ))
        };
        let gsi = |e: ferry_gsi::GsiError| ClientError::Auth(format!("GSI: {e}"));
        let r = self.command(&Command::Auth("GSSAPI".into())).await?;
        if r.code != 334 {
            return Err(refused("AUTH GSSAPI", &r));
        }
        let (mut ctx, mut token) = SecurityContext::initiator(config).map_err(gsi)?;
        loop {
            let r = self.command(&Command::Adat(B64.encode(&token))).await?;
            let answer = r
                .text()
                .trim()
                .strip_prefix("ADAT=")
                .map(|t| B64.decode(t.trim()))
                .transpose()
                .map_err(|_| refused("ADAT (not base64)", &r))?;
            match (r.code, answer) {
                (335, Some(t)) => match ctx.step(&t).map_err(gsi)? {
                    Step::Continue(next) | Step::Done(Some(next)) => token = next,
                    Step::NeedMore | Step::Done(None) => {
                        return Err(refused("ADAT (incomplete exchange)", &r))
                    }
                },
                (235, t) => {
                    if let Some(t) = t {
                        ctx.step(&t).map_err(gsi)?;
                    }
                    break;
                }
                _ => return Err(refused("ADAT", &r)),
            }
        }
        if !ctx.is_established() {
            return Err(ClientError::Auth(format!(
                "{}: 235 before the GSI exchange finished",
                self.peer
            )));
        }
        let peer = ctx
            .peer()
            .cloned()
            .ok_or_else(|| ClientError::Auth("GSI: the server presented no credential".into()))?;
        self.gss = Some(Box::new(ctx));
        Ok(peer)
    }

    /// Sends one command, formatted by `ferry_proto`.
    pub async fn send(&mut self, cmd: &Command) -> Result<(), ClientError> {
        self.write_line(&cmd.to_string(), &shown(cmd)).await
    }

    /// Sends a command and returns its reply, whatever the code.
    pub async fn command(&mut self, cmd: &Command) -> Result<Reply, ClientError> {
        self.send(cmd).await?;
        self.read_reply().await
    }

    /// Sends a command and requires a 1xx, 2xx or 3xx reply.
    pub async fn expect_ok(&mut self, cmd: &Command) -> Result<Reply, ClientError> {
        let r = self.command(cmd).await?;
        if r.code >= 400 {
            return Err(ClientError::Refused {
                command: shown(cmd),
                reply: r,
            });
        }
        Ok(r)
    }

    /// Sends a line as it is, garbage included: for tests of servers and for lines a person
    /// typed. The client's own commands go through [`ControlClient::send`].
    pub async fn send_line(&mut self, line: &str) -> Result<(), ClientError> {
        let shown = if line
            .get(..5)
            .is_some_and(|v| v.eq_ignore_ascii_case("PASS "))
        {
            "PASS ****"
        } else {
            line
        };
        self.write_line(line, shown).await
    }

    /// Sends a raw line (see [`ControlClient::send_line`]) and returns the reply.
    pub async fn command_line(&mut self, line: &str) -> Result<Reply, ClientError> {
        self.send_line(line).await?;
        self.read_reply().await
    }

    async fn write_line(&mut self, line: &str, shown: &str) -> Result<(), ClientError> {
        tracing::debug!("{} > {shown}", self.peer);
        self.pi.send_line(line);
        self.transmit().await
    }

    /// The size of a file (`SIZE`).
    pub async fn size(&mut self, path: &str) -> Result<u64, ClientError> {
        let cmd = Command::Size(path.into());
        let r = self.expect_ok(&cmd).await?;
        r.text().trim().parse().map_err(|_| ClientError::Refused {
            command: cmd.to_string(),
            reply: r,
        })
    }

    /// The command that retrieves `req` of `path`, asking the server for the size when a
    /// section runs to the end of the file.
    pub(crate) async fn retrieve_command(
        &mut self,
        req: &crate::FileRequest,
        path: &str,
    ) -> Result<Command, ClientError> {
        let size = if req.needs_size() {
            Some(self.size(path).await?)
        } else {
            None
        };
        req.retrieve_command(path, size)
    }

    /// USER and PASS.
    pub async fn login(&mut self, user: &str, password: &str) -> Result<(), ClientError> {
        let r = self.expect_ok(&Command::User(user.into())).await?;
        if r.code == 331 {
            self.expect_ok(&Command::Pass(password.into())).await?;
        }
        Ok(())
    }
}

/// A command as logs and errors show it: passwords hidden.
pub(crate) fn shown(cmd: &Command) -> String {
    match cmd {
        Command::Pass(_) => "PASS ****".into(),
        c => c.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_proto::command::{TransferType, TrevEvent};
    use tokio::io::{AsyncBufReadExt, BufReader};
    use tokio::net::TcpListener;

    /// A server that greets, then answers the lines it reads with `answers`, in order, and
    /// reports every line it got.
    async fn scripted(
        answers: Vec<&'static str>,
    ) -> (SocketAddr, tokio::task::JoinHandle<Vec<String>>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            let (r, mut w) = s.into_split();
            w.write_all(b"220 hello\r\n").await.unwrap();
            let mut lines = BufReader::new(r).lines();
            let mut got = Vec::new();
            for a in answers {
                let Ok(Some(line)) = lines.next_line().await else {
                    break;
                };
                got.push(line);
                w.write_all(format!("{a}\r\n").as_bytes()).await.unwrap();
            }
            got
        });
        (addr, task)
    }

    #[tokio::test]
    async fn deferred_commands_leave_with_the_next_and_their_replies_come_first() {
        let (addr, server) = scripted(vec!["200 type", "500 no TREV", "213 42", "221 bye"]).await;
        let mut c = ControlClient::connect(addr).await.unwrap();
        c.defer(&Command::Type(TransferType::Image), false);
        let trev = Command::Trev {
            event: TrevEvent::Restart,
            interval: 1,
        };
        c.defer(&trev, true);
        // The refused TREV may be refused: SIZE gets its own reply.
        let r = c.command(&Command::Size("/f".into())).await.unwrap();
        assert_eq!((r.code, r.text().trim()), (213, "42"));
        assert!(!c.out_of_step());
        c.command(&Command::Quit).await.unwrap();
        let got = server.await.unwrap();
        assert_eq!(got, ["TYPE I", "TREV RESTART 1", "SIZE /f", "QUIT"]);
    }

    #[tokio::test]
    async fn a_refused_deferred_command_fails_the_next_read_and_leaves_the_session_out_of_step() {
        let (addr, _server) = scripted(vec!["501 no such mode", "213 42"]).await;
        let mut c = ControlClient::connect(addr).await.unwrap();
        c.defer(
            &Command::Mode(ferry_proto::command::TransferMode::Extended),
            false,
        );
        match c.command(&Command::Size("/f".into())).await {
            Err(ClientError::Refused { command, reply }) => {
                assert_eq!((command.as_str(), reply.code), ("MODE E", 501));
            }
            other => panic!("the deferred MODE E's refusal should fail the read: {other:?}"),
        }
        assert!(c.out_of_step());
        assert!(matches!(c.read_reply().await, Err(ClientError::Network(_))));
    }

    #[tokio::test]
    async fn a_read_dropped_before_the_deferred_reply_came_keeps_it_queued() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            s.write_all(b"220 hello\r\n").await.unwrap();
            let _ = wait.await;
            s.write_all(b"200 port\r\n150 go\r\n").await.unwrap();
            s
        });
        let mut c = ControlClient::connect(addr).await.unwrap();
        c.defer(&Command::Type(TransferType::Image), false);
        c.send(&Command::Retr("/f".into())).await.unwrap();
        // A transfer's watch drops the read when data moves first.
        let early =
            tokio::time::timeout(std::time::Duration::from_millis(50), c.read_reply()).await;
        assert!(early.is_err(), "nothing came yet");
        go.send(()).unwrap();
        let r = c.read_reply().await.unwrap();
        assert_eq!(
            r.code, 150,
            "the deferred reply is still taken first: {r:?}"
        );
        drop(server);
    }

    /// A server that greets with a `220-` banner of 8 000-byte lines that never ends, and
    /// reports how many bytes it got out before the client let go.
    async fn endless_banner() -> (SocketAddr, tokio::task::JoinHandle<usize>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut line = vec![b'x'; 8000];
            line.extend_from_slice(b"\r\n");
            let mut sent = 0;
            if s.write_all(b"220-Welcome\r\n").await.is_err() {
                return sent;
            }
            while s.write_all(&line).await.is_ok() {
                sent += line.len();
            }
            sent
        });
        (addr, task)
    }

    #[tokio::test]
    async fn an_endless_banner_fails_the_connect_as_too_long_once_past_the_bound() {
        let (addr, server) = endless_banner().await;
        let got = tokio::time::timeout(Duration::from_secs(60), ControlClient::connect(addr))
            .await
            .expect("the client should give up on its own");
        match got {
            Err(ClientError::BadReply(ferry_proto::reply::ReplyError::TooLong { limit })) => {
                assert_eq!(limit, MAX_REPLY_BYTES);
            }
            other => panic!("an endless banner should be refused as too long: {other:?}"),
        }
        let sent = server.await.unwrap();
        // What the client read, plus what the sockets' buffers held when it let go: far from
        // the 811 MB a 99 900-line banner once cost.
        assert!(
            sent < 64 * MAX_REPLY_BYTES,
            "the server got {sent} bytes out before the client gave up"
        );
    }

    #[tokio::test]
    async fn a_reply_begun_and_never_finished_times_out_but_silence_before_one_does_not() {
        let deadline = Duration::from_millis(300);
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            let (r, mut w) = s.into_split();
            w.write_all(b"220 hello\r\n").await.unwrap();
            let mut lines = BufReader::new(r).lines();
            // NOOP: silent for three deadlines (as for a transfer's 226), then answered.
            lines.next_line().await.unwrap();
            tokio::time::sleep(3 * deadline).await;
            w.write_all(b"200 ok\r\n").await.unwrap();
            // STAT: a reply begun, then a line now and then, each well within the size bound.
            lines.next_line().await.unwrap();
            w.write_all(b"211-status\r\n").await.unwrap();
            while w.write_all(b" still going\r\n").await.is_ok() {
                tokio::time::sleep(deadline / 6).await;
            }
        });
        let mut c = ControlClient::connect(addr).await.unwrap();
        c.reply_deadline = deadline;
        let r = c.command(&Command::Noop).await.unwrap();
        assert_eq!(
            r.code, 200,
            "silence before a reply is no reason to give up"
        );
        let got = tokio::time::timeout(20 * deadline, c.command(&Command::Stat(None)))
            .await
            .expect("the client should give up on the reply by itself");
        match got {
            Err(ClientError::Network(why)) => {
                assert!(why.contains("still unfinished"), "{why}");
                assert_eq!(
                    ClientError::Network(why).class(),
                    crate::ErrorClass::Network
                );
            }
            other => panic!("a reply that never ends should time out: {other:?}"),
        }
        drop(c);
        server.await.unwrap();
    }
}
