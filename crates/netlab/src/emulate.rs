//! The running emulator: a reader and a writer thread per host interface. A reader takes each
//! packet from its host's TUN device, decides through the shapers of the links on its path when
//! it leaves (or drops it), and hands it to the destination's writer, which writes it into the
//! destination's TUN device at that time.

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

/// A packet waiting for its departure time (ordered by time, then arrival).
struct Waiting {
    at: Instant,
    seq: u64,
    bytes: Vec<u8>,
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

/// Packets for one host, soonest first.
#[derive(Default)]
struct Outbox {
    queue: Mutex<BinaryHeap<Reverse<Waiting>>>,
    ready: Condvar,
}

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
    let outboxes: Vec<Arc<Outbox>> = (0..n).map(|_| Arc::new(Outbox::default())).collect();
    let seq = Arc::new(AtomicU64::new(0));
    let (fail_tx, fail_rx) = std::sync::mpsc::channel::<std::io::Error>();
    for (i, tun) in tuns.into_iter().enumerate() {
        let reader = match tun.try_clone() {
            Ok(f) => f,
            Err(e) => return e,
        };
        let paths: Vec<Vec<Arc<Mutex<Shaper>>>> = lab
            .hosts
            .iter()
            .map(|h| path_of(&lab.hosts[i].name, &h.name))
            .collect();
        let (outboxes_r, by_addr, seq, counters_r, fail) = (
            outboxes.clone(),
            Arc::clone(&by_addr),
            Arc::clone(&seq),
            Arc::clone(&counters),
            fail_tx.clone(),
        );
        let mtu = lab.hosts[i].mtu as usize;
        std::thread::spawn(move || {
            let e = read_loop(
                reader,
                mtu,
                &paths,
                &by_addr,
                &outboxes_r,
                &seq,
                &counters_r,
            );
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
    fail_rx
        .recv()
        .unwrap_or_else(|_| std::io::Error::other("emulator threads ended"))
}

fn read_loop(
    mut tun: File,
    mtu: usize,
    paths: &[Vec<Arc<Mutex<Shaper>>>],
    by_addr: &HashMap<Ipv4Addr, usize>,
    outboxes: &[Arc<Outbox>],
    seq: &AtomicU64,
    counters: &Counters,
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
            counters.unroutable.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let mut at = now;
        let mut verdict = Verdict::Depart(now);
        for shaper in &paths[dst] {
            let Ok(mut s) = shaper.lock() else { break };
            verdict = s.admit(at, len);
            match verdict {
                Verdict::Depart(t) => at = t,
                _ => break,
            }
        }
        match verdict {
            Verdict::Depart(t) if !paths[dst].is_empty() => {
                let w = Waiting {
                    at: t,
                    seq: seq.fetch_add(1, Ordering::Relaxed),
                    bytes: buf,
                };
                let outbox = &outboxes[dst];
                if let Ok(mut q) = outbox.queue.lock() {
                    let soonest = q.peek().is_none_or(|Reverse(h)| w < *h);
                    q.push(Reverse(w));
                    if soonest {
                        outbox.ready.notify_one();
                    }
                }
            }
            Verdict::Depart(_) => {
                counters.unroutable.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::Lost => {
                counters.lost.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::QueueFull => {
                counters.queue_full.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn write_loop(mut tun: File, outbox: &Outbox, counters: &Counters) -> std::io::Error {
    let mut due = Vec::new();
    loop {
        {
            let Ok(mut q) = outbox.queue.lock() else {
                return std::io::Error::other("emulator queue poisoned");
            };
            loop {
                // Packets due within EARLY go now, in one batch: waking for each packet of a
                // 1 Gbit/s link (one every 12 µs) would cost more than the link, and 100 µs is
                // a tenth of the accuracy promised for delays.
                let now = Instant::now();
                let horizon = now + EARLY;
                while q.peek().is_some_and(|Reverse(w)| w.at <= horizon) {
                    if let Some(Reverse(w)) = q.pop() {
                        due.push(w.bytes);
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
        for packet in due.drain(..) {
            match tun.write(&packet) {
                Ok(_) => {
                    counters.delivered.fetch_add(1, Ordering::Relaxed);
                }
                // A host whose interface is gone or full loses the packet, as a wire would.
                Err(e) if e.raw_os_error() == Some(libc::EIO) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return e,
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
