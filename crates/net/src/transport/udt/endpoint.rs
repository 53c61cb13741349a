//! One UDP socket and the UDT connections on it, driven by one task: datagrams are read in
//! batches (`recvmmsg`, GRO) and handed to their connection by socket id, timers run, and what
//! the connections have to send goes out, paced by their controllers, equal-sized packets to
//! one peer in one GSO send ([`super::batch`]). Connections wait for their stream in a slot
//! the task and the stream share.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::{Duration, Instant};

use ferry_udt::handshake::{CookieJar, Handshake, Listening};
use ferry_udt::packet::{self, Control, Packet};
use ferry_udt::{Config, Connection};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, Notify};

use super::batch::{Batching, MAX_BATCH_BYTES};

/// Datagrams read before the task looks at timers and sends.
const READ_BATCH: usize = 1_024;
/// Largest datagram (an MSS of 65 535 less nothing: the buffer takes any).
const DATAGRAM: usize = 65_536;

/// A batch the socket would not take yet: bytes, peer, packet size.
type Stalled = (Vec<u8>, SocketAddr, usize);
/// How long a dropped stream's unsent data may take to be acknowledged (libudt's linger
/// is 180 s; a DTP that dropped its stream has given up long before).
const DROPPED_LIMIT: Duration = Duration::from_secs(60);

/// Accepted connections waiting for the DTP.
pub(super) type Backlog = mpsc::Receiver<Arc<Slot>>;

/// What a connection's stream and the task share.
#[derive(Debug)]
pub(super) struct SlotState {
    pub(super) conn: Connection,
    pub(super) read: Option<Waker>,
    pub(super) write: Option<Waker>,
    /// A task waiting for the handshake or the close.
    pub(super) other: Option<Waker>,
    /// A stream owns it (accepted connections wait in the backlog until taken).
    pub(super) taken: bool,
    released_at: Option<Instant>,
    closed_at: Option<Instant>,
}

/// A connection and its wakers.
#[derive(Debug)]
pub(super) struct Slot(Mutex<SlotState>);

impl Slot {
    fn new(conn: Connection, taken: bool) -> Arc<Slot> {
        Arc::new(Slot(Mutex::new(SlotState {
            conn,
            read: None,
            write: None,
            other: None,
            taken,
            released_at: None,
            closed_at: None,
        })))
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stream is gone: the connection closes gracefully in the background.
    pub(super) fn release(&self, now: Instant) {
        let mut st = self.lock();
        tracing::debug!(
            peer = %st.conn.peer(),
            id = st.conn.local_id(),
            closed = st.conn.is_closed(),
            flushed = st.conn.flushed(),
            readable = st.conn.readable(),
            stats = ?st.conn.stats(),
            "UDT stream dropped"
        );
        st.released_at = Some(now);
        st.conn.close();
    }
}

#[derive(Debug)]
struct Listener {
    jar: CookieJar,
    ready: mpsc::Sender<Arc<Slot>>,
}

#[derive(Debug, Default)]
struct Table {
    conns: HashMap<u32, Arc<Slot>>,
    peers: HashMap<(SocketAddr, u32), u32>,
    listener: Option<Listener>,
}

/// A UDP socket's UDT connections.
#[derive(Debug)]
pub(super) struct Endpoint {
    socket: UdpSocket,
    batching: Batching,
    local: SocketAddr,
    config: Config,
    table: Mutex<Table>,
    wake: Notify,
}

impl Endpoint {
    /// An endpoint on `socket`; a listening one when `backlog` is given. Nothing runs until
    /// [`Endpoint::spawn`].
    pub(super) fn start(
        socket: std::net::UdpSocket,
        config: Config,
        backlog: Option<usize>,
    ) -> io::Result<(Arc<Endpoint>, Option<Backlog>)> {
        let batching = Batching::new(&socket)?;
        let socket = UdpSocket::from_std(socket)?;
        let local = socket.local_addr()?;
        let mut table = Table::default();
        let ready = backlog.map(|n| {
            let (tx, rx) = mpsc::channel(n);
            table.listener = Some(Listener {
                jar: CookieJar::new(Instant::now()),
                ready: tx,
            });
            rx
        });
        let ep = Arc::new(Endpoint {
            socket,
            batching,
            local,
            config,
            table: Mutex::new(table),
            wake: Notify::new(),
        });
        Ok((ep, ready))
    }

    /// Starts the task; after the first connection is in, or it would find nothing to do.
    pub(super) fn spawn(self: &Arc<Self>) {
        tokio::spawn(run(self.clone()));
    }

    pub(super) fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tells the task something changed (bytes written, a close).
    pub(super) fn notify(&self) {
        self.wake.notify_one();
    }

    fn new_id(table: &Table) -> u32 {
        loop {
            let id = rand::random::<u32>() & 0x7FFF_FFFF;
            if id != 0 && !table.conns.contains_key(&id) {
                return id;
            }
        }
    }

    /// Starts a connection to `peer`; its slot reports when the handshake is done.
    pub(super) fn connect(&self, peer: SocketAddr) -> Arc<Slot> {
        let mut table = self.table();
        let id = Endpoint::new_id(&table);
        let slot = Slot::new(
            Connection::connect(self.config.clone(), Instant::now(), id, peer),
            true,
        );
        table.conns.insert(id, slot.clone());
        drop(table);
        self.notify();
        slot
    }

    /// The listener is gone: connections nobody took are dropped, the rest go on.
    pub(super) fn stop_listening(&self) {
        let mut table = self.table();
        table.listener = None;
        let untaken: Vec<u32> = table
            .conns
            .iter()
            .filter(|(_, s)| !s.lock().taken)
            .map(|(&id, _)| id)
            .collect();
        for id in untaken {
            if let Some(slot) = table.conns.remove(&id) {
                slot.lock()
                    .conn
                    .abort("the listener closed before the connection was taken");
            }
        }
        drop(table);
        self.notify();
    }

    fn dispatch(&self, now: Instant, from: SocketAddr, datagram: &[u8], out: &mut [u8]) {
        let Ok(packet) = Packet::parse(datagram) else {
            tracing::trace!(%from, len = datagram.len(), "not a UDT packet: ignored");
            return;
        };
        let dst = match &packet {
            Packet::Data { dst, .. } | Packet::Control { dst, .. } => *dst,
        };
        if dst == 0 {
            if let Packet::Control {
                body: Control::Handshake(hs),
                ..
            } = &packet
            {
                self.on_request(now, from, hs, out);
            }
            return;
        }
        let slot = self.table().conns.get(&dst).cloned();
        if let Some(slot) = slot {
            let mut st = slot.lock();
            if st.conn.peer() == from {
                st.conn.handle(now, &packet);
            }
        }
    }

    fn on_request(&self, now: Instant, from: SocketAddr, hs: &Handshake, out: &mut [u8]) {
        let mut table = self.table();
        let Some(listener) = table.listener.as_ref() else {
            return;
        };
        match listener.jar.handle(now, from, hs) {
            Listening::Reply(reply) => {
                let n = packet::write_control(out, 0, hs.id, &Control::Handshake(reply));
                let _ = self.socket.try_send_to(&out[..n], from);
            }
            Listening::Accept(request) => {
                if let Some(id) = table.peers.get(&(from, request.id)) {
                    if let Some(slot) = table.conns.get(id) {
                        slot.lock().conn.resend_response();
                    }
                    return;
                }
                let id = Endpoint::new_id(&table);
                let conn = Connection::accept(self.config.clone(), now, id, from, &request);
                let slot = Slot::new(conn, false);
                if listener.ready.try_send(slot.clone()).is_err() {
                    tracing::debug!(%from, "UDT backlog full: request dropped, the peer will repeat it");
                    return;
                }
                table.conns.insert(id, slot);
                table.peers.insert((from, request.id), id);
            }
            Listening::Ignore => {}
        }
    }

    /// Sends what `conn` has due to its peer, equal-sized packets batched; `out` holds
    /// [`MAX_BATCH_BYTES`] and a datagram more. Returns what the socket would not take.
    fn transmit(&self, now: Instant, conn: &mut Connection, out: &mut [u8]) -> Vec<Stalled> {
        let peer = conn.peer();
        let max = self.batching.max_segments();
        // out[..len] holds packets of `segment` bytes, the last maybe shorter.
        let (mut len, mut segment) = (0, 0);
        loop {
            let room = segment == 0 || (len / segment < max && len + segment <= MAX_BATCH_BYTES);
            let next = if room {
                conn.poll_transmit(now, &mut out[len..])
            } else {
                None
            };
            match next {
                Some(n) if segment == 0 => (len, segment) = (n, n),
                Some(n) if n == segment => len += n,
                // A shorter packet (a control packet, a last one) may end a batch.
                Some(n) if n < segment => {
                    if let Some(s) = self.flush(peer, &out[..len + n], segment) {
                        return vec![s];
                    }
                    (len, segment) = (0, 0);
                }
                // A longer one starts the next batch.
                Some(n) => {
                    let stalled = self.flush(peer, &out[..len], segment);
                    if let Some(s) = stalled {
                        return vec![s, (out[len..len + n].to_vec(), peer, n)];
                    }
                    out.copy_within(len..len + n, 0);
                    (len, segment) = (n, n);
                }
                None => {
                    if len > 0 {
                        if let Some(s) = self.flush(peer, &out[..len], segment) {
                            return vec![s];
                        }
                    }
                    if room {
                        return Vec::new();
                    }
                    // The batch was full: more may be due.
                    (len, segment) = (0, 0);
                }
            }
        }
    }

    /// Sends a batch; gives it back when the socket would block.
    fn flush(&self, peer: SocketAddr, contents: &[u8], segment: usize) -> Option<Stalled> {
        match self.batching.send(&self.socket, peer, contents, segment) {
            Ok(()) => None,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                Some((contents.to_vec(), peer, segment))
            }
            Err(e) => {
                tracing::debug!(%peer, error = %e, "UDT send failed");
                None
            }
        }
    }

    /// Runs timers, sends what is due and wakes streams. Returns when to come back, and a
    /// batch the socket would not take yet.
    fn service(&self, now: Instant, out: &mut [u8]) -> (Instant, Vec<Stalled>) {
        let slots: Vec<(u32, Arc<Slot>)> = self
            .table()
            .conns
            .iter()
            .map(|(&id, s)| (id, s.clone()))
            .collect();
        let mut next = now + Duration::from_secs(1);
        let mut stalled = Vec::new();
        let mut gone = Vec::new();
        for (id, slot) in slots {
            let mut st = slot.lock();
            if st.conn.poll_timeout().is_some_and(|t| t <= now) {
                st.conn.handle_timeout(now);
            }
            if stalled.is_empty() {
                stalled = self.transmit(now, &mut st.conn, out);
            }
            if st.conn.is_closed() && st.closed_at.is_none() {
                st.closed_at = Some(now);
                tracing::debug!(
                    peer = %st.conn.peer(),
                    id = st.conn.local_id(),
                    error = ?st.conn.error(),
                    stats = ?st.conn.stats(),
                    rtt_us = st.conn.rtt_us(),
                    "UDT connection closed"
                );
            }
            wake(&mut st);
            if let Some(t) = st.conn.poll_timeout() {
                next = next.min(t);
            }
            match (st.released_at, st.closed_at) {
                (Some(_), Some(closed))
                    if st.conn.error().is_some() || now >= closed + Connection::LINGER =>
                {
                    gone.push((id, st.conn.peer(), st.conn.peer_id()));
                }
                (Some(_), Some(closed)) => next = next.min(closed + Connection::LINGER),
                (Some(released), None) if now >= released + DROPPED_LIMIT => {
                    st.conn.abort(
                        "its data was not acknowledged in time after the stream was dropped",
                    );
                }
                (Some(released), None) => next = next.min(released + DROPPED_LIMIT),
                _ => {}
            }
        }
        if !gone.is_empty() {
            let mut table = self.table();
            for (id, peer, peer_id) in gone {
                table.conns.remove(&id);
                table.peers.remove(&(peer, peer_id));
            }
        }
        (next, stalled)
    }

    /// Every connection's state, at trace level.
    fn dump(&self) {
        for (id, slot) in &self.table().conns {
            let st = slot.lock();
            tracing::trace!(
                id,
                peer = %st.conn.peer(),
                state = %st.conn.positions(),
                stats = ?st.conn.stats(),
                reader_waits = st.read.is_some(),
                writer_waits = st.write.is_some(),
                "UDT connection"
            );
        }
    }

    fn finished(&self) -> bool {
        let table = self.table();
        table.listener.is_none() && table.conns.is_empty()
    }
}

fn wake(st: &mut SlotState) {
    let conn = &st.conn;
    let done = conn.is_closed() || conn.error().is_some();
    if conn.readable() || done {
        if let Some(w) = st.read.take() {
            w.wake();
        }
    }
    if conn.writable() || done {
        if let Some(w) = st.write.take() {
            w.wake();
        }
    }
    if conn.is_open() || done {
        if let Some(w) = st.other.take() {
            w.wake();
        }
    }
}

/// The endpoint's task: until no listener and no connection is left.
async fn run(ep: Arc<Endpoint>) {
    let mut bufs = ep.batching.buffers();
    let mut out = vec![0u8; MAX_BATCH_BYTES + DATAGRAM];
    let mut stalled: Vec<Stalled> = Vec::new();
    let mut dumped = Instant::now();
    loop {
        let now = Instant::now();
        if tracing::enabled!(tracing::Level::TRACE)
            && now.duration_since(dumped) >= Duration::from_secs(1)
        {
            dumped = now;
            ep.dump();
        }
        let mut read = 0;
        while read < READ_BATCH {
            // Each datagram the time it arrived: the receiver's packet-pair gaps need it.
            let got = ep.batching.recv(&ep.socket, &mut bufs, |from, at, d| {
                ep.dispatch(at, from, d, &mut out)
            });
            match got {
                Ok(n) => read += n.max(1),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // An ICMP error from an earlier send, reported on this socket.
                    tracing::trace!(error = %e, "UDT receive error");
                    break;
                }
            }
        }
        while let Some((d, peer, segment)) = stalled.first() {
            match ep.batching.send(&ep.socket, *peer, d, *segment) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                _ => {
                    stalled.remove(0);
                }
            }
        }
        let next = if stalled.is_empty() {
            let (next, s) = ep.service(now, &mut out);
            stalled = s;
            next
        } else {
            now + Duration::from_millis(1)
        };
        if ep.finished() {
            return;
        }
        tokio::select! {
            _ = ep.socket.readable() => {}
            _ = ep.wake.notified() => {}
            _ = tokio::time::sleep_until(next.into()) => {}
            _ = ep.socket.writable(), if !stalled.is_empty() => {}
        }
    }
}
