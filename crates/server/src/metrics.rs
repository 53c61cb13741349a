//! The server's Prometheus metrics (`--metrics ADDR`): what sessions, transfers, data channels
//! and GSI logins did since the start, counted where they happen and served by
//! [`ferry_metrics::Endpoint`] with the process metrics beside them.

use ferry_dtp::{DtpError, TransferDescription, TransferOutcome};
use ferry_metrics::{Connections, ConnectionsHelp, DirectionLabel, ResultLabel};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

/// How a session logged in (`auth` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum AuthKind {
    Anonymous,
    Password,
    Gsi,
}

impl AuthKind {
    fn label(self) -> &'static str {
        match self {
            AuthKind::Anonymous => "anonymous",
            AuthKind::Password => "password",
            AuthKind::Gsi => "gsi",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AuthLabel {
    auth: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TransferLabels {
    direction: &'static str,
    result: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// Every family the server counts. Cheap to update from any task (atomics).
#[derive(Debug)]
pub(crate) struct ServerMetrics {
    pub(crate) connections: Connections,
    sessions: Family<AuthLabel, Gauge>,
    logins: Family<AuthLabel, Counter>,
    login_failures: Family<AuthLabel, Counter>,
    transfers: Family<TransferLabels, Counter>,
    transfers_running: Gauge,
    bytes: Family<DirectionLabel, Counter>,
    throughput: Family<DirectionLabel, Histogram>,
    streams: Histogram,
    restarts: Counter,
    listings: Family<ResultLabel, Counter>,
    data_channel_errors: Family<KindLabel, Counter>,
    gsi_failures: Family<ReasonLabel, Counter>,
    reloads: Family<ResultLabel, Counter>,
}

impl ServerMetrics {
    /// Fresh families, registered in `registry` under `ferry_`.
    pub(crate) fn new(registry: &mut Registry) -> ServerMetrics {
        let m = ServerMetrics {
            connections: Connections::default(),
            sessions: Family::default(),
            logins: Family::default(),
            login_failures: Family::default(),
            transfers: Family::default(),
            transfers_running: Gauge::default(),
            bytes: Family::default(),
            // 1 MB/s to 128 GB/s.
            throughput: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(1e6, 2.0, 18))
            }),
            streams: Histogram::new(exponential_buckets(1.0, 2.0, 9)),
            restarts: Counter::default(),
            listings: Family::default(),
            data_channel_errors: Family::default(),
            gsi_failures: Family::default(),
            reloads: Family::default(),
        };
        // Every direction and result from the first scrape, so rates and sums need no
        // absent-series handling.
        for direction in ["send", "receive"] {
            for result in ["ok", "failed", "aborted"] {
                let _ = m
                    .transfers
                    .get_or_create(&TransferLabels { direction, result });
            }
            let _ = m.bytes.get_or_create(&DirectionLabel { direction });
        }
        for result in ["ok", "refused"] {
            let _ = m.reloads.get_or_create(&ResultLabel { result });
        }
        let r = registry.sub_registry_with_prefix("ferry");
        m.connections.register(
            r,
            ConnectionsHelp {
                name: "control_connections",
                open: "Control connections open now, logged in or not",
                refused: "Control connections refused with 421 because connections-max was reached",
            },
        );
        r.register(
            "sessions",
            "Logged-in sessions now, by how they authenticated",
            m.sessions.clone(),
        );
        r.register(
            "logins",
            "Successful logins, by how they authenticated",
            m.logins.clone(),
        );
        r.register(
            "login_failures",
            "Refused logins (wrong password, unmapped DN, account unusable)",
            m.login_failures.clone(),
        );
        r.register(
            "transfers",
            "Finished file transfers, by direction (send = RETR/ERET, receive = STOR/ESTO/APPE) and result (ok, failed, aborted)",
            m.transfers.clone(),
        );
        r.register(
            "transfers_running",
            "File transfers and listings running now",
            m.transfers_running.clone(),
        );
        r.register_with_unit(
            "transfer",
            "Payload bytes moved by file transfers (failed ones included), by direction",
            Unit::Bytes,
            m.bytes.clone(),
        );
        r.register(
            "transfer_throughput_bytes_per_second",
            "Throughput of each successful file transfer of at least 1 MiB",
            m.throughput.clone(),
        );
        r.register(
            "transfer_streams",
            "Data connections each successful file transfer used",
            m.streams.clone(),
        );
        r.register(
            "transfer_restarts",
            "File transfers that resumed from a restart marker or REST offset",
            m.restarts.clone(),
        );
        r.register(
            "listings",
            "Directory listings sent over a data channel (LIST, NLST, MLSD), by result",
            m.listings.clone(),
        );
        r.register(
            "data_channel_errors",
            "Transfers failed by the data channel, by kind (connect, listen, no_data_channel, connection, protocol, idle_timeout, remote_node)",
            m.data_channel_errors.clone(),
        );
        r.register(
            "gsi_failures",
            "Refused GSI authentications, by reason (untrusted, revoked, expired, signing_policy, not_authorized, handshake, …)",
            m.gsi_failures.clone(),
        );
        r.register(
            "config_reloads",
            "Configuration reloads (SIGHUP), by result (ok, refused)",
            m.reloads.clone(),
        );
        m
    }

    /// A login succeeded: counted, and the session counted as logged in until
    /// [`ServerMetrics::logged_out`].
    pub(crate) fn logged_in(&self, kind: AuthKind) {
        let l = AuthLabel { auth: kind.label() };
        self.logins.get_or_create(&l).inc();
        self.sessions.get_or_create(&l).inc();
    }

    pub(crate) fn logged_out(&self, kind: AuthKind) {
        self.sessions
            .get_or_create(&AuthLabel { auth: kind.label() })
            .dec();
    }

    pub(crate) fn login_failed(&self, kind: AuthKind) {
        self.login_failures
            .get_or_create(&AuthLabel { auth: kind.label() })
            .inc();
    }

    pub(crate) fn gsi_failed(&self, reason: &'static str) {
        self.gsi_failures
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    pub(crate) fn transfer_started(&self) {
        self.transfers_running.inc();
    }

    pub(crate) fn transfer_ended(&self) {
        self.transfers_running.dec();
    }

    pub(crate) fn reloaded(&self, ok: bool) {
        let result = if ok { "ok" } else { "refused" };
        self.reloads.get_or_create(&ResultLabel { result }).inc();
    }

    /// Counts a finished transfer: `moved` is what a failed one moved, `aborted` whether the
    /// client (or its going away) stopped it.
    pub(crate) fn transfer_finished(
        &self,
        desc: &TransferDescription,
        result: &Result<TransferOutcome, DtpError>,
        moved: u64,
        aborted: bool,
    ) {
        let outcome = match (result, aborted) {
            (Ok(_), _) => "ok",
            (Err(_), true) => "aborted",
            (Err(_), false) => "failed",
        };
        if let Err(e) = result {
            if !aborted {
                if let Some(kind) = data_channel_error_kind(e) {
                    self.data_channel_errors
                        .get_or_create(&KindLabel { kind })
                        .inc();
                }
            }
        }
        if !matches!(desc.source, ferry_dtp::TransferSource::File) {
            self.listings
                .get_or_create(&ResultLabel { result: outcome })
                .inc();
            return;
        }
        let direction = match desc.direction {
            ferry_dtp::Direction::Send => "send",
            ferry_dtp::Direction::Receive => "receive",
        };
        self.transfers
            .get_or_create(&TransferLabels {
                direction,
                result: outcome,
            })
            .inc();
        let d = DirectionLabel { direction };
        let bytes = result.as_ref().map_or(moved, |o| o.bytes);
        self.bytes.get_or_create(&d).inc_by(bytes);
        if !desc.restart.is_empty() {
            self.restarts.inc();
        }
        if let Ok(o) = result {
            self.streams.observe(f64::from(o.streams));
            let secs = o.duration.as_secs_f64();
            // Below a MiB a transfer measures its latency, not its rate.
            if o.bytes >= 1 << 20 && secs > 0.0 {
                self.throughput
                    .get_or_create(&d)
                    .observe(o.bytes as f64 / secs);
            }
        }
    }
}

/// The `kind` label of a transfer the data channel failed; `None` for storage and other
/// failures that are not the network's.
fn data_channel_error_kind(e: &DtpError) -> Option<&'static str> {
    Some(match e {
        DtpError::Connect(_) => "connect",
        DtpError::Listen(_) => "listen",
        DtpError::NoDataChannel => "no_data_channel",
        DtpError::Connection(_) => "connection",
        DtpError::Protocol(_) => "protocol",
        DtpError::IdleTimeout(_) => "idle_timeout",
        DtpError::Remote { .. } => "remote_node",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_encode_with_their_prefix_and_labels() {
        let mut registry = Registry::default();
        let m = ServerMetrics::new(&mut registry);
        m.connections.opened();
        m.logged_in(AuthKind::Gsi);
        m.gsi_failed("revoked");
        m.reloaded(false);
        let text = ferry_metrics::encode(&registry).expect("encodes");
        for line in [
            "ferry_control_connections 1",
            "ferry_sessions{auth=\"gsi\"} 1",
            "ferry_logins_total{auth=\"gsi\"} 1",
            "ferry_gsi_failures_total{reason=\"revoked\"} 1",
            "ferry_config_reloads_total{result=\"refused\"} 1",
            "# TYPE ferry_transfer_bytes counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }
}
