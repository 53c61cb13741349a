//! The connection's timers: ACK and NAK reports, and the retransmission timer (libudt's
//! EXP), which resends or gives up on a silent peer.

use super::*;

impl Connection {
    /// The retransmission timer (libudt's EXP): it runs from the last progress while data is
    /// outstanding (a peer that only repeats its ACK is alive but has not got the tail),
    /// else from the last packet heard, when it sends a keep-alive.
    pub(super) fn exp_deadline(&self) -> Instant {
        let per = Duration::from_micros(u64::from(self.rtt) + 4 * u64::from(self.rtt_var)) + SYN;
        let interval = (per * self.exp_count).max(MIN_EXP * self.exp_count);
        let outstanding = self.sender.as_ref().is_some_and(|s| s.in_flight() > 0);
        let base = if outstanding {
            self.last_progress
        } else {
            self.last_heard
        };
        self.last_exp.max(base) + interval
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let State::Connecting {
            request,
            since,
            last_sent,
        } = &mut self.state
        {
            if now.duration_since(*since) >= self.config.connect_timeout {
                let secs = self.config.connect_timeout.as_secs();
                self.fail(ConnError::HandshakeTimeout(secs));
                return;
            }
            if last_sent.is_none_or(|t| now.duration_since(t) >= REQUEST_AGAIN) {
                *last_sent = Some(now);
                let again = *request;
                self.control.push_back(Control::Handshake(again));
            }
            return;
        }
        if !matches!(self.state, State::Open) {
            return;
        }
        self.ask_if_ready(now);
        if now >= self.next_ack {
            self.next_ack = now + SYN;
            self.push_full_ack(now);
        }
        if now >= self.next_nak_check {
            self.next_nak_check = now + SYN;
            self.report_overdue_losses(now);
        }
        if now >= self.exp_deadline() {
            self.expire(now);
        }
        if self.closing && self.flushed() && !self.is_closed() {
            // What we hold, acknowledged once more just before the goodbye: the last periodic
            // ACK may be lost or not yet due, and a sender that hears the shutdown with data
            // unacknowledged must take it for a failure.
            if let Some(r) = self.receiver.as_mut() {
                r.ack_again();
            }
            self.push_full_ack(now);
            self.control.push_back(Control::Shutdown);
            self.shutdown_sent = Some(now);
            self.state = State::Closed;
        }
    }

    /// The hold runs from when our handshake answer goes out (each time it does), not from
    /// the accept: the endpoint may send it late.
    pub(super) fn hold_from(&mut self, now: Instant, sent: &Control) {
        if let (Some((_, ask)), Control::Handshake(_)) = (self.ready_hold, sent) {
            self.ready_hold = Some((now + READY_HOLD, ask));
        }
    }

    /// While an accepted connection holds its data: a full ACK of nothing every
    /// [`READY_PING`]. A peer answers it with ACK2 once its connection is set up (libudt's
    /// only after its connecting thread registered it); [`READY_HOLD`] bounds the wait for a
    /// peer that does not, and on a long path, where the answer takes a round trip, the
    /// connector has long been ready when the hold ends. (libudt answers at once as built
    /// for x86: it compares its cycle counter with a time in microseconds, so its 10 ms
    /// between ACK2s always seems past. Built to count microseconds it answers only 10 ms
    /// after connecting, still within the hold.)
    fn ask_if_ready(&mut self, now: Instant) {
        let Some((until, ask)) = self.ready_hold else {
            return;
        };
        if now >= until {
            self.ready_hold = None;
        } else if now >= ask {
            self.ready_hold = Some((until, now + READY_PING));
            let (isn, rtt, var) = (self.isn, self.rtt, self.rtt_var);
            if let Some((ack, mut body)) = self.receiver.as_mut().map(|r| r.ping(now, rtt, var)) {
                body.ack = seq::wire(isn, ack);
                self.control.push_back(Control::Ack(body));
            }
        }
    }

    /// Queues a full ACK, if the receiver's rules allow one now.
    fn push_full_ack(&mut self, now: Instant) {
        let isn = self.isn;
        let (rtt, var) = (self.rtt, self.rtt_var);
        if let Some((ack, mut body)) = self
            .receiver
            .as_mut()
            .and_then(|r| r.full_ack(now, rtt, var))
        {
            body.ack = seq::wire(isn, ack);
            self.control.push_back(Control::Ack(body));
        }
    }

    fn report_overdue_losses(&mut self, now: Instant) {
        let isn = self.isn;
        let limit = (self.payload / 4) as u64;
        let per = Duration::from_micros(u64::from(self.rtt) + 4 * u64::from(self.rtt_var));
        let Some(r) = self.receiver.as_mut() else {
            return;
        };
        let missing = r.loss_count();
        // libudt's allowance for the time the sender takes to resend the list, held to one
        // more round trip so a long list never silences the reports.
        let draining = if self.receive_rate > 0 {
            Duration::from_micros(missing * 1_000_000 / u64::from(self.receive_rate.max(1)))
                .min(per)
        } else {
            Duration::ZERO
        };
        let interval = (per + draining).max(MIN_NAK_INTERVAL);
        let due = r.overdue_losses(now, interval, limit);
        if !due.is_empty() {
            self.stats.naks_sent += 1;
            self.control.push_back(Control::Nak(nak_words(isn, &due)));
        }
    }

    fn expire(&mut self, now: Instant) {
        if now.duration_since(self.last_heard) >= self.config.silence {
            let secs = self.config.silence.as_secs();
            self.fail(ConnError::PeerSilent(secs));
            return;
        }
        self.stats.timeouts += 1;
        let patience =
            Duration::from_micros(u64::from(self.rtt) + 4 * u64::from(self.rtt_var)) + SYN;
        let s = self.sender.as_mut();
        match s {
            Some(s) if s.in_flight() > 0 || s.has_unsent() => {
                // libudt resends everything outstanding, packets sent within the last round
                // trip aside (they cannot have been acknowledged yet): its receiver reports a
                // loss once, so a lost resend is found no other way. Resending all of a large
                // window when the receiver holds most of it costs seconds on a long path, so:
                // - a receiver that repeats its reports will name every missing packet again:
                //   only the oldest, which holds the ACK back, goes now;
                // - otherwise the packets a report named (a resend lost again) go, and the
                //   ones it did not, which the receiver holds, stay; all go only when no report
                //   is overdue (the tail was lost, and the receiver saw nothing to report).
                if s.in_flight() > 0 && s.losses.is_empty() {
                    let cutoff = now.checked_sub(patience).unwrap_or(self.start);
                    if self.peer_repeats_naks {
                        s.lose(s.una, s.una, None);
                    } else if s.lose_reported_older_than(cutoff) <= 1 {
                        // No loss report is overdue: the tail went unseen. libudt's go-back-N.
                        s.lose_older_than(cutoff);
                    }
                }
                if let Some(cc) = self.cc.as_mut() {
                    cc.on_timeout(now);
                }
            }
            _ => self.control.push_back(Control::KeepAlive),
        }
        self.exp_count += 1;
        self.last_exp = now;
    }
}

/// Loss-list words for sorted runs: runs as flagged ranges (adjacent ones joined), single
/// packets alone.
fn nak_words(isn: u32, runs: &[(u64, u64)]) -> Vec<u32> {
    let mut joined: Vec<(u64, u64)> = Vec::with_capacity(runs.len());
    for &(from, to) in runs {
        match joined.last_mut() {
            Some(last) if last.1 + 1 == from => last.1 = to,
            _ => joined.push((from, to)),
        }
    }
    let mut words = Vec::with_capacity(2 * joined.len());
    for (from, to) in joined {
        if to > from {
            words.push(seq::wire(isn, from) | 0x8000_0000);
            words.push(seq::wire(isn, to));
        } else {
            words.push(seq::wire(isn, from));
        }
    }
    words
}
