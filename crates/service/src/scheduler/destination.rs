//! FTS3's `overwrite: false` as part of every copy: before any attempt of a job that must not
//! replace its destinations writes, the destination's server says whether it is there, and
//! only a clear "no such file" lets the copy begin. An answer that is not clear (a dropped
//! connection, a refusal that does not say "no such file", a listing that fails) fails the
//! attempt as transient with nothing written, and the next attempt asks again. Once an
//! attempt has had a clear "absent", what is at the destination is the file's own (recorded in
//! the queue before the copy begins), and later attempts resume into it without asking.

use super::*;
use ferry_client::RemoteSession;

/// Proof that a file's destination may be written now: its job replaces destinations, or the
/// destination was found absent, now or by an earlier attempt. Only this module makes one,
/// and [`Scheduler::copy_of`] takes one, so no path copies without the check.
pub(super) struct MayWrite(());

/// What a destination's server (or the local disk) answered clearly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Presence {
    /// It is there.
    Present,
    /// It is not.
    Absent,
}

/// Why a destination may not be written now.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refusal {
    /// It is there, and the job must not replace it.
    #[error("the destination {0} exists; submit with overwrite to replace it")]
    Exists(String),
    /// No clear answer came: transient, and nothing was written.
    #[error(
        "could not learn whether the destination {dest} exists, so nothing was written to it: {error}"
    )]
    Unknown {
        /// The destination, as shown.
        dest: String,
        /// What its server answered instead.
        error: ClientError,
    },
    /// The queue could not record that the destination is the file's own.
    #[error("could not record that the destination {dest} was found absent, so nothing was written to it: {why}")]
    Unrecorded {
        /// The destination, as shown.
        dest: String,
        /// Why.
        why: String,
    },
}

impl Scheduler {
    /// Whether `row` must ask before writing: its job keeps existing destinations and no
    /// attempt found its destination absent yet (a stored range says one did, for rows from
    /// before the queue kept [`FileRow::dest_own`]).
    pub(super) fn must_ask(job: &JobRow, row: &FileRow) -> bool {
        !job.overwrite && !row.dest_own && row.stored.is_empty()
    }

    /// Asks the destination of one file, when its job must not overwrite, and records a clear
    /// "absent" before anything is written.
    pub(super) async fn clearance(
        &self,
        job: &JobRow,
        row: &FileRow,
        sessions: &mut Sessions,
        dst: &Location,
    ) -> Result<MayWrite, Refusal> {
        let pair = [(row, dst)];
        let mut one = self.clearances(job, &pair, &HashMap::new(), sessions).await;
        one.pop()
            .unwrap_or_else(|| Err(unrecorded(row, "no answer".into())))
    }

    /// [`Scheduler::clearance`] for several files (a pipeline's), in order, with what the
    /// listings of their destination directories said (`known`); the others are asked one by
    /// one. The files found absent are recorded in one statement.
    pub(super) async fn clearances(
        &self,
        job: &JobRow,
        rows: &[(&FileRow, &Location)],
        known: &HashMap<i64, Presence>,
        sessions: &mut Sessions,
    ) -> Vec<Result<MayWrite, Refusal>> {
        // `None`: the file need not ask.
        let mut asked: Vec<Option<Result<Presence, Refusal>>> = Vec::with_capacity(rows.len());
        for &(row, dst) in rows {
            if !Self::must_ask(job, row) {
                asked.push(None);
                continue;
            }
            let answer = match known.get(&row.file_id) {
                Some(p) => Ok(*p),
                None => presence(sessions, dst)
                    .await
                    .map_err(|e| unknown(sessions, row, dst, e)),
            };
            asked.push(Some(answer));
        }
        let absent: Vec<i64> = rows
            .iter()
            .zip(&asked)
            .filter(|(_, a)| matches!(a, Some(Ok(Presence::Absent))))
            .map(|((row, _), _)| row.file_id)
            .collect();
        let recorded = if absent.is_empty() {
            Ok(Vec::new())
        } else {
            self.db
                .own_destinations(absent)
                .await
                .map_err(|e| e.to_string())
        };
        rows.iter()
            .zip(asked)
            .map(|(&(row, _), answer)| match answer {
                None => Ok(MayWrite(())),
                Some(Ok(Presence::Present)) => Err(Refusal::Exists(crate::redact::url(&row.dest))),
                Some(Ok(Presence::Absent)) => match &recorded {
                    Ok(ids) if ids.contains(&row.file_id) => Ok(MayWrite(())),
                    Ok(_) => Err(unrecorded(row, "its claim was taken back".into())),
                    Err(why) => Err(unrecorded(row, why.clone())),
                },
                Some(Err(refusal)) => Err(refusal),
            })
            .collect()
    }

    /// How a refused destination ends the attempt: an existing one for good, an unknown one
    /// as a transient failure (whatever the class of what the server said: the next attempt
    /// asks again).
    pub(super) fn refused(&self, job: &JobRow, row: &FileRow, refusal: Refusal) -> Outcome {
        match refusal {
            Refusal::Exists(_) => Outcome::Ended(Ending::Failed {
                error: refusal.to_string(),
                retryable: false,
            }),
            _ => self.transient(job, row, refusal.to_string(), RangeSet::new()),
        }
    }
}

fn unrecorded(row: &FileRow, why: String) -> Refusal {
    Refusal::Unrecorded {
        dest: crate::redact::url(&row.dest),
        why,
    }
}

/// A destination whose server gave no clear answer; its session is dropped, since the answer
/// may have been a dropped connection, so the next question starts afresh.
fn unknown(sessions: &mut Sessions, row: &FileRow, dst: &Location, error: ClientError) -> Refusal {
    if let Location::Remote(r) = dst {
        sessions.drop_server(r);
    }
    Refusal::Unknown {
        dest: crate::redact::url(&row.dest),
        error,
    }
}

/// Whether `dst` is there, from a clear answer only: a file's facts (MLST, or SIZE where the
/// server has no MLST), a clear "no such file", or else the listing of its directory.
pub(super) async fn presence(
    sessions: &mut Sessions,
    dst: &Location,
) -> Result<Presence, ClientError> {
    match dst {
        Location::Local(p) => match std::fs::symlink_metadata(p) {
            // A dangling link is there too: writing would follow it.
            Ok(_) => Ok(Presence::Present),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Presence::Absent),
            Err(e) => Err(ClientError::Storage(ferry_storage::StorageError::from_io(
                &p.display().to_string(),
                e,
            ))),
        },
        Location::Remote(r) => {
            let session = sessions.get(r).await?;
            // Not `stat` without MLST: it reads a failed listing as "no such file".
            let asked = if session.has_feature("MLST") {
                session.stat(&r.path).await.map(drop)
            } else {
                session.size(&r.path).await.map(drop)
            };
            match asked {
                Ok(()) => Ok(Presence::Present),
                Err(e) if says_absent(&e) => Ok(Presence::Absent),
                // Refused without saying why (a directory, a server that stats nothing): its
                // directory's listing says.
                Err(e) if refused_for_good(&e) => listed(session, &r.path).await.ok_or(e),
                Err(e) => Err(e),
            }
        }
    }
}

/// Whether `path`'s directory lists it; `None` when the listing fails without a clear "no
/// such directory".
async fn listed(session: &mut RemoteSession, path: &str) -> Option<Presence> {
    let trimmed = path.trim_end_matches('/');
    let (dir, name) = trimmed.rsplit_once('/')?;
    let dir = if dir.is_empty() { "/" } else { dir };
    match session.list(dir).await {
        Ok(entries) => Some(
            if entries
                .iter()
                .any(|e| e.name.rsplit('/').next() == Some(name))
            {
                Presence::Present
            } else {
                Presence::Absent
            },
        ),
        Err(e) if says_absent(&e) => Some(Presence::Absent),
        Err(_) => None,
    }
}

/// Replies that say clearly that a path is not there. 550 is also "permission denied",
/// "not a plain file" and whatever else a server refuses with, so its text must say so.
const ABSENT: &[&str] = &[
    "no such file",
    "not found",
    "does not exist",
    "doesn't exist",
];

/// Whether an error is a clear "no such file or directory": a 550 that says so (not one that
/// speaks of permission), any 5xx with the system's own words for it (Globus answers 500), or
/// the local disk's.
pub(super) fn says_absent(e: &ClientError) -> bool {
    match e {
        ClientError::Refused { reply, .. } => {
            let text = reply.text().to_ascii_lowercase();
            if text.contains("permission") {
                return false;
            }
            (reply.code == 550 && ABSENT.iter().any(|p| text.contains(p)))
                || (reply.code / 100 == 5 && text.contains("no such file or directory"))
        }
        ClientError::Storage(ferry_storage::StorageError::NotFound(_)) => true,
        _ => false,
    }
}

/// A permanent refusal (5xx) that does not say why: worth asking the directory's listing.
fn refused_for_good(e: &ClientError) -> bool {
    matches!(e, ClientError::Refused { reply, .. } if reply.code / 100 == 5)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_proto::Reply;

    fn refused(code: u16, text: &str) -> ClientError {
        ClientError::Refused {
            command: "MLST /x".into(),
            reply: Reply::new(code, text),
        }
    }

    #[test]
    fn only_a_clear_no_such_file_counts_as_absent() {
        for absent in [
            refused(550, "/x: No such file or directory."),
            refused(550, "File not found"),
            refused(550, "/x does not exist"),
            refused(
                500,
                "Command failed : globus_l_gfs_file_stat: System error in stat: No such file or directory",
            ),
        ] {
            assert!(says_absent(&absent), "{absent}");
        }
        for unknown in [
            refused(550, "Requested action not taken"),
            refused(550, "Could not get file size."),
            refused(550, "/x: Permission denied."),
            refused(550, "permission denied: not found in the ACL"),
            refused(450, "No such file or directory (try later)"),
            refused(421, "Service not available, closing control connection"),
            refused(250, "Listing /x"),
            ClientError::Closed,
            ClientError::Network("connection reset by peer".into()),
        ] {
            assert!(!says_absent(&unknown), "{unknown}");
        }
    }

    #[test]
    fn only_a_5xx_refusal_is_asked_of_the_directory_listing() {
        assert!(refused_for_good(&refused(550, "Odd")));
        assert!(refused_for_good(&refused(500, "Command failed")));
        assert!(!refused_for_good(&refused(451, "Local error")));
        assert!(!refused_for_good(&ClientError::Closed));
    }

    #[tokio::test]
    async fn a_local_destination_is_present_even_as_a_dangling_link() {
        let dir = tempfile::tempdir().unwrap();
        let mut sessions = Sessions::new();
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &link).unwrap();
        for (path, want) in [
            (file, Presence::Present),
            (link, Presence::Present),
            (dir.path().join("none"), Presence::Absent),
        ] {
            let got = presence(&mut sessions, &Location::Local(path.clone()))
                .await
                .unwrap();
            assert_eq!(got, want, "{}", path.display());
        }
        // A path through a file is neither: an error, not "absent".
        let through = Location::Local(dir.path().join("file/below"));
        assert!(presence(&mut sessions, &through).await.is_err());
    }
}
