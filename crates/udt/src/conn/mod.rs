//! One UDT connection, driven from outside: datagrams in ([`Connection::handle`]), datagrams
//! out ([`Connection::poll_transmit`]), time passed in ([`Connection::handle_timeout`] at
//! [`Connection::poll_timeout`]), bytes written and read by the application.
//!
//! Both directions number their packets from the client's initial sequence number, as libudt
//! does; internally every packet is counted from it (64 bits), so nothing wraps.

mod drain;
mod input;
mod loss_list;
mod receiver;
mod ring;
mod sender;
mod timers;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use self::receiver::Receiver;
use self::sender::{Horizon, Sender};
use crate::cc::{AckSample, CongestionControl, Controller, LossSample};
use crate::error::ConnError;
use crate::handshake::{ip_words, Handshake, REFUSED, REQUEST, RESPONSE, STREAM, VERSION};
use crate::packet::{self, Ack, Control, Packet, HEADER, IP_UDP};
use crate::seq;

/// libudt's SYN interval: the ACK timer and the rate-control period.
pub const SYN: Duration = Duration::from_millis(10);
/// How often an unanswered connection request is repeated (libudt: 250 ms).
const REQUEST_AGAIN: Duration = Duration::from_millis(250);
/// The retransmission timer's floor (libudt: 300 ms per expiration).
const MIN_EXP: Duration = Duration::from_millis(300);
/// Full ACKs after which the peer's RTT figure (its smoothed ACK-to-ACK2 round trips, which
/// start at libudt's 100 ms, and ours of those) has forgotten its start: under 1 % of it
/// left through both filters.
const PEER_RTT_SETTLED: u32 = 48;
/// How late paced packets may still go out at once, so a late wake-up costs no rate.
const PACING_SLACK: Duration = Duration::from_millis(2);
/// The shortest gap between two shutdowns repeated to a peer that did not hear the first.
const RESHUTDOWN: Duration = Duration::from_millis(100);
/// The shortest gap between two reports of the same loss.
const MIN_NAK_INTERVAL: Duration = Duration::from_millis(20);
/// How long an accepted connection's data waits at most for a sign that the peer is ready.
const READY_HOLD: Duration = Duration::from_millis(20);
/// How often it asks meanwhile.
const READY_PING: Duration = Duration::from_millis(2);
/// Bytes of packets one connection holds for its reader at most: the flow window it offers
/// times the payload. Unbounded, a peer chose both (`fc` to 2^24 packets, `mss` to 64 KiB)
/// and could fill them before any authentication, on each of a listener's 128 connections.
/// The default window (131 072 packets of 1 456 bytes, 182 MiB) fits, and so does a
/// 10 Gbit/s path's bandwidth-delay product at a 200 ms round trip (250 MB).
pub const MAX_RECEIVE_BUFFER: usize = 256 << 20;
/// What a buffered packet costs beside its payload (its ring slot, its allocation's
/// bookkeeping): with a small MSS the slots, not the bytes, would fill the bound.
const SLOT_COST: usize = 64;
/// The smallest flow window a connection offers, whatever its settings.
const MIN_FLIGHT: u32 = 32;

/// A connection's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Largest packet, IP and UDP headers included (libudt's MSS); the peers take the smaller.
    pub mss: u32,
    /// Packets this side takes in flight at most: the receive ring's size and the largest
    /// flow window it offers (libudt's flight flag and receive buffer), held to
    /// [`MAX_RECEIVE_BUFFER`] ([`Config::flow_window`]). The ring grows only where packets
    /// land, and the window offered follows the path (`Receiver::available`).
    pub flight_flag: u32,
    /// Bytes written and not yet acknowledged this side holds at least before it stops
    /// taking more; the buffer grows past this to what the controller's window needs.
    pub send_buffer: usize,
    /// The sending controller.
    pub controller: Controller,
    /// Silence after which the peer is taken for gone.
    pub silence: Duration,
    /// How long a connection request is repeated before giving up.
    pub connect_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mss: 1500,
            flight_flag: 131_072,
            send_buffer: 64 << 20,
            controller: Controller::default(),
            silence: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

impl Config {
    /// The flow window this side offers, which is also the packets it buffers at most: the
    /// flight flag, held so that a window of full packets at this MSS stays within
    /// [`MAX_RECEIVE_BUFFER`].
    pub fn flow_window(&self) -> u32 {
        let most = MAX_RECEIVE_BUFFER / (payload_len(self.mss) + SLOT_COST);
        self.flight_flag
            .min(u32::try_from(most).unwrap_or(u32::MAX))
            .max(MIN_FLIGHT)
    }
}

/// The payload of a full packet at `mss` (libudt's: the MSS less IP, UDP and UDT headers).
fn payload_len(mss: u32) -> usize {
    (mss as usize).saturating_sub(IP_UDP + HEADER).max(64)
}

#[derive(Debug)]
enum State {
    Connecting {
        request: Handshake,
        since: Instant,
        last_sent: Option<Instant>,
    },
    Open,
    Closed,
}

/// What a read found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// This many bytes.
    Data(usize),
    /// Nothing yet.
    Blocked,
    /// The peer closed and every byte was read.
    End,
}

/// Counters for logs and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Data packets sent, first time.
    pub sent: u64,
    /// Data packets resent.
    pub resent: u64,
    /// Data packets received (duplicates included).
    pub received: u64,
    /// NAKs sent.
    pub naks_sent: u64,
    /// NAKs received.
    pub naks_received: u64,
    /// NAK entries ignored as beyond what was sent.
    pub bogus_naks: u64,
    /// Retransmission timer expirations.
    pub timeouts: u64,
    /// Data packets dropped as longer than the negotiated MSS allows.
    pub oversized: u64,
    /// Data packets dropped as beyond the flow window this side offers.
    pub beyond_window: u64,
}

/// One connection.
#[derive(Debug)]
pub struct Connection {
    config: Config,
    state: State,
    local_id: u32,
    peer_id: u32,
    peer: SocketAddr,
    start: Instant,
    isn: u32,
    payload: usize,
    response: Option<Handshake>,
    sender: Option<Sender>,
    receiver: Option<Receiver>,
    cc: Option<Box<dyn CongestionControl>>,
    next_send: Instant,
    probe_pair: bool,
    /// The last packet sent before the sender ran out of data, until it is acknowledged.
    app_limited_mark: Option<u64>,
    rtt: u32,
    rtt_var: u32,
    /// The sender's own smoothed RTT and its variation (RFC 6298's filters over the samples
    /// it takes from its ACKs), microseconds; `None` before the first. The figures an ACK
    /// carries start at libudt's 100 ms and 50 ms whatever the path, and take seconds to
    /// forget them.
    own_rtt: Option<(u32, u32)>,
    /// ACKs whose RTT figure updated `rtt` (after [`PEER_RTT_SETTLED`] the figure has
    /// forgotten its start).
    peer_rtt_updates: u32,
    receive_rate: u32,
    bandwidth: u32,
    last_ack2: Option<(u32, Instant)>,
    next_ack: Instant,
    next_nak_check: Instant,
    last_heard: Instant,
    /// The last ACK that moved, or NAK: the retransmission timer runs from it.
    last_progress: Instant,
    last_exp: Instant,
    exp_count: u32,
    /// The peer reports a loss again when a resend does not arrive (see `expire`).
    peer_repeats_naks: bool,
    control: VecDeque<Control>,
    closing: bool,
    shutdown_sent: Option<Instant>,
    peer_closed: bool,
    /// An accepted connection's data waits until the peer is heard (anything but a
    /// handshake) or the first instant passes, asking at the second. libudt's connecting
    /// thread drops what arrives before it took our response (queue.cpp removeConnector): a
    /// first window lost whole cost CUDTCC seconds at 16 packets a second.
    ready_hold: Option<(Instant, Instant)>,
    error: Option<ConnError>,
    stats: Stats,
}

impl Connection {
    fn blank(
        config: Config,
        now: Instant,
        local_id: u32,
        peer: SocketAddr,
        state: State,
    ) -> Connection {
        Connection {
            config,
            state,
            local_id,
            peer_id: 0,
            peer,
            start: now,
            isn: 0,
            payload: 0,
            response: None,
            sender: None,
            receiver: None,
            cc: None,
            next_send: now,
            probe_pair: false,
            app_limited_mark: Some(0),
            rtt: 100_000,
            rtt_var: 50_000,
            own_rtt: None,
            peer_rtt_updates: 0,
            receive_rate: 16,
            bandwidth: 1,
            last_ack2: None,
            next_ack: now + SYN,
            next_nak_check: now + SYN,
            last_heard: now,
            last_progress: now,
            last_exp: now,
            exp_count: 1,
            peer_repeats_naks: false,
            control: VecDeque::new(),
            closing: false,
            shutdown_sent: None,
            peer_closed: false,
            ready_hold: None,
            error: None,
            stats: Stats::default(),
        }
    }

    /// A connection to the listener at `peer`; its first datagram is a request.
    pub fn connect(config: Config, now: Instant, local_id: u32, peer: SocketAddr) -> Connection {
        let request = Handshake {
            version: VERSION,
            socket_type: STREAM,
            isn: rand::random::<u32>() & seq::MAX_SEQ,
            mss: config.mss,
            flight_flag: config.flow_window(),
            request_type: REQUEST,
            id: local_id,
            cookie: 0,
            peer_ip: ip_words(peer.ip()),
        };
        let state = State::Connecting {
            request,
            since: now,
            last_sent: None,
        };
        Connection::blank(config, now, local_id, peer, state)
    }

    /// The connection a listener makes for `request` (its cookie checked) from `peer`; the
    /// answer to send is queued.
    pub fn accept(
        config: Config,
        now: Instant,
        local_id: u32,
        peer: SocketAddr,
        request: &Handshake,
    ) -> Connection {
        let mut c = Connection::blank(config, now, local_id, peer, State::Open);
        let mss = request.mss.min(c.config.mss);
        let response = Handshake {
            mss,
            flight_flag: c.config.flow_window(),
            request_type: RESPONSE,
            id: local_id,
            peer_ip: ip_words(peer.ip()),
            ..*request
        };
        c.open(now, request.isn, request.id, mss, request.flight_flag);
        c.response = Some(response);
        c.control.push_back(Control::Handshake(response));
        c.ready_hold = Some((now + READY_HOLD, now));
        c
    }

    fn open(&mut self, now: Instant, isn: u32, peer_id: u32, mss: u32, flow_window: u32) {
        self.isn = isn;
        self.peer_id = peer_id;
        self.payload = payload_len(mss);
        // Taken at this side's MSS, which the one agreed on does not exceed: the bound holds.
        let ring = self.config.flow_window() as usize;
        self.sender = Some(Sender::new(
            self.payload,
            self.config.send_buffer,
            u64::from(flow_window),
        ));
        self.receiver = Some(Receiver::new(now, ring));
        self.cc = Some(self.config.controller.build(now, mss, flow_window));
        self.state = State::Open;
        self.last_heard = now;
        self.last_progress = now;
        self.last_exp = now;
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The peer's socket id (0 until connected).
    pub fn peer_id(&self) -> u32 {
        self.peer_id
    }

    /// This side's socket id.
    pub fn local_id(&self) -> u32 {
        self.local_id
    }

    /// The listener's answer, for a repeated request.
    pub fn resend_response(&mut self) {
        if let Some(r) = self.response {
            self.control.push_back(Control::Handshake(r));
        }
    }

    /// Whether the handshake is done.
    pub fn is_open(&self) -> bool {
        matches!(self.state, State::Open | State::Closed) && self.sender.is_some()
    }

    /// Whether nothing more will happen: closed cleanly or failed. A connection that closed
    /// itself should still be fed the peer's datagrams for a while ([`Connection::LINGER`]),
    /// so a lost shutdown is repeated.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// How long a closed connection keeps answering a peer that missed its shutdown.
    pub const LINGER: Duration = Duration::from_secs(10);

    /// Why the connection failed, if it did.
    pub fn error(&self) -> Option<&ConnError> {
        self.error.as_ref()
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Where both halves stand, for logs: packets read, in order, received, missing; packets
    /// acknowledged, sent, lost; the controller's window and pacing; the RTT.
    pub fn positions(&self) -> String {
        let r = self.receiver.as_ref().map_or(String::new(), |r| {
            format!(
                "recv read={} in_order={} highest={} missing={} arrivals={}/s reported={}/s pairs={}/s",
                r.base,
                r.contiguous,
                r.highest,
                r.loss_count(),
                r.arrival_rate(),
                r.reported_rate(),
                r.pair_bandwidth()
            )
        });
        let s = self.sender.as_ref().map_or(String::new(), |s| {
            format!(
                " send acked={} sent={} lost={} flow={} flushed={}",
                s.una,
                s.next,
                s.losses.len(),
                s.flow_window,
                s.all_acked()
            )
        });
        let cc = self.cc.as_ref().map_or(String::new(), |c| {
            format!(
                " cc={} window={:.0} period_us={:.1}",
                c.name(),
                c.window(),
                c.period_us()
            )
        });
        format!(
            "{r}{s}{cc} rtt_us={} closing={} peer_closed={}",
            self.rtt, self.closing, self.peer_closed
        )
    }

    /// Bytes received and held for the reader, those behind a hole included.
    pub fn buffered_bytes(&self) -> usize {
        self.receiver.as_ref().map_or(0, Receiver::buffered_bytes)
    }

    /// Smoothed RTT in microseconds.
    pub fn rtt_us(&self) -> u32 {
        self.rtt
    }

    /// The sending controller's name.
    pub fn controller(&self) -> &'static str {
        self.cc.as_ref().map_or("none", |c| c.name())
    }

    fn fail(&mut self, error: ConnError) {
        if self.error.is_none() && !self.is_closed() {
            self.error = Some(error);
        }
        self.state = State::Closed;
    }

    fn timestamp(&self, now: Instant) -> u32 {
        now.duration_since(self.start).as_micros() as u32
    }

    // ---- application side ----

    /// Queues bytes to send; returns how many were taken (0: the buffer is full or closed).
    pub fn write(&mut self, data: &[u8]) -> usize {
        if self.closing || self.peer_closed || self.error.is_some() {
            return 0;
        }
        self.sender.as_mut().map_or(0, |s| s.write(data))
    }

    /// Whether a write would take bytes now.
    pub fn writable(&self) -> bool {
        self.sender.as_ref().is_some_and(Sender::writable) && !self.closing && !self.peer_closed
    }

    /// Reads in-order bytes.
    pub fn read(&mut self, out: &mut [u8]) -> Result<ReadOutcome, ConnError> {
        if let Some(r) = self.receiver.as_mut() {
            let n = r.read(out);
            if n > 0 {
                return Ok(ReadOutcome::Data(n));
            }
        }
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if self.peer_closed {
            if self.receiver.as_ref().is_some_and(Receiver::has_gaps) {
                return Err(ConnError::PeerClosed("packets still missing"));
            }
            return Ok(ReadOutcome::End);
        }
        Ok(ReadOutcome::Blocked)
    }

    /// Whether a read would return something other than `Blocked`.
    pub fn readable(&self) -> bool {
        self.receiver.as_ref().is_some_and(Receiver::readable)
            || self.peer_closed
            || self.error.is_some()
    }

    /// Closes gracefully: once everything written is acknowledged, a shutdown goes out.
    pub fn close(&mut self) {
        self.closing = true;
    }

    /// Whether everything written was acknowledged, the last of it by a full ACK.
    pub fn flushed(&self) -> bool {
        self.sender.as_ref().is_none_or(Sender::all_acked)
    }

    /// Stops now, telling the peer.
    pub fn abort(&mut self, why: &'static str) {
        if self.is_open() && !self.is_closed() {
            self.control.push_back(Control::Shutdown);
        }
        self.fail(ConnError::Aborted(why));
    }

    /// Writes the next datagram into `out` (at least the MSS long); `None` when nothing is
    /// due now.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<usize> {
        let ts = self.timestamp(now);
        if let Some(body) = self.control.pop_front() {
            self.hold_from(now, &body);
            let dst = match (&self.state, &body) {
                (State::Connecting { .. }, Control::Handshake(_)) => 0,
                _ => self.peer_id,
            };
            return Some(packet::write_control(out, ts, dst, &body));
        }
        if !matches!(self.state, State::Open)
            || self.ready_hold.is_some()
            || (now < self.next_send && !self.probe_pair)
        {
            return None;
        }
        let horizon = self.network_horizon();
        let cc = self.cc.as_mut()?;
        let s = self.sender.as_mut()?;
        let window = cc.window().max(2.0) as u64;
        let horizon = cc.window_counts_network().then_some(horizon);
        let Some((count, resent)) = s.next_to_send(now, window, horizon) else {
            // Out of data, or held by the receiver's flow window: either way the rates of the
            // packets out now measure this side, not the path.
            let starved = !s.has_unsent() && s.losses.is_empty();
            if s.in_flight() >= s.flow_window {
                s.drain.bound(now);
            }
            if starved || s.in_flight() >= s.flow_window {
                self.app_limited_mark = Some(s.next);
            }
            return None;
        };
        let data = s.packet(count)?;
        let wire = seq::wire(self.isn, count);
        packet::write_data_header(out, wire, ts, self.peer_id);
        out[HEADER..HEADER + data.len()].copy_from_slice(data);
        let len = HEADER + data.len();
        cc.on_sent(now, resent);
        if resent {
            self.stats.resent += 1;
        } else {
            self.stats.sent += 1;
        }
        let period = Duration::from_nanos((cc.period_us() * 1000.0) as u64);
        if self.probe_pair {
            self.probe_pair = false;
        } else {
            self.next_send = self.next_send.max(now - PACING_SLACK.min(now - self.start)) + period;
            // Every sixteenth packet goes with its successor back to back: the receiver's
            // capacity probe.
            self.probe_pair = !resent && wire & 0xF == 0;
        }
        Some(len)
    }

    /// When [`Connection::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.state {
            State::Closed => None,
            State::Connecting {
                since, last_sent, ..
            } => Some(
                last_sent
                    .map_or(*since, |t| t + REQUEST_AGAIN)
                    .min(*since + self.config.connect_timeout),
            ),
            // A goodbye goes at once (the process may be about to exit), not at the next timer.
            State::Open if self.closing && self.flushed() => Some(self.start),
            State::Open => {
                let mut due = self
                    .next_ack
                    .min(self.next_nak_check)
                    .min(self.exp_deadline());
                if self.can_send() {
                    due = due.min(self.next_send);
                } else if let Some(t) = self.network_window_opens_at() {
                    due = due.min(t);
                }
                if let Some((until, ask)) = self.ready_hold {
                    due = due.min(until).min(ask);
                }
                Some(due)
            }
        }
    }

    /// Whether a datagram is waiting to go now (control, or data the pacing allows).
    pub fn wants_transmit(&self, now: Instant) -> bool {
        !self.control.is_empty() || ((now >= self.next_send || self.probe_pair) && self.can_send())
    }

    /// Whether a data packet could go once the pacing allows: a loss to resend, or a new
    /// packet within the windows.
    fn can_send(&self) -> bool {
        let (Some(s), Some(cc)) = (self.sender.as_ref(), self.cc.as_ref()) else {
            return false;
        };
        let held = if cc.window_counts_network() {
            s.in_network_before()
        } else {
            s.in_flight()
        };
        matches!(self.state, State::Open)
            && self.ready_hold.is_none()
            && (!s.losses.is_empty()
                || (s.has_unsent()
                    && held < cc.window().max(2.0) as u64
                    && s.in_flight() < s.flow_window))
    }

    /// How long a packet sent counts as still in the network (a round trip, its variation,
    /// and the receiver's ACK interval twice), and the round trip it is scaled to.
    pub(crate) fn network_horizon(&self) -> Horizon {
        let peer = (self.rtt, self.rtt_var);
        let (rtt, var) = match self.own_rtt {
            // The sender's samples after a hole fills include the wait for it (the newest
            // packet acknowledged arrived long before): on a lossy path the smaller figure,
            // once the peer's has settled, is the round trip.
            Some(own) if self.peer_rtt_updates >= PEER_RTT_SETTLED && peer.0 < own.0 => peer,
            Some(own) => own,
            None => peer,
        };
        Horizon {
            span: Duration::from_micros(u64::from(rtt) + 4 * u64::from(var)) + 2 * SYN,
            rtt: Duration::from_micros(u64::from(rtt)),
        }
    }

    /// When a sender held by its window counted in the network may send again (nothing
    /// else wakes it: the count falls as time passes, not as ACKs come).
    fn network_window_opens_at(&self) -> Option<Instant> {
        let (s, cc) = (self.sender.as_ref()?, self.cc.as_ref()?);
        (cc.window_counts_network() && s.has_unsent())
            .then(|| s.in_network_falls_at(self.network_horizon().span))
            .flatten()
    }
}

#[cfg(test)]
mod tests;
