//! The one interface between a PI and whatever moves its data: the in-process [`crate::Dtp`], or
//! a striped frontend's stand-in that drives DTPs on data nodes (whose IPC messages are this
//! trait serialised). A PI calls nothing else on its mover and never asks which kind it has.

use std::fmt::Debug;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;

use ferry_net::{PortRange, SocketTuning};
use ferry_proto::stack::StackSpec;
use tokio::sync::mpsc;

use crate::{DtpError, DtpEvent, TransferDescription, TransferOutcome};

/// A boxed future borrowed from a mover, so the trait stays object-safe.
pub type MoverFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a PASV, EPSV or SPAS asks of a mover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassiveRequest {
    /// The address to listen on (where the control connection arrived, or the configured data
    /// interface). Movers on other hosts listen on their own.
    pub ip: IpAddr,
    /// The admin's data port range.
    pub ports: Option<PortRange>,
    /// Socket buffers for the connections the listener accepts.
    pub tuning: SocketTuning,
    /// SPAS: one listener per stripe where the mover has several; PASV/EPSV: one.
    pub striped: bool,
    /// The session's net stack: its transport listens.
    pub stack: StackSpec,
    /// The only host whose data connections are taken (the control connection's, for a
    /// session that may not be one end of a third-party copy); `None`: any host.
    pub admit_only: Option<IpAddr>,
}

/// Everything a PI asks of a data mover. Aborting a transfer is dropping its `run` future
/// (which stops its streams) and then calling [`DataMover::forget_cache`].
pub trait DataMover: Debug + Send {
    /// Opens passive listeners, forgetting any previous data channel; their addresses in
    /// stripe order.
    fn open_passive(
        &mut self,
        req: PassiveRequest,
    ) -> MoverFuture<'_, Result<Vec<SocketAddr>, DtpError>>;

    /// Forgets the data channel and readies the mover to connect to `endpoints` (PORT, EPRT,
    /// SPOR) at the next transfer.
    fn set_active<'a>(
        &'a mut self,
        endpoints: &'a [SocketAddr],
    ) -> MoverFuture<'a, Result<(), DtpError>>;

    /// Drops the passive listener and every cached data connection.
    fn forget(&mut self);

    /// Drops cached data connections only (a buffer or security change, an abort).
    fn forget_cache(&mut self);

    /// Ends the data channel at the end of a session: cached connections say goodbye as
    /// their transport does (TCP's FIN, TLS close_notify, UDT's shutdown, which has no other
    /// way to reach the peer once this process exits), within a bounded time, and the
    /// listener goes. A mover whose connections live elsewhere just forgets.
    fn close(&mut self) -> MoverFuture<'_, ()> {
        self.forget();
        Box::pin(std::future::ready(()))
    }

    /// The session chose disk stack `stack` (`SITE SETDISKSTACK`), its data channels having
    /// `security` now: drivers that can start work before a transfer comes do (see
    /// [`crate::disk_stack::DiskDriver::prepare`]), for the next transfer that receives through
    /// the same stack. Returns what the reply should wait for (see
    /// [`crate::disk_stack::Ready`]). Nothing by default.
    fn prepare_disk_stack(
        &mut self,
        stack: &StackSpec,
        security: &crate::ChannelSecurity,
    ) -> crate::disk_stack::Ready {
        let _ = (stack, security);
        Box::pin(std::future::ready(()))
    }

    /// Whether `desc` will run on cached connections (the PI then answers 125, not 150).
    fn will_reuse(&self, desc: &TransferDescription) -> bool;

    /// Runs one transfer to its end, sending [`DtpEvent`]s as it goes: first
    /// [`DtpEvent::Begin`] once the file is open and the data channel is next, then markers.
    /// A transfer that fails before `Begin` never started: the PI sends no preliminary reply.
    fn run<'a>(
        &'a mut self,
        desc: &'a TransferDescription,
        events: &'a mpsc::Sender<DtpEvent>,
    ) -> MoverFuture<'a, Result<TransferOutcome, DtpError>>;

    /// Payload bytes the last transfer moved, also when it failed or was aborted.
    fn bytes_moved(&self) -> u64;

    /// Text the PI appends to a transfer's final reply (a striped mover names the data nodes
    /// it could not reach); empty by default.
    fn note(&self) -> String {
        String::new()
    }

    /// The host at the other end of the last transfer's data channel (`desc`'s): the active
    /// endpoint it connected to, or the peer a passive listener accepted; `None` if unknown.
    fn data_peer(&self, desc: &crate::TransferDescription) -> Option<std::net::IpAddr> {
        match &desc.channel {
            crate::ChannelSetup::Active(endpoints) => endpoints.first().map(|a| a.ip()),
            crate::ChannelSetup::Passive => None,
        }
    }
}
