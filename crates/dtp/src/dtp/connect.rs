//! Data-connection establishment: the `DataMover` channel setup, and connecting, accepting and
//! securing (DCAU) a transfer's data connections.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferry_net::{DataConn, DataProtection, Transports};
use ferry_proto::command::TransferMode;
use ferry_proto::stack::StackSpec;
use tokio::sync::mpsc;

use super::Dtp;
use crate::disk_stack::{Preparing, Ready, Waits};
use crate::mover::{DataMover, MoverFuture, PassiveRequest};
use crate::{
    ChannelSecurity, ChannelSetup, Direction, DtpError, DtpEvent, TransferDescription,
    TransferOutcome,
};

/// How long closing a session's cached connections may take: their data is acknowledged
/// already (a transfer ends only then), so the goodbye is one exchange.
const CLOSE_LIMIT: Duration = Duration::from_secs(3);

impl Dtp {
    /// Opens the data connections of the sending transfer `desc` describes before it comes,
    /// so that the next transfer to the same endpoints starts on them: a node of a forwarding
    /// tree connects to its child while its own inbound link is still idle, where a SYN-ACK
    /// lost behind the parent's data later costs TCP's one-second retry. Only MODE E over plain
    /// TCP, connected and not yet secured (DCAU's handshake needs the peer to have the transfer
    /// command, so it runs when the transfer does); any other description connects nothing.
    /// Forgetting the channel, or a transfer to other endpoints, drops them.
    pub async fn connect_ahead(&mut self, desc: &TransferDescription) -> Result<(), DtpError> {
        let ChannelSetup::Active(addrs) = &desc.channel else {
            return Ok(());
        };
        if desc.mode != TransferMode::Extended
            || desc.stack.bottom() != "tcp"
            || addrs.is_empty()
            || self.channel.can_reuse(Direction::Send, &desc.channel)
        {
            return Ok(());
        }
        let wanted = addrs.len() * desc.parallelism.max(1) as usize;
        let pending: Vec<SocketAddr> = (0..wanted).map(|i| addrs[i % addrs.len()]).collect();
        // Without protection, connecting is the transport's handshake alone.
        let idle = Duration::from_millis(desc.idle_timeout_ms.max(1));
        let conns = connect_all(&self.transports, &pending, desc, None, idle).await?;
        self.channel.keep_ahead(&desc.channel, conns);
        // They are secured as `desc` says when the transfer takes them: a transfer with these
        // settings must not drop them as connections cached under others. (Dropped, they would
        // still wait in the peer's listen queue, and the peer would accept them dead.)
        self.cached_security = desc.security.clone();
        Ok(())
    }

    /// Takes cached connections and connects, or accepts, the rest for a sending transfer.
    pub(super) async fn send_connections(
        &mut self,
        desc: &TransferDescription,
        addrs: &[SocketAddr],
        idle: Duration,
    ) -> Result<Vec<DataConn>, DtpError> {
        match (&desc.channel, desc.mode) {
            (ChannelSetup::Active(_), TransferMode::Extended) if addrs.is_empty() => {
                self.channel.forget_cache();
                Ok(Vec::new())
            }
            (ChannelSetup::Active(_), TransferMode::Extended) => {
                let ahead = self.channel.take_ahead(&desc.channel);
                let mut conns = self.channel.take_cached(Direction::Send, &desc.channel);
                let prot = self.protection(desc)?;
                let wanted = addrs.len() * desc.parallelism.max(1) as usize;
                if conns.is_empty() && !ahead.is_empty() {
                    // Connected ahead in the same order as below: they are secured now, when
                    // the peer (told the transfer) accepts them.
                    conns = secure_all(ahead, prot.clone(), idle).await?;
                    conns.truncate(wanted);
                }
                let mut next = conns.len();
                let mut pending = Vec::new();
                while next < wanted {
                    pending.push(addrs[next % addrs.len()]);
                    next += 1;
                }
                conns.extend(connect_all(&self.transports, &pending, desc, prot, idle).await?);
                Ok(conns)
            }
            (ChannelSetup::Active(_), TransferMode::Stream) => {
                self.channel.forget_cache();
                let first = addrs.first().copied().ok_or(DtpError::NoDataChannel)?;
                connect_all(
                    &self.transports,
                    &[first],
                    desc,
                    self.protection(desc)?,
                    idle,
                )
                .await
            }
            (ChannelSetup::Passive, mode) => {
                let mut conns = if mode == TransferMode::Extended {
                    self.channel.take_cached(Direction::Send, &desc.channel)
                } else {
                    self.channel.forget_cache();
                    Vec::new()
                };
                if conns.is_empty() {
                    let prot = self.protection(desc)?;
                    let l = self.channel.listener().ok_or(DtpError::NoDataChannel)?;
                    let c = tokio::time::timeout(idle, l.accept())
                        .await
                        .map_err(|_| DtpError::IdleTimeout(idle.as_secs()))?
                        .map_err(DtpError::Connect)?;
                    conns.push(secure(c, false, prot.as_ref(), idle).await?);
                }
                Ok(conns)
            }
        }
    }
}

impl DataMover for Dtp {
    fn open_passive(
        &mut self,
        req: PassiveRequest,
    ) -> MoverFuture<'_, Result<Vec<SocketAddr>, DtpError>> {
        let opened = self
            .channel
            .open_passive(
                &self.transports,
                &req.stack,
                req.ip,
                req.ports,
                req.tuning,
                req.admit_only,
            )
            .map(|a| vec![a])
            .map_err(DtpError::Listen);
        Box::pin(std::future::ready(opened))
    }

    fn set_active<'a>(
        &'a mut self,
        _endpoints: &'a [SocketAddr],
    ) -> MoverFuture<'a, Result<(), DtpError>> {
        // The endpoints arrive with each transfer's description; only the old channel goes.
        self.channel.forget();
        Box::pin(std::future::ready(Ok(())))
    }

    fn forget(&mut self) {
        self.channel.forget();
    }

    fn forget_cache(&mut self) {
        self.channel.forget_cache();
    }

    fn close(&mut self) -> MoverFuture<'_, ()> {
        let conns = self.channel.take_all();
        Box::pin(async move {
            let mut set = tokio::task::JoinSet::new();
            for mut c in conns {
                set.spawn(async move {
                    if let Err(e) = tokio::io::AsyncWriteExt::shutdown(&mut c).await {
                        tracing::debug!(error = %e, "a cached data connection closed badly");
                    }
                });
            }
            let all = async { while set.join_next().await.is_some() {} };
            if tokio::time::timeout(CLOSE_LIMIT, all).await.is_err() {
                tracing::debug!("cached data connections not closed in time: dropped");
            }
        })
    }

    fn prepare_disk_stack(&mut self, stack: &StackSpec, security: &ChannelSecurity) -> Ready {
        // What an earlier choice started is abandoned first.
        self.prepared = None;
        let waits = Waits::default();
        let Ok(disk) = self.disk_stacks.resolve(stack) else {
            return waits.all();
        };
        let prepared = disk.prepare(Preparing {
            channel: security,
            delegated: self.delegated.as_ref(),
            waits: &waits,
        });
        if !prepared.is_empty() {
            self.prepared = Some((stack.clone(), prepared));
        }
        waits.all()
    }

    fn will_reuse(&self, desc: &TransferDescription) -> bool {
        Dtp::will_reuse(self, desc)
    }

    fn run<'a>(
        &'a mut self,
        desc: &'a TransferDescription,
        events: &'a mpsc::Sender<DtpEvent>,
    ) -> MoverFuture<'a, Result<TransferOutcome, DtpError>> {
        Box::pin(Dtp::run(self, desc, events))
    }

    fn bytes_moved(&self) -> u64 {
        Dtp::bytes_moved(self)
    }

    fn data_peer(&self, _desc: &crate::TransferDescription) -> Option<std::net::IpAddr> {
        Dtp::data_peer(self)
    }
}

/// Readies a new data connection (`initiator`: we connected): the transport's handshake
/// where it has one, and the GSI handshake and peer check when DCAU asks for them.
pub(crate) async fn secure(
    conn: DataConn,
    initiator: bool,
    prot: Option<&DataProtection>,
    idle: Duration,
) -> Result<DataConn, DtpError> {
    tokio::time::timeout(idle, conn.establish(initiator, prot))
        .await
        .map_err(|_| DtpError::IdleTimeout(idle.as_secs()))?
        .map_err(DtpError::Connect)
}

/// Secures connections made ahead ([`Dtp::connect_ahead`]), each on its own task, keeping
/// their order.
async fn secure_all(
    conns: Vec<DataConn>,
    prot: Option<DataProtection>,
    idle: Duration,
) -> Result<Vec<DataConn>, DtpError> {
    let prot = prot.map(Arc::new);
    each_on_its_own_task(conns, "secure", |c| {
        let prot = prot.clone();
        async move { secure(c, true, prot.as_deref(), idle).await }
    })
    .await
}

/// Readies one data connection per item, each on its own task, and returns them in the
/// items' order; the first failure fails them all.
async fn each_on_its_own_task<T, F, Fut>(
    items: Vec<T>,
    what: &'static str,
    work: F,
) -> Result<Vec<DataConn>, DtpError>
where
    T: Send + 'static,
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = Result<DataConn, DtpError>> + Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    let n = items.len();
    for (i, item) in items.into_iter().enumerate() {
        let job = work(item);
        set.spawn(async move { (i, job.await) });
    }
    let mut out: Vec<Option<DataConn>> = (0..n).map(|_| None).collect();
    while let Some(r) = set.join_next().await {
        let (i, c) = r.map_err(|e| DtpError::Connection(format!("{what} task failed: {e}")))?;
        out[i] = Some(c?);
    }
    Ok(out.into_iter().flatten().collect())
}

/// Connects to every address at once (each handshake on its own task).
pub(super) async fn connect_all(
    transports: &Arc<Transports>,
    addrs: &[SocketAddr],
    desc: &TransferDescription,
    prot: Option<DataProtection>,
    idle: Duration,
) -> Result<Vec<DataConn>, DtpError> {
    let prot = prot.map(Arc::new);
    let all = each_on_its_own_task(addrs.to_vec(), "connect", |a| {
        let (tuning, prot) = (desc.tuning, prot.clone());
        let (transports, stack) = (Arc::clone(transports), desc.stack.clone());
        async move {
            let c = transports
                .connect(&stack, a, tuning)
                .await
                .map_err(DtpError::Connect)?;
            secure(c, true, prot.as_deref(), idle).await
        }
    });
    tokio::time::timeout(idle, all)
        .await
        .map_err(|_| DtpError::IdleTimeout(idle.as_secs()))?
}
