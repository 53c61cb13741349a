//! Virtual paths: what a client names, normalised lexically, never escaping `/`.

use std::fmt;

use crate::StorageError;

/// An absolute, normalised virtual path: starts with `/`, no `.`/`..`/empty components.
/// `/` is the storage root. Components are never empty and never contain `/` or NUL.
///
/// Deserialising validates the same invariant, so a path received over IPC cannot smuggle `..`.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct VirtualPath(String);

impl VirtualPath {
    /// The root, `/`.
    pub fn root() -> VirtualPath {
        VirtualPath("/".to_string())
    }

    /// Resolves `input` (absolute, or relative to `cwd`) lexically. `..` above `/` is an error
    /// ([`crate::StorageError::OutsideRoot`]), as are NUL bytes. `~` is not expanded.
    pub fn resolve(cwd: &VirtualPath, input: &str) -> Result<VirtualPath, crate::StorageError> {
        if input.contains('\0') {
            return Err(StorageError::Invalid(input.replace('\0', "\\0")));
        }
        let mut parts: Vec<&str> = Vec::new();
        if !input.starts_with('/') {
            parts.extend(cwd.components());
        }
        for component in input.split('/') {
            match component {
                "" | "." => {}
                ".." => {
                    if parts.pop().is_none() {
                        return Err(StorageError::OutsideRoot(input.to_string()));
                    }
                }
                name => parts.push(name),
            }
        }
        if parts.is_empty() {
            return Ok(VirtualPath::root());
        }
        let mut path = String::with_capacity(input.len() + cwd.0.len() + 1);
        for part in parts {
            path.push('/');
            path.push_str(part);
        }
        Ok(VirtualPath(path))
    }

    /// The path as a string, starting with `/`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path relative to the root (no leading `/`; `.` for the root itself).
    pub fn relative(&self) -> &str {
        match &self.0[1..] {
            "" => ".",
            rest => rest,
        }
    }

    /// The last component (`None` for the root).
    pub fn file_name(&self) -> Option<&str> {
        if self.is_root() {
            return None;
        }
        self.0.rsplit('/').next()
    }

    /// The parent (`None` for the root).
    pub fn parent(&self) -> Option<VirtualPath> {
        if self.is_root() {
            return None;
        }
        match self.0.rfind('/') {
            Some(0) | None => Some(VirtualPath::root()),
            Some(i) => Some(VirtualPath(self.0[..i].to_string())),
        }
    }

    /// `self/name` (name must be a single component).
    pub fn join(&self, name: &str) -> Result<VirtualPath, crate::StorageError> {
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
            return Err(StorageError::Invalid(name.replace('\0', "\\0")));
        }
        let mut path = String::with_capacity(self.0.len() + name.len() + 1);
        if !self.is_root() {
            path.push_str(&self.0);
        }
        path.push('/');
        path.push_str(name);
        Ok(VirtualPath(path))
    }

    /// Whether this is `/`.
    pub fn is_root(&self) -> bool {
        self.0 == "/"
    }

    /// The components from the root down (none for the root).
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|c| !c.is_empty())
    }
}

impl fmt::Display for VirtualPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for VirtualPath {
    type Error = StorageError;

    /// Accepts only a path that is already absolute and normalised.
    fn try_from(s: String) -> Result<VirtualPath, StorageError> {
        let resolved = VirtualPath::resolve(&VirtualPath::root(), &s)?;
        if resolved.0 == s {
            Ok(resolved)
        } else {
            Err(StorageError::Invalid(s.replace('\0', "\\0")))
        }
    }
}

impl From<VirtualPath> for String {
    fn from(path: VirtualPath) -> String {
        path.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn vp(s: &str) -> VirtualPath {
        VirtualPath::resolve(&VirtualPath::root(), s).unwrap()
    }

    #[test]
    fn absolute_input_ignores_cwd() {
        assert_eq!(
            VirtualPath::resolve(&vp("/a/b"), "/x/y").unwrap().as_str(),
            "/x/y"
        );
    }

    #[test]
    fn relative_input_resolves_from_cwd() {
        assert_eq!(
            VirtualPath::resolve(&vp("/a/b"), "c/../d")
                .unwrap()
                .as_str(),
            "/a/b/d"
        );
        assert_eq!(
            VirtualPath::resolve(&vp("/a/b"), "..").unwrap().as_str(),
            "/a"
        );
        assert_eq!(VirtualPath::resolve(&vp("/a"), "").unwrap().as_str(), "/a");
    }

    #[test]
    fn dot_and_empty_components_are_dropped() {
        assert_eq!(vp("//a/./b//.").as_str(), "/a/b");
        assert_eq!(vp("/./").as_str(), "/");
        assert_eq!(vp("a/..").as_str(), "/");
    }

    #[test]
    fn dotdot_above_root_is_outside_root() {
        let root = VirtualPath::root();
        for input in ["..", "/..", "/a/../..", "../etc/passwd", "a/../../b"] {
            let err = VirtualPath::resolve(&root, input).unwrap_err();
            assert!(
                matches!(err, StorageError::OutsideRoot(_)),
                "{input}: {err:?}"
            );
        }
        let err = VirtualPath::resolve(&vp("/a"), "../../x").unwrap_err();
        assert!(matches!(err, StorageError::OutsideRoot(_)));
    }

    #[test]
    fn nul_is_invalid() {
        let err = VirtualPath::resolve(&VirtualPath::root(), "a\0b").unwrap_err();
        assert!(matches!(err, StorageError::Invalid(_)));
    }

    #[test]
    fn tilde_is_not_expanded() {
        assert_eq!(vp("~/x").as_str(), "/~/x");
    }

    #[test]
    fn relative_file_name_and_parent() {
        assert_eq!(VirtualPath::root().relative(), ".");
        assert_eq!(vp("/a/b").relative(), "a/b");
        assert_eq!(vp("/a/b").file_name(), Some("b"));
        assert_eq!(VirtualPath::root().file_name(), None);
        assert_eq!(vp("/a/b").parent(), Some(vp("/a")));
        assert_eq!(vp("/a").parent(), Some(VirtualPath::root()));
        assert_eq!(VirtualPath::root().parent(), None);
    }

    #[test]
    fn join_accepts_only_single_components() {
        assert_eq!(VirtualPath::root().join("a").unwrap().as_str(), "/a");
        assert_eq!(vp("/a").join("b").unwrap().as_str(), "/a/b");
        for bad in ["", ".", "..", "a/b", "a\0"] {
            assert!(
                matches!(vp("/a").join(bad), Err(StorageError::Invalid(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn try_from_accepts_only_normalised_paths() {
        assert_eq!(
            VirtualPath::try_from("/a/b".to_string()).unwrap(),
            vp("/a/b")
        );
        for bad in ["a", "/a/", "/a/../b", "/..", "//a", "/a/./b"] {
            assert!(VirtualPath::try_from(bad.to_string()).is_err(), "{bad:?}");
        }
    }

    fn component() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("..".to_string()),
            Just(".".to_string()),
            Just(String::new()),
            "[a-z~ .]{1,4}",
        ]
    }

    fn path_input() -> impl Strategy<Value = String> {
        (any::<bool>(), proptest::collection::vec(component(), 0..8)).prop_map(|(abs, parts)| {
            let joined = parts.join("/");
            if abs {
                format!("/{joined}")
            } else {
                joined
            }
        })
    }

    proptest! {
        #[test]
        fn resolve_is_normalised_and_idempotent(cwd in path_input(), input in path_input()) {
            let Ok(cwd) = VirtualPath::resolve(&VirtualPath::root(), &cwd) else {
                return Ok(());
            };
            if let Ok(p) = VirtualPath::resolve(&cwd, &input) {
                prop_assert!(p.as_str().starts_with('/'));
                prop_assert!(p.components().all(|c| c != ".." && c != "."));
                prop_assert!(p.is_root() || !p.as_str().ends_with('/'));
                prop_assert!(!p.as_str().contains("//"));
                prop_assert_eq!(&VirtualPath::resolve(&cwd, p.as_str()).unwrap(), &p);
                prop_assert_eq!(&VirtualPath::resolve(&VirtualPath::root(), p.as_str()).unwrap(), &p);
                prop_assert_eq!(VirtualPath::try_from(p.as_str().to_string()).unwrap(), p);
            }
        }
    }
}
