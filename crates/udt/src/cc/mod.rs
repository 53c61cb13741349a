//! Congestion control behind one trait, as libudt's CCC allows: the receiver is the same
//! whatever the sender runs, so any controller here works against a libudt peer.
//!
//! A controller sets two things, read after every event: the period between packets (the
//! pacing rate) and a window of packets in flight.

mod bbr;
mod cudt;

use std::time::Instant;

pub use self::bbr::Bbr;
pub use self::cudt::Cudt;

/// What an acknowledgement tells a controller.
#[derive(Debug, Clone, Copy)]
pub struct AckSample {
    /// Packets acknowledged in all (the ACK's sequence number, counted from the ISN).
    pub acked: u64,
    /// Packets sent in all (the next new packet's count).
    pub sent: u64,
    /// Packets sent within the last round trip and its ACK interval: those the network may
    /// still hold (unacknowledged ones behind a hole arrived long ago).
    pub in_network: u64,
    /// Smoothed RTT, microseconds.
    pub rtt_us: u32,
    /// The newest RTT sample, microseconds: the sender's own (since the newest packet the ACK
    /// covers went out) when it has one, else the figure the ACK carries.
    pub rtt_sample_us: u32,
    /// Arrival rate the receiver measured (smoothed), packets per second; 0 if unknown.
    pub receive_rate: u32,
    /// The arrival rate this ACK carried, unsmoothed (libudt sends it at most every 10 ms;
    /// `None` on the ACKs between, `Some(0)` when the receiver could not measure).
    pub receive_rate_sample: Option<u32>,
    /// The arrival rate a ferry receiver counted over its ACK interval (an extension word
    /// libudt never sends): steadier than libudt's figure, which is from the last 16 gaps
    /// and reads high when the path delivers in bursts.
    pub counted_rate: Option<u32>,
    /// Link capacity the receiver measured from packet pairs (smoothed), packets per second.
    pub bandwidth: u32,
    /// When the newest packet this ACK covers last went out (`None`: no longer known).
    pub newest_sent_at: Option<Instant>,
    /// When the newest packet this ACK covers first went out (a resend aside): the rate a
    /// controller measures must count packets a filled hole releases as sent when they were.
    pub newest_first_sent_at: Option<Instant>,
    /// Packets acknowledged in all that had been resent.
    pub acked_resent: u64,
    /// The sender ran out of data while these packets were out (a GSI handshake, an idle
    /// MODE E connection): their rates say how much was sent, not what the path takes.
    pub app_limited: bool,
    /// Packets per second the receiver frees room for, while its flow window bounds the
    /// sender (its reader, not the path, sets the pace then).
    pub receiver_drain: Option<f64>,
}

/// A loss report (NAK) as a controller sees it.
#[derive(Debug, Clone, Copy)]
pub struct LossSample {
    /// The first packet reported lost, counted from the ISN.
    pub first: u64,
    /// Packets reported lost that were not reported before.
    pub newly_lost: u64,
    /// Packets sent in all.
    pub sent: u64,
    /// Packets acknowledged in all.
    pub acked: u64,
    /// As [`AckSample::in_network`].
    pub in_network: u64,
}

/// A sending controller.
pub trait CongestionControl: Send + std::fmt::Debug {
    /// Its name in options and logs.
    fn name(&self) -> &'static str;
    /// After a full ACK.
    fn on_ack(&mut self, now: Instant, ack: &AckSample);
    /// After a NAK.
    fn on_loss(&mut self, now: Instant, loss: &LossSample);
    /// When the peer stayed silent past the retransmission timer.
    fn on_timeout(&mut self, now: Instant);
    /// After each packet sent (`retransmit` for a resent one).
    fn on_sent(&mut self, _now: Instant, _retransmit: bool) {}
    /// Microseconds between packets.
    fn period_us(&self) -> f64;
    /// Packets allowed in flight.
    fn window(&self) -> f64;
    /// Whether [`CongestionControl::window`] bounds the packets sent within the last round
    /// trip (what the network holds; see `Sender::in_network`) rather than every packet not
    /// yet acknowledged, which is libudt's rule and the default.
    fn window_counts_network(&self) -> bool {
        false
    }
}

/// Which controller a connection's sender runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Controller {
    /// Model-based (bottleneck rate and minimum RTT), random loss is not congestion: ferry's.
    #[default]
    Bbr,
    /// libudt 4.11's own CUDTCC (DAIMD): for comparison and conservative sites.
    Udt,
}

impl Controller {
    /// The name in `udt:cc=…`.
    pub fn parse(name: &str) -> Option<Controller> {
        match name {
            "bbr" => Some(Controller::Bbr),
            "udt" | "cudtcc" => Some(Controller::Udt),
            _ => None,
        }
    }

    /// A fresh controller for a connection whose peer takes `max_window` packets in flight.
    pub fn build(self, now: Instant, mss: u32, max_window: u32) -> Box<dyn CongestionControl> {
        match self {
            Controller::Bbr => Box::new(Bbr::new(now, max_window)),
            Controller::Udt => Box::new(Cudt::new(now, mss, max_window)),
        }
    }
}
