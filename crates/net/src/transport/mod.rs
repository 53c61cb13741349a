//! Data-channel transports behind one trait, chosen by the bottom driver of a transfer's net
//! stack (`SITE SETNETSTACK`). A transport connects, listens and accepts; the GSI layer of
//! DCAU/PROT composes above whichever one carries the bytes (`DataConn::secure`).
//!
//! A new transport is a module here (or an embedding program's type) and one line in
//! [`Transports::standard`]; its name then goes on the admin's `--dc-whitelist`.

mod quic;
mod tcp;
mod udp;
mod udt;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use ferry_proto::stack::StackSpec;

use crate::{DataConn, DataListener, NetError, PortRange, SocketTuning};

/// The layer name globus-url-copy puts above the transport (`tcp,gsi`, `udt,gsi`): the GSI
/// protection that DCAU and PROT apply to every connection whatever the stack says.
pub const GSI_LAYER: &str = "gsi";

/// What a transport is asked to connect to: the peer, the socket tuning applied before the
/// handshake, and the options of its stack entry.
#[derive(Debug, Clone, Copy)]
pub struct Dial<'a> {
    /// The peer.
    pub addr: SocketAddr,
    /// Buffers and congestion control.
    pub tuning: SocketTuning,
    /// The stack entry's options (`mss=9000`).
    pub options: &'a str,
}

/// Where a transport is asked to listen: the address, the admin's port range if any, the socket
/// tuning and the options of its stack entry.
#[derive(Debug, Clone, Copy)]
pub struct Bind<'a> {
    /// The local address.
    pub ip: IpAddr,
    /// The ports it may take (`None`: any).
    pub range: Option<PortRange>,
    /// Buffers and congestion control.
    pub tuning: SocketTuning,
    /// The stack entry's options.
    pub options: &'a str,
}

/// A boxed connect future, so transports stay object-safe.
pub type ConnectFuture<'a> = Pin<Box<dyn Future<Output = Result<DataConn, NetError>> + Send + 'a>>;

/// One data-channel transport.
pub trait Transport: std::fmt::Debug + Send + Sync {
    /// The name clients use in `SITE SETNETSTACK`.
    fn name(&self) -> &'static str;

    /// Checks the options of its stack entry (`udt:mss=9000` → `mss=9000`).
    fn accept_options(&self, options: &str) -> Result<(), NetError> {
        if options.is_empty() {
            Ok(())
        } else {
            Err(NetError::DriverOptions {
                driver: self.name().to_string(),
                why: format!("takes no options, got {options:?}"),
            })
        }
    }

    /// Whether its own handshake authenticates and encrypts (QUIC's TLS 1.3), so DCAU needs
    /// no GSI layer above it; a plain byte stream (TCP, UDT) answers false, and clients then
    /// name the `gsi` layer in the stack they ask for, as globus-url-copy does.
    fn secures_itself(&self) -> bool {
        false
    }

    /// Connects as `dial` says, its tuning applied before the handshake.
    fn connect<'a>(&'a self, dial: Dial<'a>) -> ConnectFuture<'a>;

    /// Listens as `bind` says.
    fn listen(&self, bind: Bind<'_>) -> Result<DataListener, NetError>;
}

/// The registry of transports this program offers.
#[derive(Debug, Clone)]
pub struct Transports {
    transports: Vec<Arc<dyn Transport>>,
}

impl Default for Transports {
    fn default() -> Self {
        Transports::standard()
    }
}

impl Transports {
    /// Every transport of this build: the one place a transport is registered.
    pub fn standard() -> Transports {
        Transports {
            transports: vec![Arc::new(tcp::Tcp), Arc::new(quic::Quic), Arc::new(udt::Udt)],
        }
    }

    /// Adds a transport (an embedding program's own, or a test's), replacing one of its name.
    pub fn with(mut self, transport: Arc<dyn Transport>) -> Transports {
        self.transports.retain(|t| t.name() != transport.name());
        self.transports.push(transport);
        self
    }

    /// Whether a net-stack driver of this name exists: a transport, or the GSI layer.
    pub fn has_driver(&self, name: &str) -> bool {
        name == GSI_LAYER || self.transports.iter().any(|t| t.name() == name)
    }

    /// The transport at the bottom of `stack` and its options, once the whole stack checks out:
    /// a known transport at the bottom, only the GSI layer (without options) above it.
    pub fn transport_of<'s>(
        &'s self,
        stack: &'s StackSpec,
    ) -> Result<(&'s Arc<dyn Transport>, &'s str), NetError> {
        let Some((bottom, layers)) = stack.drivers.split_first() else {
            return Err(NetError::DriverNotAllowed(String::new()));
        };
        let transport = self
            .transports
            .iter()
            .find(|t| t.name() == bottom.name)
            .ok_or_else(|| NetError::DriverNotAllowed(bottom.name.clone()))?;
        transport.accept_options(&bottom.options)?;
        if let Some(layer) = layers
            .iter()
            .find(|d| d.name != GSI_LAYER || !d.options.is_empty())
        {
            return Err(NetError::DriverOptions {
                driver: layer.name.clone(),
                why: "only the gsi layer, without options, can sit above a transport".into(),
            });
        }
        Ok((transport, bottom.options.as_str()))
    }

    /// Connects to `addr` over `stack`'s transport.
    pub async fn connect(
        &self,
        stack: &StackSpec,
        addr: SocketAddr,
        tuning: SocketTuning,
    ) -> Result<DataConn, NetError> {
        let (transport, options) = self.transport_of(stack)?;
        let dial = Dial {
            addr,
            tuning,
            options,
        };
        transport.connect(dial).await
    }

    /// Listens over `stack`'s transport.
    pub fn listen(
        &self,
        stack: &StackSpec,
        ip: IpAddr,
        range: Option<PortRange>,
        tuning: SocketTuning,
    ) -> Result<DataListener, NetError> {
        let (transport, options) = self.transport_of(stack)?;
        transport.listen(Bind {
            ip,
            range,
            tuning,
            options,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bottom_picks_the_transport_and_only_gsi_goes_above_it() {
        let t = Transports::standard();
        let stack = |s: &str| StackSpec::parse(s).unwrap();
        assert_eq!(t.transport_of(&stack("tcp")).unwrap().0.name(), "tcp");
        assert_eq!(t.transport_of(&stack("tcp,gsi")).unwrap().0.name(), "tcp");
        assert!(t.has_driver("gsi") && t.has_driver("tcp") && !t.has_driver("rate"));
        assert_eq!(t.transport_of(&stack("quic,gsi")).unwrap().0.name(), "quic");
        assert_eq!(t.transport_of(&stack("udt,gsi")).unwrap().0.name(), "udt");
        assert!(matches!(
            t.transport_of(&stack("rate,gsi")),
            Err(NetError::DriverNotAllowed(n)) if n == "rate"
        ));
        assert!(matches!(
            t.transport_of(&stack("gsi,tcp")),
            Err(NetError::DriverNotAllowed(n)) if n == "gsi"
        ));
        assert!(matches!(
            t.transport_of(&stack("tcp:nodelay=0")),
            Err(NetError::DriverOptions { .. })
        ));
        assert!(matches!(
            t.transport_of(&stack("tcp,tcp")),
            Err(NetError::DriverOptions { .. })
        ));
    }
}
