//! A listener's connections: those open now, and those refused because its limit was reached.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The open connections gauge and the refused connections counter of one listener (cheap to
/// clone: clones share their values).
#[derive(Debug, Clone, Default)]
pub struct Connections {
    open: Gauge,
    refused: Counter,
}

/// What the two families of [`Connections`] are called and what their help says.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionsHelp<'a> {
    /// The gauge's name; the counter's is the same with `_refused`.
    pub name: &'a str,
    /// The gauge's help.
    pub open: &'a str,
    /// The counter's help.
    pub refused: &'a str,
}

impl Connections {
    /// Registers the gauge and the counter in `registry` as `help` names and describes them.
    pub fn register(&self, registry: &mut Registry, help: ConnectionsHelp<'_>) {
        registry.register(help.name, help.open, self.open.clone());
        registry.register(
            format!("{}_refused", help.name),
            help.refused,
            self.refused.clone(),
        );
    }

    /// A connection was accepted.
    pub fn opened(&self) {
        self.open.inc();
    }

    /// An accepted connection closed.
    pub fn closed(&self) {
        self.open.dec();
    }

    /// A connection was closed at once because the limit was reached.
    pub fn refused(&self) {
        self.refused.inc();
    }
}
