//! FTP over TLS (RFC 4217): `ftps://` (implicit: TLS from the first byte, port 990) and
//! `ftpes://` (explicit: `AUTH TLS` after the banner, port 21); after login `PBSZ 0` and
//! `PROT P`, so each data connection is TLS too. The server's certificate is checked against
//! the system's trust store (or `SSL_CERT_FILE`/`SSL_CERT_DIR`) plus `--ca-file`, and against
//! the URL's host name or address.
//!
//! Data connections resume the control connection's TLS session: ProFTPD (by default) and
//! vsftpd refuse a data connection that does not, as proof that it comes from the same client.
//! openssl has no safe call for that, hence the one `unsafe` block below.

use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use ferry_net::{
    Bind, ConnectFuture, DataConn, DataListener, Dial, NetError, Transport, TransportStream,
};
use openssl::ssl::{SslConnector, SslMethod, SslSession, SslVersion};
use tokio::net::TcpStream;
use tokio_openssl::SslStream;

use crate::ClientError;

/// The net-stack name of TLS data connections on an FTPS session: a transport registered on
/// that session's DTP only (no server offers it by this name).
pub(crate) const FTPS_TRANSPORT: &str = "ftps";

/// The TLS client for a session: the system's CAs and `ca_file`'s.
pub(crate) fn connector(ca_file: Option<&Path>) -> Result<SslConnector, ClientError> {
    let tls = |e: openssl::error::ErrorStack| ClientError::Auth(format!("TLS setup: {e}"));
    let mut b = SslConnector::builder(SslMethod::tls_client()).map_err(tls)?;
    b.set_min_proto_version(Some(SslVersion::TLS1_2))
        .map_err(tls)?;
    if let Some(file) = ca_file {
        b.set_ca_file(file).map_err(|e| {
            ClientError::Usage(format!(
                "cannot read CA certificates from {}: {e}",
                file.display()
            ))
        })?;
    }
    Ok(b.build())
}

/// The TLS handshake on a connected control or data socket, checking the certificate
/// against `host`.
pub(crate) async fn handshake(
    connector: &SslConnector,
    host: &str,
    tcp: TcpStream,
    session: Option<&SslSession>,
) -> Result<SslStream<TcpStream>, String> {
    let mut ssl = connector
        .configure()
        .and_then(|c| c.into_ssl(host))
        .map_err(|e| e.to_string())?;
    if let Some(session) = session {
        // SAFETY: openssl requires the session to come from the same SSL_CTX as `ssl`: it
        // comes from the control connection, which `connector` (one context per session)
        // made too.
        #[allow(unsafe_code)]
        unsafe { ssl.set_session(session) }.map_err(|e| e.to_string())?;
    }
    let mut stream = SslStream::new(ssl, tcp).map_err(|e| e.to_string())?;
    if let Err(e) = Pin::new(&mut stream).connect().await {
        let verify = stream.ssl().verify_result();
        return Err(if verify.as_raw() != 0 {
            format!(
                "the certificate is not trusted for {host}: {}",
                verify.error_string()
            )
        } else {
            e.to_string()
        });
    }
    Ok(stream)
}

/// TLS data connections of one FTPS session, made by the client (stream mode, passive).
pub(crate) struct FtpsData {
    connector: SslConnector,
    host: String,
    /// The control connection's session, to resume.
    session: Option<SslSession>,
}

impl std::fmt::Debug for FtpsData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FtpsData")
            .field("host", &self.host)
            .field("resumes", &self.session.is_some())
            .finish_non_exhaustive()
    }
}

impl FtpsData {
    pub(crate) fn new(
        connector: SslConnector,
        host: &str,
        session: Option<SslSession>,
    ) -> Arc<Self> {
        Arc::new(FtpsData {
            connector,
            host: host.to_string(),
            session,
        })
    }
}

/// A TLS data connection as a transport stream.
#[derive(Debug)]
struct TlsStream(SslStream<TcpStream>);

impl TransportStream for TlsStream {
    fn peer_addr(&self) -> std::io::Result<SocketAddr> {
        self.0.get_ref().peer_addr()
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.0.get_ref().local_addr()
    }
}

impl tokio::io::AsyncRead for TlsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

impl Transport for FtpsData {
    fn name(&self) -> &'static str {
        FTPS_TRANSPORT
    }

    fn connect<'a>(&'a self, dial: Dial<'a>) -> ConnectFuture<'a> {
        let Dial { addr, tuning, .. } = dial;
        Box::pin(async move {
            let tcp = ferry_net::connect_tcp(addr, tuning).await?;
            tcp.set_nodelay(true)
                .map_err(|source| NetError::Connect { addr, source })?;
            let tls = handshake(&self.connector, &self.host, tcp, self.session.as_ref())
                .await
                .map_err(|why| {
                    NetError::Security(format!("TLS data connection to {addr}: {why}"))
                })?;
            Ok(DataConn::from_transport(Box::new(TlsStream(tls))))
        })
    }

    fn listen(&self, _bind: Bind<'_>) -> Result<DataListener, NetError> {
        Err(NetError::DriverOptions {
            driver: FTPS_TRANSPORT.into(),
            why: "FTPS data connections are made by the client (passive mode)".into(),
        })
    }
}
