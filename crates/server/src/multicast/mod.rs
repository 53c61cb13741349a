//! `gridftp_multicast`: the disk-stack driver that makes a server one node of a forwarding
//! tree (Globus' `globus_xio_gridftp_multicast_driver`, with the same option string). While
//! the node's own transfer receives a file, it writes it locally (unless `local_write=n`) and
//! sends every block on to its children as it arrives, each child a GridFTP put (MODE E with
//! the driver's `P` streams to ferry servers, one stream to others: see
//! `RemoteSession::storable`), told by its own disk stack which part of the tree it forwards
//! to, with the DCAU and PROT of the node's own transfer and the credential the user delegated.
//! The node's restart markers cover only what every destination below it has stored too, and
//! a child that fails is named at once, in the node's next performance marker, with what its
//! subtree held (see [`ferry_proto::multicast::ForwardFailure`]); the other children go on, and
//! the node's final reply waits for them and names every hop that failed. A restarted
//! transfer is forwarded as one: every child is sent the same ranges.
//!
//! It lives in the server, not beside `file` in `ferry_dtp`, because a forwarder is a GridFTP
//! client; [`crate::Drivers`] registers it, the one place it is named.

mod forward;
mod tee;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ferry_dtp::disk_stack::{
    Access, DiskDriver, DiskStackError, Finish, Layer, Prepared, Preparing,
};
use ferry_dtp::Direction;
use ferry_proto::multicast::{report, ForwardFailure, MulticastOptions};
use ferry_storage::{FileHandle, StorageError};

use tee::{Tee, TeeFile, HELD_LIMIT};

/// The driver's name, as Globus spells it in `SITE SETDISKSTACK` and `--fs-whitelist`.
pub(crate) const NAME: &str = "gridftp_multicast";

/// The multicast forwarder.
#[derive(Debug, Default)]
pub(crate) struct Multicast {
    /// The networks children may be in (`--multicast-allow-to`); empty: none, so a server
    /// forwards nowhere until its admin says where (a client names the children, and the
    /// server logs in and sends data wherever they are).
    children_in: Arc<Vec<ipnet::IpNet>>,
}

impl Multicast {
    /// A forwarder whose children must be in `networks`.
    pub(crate) fn allowing(networks: Vec<ipnet::IpNet>) -> Multicast {
        Multicast {
            children_in: Arc::new(networks),
        }
    }
}

impl DiskDriver for Multicast {
    fn name(&self) -> &'static str {
        NAME
    }

    fn accept(&self, options: &str) -> Result<(), DiskStackError> {
        let o = MulticastOptions::parse(options).map_err(|e| DiskStackError::Options {
            name: NAME.into(),
            why: e.to_string(),
        })?;
        if self.children_in.is_empty() && !o.children().is_empty() {
            return Err(DiskStackError::Options {
                name: NAME.into(),
                why: "this server forwards to no network: its admin names the networks \
                      children may be in with --multicast-allow-to"
                    .into(),
            });
        }
        Ok(())
    }

    fn stores(&self, options: &str) -> bool {
        MulticastOptions::parse(options).map_or(true, |o| o.local_write)
    }

    fn wrap(
        &self,
        below: Arc<dyn FileHandle>,
        access: Access<'_>,
        options: &str,
    ) -> Result<Layer, StorageError> {
        // A file read through the stack is read as it is: there is nothing to forward.
        if access.direction == Direction::Send {
            return Ok(Layer::plain(below));
        }
        let o = MulticastOptions::parse(options)
            .map_err(|e| StorageError::Invalid(format!("{NAME}: {e}")))?;
        check(&access)?;
        let how = forward::Forwarding::new(
            &o,
            access.channel,
            access.delegated.cloned(),
            Arc::clone(&self.children_in),
        );
        let started = start_children(o.children(), &how)?;
        Ok(forwarding(below, &access, &o, started))
    }

    fn prepare(&self, options: &str, how: Preparing<'_>) -> Option<Prepared> {
        let o = MulticastOptions::parse(options).ok()?;
        let forwarding = forward::Forwarding::new(
            &o,
            how.channel,
            how.delegated.cloned(),
            Arc::clone(&self.children_in),
        );
        match start_children(o.children(), &forwarding) {
            Ok(mut started) if !started.is_empty() => {
                tracing::debug!(
                    children = started.len(),
                    "multicast: logging in to children"
                );
                for ready in started.iter_mut().filter_map(|s| s.ready.take()) {
                    how.waits.add(Box::pin(async move {
                        let _ = ready.await;
                    }));
                }
                Some(Box::new(Ready {
                    how: forwarding,
                    started,
                }))
            }
            Ok(_) => None,
            Err(e) => {
                // The transfer will try again, and fail with the reason if it must.
                tracing::debug!(error = %e, "multicast: children not prepared");
                None
            }
        }
    }

    fn wrap_prepared(
        &self,
        below: Arc<dyn FileHandle>,
        access: Access<'_>,
        options: &str,
        prepared: Prepared,
    ) -> Result<Layer, StorageError> {
        let ready = match prepared.downcast::<Ready>() {
            Ok(r) if access.direction == Direction::Receive => r,
            _ => return self.wrap(below, access, options),
        };
        let o = MulticastOptions::parse(options)
            .map_err(|e| StorageError::Invalid(format!("{NAME}: {e}")))?;
        let how = forward::Forwarding::new(
            &o,
            access.channel,
            access.delegated.cloned(),
            Arc::clone(&self.children_in),
        );
        if !ready.how.same_login(&how) || check(&access).is_err() {
            // Logged in for other data channels (DCAU/PROT changed since), or a transfer
            // that cannot be forwarded: the prepared children go, and wrap decides afresh.
            drop(ready);
            return self.wrap(below, access, options);
        }
        Ok(forwarding(below, &access, &o, ready.started))
    }
}

/// Children logged in ahead of the transfer (see [`Multicast::prepare`]), and how.
struct Ready {
    how: forward::Forwarding,
    started: Vec<forward::Started>,
}

/// Refuses transfers a forwarder cannot carry whole to its children. A restarted one it can:
/// the restart markers it sent covered only what every destination below had.
fn check(access: &Access<'_>) -> Result<(), StorageError> {
    if !access.whole {
        return Err(StorageError::Invalid(format!(
            "{NAME}: forwards whole files only (not a partial transfer, an append or one \
             stripe of several)"
        )));
    }
    Ok(())
}

/// Starts a forwarder for each child; on an error the ones started are dropped (they end).
fn start_children(
    children: Vec<ferry_proto::multicast::Child>,
    how: &forward::Forwarding,
) -> Result<Vec<forward::Started>, StorageError> {
    children
        .into_iter()
        .map(|child| {
            let url = child.url.clone();
            forward::start(child, how.clone())
                .map_err(|source| StorageError::Io { path: url, source })
        })
        .collect()
}

/// The node's file: written below (unless `local_write=n`) and read by every child started.
fn forwarding(
    below: Arc<dyn FileHandle>,
    access: &Access<'_>,
    o: &MulticastOptions,
    started: Vec<forward::Started>,
) -> Layer {
    if started.is_empty() {
        return Layer::plain(below);
    }
    let tee = Arc::new(Tee::new(started.len(), HELD_LIMIT, access.restart));
    let waiting: Vec<_> = started
        .into_iter()
        .enumerate()
        .map(|(i, s)| s.go(&tee, i, access.restart, access.news))
        .collect();
    tracing::debug!(path = %access.path, children = waiting.len(), "multicast: forwarding");
    let file = Arc::new(TeeFile {
        local: o.local_write.then(|| Arc::clone(&below)),
        below,
        tee: Arc::clone(&tee),
    });
    Layer {
        file,
        finish: Some(Box::new(Children {
            tee: Arc::clone(&tee),
            waiting,
        })),
        beyond: Some(tee),
    }
}

/// The children of one transfer, until they end.
struct Children {
    tee: Arc<Tee>,
    waiting: Vec<(String, forward::Ended)>,
}

impl Finish for Children {
    fn finish(mut self: Box<Self>) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> {
        self.tee.complete();
        let waiting = std::mem::take(&mut self.waiting);
        let tee = Arc::clone(&self.tee);
        Box::pin(async move {
            let mut failed = Vec::new();
            for (index, (url, rx)) in waiting.into_iter().enumerate() {
                match rx.await {
                    Ok(Ok(())) => {}
                    Ok(Err(named)) => failed.extend(named),
                    Err(_) => failed.push(ForwardFailure {
                        url,
                        held: tee.confirmed(index),
                        error: "the forwarder stopped".into(),
                    }),
                }
            }
            if failed.is_empty() {
                Ok(())
            } else {
                Err(report(&failed))
            }
        })
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        // Not finished (the transfer failed) or finished (tee complete): aborting a completed
        // buffer stops nothing that still has bytes to read, so only an unfinished one aborts.
        if !self.waiting.is_empty() {
            self.tee.abort();
        }
    }
}
