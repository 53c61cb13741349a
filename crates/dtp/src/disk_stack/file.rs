//! `file`: the file system itself, the bottom of every disk stack (Globus' file DSI driver).
//! The session's storage opened the file; this driver hands it up unchanged, so the data path
//! keeps its descriptor (and `sendfile`).

use std::sync::Arc;

use ferry_storage::{FileHandle, StorageError};

use super::{Access, DiskDriver, DiskStackError, Layer};

/// The session's own storage, confined beneath its root.
#[derive(Debug)]
pub(super) struct FileDriver;

impl DiskDriver for FileDriver {
    fn name(&self) -> &'static str {
        "file"
    }

    fn is_bottom(&self) -> bool {
        true
    }

    fn accept(&self, options: &str) -> Result<(), DiskStackError> {
        // Globus' file driver takes no string options either.
        if options.is_empty() {
            Ok(())
        } else {
            Err(DiskStackError::Options {
                name: "file".into(),
                why: format!("takes no options, got {options:?}"),
            })
        }
    }

    fn wrap(
        &self,
        below: Arc<dyn FileHandle>,
        _access: Access<'_>,
        _options: &str,
    ) -> Result<Layer, StorageError> {
        Ok(Layer::plain(below))
    }
}
