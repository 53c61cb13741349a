//! One child of a multicast node: a GridFTP put to the child's server, run on a thread (and
//! runtime) of its own, whose bytes are the node's incoming blocks as they arrive.

use std::sync::Arc;

use ferry_client::{FileRequest, GsiOptions, GsiSetup, Location, RemoteSession};
use ferry_dtp::ChannelSecurity;
use ferry_gsi::DataSecurity;
use ferry_proto::command::Dcau;
use ferry_proto::multicast::{Child, MulticastOptions};
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
}

impl Forwarding {
    pub(super) fn new(
        o: &MulticastOptions,
        channel: &ChannelSecurity,
        delegated: Option<Arc<DataSecurity>>,
    ) -> Forwarding {
        Forwarding {
            parallelism: o.parallelism.min(MAX_STREAMS),
            tcp_buffer: o.tcp_buffer.map(|b| u32::try_from(b).unwrap_or(u32::MAX)),
            subject: o.subject.clone(),
            channel: channel.clone(),
            delegated,
        }
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

/// Starts child `index`'s transfer; the receiver says how it ended, naming the child's URL.
pub(super) fn start(
    child: Child,
    index: usize,
    how: Forwarding,
    tee: Arc<Tee>,
) -> std::io::Result<oneshot::Receiver<Result<(), String>>> {
    let (tx, rx) = oneshot::channel();
    let url = child.url.clone();
    std::thread::Builder::new()
        .name(format!("multicast-{index}"))
        .spawn(move || {
            // Reads of the buffer block their thread (see Tee::read): a worker for each
            // stream and one more keep the control channel and the other streams running.
            let result = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(how.parallelism as usize + 1)
                .enable_all()
                .build()
            {
                Ok(rt) => {
                    // Declared after the runtime, so dropped before it even on a panic:
                    // streams still blocked in a read end once the child has left, and the
                    // runtime has nothing left to wait for.
                    let leave = Leave(&tee, index);
                    let r = rt.block_on(put(&child, index, &how, &tee));
                    drop(leave);
                    rt.shutdown_background();
                    r
                }
                Err(e) => {
                    tee.leave(index);
                    Err(format!("cannot start a runtime: {e}"))
                }
            };
            if let Err(e) = &result {
                tracing::warn!(url = %child.url, error = %e, "multicast: forwarding failed");
            }
            let _ = tx.send(result.map_err(|e| format!("{url}: {e}")));
        })?;
    Ok(rx)
}

async fn put(child: &Child, index: usize, how: &Forwarding, tee: &Arc<Tee>) -> Result<(), String> {
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
    let mut session = tokio::time::timeout(LOGIN_TIMEOUT, RemoteSession::connect(&url, &gsi))
        .await
        .map_err(|_| format!("no login within {} s", LOGIN_TIMEOUT.as_secs()))?
        .map_err(|e| e.to_string())?;
    let req = FileRequest {
        parallelism: how.parallelism,
        tcp_buffer: how.tcp_buffer,
        disk_stack: child.disk_stack.clone(),
        ..FileRequest::default()
    };
    let view = Arc::new(ChildView {
        tee: Arc::clone(tee),
        child: index,
    });
    let outcome = session
        .put_from(view, &url.path, &req, &mut |_| {})
        .await
        .map_err(|e| e.to_string())?;
    tracing::debug!(url = %child.url, bytes = outcome.bytes, "multicast: forwarded");
    let _ = session.command(&ferry_proto::Command::Quit).await;
    Ok(())
}
