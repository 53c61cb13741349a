//! What the peer says: data into the receiver, ACKs, ACK2s and NAKs into the sender, the
//! handshake's later steps, shutdown.

use std::time::{Duration, Instant};

use super::*;

impl Connection {
    /// A datagram from the peer, already parsed and addressed to this socket.
    pub fn handle(&mut self, now: Instant, packet: &Packet<'_>) {
        if self.is_closed() {
            // Our shutdown may have been lost: a peer still talking hears it again.
            let shut = matches!(
                packet,
                Packet::Control {
                    body: Control::Shutdown,
                    ..
                }
            );
            if let Some(sent) = self.shutdown_sent.filter(|_| !shut && !self.peer_closed) {
                if now.duration_since(sent) >= RESHUTDOWN {
                    self.shutdown_sent = Some(now);
                    self.control.push_back(Control::Shutdown);
                }
            }
            return;
        }
        self.last_heard = now;
        if !matches!(
            packet,
            Packet::Control {
                body: Control::Handshake(_),
                ..
            }
        ) {
            self.ready_hold = None;
        }
        match packet {
            Packet::Data {
                seq: s, payload, ..
            } => self.on_data(now, *s, payload),
            Packet::Control { body, .. } => self.on_control(now, body),
        }
    }

    fn on_data(&mut self, now: Instant, wire: u32, payload: &[u8]) {
        let isn = self.isn;
        let Some(r) = self.receiver.as_mut() else {
            return;
        };
        if payload.len() > self.payload {
            // Longer than the MSS both sides agreed on, which libudt's sender and ours keep
            // to: not our peer's data, and storing it would multiply what the window holds.
            self.stats.oversized += 1;
            return;
        }
        self.stats.received += 1;
        r.arrivals.arrived(now, wire);
        let Some(count) = seq::unwrap(isn, r.contiguous, wire) else {
            return;
        };
        if !r.within_window(count) {
            // Past the window offered, which a sender keeps to: it would be a gap the loss
            // list and the reports carry for nothing.
            self.stats.beyond_window += 1;
            return;
        }
        if payload.len() != self.payload {
            // A short packet ends a write: acknowledge it without waiting for the timer.
            self.next_ack = now;
        }
        if let Some((from, to)) = r.insert(now, count, payload) {
            self.stats.naks_sent += 1;
            let words = if from == to {
                vec![seq::wire(isn, from)]
            } else {
                vec![seq::wire(isn, from) | 0x8000_0000, seq::wire(isn, to)]
            };
            self.control.push_back(Control::Nak(words));
        }
        if let Some(ack) = r.light_ack_due() {
            self.control.push_back(Control::Ack(Ack {
                number: 0,
                ack: seq::wire(isn, ack),
                full: None,
            }));
        }
    }

    fn on_control(&mut self, now: Instant, body: &Control) {
        match body {
            Control::Handshake(hs) => self.on_handshake(now, hs),
            Control::Ack(ack) => self.on_ack(now, ack),
            Control::Ack2 { number } => {
                if let Some(rtt) = self.receiver.as_mut().and_then(|r| r.ack2(now, *number)) {
                    self.update_rtt(rtt);
                }
            }
            Control::Nak(words) => self.on_nak(now, words),
            Control::Shutdown => {
                self.peer_closed = true;
                if !self.flushed() {
                    self.fail(ConnError::PeerClosed("data of ours unacknowledged"));
                } else if self.closing {
                    self.state = State::Closed;
                }
            }
            Control::PeerError { code } => self.fail(ConnError::PeerError(*code)),
            Control::KeepAlive
            | Control::CongestionWarning
            | Control::DropRequest { .. }
            | Control::Other { .. } => {}
        }
    }

    fn on_handshake(&mut self, now: Instant, hs: &Handshake) {
        match &mut self.state {
            State::Connecting { request, .. } => {
                if hs.request_type == REQUEST {
                    request.request_type = RESPONSE;
                    request.cookie = hs.cookie;
                    let again = *request;
                    self.control.push_back(Control::Handshake(again));
                } else if hs.request_type == REFUSED {
                    self.fail(ConnError::Refused);
                } else if hs.request_type == RESPONSE {
                    if hs.isn != request.isn {
                        self.fail(ConnError::ForeignAnswer);
                        return;
                    }
                    let mss = hs.mss.min(self.config.mss);
                    self.open(now, hs.isn, hs.id, mss, hs.flight_flag);
                }
            }
            State::Open if hs.request_type > 0 => self.resend_response(),
            _ => {}
        }
    }

    /// The peer acknowledged or asked for something: the retransmission timer restarts.
    fn progress(&mut self, now: Instant) {
        self.last_progress = now;
        self.exp_count = 1;
    }

    fn update_rtt(&mut self, rtt: u32) {
        self.peer_rtt_updates = self.peer_rtt_updates.saturating_add(1);
        let diff = rtt.abs_diff(self.rtt);
        self.rtt_var = ((u64::from(self.rtt_var) * 3 + u64::from(diff)) >> 2) as u32;
        self.rtt = ((u64::from(self.rtt) * 7 + u64::from(rtt)) >> 3) as u32;
    }

    fn on_ack(&mut self, now: Instant, ack: &Ack) {
        let isn = self.isn;
        let horizon = self.network_horizon();
        let Some(s) = self.sender.as_mut() else {
            return;
        };
        let Some(count) = seq::unwrap(isn, s.una, ack.ack) else {
            return;
        };
        if count > s.next {
            return;
        }
        let Some(info) = ack.full else {
            if count > s.una {
                let delta = count - s.una;
                s.flow_window = s.flow_window.saturating_sub(delta);
                s.acknowledge(count);
                self.progress(now);
            }
            return;
        };
        let repeated = self.last_ack2.is_some_and(|(n, _)| n == ack.number);
        if repeated
            || self
                .last_ack2
                .is_none_or(|(_, t)| now.duration_since(t) > SYN)
        {
            self.control.push_back(Control::Ack2 { number: ack.number });
            self.last_ack2 = Some((ack.number, now));
        }
        let advanced = count > s.una;
        // The sender's own RTT sample: the newest packet this ACK covers, sent when? (It
        // includes up to one ACK interval; the ACK's own field is the receiver's smoothed
        // figure, which starts at libudt's 100 ms default whatever the path.)
        let newest_sent_at = s.sent_time(count);
        let newest_first_sent_at = s.first_sent_time(count);
        let own_rtt = newest_sent_at
            .map(|t| now.saturating_duration_since(t).as_micros() as u32)
            .filter(|&r| r > 0);
        if let Some(r) = own_rtt {
            self.own_rtt = Some(match self.own_rtt {
                None => (r, r / 2),
                Some((srtt, var)) => (
                    ((u64::from(srtt) * 7 + u64::from(r)) >> 3) as u32,
                    ((u64::from(var) * 3 + u64::from(srtt.abs_diff(r))) >> 2) as u32,
                ),
            });
        }
        if count >= s.una {
            s.flow_window = u64::from(info.available);
            s.acknowledge(count);
        }
        s.confirmed = s.confirmed.max(count);
        s.drain.ack(now, count, u64::from(info.available));
        let (acked, sent) = (s.una, s.next);
        let in_network = s.in_network(now, horizon);
        if advanced {
            self.progress(now);
        }
        self.update_rtt(info.rtt);
        if let Some(rate) = info.receive_rate.filter(|&r| r > 0) {
            self.receive_rate = ((u64::from(self.receive_rate) * 7 + u64::from(rate)) >> 3) as u32;
        }
        if let Some(bw) = info.bandwidth.filter(|&b| b > 0) {
            self.bandwidth = ((u64::from(self.bandwidth) * 7 + u64::from(bw)) >> 3) as u32;
        }
        let sample = AckSample {
            acked,
            sent,
            in_network,
            rtt_us: self.rtt,
            rtt_sample_us: own_rtt.unwrap_or(info.rtt),
            receive_rate: self.receive_rate,
            receive_rate_sample: info.receive_rate,
            counted_rate: info.counted_rate,
            bandwidth: self.bandwidth,
            newest_sent_at,
            newest_first_sent_at,
            acked_resent: self.sender.as_ref().map_or(0, |s| s.acked_resent),
            app_limited: self.app_limited_mark.is_some_and(|m| acked <= m),
            receiver_drain: self.sender.as_ref().and_then(|s| s.drain.rate(now)),
        };
        if self.app_limited_mark.is_some_and(|m| acked > m) {
            self.app_limited_mark = None;
        }
        if let Some(cc) = self.cc.as_mut() {
            cc.on_ack(now, &sample);
            if let Some(s) = self.sender.as_mut() {
                // Room for what is unacknowledged (behind holes too) and a window more.
                s.grow_to((cc.window() + s.in_flight() as f64).min(s.flow_window as f64));
            }
        }
    }

    fn on_nak(&mut self, now: Instant, words: &[u32]) {
        let isn = self.isn;
        let Some(s) = self.sender.as_mut() else {
            return;
        };
        self.stats.naks_received += 1;
        let mut newly = 0;
        let mut first = None;
        let mut i = 0;
        while i < words.len() {
            let (a, b) = if words[i] & 0x8000_0000 != 0 && i + 1 < words.len() {
                i += 2;
                (words[i - 2] & seq::MAX_SEQ, words[i - 1])
            } else {
                i += 1;
                (words[i - 1] & seq::MAX_SEQ, words[i - 1] & seq::MAX_SEQ)
            };
            let (Some(from), Some(to)) = (seq::unwrap(isn, s.una, a), seq::unwrap(isn, s.una, b))
            else {
                self.stats.bogus_naks += 1;
                continue;
            };
            if from > to || to >= s.next {
                self.stats.bogus_naks += 1;
                continue;
            }
            first = Some(first.map_or(from, |f: u64| f.min(from)));
            s.drain.loss(to);
            if s.note_reported(from, to) {
                // Named again: this receiver repeats its reports (ferry's does; libudt's
                // reports a loss once), so the timer need not resend everything.
                self.peer_repeats_naks = true;
            }
            // A repeated report of a packet resent within the last round trip crossed that
            // resend: resending again would only duplicate it.
            let recent = now.checked_sub(Duration::from_micros(u64::from(self.rtt)));
            newly += s.lose(from, to, recent);
        }
        if first.is_some() {
            self.progress(now);
        }
        // libudt's receivers report a loss once; ferry's repeat overdue ones. Only news of a
        // loss is a loss event for the controller (CUDTCC would slow down for every repeat).
        if newly == 0 {
            return;
        }
        let (Some(first), Some(s), Some(cc)) = (first, self.sender.as_ref(), self.cc.as_mut())
        else {
            return;
        };
        let (sent, acked) = (s.next, s.una);
        let in_network = s.in_network_before();
        cc.on_loss(
            now,
            &LossSample {
                first,
                newly_lost: newly,
                sent,
                acked,
                in_network,
            },
        );
    }
}
