//! A session's data-channel state: the passive listener and the MODE E connections cached
//! between transfers.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ferry_net::{DataConn, DataListener, NetError, PortRange, SocketTuning, Transports};
use ferry_proto::stack::StackSpec;

use crate::{ChannelSetup, Direction};

/// Listener and cached connections of one session. Caching follows Globus: only MODE E
/// connections that ended with EOD (no CLOSE), reused for the next transfer in the same
/// direction with the same endpoints; any new PASV/PORT or security change forgets them.
#[derive(Debug, Default)]
pub(crate) struct DataChannel {
    listener: Option<Arc<DataListener>>,
    cached: Vec<DataConn>,
    cached_direction: Option<Direction>,
    cached_setup: Option<ChannelSetup>,
    /// Connections made ahead of a sending transfer to these endpoints
    /// ([`crate::Dtp::connect_ahead`]): connected, not yet secured or used.
    ahead: Option<(ChannelSetup, Vec<DataConn>)>,
}

impl DataChannel {
    /// Opens a new passive listener on `stack`'s transport (forgetting any previous channel)
    /// and returns its address.
    pub(crate) fn open_passive(
        &mut self,
        transports: &Transports,
        stack: &StackSpec,
        ip: IpAddr,
        range: Option<PortRange>,
        tuning: SocketTuning,
        admit_only: Option<IpAddr>,
    ) -> Result<SocketAddr, NetError> {
        self.forget();
        let l = transports.listen(stack, ip, range, tuning)?;
        l.admit_only(admit_only);
        let addr = l.local_addr()?;
        self.listener = Some(Arc::new(l));
        Ok(addr)
    }

    /// Drops the listener and every cached connection.
    pub(crate) fn forget(&mut self) {
        self.listener = None;
        self.forget_cache();
    }

    /// Drops cached connections but keeps the listener.
    pub(crate) fn forget_cache(&mut self) {
        self.cached.clear();
        self.cached_direction = None;
        self.cached_setup = None;
        self.ahead = None;
    }

    /// Keeps connections made ahead of the next sending transfer to `setup`'s endpoints.
    pub(crate) fn keep_ahead(&mut self, setup: &ChannelSetup, conns: Vec<DataConn>) {
        self.ahead = Some((setup.clone(), conns));
    }

    /// Takes the connections made ahead for a sending transfer to `setup`, if they were made
    /// for it; others are dropped.
    pub(crate) fn take_ahead(&mut self, setup: &ChannelSetup) -> Vec<DataConn> {
        match self.ahead.take() {
            Some((s, conns)) if &s == setup => conns,
            _ => Vec::new(),
        }
    }

    /// Drops the listener and hands over the cached connections (to be closed).
    pub(crate) fn take_all(&mut self) -> Vec<DataConn> {
        let conns = std::mem::take(&mut self.cached);
        self.forget();
        conns
    }

    /// The passive listener, if one is open.
    pub(crate) fn listener(&self) -> Option<Arc<DataListener>> {
        self.listener.clone()
    }

    /// Whether a transfer in `direction` with `setup` would reuse cached connections.
    pub(crate) fn can_reuse(&self, direction: Direction, setup: &ChannelSetup) -> bool {
        !self.cached.is_empty()
            && self.cached_direction == Some(direction)
            && self.cached_setup.as_ref() == Some(setup)
    }

    /// Takes the cached connections usable for this transfer; drops mismatched ones.
    pub(crate) fn take_cached(
        &mut self,
        direction: Direction,
        setup: &ChannelSetup,
    ) -> Vec<DataConn> {
        if self.can_reuse(direction, setup) {
            self.cached_direction = None;
            self.cached_setup = None;
            std::mem::take(&mut self.cached)
        } else {
            self.forget_cache();
            Vec::new()
        }
    }

    /// Keeps connections for the next transfer.
    pub(crate) fn put_back(
        &mut self,
        direction: Direction,
        setup: &ChannelSetup,
        conns: Vec<DataConn>,
    ) {
        if conns.is_empty() {
            return;
        }
        self.cached = conns;
        self.cached_direction = Some(direction);
        self.cached_setup = Some(setup.clone());
    }
}
