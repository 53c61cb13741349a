//! What pipelines learn from directory listings: their sources' sizes and which
//! destinations are already there.

use super::destination::{says_absent, Presence};
use super::*;

impl Scheduler {
    /// Sizes of files the job did not give, from one listing of each source directory (a
    /// round trip per directory, not per file), kept in memory for the job's later pipelines
    /// (a file's size is stored when it finishes, as FTS3 records it when a transfer runs:
    /// writing every listed size at once rewrote the whole queue's rows); the
    /// files that can go in a pipeline put first. A directory that cannot be listed leaves its
    /// files' sizes unknown: they run alone and say what is wrong.
    pub(super) async fn learn_sizes(
        &self,
        job: &JobRow,
        mut rows: Vec<FileRow>,
        sessions: &mut Sessions,
    ) -> Vec<FileRow> {
        let mut dirs: HashMap<String, Vec<usize>> = HashMap::new();
        for (k, row) in rows.iter().enumerate() {
            if row.filesize.is_none() {
                if let Ok(Location::Remote(r)) = Location::parse(&row.source) {
                    dirs.entry(parent_of(&r.path)).or_default().push(k);
                }
            }
        }
        for (dir, members) in dirs {
            let Ok(Location::Remote(server)) = Location::parse(&rows[members[0]].source) else {
                continue;
            };
            let key = (job.job_id.clone(), format!("{}{dir}", server.authority()));
            let mut cache = self.sized.lock().await;
            cache.retain(|_, (t, _)| t.elapsed() < LISTED_FOR);
            let sizes = match cache.get(&key) {
                Some((_, sizes)) => Arc::clone(sizes),
                None => {
                    let Ok(sizes) = file_sizes(sessions, &server, &dir).await else {
                        continue;
                    };
                    let sizes = Arc::new(sizes);
                    cache.insert(key, (Instant::now(), Arc::clone(&sizes)));
                    sizes
                }
            };
            drop(cache);
            for k in members {
                if let Ok(Location::Remote(r)) = Location::parse(&rows[k].source) {
                    let name = r.path.rsplit('/').next().unwrap_or("");
                    rows[k].filesize = sizes.get(name).map(|&n| n as i64);
                }
            }
        }
        // Small ones first: the pipeline takes a prefix.
        rows.sort_by_key(|r| r.filesize.is_none_or(|n| n >= crate::db::SMALL_FILE));
        rows
    }

    /// For the files that must ask whether their destination is there
    /// ([`Scheduler::must_ask`]), what one listing per destination directory says. A file
    /// whose directory could not be listed, or whose destination is not on a server, is left
    /// out (it is asked on its own); a directory that clearly does not exist holds nothing.
    pub(super) async fn existing(
        &self,
        job: &JobRow,
        rows: &[FileRow],
        sessions: &mut Sessions,
    ) -> HashMap<i64, Presence> {
        let mut out = HashMap::new();
        // Per directory: its names, or `None` where the listing gave no clear answer.
        let mut listed: HashMap<String, Option<Arc<std::collections::HashSet<String>>>> =
            HashMap::new();
        for row in rows.iter().filter(|r| Self::must_ask(job, r)) {
            let Ok(Location::Remote(dst)) = Location::parse(&row.dest) else {
                continue;
            };
            let dir = parent_of(&dst.path);
            let key = (job.job_id.clone(), format!("{}{dir}", dst.authority()));
            if !listed.contains_key(&dir) {
                let cached = self.listed.lock().ok().and_then(|m| {
                    m.get(&key)
                        .filter(|(t, _)| t.elapsed() < LISTED_FOR)
                        .map(|(_, names)| Arc::clone(names))
                });
                if let Some(names) = cached {
                    listed.insert(dir.clone(), Some(names));
                }
            }
            if !listed.contains_key(&dir) {
                let names = match sessions.get(&dst).await {
                    Ok(s) => match s.list(&dir).await {
                        Ok(entries) => Some(
                            entries
                                .into_iter()
                                .map(|e| e.name.rsplit('/').next().unwrap_or(&e.name).to_owned())
                                .collect(),
                        ),
                        Err(e) if says_absent(&e) => Some(Default::default()),
                        Err(_) => None,
                    },
                    Err(_) => None,
                };
                let names = names.map(Arc::new);
                if let Some(names) = &names {
                    if let Ok(mut m) = self.listed.lock() {
                        m.retain(|_, (t, _)| t.elapsed() < LISTED_FOR);
                        m.insert(key, (Instant::now(), Arc::clone(names)));
                    }
                } else {
                    // The files are asked one by one, on a session that starts afresh.
                    sessions.drop_server(&dst);
                }
                listed.insert(dir.clone(), names);
            }
            if let Some(Some(names)) = listed.get(&dir) {
                let name = dst.path.rsplit('/').next().unwrap_or("");
                let presence = if names.contains(name) {
                    Presence::Present
                } else {
                    Presence::Absent
                };
                out.insert(row.file_id, presence);
            }
        }
        out
    }
}

/// The directory of a path (`/` for a file at the top).
fn parent_of(path: &str) -> String {
    match path.rfind('/') {
        Some(0) | None => "/".to_owned(),
        Some(i) => path[..i].to_owned(),
    }
}

/// The files of a directory with their sizes, from one listing.
async fn file_sizes(
    sessions: &mut Sessions,
    server: &ferry_client::RemoteUrl,
    dir: &str,
) -> Result<HashMap<String, u64>, ClientError> {
    let entries = sessions.get(server).await?.list(dir).await?;
    Ok(entries
        .into_iter()
        .filter(|e| e.kind == ferry_client::EntryKind::File)
        .filter_map(|e| {
            let name = e.name.rsplit('/').next().unwrap_or(&e.name).to_owned();
            e.size.map(|n| (name, n))
        })
        .collect())
}
