//! The control channel from the client's side.

use std::net::SocketAddr;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ferry_gsi::{protect, ContextConfig, SecurityContext, Step, Target, Verified};
use ferry_proto::{Reply, ReplyParser};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::ClientError;

/// A connected control channel.
#[derive(Debug)]
pub struct ControlClient {
    stream: TcpStream,
    parser: ReplyParser,
    peer: SocketAddr,
    /// After a GSI login: every command leaves wrapped (`ENC`), every `63x` reply is opened.
    gss: Option<Box<SecurityContext>>,
    /// The replies inside `63x` lines.
    inner: ReplyParser,
}

impl ControlClient {
    /// Connects and reads the 220 banner.
    pub async fn connect(addr: SocketAddr) -> Result<ControlClient, ClientError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let mut c = ControlClient {
            stream,
            parser: ReplyParser::new(),
            peer: addr,
            gss: None,
            inner: ReplyParser::new(),
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

    /// Reads the next complete reply (opened, on a protected session).
    pub async fn read_reply(&mut self) -> Result<Reply, ClientError> {
        loop {
            if let Some(r) = self.inner.next_reply()? {
                tracing::debug!("{} < {}", self.peer, r.text().replace('\n', "\n    "));
                return Ok(r);
            }
            let raw = self.read_raw().await?;
            match self.gss.as_mut() {
                Some(gss) if protect::is_protected_reply(raw.code) => {
                    // Each line carries one wrapped line of the real reply, CRLF included.
                    for line in &raw.lines {
                        let plain = protect::unwrap_reply_line(gss, line).map_err(|e| {
                            ClientError::Auth(format!("cannot open a protected reply: {e}"))
                        })?;
                        self.inner.feed(&plain);
                    }
                }
                _ => {
                    tracing::debug!("{} < {}", self.peer, raw.text().replace('\n', "\n    "));
                    return Ok(raw);
                }
            }
        }
    }

    /// The next reply as it is on the wire.
    async fn read_raw(&mut self) -> Result<Reply, ClientError> {
        loop {
            if let Some(r) = self.parser.next_reply()? {
                return Ok(r);
            }
            let mut buf = [0u8; 4096];
            let n = self.stream.read(&mut buf).await?;
            if n == 0 {
                return Err(ClientError::Closed);
            }
            self.parser.feed(&buf[..n]);
        }
    }

    /// Sends several command lines in one write (pipelining; never passwords).
    pub async fn send_all(&mut self, lines: &[String]) -> Result<(), ClientError> {
        let mut bytes = Vec::new();
        for line in lines {
            tracing::debug!("{} > {line}", self.peer);
            self.encode(line, &mut bytes)?;
        }
        self.stream.write_all(&bytes).await?;
        Ok(())
    }

    /// Appends a command line as it goes on the wire: as is, or wrapped on a GSI session.
    fn encode(&mut self, line: &str, out: &mut Vec<u8>) -> Result<(), ClientError> {
        match self.gss.as_mut() {
            None => {
                out.extend_from_slice(line.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Some(gss) => {
                let wire = protect::wrap_command(gss, line.as_bytes())
                    .map_err(|e| ClientError::Auth(format!("cannot protect a command: {e}")))?;
                out.extend_from_slice(&wire);
            }
        }
        Ok(())
    }

    /// Logs in with GSI: `AUTH GSSAPI`, the `ADAT` exchange (delegating as `config` says),
    /// and the check that the server is `target`. Every later command is wrapped.
    pub async fn authenticate_gsi(
        &mut self,
        config: ContextConfig,
        target: &Target,
    ) -> Result<Verified, ClientError> {
        let server = self.peer;
        let refused = move |what: &str, r: &Reply| {
            ClientError::Auth(format!(
                "{server} refused GSI authentication at {what}: {} {}",
                r.code,
                r.text()
            ))
        };
        let gsi = |e: ferry_gsi::GsiError| ClientError::Auth(format!("GSI: {e}"));
        let r = self.command("AUTH GSSAPI").await?;
        if r.code != 334 {
            return Err(refused("AUTH GSSAPI", &r));
        }
        let (mut ctx, mut token) = SecurityContext::initiator(config).map_err(gsi)?;
        loop {
            let r = self
                .command(&format!("ADAT {}", B64.encode(&token)))
                .await?;
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
        target.check(&peer).map_err(gsi)?;
        self.gss = Some(Box::new(ctx));
        Ok(peer)
    }

    /// Sends one command line.
    pub async fn send(&mut self, line: &str) -> Result<(), ClientError> {
        let shown = if line.starts_with("PASS ") {
            "PASS ****"
        } else {
            line
        };
        tracing::debug!("{} > {shown}", self.peer);
        let mut bytes = Vec::with_capacity(line.len() + 2);
        self.encode(line, &mut bytes)?;
        self.stream.write_all(&bytes).await?;
        Ok(())
    }

    /// Sends a command and returns its reply, whatever the code.
    pub async fn command(&mut self, line: &str) -> Result<Reply, ClientError> {
        self.send(line).await?;
        self.read_reply().await
    }

    /// Sends a command and requires a 2xx or 3xx reply.
    pub async fn expect_ok(&mut self, line: &str) -> Result<Reply, ClientError> {
        let r = self.command(line).await?;
        if r.code >= 400 {
            let command = if line.starts_with("PASS") {
                "PASS ****".into()
            } else {
                line.to_string()
            };
            return Err(ClientError::Refused { command, reply: r });
        }
        Ok(r)
    }

    /// USER and PASS.
    pub async fn login(&mut self, user: &str, password: &str) -> Result<(), ClientError> {
        let r = self.expect_ok(&format!("USER {user}")).await?;
        if r.code == 331 {
            self.expect_ok(&format!("PASS {password}")).await?;
        }
        Ok(())
    }
}
