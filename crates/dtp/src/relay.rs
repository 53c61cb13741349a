//! The one loop that runs a transfer on a [`DataMover`] while relaying its events, used by the
//! server PI (single node and striped frontend: events become 150/111/112 replies), by a data
//! node (events go back over the IPC link) and by the client (events become progress). Each of
//! them also watches one other input while the data moves (the control channel, the IPC link,
//! the server's replies), which may stop the transfer.

use std::future::Future;

use ferry_proto::markers::{PerfMarker, RestartMarker};
use ferry_proto::Reply;
use tokio::sync::mpsc;

use crate::{DataMover, DtpError, DtpEvent, TransferDescription, TransferOutcome};

/// Events a mover may have queued before the relay reads them; a lagging reader makes the
/// mover drop markers, never block on them (see `with_markers`).
const EVENT_QUEUE: usize = 64;

/// What a relay's other input says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watch {
    /// Nothing that concerns the transfer: keep going.
    Continue,
    /// Stop the transfer now (ABOR, a lost peer, a refusal from the other side).
    Stop,
}

/// Where a relay sends events, and the other input it watches.
pub trait RelaySink: Send {
    /// Why the sink cannot go on (its own connection failed).
    type Error: Send;

    /// Handles one event from the mover.
    fn event(&mut self, ev: DtpEvent) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Waits for the other input. Must be cancel-safe: the relay drops it whenever an event
    /// arrives or the transfer ends. A sink with nothing to watch stays pending.
    fn watch(&mut self) -> impl Future<Output = Result<Watch, Self::Error>> + Send;
}

/// How a relayed transfer ended.
#[derive(Debug)]
pub enum Relayed {
    /// The mover finished, well or not.
    Finished(Result<TransferOutcome, DtpError>),
    /// The sink's input stopped it; the mover's transfer future was dropped, which stops its
    /// streams.
    Stopped,
}

/// Runs `desc` on `mover`, handing every event to `sink` in order (those still queued when
/// the transfer ends included) while watching the sink's input.
pub async fn relay<M, S>(
    mover: &mut M,
    desc: &TransferDescription,
    sink: &mut S,
) -> Result<Relayed, S::Error>
where
    M: DataMover + ?Sized,
    S: RelaySink,
{
    let (tx, mut rx) = mpsc::channel::<DtpEvent>(EVENT_QUEUE);
    let ended = {
        let mut run = mover.run(desc, &tx);
        loop {
            tokio::select! {
                r = &mut run => break Relayed::Finished(r),
                Some(ev) = rx.recv() => sink.event(ev).await?,
                w = sink.watch() => {
                    if w? == Watch::Stop {
                        break Relayed::Stopped;
                    }
                }
            }
        }
    };
    while let Ok(ev) = rx.try_recv() {
        sink.event(ev).await?;
    }
    Ok(ended)
}

/// The 111 or 112 reply a PI sends for a marker event; `None` for other events (and for an
/// empty restart set).
pub fn marker_reply(ev: &DtpEvent) -> Option<Reply> {
    match ev {
        DtpEvent::Begin => None,
        DtpEvent::Restart(ranges) => RestartMarker(ranges.clone()).to_reply(),
        DtpEvent::Perf {
            stripe_index,
            stripe_count,
            bytes,
            timestamp_tenths,
            news,
            data_rtt_us,
        } => {
            let mut r = PerfMarker {
                timestamp_tenths: *timestamp_tenths,
                stripe_index: *stripe_index,
                stripe_bytes: *bytes,
                total_stripes: *stripe_count,
            }
            .to_reply();
            // Before the closing `End.`, where a reader of the fields by name finds them too.
            let end = r.lines.len().saturating_sub(1);
            let rtt = data_rtt_us.map(ferry_proto::markers::data_rtt_line);
            r.lines
                .splice(end..end, rtt.into_iter().chain(news.iter().cloned()));
            Some(r)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::net::SocketAddr;
    use std::time::Duration;

    use ferry_proto::RangeSet;

    use super::*;
    use crate::{MoverFuture, PassiveRequest};

    /// A mover that plays back a script of events, then finishes or waits forever.
    #[derive(Debug)]
    struct Scripted {
        events: Vec<DtpEvent>,
        finish: bool,
    }

    impl DataMover for Scripted {
        fn open_passive(
            &mut self,
            _req: PassiveRequest,
        ) -> MoverFuture<'_, Result<Vec<SocketAddr>, DtpError>> {
            Box::pin(async { Err(DtpError::NoDataChannel) })
        }
        fn set_active<'a>(
            &'a mut self,
            _endpoints: &'a [SocketAddr],
        ) -> MoverFuture<'a, Result<(), DtpError>> {
            Box::pin(async { Ok(()) })
        }
        fn forget(&mut self) {}
        fn forget_cache(&mut self) {}
        fn will_reuse(&self, _desc: &TransferDescription) -> bool {
            false
        }
        fn run<'a>(
            &'a mut self,
            _desc: &'a TransferDescription,
            events: &'a mpsc::Sender<DtpEvent>,
        ) -> MoverFuture<'a, Result<TransferOutcome, DtpError>> {
            Box::pin(async move {
                for ev in &self.events {
                    let _ = events.send(ev.clone()).await;
                }
                if !self.finish {
                    std::future::pending::<()>().await;
                }
                Ok(TransferOutcome {
                    bytes: 7,
                    streams: 1,
                    duration: Duration::ZERO,
                    reused: false,
                    checksums: Vec::new(),
                    checksum_read_back: 0,
                    tcp: None,
                })
            })
        }
        fn bytes_moved(&self) -> u64 {
            0
        }
    }

    /// A sink that records events and plays back a script of watch results.
    struct Recorder {
        seen: Vec<DtpEvent>,
        watches: VecDeque<Watch>,
    }

    impl RelaySink for Recorder {
        type Error = ();
        async fn event(&mut self, ev: DtpEvent) -> Result<(), ()> {
            self.seen.push(ev);
            Ok(())
        }
        async fn watch(&mut self) -> Result<Watch, ()> {
            match self.watches.pop_front() {
                Some(w) => {
                    // Let the mover's events in first.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Ok(w)
                }
                None => std::future::pending().await,
            }
        }
    }

    fn description() -> TransferDescription {
        TransferDescription::new(
            crate::Direction::Send,
            ferry_storage::VirtualPath::root(),
            crate::ChannelSetup::Passive,
        )
    }

    #[tokio::test]
    async fn every_event_reaches_the_sink_in_order_including_those_queued_at_the_end() {
        let script = vec![
            DtpEvent::Begin,
            DtpEvent::Restart(RangeSet::from_range(0, 10)),
            DtpEvent::Restart(RangeSet::from_range(10, 20)),
        ];
        let mut mover = Scripted {
            events: script.clone(),
            finish: true,
        };
        let mut sink = Recorder {
            seen: Vec::new(),
            watches: VecDeque::from([Watch::Continue]),
        };
        let r = relay(&mut mover, &description(), &mut sink).await;
        assert!(matches!(r, Ok(Relayed::Finished(Ok(o))) if o.bytes == 7));
        assert_eq!(sink.seen, script);
    }

    #[tokio::test]
    async fn a_stop_from_the_watched_input_ends_a_transfer_that_would_never_finish() {
        let mut mover = Scripted {
            events: vec![DtpEvent::Begin],
            finish: false,
        };
        let mut sink = Recorder {
            seen: Vec::new(),
            watches: VecDeque::from([Watch::Continue, Watch::Stop]),
        };
        let r = relay(&mut mover, &description(), &mut sink).await;
        assert!(matches!(r, Ok(Relayed::Stopped)));
        assert_eq!(sink.seen, vec![DtpEvent::Begin]);
    }

    #[test]
    fn markers_become_111_and_112_replies_and_begin_none() {
        assert!(marker_reply(&DtpEvent::Begin).is_none());
        assert!(marker_reply(&DtpEvent::Restart(RangeSet::new())).is_none());
        let r = marker_reply(&DtpEvent::Restart(RangeSet::from_range(0, 5))).expect("111");
        assert_eq!(r.code, 111);
        let p = marker_reply(&DtpEvent::Perf {
            stripe_index: 1,
            stripe_count: 2,
            bytes: 9,
            timestamp_tenths: 3,
            news: vec![" Forward Failed: ftp://a/f; Held: 0-5; Error: gone".into()],
            data_rtt_us: Some(63_100),
        })
        .expect("112");
        assert_eq!(ferry_proto::markers::data_rtt_in(&p), Some(63_100));
        assert_eq!(p.code, 112);
        assert!(p.to_string().contains("Stripe Bytes Transferred: 9"), "{p}");
        // The news goes before the closing line, each a line of its own, and the marker
        // still reads as one.
        assert!(
            p.to_string()
                .ends_with(" Forward Failed: ftp://a/f; Held: 0-5; Error: gone\r\n112 End.\r\n"),
            "{p}"
        );
        assert_eq!(
            ferry_proto::markers::PerfMarker::from_reply(&p).map(|m| m.stripe_bytes),
            Some(9)
        );
    }
}
