//! The running emulator: a reader and a writer thread per host interface, and one for the
//! routers. A reader takes each packet from its host's TUN device and decides through the
//! shaper of its first link when it leaves that link (or drops it). A packet whose path goes on
//! (through a router) waits for the router thread until it reaches the next link, and is
//! admitted there then, in the order packets arrive at the router: a link's queue holds what
//! reached it, not what is still queued on the links before it. Admitting a packet on every
//! link of its path as it was read put other hosts' packets behind data that was still in the
//! sender's own uplink queue: a forwarding node's acknowledgements, crossing its downlink while
//! that carried data at the rate it came, were dropped as if the downlink's queue were full,
//! and its outgoing TCP streams sat in retransmission backoff for seconds. The last link
//! hands the packet to the destination's writer, which writes it into the destination's TUN
//! device at its time.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use crate::shaper::{Shaper, Verdict};
use crate::topology::Lab;

/// How early a packet may leave, to batch writes.
const EARLY: std::time::Duration = std::time::Duration::from_micros(100);

/// A packet waiting for a time (ordered by time, then arrival): to leave into its
/// destination's interface, or, in transit, to reach link `hop` of the path from host `from` to
/// host `dst`.
struct Waiting {
    at: Instant,
    seq: u64,
    bytes: Vec<u8>,
    from: usize,
    dst: usize,
    hop: usize,
}

impl PartialEq for Waiting {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Waiting {}
impl PartialOrd for Waiting {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Waiting {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// Packets for one host (or for the routers), soonest first.
#[derive(Default)]
struct Outbox {
    queue: Mutex<BinaryHeap<Reverse<Waiting>>>,
    ready: Condvar,
}

impl Outbox {
    fn push(&self, w: Waiting) {
        if let Ok(mut q) = self.queue.lock() {
            let soonest = q.peek().is_none_or(|Reverse(h)| w < *h);
            q.push(Reverse(w));
            if soonest {
                self.ready.notify_one();
            }
        }
    }
}

/// The shapers of the links from every host to every host: `[from][to]`, in path order.
type Paths = Vec<Vec<Vec<Arc<Mutex<Shaper>>>>>;

/// Counters the emulator keeps (`ferry-netlab stats` prints them).
#[derive(Debug, Default)]
pub struct Counters {
    /// Packets delivered.
    pub delivered: AtomicU64,
    /// Packets dropped by random loss.
    pub lost: AtomicU64,
    /// Packets dropped because a queue was full.
    pub queue_full: AtomicU64,
    /// Packets to addresses outside the lab, or not IPv4.
    pub unroutable: AtomicU64,
}

/// Runs the emulator over `tuns` (one per host of `lab`, in the same order) until a thread
/// fails; never returns otherwise.
pub fn run(lab: &Lab, tuns: Vec<File>, counters: Arc<Counters>) -> std::io::Error {
    let n = lab.hosts.len();
    let by_addr: Arc<HashMap<Ipv4Addr, usize>> = Arc::new(
        lab.hosts
            .iter()
            .enumerate()
            .map(|(i, h)| (h.addr, i))
            .collect(),
    );
    // One shaper per link direction, shared by every path that crosses it (the router's links
    // carry several hosts' traffic).
    let mut shapers: HashMap<(String, String), Arc<Mutex<Shaper>>> = HashMap::new();
    for (seed, (key, p)) in lab.links.iter().enumerate() {
        shapers.insert(
            key.clone(),
            Arc::new(Mutex::new(Shaper::new(*p, seed as u64 + 1))),
        );
    }
    let path_of = |from: &str, to: &str| -> Vec<Arc<Mutex<Shaper>>> {
        lab.route(from, to)
            .iter()
            .filter_map(|k| shapers.get(k).map(Arc::clone))
            .collect()
    };
    let paths: Arc<Paths> = Arc::new(
        lab.hosts
            .iter()
            .map(|a| {
                lab.hosts
                    .iter()
                    .map(|b| path_of(&a.name, &b.name))
                    .collect()
            })
            .collect(),
    );
    let outboxes: Vec<Arc<Outbox>> = (0..n).map(|_| Arc::new(Outbox::default())).collect();
    let transit = Arc::new(Outbox::default());
    let seq = Arc::new(AtomicU64::new(0));
    let (fail_tx, fail_rx) = std::sync::mpsc::channel::<std::io::Error>();
    for (i, tun) in tuns.into_iter().enumerate() {
        let reader = match tun.try_clone() {
            Ok(f) => f,
            Err(e) => return e,
        };
        let hops = Hops {
            paths: Arc::clone(&paths),
            outboxes: outboxes.clone(),
            transit: Arc::clone(&transit),
            counters: Arc::clone(&counters),
        };
        let (by_addr, seq, fail) = (Arc::clone(&by_addr), Arc::clone(&seq), fail_tx.clone());
        let mtu = lab.hosts[i].mtu as usize;
        std::thread::spawn(move || {
            let e = read_loop(reader, i, mtu, &hops, &by_addr, &seq);
            let _ = fail.send(e);
        });
        let (outbox, counters_w, fail) = (
            Arc::clone(&outboxes[i]),
            Arc::clone(&counters),
            fail_tx.clone(),
        );
        std::thread::spawn(move || {
            let e = write_loop(tun, &outbox, &counters_w);
            let _ = fail.send(e);
        });
    }
    let hops = Hops {
        paths,
        outboxes,
        transit: Arc::clone(&transit),
        counters,
    };
    let fail = fail_tx.clone();
    std::thread::spawn(move || {
        let e = due_loop(&hops.transit, |w| {
            hops.admit(w);
            Ok(())
        });
        let _ = fail.send(e);
    });
    fail_rx
        .recv()
        .unwrap_or_else(|_| std::io::Error::other("emulator threads ended"))
}

/// Where packets go between links, and what is counted on the way.
struct Hops {
    paths: Arc<Paths>,
    outboxes: Vec<Arc<Outbox>>,
    transit: Arc<Outbox>,
    counters: Arc<Counters>,
}

impl Hops {
    /// Admits `w` on link `w.hop` of its path at `w.at`, when it reaches that link; it goes on
    /// to the next link, or to its destination's writer after the last.
    fn admit(&self, w: Waiting) {
        let path = &self.paths[w.from][w.dst];
        let verdict = match path.get(w.hop).map(|l| l.lock()) {
            Some(Ok(mut link)) => link.admit(w.at, w.bytes.len()),
            _ => {
                self.counters.unroutable.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        match verdict {
            Verdict::Depart(at) => {
                let hop = w.hop + 1;
                let w = Waiting { at, hop, ..w };
                if hop < path.len() {
                    self.transit.push(w);
                } else {
                    self.outboxes[w.dst].push(w);
                }
            }
            Verdict::Lost => {
                self.counters.lost.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::QueueFull => {
                self.counters.queue_full.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn read_loop(
    mut tun: File,
    from: usize,
    mtu: usize,
    hops: &Hops,
    by_addr: &HashMap<Ipv4Addr, usize>,
    seq: &AtomicU64,
) -> std::io::Error {
    loop {
        let mut buf = vec![0u8; mtu.max(1500) + 64];
        let len = match tun.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return e,
        };
        let now = Instant::now();
        buf.truncate(len);
        let Some(dst) = ipv4_destination(&buf).and_then(|a| by_addr.get(&a).copied()) else {
            hops.counters.unroutable.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        // The first link is this host's own: only this thread admits on it, in time order.
        hops.admit(Waiting {
            at: now,
            seq: seq.fetch_add(1, Ordering::Relaxed),
            bytes: buf,
            from,
            dst,
            hop: 0,
        });
    }
}

fn write_loop(mut tun: File, outbox: &Outbox, counters: &Counters) -> std::io::Error {
    due_loop(outbox, |w| {
        match tun.write(&w.bytes) {
            Ok(_) => {
                counters.delivered.fetch_add(1, Ordering::Relaxed);
            }
            // A host whose interface is gone or full loses the packet, as a wire would.
            Err(e) if e.raw_os_error() == Some(libc::EIO) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        Ok(())
    })
}

/// Hands each packet of `outbox` to `handle` at its time, soonest first; returns the error
/// that stopped it.
fn due_loop(
    outbox: &Outbox,
    mut handle: impl FnMut(Waiting) -> std::io::Result<()>,
) -> std::io::Error {
    let mut due = Vec::new();
    loop {
        {
            let Ok(mut q) = outbox.queue.lock() else {
                return std::io::Error::other("emulator queue poisoned");
            };
            loop {
                // Packets due within EARLY go now, in one batch: waking for each packet of a
                // 1 Gbit/s link (one every 12 µs) would cost more than the link, and 100 µs is
                // a tenth of the accuracy promised for delays. (In transit, each is admitted
                // at its own time, in time order.)
                let now = Instant::now();
                let horizon = now + EARLY;
                while q.peek().is_some_and(|Reverse(w)| w.at <= horizon) {
                    if let Some(Reverse(w)) = q.pop() {
                        due.push(w);
                    }
                }
                if !due.is_empty() {
                    break;
                }
                q = match q.peek() {
                    Some(Reverse(w)) => {
                        let wait = w.at.saturating_duration_since(now);
                        match outbox.ready.wait_timeout(q, wait) {
                            Ok((g, _)) => g,
                            Err(_) => return std::io::Error::other("emulator queue poisoned"),
                        }
                    }
                    None => match outbox.ready.wait(q) {
                        Ok(g) => g,
                        Err(_) => return std::io::Error::other("emulator queue poisoned"),
                    },
                };
            }
        }
        for w in due.drain(..) {
            if let Err(e) = handle(w) {
                return e;
            }
        }
    }
}

/// The destination of an IPv4 packet; `None` for anything else.
fn ipv4_destination(p: &[u8]) -> Option<Ipv4Addr> {
    if p.len() >= 20 && p[0] >> 4 == 4 {
        Some(Ipv4Addr::new(p[16], p[17], p[18], p[19]))
    } else {
        None
    }
}

impl Counters {
    /// The counters as one JSON object.
    pub fn to_json(&self) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "{{\"delivered\":{},\"lost\":{},\"queue_full\":{},\"unroutable\":{}}}",
            get(&self.delivered),
            get(&self.lost),
            get(&self.queue_full),
            get(&self.unroutable)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::LinkParams;
    use std::time::Duration;

    fn link(queue_bytes: u64) -> Arc<Mutex<Shaper>> {
        let p = LinkParams {
            rate_bps: Some(100_000_000),
            delay: Duration::from_millis(5),
            jitter: Duration::ZERO,
            loss: 0.0,
            queue_bytes,
            mtu: 9000,
            sparse_first: false,
        };
        Arc::new(Mutex::new(Shaper::new(p, 1)))
    }

    /// Moves what is in transit on, soonest first, as the router thread does at those times.
    fn run_transit(hops: &Hops) {
        loop {
            let next = hops.transit.queue.lock().unwrap().pop();
            let Some(Reverse(w)) = next else { return };
            hops.admit(w);
        }
    }

    fn packet(at: Instant, seq: u64, len: usize, from: usize, dst: usize) -> Waiting {
        Waiting {
            at,
            seq,
            bytes: vec![0; len],
            from,
            dst,
            hop: 0,
        }
    }

    #[test]
    fn a_packet_reaches_the_routers_queue_when_it_arrives_there_not_before() {
        // Hosts a (0), b (1) and c (2) behind one router, every link 100 Mbit/s, 5 ms, with a
        // queue of 30 jumbo frames. a sends b 30 frames at once: they queue on a's uplink, and
        // reach the router one per 0.72 ms, as fast as b's downlink takes them. c's small
        // packet to b reaches the router 1 ms after a's first frame did: b's downlink then holds
        // at most one frame, so it goes out next, not behind the 29 still on a's uplink.
        let (a_r, r_b, c_r) = (link(270_000), link(270_000), link(270_000));
        let none = Vec::new;
        let paths: Paths = vec![
            vec![none(), vec![Arc::clone(&a_r), Arc::clone(&r_b)], none()],
            vec![none(), none(), none()],
            vec![none(), vec![Arc::clone(&c_r), Arc::clone(&r_b)], none()],
        ];
        let hops = Hops {
            paths: Arc::new(paths),
            outboxes: (0..3).map(|_| Arc::new(Outbox::default())).collect(),
            transit: Arc::new(Outbox::default()),
            counters: Arc::new(Counters::default()),
        };
        let t0 = Instant::now();
        for i in 0..30 {
            hops.admit(packet(t0, i, 9000, 0, 1));
        }
        hops.admit(packet(t0 + Duration::from_micros(1_720), 100, 66, 2, 1));
        run_transit(&hops);
        assert_eq!(hops.counters.queue_full.load(Ordering::Relaxed), 0);
        let mut at_b: Vec<(Instant, usize)> =
            std::mem::take(&mut *hops.outboxes[1].queue.lock().unwrap())
                .into_iter()
                .map(|Reverse(w)| (w.at, w.bytes.len()))
                .collect();
        at_b.sort();
        assert_eq!(at_b.len(), 31);
        let small = at_b.iter().position(|&(_, len)| len == 66).unwrap();
        assert!(
            small <= 2,
            "the small packet left {small}th, behind frames still upstream"
        );
        // It waits for the frame on the wire at most: 0.72 ms, plus its own time and the delay.
        let (left, _) = at_b[small];
        let reached = t0 + Duration::from_micros(1_720 + 5) + Duration::from_millis(5);
        assert!(left - reached < Duration::from_micros(800) + Duration::from_millis(5));
    }
}
