//! One data node's part of a striped transfer, run on its own task by the frontend.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_dtp::{DtpEvent, TransferDescription};
use tokio::sync::mpsc;

use super::ipc::{FromNode, Link, ToNode};

/// Silence after which a node counts as lost.
const LOST_AFTER: Duration = Duration::from_secs(15);

/// How a node's part of a transfer ended, when it did not finish.
pub(super) enum NodeFailure {
    /// The node ran the transfer and it failed.
    Failed { code: u16, text: String },
    /// The link broke or went silent.
    Lost(String),
}

/// One node's part of a transfer, on its own task.
pub(super) struct NodeJob {
    pub(super) node: usize,
    pub(super) pos: usize,
    pub(super) count: u32,
    pub(super) events: mpsc::Sender<DtpEvent>,
    pub(super) forward_perf: Option<u64>,
    pub(super) per_node: Arc<Vec<AtomicU64>>,
    pub(super) moved: Arc<AtomicU64>,
    /// Nodes that have not yet said Begin.
    pub(super) begin_left: Arc<AtomicUsize>,
}

/// Node index, its link when still usable, and bytes and streams moved.
pub(super) type NodeResult = (usize, Option<Link>, Result<(u64, u32), NodeFailure>);

impl NodeJob {
    /// Starts `desc` on the node and relays its events until it finishes, fails or is lost.
    pub(super) async fn run(
        self,
        mut link: Link,
        desc: TransferDescription,
        forget_cache: bool,
    ) -> NodeResult {
        let sent = async {
            if forget_cache {
                link.wr.send(&ToNode::ForgetCache).await?;
            }
            link.wr
                .send(&ToNode::Run {
                    desc: Box::new(desc),
                })
                .await
        };
        if let Err(e) = sent.await {
            return (self.node, None, Err(NodeFailure::Lost(e.to_string())));
        }
        let mut last_perf = Instant::now();
        loop {
            let m = match tokio::time::timeout(LOST_AFTER, link.rd.recv::<FromNode>()).await {
                Err(_) => {
                    let why = format!("silent for {} s", LOST_AFTER.as_secs());
                    return (self.node, None, Err(NodeFailure::Lost(why)));
                }
                Ok(Err(e)) => return (self.node, None, Err(NodeFailure::Lost(e.to_string()))),
                Ok(Ok(None)) => {
                    let why = "closed the link".to_string();
                    return (self.node, None, Err(NodeFailure::Lost(why)));
                }
                Ok(Ok(Some(m))) => m,
            };
            match m {
                FromNode::Event(DtpEvent::Begin) => {
                    if self.begin_left.fetch_sub(1, Ordering::AcqRel) == 1 {
                        let _ = self.events.send(DtpEvent::Begin).await;
                    }
                }
                FromNode::Event(DtpEvent::Restart(r)) => {
                    let _ = self.events.send(DtpEvent::Restart(r)).await;
                }
                FromNode::Event(DtpEvent::Perf {
                    bytes,
                    timestamp_tenths,
                    news,
                    data_rtt_us,
                    ..
                }) => {
                    self.record(bytes);
                    let due = !news.is_empty()
                        || self.forward_perf.is_some_and(|ms| {
                            last_perf.elapsed() + Duration::from_millis(50)
                                >= Duration::from_millis(ms)
                        });
                    if due {
                        last_perf = Instant::now();
                        let _ = self
                            .events
                            .send(DtpEvent::Perf {
                                stripe_index: self.pos as u32,
                                stripe_count: self.count,
                                bytes,
                                timestamp_tenths,
                                news,
                                data_rtt_us,
                            })
                            .await;
                    }
                }
                FromNode::Finished { bytes, streams } => {
                    self.record(bytes);
                    return (self.node, Some(link), Ok((bytes, streams)));
                }
                FromNode::Failed { code, text } => {
                    return (
                        self.node,
                        Some(link),
                        Err(NodeFailure::Failed { code, text }),
                    );
                }
                other => {
                    let why = format!("unexpected message {other:?}");
                    return (self.node, None, Err(NodeFailure::Lost(why)));
                }
            }
        }
    }

    /// Keeps the total of every node's latest byte count.
    fn record(&self, bytes: u64) {
        let old = self.per_node[self.pos].swap(bytes, Ordering::Relaxed);
        if bytes >= old {
            self.moved.fetch_add(bytes - old, Ordering::Relaxed);
        } else {
            self.moved.fetch_sub(old - bytes, Ordering::Relaxed);
        }
    }
}
