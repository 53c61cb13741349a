//! Puts whose bytes come from somewhere other than a local file: a file handle the caller
//! fills as it goes (the multicast forwarder hands on the blocks its own transfer receives).
//! The session's DTP sends from a storage that holds that one handle, so the put keeps every
//! feature of an ordinary one: MODE E, parallel streams, DCAU and PROT, any transport.

use std::sync::Arc;

use ferry_proto::command::Command;
use ferry_proto::site::SiteCommand;
use ferry_storage::{
    ChecksumAlgorithm, DirEntry, FileHandle, Metadata, Storage, StorageError, VirtualPath,
    WriteOptions,
};

use crate::drive::Progress;
use crate::request::FileRequest;
use crate::session::RemoteSession;
use crate::ClientError;

/// Where the relayed handle appears in the session's storage while the put runs.
const RELAYED: &str = "/relayed";

impl RemoteSession {
    /// Uploads what `source` yields to `remote`. `source` may block in `read_at` until the
    /// bytes at that offset exist, and ends (reads 0) at the end of the data; it should not
    /// call itself a regular file, so the DTP sends until that end rather than to a size.
    pub async fn put_from(
        &mut self,
        source: Arc<dyn FileHandle>,
        remote: &str,
        req: &FileRequest,
        on_progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<ferry_dtp::TransferOutcome, ClientError> {
        let own = self.dtp.use_storage(Arc::new(OneFile(source)));
        let result = self
            .put(std::path::Path::new(RELAYED), remote, req, on_progress)
            .await;
        self.dtp.use_storage(own);
        result
    }

    /// `req` as this destination can store it. A multicast disk stack sent to a server without
    /// ferry's driver gets one stream: Globus' `gridftp_multicast` writes a corrupt file, and
    /// forwards it, and still answers 226, when the data comes on several (measured here with
    /// its own globus-url-copy -MC and -p 4: every destination differed from byte 1).
    ///
    /// Into a ferry forwarding tree, parallel streams carry the smallest MODE E blocks (unless
    /// asked otherwise), so the bytes a node holds stay close to one contiguous run: with
    /// large blocks the streams fill several blocks side by side, each at a fraction of the
    /// rate (4 streams of 3 MiB blocks kept 10–14 MiB out of the node's reach on netlab while
    /// it forwarded in offset order; it now forwards whatever arrived, in any order).
    pub(crate) fn storable<'r>(&self, req: &'r FileRequest) -> std::borrow::Cow<'r, FileRequest> {
        let multicast = req
            .disk_stack
            .as_deref()
            .is_some_and(|s| s.contains("gridftp_multicast"));
        if !multicast {
            return std::borrow::Cow::Borrowed(req);
        }
        if !self.has_feature(ferry_proto::multicast::PARALLEL_FEATURE) {
            if req.parallelism == 1 && req.stripe.is_none() {
                return std::borrow::Cow::Borrowed(req);
            }
            tracing::info!(server = %self.server().authority(), "multicast through a server without ferry's driver: one stream");
            return std::borrow::Cow::Owned(FileRequest {
                parallelism: 1,
                stripe: None,
                ..req.clone()
            });
        }
        if req.parallelism > 1 && req.block_size.is_none() {
            let chunk = u32::try_from(ferry_dtp::IO_CHUNK).unwrap_or(u32::MAX);
            return std::borrow::Cow::Owned(FileRequest {
                block_size: Some(chunk),
                ..req.clone()
            });
        }
        std::borrow::Cow::Borrowed(req)
    }

    /// Sets the server's disk stack for the files stored from now on (`SITE SETDISKSTACK`,
    /// sent only when it changes, as globus-url-copy does); `None` restores its default.
    pub async fn set_disk_stack(&mut self, stack: Option<&str>) -> Result<(), ClientError> {
        if self.disk_stack.as_deref() == stack {
            return Ok(());
        }
        let arg = stack.unwrap_or("default");
        let r = self
            .command(&Command::Site(SiteCommand::SetDiskStack(arg.into())))
            .await?;
        if !r.is_success() {
            self.disk_stack = None;
            return Err(ClientError::Unsupported(format!(
                "{} refused disk stack {arg}: {} {}",
                self.server().authority(),
                r.code,
                r.text()
            )));
        }
        self.disk_stack = stack.map(String::from);
        Ok(())
    }
}

/// A storage of one readable file, at [`RELAYED`]; everything else is refused.
#[derive(Debug)]
struct OneFile(Arc<dyn FileHandle>);

fn refused(path: &VirtualPath) -> StorageError {
    StorageError::PermissionDenied(path.to_string())
}

impl Storage for OneFile {
    fn stat(&self, path: &VirtualPath) -> Result<Metadata, StorageError> {
        Err(refused(path))
    }
    fn symlink_metadata(&self, path: &VirtualPath) -> Result<Metadata, StorageError> {
        Err(refused(path))
    }
    fn list(&self, path: &VirtualPath) -> Result<Vec<DirEntry>, StorageError> {
        Err(refused(path))
    }
    fn open_read(&self, path: &VirtualPath) -> Result<Arc<dyn FileHandle>, StorageError> {
        if path.to_string() == RELAYED {
            Ok(Arc::clone(&self.0))
        } else {
            Err(StorageError::NotFound(path.to_string()))
        }
    }
    fn open_write(
        &self,
        path: &VirtualPath,
        _opts: WriteOptions,
    ) -> Result<Arc<dyn FileHandle>, StorageError> {
        Err(refused(path))
    }
    fn mkdir(&self, path: &VirtualPath) -> Result<(), StorageError> {
        Err(refused(path))
    }
    fn rmdir(&self, path: &VirtualPath) -> Result<(), StorageError> {
        Err(refused(path))
    }
    fn remove_file(&self, path: &VirtualPath) -> Result<(), StorageError> {
        Err(refused(path))
    }
    fn remove_tree(&self, path: &VirtualPath) -> Result<(), StorageError> {
        Err(refused(path))
    }
    fn rename(&self, from: &VirtualPath, _to: &VirtualPath) -> Result<(), StorageError> {
        Err(refused(from))
    }
    fn chmod(&self, path: &VirtualPath, _mode: u32) -> Result<(), StorageError> {
        Err(refused(path))
    }
    fn set_mtime(&self, path: &VirtualPath, _mtime: i64) -> Result<(), StorageError> {
        Err(refused(path))
    }
    fn symlink(&self, _target: &str, link: &VirtualPath) -> Result<(), StorageError> {
        Err(refused(link))
    }
    fn checksum(
        &self,
        path: &VirtualPath,
        _algorithm: ChecksumAlgorithm,
        _offset: u64,
        _length: Option<u64>,
    ) -> Result<String, StorageError> {
        Err(refused(path))
    }
}
