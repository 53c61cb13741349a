//! The link between a striped frontend and a data node: authenticated TLS, then length-prefixed
//! JSON messages (frames from `ferry_proto::frame`).
//!
//! Authentication, chosen by the configuration of both ends:
//! - **shared secret** (`--ipc-secret-file`): TLS 1.3 with an external pre-shared key derived
//!   from the secret (RFC 8446 PSK with (EC)DHE, so the key never crosses the wire and each link
//!   has forward secrecy). A peer without the secret fails the handshake; no certificate is
//!   involved, so this works on sites without GSI.
//! - **GSI** (`--gsi` and no secret): the GSI data-channel handshake with the host credentials
//!   both ways, every byte in TLS records, the peer checked against `--ipc-subject` (default:
//!   the same subject as ours, as Globus' `-ipc-auth-mode self`).
//!
//! The messages are small (a transfer description out, markers and the outcome back); JSON keeps
//! them readable in a capture and versioned by `IPC_VERSION`.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ferry_dtp::{DtpEvent, TransferDescription};
use ferry_net::{DataProtection, SocketTuning};
use ferry_proto::frame::{encode_frame, FrameDecoder};
use ferry_proto::stack::StackSpec;
use openssl::ssl::{Ssl, SslContext, SslMethod, SslOptions, SslVerifyMode, SslVersion};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio_openssl::SslStream;

use crate::config::ServerConfig;

/// Version of the message set; a frontend and a node must agree.
pub(crate) const IPC_VERSION: u32 = 2;
/// Largest message (restart ranges of a badly fragmented file are the biggest).
const MAX_FRAME: usize = 64 << 20;
/// The PSK identity both ends use.
const PSK_IDENTITY: &[u8] = b"ferry-ipc-v1";

/// Frontend → data node: after `Hello`, the calls of [`ferry_dtp::DataMover`], serialised.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ToNode {
    /// First message: the session's account and access.
    Hello {
        /// `IPC_VERSION`.
        version: u32,
        /// Local account to work as (a root node switches to it, as the frontend did).
        account: Option<String>,
        /// Refuse writes.
        read_only: bool,
        /// The credential the client delegated (PEM), for DCAU A/S data connections.
        delegated_pem: Option<String>,
    },
    /// `open_passive` on the node's own data address and port range; answered with
    /// `Passive` or `PassiveFailed`.
    OpenPassive {
        /// Socket buffers.
        tuning: SocketTuning,
        /// The session's net stack.
        stack: StackSpec,
        /// The only host whose data connections the node takes (`None`: any).
        #[serde(default)]
        admit_only: Option<std::net::IpAddr>,
    },
    /// `set_active`: the endpoints come with each description; no answer.
    SetActive,
    /// `forget_cache`; no answer.
    ForgetCache,
    /// `run`: answered with `Event`s, then `Finished` or `Failed`.
    Run {
        /// This node's part of it (its stripe index and count set).
        desc: Box<TransferDescription>,
    },
}

/// Data node → frontend.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum FromNode {
    /// Hello accepted.
    Ready,
    /// Hello refused (version, account).
    Refused(String),
    /// The listeners' addresses.
    Passive(Vec<SocketAddr>),
    /// Could not open a listener.
    PassiveFailed(String),
    /// An event of the running transfer.
    Event(DtpEvent),
    /// The transfer ended well.
    Finished {
        /// Payload bytes.
        bytes: u64,
        /// Data connections used.
        streams: u32,
    },
    /// The transfer failed.
    Failed {
        /// FTP reply code.
        code: u16,
        /// Why.
        text: String,
    },
}

/// Any authenticated byte stream.
pub(crate) trait IpcStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> IpcStream for T {}

/// How links authenticate.
#[derive(Clone)]
pub(crate) enum IpcAuth {
    /// TLS 1.3 PSK from the shared secret.
    Secret(Arc<[u8; 32]>),
    /// GSI TLS with the host credential.
    Gsi(DataProtection),
}

impl std::fmt::Debug for IpcAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IpcAuth::Secret(_) => write!(f, "IpcAuth::Secret"),
            IpcAuth::Gsi(p) => write!(f, "IpcAuth::Gsi({:?})", p.check),
        }
    }
}

impl IpcAuth {
    /// The authentication `config` asks for.
    pub(crate) fn from_config(config: &ServerConfig) -> Result<IpcAuth, String> {
        if let Some(path) = &config.ipc_secret_file {
            return IpcAuth::from_secret_file(path);
        }
        if config.gsi {
            let (cred, trust) =
                crate::gsi::load_host(config).map_err(|e| format!("IPC credential: {e}"))?;
            let security = ferry_gsi::DataSecurity::new(cred, trust)
                .map_err(|e| format!("IPC credential: {e}"))?;
            let check = match &config.ipc_subject {
                Some(s) => ferry_gsi::PeerCheck::Subject(s.clone()),
                None => ferry_gsi::PeerCheck::SameIdentity,
            };
            return Ok(IpcAuth::Gsi(DataProtection {
                security: Arc::new(security),
                check,
                protected: true,
            }));
        }
        Err("no IPC authentication: pass --ipc-secret-file FILE or --gsi".into())
    }

    /// The key from a secret file: its bytes without surrounding white space, at least 16.
    pub(crate) fn from_secret_file(path: &std::path::Path) -> Result<IpcAuth, String> {
        let raw = std::fs::read(path)
            .map_err(|e| format!("cannot read IPC secret {}: {e}", path.display()))?;
        let secret = raw.trim_ascii();
        if secret.len() < 16 {
            return Err(format!(
                "IPC secret {} is too short: use at least 16 bytes (e.g. `head -c 32 /dev/urandom | base64`)",
                path.display()
            ));
        }
        let mut input = b"ferry ipc psk v1\0".to_vec();
        input.extend_from_slice(secret);
        Ok(IpcAuth::Secret(Arc::new(openssl::sha::sha256(&input))))
    }

    fn psk_context(psk: &Arc<[u8; 32]>, server: bool) -> Result<SslContext, String> {
        let e = |e: openssl::error::ErrorStack| format!("IPC TLS setup: {e}");
        let method = if server {
            SslMethod::tls_server()
        } else {
            SslMethod::tls_client()
        };
        let mut b = SslContext::builder(method).map_err(e)?;
        b.set_min_proto_version(Some(SslVersion::TLS1_3))
            .map_err(e)?;
        b.set_max_proto_version(Some(SslVersion::TLS1_3))
            .map_err(e)?;
        // A PSK used through these callbacks is bound to SHA-256 suites.
        b.set_ciphersuites("TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256")
            .map_err(e)?;
        b.set_options(SslOptions::NO_TICKET);
        if server {
            b.set_verify(SslVerifyMode::NONE);
        } else {
            // Only the PSK authenticates the node. A TLS 1.3 server that ignores the PSK may
            // answer with a certificate-based handshake instead; any certificate is refused,
            // so a peer without the secret cannot pose as a node and be sent credentials.
            b.set_verify_callback(SslVerifyMode::PEER, |_, _| false);
        }
        let key = Arc::clone(psk);
        if server {
            b.set_psk_server_callback(move |_ssl, identity, out| {
                if identity != Some(PSK_IDENTITY) || out.len() < key.len() {
                    return Ok(0);
                }
                out[..key.len()].copy_from_slice(&key[..]);
                Ok(key.len())
            });
        } else {
            b.set_psk_client_callback(move |_ssl, _hint, id_out, out| {
                if id_out.len() <= PSK_IDENTITY.len() || out.len() < key.len() {
                    return Ok(0);
                }
                id_out[..PSK_IDENTITY.len()].copy_from_slice(PSK_IDENTITY);
                id_out[PSK_IDENTITY.len()] = 0;
                out[..key.len()].copy_from_slice(&key[..]);
                Ok(key.len())
            });
        }
        Ok(b.build())
    }

    /// Runs the handshake on a fresh TCP connection (`initiator`: we connected).
    async fn secure(&self, tcp: TcpStream, initiator: bool) -> Result<Box<dyn IpcStream>, String> {
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        match self {
            IpcAuth::Secret(psk) => {
                let ctx = IpcAuth::psk_context(psk, !initiator)?;
                let ssl = Ssl::new(&ctx).map_err(|e| e.to_string())?;
                let mut s = SslStream::new(ssl, tcp).map_err(|e| e.to_string())?;
                let r = if initiator {
                    Pin::new(&mut s).connect().await
                } else {
                    Pin::new(&mut s).accept().await
                };
                r.map_err(|e| {
                    format!("TLS handshake failed ({e}): do both ends have the same IPC secret?")
                })?;
                // Belt and braces: a link keyed by the secret carries no certificate.
                if s.ssl().peer_certificate().is_some() {
                    return Err(
                        "the peer authenticated with a certificate, not the IPC secret".into(),
                    );
                }
                Ok(Box::new(s))
            }
            IpcAuth::Gsi(prot) => {
                let conn = ferry_net::DataConn::from_stream(tcp).map_err(|e| e.to_string())?;
                let conn = conn
                    .secure(initiator, prot)
                    .await
                    .map_err(|e| format!("GSI handshake failed: {e}"))?;
                Ok(Box::new(conn))
            }
        }
    }
}

/// Reading half of a link.
pub(crate) struct LinkReader {
    rd: ReadHalf<Box<dyn IpcStream>>,
    frames: FrameDecoder,
}

impl LinkReader {
    /// The next message; `Ok(None)` when the peer closed the link cleanly. Cancel-safe: bytes
    /// read before a cancellation stay buffered.
    pub(crate) async fn recv<T: DeserializeOwned>(&mut self) -> io::Result<Option<T>> {
        loop {
            match self.frames.next_frame() {
                Ok(Some(frame)) => {
                    return serde_json::from_slice(&frame)
                        .map(Some)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e));
                }
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
            let mut buf = [0u8; 16 * 1024];
            let n = self.rd.read(&mut buf).await?;
            if n == 0 {
                return if self.frames.buffered() == 0 {
                    Ok(None)
                } else {
                    Err(io::ErrorKind::UnexpectedEof.into())
                };
            }
            self.frames.feed(&buf[..n]);
        }
    }
}

/// Writing half of a link.
pub(crate) struct LinkWriter {
    wr: WriteHalf<Box<dyn IpcStream>>,
}

impl LinkWriter {
    /// Sends one message.
    pub(crate) async fn send<T: Serialize>(&mut self, msg: &T) -> io::Result<()> {
        let json = serde_json::to_vec(msg).map_err(io::Error::other)?;
        let frame = encode_frame(&json)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "IPC message too large"))?;
        self.wr.write_all(&frame).await?;
        self.wr.flush().await
    }
}

/// An authenticated link, split so one task can wait for messages while it sends others.
pub(crate) struct Link {
    pub(crate) rd: LinkReader,
    pub(crate) wr: LinkWriter,
    /// The IP the link arrived on (a node's default data address).
    pub(crate) local: SocketAddr,
}

impl Link {
    fn new(stream: Box<dyn IpcStream>, local: SocketAddr) -> Link {
        let (rd, wr) = tokio::io::split(stream);
        Link {
            rd: LinkReader {
                rd,
                frames: FrameDecoder::new(MAX_FRAME),
            },
            wr: LinkWriter { wr },
            local,
        }
    }

    /// Connects to a data node and authenticates, all within `timeout`.
    pub(crate) async fn connect(
        node: &str,
        auth: &IpcAuth,
        timeout: Duration,
    ) -> Result<Link, String> {
        let work = async {
            let tcp = TcpStream::connect(node).await.map_err(|e| e.to_string())?;
            let local = tcp.local_addr().map_err(|e| e.to_string())?;
            let stream = auth.secure(tcp, true).await?;
            Ok(Link::new(stream, local))
        };
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| format!("no answer within {} s", timeout.as_secs()))?
    }

    /// Authenticates a frontend that connected to this node.
    pub(crate) async fn accept(
        tcp: TcpStream,
        auth: &IpcAuth,
        timeout: Duration,
    ) -> Result<Link, String> {
        let local = tcp.local_addr().map_err(|e| e.to_string())?;
        let stream = tokio::time::timeout(timeout, auth.secure(tcp, false))
            .await
            .map_err(|_| "handshake timed out".to_string())??;
        Ok(Link::new(stream, local))
    }
}
