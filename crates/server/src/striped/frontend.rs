//! The frontend's side of striping: a session's stand-in for its DTP that hands each transfer
//! to the data nodes and merges what they report.
//!
//! Every session opens its own link to each node it uses (so a node's listener and cached data
//! connections follow the session's data channel, as in Globus, where a node forks a process
//! per frontend session). Links open lazily at SPAS/PASV/SPOR/PORT; a node that does not
//! answer is left out of that data channel and named in replies, and is tried again at the next
//! one, so a node that comes back is used without restarting the frontend.
//!
//! A transfer is node `j` of `N` running the same description with `stripe = {j, N}`: as a
//! receiver it takes whatever its listener gets; as a sender it serves the receiving stripes
//! `r ≡ j (mod N)` of the layout (`ferry_proto::stripe`). Restart markers from every node are
//! relayed as they come (each covers bytes that node has written, so their union is exactly
//! what is safe), performance markers carry the node's stripe index and the stripe count. A
//! node that fails or is lost fails the transfer with a reply naming it; the others are
//! stopped (their links are dropped).

mod channel;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_dtp::{
    ChannelSecurity, ChannelSetup, DataMover, Direction, DtpError, DtpEvent, MoverFuture,
    PassiveRequest, StripeInfo, TransferDescription, TransferOutcome,
};
use ferry_proto::command::TransferMode;
use ferry_storage::{Storage, WriteOptions};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use self::channel::hello;
use super::ipc::{IpcAuth, Link};
use super::node_job::{NodeFailure, NodeJob};

/// Nodes report progress at least this often during a transfer, so a silent one is noticed.
const HEARTBEAT_MS: u64 = 2_000;

/// The frontend's data nodes, shared by its sessions.
pub(crate) struct NodeSet {
    nodes: Vec<String>,
    auth: IpcAuth,
    timeout: Duration,
    /// Why each node was last unreachable (`None`: it answered last time).
    down: Mutex<Vec<Option<String>>>,
    /// Where the next one-node data channel starts looking (spreads PASV sessions).
    next: AtomicU64,
}

impl std::fmt::Debug for NodeSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSet")
            .field("nodes", &self.nodes)
            .finish_non_exhaustive()
    }
}

impl NodeSet {
    /// How many data nodes the frontend has.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    pub(crate) fn new(nodes: Vec<String>, auth: IpcAuth, timeout: Duration) -> NodeSet {
        let down = Mutex::new(vec![None; nodes.len()]);
        NodeSet {
            nodes,
            auth,
            timeout,
            down,
            next: AtomicU64::new(0),
        }
    }

    /// Configured nodes.
    pub(crate) fn names(&self) -> &[String] {
        &self.nodes
    }

    /// The nodes that did not answer last time, with why.
    pub(crate) fn missing(&self) -> Vec<(String, String)> {
        let down = self.down.lock().map(|d| d.clone()).unwrap_or_default();
        self.nodes
            .iter()
            .zip(down)
            .filter_map(|(n, d)| d.map(|why| (n.clone(), why)))
            .collect()
    }

    /// `" Data nodes not reachable: a (why); b (why)."`, or empty when all answer.
    pub(crate) fn missing_note(&self) -> String {
        let m = self.missing();
        if m.is_empty() {
            return String::new();
        }
        let list: Vec<String> = m.iter().map(|(n, w)| format!("{n} ({w})")).collect();
        format!(" Data nodes not reachable: {}.", list.join("; "))
    }

    fn mark(&self, i: usize, why: Option<String>) {
        if let Ok(mut d) = self.down.lock() {
            if let Some(slot) = d.get_mut(i) {
                if why.is_some() && slot.is_none() {
                    tracing::warn!(node = %self.nodes[i], why = why.as_deref().unwrap_or(""), "data node unreachable");
                } else if why.is_none() && slot.is_some() {
                    tracing::info!(node = %self.nodes[i], "data node back");
                }
                *slot = why;
            }
        }
    }
}

/// What a session tells each node when it links up.
#[derive(Debug, Clone)]
pub(crate) struct NodeLogin {
    pub(crate) account: Option<String>,
    pub(crate) read_only: bool,
    pub(crate) delegated_pem: Option<String>,
}

/// One session's DTP on remote data nodes.
pub(crate) struct RemoteDtp {
    set: Arc<NodeSet>,
    login: NodeLogin,
    links: Vec<Option<Link>>,
    /// Links being set up since login (so SPAS rarely waits for a handshake).
    pending: Vec<Option<tokio::task::JoinHandle<Result<Link, String>>>>,
    /// Nodes of the current data channel, in stripe order.
    using: Vec<usize>,
    /// Setup of the connections the nodes cached after the last transfer.
    cached: Option<(Direction, ChannelSetup, ChannelSecurity)>,
    /// The next run makes the nodes drop cached connections (SBUF, DCAU, PROT changed).
    forget_cache: bool,
    moved: Arc<AtomicU64>,
    /// The frontend's view of the shared file system: a file the nodes write together is
    /// created (and truncated) here, once, before any of them starts.
    storage: Arc<dyn Storage>,
}

impl std::fmt::Debug for RemoteDtp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteDtp")
            .field("using", &self.using)
            .finish_non_exhaustive()
    }
}

impl RemoteDtp {
    /// A session's remote DTP; starts linking up with every node at once (TCP, TLS and Hello
    /// cost a few round trips each, which a client would otherwise wait for at its first SPAS).
    pub(crate) fn new(set: Arc<NodeSet>, login: NodeLogin, storage: Arc<dyn Storage>) -> RemoteDtp {
        let links = set.nodes.iter().map(|_| None).collect();
        let pending = (0..set.nodes.len())
            .map(|i| {
                let (set, login) = (Arc::clone(&set), login.clone());
                Some(tokio::spawn(async move {
                    hello(&set.nodes[i], &set, &login).await
                }))
            })
            .collect();
        RemoteDtp {
            set,
            login,
            links,
            pending,
            using: Vec::new(),
            cached: None,
            forget_cache: false,
            moved: Arc::new(AtomicU64::new(0)),
            storage,
        }
    }

    /// Creates (and truncates) a file the nodes are about to write together: done once, here,
    /// never by each node on its own. Returns the description the nodes run.
    fn prepare(&self, desc: &TransferDescription) -> Result<TransferDescription, DtpError> {
        let mut d = desc.clone();
        if desc.direction == Direction::Receive {
            if (desc.truncate || desc.create_new) && desc.restart.is_empty() {
                let opts = WriteOptions {
                    create: true,
                    truncate: desc.truncate,
                    create_new: desc.create_new,
                };
                self.storage.open_write(&desc.path, opts)?;
            }
            d.truncate = false;
            d.create_new = false;
        }
        Ok(d)
    }

    /// Runs `desc` on the data channel's nodes, relaying their markers to `events`.
    async fn run_on_nodes(
        &mut self,
        desc: &TransferDescription,
        events: &mpsc::Sender<DtpEvent>,
    ) -> Result<TransferOutcome, DtpError> {
        let started = Instant::now();
        let reused = self.will_reuse(desc);
        self.cached = None;
        self.moved = Arc::new(AtomicU64::new(0));
        if self.using.is_empty() {
            return Err(DtpError::NoDataChannel);
        }
        // Stream mode and listings move one stream: the first node alone.
        let striped = desc.mode == TransferMode::Extended
            && matches!(desc.source, ferry_dtp::TransferSource::File);
        let using: Vec<usize> = if striped {
            self.using.clone()
        } else {
            self.using[..1].to_vec()
        };
        if using.iter().any(|i| self.links[*i].is_none()) {
            // An abort or a failed transfer dropped the links this data channel was set up on.
            self.using.clear();
            return Err(DtpError::Remote {
                code: 425,
                message: "Can't open data connection: the data channel to the data nodes was \
                          closed; send SPAS, PASV or PORT again."
                    .into(),
            });
        }
        let desc = &self.prepare(desc)?;
        let count = using.len() as u32;
        // Begin goes to the PI once every node has opened its part of the file.
        let begin_left = Arc::new(AtomicUsize::new(using.len()));
        let forget_cache = std::mem::take(&mut self.forget_cache);
        let per_node: Arc<Vec<AtomicU64>> =
            Arc::new((0..using.len()).map(|_| AtomicU64::new(0)).collect());
        let mut tasks = JoinSet::new();
        for (pos, &i) in using.iter().enumerate() {
            let Some(link) = self.links[i].take() else {
                continue;
            };
            let mut d = desc.clone();
            d.stripe = StripeInfo {
                index: pos as u32,
                count,
            };
            // A heartbeat: nodes report at least every HEARTBEAT_MS, so a silent node is lost.
            let wanted_perf = desc.markers.perf_ms;
            d.markers.perf_ms = Some(wanted_perf.map_or(HEARTBEAT_MS, |p| p.min(HEARTBEAT_MS)));
            let job = NodeJob {
                node: i,
                pos,
                count,
                events: events.clone(),
                forward_perf: wanted_perf,
                per_node: Arc::clone(&per_node),
                moved: Arc::clone(&self.moved),
                begin_left: Arc::clone(&begin_left),
            };
            tasks.spawn(job.run(link, d, forget_cache));
        }
        let mut bytes = 0u64;
        let mut streams = 0u32;
        let mut failures: Vec<DtpError> = Vec::new();
        // After the first failure the other nodes get a moment to report theirs before they
        // are stopped: a node whose disk filled fails first, but the others (whose data the
        // client stopped sending) may report their broken connections sooner, and the cause
        // is what the client must hear.
        let mut grace: Option<tokio::time::Instant> = None;
        loop {
            let joined = match grace {
                None => tasks.join_next().await,
                Some(until) => match tokio::time::timeout_at(until, tasks.join_next()).await {
                    Ok(j) => j,
                    Err(_) => {
                        tasks.abort_all();
                        grace = None;
                        continue;
                    }
                },
            };
            let Some(joined) = joined else { break };
            let Ok((i, link, result)) = joined else {
                continue;
            };
            let name = self.set.nodes[i].clone();
            match (link, result) {
                (Some(link), Ok((b, s))) => {
                    self.links[i] = Some(link);
                    bytes += b;
                    streams += s;
                }
                (link, Err(NodeFailure::Failed { code, text })) => {
                    // The node is fine; the transfer is not.
                    self.links[i] = link;
                    failures.push(node_error(&name, code, &text));
                    grace.get_or_insert_with(|| tokio::time::Instant::now() + FAILURE_GRACE);
                }
                (link, result) => {
                    let why = match result {
                        Err(NodeFailure::Lost(w)) => w,
                        _ if link.is_none() => "closed the link".into(),
                        _ => "unexpected state".into(),
                    };
                    self.lost(i, why.clone());
                    // 426: the data path broke, and a retry (with the restart markers so far)
                    // can finish on the nodes that remain.
                    failures.push(DtpError::Remote {
                        code: 426,
                        message: format!("Data node {name} lost during the transfer: {why}"),
                    });
                    tasks.abort_all();
                }
            }
        }
        // The cause before its consequences: a node's own refusal (452: no space, 550 ...)
        // over the broken data connections (426) it brought about on the others.
        let cause = failures
            .iter()
            .position(|e| !matches!(e, DtpError::Remote { code: 426, .. }))
            .unwrap_or(0);
        let failure = (!failures.is_empty()).then(|| failures.swap_remove(cause));
        if let Some(e) = failure {
            // Nodes whose tasks were stopped lost their links (and with them the transfer);
            // the others keep theirs but not their cached connections.
            self.using.retain(|i| self.links[*i].is_some());
            self.forget_cache = true;
            return Err(e);
        }
        if desc.mode == TransferMode::Extended {
            self.cached = Some((desc.direction, desc.channel.clone(), desc.security.clone()));
        }
        Ok(TransferOutcome {
            bytes,
            streams,
            duration: started.elapsed(),
            reused,
            checksums: Vec::new(),
            checksum_read_back: 0,
            tcp: None,
        })
    }
}

impl DataMover for RemoteDtp {
    fn open_passive(
        &mut self,
        req: PassiveRequest,
    ) -> MoverFuture<'_, Result<Vec<SocketAddr>, DtpError>> {
        Box::pin(async move {
            self.passive(req).await.map_err(|e| DtpError::Remote {
                code: 425,
                message: format!("Cannot open passive listener: {e}"),
            })
        })
    }

    fn set_active<'a>(
        &'a mut self,
        endpoints: &'a [SocketAddr],
    ) -> MoverFuture<'a, Result<(), DtpError>> {
        Box::pin(async move {
            self.forget();
            self.active(endpoints.len())
                .await
                .map_err(|e| DtpError::Remote {
                    code: 425,
                    message: format!("Can't open data connection: {e}"),
                })
        })
    }

    /// Forgets the data channel (the nodes' listeners go with their next setup).
    fn forget(&mut self) {
        self.cached = None;
        self.using.clear();
    }

    /// Makes the next transfer open fresh data connections.
    fn forget_cache(&mut self) {
        self.cached = None;
        self.forget_cache = true;
    }

    fn will_reuse(&self, desc: &TransferDescription) -> bool {
        desc.mode == TransferMode::Extended
            && !self.forget_cache
            && self.cached.as_ref().is_some_and(|(d, c, s)| {
                *d == desc.direction && *c == desc.channel && *s == desc.security
            })
    }

    fn run<'a>(
        &'a mut self,
        desc: &'a TransferDescription,
        events: &'a mpsc::Sender<DtpEvent>,
    ) -> MoverFuture<'a, Result<TransferOutcome, DtpError>> {
        Box::pin(self.run_on_nodes(desc, events))
    }

    /// Payload bytes the nodes reported for the last transfer.
    fn bytes_moved(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }

    fn note(&self) -> String {
        self.set.missing_note()
    }
}

impl Drop for RemoteDtp {
    fn drop(&mut self) {
        for h in self.pending.iter().flatten() {
            h.abort();
        }
    }
}

/// How long the other nodes may take to report after one failed (see `run`).
const FAILURE_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

fn node_error(name: &str, code: u16, text: &str) -> DtpError {
    DtpError::Remote {
        code,
        message: format!("Data node {name}: {text}"),
    }
}
