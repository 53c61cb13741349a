//! Disk stacks (Globus' `SITE SETDISKSTACK`): drivers between the DTP and storage, chosen per
//! session in the transfer description and admitted by the server's `--fs-whitelist`.
//!
//! The bottom driver is the file system (`file`: the session's confined storage opens the
//! file); each driver above wraps the open file of the one below, so it sees every positional
//! read and write of a transfer as it happens. A driver with work beyond the file (the
//! multicast forwarder sends every block on to other servers) hands up a [`Finish`] with it,
//! which the transfer's final reply waits for. A driver may start work when its stack is chosen,
//! before any transfer ([`DiskDriver::prepare`]: the forwarder logs in to its children then),
//! and the next transfer through the same stack takes it over. A new driver is a module here and one line in
//! [`DiskStacks::standard`]; one that needs more than this crate (the multicast forwarder is a
//! GridFTP client) is registered by the server with [`DiskStacks::with`].

mod file;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ferry_gsi::DataSecurity;
use ferry_proto::stack::StackSpec;
use ferry_proto::RangeSet;
use ferry_storage::{FileHandle, StorageError, VirtualPath};

use crate::{ChannelSecurity, Direction};

/// Why a disk stack cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DiskStackError {
    /// No driver of that name in this build.
    #[error("{0} driver not available")]
    Unknown(String),
    /// The driver exists but not at that place (`file` at the bottom, and only there).
    #[error("{name} driver cannot be at position {position} of the stack (bottom = 0)")]
    Misplaced {
        /// The driver.
        name: String,
        /// Its position, bottom = 0.
        position: usize,
    },
    /// The driver refused its options.
    #[error("{name} driver: {why}")]
    Options {
        /// The driver.
        name: String,
        /// What is wrong with them.
        why: String,
    },
}

/// The file a driver is opening, and which way the transfer's data flows.
#[derive(Debug, Clone, Copy)]
pub struct Access<'a> {
    /// The file.
    pub path: &'a VirtualPath,
    /// `Send`: the transfer reads it; `Receive`: it writes it.
    pub direction: Direction,
    /// The bytes a restarted transfer will not move again (REST), empty for a fresh one.
    pub restart: &'a RangeSet,
    /// Whether the transfer covers the whole file from offset 0 on this DTP alone: no ERET/ESTO
    /// section, no append, not one stripe of several.
    pub whole: bool,
    /// The data channels' DCAU and PROT, for drivers that open data channels of their own.
    pub channel: &'a ChannelSecurity,
    /// The credential the user delegated to the session (GSI), for drivers that connect on
    /// their behalf; `None` when nothing was delegated (never the server's own credential).
    pub delegated: Option<&'a Arc<DataSecurity>>,
    /// Where a driver tells the client, while the transfer runs, what happens beyond this
    /// server (a forwarder's child failed).
    pub news: &'a News,
}

/// Lines a driver adds to the transfer's next performance marker (`112`), sent at once: what
/// happens beyond this server while the transfer runs. Lines start with a space (they are
/// fields of the marker) and must not start `NNN `; a transfer that reports nothing drops them.
#[derive(Debug, Clone)]
pub struct News(tokio::sync::mpsc::UnboundedSender<String>);

impl News {
    /// A channel for a transfer's news: the sender for its drivers, the receiver for its
    /// markers.
    pub fn channel() -> (News, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (News(tx), rx)
    }

    /// Reports `line` (once).
    pub fn say(&self, line: String) {
        let _ = self.0.send(line);
    }
}

/// What a driver that sends the data on knows of the destinations beyond this server.
pub trait Beyond: Send + Sync + std::fmt::Debug {
    /// Of `written` (every range this transfer has stored here, wire offsets), the part every
    /// destination beyond the driver holds as well: only that goes in the restart markers the
    /// client sees, so a restart from them leaves no destination short.
    fn held(&self, written: &RangeSet) -> RangeSet;

    /// Wakes when what the destinations hold may have grown, so the transfer reports it at
    /// once rather than at its next marker tick (a tree's markers then climb a level per round
    /// trip, not per tick); `None` (the default): the ticks alone.
    fn changed(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }
}

/// What a driver must still do once every byte of a transfer has passed through it; the
/// transfer's final reply waits for it and fails with its error. Dropped without being called,
/// the transfer failed, and the driver abandons that work.
pub trait Finish: Send {
    /// Completes the work.
    fn finish(self: Box<Self>) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
}

/// A file as a driver hands it up, with the work the driver must finish, if any.
pub struct Layer {
    /// The file the drivers above, and the transfer, use.
    pub file: Arc<dyn FileHandle>,
    /// What completes the driver's own work.
    pub finish: Option<Box<dyn Finish>>,
    /// What the driver knows of destinations beyond this server, for the restart markers.
    pub beyond: Option<Arc<dyn Beyond>>,
}

impl Layer {
    /// A file with nothing to finish.
    pub fn plain(file: Arc<dyn FileHandle>) -> Layer {
        Layer {
            file,
            finish: None,
            beyond: None,
        }
    }
}

impl std::fmt::Debug for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Layer")
            .field("file", &self.file)
            .field("finish", &self.finish.is_some())
            .field("beyond", &self.beyond)
            .finish()
    }
}

/// A transfer's file through every driver of its stack, and the drivers' work to finish.
#[derive(Debug)]
pub struct Opened {
    /// The file as the top driver hands it up.
    pub file: Arc<dyn FileHandle>,
    /// Each driver's work, top driver first.
    pub finishing: Vec<Layer>,
    /// What the drivers that send the data on know of their destinations.
    pub beyond: Vec<Arc<dyn Beyond>>,
}

impl Opened {
    /// Of `written`, what every destination beyond every driver holds as well (see
    /// [`Beyond::held`]): all of it when no driver sends the data on.
    pub fn held(beyond: &[Arc<dyn Beyond>], written: &RangeSet) -> RangeSet {
        beyond.iter().fold(written.clone(), |held, b| b.held(&held))
    }

    /// Finishes every driver's work, top first; the first error is the transfer's.
    pub async fn finish(self) -> Result<(), String> {
        let mut first = Ok(());
        for work in self.finishing.into_iter().filter_map(|l| l.finish) {
            let done = work.finish().await;
            if first.is_ok() {
                first = done;
            }
        }
        first
    }
}

/// What a driver started when its stack was chosen ([`DiskDriver::prepare`]), for the
/// driver's own `wrap_prepared` to take over; dropped unused (the session chose another stack,
/// or ended), the driver abandons that work.
pub type Prepared = Box<dyn std::any::Any + Send + Sync>;

/// What a driver is told when a session chooses its stack, before any transfer.
#[derive(Debug, Clone, Copy)]
pub struct Preparing<'a> {
    /// The data channels' DCAU and PROT as the session has them now (a transfer may come with
    /// others; `wrap_prepared` then sees them in its [`Access`]).
    pub channel: &'a ChannelSecurity,
    /// The credential the user delegated to the session, as in [`Access::delegated`].
    pub delegated: Option<&'a Arc<DataSecurity>>,
    /// Where a driver leaves what the session's reply to `SITE SETDISKSTACK` should wait for.
    pub waits: &'a Waits,
}

/// Prepared work that is worth waiting for before the client goes on, it being what the next
/// transfer would otherwise start with: a forwarding node's children logged in, told their
/// subtree, and connected to, so the client's data does not race their set-up across the
/// node's busy inbound link (where a lost SYN-ACK costs TCP a second). The session waits,
/// bounded, before it replies; what is not ready by then goes on in the background.
pub type Ready = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The [`Ready`] futures drivers left while a stack was prepared.
#[derive(Default)]
pub struct Waits(std::sync::Mutex<Vec<Ready>>);

impl std::fmt::Debug for Waits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().map_or(0, |w| w.len());
        write!(f, "Waits({n})")
    }
}

impl Waits {
    /// Adds one thing to wait for.
    pub fn add(&self, ready: Ready) {
        if let Ok(mut w) = self.0.lock() {
            w.push(ready);
        }
    }

    /// Ready once every added future is (they run on their own: awaiting them in turn is
    /// waiting for the slowest).
    pub fn all(self) -> Ready {
        let waits = self.0.into_inner().unwrap_or_default();
        Box::pin(async move {
            for w in waits {
                w.await;
            }
        })
    }
}

/// One disk-stack driver.
pub trait DiskDriver: std::fmt::Debug + Send + Sync {
    /// The name clients use in `SITE SETDISKSTACK`.
    fn name(&self) -> &'static str;

    /// Whether this driver is a file system (the bottom of a stack) rather than a layer.
    fn is_bottom(&self) -> bool {
        false
    }

    /// Checks `options` (at `SITE SETDISKSTACK`, before any transfer).
    fn accept(&self, options: &str) -> Result<(), DiskStackError>;

    /// Whether a transfer received through this driver is stored at all: `false` (a forwarder
    /// that only relays, `local_write=n`) leaves storage untouched, the drivers below writing
    /// into nothing.
    fn stores(&self, options: &str) -> bool {
        let _ = options;
        true
    }

    /// The file a transfer uses with this driver on top of `below`, the file as the drivers
    /// under it opened it, and the work this driver must finish; `options` passed `accept`.
    fn wrap(
        &self,
        below: Arc<dyn FileHandle>,
        access: Access<'_>,
        options: &str,
    ) -> Result<Layer, StorageError>;

    /// Starts what can be done before a transfer comes, when a session chooses a stack with
    /// this driver and `options` (`SITE SETDISKSTACK`); `None` (the default) when nothing can.
    fn prepare(&self, options: &str, how: Preparing<'_>) -> Option<Prepared> {
        let _ = (options, how);
        None
    }

    /// [`DiskDriver::wrap`] for the first transfer after [`DiskDriver::prepare`] returned
    /// `prepared` for the same options; by default the prepared work is dropped.
    fn wrap_prepared(
        &self,
        below: Arc<dyn FileHandle>,
        access: Access<'_>,
        options: &str,
        prepared: Prepared,
    ) -> Result<Layer, StorageError> {
        drop(prepared);
        self.wrap(below, access, options)
    }
}

/// The registry of disk-stack drivers this server offers.
#[derive(Debug, Clone)]
pub struct DiskStacks {
    drivers: Vec<Arc<dyn DiskDriver>>,
}

impl Default for DiskStacks {
    fn default() -> Self {
        DiskStacks::standard()
    }
}

impl DiskStacks {
    /// Every driver of this build: the one place a driver is registered.
    pub fn standard() -> DiskStacks {
        DiskStacks {
            drivers: vec![Arc::new(file::FileDriver)],
        }
    }

    /// Adds a driver (an embedding program's own, or a test's), replacing one of its name.
    pub fn with(mut self, driver: Arc<dyn DiskDriver>) -> DiskStacks {
        self.drivers.retain(|d| d.name() != driver.name());
        self.drivers.push(driver);
        self
    }

    /// Whether a driver of this name exists.
    pub fn exists(&self, name: &str) -> bool {
        self.drivers.iter().any(|d| d.name() == name)
    }

    /// The drivers of `stack`, bottom first, once every one is known, in its place, and happy
    /// with its options.
    pub fn resolve(&self, stack: &StackSpec) -> Result<DiskStack, DiskStackError> {
        if stack.drivers.is_empty() {
            return Err(DiskStackError::Unknown(String::new()));
        }
        let layers = stack
            .drivers
            .iter()
            .enumerate()
            .map(|(position, spec)| {
                let driver = self
                    .drivers
                    .iter()
                    .find(|d| d.name() == spec.name)
                    .ok_or_else(|| DiskStackError::Unknown(spec.name.clone()))?;
                if driver.is_bottom() != (position == 0) {
                    return Err(DiskStackError::Misplaced {
                        name: spec.name.clone(),
                        position,
                    });
                }
                driver.accept(&spec.options)?;
                Ok((Arc::clone(driver), spec.options.clone()))
            })
            .collect::<Result<_, _>>()?;
        Ok(DiskStack { layers })
    }
}

/// A resolved disk stack, ready to wrap the files of one transfer.
#[derive(Debug, Clone)]
pub struct DiskStack {
    layers: Vec<(Arc<dyn DiskDriver>, String)>,
}

impl DiskStack {
    /// Whether a received file goes to storage (every driver stores it).
    pub fn stores(&self) -> bool {
        self.layers.iter().all(|(d, o)| d.stores(o))
    }

    /// Lets each driver start what it can before a transfer comes (see
    /// [`DiskDriver::prepare`]); the result goes to [`DiskStack::wrap_with`].
    pub fn prepare(&self, how: Preparing<'_>) -> PreparedStack {
        PreparedStack {
            layers: self
                .layers
                .iter()
                .map(|(driver, options)| driver.prepare(options, how))
                .collect(),
        }
    }

    /// Passes a file storage opened up the stack, bottom first.
    pub fn wrap(
        &self,
        file: Arc<dyn FileHandle>,
        access: Access<'_>,
    ) -> Result<Opened, StorageError> {
        self.wrap_with(file, access, None)
    }

    /// [`DiskStack::wrap`], handing each driver what it prepared for this stack, if anything.
    pub fn wrap_with(
        &self,
        mut file: Arc<dyn FileHandle>,
        access: Access<'_>,
        prepared: Option<PreparedStack>,
    ) -> Result<Opened, StorageError> {
        let mut prepared = prepared.map(|p| p.layers).unwrap_or_default().into_iter();
        let mut finishing = Vec::new();
        let mut beyond = Vec::new();
        for (driver, options) in &self.layers {
            let mut layer = match prepared.next().flatten() {
                Some(p) => driver.wrap_prepared(file, access, options, p)?,
                None => driver.wrap(file, access, options)?,
            };
            file = Arc::clone(&layer.file);
            beyond.extend(layer.beyond.take());
            if layer.finish.is_some() {
                finishing.insert(0, layer);
            }
        }
        Ok(Opened {
            file,
            finishing,
            beyond,
        })
    }
}

/// What the drivers of one stack prepared, bottom first (see [`DiskStack::prepare`]).
pub struct PreparedStack {
    layers: Vec<Option<Prepared>>,
}

impl PreparedStack {
    /// Whether any driver started anything.
    pub fn is_empty(&self) -> bool {
        self.layers.iter().all(Option::is_none)
    }
}

impl std::fmt::Debug for PreparedStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let started: Vec<bool> = self.layers.iter().map(Option::is_some).collect();
        f.debug_struct("PreparedStack")
            .field("started", &started)
            .finish()
    }
}

/// The file under a stack that stores nothing: writes vanish, reads find nothing.
#[derive(Debug)]
pub struct Nowhere;

impl FileHandle for Nowhere {
    fn read_at(&self, _buf: &mut [u8], _offset: u64) -> Result<usize, StorageError> {
        Ok(0)
    }
    fn write_all_at(&self, _buf: &[u8], _offset: u64) -> Result<(), StorageError> {
        Ok(())
    }
    fn size(&self) -> Result<u64, StorageError> {
        Ok(0)
    }
    fn sync(&self) -> Result<(), StorageError> {
        Ok(())
    }
    fn set_len(&self, _len: u64) -> Result<(), StorageError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_is_the_bottom_and_takes_no_options() {
        let stacks = DiskStacks::standard();
        assert!(stacks.resolve(&StackSpec::default_disk()).is_ok());
        assert_eq!(
            stacks
                .resolve(&StackSpec::parse("file:x=1").unwrap())
                .unwrap_err(),
            DiskStackError::Options {
                name: "file".into(),
                why: "takes no options, got \"x=1\"".into()
            }
        );
        assert_eq!(
            stacks
                .resolve(&StackSpec::parse("file,file").unwrap())
                .unwrap_err(),
            DiskStackError::Misplaced {
                name: "file".into(),
                position: 1
            }
        );
        assert_eq!(
            stacks
                .resolve(&StackSpec::parse("popen").unwrap())
                .unwrap_err(),
            DiskStackError::Unknown("popen".into())
        );
    }
}
