//! What a pull that failed part way keeps, so that a retry fetches only what is missing: the
//! bytes under a temporary name fixed by the target (`.ferry-put-tpc-<hash>`), and beside it a
//! small JSON record (`….state`) of the source, its size and validators (strong `ETag`, or
//! `Last-Modified`) and the byte ranges on disk. A retried `COPY` of the same source, whose
//! size and validators still match, resumes; anything else starts over and removes them.
//!
//! One copy at a time owns a target's names ([`Claim`]); a second copy of the same target
//! meanwhile writes under a random name and keeps nothing if it fails. A client that cancels
//! keeps nothing either. What stays behind is at most one file and its record per target,
//! until the next copy to that target (or the admin) removes them.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use ferry_proto::ranges::RangeSet;
use ferry_storage::{Storage, StorageError, VirtualPath, WriteOptions};
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use crate::put::TEMP_PREFIX;

/// What a failed pull left, and of what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct State {
    /// The source's URL as the `COPY` named it.
    pub(super) source: String,
    /// The source's size.
    pub(super) size: u64,
    /// Its strong entity tag, where it gave one.
    pub(super) etag: Option<String>,
    /// Its `Last-Modified`, where it gave one.
    pub(super) last_modified: Option<String>,
    /// Its `Digest` header, where it gave one (a range's answer may not).
    pub(super) digest: Option<String>,
    /// Half-open byte ranges on disk, synced.
    pub(super) stored: Vec<(u64, u64)>,
}

impl State {
    /// The ranges on disk.
    pub(super) fn stored(&self) -> RangeSet {
        let mut set = RangeSet::new();
        for &(a, b) in &self.stored {
            set.insert(a.min(self.size), b.min(self.size));
        }
        set
    }

    /// Whether `other` (the source now) is the same file as this record's.
    pub(super) fn same_file(&self, other: &State) -> bool {
        let validated = match (&self.etag, &other.etag) {
            (Some(a), Some(b)) => a == b,
            (None, None) => {
                self.last_modified.is_some() && self.last_modified == other.last_modified
            }
            _ => false,
        };
        self.source == other.source && self.size == other.size && validated
    }

    /// Whether a failure of a pull from this source is worth keeping: the source names its
    /// version, so a retry can tell it is the same.
    pub(super) fn resumable(&self) -> bool {
        self.etag.is_some() || self.last_modified.is_some()
    }
}

/// The temporary file and the record of `target`'s resumable pull.
pub(super) fn names(target: &VirtualPath) -> Result<(VirtualPath, VirtualPath), StorageError> {
    let dir = target.parent().unwrap_or_else(VirtualPath::root);
    let hash = sha2::Sha256::digest(target.as_str().as_bytes());
    let stem = format!("{TEMP_PREFIX}tpc-{}", hex::encode(&hash[..8]));
    Ok((dir.join(&stem)?, dir.join(&format!("{stem}.state"))?))
}

/// Targets whose resumable names a copy holds now.
fn busy() -> &'static Mutex<HashSet<String>> {
    static BUSY: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    BUSY.get_or_init(Default::default)
}

/// A copy's hold on a target's resumable names, given back when dropped.
#[derive(Debug)]
pub(super) struct Claim(String);

impl Claim {
    /// The hold on `target`'s names, unless another copy of it runs.
    pub(super) fn take(target: &VirtualPath) -> Option<Claim> {
        // By path alone: two logins of one account have storages of their own, and must not
        // both write one landing. Accounts whose roots differ only wait on each other's resume.
        let key = target.to_string();
        let mut set = busy().lock().unwrap_or_else(|e| e.into_inner());
        set.insert(key.clone()).then_some(Claim(key))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        busy()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.0);
    }
}

/// The record at `path`, if there is a readable one.
pub(super) fn load(storage: &dyn Storage, path: &VirtualPath) -> Option<State> {
    let file = storage.open_read(path).ok()?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut len = 0;
    while len < buf.len() {
        match file.read_at(&mut buf[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(_) => return None,
        }
    }
    serde_json::from_slice(&buf[..len]).ok()
}

/// Writes `state` to `path`, synced.
pub(super) fn save(
    storage: &dyn Storage,
    path: &VirtualPath,
    state: &State,
) -> Result<(), StorageError> {
    let text = serde_json::to_vec(state).map_err(|e| StorageError::Invalid(e.to_string()))?;
    let file = storage.open_write(
        path,
        WriteOptions {
            create: true,
            truncate: true,
            create_new: false,
        },
    )?;
    file.write_all_at(&text, 0)?;
    file.sync()
}

/// Removes the temporary file and the record of `target`, where they are.
pub(super) fn forget(storage: &dyn Storage, target: &VirtualPath) {
    if let Ok((temp, record)) = names(target) {
        for p in [record, temp] {
            match storage.remove_file(&p) {
                Ok(()) | Err(StorageError::NotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(path = %p, error = %e, "cannot remove a pull's partial file")
                }
            }
        }
    }
}

/// `missing` cut into at most about `n` shares of similar length (a share never spans a gap),
/// as inclusive `(first, last)` byte ranges.
pub(super) fn shares_of(missing: &RangeSet, n: u32) -> Vec<(u64, u64)> {
    let total = missing.total();
    if total == 0 {
        return Vec::new();
    }
    let each = total.div_ceil(u64::from(n.max(1))).max(1);
    let mut out = Vec::new();
    for (mut a, b) in missing.iter() {
        while a < b {
            let end = (a + each).min(b);
            out.push((a, end - 1));
            a = end;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(etag: Option<&str>, modified: Option<&str>) -> State {
        State {
            source: "https://a/x".into(),
            size: 100,
            etag: etag.map(Into::into),
            last_modified: modified.map(Into::into),
            digest: None,
            stored: vec![(0, 40), (60, 200)],
        }
    }

    #[test]
    fn a_resume_needs_the_same_source_size_and_version() {
        let tagged = state(Some("\"v1\""), None);
        assert!(tagged.same_file(&tagged));
        assert!(!tagged.same_file(&state(Some("\"v2\""), None)));
        assert!(!tagged.same_file(&State {
            size: 101,
            ..tagged.clone()
        }));
        assert!(!tagged.same_file(&State {
            source: "https://b/x".into(),
            ..tagged.clone()
        }));
        let dated = state(None, Some("Tue, 08 Dec 2026 00:00:00 GMT"));
        assert!(dated.same_file(&dated));
        assert!(!dated.same_file(&state(None, Some("Wed, 09 Dec 2026 00:00:00 GMT"))));
        let unknown = state(None, None);
        assert!(!unknown.resumable() && !unknown.same_file(&unknown));
        // Ranges past the size are cut to it.
        assert_eq!(
            tagged.stored().iter().collect::<Vec<_>>(),
            vec![(0, 40), (60, 100)]
        );
    }

    #[test]
    fn what_is_missing_is_cut_into_shares_that_cover_it_once() {
        let mut missing = RangeSet::new();
        missing.insert(10, 30);
        missing.insert(50, 100);
        let s = shares_of(&missing, 3);
        let mut covered = RangeSet::new();
        for &(a, b) in &s {
            assert!(b >= a);
            covered.insert(a, b + 1);
        }
        assert_eq!(covered, missing);
        assert_eq!(s.iter().map(|(a, b)| b + 1 - a).sum::<u64>(), 70);
        assert!(s.len() <= 4, "{s:?}");
        assert!(shares_of(&RangeSet::new(), 4).is_empty());
    }

    #[test]
    fn names_are_fixed_by_the_target_and_hidden_as_temporary() {
        let t = VirtualPath::resolve(&VirtualPath::root(), "/out/big.bin").unwrap();
        let (temp, record) = names(&t).unwrap();
        assert_eq!(names(&t).unwrap(), (temp.clone(), record.clone()));
        assert!(temp.as_str().starts_with("/out/.ferry-put-tpc-"), "{temp}");
        assert_eq!(record.as_str(), format!("{temp}.state"));
    }
}
