//! Dead properties (RFC 4918 §4.2): what PROPPATCH sets, kept by the storage with the entry
//! (`Storage::dead_properties`, an extended attribute on POSIX) as a small JSON list.

use ferry_proto::http::propfind::{PropName, PropValue, DAV};
use ferry_proto::http::proppatch::PatchOp;
use ferry_storage::{Storage, StorageError, VirtualPath};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stored {
    ns: String,
    local: String,
    #[serde(default)]
    decls: String,
    xml: String,
}

/// The dead properties of one entry, in the order they were first set.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeadProps(Vec<Stored>);

impl DeadProps {
    /// Those kept for `path` (none when the storage keeps none, or the value is not ours).
    pub(crate) fn load(s: &dyn Storage, path: &VirtualPath) -> Result<DeadProps, StorageError> {
        Ok(s.dead_properties(path)?
            .map(|b| DeadProps::decode(&b))
            .unwrap_or_default())
    }

    /// A stored value (none when it is not ours).
    pub(crate) fn decode(bytes: &[u8]) -> DeadProps {
        serde_json::from_slice(bytes)
            .map(DeadProps)
            .unwrap_or_default()
    }

    /// Keeps them for `path`.
    pub(crate) fn save(&self, s: &dyn Storage, path: &VirtualPath) -> Result<(), StorageError> {
        if self.0.is_empty() {
            return s.set_dead_properties(path, None);
        }
        let bytes =
            serde_json::to_vec(&self.0).map_err(|e| StorageError::Invalid(e.to_string()))?;
        s.set_dead_properties(path, Some(&bytes))
    }

    /// Applies `ops` in order.
    pub(crate) fn apply(&mut self, ops: &[PatchOp]) {
        for op in ops {
            match op {
                PatchOp::Set { name, decls, xml } => {
                    let v = Stored {
                        ns: name.ns.clone(),
                        local: name.local.clone(),
                        decls: decls.clone(),
                        xml: xml.clone(),
                    };
                    match self
                        .0
                        .iter_mut()
                        .find(|s| s.ns == name.ns && s.local == name.local)
                    {
                        Some(old) => *old = v,
                        None => self.0.push(v),
                    }
                }
                PatchOp::Remove(name) => self
                    .0
                    .retain(|s| !(s.ns == name.ns && s.local == name.local)),
            }
        }
    }

    /// The value of `name`, if set.
    pub(crate) fn get(&self, name: &PropName) -> Option<PropValue> {
        self.0
            .iter()
            .find(|s| s.ns == name.ns && s.local == name.local)
            .map(value)
    }

    /// Every property, with its value.
    pub(crate) fn all(&self) -> impl Iterator<Item = PropValue> + '_ {
        self.0.iter().map(value)
    }

    /// Whether `name` is one a client may not set (a live DAV: property).
    pub(crate) fn protected(name: &PropName) -> bool {
        name.ns == DAV
    }
}

fn value(s: &Stored) -> PropValue {
    PropValue {
        name: PropName {
            ns: s.ns.clone(),
            local: s.local.clone(),
        },
        decls: s.decls.clone(),
        xml: s.xml.clone(),
    }
}
