//! The in-memory path the connection tests run on: a bottleneck (rate, delay, queue, loss,
//! duplication, reordering) each way, two connections and a manual clock.

use super::super::*;
use super::cubic::Cubic;
use crate::handshake::{CookieJar, Listening};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub(super) struct Path {
    /// Packets per second the bottleneck forwards.
    pub(super) rate: f64,
    pub(super) one_way: Duration,
    pub(super) queue: usize,
    pub(super) loss: f64,
    pub(super) duplicate: f64,
    /// Extra random delay, up to this, reordering packets.
    pub(super) jitter: Duration,
}

impl Path {
    pub(super) fn clean() -> Path {
        Path {
            rate: 20_000.0,
            one_way: Duration::from_millis(10),
            queue: 1_000,
            loss: 0.0,
            duplicate: 0.0,
            jitter: Duration::ZERO,
        }
    }
}

/// What crosses a link: a UDT datagram, or a segment of the competing TCP flow.
pub(super) enum Carried {
    Udt(Vec<u8>),
    Tcp { seq: u64, sent: Instant },
}

pub(super) struct Link {
    pub(super) path: Path,
    pub(super) free_at: Instant,
    pub(super) in_flight: BTreeMap<(Instant, u64), Carried>,
    pub(super) serial: u64,
    /// TCP segments that arrived, for [`Link::take_tcp`].
    tcp_arrived: Vec<(u64, Instant)>,
}

impl Link {
    pub(super) fn new(path: Path, now: Instant) -> Link {
        Link {
            path,
            free_at: now,
            in_flight: BTreeMap::new(),
            serial: 0,
            tcp_arrived: Vec::new(),
        }
    }

    pub(super) fn send(&mut self, now: Instant, rng: &mut SmallRng, datagram: &[u8]) {
        let copies = if rng.gen_bool(self.path.duplicate) {
            2
        } else {
            1
        };
        self.carry(now, rng, copies, || Carried::Udt(datagram.to_vec()));
    }

    /// Queues segment `seq` of the competing TCP flow; false if the queue or the path's loss
    /// dropped it.
    pub(super) fn send_tcp(&mut self, now: Instant, rng: &mut SmallRng, seq: u64) -> bool {
        self.carry(now, rng, 1, || Carried::Tcp { seq, sent: now })
    }

    /// Whether at least one copy went on its way.
    fn carry(
        &mut self,
        now: Instant,
        rng: &mut SmallRng,
        copies: usize,
        item: impl Fn() -> Carried,
    ) -> bool {
        let tx = Duration::from_secs_f64(1.0 / self.path.rate);
        let start = self.free_at.max(now);
        if start.duration_since(now) > tx * self.path.queue as u32 {
            return false; // tail drop
        }
        self.free_at = start + tx;
        let mut carried = false;
        for _ in 0..copies {
            if rng.gen_bool(self.path.loss) {
                continue;
            }
            let jitter = self.path.jitter.mul_f64(rng.gen::<f64>());
            let at = self.free_at + self.path.one_way + jitter;
            self.serial += 1;
            self.in_flight.insert((at, self.serial), item());
            carried = true;
        }
        carried
    }

    pub(super) fn next_due(&self) -> Option<Instant> {
        self.in_flight.keys().next().map(|k| k.0)
    }

    /// The UDT datagrams due by `now` (TCP segments due wait in [`Link::take_tcp`]).
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<Vec<u8>> {
        let later = self.in_flight.split_off(&(now, u64::MAX));
        let mut udt = Vec::new();
        for c in std::mem::replace(&mut self.in_flight, later).into_values() {
            match c {
                Carried::Udt(d) => udt.push(d),
                Carried::Tcp { seq, sent } => self.tcp_arrived.push((seq, sent)),
            }
        }
        udt
    }

    pub(super) fn take_tcp(&mut self) -> Vec<(u64, Instant)> {
        std::mem::take(&mut self.tcp_arrived)
    }
}

pub(super) struct Outcome {
    pub(super) received: Vec<u8>,
    pub(super) elapsed: Duration,
    /// When half the bytes had arrived: the second half measures the steady state.
    pub(super) half_at: Duration,
    pub(super) client: Stats,
    pub(super) server_error: Option<ConnError>,
    pub(super) client_error: Option<ConnError>,
    /// The sender had every byte acknowledged at the end.
    pub(super) client_flushed: bool,
    /// Bytes received by each tenth of a simulated second.
    pub(super) timeline: Vec<usize>,
    /// Segments the competing TCP flow delivered by each tenth of a second.
    pub(super) tcp_timeline: Vec<u64>,
}

impl Outcome {
    /// Packets per second over the second half.
    pub(super) fn steady_rate(&self) -> f64 {
        self.received.len() as f64 / 2.0 / 1456.0 / (self.elapsed - self.half_at).as_secs_f64()
    }
}

pub(super) const CLIENT: &str = "10.0.0.1:5000";
pub(super) const SERVER: &str = "10.0.0.2:6000";

/// Sends `data` from client to server over `path` (and back over the same path), until the
/// server read it all or `limit` of simulated time passed.
pub(super) fn transfer(
    data: &[u8],
    path: Path,
    config: Config,
    seed: u64,
    limit: Duration,
) -> Outcome {
    transfer_after(data, Script::default(), path, config, seed, limit)
}

/// How a [`transfer_after`] departs from a plain one.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Script {
    /// The first `prelude` bytes go alone, then the sender idles for `idle` (a GSI handshake
    /// before the data) before the rest.
    pub(super) prelude: usize,
    pub(super) idle: Duration,
    /// The sender keeps its connection open (a cached MODE E stream); the receiver closes as
    /// soon as it read everything, and its process exits right after its goodbye. The run
    /// ends when the sender heard the goodbye or gave up.
    pub(super) receiver_leaves: bool,
    /// The first full ACK of everything the receiver sends is lost.
    pub(super) lose_final_ack: bool,
    /// A CUBIC TCP flow shares the bottleneck (client to server) from the start.
    pub(super) beside_cubic: bool,
}

/// As [`transfer`], departing from it as `script` says.
pub(super) fn transfer_after(
    data: &[u8],
    script: Script,
    path: Path,
    config: Config,
    seed: u64,
    limit: Duration,
) -> Outcome {
    let t0 = Instant::now();
    let mut now = t0;
    let mut rng = SmallRng::seed_from_u64(seed);
    let client_addr: SocketAddr = CLIENT.parse().unwrap();
    let server_addr: SocketAddr = SERVER.parse().unwrap();
    let mut client = Connection::connect(config.clone(), now, 11, server_addr);
    // The ISN from the seed, not at random, so a run repeats exactly (seeds near the wrap
    // included: the proptest draws them).
    if let State::Connecting { request, .. } = &mut client.state {
        request.isn = (seed as u32).wrapping_mul(2_654_435_761) & seq::MAX_SEQ;
    }
    let mut server: Option<Connection> = None;
    let jar = CookieJar::new(now);
    let mut up = Link::new(path, now);
    let mut down = Link::new(path, now);
    let mut written = 0;
    let mut received = Vec::new();
    let mut buf = vec![0u8; 65_536];
    let mut read_buf = vec![0u8; 100_000];
    let mut ended = false;
    let mut half_at = None;
    let mut timeline = Vec::new();
    let Script {
        prelude,
        idle,
        receiver_leaves,
        lose_final_ack,
        beside_cubic,
    } = script;
    let mut cubic = beside_cubic.then(|| Cubic::new(now));
    let mut tcp_timeline = Vec::new();
    let mut traced = 0;
    let mut server_gone = false;
    let mut final_ack_lost = false;
    while now.duration_since(t0) < limit && !ended {
        for d in up.take_due(now) {
            let Ok(p) = Packet::parse(&d) else { continue };
            match (&p, server.as_mut()) {
                (
                    Packet::Control {
                        dst: 0,
                        body: Control::Handshake(hs),
                        ..
                    },
                    existing,
                ) => match jar.handle(now, client_addr, hs) {
                    Listening::Reply(r) => {
                        let n = packet::write_control(&mut buf, 0, hs.id, &Control::Handshake(r));
                        down.send(now, &mut rng, &buf[..n]);
                    }
                    Listening::Accept(req) => match existing {
                        Some(s) => s.resend_response(),
                        None => {
                            server = Some(Connection::accept(
                                config.clone(),
                                now,
                                22,
                                client_addr,
                                &req,
                            ))
                        }
                    },
                    Listening::Ignore => {}
                },
                (_, Some(s)) if !server_gone => s.handle(now, &p),
                _ => {}
            }
        }
        for d in down.take_due(now) {
            if let Ok(p) = Packet::parse(&d) {
                client.handle(now, &p);
            }
        }
        if let Some(tcp) = cubic.as_mut() {
            for (seq, sent) in up.take_tcp() {
                tcp.arrived(now, seq, sent, path.one_way);
            }
            tcp.poll(now, |seq| up.send_tcp(now, &mut rng, seq));
        }
        let allowed = if now.duration_since(t0) >= idle {
            data.len()
        } else {
            prelude
        };
        if client.is_open() && written < allowed {
            written += client.write(&data[written..allowed]);
            if written == data.len() && !receiver_leaves {
                client.close();
            }
        }
        if let Some(s) = server.as_mut().filter(|_| !server_gone) {
            loop {
                match s.read(&mut read_buf) {
                    Ok(ReadOutcome::Data(n)) => {
                        received.extend_from_slice(&read_buf[..n]);
                        if half_at.is_none() && received.len() >= data.len() / 2 {
                            half_at = Some(now.duration_since(t0));
                        }
                    }
                    Ok(ReadOutcome::End) | Err(_) => {
                        ended = true;
                        break;
                    }
                    Ok(ReadOutcome::Blocked) => break,
                }
            }
            if receiver_leaves && received.len() == data.len() {
                s.close();
            }
        }
        if receiver_leaves && (client.peer_closed || client.error().is_some()) {
            ended = true;
        }
        let live_server = server.as_mut().filter(|_| !server_gone);
        for (conn, link, to_client) in [
            (Some(&mut client), &mut up, false),
            (live_server, &mut down, true),
        ] {
            let Some(conn) = conn else { continue };
            if conn.poll_timeout().is_some_and(|t| t <= now) {
                conn.handle_timeout(now);
            }
            while let Some(n) = conn.poll_transmit(now, &mut buf) {
                let full_ack = matches!(
                    Packet::parse(&buf[..n]),
                    Ok(Packet::Control {
                        body: Control::Ack(Ack { full: Some(_), .. }),
                        ..
                    })
                );
                if lose_final_ack
                    && to_client
                    && full_ack
                    && !final_ack_lost
                    && received.len() == data.len()
                {
                    final_ack_lost = true;
                    continue;
                }
                link.send(now, &mut rng, &buf[..n]);
            }
        }
        // The receiver's goodbye is out: its process is gone.
        server_gone |= server.as_ref().is_some_and(Connection::is_closed);
        let tenth = now.duration_since(t0).as_millis() / 100;
        if std::env::var("UDT_TRACE").is_ok() && tenth > traced {
            traced = tenth;
            if let (Some(cc), Some(s)) = (client.cc.as_ref(), client.sender.as_ref()) {
                eprintln!(
                    "t={:?} net={} can_send={} unsent={} wait={:?} period={:.1} window={:.0} in_flight={} flow={} losses={} rtt={} rate={} own_rtt={:?} tcp_cwnd={:.0} stats={:?}",
                    now.duration_since(t0), s.in_network_before(), client.can_send(), s.has_unsent(), client.next_send.saturating_duration_since(now), cc.period_us(), cc.window(), s.in_flight(), s.flow_window,
                    s.losses.len(), client.rtt, client.receive_rate, client.own_rtt.map(|r| r.0), cubic.as_ref().map_or(0.0, |c| c.cwnd), client.stats,
                );
            }
        }
        while now.duration_since(t0) >= Duration::from_millis(100) * (timeline.len() as u32 + 1) {
            timeline.push(received.len());
            tcp_timeline.push(cubic.as_ref().map_or(0, |c| c.delivered));
        }
        let mut next = now + Duration::from_secs(1);
        let tcp_due = cubic.as_ref().and_then(Cubic::next_due);
        for t in [
            up.next_due(),
            down.next_due(),
            client.poll_timeout(),
            tcp_due,
        ]
        .into_iter()
        .chain([server
            .as_ref()
            .filter(|_| !server_gone)
            .and_then(Connection::poll_timeout)])
        .flatten()
        {
            next = next.min(t);
        }
        now = next.max(now + Duration::from_micros(1));
    }
    Outcome {
        received,
        elapsed: now.duration_since(t0),
        half_at: half_at.unwrap_or_default(),
        client: client.stats(),
        server_error: server.as_ref().and_then(|s| s.error().cloned()),
        client_error: client.error().cloned(),
        client_flushed: client.flushed(),
        timeline,
        tcp_timeline,
    }
}

pub(super) fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 1000) as u8).collect()
}
