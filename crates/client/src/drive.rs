//! Runs the client's end of a transfer while reading the server's replies, so a server error
//! stops the local data path at once and markers are seen as they come.

use ferry_dtp::{Dtp, DtpEvent, TransferDescription, TransferOutcome};
use ferry_proto::markers::{PerfMarker, RestartMarker};
use ferry_proto::{RangeSet, Reply};
use tokio::sync::mpsc;

use crate::{ClientError, ControlClient};

/// Progress seen during one transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Bytes moved so far (from the local DTP or the server's perf markers).
    Bytes(u64),
    /// Ranges the receiving side has stored (restart markers).
    Stored(RangeSet),
}

/// Once the transfer `command` is sent: runs `desc` on `dtp` (if any) while reading replies
/// (its 150/125, markers) until the final one, and returns the DTP outcome (or the bytes the
/// markers told). The DTP starts before the 150 because Globus sends that reply only once the
/// data connection is up.
pub(crate) async fn drive(
    ctl: &mut ControlClient,
    dtp: Option<(&mut Dtp, &TransferDescription)>,
    command: &str,
    on_progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<TransferOutcome, ClientError> {
    let (tx, mut rx) = mpsc::channel::<DtpEvent>(64);
    let started = std::time::Instant::now();
    let mut local: Option<Result<TransferOutcome, ferry_dtp::DtpError>> = None;
    let mut final_reply: Option<Reply> = None;
    let mut marker_bytes = StripeBytes::default();
    match dtp {
        Some((dtp, desc)) => {
            let run = dtp.run(desc, &tx);
            tokio::pin!(run);
            while local.is_none() || final_reply.is_none() {
                tokio::select! {
                    r = &mut run, if local.is_none() => local = Some(r),
                    Some(ev) = rx.recv() => event(ev, on_progress),
                    r = ctl.read_reply(), if final_reply.is_none() => {
                        let r = r?;
                        if r.is_preliminary() {
                            marker(&r, on_progress, &mut marker_bytes);
                        } else if r.code != 226 && local.is_none() {
                            // The server gave up: stop our side too.
                            return Err(ClientError::Refused { command: command.into(), reply: r });
                        } else {
                            final_reply = Some(r);
                        }
                    }
                }
            }
            while let Ok(ev) = rx.try_recv() {
                event(ev, on_progress);
            }
        }
        None => loop {
            let r = ctl.read_reply().await?;
            if r.is_preliminary() {
                marker(&r, on_progress, &mut marker_bytes);
            } else {
                final_reply = Some(r);
                break;
            }
        },
    }
    let reply = final_reply.ok_or(ClientError::Closed)?;
    if reply.code != 226 && reply.code != 250 {
        return Err(ClientError::Refused {
            command: command.into(),
            reply,
        });
    }
    match local {
        Some(r) => Ok(r?),
        None => Ok(TransferOutcome {
            bytes: marker_bytes.total(),
            streams: 0,
            duration: started.elapsed(),
            reused: false,
        }),
    }
}

fn event(ev: DtpEvent, on_progress: &mut (dyn FnMut(Progress) + Send)) {
    match ev {
        DtpEvent::Perf { bytes, .. } => on_progress(Progress::Bytes(bytes)),
        DtpEvent::Restart(r) => on_progress(Progress::Stored(r)),
    }
}

/// The latest byte count of every stripe a server reported (a striped server sends one perf
/// marker per data node).
#[derive(Debug, Default)]
struct StripeBytes(Vec<u64>);

impl StripeBytes {
    /// Bounds the table: a server cannot make the client allocate by naming huge indexes.
    const MAX_STRIPES: usize = 4096;

    fn update(&mut self, index: u32, bytes: u64) {
        let i = index as usize;
        if i >= Self::MAX_STRIPES {
            return;
        }
        if self.0.len() <= i {
            self.0.resize(i + 1, 0);
        }
        self.0[i] = self.0[i].max(bytes);
    }

    fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

fn marker(r: &Reply, on_progress: &mut (dyn FnMut(Progress) + Send), bytes: &mut StripeBytes) {
    if let Some(m) = RestartMarker::from_reply(r) {
        on_progress(Progress::Stored(m.0));
    } else if let Some(p) = PerfMarker::from_reply(r) {
        bytes.update(p.stripe_index, p.stripe_bytes);
        on_progress(Progress::Bytes(bytes.total()));
    }
}
