//! The service's Prometheus metrics (`ferry service --metrics ADDR`), served by
//! [`ferry_metrics::Endpoint`] beside the process metrics, as `ferry serve` serves its own.

use std::sync::atomic::AtomicU64;

use ferry_metrics::ResultLabel;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct StateLabel {
    pub(crate) state: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct LinkLabel {
    pub(crate) link: String,
}

/// What the service counts.
#[derive(Debug, Default)]
pub struct Metrics {
    pub(crate) files: Family<StateLabel, Gauge>,
    pub(crate) link_active: Family<LinkLabel, Gauge>,
    pub(crate) link_target: Family<LinkLabel, Gauge>,
    pub(crate) link_throughput: Family<LinkLabel, Gauge<f64, AtomicU64>>,
    pub(crate) bytes: Counter,
    pub(crate) attempts: Family<ResultLabel, Counter>,
    pub(crate) decisions: Counter,
}

impl Metrics {
    /// The families, registered in `registry` under `ferry_service_`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("ferry_service");
        r.register("files", "Files in the queue by state", self.files.clone());
        r.register(
            "link_active",
            "Transfers running per link (source server → destination server)",
            self.link_active.clone(),
        );
        r.register(
            "link_target",
            "Transfers the optimizer allows per link",
            self.link_target.clone(),
        );
        r.register_with_unit(
            "link_throughput",
            "Bytes per second per link over the optimizer's last window",
            Unit::Other("bytes_per_second".into()),
            self.link_throughput.clone(),
        );
        r.register_with_unit(
            "moved",
            "Bytes moved by the service's transfers",
            Unit::Bytes,
            self.bytes.clone(),
        );
        r.register(
            "attempts",
            "Transfer attempts by how they ended (finished, retry, failed, canceled, stopped)",
            self.attempts.clone(),
        );
        r.register(
            "optimizer_decisions",
            "Changes of a link's concurrency by the optimizer",
            self.decisions.clone(),
        );
    }
}
