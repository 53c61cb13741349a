//! The control channel from the client's side.

use std::net::SocketAddr;

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

    /// Reads the next complete reply.
    pub async fn read_reply(&mut self) -> Result<Reply, ClientError> {
        loop {
            if let Some(r) = self.parser.next_reply()? {
                tracing::debug!("{} < {}", self.peer, r.text().replace('\n', "\n    "));
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
            bytes.extend_from_slice(line.as_bytes());
            bytes.extend_from_slice(b"\r\n");
        }
        self.stream.write_all(&bytes).await?;
        Ok(())
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
        bytes.extend_from_slice(line.as_bytes());
        bytes.extend_from_slice(b"\r\n");
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
