//! `tcp`: the default transport, with the kernel's socket tuning (buffers before connect and
//! listen, no Nagle) and zero-copy sends to other hosts.

use std::net::{IpAddr, SocketAddr};

use super::{ConnectFuture, Transport};
use crate::{bind_listener, connect, DataListener, NetError, PortRange, SocketTuning};

/// TCP.
#[derive(Debug)]
pub(super) struct Tcp;

impl Transport for Tcp {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn connect<'a>(
        &'a self,
        addr: SocketAddr,
        tuning: SocketTuning,
        _options: &'a str,
    ) -> ConnectFuture<'a> {
        Box::pin(connect(addr, tuning))
    }

    fn listen(
        &self,
        ip: IpAddr,
        range: Option<PortRange>,
        tuning: SocketTuning,
        _options: &str,
    ) -> Result<DataListener, NetError> {
        bind_listener(ip, range, tuning)
    }
}
