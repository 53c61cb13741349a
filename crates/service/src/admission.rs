//! Who may hold the REST API's connections, and for how long. Each connection holds a TLS
//! session and a task, and there are [`ConnectionLimits::total`] of them: a client that has
//! not proven who it is gets a few seconds and a share of them (per address, and in all), so
//! that idle or slow connections, which anyone can open, cannot lock the service's users out.
//!
//! A connection is authenticated once its TLS handshake verified a client certificate, or
//! once one of its requests carried a known token or dashboard session.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// The REST API's connection limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections at once, in all.
    pub total: usize,
    /// Of those, connections not authenticated yet; past this, the oldest of them is closed
    /// for a new one, so the rest stays for clients that have authenticated.
    pub unauthenticated: usize,
    /// Connections at once from one address (IPv6: one /64).
    pub per_address: usize,
    /// Of those, connections not authenticated yet; more from the address are closed at once.
    pub per_address_unauthenticated: usize,
    /// Time for the TLS handshake.
    pub handshake: Duration,
    /// Time for each request's head (the first included) on a connection whose handshake
    /// verified no client certificate.
    pub first_request: Duration,
    /// Time a connection may go without authenticating; then it closes once the request in
    /// flight, if any, is answered (within [`ConnectionLimits::first_request`] more).
    pub unauthenticated_for: Duration,
    /// Time a verified client's connection waits for its next request's head.
    pub idle: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            total: 1024,
            unauthenticated: 768,
            per_address: 64,
            per_address_unauthenticated: 16,
            handshake: Duration::from_secs(5),
            first_request: Duration::from_secs(5),
            unauthenticated_for: Duration::from_secs(10),
            idle: Duration::from_secs(30),
        }
    }
}

/// The gate every connection passes: the slots, and who holds them.
pub(crate) struct Gate {
    limits: ConnectionLimits,
    slots: Arc<Semaphore>,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    per_address: HashMap<IpAddr, Counts>,
    /// The connections not authenticated yet, oldest first, each with what closes it.
    unauthenticated: BTreeMap<u64, CancellationToken>,
    next: u64,
}

#[derive(Default)]
struct Counts {
    all: usize,
    unauthenticated: usize,
}

impl Gate {
    /// A gate with `limits`.
    pub(crate) fn new(limits: ConnectionLimits) -> Arc<Gate> {
        Arc::new(Gate {
            limits,
            slots: Arc::new(Semaphore::new(limits.total.max(1))),
            held: Mutex::new(Held::default()),
        })
    }

    /// The limits it keeps.
    pub(crate) fn limits(&self) -> ConnectionLimits {
        self.limits
    }

    /// A free slot for the next connection. When every slot is taken the oldest connection
    /// that has not authenticated gives way; when all have, this waits (a flood waits at
    /// accept).
    pub(crate) async fn slot(&self) -> Result<OwnedSemaphorePermit, AcquireError> {
        if let Ok(p) = Arc::clone(&self.slots).try_acquire_owned() {
            return Ok(p);
        }
        if let Ok(mut held) = self.held.lock() {
            if let Some((_, oldest)) = held.unauthenticated.pop_first() {
                oldest.cancel();
            }
        }
        Arc::clone(&self.slots).acquire_owned().await
    }

    /// Admits a connection from `addr` in `slot`; `None` when the address holds its share
    /// (the connection is then closed).
    pub(crate) fn admit(
        self: &Arc<Self>,
        addr: IpAddr,
        slot: OwnedSemaphorePermit,
    ) -> Option<Arc<Admission>> {
        let addr = address_key(addr);
        let mut held = self.held.lock().ok()?;
        let counts = held.per_address.get(&addr);
        let (all, waiting) = counts.map_or((0, 0), |c| (c.all, c.unauthenticated));
        if all >= self.limits.per_address || waiting >= self.limits.per_address_unauthenticated {
            return None;
        }
        let counts = held.per_address.entry(addr).or_default();
        counts.all += 1;
        counts.unauthenticated += 1;
        if held.unauthenticated.len() >= self.limits.unauthenticated {
            if let Some((_, oldest)) = held.unauthenticated.pop_first() {
                oldest.cancel();
            }
        }
        let seq = held.next;
        held.next += 1;
        let closed = CancellationToken::new();
        held.unauthenticated.insert(seq, closed.clone());
        Some(Arc::new(Admission {
            gate: Arc::clone(self),
            addr,
            seq,
            closed,
            authenticated: AtomicBool::new(false),
            _slot: slot,
        }))
    }
}

/// A connection's place at the gate: its slot, until it ends.
pub struct Admission {
    gate: Arc<Gate>,
    addr: IpAddr,
    seq: u64,
    closed: CancellationToken,
    authenticated: AtomicBool,
    _slot: OwnedSemaphorePermit,
}

impl Admission {
    /// The connection's client has proven who it is: it leaves the unauthenticated share and
    /// is no longer closed to make room.
    pub fn authenticated(&self) {
        if self.authenticated.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Ok(mut held) = self.gate.held.lock() {
            held.unauthenticated.remove(&self.seq);
            if let Some(c) = held.per_address.get_mut(&self.addr) {
                c.unauthenticated = c.unauthenticated.saturating_sub(1);
            }
        }
    }

    /// Whether it has.
    pub fn is_authenticated(&self) -> bool {
        self.authenticated.load(Ordering::SeqCst)
    }

    /// Fires when the connection is to close to make room for another.
    pub(crate) fn closed(&self) -> CancellationToken {
        self.closed.clone()
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let authenticated = self.is_authenticated();
        if let Ok(mut held) = self.gate.held.lock() {
            if !authenticated {
                held.unauthenticated.remove(&self.seq);
            }
            if let Some(c) = held.per_address.get_mut(&self.addr) {
                c.all = c.all.saturating_sub(1);
                if !authenticated {
                    c.unauthenticated = c.unauthenticated.saturating_sub(1);
                }
                if c.all == 0 {
                    held.per_address.remove(&self.addr);
                }
            }
        }
    }
}

/// The address a connection counts against: IPv4 (also when mapped into IPv6) as it is, IPv6
/// by its /64, which one host usually has whole.
fn address_key(addr: IpAddr) -> IpAddr {
    match addr.to_canonical() {
        IpAddr::V6(v6) => {
            let mut s = v6.segments();
            s[4..].fill(0);
            IpAddr::V6(s.into())
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ConnectionLimits {
        ConnectionLimits {
            total: 8,
            unauthenticated: 4,
            per_address: 3,
            per_address_unauthenticated: 2,
            ..ConnectionLimits::default()
        }
    }

    async fn admit(gate: &Arc<Gate>, addr: &str) -> Option<Arc<Admission>> {
        let slot = gate.slot().await.unwrap();
        gate.admit(addr.parse().unwrap(), slot)
    }

    #[tokio::test]
    async fn one_address_gets_its_share_and_authenticated_connections_count_apart() {
        let gate = Gate::new(limits());
        let a = admit(&gate, "192.0.2.1").await.unwrap();
        let _b = admit(&gate, "192.0.2.1").await.unwrap();
        assert!(
            admit(&gate, "192.0.2.1").await.is_none(),
            "a third unauthenticated connection from one address"
        );
        // IPv4 mapped into IPv6 is the same address.
        assert!(admit(&gate, "::ffff:192.0.2.1").await.is_none());
        a.authenticated();
        let _c = admit(&gate, "192.0.2.1").await.unwrap();
        assert!(
            admit(&gate, "192.0.2.1").await.is_none(),
            "three in all from one address"
        );
        drop(a);
        assert!(
            admit(&gate, "192.0.2.1").await.is_none(),
            "still two waiting"
        );
        // One /64 is one address; another is another.
        let _d = admit(&gate, "2001:db8:0:1::1").await.unwrap();
        let _e = admit(&gate, "2001:db8:0:1::2").await.unwrap();
        assert!(admit(&gate, "2001:db8:0:1:ffff::3").await.is_none());
        assert!(admit(&gate, "2001:db8:0:2::1").await.is_some());
    }

    #[tokio::test]
    async fn the_oldest_unauthenticated_connection_makes_room_and_authenticated_ones_never_do() {
        let gate = Gate::new(limits());
        let proven = admit(&gate, "192.0.2.9").await.unwrap();
        proven.authenticated();
        let mut waiting = Vec::new();
        for i in 1..=4 {
            waiting.push(admit(&gate, &format!("198.51.100.{i}")).await.unwrap());
        }
        assert!(waiting.iter().all(|a| !a.closed().is_cancelled()));
        // Past the unauthenticated share: the oldest waiting connection gives way.
        let fifth = admit(&gate, "203.0.113.5").await.unwrap();
        assert!(waiting[0].closed().is_cancelled());
        assert!(waiting[1..].iter().all(|a| !a.closed().is_cancelled()));
        assert!(!fifth.closed().is_cancelled() && !proven.closed().is_cancelled());

        // Every slot taken: the next slot comes from the oldest waiting connection, once gone.
        let gate = Gate::new(ConnectionLimits {
            total: 3,
            ..limits()
        });
        let proven = admit(&gate, "192.0.2.9").await.unwrap();
        proven.authenticated();
        let old = admit(&gate, "198.51.100.1").await.unwrap();
        let young = admit(&gate, "198.51.100.2").await.unwrap();
        let waiter = Arc::clone(&gate);
        let next = tokio::spawn(async move { waiter.slot().await.map(drop) });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(old.closed().is_cancelled());
        assert!(!young.closed().is_cancelled() && !proven.closed().is_cancelled());
        assert!(
            !next.is_finished(),
            "the slot is free only once the connection has gone"
        );
        drop(old);
        next.await.unwrap().unwrap();
    }
}
