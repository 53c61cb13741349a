//! Restart and perf markers emitted on the PI's event channel while a transfer runs.

use std::time::Duration;

use ferry_proto::clock;
use ferry_proto::RangeSet;
use tokio::sync::mpsc;

use crate::{Direction, DtpError, DtpEvent, TransferDescription};

/// Tells the PI the transfer can start. Sent with back-pressure (unlike markers, which may be
/// dropped when the PI lags): the PI must see it before any marker.
pub(super) async fn begin(events: &mpsc::Sender<DtpEvent>) {
    let _ = events.send(DtpEvent::Begin).await;
}

/// Drives `fut` while emitting restart and perf markers at the description's intervals.
pub(super) async fn with_markers<T>(
    fut: impl std::future::Future<Output = Result<T, DtpError>>,
    desc: &TransferDescription,
    events: &mpsc::Sender<DtpEvent>,
    bytes: &(dyn Fn() -> u64 + Sync),
    take_written: &(dyn Fn() -> RangeSet + Sync),
) -> Result<T, DtpError> {
    tokio::pin!(fut);
    let mut restart = desc.markers.restart_ms.map(ticker);
    let mut perf = desc.markers.perf_ms.map(ticker);
    loop {
        tokio::select! {
            r = &mut fut => {
                if desc.direction == Direction::Receive && restart.is_some() {
                    let done = take_written();
                    if !done.is_empty() {
                        let _ = events.try_send(DtpEvent::Restart(done));
                    }
                }
                return r;
            }
            _ = tick(&mut restart) => {
                let done = take_written();
                if !done.is_empty() {
                    let _ = events.try_send(DtpEvent::Restart(done));
                }
            }
            _ = tick(&mut perf) => {
                let _ = events.try_send(DtpEvent::Perf {
                    stripe_index: desc.stripe.index,
                    stripe_count: desc.stripe.count,
                    bytes: bytes(),
                    timestamp_tenths: now_tenths(),
                });
            }
        }
    }
}

fn ticker(ms: u64) -> tokio::time::Interval {
    let period = Duration::from_millis(ms.max(100));
    tokio::time::interval_at(tokio::time::Instant::now() + period, period)
}

async fn tick(t: &mut Option<tokio::time::Interval>) {
    match t {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending::<()>().await,
    }
}

fn now_tenths() -> u64 {
    clock::now_since_epoch().as_millis() as u64 / 100
}
