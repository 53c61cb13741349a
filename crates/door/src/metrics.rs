//! The door's Prometheus families, registered in the server's one registry beside the GridFTP
//! door's: requests by method and status, bytes by direction, connections open.

use ferry_metrics::{Connections, ConnectionsHelp, DirectionLabel};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Registry, Unit};

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    status: u16,
}

/// The door's counters (cheap to clone: they share their values).
#[derive(Debug, Clone)]
pub struct DoorMetrics {
    requests: Family<RequestLabels, Counter>,
    bytes: Family<DirectionLabel, Counter>,
    spliced: Counter,
    tokens_refused: Family<ReasonLabel, Counter>,
    pub(crate) connections: Connections,
}

impl DoorMetrics {
    /// Registers the families in `registry`.
    pub fn new(registry: &mut Registry) -> DoorMetrics {
        let m = DoorMetrics {
            requests: Family::default(),
            bytes: Family::default(),
            spliced: Counter::default(),
            tokens_refused: Family::default(),
            connections: Connections::default(),
        };
        registry.register(
            "ferry_http_tokens_refused",
            "Bearer tokens the HTTPS door refused, by reason (expired, audience, signature, ...)",
            m.tokens_refused.clone(),
        );
        registry.register(
            "ferry_http_requests",
            "HTTP requests answered by the HTTPS door, by method and status",
            m.requests.clone(),
        );
        registry.register_with_unit(
            "ferry_http_data",
            "File bytes the HTTPS door sent (GET) and received (PUT)",
            Unit::Bytes,
            m.bytes.clone(),
        );
        registry.register_with_unit(
            "ferry_http_data_spliced",
            "Of the bytes sent, those sent with sendfile (clear-text connections)",
            Unit::Bytes,
            m.spliced.clone(),
        );
        m.connections.register(
            registry,
            ConnectionsHelp {
                name: "ferry_http_connections",
                open: "HTTPS connections open now",
                refused: "HTTPS connections closed at once because connections-max were open",
            },
        );
        m
    }

    pub(crate) fn request(&self, method: &str, status: u16) {
        // Only the methods the door knows get their own label; the rest share one.
        let method = match method {
            "GET" | "HEAD" | "PUT" | "DELETE" | "MKCOL" | "MOVE" | "COPY" | "OPTIONS"
            | "PROPFIND" | "PROPPATCH" | "LOCK" | "UNLOCK" | "POST" => method,
            _ => "other",
        };
        self.requests
            .get_or_create(&RequestLabels {
                method: method.to_string(),
                status,
            })
            .inc();
    }

    pub(crate) fn token_refused(&self, reason: &'static str) {
        self.tokens_refused
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    pub(crate) fn sent(&self, n: u64) {
        self.bytes
            .get_or_create(&DirectionLabel { direction: "sent" })
            .inc_by(n);
    }

    pub(crate) fn spliced(&self, n: u64) {
        self.spliced.inc_by(n);
    }

    pub(crate) fn received(&self, n: u64) {
        self.bytes
            .get_or_create(&DirectionLabel {
                direction: "received",
            })
            .inc_by(n);
    }
}
