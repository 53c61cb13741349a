//! Logged-in sessions kept by server, so planning and the files after the first reuse them.

use std::sync::Arc;

use crate::choose::Seen;
use crate::gsi::GsiSetup;
use crate::session::RemoteSession;
use crate::url::{Location, RemoteUrl};
use crate::ClientError;

/// Sessions, one per server (and login).
#[derive(Debug, Default)]
pub struct Sessions {
    open: Vec<RemoteSession>,
    gsi: Arc<GsiSetup>,
    /// What the last large file over TCP showed of each path, by its ends (`path`).
    seen: Vec<((String, String), Seen)>,
}

/// A path's ends as keys: a server by its authority, this host as "".
fn path(src: &Location, dst: &Location) -> (String, String) {
    let end = |l: &Location| match l {
        Location::Remote(r) => r.authority(),
        Location::Local(_) => String::new(),
    };
    (end(src), end(dst))
}

impl Sessions {
    /// No sessions yet; `gsiftp://` sessions with the default GSI options.
    pub fn new() -> Sessions {
        Sessions::default()
    }

    /// No sessions yet; `gsiftp://` sessions as `gsi` says.
    pub fn with_gsi(gsi: Arc<GsiSetup>) -> Sessions {
        Sessions {
            open: Vec::new(),
            gsi,
            seen: Vec::new(),
        }
    }

    /// The GSI setup new sessions use.
    pub fn gsi(&self) -> &Arc<GsiSetup> {
        &self.gsi
    }

    /// The session for `url`'s server, connecting the first time.
    pub async fn get(&mut self, url: &RemoteUrl) -> Result<&mut RemoteSession, ClientError> {
        self.open.retain(|s| !s.is_broken());
        let found = self.open.iter().position(|s| s.server().same_server(url));
        let i = match found {
            Some(i) => i,
            None => {
                self.open
                    .push(RemoteSession::connect(url, &self.gsi).await?);
                self.open.len() - 1
            }
        };
        Ok(&mut self.open[i])
    }

    /// The session for a remote location; `None` for a local one.
    pub async fn for_location(
        &mut self,
        loc: &Location,
    ) -> Result<Option<&mut RemoteSession>, ClientError> {
        match loc {
            Location::Remote(r) => Ok(Some(self.get(r).await?)),
            Location::Local(_) => Ok(None),
        }
    }

    /// Two distinct sessions at once (third-party: source and destination). When both URLs are
    /// on the same server, the second is a separate connection.
    pub async fn pair(
        &mut self,
        a: &RemoteUrl,
        b: &RemoteUrl,
    ) -> Result<(&mut RemoteSession, &mut RemoteSession), ClientError> {
        self.open.retain(|s| !s.is_broken());
        let ia = match self.open.iter().position(|s| s.server().same_server(a)) {
            Some(i) => i,
            None => {
                self.open.push(RemoteSession::connect(a, &self.gsi).await?);
                self.open.len() - 1
            }
        };
        let ib = match self
            .open
            .iter()
            .enumerate()
            .position(|(i, s)| i != ia && s.server().same_server(b))
        {
            Some(i) => i,
            None => {
                self.open.push(RemoteSession::connect(b, &self.gsi).await?);
                self.open.len() - 1
            }
        };
        let (lo, hi) = (ia.min(ib), ia.max(ib));
        let (left, right) = self.open.split_at_mut(hi);
        let (x, y) = (&mut left[lo], &mut right[0]);
        Ok(if ia < ib { (x, y) } else { (y, x) })
    }

    /// Ends every session ([`RemoteSession::close`]), all at once.
    pub async fn close(self) {
        let mut set = tokio::task::JoinSet::new();
        for s in self.open {
            set.spawn(s.close());
        }
        while set.join_next().await.is_some() {}
    }

    /// What the last large file over TCP from `src` to `dst` showed of that path.
    pub(crate) fn seen(&self, src: &Location, dst: &Location) -> Option<&Seen> {
        let key = path(src, dst);
        self.seen.iter().find(|(k, _)| *k == key).map(|(_, s)| s)
    }

    /// Keeps what a file from `src` to `dst` showed of that path, in place of what an earlier
    /// one did.
    pub(crate) fn saw(&mut self, src: &Location, dst: &Location, seen: Seen) {
        let key = path(src, dst);
        self.seen.retain(|(k, _)| *k != key);
        self.seen.push((key, seen));
    }

    /// Drops the session for `url` (after a network error, so the next use reconnects).
    pub fn drop_server(&mut self, url: &RemoteUrl) {
        self.open.retain(|s| !s.server().same_server(url));
    }
}
