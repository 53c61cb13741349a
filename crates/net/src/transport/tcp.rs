//! `tcp`: the default transport, with the kernel's socket tuning (buffers before connect and
//! listen, no Nagle) and zero-copy sends to other hosts.
//!
//! Its one option is the congestion control of the connections, `tcp:congestion=bbr`
//! (`SITE SETNETSTACK tcp:congestion=bbr`): what matters is the sending side's, so a client
//! asks it of a server that will send. Options are `;`-separated `key=value` pairs, as
//! Globus XIO's string options are.

use super::{Bind, ConnectFuture, Dial, Transport};
use crate::{bind_listener, connect, Congestion, DataListener, NetError, SocketTuning};

/// TCP.
#[derive(Debug)]
pub(super) struct Tcp;

impl Tcp {
    /// `tuning` with what `options` set.
    fn tuned(options: &str, tuning: SocketTuning) -> Result<SocketTuning, NetError> {
        let mut tuning = tuning;
        for pair in options.split(';').filter(|p| !p.is_empty()) {
            let bad = |why: String| NetError::DriverOptions {
                driver: "tcp".into(),
                why,
            };
            match pair.split_once('=') {
                Some(("congestion", name)) => {
                    let cc = Congestion::new(name).map_err(bad)?;
                    tuning.congestion = Some(cc);
                }
                _ => {
                    return Err(bad(format!(
                        "unknown option {pair:?} (the tcp driver takes congestion=NAME)"
                    )))
                }
            }
        }
        Ok(tuning)
    }
}

impl Transport for Tcp {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn accept_options(&self, options: &str) -> Result<(), NetError> {
        let tuning = Tcp::tuned(options, SocketTuning::default())?;
        if let Some(cc) = tuning.congestion {
            cc.check().map_err(|why| NetError::DriverOptions {
                driver: "tcp".into(),
                why,
            })?;
        }
        Ok(())
    }

    fn connect<'a>(&'a self, dial: Dial<'a>) -> ConnectFuture<'a> {
        let (addr, tuning, options) = (dial.addr, dial.tuning, dial.options);
        Box::pin(async move { connect(addr, Tcp::tuned(options, tuning)?).await })
    }

    fn listen(&self, bind: Bind<'_>) -> Result<DataListener, NetError> {
        bind_listener(bind.ip, bind.range, Tcp::tuned(bind.options, bind.tuning)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn congestion_is_the_one_option_and_is_checked_against_the_kernel() {
        let t = Tcp::tuned("congestion=reno", SocketTuning::default()).unwrap();
        assert_eq!(t.congestion.unwrap().as_str(), "reno");
        assert!(Tcp.accept_options("congestion=reno").is_ok());
        assert!(Tcp.accept_options("").is_ok());
        for bad in [
            "nodelay=0",
            "congestion=",
            "congestion=no such",
            "congestion=madeupcc",
        ] {
            let err = Tcp.accept_options(bad).unwrap_err().to_string();
            assert!(err.starts_with("tcp driver: "), "{bad}: {err}");
        }
    }
}
