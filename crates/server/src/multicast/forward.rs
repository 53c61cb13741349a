//! One child of a multicast node: a GridFTP put to the child's server, run on a thread (and
//! runtime) of its own, whose bytes are the node's incoming blocks as they arrive.

use std::sync::Arc;

use ferry_client::{
    ClientError, FileRequest, GsiOptions, GsiSetup, Location, Progress, RemoteSession,
};
use ferry_dtp::disk_stack::News;
use ferry_dtp::ChannelSecurity;
use ferry_gsi::DataSecurity;
use ferry_proto::command::Dcau;
use ferry_proto::multicast::{is_report, Child, ForwardFailure, MulticastOptions};
use ferry_proto::RangeSet;
use tokio::sync::oneshot;

use super::tee::{ChildView, Tee};

/// Most streams a forwarded transfer opens (the server's own cap on `OPTS RETR Parallelism`).
const MAX_STREAMS: u32 = 64;

/// How long a child's server may take to let the forwarder in.
const LOGIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// How a node forwards: the options every child's transfer shares.
#[derive(Debug, Clone)]
pub(super) struct Forwarding {
    pub(super) parallelism: u32,
    pub(super) tcp_buffer: Option<u32>,
    pub(super) subject: Option<String>,
    /// DCAU and PROT of the node's own transfer, asked of every child's data channel.
    pub(super) channel: ChannelSecurity,
    /// The credential the user delegated to the session, for gsiftp:// children.
    pub(super) delegated: Option<Arc<DataSecurity>>,
    /// The networks children (and their data listeners) may be in.
    pub(super) children_in: Arc<Vec<ipnet::IpNet>>,
}

impl Forwarding {
    pub(super) fn new(
        o: &MulticastOptions,
        channel: &ChannelSecurity,
        delegated: Option<Arc<DataSecurity>>,
        children_in: Arc<Vec<ipnet::IpNet>>,
    ) -> Forwarding {
        Forwarding {
            parallelism: o.parallelism.min(MAX_STREAMS),
            tcp_buffer: o.tcp_buffer.map(|b| u32::try_from(b).unwrap_or(u32::MAX)),
            subject: o.subject.clone(),
            channel: channel.clone(),
            delegated,
            children_in,
        }
    }

    /// Refuses a child address outside the admin's networks.
    fn admits(&self, ip: std::net::IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.children_in.iter().any(|n| n.contains(&ip))
    }
}

impl Forwarding {
    /// Whether a child logged in under `self` may carry a transfer that forwards as `other`
    /// says: the same data-channel security and the same delegated credential.
    pub(super) fn same_login(&self, other: &Forwarding) -> bool {
        let same_credential = match (&self.delegated, &other.delegated) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        self.channel == other.channel && same_credential
    }
}

/// Takes child `index` out of the buffer when its thread ends, however it ends (a panic too),
/// so the node never waits for a reader that is gone.
struct Leave<'a>(&'a Tee, usize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.leave(self.1);
    }
}

/// A login older than this is not trusted to have lasted (servers end idle sessions): the
/// forwarder logs in again when the data comes.
const PREPARED_FRESH: std::time::Duration = std::time::Duration::from_secs(60);

/// One child's forwarder, started: its thread logs in to the child's server at once (and
/// tells it its share of the tree, so the child prepares its own children in turn), then
/// waits for the node's transfer. Dropped without [`Started::go`], the thread ends the
/// session and stops.
pub(super) struct Started {
    url: String,
    go: oneshot::Sender<Go>,
    done: Ended,
    /// Fires (or closes) once the child is ready for the data: logged in, its data
    /// connections open; or once that failed. The child hears of its own subtree after, and
    /// takes the STOR only once that is ready in turn.
    pub(super) ready: Option<oneshot::Receiver<()>>,
}

/// What a child's forwarder needs once the transfer comes: its reader of the buffer, the
/// bytes every destination holds already (a restart), and where to report failures at once.
pub(super) struct Go {
    tee: Arc<Tee>,
    index: usize,
    restart: RangeSet,
    news: News,
}

/// How a child's forward ended: the hops of its subtree that failed (the child itself, with
/// what its subtree had stored, or hops below it that it named).
pub(super) type Ended = oneshot::Receiver<Result<(), Vec<ForwardFailure>>>;

impl Started {
    /// Hands the child its reader `index` of `tee`: the put starts, skipping `restart`, and
    /// failures go to `news` as they happen. Returns the child's URL and how its forward ends.
    pub(super) fn go(
        self,
        tee: &Arc<Tee>,
        index: usize,
        restart: &RangeSet,
        news: &News,
    ) -> (String, Ended) {
        let go = Go {
            tee: Arc::clone(tee),
            index,
            restart: restart.clone(),
            news: news.clone(),
        };
        if self.go.send(go).is_err() {
            // The thread is gone: nothing will read for this child.
            tee.leave(index);
        }
        (self.url, self.done)
    }
}

/// Starts `child`'s forwarder (see [`Started`]).
pub(super) fn start(child: Child, how: Forwarding) -> std::io::Result<Started> {
    let (go_tx, go_rx) = oneshot::channel::<Go>();
    let (tx, done) = oneshot::channel();
    let (ready_tx, ready) = oneshot::channel();
    let url = child.url.clone();
    std::thread::Builder::new()
        .name("multicast-child".into())
        .spawn(move || {
            // Reads of the buffer wait off the runtime's workers (see Tee::wait); a worker for
            // each stream and one more keep the control channel and the streams running.
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(how.parallelism as usize + 1)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    if let Ok(go) = go_rx.blocking_recv() {
                        go.tee.leave(go.index);
                        let f = ForwardFailure {
                            url: child.url.clone(),
                            held: RangeSet::new(),
                            error: format!("cannot start a runtime: {e}"),
                        };
                        go.news.say(f.to_line());
                        let _ = tx.send(Err(vec![f]));
                    }
                    return;
                }
            };
            let result = rt.block_on(run(&child, &how, ready_tx, go_rx));
            rt.shutdown_background();
            let Some(result) = result else { return };
            if let Err(failed) = &result {
                for f in failed {
                    tracing::warn!(url = %f.url, error = %f.error, held = %f.held, "multicast: forwarding failed");
                }
            }
            let _ = tx.send(result);
        })?;
    Ok(Started {
        url,
        go: go_tx,
        done,
        ready: Some(ready),
    })
}

/// The forwarder's thread: logs in, waits for the data, puts it; `None` when no transfer came.
async fn run(
    child: &Child,
    how: &Forwarding,
    ready: oneshot::Sender<()>,
    go: oneshot::Receiver<Go>,
) -> Option<Result<(), Vec<ForwardFailure>>> {
    let mut session = connect(child, how).await;
    if let Ok(s) = &mut session {
        // The put's settings and data connections now, while the node's inbound link is
        // still quiet; the restart ranges come with the transfer.
        if let Err(e) = s.ready_put(&request(child, how, &RangeSet::new())).await {
            tracing::debug!(url = %child.url, error = %e, "multicast: child's data channel not ready ahead");
        }
    }
    // Ready: the node may take its data now. The child's share of the tree goes after, so the
    // levels below prepare while the data comes down to this one (their own inbound links
    // stay quiet until they are ready, as each child takes its STOR only after this reply).
    let _ = ready.send(());
    if let Ok(s) = &mut session {
        if let Err(e) = s.set_disk_stack(child.disk_stack.as_deref()).await {
            session = Err(e.to_string());
        }
    }
    let logged_in = std::time::Instant::now();
    let Ok(go) = go.await else {
        // The session chose another stack, or ended: no transfer comes.
        if let Ok(s) = session {
            s.close().await;
        }
        return None;
    };
    // Dropped before the runtime even on a panic: streams still blocked in a read end once
    // the child has left, and the runtime has nothing left to wait for.
    let _leave = Leave(&go.tee, go.index);
    if session.is_err() || logged_in.elapsed() > PREPARED_FRESH {
        // A login that failed or may have timed out since is tried (again) now.
        if let Ok(old) = session {
            old.close().await;
        }
        session = login(child, how).await;
    }
    let mut relayed = Vec::new();
    let ended = match session {
        Ok(s) => put(s, child, how, &go, &mut relayed).await,
        Err(e) => Err(Stopped::Child(e)),
    };
    Some(match ended {
        Ok(()) => Ok(()),
        Err(Stopped::Below(named)) => {
            // The child's own part is complete: only the hops it names failed. Those it
            // named while the transfer ran went up then.
            for f in named.iter().filter(|f| !relayed.contains(f)) {
                go.news.say(f.to_line());
            }
            Err(named)
        }
        Err(Stopped::Child(error)) => {
            // The child's whole subtree failed with it, holding what the child last confirmed;
            // what it named of its own subtree before is part of this.
            let f = ForwardFailure {
                url: child.url.clone(),
                held: go.tee.confirmed(go.index),
                error,
            };
            go.news.say(f.to_line());
            Err(vec![f])
        }
    })
}

/// Why a child's put stopped short.
enum Stopped {
    /// The child, and so its subtree, failed.
    Child(String),
    /// The child's own part is complete; these hops below it failed.
    Below(Vec<ForwardFailure>),
}

/// A session on the child's server, logged in as the node's own transfer says, and told its
/// share of the tree (`SITE SETDISKSTACK`).
async fn login(child: &Child, how: &Forwarding) -> Result<RemoteSession, String> {
    let mut session = connect(child, how).await?;
    session
        .set_disk_stack(child.disk_stack.as_deref())
        .await
        .map_err(|e| e.to_string())?;
    Ok(session)
}

/// A session on the child's server, logged in as the node's own transfer says.
async fn connect(child: &Child, how: &Forwarding) -> Result<RemoteSession, String> {
    let Ok(Location::Remote(url)) = Location::parse(&child.url) else {
        return Err("not a URL ferry can write to".into());
    };
    let options = GsiOptions {
        subject: how.subject.clone(),
        dcau: how.channel.dcau != Dcau::None,
        prot: how.channel.prot,
        ..GsiOptions::default()
    };
    let gsi = match &how.delegated {
        Some(s) if url.scheme == ferry_client::url::Scheme::GsiFtp => {
            GsiSetup::with_credential(options, s.credential().clone(), Arc::clone(s.trust()))
                .map_err(|e| e.to_string())?
        }
        None if url.scheme == ferry_client::url::Scheme::GsiFtp => {
            return Err("a gsiftp:// hop needs a credential: log in with GSI and delegate".into())
        }
        _ => GsiSetup::new(options),
    };
    let outside = |ip| {
        format!("{ip} is outside the networks this server forwards to (its --multicast-allow-to)")
    };
    let port = url.port;
    let resolved = tokio::time::timeout(
        LOGIN_TIMEOUT,
        tokio::net::lookup_host((url.host.as_str(), port)),
    )
    .await
    .map_err(|_| format!("cannot resolve {} in time", url.host))?
    .map_err(|e| format!("cannot resolve {}: {e}", url.host))?
    .collect::<Vec<_>>();
    if resolved.is_empty() {
        return Err(format!("{} has no address", url.host));
    }
    if let Some(a) = resolved.iter().find(|a| !how.admits(a.ip())) {
        return Err(outside(a.ip()));
    }
    let mut session = tokio::time::timeout(LOGIN_TIMEOUT, RemoteSession::connect(&url, &gsi))
        .await
        .map_err(|_| format!("no login within {} s", LOGIN_TIMEOUT.as_secs()))?
        .map_err(|e| e.to_string())?;
    // The name may resolve elsewhere by the time it is connected to.
    let peer = session.peer();
    if !how.admits(peer.ip()) {
        return Err(outside(peer.ip()));
    }
    // The child itself takes the data: a reply naming another host is refused.
    session.require_data_at_peer();
    Ok(session)
}

/// The put to `child`, skipping `restart`.
fn request(child: &Child, how: &Forwarding, restart: &RangeSet) -> FileRequest {
    FileRequest {
        parallelism: how.parallelism,
        tcp_buffer: how.tcp_buffer,
        disk_stack: child.disk_stack.clone(),
        restart: restart.clone(),
        ..FileRequest::default()
    }
}

/// Puts the node's data to the child. What the child stores is confirmed in the buffer (for
/// the node's restart markers); hops the child reports failed below it go up at once, and
/// into `relayed`.
async fn put(
    mut session: RemoteSession,
    child: &Child,
    how: &Forwarding,
    go: &Go,
    relayed: &mut Vec<ForwardFailure>,
) -> Result<(), Stopped> {
    let Ok(Location::Remote(url)) = Location::parse(&child.url) else {
        return Err(Stopped::Child("not a URL ferry can write to".into()));
    };
    let req = request(child, how, &go.restart);
    let view = Arc::new(ChildView {
        tee: Arc::clone(&go.tee),
        child: go.index,
    });
    let mut on_progress = |p: Progress| match p {
        Progress::Stored(r) => go.tee.confirm(go.index, &r),
        Progress::ForwardFailed(f) => {
            go.news.say(f.to_line());
            relayed.push(f);
        }
        _ => {}
    };
    let outcome = match session
        .put_from(view, &url.path, &req, &mut on_progress)
        .await
    {
        Ok(o) => o,
        Err(ClientError::Refused { reply, .. }) if is_report(&reply) => {
            session.close().await;
            return Err(Stopped::Below(ForwardFailure::all_in(&reply)));
        }
        Err(e) => return Err(Stopped::Child(e.to_string())),
    };
    tracing::debug!(url = %child.url, bytes = outcome.bytes, "multicast: forwarded");
    session.close().await;
    Ok(())
}
