//! A `udt:` stack entry's options: Globus' UDT driver's keys, and ferry's `cc`.

use std::time::Duration;

use ferry_udt::cc::Controller;
use ferry_udt::Config;

use crate::transport::udp::Buffers;
use crate::NetError;

/// A `udt:` stack entry's options.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Options {
    pub(super) mss: Option<u32>,
    pub(super) flight_flag: Option<u32>,
    /// UDP socket buffers (Globus' `sndbuf`/`rcvbuf` set these, not libudt's own).
    pub(super) buffers: Buffers,
    pub(super) controller: Controller,
}

/// Keys Globus' driver takes that mean nothing here: blocking and timeouts are the DTP's,
/// linger is always on, ports come from PASV/PORT.
const IGNORED: [&str; 6] = [
    "sndsyn",
    "rcvsyn",
    "linger",
    "sndtimeo",
    "rcvtimeo",
    "reuseaddr",
];

impl Options {
    pub(super) fn parse(options: &str) -> Result<Options, NetError> {
        let bad = |why: String| NetError::DriverOptions {
            driver: "udt".into(),
            why,
        };
        let number = |key: &str, v: &str, lo: u32, hi: u32| -> Result<u32, NetError> {
            let n: u32 = v
                .parse()
                .map_err(|_| bad(format!("{key} must be a number, got {v:?}")))?;
            if !(lo..=hi).contains(&n) {
                return Err(bad(format!("{key}={n} is outside {lo} to {hi}")));
            }
            Ok(n)
        };
        let mut o = Options::default();
        for pair in options.split(';').filter(|p| !p.is_empty()) {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(bad(format!("{pair:?} is not key=value")));
            };
            match key {
                "mss" => o.mss = Some(number(key, value, 128, 65_535)?),
                "fc" => o.flight_flag = Some(number(key, value, 32, 1 << 24)?),
                "sndbuf" => o.buffers.send = Some(number(key, value, 1500, 1 << 30)?),
                "rcvbuf" => o.buffers.recv = Some(number(key, value, 1500, 1 << 30)?),
                "cc" => {
                    o.controller = Controller::parse(value).ok_or_else(|| {
                        bad(format!("unknown congestion control {value:?} (bbr or udt)"))
                    })?
                }
                "rendezvous" if matches!(value, "0" | "false" | "no") => {}
                "rendezvous" => return Err(bad("rendezvous connections are not offered".into())),
                "port" => {
                    number(key, value, 0, 65_535)?;
                }
                k if IGNORED.contains(&k) => {}
                _ => {
                    return Err(bad(format!(
                        "unknown option {key:?} (the udt driver takes mss, fc, sndbuf, rcvbuf and cc=bbr|udt)"
                    )))
                }
            }
        }
        Ok(o)
    }

    /// The connection settings these options ask for.
    pub(super) fn config(&self) -> Config {
        let mut c = Config {
            controller: self.controller,
            silence: Duration::from_secs(30),
            ..Config::default()
        };
        if let Some(mss) = self.mss {
            c.mss = mss;
        }
        if let Some(fc) = self.flight_flag {
            c.flight_flag = fc;
        }
        // `fc` is the peer's to choose (`SITE SETNETSTACK`), and the flow window is what this
        // side buffers for it: held to `ferry_udt::MAX_RECEIVE_BUFFER` at this MSS, as the
        // core holds it, so the handshake offers what will be taken.
        c.flight_flag = c.flow_window();
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_udt::MAX_RECEIVE_BUFFER;

    #[test]
    fn globus_keys_parse_and_unknown_ones_are_named() {
        let o = Options::parse("mss=9000;fc=25600;rcvbuf=10000000;linger=1;cc=udt").unwrap();
        assert_eq!(o.mss, Some(9000));
        assert_eq!(o.flight_flag, Some(25_600));
        assert_eq!(o.buffers.recv, Some(10_000_000));
        assert_eq!(o.controller, Controller::Udt);
        assert_eq!(o.config().mss, 9000);
        let e = Options::parse("window=5").unwrap_err().to_string();
        assert!(e.contains("\"window\""), "{e}");
        assert!(Options::parse("mss=12").is_err());
        assert!(Options::parse("rendezvous=1").is_err());
        assert!(Options::parse("cc=reno").is_err());
    }

    #[test]
    fn a_flow_window_past_the_receive_buffer_bound_is_held_to_it() {
        // Globus' own range is taken, as Globus takes it.
        for options in [
            "fc=16777216",
            "mss=9000;fc=16777216",
            "mss=65535",
            "mss=128;fc=16777216",
        ] {
            let config = Options::parse(options).unwrap().config();
            let payload = config.mss as usize - 44;
            assert!(
                config.flight_flag as usize * payload <= MAX_RECEIVE_BUFFER,
                "{options}: {} packets",
                config.flight_flag
            );
        }
        // What a legitimate peer asks for stays as asked, the default included.
        assert_eq!(Options::parse("").unwrap().config().flight_flag, 131_072);
        let globus = Options::parse("mss=1500;fc=25600").unwrap().config();
        assert_eq!(globus.flight_flag, 25_600);
        let wide = Options::parse("fc=160000").unwrap().config();
        assert_eq!(wide.flight_flag, 160_000);
    }
}
