//! One temporary directory per test holding the served roots, the client-side files and the
//! server logs. `FERRY_INTEROP_KEEP=1` keeps it after a failing test.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use super::files::make_dir;

/// A test's temporary directory.
pub struct Sandbox {
    dir: TempDir,
}

impl Sandbox {
    /// Creates an empty sandbox that a server dropping privileges can traverse.
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ferry-interop-")
            .tempdir()
            .expect("creating the test's temporary directory");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))
            .expect("opening up the test's temporary directory");
        Sandbox { dir }
    }

    /// The sandbox directory itself.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A directory a server can read and write, for use as a served root.
    pub fn served_dir(&self, name: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        make_dir(&path);
        path
    }

    /// A directory on the client side of transfers.
    pub fn local_dir(&self, name: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        make_dir(&path);
        path
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if std::thread::panicking() && std::env::var_os("FERRY_INTEROP_KEEP").is_some() {
            self.dir.disable_cleanup(true);
            eprintln!("kept the test directory {}", self.dir.path().display());
        }
    }
}

/// `file://` URL of a local absolute path.
pub fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// `file://` URL of a local directory, ending with `/` as globus-url-copy requires.
pub fn file_dir_url(path: &Path) -> String {
    format!("file://{}/", path.display())
}
