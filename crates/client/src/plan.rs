//! Turns `SRC... DST` into a list of file jobs: expands directories (with `-r`), maps each
//! source file to its destination, and lists the directories to create.

use std::path::Path;

use crate::ops::EntryKind;
use crate::session::RemoteSession;
use crate::sessions::Sessions;
use crate::url::Location;
use crate::ClientError;

/// One file to copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Where it is read.
    pub src: Location,
    /// Where it is written.
    pub dst: Location,
    /// Its size, when the listing told it.
    pub size: Option<u64>,
}

/// What a copy will do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Files, in listing order.
    pub jobs: Vec<Job>,
    /// Destination directories to create first (parents before children).
    pub dirs: Vec<Location>,
}

impl Plan {
    /// Makes the plan's destination directories on servers (those on this host are the
    /// copy's to make).
    pub async fn make_remote_dirs(&self, sessions: &mut Sessions) -> Result<(), ClientError> {
        for dir in &self.dirs {
            if let Location::Remote(r) = dir {
                sessions.get(r).await?.mkdir_all(&r.path).await?;
            }
        }
        Ok(())
    }
}

fn child(loc: &Location, name: &str) -> Location {
    match loc {
        Location::Local(p) => Location::Local(p.join(name)),
        Location::Remote(r) => {
            let base = r.path.trim_end_matches('/');
            Location::Remote(r.with_path(format!("{base}/{name}")))
        }
    }
}

fn base_name(loc: &Location) -> Option<String> {
    let s = match loc {
        Location::Local(p) => p.to_string_lossy().to_string(),
        Location::Remote(r) => r.path.clone(),
    };
    s.trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .map(str::to_string)
}

/// A source entry found while planning.
enum Found {
    File(Option<u64>),
    Dir,
    Missing,
}

async fn probe(loc: &Location, session: Option<&mut RemoteSession>) -> Result<Found, ClientError> {
    match (loc, session) {
        (Location::Local(p), _) => Ok(match std::fs::metadata(p) {
            Ok(m) if m.is_dir() => Found::Dir,
            Ok(m) => Found::File(m.is_file().then_some(m.len())),
            Err(_) => Found::Missing,
        }),
        (Location::Remote(r), Some(s)) => match s.stat(&r.path).await {
            Ok(e) if e.kind == EntryKind::Dir => Ok(Found::Dir),
            Ok(e) => Ok(Found::File(e.size)),
            Err(e) if e.class() == crate::ErrorClass::NotFound => Ok(Found::Missing),
            Err(e) => Err(e),
        },
        (Location::Remote(_), None) => Err(ClientError::Usage(
            "internal: no session to plan a remote source".into(),
        )),
    }
}

/// Lists a directory: (name, is_dir, size).
async fn list(
    loc: &Location,
    session: Option<&mut RemoteSession>,
) -> Result<Vec<(String, bool, Option<u64>)>, ClientError> {
    match (loc, session) {
        (Location::Local(p), _) => {
            let mut out = Vec::new();
            for e in std::fs::read_dir(p)? {
                let e = e?;
                let m = std::fs::metadata(e.path())?;
                out.push((
                    e.file_name().to_string_lossy().to_string(),
                    m.is_dir(),
                    m.is_file().then_some(m.len()),
                ));
            }
            out.sort();
            Ok(out)
        }
        (Location::Remote(r), Some(s)) => Ok(s
            .list(&r.path)
            .await?
            .into_iter()
            .filter(|e| matches!(e.kind, EntryKind::File | EntryKind::Dir))
            .map(|e| (e.name, e.kind == EntryKind::Dir, e.size))
            .collect()),
        (Location::Remote(_), None) => Err(ClientError::Usage(
            "internal: no session to list a remote source".into(),
        )),
    }
}

/// Builds the plan, listing remote sources through `sessions`.
pub async fn plan(
    sources: &[Location],
    dest: &Location,
    recursive: bool,
    sessions: &mut Sessions,
) -> Result<Plan, ClientError> {
    let mut plan = Plan::default();
    let dest_is_dir =
        sources.len() > 1 || dest.names_dir() || matches!(dest, Location::Local(p) if p.is_dir());
    for src in sources {
        let found = probe(src, sessions.for_location(src).await?).await?;
        match found {
            Found::Missing => {
                return Err(ClientError::Refused {
                    command: format!("stat {}", display(src)),
                    reply: ferry_proto::Reply::new(
                        550,
                        format!("{}: No such file or directory.", display(src)),
                    ),
                })
            }
            Found::File(size) => {
                let dst = if dest_is_dir {
                    child(
                        dest,
                        &base_name(src).ok_or_else(|| {
                            ClientError::Usage(format!("cannot name a copy of {}", display(src)))
                        })?,
                    )
                } else {
                    dest.clone()
                };
                plan.jobs.push(Job {
                    src: src.clone(),
                    dst,
                    size,
                });
            }
            Found::Dir => {
                if !recursive {
                    return Err(ClientError::Usage(format!(
                        "{} is a directory: use -r to copy it",
                        display(src)
                    )));
                }
                // `copy -r a/ b/` copies a's contents into b/a unless the source ends in '/'.
                let root = if src.names_dir() || !dest_is_dir {
                    dest.clone()
                } else {
                    child(dest, &base_name(src).unwrap_or_default())
                };
                plan.dirs.push(root.clone());
                let mut stack = vec![(src.clone(), root)];
                while let Some((dir, target)) = stack.pop() {
                    let entries = list(&dir, sessions.for_location(&dir).await?).await?;
                    for (name, is_dir, size) in entries {
                        let (s, d) = (child(&dir, &name), child(&target, &name));
                        if is_dir {
                            plan.dirs.push(d.clone());
                            stack.push((s, d));
                        } else {
                            plan.jobs.push(Job {
                                src: s,
                                dst: d,
                                size,
                            });
                        }
                    }
                }
            }
        }
    }
    Ok(plan)
}

/// A location for messages.
pub fn display(loc: &Location) -> String {
    match loc {
        Location::Local(p) => p.display().to_string(),
        Location::Remote(r) => r.to_string(),
    }
}

/// The local path of a location (for local ends of a job).
pub(crate) fn local(loc: &Location) -> Option<&Path> {
    match loc {
        Location::Local(p) => Some(p.as_path()),
        Location::Remote(_) => None,
    }
}
