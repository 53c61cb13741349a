//! A `quic:` stack entry's options: the sending side's congestion controller, the
//! flow-control windows and the session key (see the parent module's documentation).

use std::sync::Arc;

use super::binding::{SessionKey, KEY_LEN};
use super::datagrams::{self, DEFAULT_MAX_PAYLOAD, MIN_PAYLOAD};
use super::{bounded, windows, IDLE_TIMEOUT_MS, KEEP_ALIVE};
use crate::{NetError, SocketTuning};

/// Flow-control window without an option or a buffer size.
pub(super) const DEFAULT_WINDOW: u64 = 64 << 20;
/// The smallest window taken from a buffer size: a 4 KiB `-tcp-bs` would starve QUIC.
pub(super) const MIN_WINDOW: u64 = 1 << 20;

/// The sending side's congestion controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Controller {
    Bbr,
    Cubic,
    NewReno,
}

/// A `quic:` stack entry's options.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Options {
    pub(super) congestion: Controller,
    pub(super) window: Option<u64>,
    /// The session key each connection proves it knows (`binding`), from `bind=HEX`.
    pub(super) bind: Option<SessionKey>,
    /// `parallel=streams`: a transfer's parallel streams are streams of one QUIC connection
    /// (`shared`); `parallel=connections` (the default): one connection each.
    pub(super) shared: bool,
    /// `mtu=BYTES`: the largest UDP payload probed for and taken (`datagrams`).
    pub(super) max_payload: u16,
}

impl std::fmt::Debug for Options {
    /// Without the session key's bytes: debug logs are no place for them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("congestion", &self.congestion)
            .field("window", &self.window)
            .field("bind", &self.bind.map(|_| "…"))
            .field("shared", &self.shared)
            .field("max_payload", &self.max_payload)
            .finish()
    }
}

impl Options {
    pub(super) fn parse(options: &str) -> Result<Options, NetError> {
        let mut o = Options {
            congestion: Controller::Bbr,
            window: None,
            bind: None,
            shared: false,
            max_payload: DEFAULT_MAX_PAYLOAD,
        };
        let bad = |why: String| NetError::DriverOptions {
            driver: "quic".into(),
            why,
        };
        for pair in options.split(';').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("congestion", name)) => {
                    o.congestion = match name.to_ascii_lowercase().as_str() {
                        "bbr" => Controller::Bbr,
                        "cubic" => Controller::Cubic,
                        "newreno" | "reno" => Controller::NewReno,
                        _ => {
                            return Err(bad(format!(
                                "unknown congestion control {name:?} (bbr, cubic or newreno)"
                            )))
                        }
                    }
                }
                Some(("window", n)) => {
                    let bytes: u64 = n
                        .parse()
                        .map_err(|_| bad(format!("window must be a byte count, got {n:?}")))?;
                    if !(MIN_WINDOW..=1 << 40).contains(&bytes) {
                        return Err(bad(format!(
                            "window {bytes} is outside {MIN_WINDOW} to {}",
                            1u64 << 40
                        )));
                    }
                    o.window = Some(bytes);
                }
                Some(("parallel", how)) => {
                    o.shared = match how.to_ascii_lowercase().as_str() {
                        "streams" => true,
                        "connections" => false,
                        _ => {
                            return Err(bad(format!(
                                "parallel must be streams or connections, got {how:?}"
                            )))
                        }
                    }
                }
                Some(("mtu", n)) => {
                    o.max_payload = n
                        .parse()
                        .ok()
                        .filter(|b| (MIN_PAYLOAD..=datagrams::MAX_BATCH as u16).contains(b))
                        .ok_or_else(|| {
                            bad(format!(
                                "mtu must be a UDP payload size from {MIN_PAYLOAD} to {}, got {n:?}",
                                datagrams::MAX_BATCH
                            ))
                        })?;
                }
                Some(("bind", hex)) => {
                    o.bind = Some(SessionKey::from_hex(hex).ok_or_else(|| {
                        bad(format!(
                            "bind must be {} hexadecimal digits (a session key), got {} characters",
                            2 * KEY_LEN,
                            hex.len()
                        ))
                    })?);
                }
                _ => {
                    return Err(bad(format!(
                        "unknown option {pair:?} (the quic driver takes congestion=bbr|cubic|newreno, window=BYTES, mtu=BYTES, parallel=streams|connections and bind=KEY)"
                    )))
                }
            }
        }
        Ok(o)
    }

    /// The windows for connections tuned with `tuning`.
    pub(super) fn window(&self, tuning: &SocketTuning) -> u64 {
        self.window
            .or_else(|| {
                tuning
                    .send_buffer
                    .max(tuning.recv_buffer)
                    .map(|b| u64::from(b).max(MIN_WINDOW))
            })
            .unwrap_or(DEFAULT_WINDOW)
    }

    /// Whether the windows grow with the path (`windows`): unless a window or a buffer size
    /// was asked for, which then holds, as an explicit TCP buffer does.
    pub(super) fn follows_path(&self, tuning: &SocketTuning) -> bool {
        self.window.is_none() && tuning.send_buffer.max(tuning.recv_buffer).is_none()
    }

    pub(super) fn transport(&self, tuning: &SocketTuning) -> Arc<quinn::TransportConfig> {
        let window = self.window(tuning);
        let mut t = quinn::TransportConfig::default();
        let w = quinn::VarInt::from_u64(window).unwrap_or(quinn::VarInt::MAX);
        // A growing connection window needs a stream window that does not hold it back.
        let stream = match self.follows_path(tuning) {
            true => quinn::VarInt::from_u64(windows::MAX_WINDOW).unwrap_or(quinn::VarInt::MAX),
            false => w,
        };
        t.stream_receive_window(stream)
            .receive_window(w)
            .send_window(window)
            .max_idle_timeout(Some(quinn::VarInt::from_u32(IDLE_TIMEOUT_MS).into()))
            .keep_alive_interval(Some(KEEP_ALIVE))
            .max_concurrent_bidi_streams(match self.shared {
                true => super::shared::MAX_STREAMS.into(),
                false => 1u8.into(),
            })
            .max_concurrent_uni_streams(0u8.into());
        let inner: Arc<dyn quinn::congestion::ControllerFactory + Send + Sync> =
            match self.congestion {
                Controller::Bbr => Arc::new(quinn::congestion::BbrConfig::default()),
                Controller::Cubic => Arc::new(quinn::congestion::CubicConfig::default()),
                Controller::NewReno => Arc::new(quinn::congestion::NewRenoConfig::default()),
            };
        let mut mtu = quinn::MtuDiscoveryConfig::default();
        mtu.upper_bound(self.max_payload);
        t.mtu_discovery_config(Some(mtu));
        t.congestion_controller_factory(Arc::new(bounded::BoundedFactory(inner)));
        Arc::new(t)
    }
}
