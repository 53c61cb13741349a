//! Running a session's file operations as the local account its login maps to, inside the one
//! server process.
//!
//! Linux keeps user and group IDs per thread (the libc `setuid` family only makes them look
//! process-wide by signalling every thread). A server started as root therefore gives each
//! mapped account an *identity thread* that has dropped to that account's uid, gid and
//! supplementary groups with the raw per-thread system calls, for good: every open, create,
//! list, stat, rename and remove of the account's sessions runs there, so the kernel checks the
//! user's own permissions and new files belong to the user. The descriptors it opens are then
//! read and written by the data tasks on any thread (permission is checked at open), so the
//! data path and its parallel streams are unchanged. Sessions of one account share its thread;
//! it ends with the last of them.
//!
//! The alternative designs were a privileged broker process that opens files for sessions
//! (descriptor passing over a Unix socket, and a second process to trust) and per-user worker
//! processes (the control connection and GSI context would have to move between processes);
//! both cost more per operation and in code than a thread switch (measured in the GSI issue's
//! note and docs/architecture.md).

use std::collections::HashMap;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::{DirEntry, FileHandle, Metadata, Storage, StorageError, VirtualPath, WriteOptions};

/// A local account: name, uid, primary gid and every group it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    /// Login name.
    pub name: String,
    /// User ID.
    pub uid: u32,
    /// Primary group ID.
    pub gid: u32,
    /// Supplementary groups (the primary one included), as `initgroups` would set them.
    pub groups: Vec<u32>,
}

impl Identity {
    /// Looks an account up through the system's name service (files, LDAP, SSSD …).
    pub fn lookup(name: &str) -> Result<Identity, StorageError> {
        let user = nix::unistd::User::from_name(name)
            .map_err(|e| StorageError::Invalid(format!("account {name}: {e}")))?
            .ok_or_else(|| StorageError::NotFound(format!("account {name}")))?;
        let cname = std::ffi::CString::new(name)
            .map_err(|_| StorageError::Invalid(format!("account {name}")))?;
        let groups = nix::unistd::getgrouplist(&cname, user.gid)
            .map_err(|e| StorageError::Invalid(format!("groups of {name}: {e}")))?;
        Ok(Identity {
            name: name.to_string(),
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            groups: groups.into_iter().map(|g| g.as_raw()).collect(),
        })
    }

    /// The account this process runs as (its effective uid).
    pub fn of_process() -> Result<Identity, StorageError> {
        let uid = nix::unistd::geteuid();
        let user = nix::unistd::User::from_uid(uid)
            .map_err(|e| StorageError::Invalid(format!("account of uid {uid}: {e}")))?
            .ok_or_else(|| StorageError::NotFound(format!("account of uid {uid}")))?;
        Identity::lookup(&user.name)
    }

    /// Whether the process can take on other identities (it runs as root).
    pub fn can_switch() -> bool {
        rustix::process::geteuid().is_root()
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// One account's identity thread.
#[derive(Debug)]
struct Worker {
    jobs: Mutex<Sender<Job>>,
}

fn workers() -> &'static Mutex<HashMap<Identity, Weak<Worker>>> {
    static WORKERS: OnceLock<Mutex<HashMap<Identity, Weak<Worker>>>> = OnceLock::new();
    WORKERS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Drops the calling thread (only it) to `id`: groups, then gids, then uids, all three of each
/// so it can never come back.
fn become_user(id: &Identity) -> std::io::Result<()> {
    use rustix::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid};
    use rustix::{fs::Gid, fs::Uid};
    let groups: Vec<Gid> = id.groups.iter().map(|&g| Gid::from_raw(g)).collect();
    set_thread_groups(&groups)?;
    let gid = Gid::from_raw(id.gid);
    set_thread_res_gid(gid, gid, gid)?;
    let uid = Uid::from_raw(id.uid);
    set_thread_res_uid(uid, uid, uid)?;
    Ok(())
}

impl Worker {
    /// The running thread for `id`, started if no session of that account has one.
    fn for_identity(id: &Identity) -> Result<Arc<Worker>, StorageError> {
        let mut map = workers().lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, w| w.strong_count() > 0);
        if let Some(w) = map.get(id).and_then(Weak::upgrade) {
            return Ok(w);
        }
        let (tx, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let who = id.clone();
        std::thread::Builder::new()
            .name(format!("as-{}", id.name))
            .stack_size(256 * 1024)
            .spawn(move || {
                let r = become_user(&who);
                let ok = r.is_ok();
                let _ = ready_tx.send(r);
                if ok {
                    for job in rx {
                        // A panic in one operation fails that operation (its reply channel
                        // drops), not every later one of the account.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                }
            })
            .map_err(|e| StorageError::Io {
                path: format!("identity thread for {}", id.name),
                source: e,
            })?;
        ready_rx
            .recv()
            .map_err(|_| StorageError::Invalid(format!("identity thread for {}", id.name)))?
            .map_err(|e| StorageError::Io {
                path: format!("switching to {} (uid {}, gid {})", id.name, id.uid, id.gid),
                source: e,
            })?;
        let w = Arc::new(Worker {
            jobs: Mutex::new(tx),
        });
        map.insert(id.clone(), Arc::downgrade(&w));
        Ok(w)
    }

    fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
    ) -> Result<T, StorageError> {
        let lost = || StorageError::Io {
            path: "identity thread".into(),
            source: std::io::Error::other("the operation failed on the account's thread"),
        };
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        self.jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(job)
            .map_err(|_| lost())?;
        rx.recv().map_err(|_| lost())?
    }
}

/// A storage whose every operation runs as one local account (see the module notes).
#[derive(Debug, Clone)]
pub struct AsUser {
    inner: Arc<dyn Storage>,
    identity: Identity,
    worker: Arc<Worker>,
}

impl AsUser {
    /// `inner` as `identity`; fails when the process cannot switch to it.
    pub fn new(inner: Arc<dyn Storage>, identity: Identity) -> Result<AsUser, StorageError> {
        let worker = Worker::for_identity(&identity)?;
        Ok(AsUser {
            inner,
            identity,
            worker,
        })
    }

    /// The account.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn Storage) -> Result<T, StorageError> + Send + 'static,
    ) -> Result<T, StorageError> {
        let inner = Arc::clone(&self.inner);
        self.worker.run(move || f(&*inner))
    }
}

impl Storage for AsUser {
    fn stat(&self, path: &VirtualPath) -> Result<Metadata, StorageError> {
        let p = path.clone();
        self.run(move |s| s.stat(&p))
    }
    fn symlink_metadata(&self, path: &VirtualPath) -> Result<Metadata, StorageError> {
        let p = path.clone();
        self.run(move |s| s.symlink_metadata(&p))
    }
    fn list(&self, path: &VirtualPath) -> Result<Vec<DirEntry>, StorageError> {
        let p = path.clone();
        self.run(move |s| s.list(&p))
    }
    fn open_read(&self, path: &VirtualPath) -> Result<Arc<dyn FileHandle>, StorageError> {
        let p = path.clone();
        self.run(move |s| s.open_read(&p))
    }
    fn open_write(
        &self,
        path: &VirtualPath,
        opts: WriteOptions,
    ) -> Result<Arc<dyn FileHandle>, StorageError> {
        let p = path.clone();
        self.run(move |s| s.open_write(&p, opts))
    }
    fn mkdir(&self, path: &VirtualPath) -> Result<(), StorageError> {
        let p = path.clone();
        self.run(move |s| s.mkdir(&p))
    }
    fn rmdir(&self, path: &VirtualPath) -> Result<(), StorageError> {
        let p = path.clone();
        self.run(move |s| s.rmdir(&p))
    }
    fn remove_file(&self, path: &VirtualPath) -> Result<(), StorageError> {
        let p = path.clone();
        self.run(move |s| s.remove_file(&p))
    }
    fn remove_tree(&self, path: &VirtualPath) -> Result<(), StorageError> {
        let p = path.clone();
        self.run(move |s| s.remove_tree(&p))
    }
    fn rename(&self, from: &VirtualPath, to: &VirtualPath) -> Result<(), StorageError> {
        let (a, b) = (from.clone(), to.clone());
        self.run(move |s| s.rename(&a, &b))
    }
    fn chmod(&self, path: &VirtualPath, mode: u32) -> Result<(), StorageError> {
        let p = path.clone();
        self.run(move |s| s.chmod(&p, mode))
    }
    fn set_mtime(&self, path: &VirtualPath, mtime: i64) -> Result<(), StorageError> {
        let p = path.clone();
        self.run(move |s| s.set_mtime(&p, mtime))
    }
    fn dead_properties(&self, path: &VirtualPath) -> Result<Option<Vec<u8>>, StorageError> {
        let p = path.clone();
        self.run(move |s| s.dead_properties(&p))
    }
    fn dead_properties_of(&self, dir: &VirtualPath, names: &[String]) -> Vec<Option<Vec<u8>>> {
        let (d, n) = (dir.clone(), names.to_vec());
        let count = names.len();
        self.run(move |s| Ok(s.dead_properties_of(&d, &n)))
            .unwrap_or_else(|_| vec![None; count])
    }
    fn set_dead_properties(
        &self,
        path: &VirtualPath,
        value: Option<&[u8]>,
    ) -> Result<(), StorageError> {
        let (p, v) = (path.clone(), value.map(<[u8]>::to_vec));
        self.run(move |s| s.set_dead_properties(&p, v.as_deref()))
    }
    fn symlink(&self, target: &str, link: &VirtualPath) -> Result<(), StorageError> {
        let (t, l) = (target.to_string(), link.clone());
        self.run(move |s| s.symlink(&t, &l))
    }
    fn checksum_cache(&self) -> Option<&crate::ChecksumCache> {
        self.inner.checksum_cache()
    }
    /// The attributes are written as the account, so the kernel checks its right to change
    /// the file (a file it may only read keeps its values in memory).
    fn remember_checksums(
        &self,
        file: &Arc<dyn FileHandle>,
        at: crate::FileVersion,
        sums: &[crate::cache::Sum],
    ) {
        let (file, sums) = (Arc::clone(file), sums.to_vec());
        let _ = self.run(move |s| {
            s.remember_checksums(&file, at, &sums);
            Ok(())
        });
    }
}
