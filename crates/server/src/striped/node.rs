//! `ferry serve --data-node`: a DTP that a striped frontend drives over the IPC link.
//!
//! Each frontend session opens one link to each node it uses; the node keeps one `Dtp` per link
//! (its passive listener and cached data connections live as long as the frontend session's
//! data channel), runs the transfer descriptions it is sent against its own storage and streams
//! the DTP's events back. A closed link stops whatever it was running.

use std::sync::Arc;
use std::time::Duration;

use ferry_dtp::{
    relay, BufferPool, DataMover, Dtp, DtpEvent, PassiveRequest, RelaySink, Relayed, Watch,
};
use ferry_gsi::{Credential, DataSecurity, TrustStore};
use ferry_storage::Storage;
use tokio::net::TcpListener;

use super::ipc::{FromNode, IpcAuth, Link, LinkReader, LinkWriter, ToNode, IPC_VERSION};
use super::AllowFrom;
use crate::config::ServerConfig;

/// How long a frontend has to finish the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);

/// What every link of a data node shares.
pub(crate) struct NodeContext {
    pub(crate) config: ServerConfig,
    pub(crate) storage_rw: Arc<dyn Storage>,
    pub(crate) storage_ro: Arc<dyn Storage>,
    pub(crate) pool: Arc<BufferPool>,
    pub(crate) auth: IpcAuth,
    pub(crate) allow: AllowFrom,
    /// Host credential and CAs (GSI nodes): data connections under DCAU use them.
    pub(crate) host: Option<(Credential, Arc<TrustStore>)>,
    /// The transports descriptions may name.
    pub(crate) transports: Arc<ferry_net::Transports>,
    /// The disk-stack drivers descriptions may name.
    pub(crate) disk_stacks: Arc<ferry_dtp::disk_stack::DiskStacks>,
}

impl std::fmt::Debug for NodeContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeContext")
            .field("auth", &self.auth)
            .field("allow", &self.allow)
            .finish_non_exhaustive()
    }
}

impl NodeContext {
    /// A data node's context from what its configuration loaded.
    pub(crate) fn new(
        config: ServerConfig,
        prepared: crate::prepare::Prepared,
        pool: Arc<BufferPool>,
        transports: Arc<ferry_net::Transports>,
        disk_stacks: Arc<ferry_dtp::disk_stack::DiskStacks>,
    ) -> Result<NodeContext, crate::StartError> {
        use crate::StartError;
        let allow = prepared
            .allow
            .ok_or_else(|| StartError::Ipc("no admitted frontends".into()))?;
        let auth = prepared
            .ipc
            .ok_or_else(|| StartError::Ipc("no IPC authentication".into()))?;
        Ok(NodeContext {
            config,
            storage_rw: prepared.storage_rw,
            storage_ro: prepared.storage_ro,
            pool,
            auth,
            allow,
            host: prepared.host,
            transports,
            disk_stacks,
        })
    }
}

/// Accepts frontends until the task is dropped. Each link works with the configuration in
/// force when it connected.
pub(crate) async fn serve(
    listener: TcpListener,
    live: Arc<crate::reload::Live<NodeContext>>,
) -> std::io::Result<()> {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let ctx = live.load();
        if !ctx.allow.allows(peer.ip()) {
            tracing::warn!(%peer, "IPC connection refused: not in --ipc-allow-from");
            continue;
        }
        tokio::spawn(async move {
            let link = match Link::accept(tcp, &ctx.auth, HANDSHAKE_TIMEOUT).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(%peer, "IPC link refused: {e}");
                    return;
                }
            };
            tracing::info!(%peer, "frontend connected");
            match session(link, &ctx).await {
                Ok(()) => tracing::info!(%peer, "frontend session ended"),
                Err(e) => tracing::info!(%peer, "frontend session ended: {e}"),
            }
        });
    }
}

async fn session(link: Link, ctx: &NodeContext) -> std::io::Result<()> {
    let Link {
        mut rd,
        mut wr,
        local,
    } = link;
    let Some(ToNode::Hello {
        version,
        account,
        read_only,
        delegated_pem,
    }) = rd.recv::<ToNode>().await?
    else {
        return Err(protocol("the first message was not Hello"));
    };
    if version != IPC_VERSION {
        let why = format!("IPC version {version} is not this node's {IPC_VERSION}; run the same ferry on frontend and nodes");
        wr.send(&FromNode::Refused(why)).await?;
        return Ok(());
    }
    let base = if read_only {
        Arc::clone(&ctx.storage_ro)
    } else {
        Arc::clone(&ctx.storage_rw)
    };
    let allow_root = ctx.config.allow_root_sessions;
    let storage = match ferry_site::identity::storage_as(base, account.clone(), allow_root).await {
        Ok(s) => s,
        Err(e) => {
            let who = account.unwrap_or_else(|| "this node's own account".into());
            wr.send(&FromNode::Refused(format!("cannot run as {who}: {e}")))
                .await?;
            return Ok(());
        }
    };
    let mut dtp = Dtp::new(storage, Arc::clone(&ctx.pool), read_only);
    dtp.limit_streams(ferry_dtp::StreamLimits {
        per_transfer: ctx.config.data_streams_max,
        server: None,
    });
    dtp.use_transports(Arc::clone(&ctx.transports));
    dtp.use_disk_stacks(Arc::clone(&ctx.disk_stacks));
    match data_security(ctx, delegated_pem.as_deref()) {
        Ok(sec) => dtp.set_security(sec),
        Err(e) => {
            wr.send(&FromNode::Refused(format!("delegated credential: {e}")))
                .await?;
            return Ok(());
        }
    }
    wr.send(&FromNode::Ready).await?;
    let data_ip = ctx
        .config
        .data_interface
        .unwrap_or(local.ip().to_canonical());
    serve_mover(&mut dtp, data_ip, ctx, &mut rd, &mut wr).await
}

/// Serves the frontend's calls on `mover`, one message each, until the link closes.
async fn serve_mover(
    mover: &mut dyn DataMover,
    data_ip: std::net::IpAddr,
    ctx: &NodeContext,
    rd: &mut LinkReader,
    wr: &mut LinkWriter,
) -> std::io::Result<()> {
    while let Some(msg) = rd.recv::<ToNode>().await? {
        match msg {
            ToNode::OpenPassive {
                tuning,
                stack,
                admit_only,
            } => {
                let req = PassiveRequest {
                    ip: data_ip,
                    ports: ctx.config.port_range,
                    tuning,
                    striped: false,
                    stack,
                    admit_only,
                };
                let reply = match mover.open_passive(req).await {
                    Ok(a) => FromNode::Passive(a),
                    Err(e) => FromNode::PassiveFailed(e.to_string()),
                };
                wr.send(&reply).await?;
            }
            ToNode::SetActive => {
                // The local DTP forgets its channel and cannot fail.
                let _ = mover.set_active(&[]).await;
            }
            ToNode::ForgetCache => mover.forget_cache(),
            ToNode::Run { desc } => run(mover, &desc, rd, wr).await?,
            ToNode::Hello { .. } => return Err(protocol("Hello sent twice")),
        }
    }
    Ok(())
}

/// The node's end of a relayed transfer: events go back over the link; a message or a closed
/// link from the frontend while it runs stops it (the frontend sends nothing mid-transfer
/// unless it gave up).
struct LinkSink<'a> {
    rd: &'a mut LinkReader,
    wr: &'a mut LinkWriter,
}

impl RelaySink for LinkSink<'_> {
    type Error = std::io::Error;

    async fn event(&mut self, ev: DtpEvent) -> std::io::Result<()> {
        self.wr.send(&FromNode::Event(ev)).await
    }

    async fn watch(&mut self) -> std::io::Result<Watch> {
        match self.rd.recv::<ToNode>().await? {
            None => Err(std::io::ErrorKind::ConnectionAborted.into()),
            Some(_) => Err(protocol("a message arrived during a transfer")),
        }
    }
}

/// Runs one transfer, relaying its events, and reports how it ended.
async fn run(
    mover: &mut dyn DataMover,
    desc: &ferry_dtp::TransferDescription,
    rd: &mut LinkReader,
    wr: &mut LinkWriter,
) -> std::io::Result<()> {
    let result = match relay(mover, desc, &mut LinkSink { rd, wr }).await? {
        Relayed::Finished(r) => r,
        // The sink never says Stop: a frontend that gives up closes the link (an error above).
        Relayed::Stopped => return Err(protocol("transfer stopped")),
    };
    let reply = match result {
        Ok(o) => {
            tracing::info!(
                path = %desc.path, direction = ?desc.direction, stripe = desc.stripe.index,
                stripes = desc.stripe.count, bytes = o.bytes, streams = o.streams,
                secs = o.duration.as_secs_f64(), "striped transfer done on this node"
            );
            FromNode::Finished {
                bytes: o.bytes,
                streams: o.streams,
            }
        }
        Err(e) => {
            tracing::info!(path = %desc.path, error = %e, "striped transfer failed on this node");
            FromNode::Failed {
                code: e.reply_code(),
                text: e.to_string(),
            }
        }
    };
    wr.send(&reply).await
}

/// The credential DCAU A/S connections present: the one the client delegated to the frontend,
/// else this node's host credential; `None` on a node without GSI (DCAU then fails with the
/// DTP's own message).
fn data_security(
    ctx: &NodeContext,
    delegated_pem: Option<&str>,
) -> Result<Option<Arc<DataSecurity>>, String> {
    let Some((host, trust)) = &ctx.host else {
        return Ok(None);
    };
    let cred = match delegated_pem {
        Some(pem) => Credential::from_proxy_pem(pem.as_bytes()).map_err(|e| e.to_string())?,
        None => host.clone(),
    };
    DataSecurity::new(cred, Arc::clone(trust))
        .map(|s| Some(Arc::new(s)))
        .map_err(|e| e.to_string())
}

fn protocol(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("IPC: {what}"))
}
