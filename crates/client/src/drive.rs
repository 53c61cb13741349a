//! Runs the client's end of a transfer while reading the server's replies, so a server error
//! stops the local data path at once and markers are seen as they come.

use ferry_dtp::{
    relay, Dtp, DtpEvent, RelaySink, Relayed, TransferDescription, TransferOutcome, Watch,
};
use ferry_proto::markers::{data_rtt_in, PerfMarker, RestartMarker};
use ferry_proto::multicast::ForwardFailure;
use ferry_proto::{Command, RangeSet, Reply};

use crate::{ClientError, ControlClient};

/// Progress seen during one transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Bytes moved so far (from the local DTP or the server's perf markers).
    Bytes(u64),
    /// Ranges the receiving side has stored (restart markers).
    Stored(RangeSet),
    /// The destination is being written again from its start (a server refused to resume):
    /// nothing stored before counts any more.
    StartedOver,
    /// The server has opened the file for the transfer (its 150 or 125).
    Opened,
    /// A hop of the forwarding tree behind the server failed (a `gridftp_multicast` node named
    /// it in a perf marker); the other destinations go on.
    ForwardFailed(ForwardFailure),
    /// The data connections' round trip, µs, as the kernel at one end measured it (a ferry
    /// server says it in its perf markers; see [`ferry_proto::markers::data_rtt_line`]).
    DataRtt(u32),
}

/// Once the transfer `command` is sent: runs `desc` on `dtp` (if any) while reading replies
/// (its 150/125, markers) until the final one, and returns the DTP outcome (or the bytes the
/// markers told). The DTP starts before the 150 because Globus sends that reply only once the
/// data connection is up.
pub(crate) async fn drive(
    ctl: &mut ControlClient,
    dtp: Option<(&mut Dtp, &TransferDescription)>,
    command: &Command,
    on_progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<TransferOutcome, ClientError> {
    let started = std::time::Instant::now();
    let mut sink = ReplySink {
        ctl,
        on_progress,
        final_reply: None,
        marker_bytes: StripeBytes::default(),
    };
    let local = match dtp {
        Some((dtp, desc)) => match relay(dtp, desc, &mut sink).await? {
            Relayed::Finished(r) => Some(r),
            // The server gave up before our side finished: ours stopped with it.
            Relayed::Stopped => {
                let reply = sink.final_reply.take().ok_or(ClientError::Closed)?;
                return Err(ClientError::Refused {
                    command: command.to_string(),
                    reply,
                });
            }
        },
        None => None,
    };
    while sink.final_reply.is_none() {
        let r = sink.ctl.read_reply().await?;
        sink.reply(r);
    }
    let reply = sink.final_reply.ok_or(ClientError::Closed)?;
    if reply.code != 226 && reply.code != 250 {
        return Err(ClientError::Refused {
            command: command.to_string(),
            reply,
        });
    }
    match local {
        Some(r) => Ok(r?),
        None => Ok(TransferOutcome {
            bytes: sink.marker_bytes.total(),
            streams: 0,
            duration: started.elapsed(),
            reused: false,
            checksums: Vec::new(),
            checksum_read_back: 0,
            tcp: None,
        }),
    }
}

/// The client's end of a relayed transfer: the local DTP's events and the server's markers
/// become progress; the server's final reply is kept, and an error stops the local side.
struct ReplySink<'a> {
    ctl: &'a mut ControlClient,
    on_progress: &'a mut (dyn FnMut(Progress) + Send),
    final_reply: Option<Reply>,
    marker_bytes: StripeBytes,
}

impl ReplySink<'_> {
    /// Takes one reply off the control channel: a marker, or the final reply.
    fn reply(&mut self, r: Reply) {
        if matches!(r.code, 125 | 150) {
            (self.on_progress)(Progress::Opened);
        } else if r.is_preliminary() {
            marker(&r, self.on_progress, &mut self.marker_bytes);
        } else {
            self.final_reply = Some(r);
        }
    }
}

impl RelaySink for ReplySink<'_> {
    type Error = ClientError;

    async fn event(&mut self, ev: DtpEvent) -> Result<(), ClientError> {
        match ev {
            DtpEvent::Begin => {}
            DtpEvent::Perf {
                bytes, data_rtt_us, ..
            } => {
                (self.on_progress)(Progress::Bytes(bytes));
                // This host's own data connections' round trip.
                if let Some(us) = data_rtt_us {
                    (self.on_progress)(Progress::DataRtt(us));
                }
            }
            DtpEvent::Restart(r) => (self.on_progress)(Progress::Stored(r)),
        }
        Ok(())
    }

    async fn watch(&mut self) -> Result<Watch, ClientError> {
        if self.final_reply.is_some() {
            // The server is done; our side finishes on its own.
            return std::future::pending().await;
        }
        let r = self.ctl.read_reply().await?;
        self.reply(r);
        // 250 is a plain server's "done" as well (RFC 959 allows it after a transfer); in
        // stream mode it may come before the data's end reaches this side.
        Ok(match &self.final_reply {
            Some(r) if !matches!(r.code, 226 | 250) => Watch::Stop,
            _ => Watch::Continue,
        })
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

/// The hops a forwarding tree's final report names as failed (those its markers named already
/// among them); none for any other error.
pub(crate) fn forward_report(e: &ClientError) -> Vec<ForwardFailure> {
    match e {
        ClientError::Refused { reply, .. } if ferry_proto::multicast::is_report(reply) => {
            ForwardFailure::all_in(reply)
        }
        _ => Vec::new(),
    }
}

fn marker(r: &Reply, on_progress: &mut (dyn FnMut(Progress) + Send), bytes: &mut StripeBytes) {
    if let Some(m) = RestartMarker::from_reply(r) {
        on_progress(Progress::Stored(m.0));
    } else if let Some(p) = PerfMarker::from_reply(r) {
        bytes.update(p.stripe_index, p.stripe_bytes);
        on_progress(Progress::Bytes(bytes.total()));
        for f in ForwardFailure::all_in(r) {
            on_progress(Progress::ForwardFailed(f));
        }
        if let Some(us) = data_rtt_in(r) {
            on_progress(Progress::DataRtt(us));
        }
    }
}
