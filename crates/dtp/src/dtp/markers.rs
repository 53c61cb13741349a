//! Restart and perf markers emitted on the PI's event channel while a transfer runs.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ferry_proto::clock;
use ferry_proto::RangeSet;
use tokio::sync::mpsc;

use crate::disk_stack::{Beyond, Opened};
use crate::{Direction, DtpError, DtpEvent, TransferDescription};

/// Tells the PI the transfer can start. Sent with back-pressure (unlike markers, which may be
/// dropped when the PI lags): the PI must see it before any marker.
pub(super) async fn begin(events: &mpsc::Sender<DtpEvent>) {
    let _ = events.send(DtpEvent::Begin).await;
}

/// What the disk stack reports while a transfer runs: its news, and what the destinations
/// beyond this server hold (see [`crate::disk_stack::Beyond`]); kept across the transfer and
/// the wait for the stack's own work, whose markers go on.
#[derive(Default)]
pub(super) struct Stack {
    pub(super) news: Option<mpsc::UnboundedReceiver<String>>,
    pub(super) beyond: Vec<std::sync::Arc<dyn Beyond>>,
    /// With destinations beyond: every range written, and what markers reported of it.
    written: RangeSet,
    reported: RangeSet,
}

impl Stack {
    /// The ranges the next restart marker reports: with destinations beyond this server, a
    /// range once every one of them holds it too.
    fn due(&mut self, take_written: &(dyn Fn() -> RangeSet + Sync)) -> RangeSet {
        let fresh = take_written();
        if self.beyond.is_empty() {
            return fresh;
        }
        self.written.merge(&fresh);
        let mut new = Opened::held(&self.beyond, &self.written);
        new.subtract(&self.reported);
        self.reported.merge(&new);
        new
    }
}

/// What one transfer's markers are made of, from its start to the end of its stack's work.
pub(super) struct Markers<'a> {
    /// The transfer, for its marker intervals and stripe.
    pub(super) desc: &'a TransferDescription,
    /// The PI's event channel.
    pub(super) events: &'a mpsc::Sender<DtpEvent>,
    /// The bytes moved so far.
    pub(super) bytes: &'a (dyn Fn() -> u64 + Sync),
    /// The ranges written since last asked (none for a send).
    pub(super) take_written: &'a (dyn Fn() -> RangeSet + Sync),
    /// The data connections' round trip in µs, 0 until known.
    pub(super) data_rtt_us: &'a AtomicU32,
    /// What the disk stack reports.
    pub(super) stack: Stack,
}

impl Markers<'_> {
    /// Drives `fut` while emitting restart and perf markers at the description's intervals,
    /// and a perf marker at once for each line of news from the disk stack. Once the data
    /// connections' round trip is known, each perf marker says it.
    pub(super) async fn drive<T>(
        &mut self,
        fut: impl std::future::Future<Output = Result<T, DtpError>>,
    ) -> Result<T, DtpError> {
        let (desc, events, bytes) = (self.desc, self.events, self.bytes);
        let (take_written, data_rtt_us) = (self.take_written, self.data_rtt_us);
        let stack = &mut self.stack;
        tokio::pin!(fut);
        let mut restart = desc.markers.restart_ms.map(ticker);
        let mut perf = desc.markers.perf_ms.map(ticker);
        let perf_now = |news: Vec<String>| DtpEvent::Perf {
            stripe_index: desc.stripe.index,
            stripe_count: desc.stripe.count,
            bytes: bytes(),
            timestamp_tenths: now_tenths(),
            news,
            data_rtt_us: Some(data_rtt_us.load(Ordering::Relaxed)).filter(|us| *us > 0),
        };
        // Drivers that say when their destinations stored more: one of them, for the wake-up (a
        // stack forwards through one driver; others are read at each tick all the same).
        let changed = stack.beyond.iter().find_map(|b| b.changed());
        loop {
            tokio::select! {
                r = &mut fut => {
                    if desc.direction == Direction::Receive && restart.is_some() {
                        let done = stack.due(take_written);
                        if !done.is_empty() {
                            let _ = events.try_send(DtpEvent::Restart(done));
                        }
                    }
                    return r;
                }
                _ = tick(&mut restart) => {
                    let done = stack.due(take_written);
                    if !done.is_empty() {
                        let _ = events.try_send(DtpEvent::Restart(done));
                    }
                }
                _ = wake(changed.as_deref()), if restart.is_some() => {
                    let done = stack.due(take_written);
                    if !done.is_empty() {
                        let _ = events.try_send(DtpEvent::Restart(done));
                    }
                }
                _ = tick(&mut perf) => {
                    let _ = events.try_send(perf_now(Vec::new()));
                }
                Some(mut news) = next_news(&mut stack.news) => {
                    // Not dropped when the PI lags, unlike the periodic markers: a failure
                    // reported late is still worth reporting.
                    if let Some(rx) = &mut stack.news {
                        while let Ok(more) = rx.try_recv() {
                            news.push(more);
                        }
                    }
                    let _ = events.send(perf_now(news)).await;
                }
            }
        }
    }
}

async fn wake(changed: Option<&tokio::sync::Notify>) {
    match changed {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

async fn next_news(news: &mut Option<mpsc::UnboundedReceiver<String>>) -> Option<Vec<String>> {
    match news {
        Some(rx) => match rx.recv().await {
            Some(line) => Some(vec![line]),
            None => {
                *news = None;
                std::future::pending().await
            }
        },
        None => std::future::pending().await,
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
