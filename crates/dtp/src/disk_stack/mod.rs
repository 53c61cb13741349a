//! Disk stacks (Globus' `SITE SETDISKSTACK`): drivers between the DTP and storage, chosen per
//! session in the transfer description and admitted by the server's `--fs-whitelist`.
//!
//! The bottom driver is the file system (`file`: the session's confined storage opens the
//! file); each driver above wraps the open file of the one below, so it sees every positional
//! read and write of a transfer as it happens (the multicast forwarder of a later issue is
//! one). A new driver is a module here and one line in [`DiskStacks::standard`].

mod file;

use std::sync::Arc;

use ferry_proto::stack::StackSpec;
use ferry_storage::{FileHandle, StorageError, VirtualPath};

use crate::Direction;

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

    /// The file a transfer uses with this driver on top of `below`, the file as the drivers
    /// under it opened it; `options` passed `accept`.
    fn wrap(
        &self,
        below: Arc<dyn FileHandle>,
        access: Access<'_>,
        options: &str,
    ) -> Result<Arc<dyn FileHandle>, StorageError>;
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
    /// Passes a file storage opened up the stack, bottom first.
    pub fn wrap(
        &self,
        file: Arc<dyn FileHandle>,
        access: Access<'_>,
    ) -> Result<Arc<dyn FileHandle>, StorageError> {
        self.layers
            .iter()
            .try_fold(file, |f, (driver, options)| driver.wrap(f, access, options))
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
