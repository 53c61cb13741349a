//! `parallel=streams`: a transfer's parallel data connections as streams of one QUIC
//! connection, instead of one QUIC connection each (`parallel=connections`, the default).
//!
//! One connection means one congestion controller and one handshake for all of a transfer's
//! streams, and one UDP socket at each end. The connecting side keeps the connection it opened
//! to a listener, for a set of options and credential, while any of its streams lives
//! ([`join`]): the transfer's other streams open on it. The listening side, once it answered
//! the connection for a transfer, takes each further stream the peer opens on it as one more
//! data connection of its listener ([`accept_more`]); each still proves the session key, when
//! there is one. The connecting side closes the connection when its last stream has ended and
//! lingered (the peer acknowledged its bytes).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Arrival, Options};
use crate::{DataProtection, SocketTuning};

/// Streams one connection may carry at once (a transfer's parallelism, with room).
pub(super) const MAX_STREAMS: u32 = 1024;

/// A QUIC connection that several data connections share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) conn: quinn::Connection,
    /// The connecting side's own endpoint.
    endpoint: Option<quinn::Endpoint>,
}

impl Shared {
    pub(super) fn new(conn: quinn::Connection, endpoint: Option<quinn::Endpoint>) -> Shared {
        Shared { conn, endpoint }
    }

    pub(super) fn local_addr(&self) -> Option<SocketAddr> {
        self.endpoint.as_ref().and_then(|e| e.local_addr().ok())
    }
}

impl Drop for Shared {
    /// The last stream has ended (each waited for the peer to acknowledge its bytes).
    fn drop(&mut self) {
        self.conn.close(0u8.into(), b"");
        if let (Some(endpoint), Ok(runtime)) =
            (self.endpoint.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
            });
        }
    }
}

/// What a connecting side shares a connection by: the listener, the options, the socket
/// tuning and the transfer's credential and checks (connections made under another credential
/// are not reused).
#[derive(Debug, PartialEq)]
pub(super) struct DialKey {
    peer: SocketAddr,
    options: Options,
    tuning: SocketTuning,
    credential: Option<(usize, bool, String)>,
}

impl DialKey {
    pub(super) fn new(
        peer: SocketAddr,
        options: Options,
        tuning: SocketTuning,
        protection: Option<&DataProtection>,
    ) -> DialKey {
        DialKey {
            peer,
            options,
            tuning,
            credential: protection.map(|p| {
                (
                    Arc::as_ptr(&p.security) as *const () as usize,
                    p.protected,
                    format!("{:?}", p.check),
                )
            }),
        }
    }
}

type Slot = Arc<tokio::sync::Mutex<Weak<Shared>>>;

fn dialed() -> &'static Mutex<Vec<(DialKey, Slot)>> {
    static DIALED: OnceLock<Mutex<Vec<(DialKey, Slot)>>> = OnceLock::new();
    DIALED.get_or_init(Mutex::default)
}

/// The connection to open a stream on for `key`: a live one this process opened, or a new one
/// `open` makes (`true`: this call made it). Concurrent callers with one key wait for one
/// handshake.
pub(super) async fn join<F, Fut>(key: DialKey, open: F) -> io::Result<(Arc<Shared>, bool)>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = io::Result<Shared>>,
{
    let slot = {
        let mut all = dialed().lock().unwrap_or_else(|e| e.into_inner());
        // Slots nobody waits on whose connection is gone.
        all.retain(|(_, s)| {
            Arc::strong_count(s) > 1 || s.try_lock().map_or(true, |w| w.strong_count() > 0)
        });
        match all.iter().find(|(k, _)| *k == key) {
            Some((_, s)) => Arc::clone(s),
            None => {
                let s = Slot::default();
                all.push((key, Arc::clone(&s)));
                s
            }
        }
    };
    let mut held = slot.lock().await;
    if let Some(shared) = held.upgrade() {
        if shared.conn.close_reason().is_none() {
            return Ok((shared, false));
        }
    }
    let shared = Arc::new(open().await?);
    *held = Arc::downgrade(&shared);
    Ok((shared, true))
}

/// The listening side: hands each further stream the peer opens on the connection to the
/// listener (`more`), as one more data connection. It holds the connection until the peer
/// closes it (or it idles out), so a stream that arrives after the earlier ones ended still
/// finds it; the connecting side closes once its own streams are done.
pub(super) async fn accept_more(shared: Arc<Shared>, more: mpsc::Sender<Arrival>) {
    while let Ok((send, recv)) = shared.conn.accept_bi().await {
        let arrival = Arrival::Stream(Box::new((Arc::clone(&shared), send, recv)));
        if more.send(arrival).await.is_err() {
            return;
        }
    }
}
