//! Virtual paths: what a client names, normalised lexically, never escaping `/`.

use std::fmt;

/// An absolute, normalised virtual path: starts with `/`, no `.`/`..`/empty components.
/// `/` is the storage root. Components are never empty and never contain `/` or NUL.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct VirtualPath(String);

impl VirtualPath {
    /// The root, `/`.
    pub fn root() -> VirtualPath {
        VirtualPath("/".to_string())
    }

    /// Resolves `input` (absolute, or relative to `cwd`) lexically. `..` above `/` is an error
    /// ([`crate::StorageError::OutsideRoot`]), as are NUL bytes. `~` is not expanded.
    pub fn resolve(cwd: &VirtualPath, input: &str) -> Result<VirtualPath, crate::StorageError> {
        let _ = (cwd, input);
        todo!()
    }

    /// The path as a string, starting with `/`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path relative to the root (no leading `/`; `.` for the root itself).
    pub fn relative(&self) -> &str {
        todo!()
    }

    /// The last component (`None` for the root).
    pub fn file_name(&self) -> Option<&str> {
        todo!()
    }

    /// The parent (`None` for the root).
    pub fn parent(&self) -> Option<VirtualPath> {
        todo!()
    }

    /// `self/name` (name must be a single component).
    pub fn join(&self, name: &str) -> Result<VirtualPath, crate::StorageError> {
        let _ = name;
        todo!()
    }

    /// Whether this is `/`.
    pub fn is_root(&self) -> bool {
        self.0 == "/"
    }
}

impl fmt::Display for VirtualPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
