//! The queue's rules on both databases: SQLite (always) and PostgreSQL (a throw-away server;
//! skipped with a message where it is not installed, required in CI). Two "hosts" on one
//! PostgreSQL queue claim each file once, and a silent host's claims come back.

use crate::pg;

use ferry_service::db::{Db, Ending, JobFilter, NewFile, NewJob, Room, HOST_TIMEOUT};
use ferry_service::states::{FileState, JobState};
use ferry_service::ServiceError;

fn job(id: &str, files: usize) -> NewJob {
    NewJob {
        job_id: id.into(),
        user_dn: "/CN=alice".into(),
        priority: 3,
        retry: 2,
        retry_delay: 5,
        verify: "auto".into(),
        overwrite: false,
        metadata: None,
        ignored: vec!["params.spacetoken".into()],
        options: "{}".into(),
        body_hash: format!("hash-{id}"),
        files: (0..files)
            .map(|i| NewFile {
                source: format!("gsiftp://a/{i}"),
                dest: format!("gsiftp://b/{i}"),
                link: "gsiftp://a:2811 → gsiftp://b:2811".into(),
                filesize: Some(10),
                checksum: None,
                metadata: None,
            })
            .collect(),
    }
}

async fn state(db: &Db, id: &str) -> JobState {
    db.job(id.into()).await.unwrap().unwrap().job_state
}

async fn retry_and_resume(db: Db) {
    db.heartbeat(100).await.unwrap();
    assert!(db.insert_job(job("j1", 2), 100).await.unwrap());
    // The same submission again is the same job; another body under its id is refused.
    assert!(!db.insert_job(job("j1", 2), 101).await.unwrap());
    let mut other = job("j1", 2);
    other.body_hash = "else".into();
    assert!(matches!(
        db.insert_job(other, 101).await,
        Err(ServiceError::Conflict(_))
    ));
    assert_eq!(state(&db, "j1").await, JobState::Submitted);

    let ready = db.ready_files(100, 10).await.unwrap();
    assert_eq!(ready.len(), 2);
    assert!(ready.iter().all(|f| f.file_state == FileState::Ready));
    let f = db
        .start_attempt(ready[0].file_id, 101)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((f.file_state, f.attempts), (FileState::Active, 1));
    assert!(
        db.start_attempt(ready[0].file_id, 101)
            .await
            .unwrap()
            .is_none(),
        "only once"
    );
    assert_eq!(state(&db, "j1").await, JobState::Active);

    db.store_ranges(f.file_id, "0-4".into()).await.unwrap();
    db.end_attempt(
        f.file_id,
        Ending::Retry {
            error: "lost".into(),
            stored: "0-4".into(),
            delay: 5,
            counted: true,
        },
        102,
    )
    .await
    .unwrap();
    let back = db.file(f.file_id).await.unwrap().unwrap();
    assert_eq!(
        (back.file_state, back.failures, back.next_try),
        (FileState::Submitted, 1, 107)
    );
    assert_eq!(back.stored, "0-4");
    // Not due before its delay.
    assert!(db
        .ready_files(106, 10)
        .await
        .unwrap()
        .iter()
        .all(|r| r.file_id != f.file_id));
    assert!(db
        .ready_files(107, 10)
        .await
        .unwrap()
        .iter()
        .any(|r| r.file_id == f.file_id));
    let again = db.start_attempt(f.file_id, 108).await.unwrap().unwrap();
    assert_eq!(again.attempts, 2);
    let (counts, bytes) = db.job_progress("j1".into(), false).await.unwrap();
    assert_eq!(
        counts,
        vec![("ACTIVE".to_owned(), 1), ("READY".to_owned(), 1)]
    );
    assert_eq!(bytes, None, "bytes only once the job has ended");
    let attempts = db.attempts(f.file_id).await.unwrap();
    assert_eq!(attempts.len(), 2);
    assert!(
        attempts
            .iter()
            .all(|a| a.host.as_deref() == Some(db.host())),
        "each attempt names the host that ran it: {attempts:?}"
    );
    assert_eq!(attempts[0].error.as_deref(), Some("lost"));
    assert_eq!(attempts[1].resumed_bytes, 4);

    // A crash: the ACTIVE file waits again with its ranges, and the crash is not a failure.
    assert_eq!(db.reclaim(200, true, HOST_TIMEOUT).await.unwrap(), 1);
    let back = db.file(f.file_id).await.unwrap().unwrap();
    assert_eq!(
        (back.file_state, back.failures, back.stored.as_str()),
        (FileState::Submitted, 1, "0-4")
    );
    // The claim is gone: an end the old attempt reports is refused.
    let e = db
        .end_attempt(f.file_id, Ending::Canceled, 201)
        .await
        .unwrap_err();
    assert!(matches!(e, ServiceError::Conflict(_)), "{e}");

    for file in db.ready_files(200, 10).await.unwrap() {
        db.start_attempt(file.file_id, 201).await.unwrap().unwrap();
        db.end_attempt(
            file.file_id,
            Ending::Finished {
                bytes: 10,
                moved: 6,
                throughput: 1.0,
                checksum: Some("ADLER32:1".into()),
            },
            202,
        )
        .await
        .unwrap();
    }
    let j = db.job("j1".into()).await.unwrap().unwrap();
    assert_eq!(
        (j.job_state, j.finish_time),
        (JobState::Finished, Some(202))
    );
    assert_eq!(j.ignored, vec!["params.spacetoken".to_owned()]);
    let files = db.files("j1".into()).await.unwrap();
    assert_eq!(files[0].checksum.as_deref(), Some("ADLER32:1"));
    let (counts, bytes) = db.job_progress("j1".into(), true).await.unwrap();
    assert_eq!(counts, vec![("FINISHED".to_owned(), 2)]);
    assert_eq!(bytes, Some(20));
}

/// A pipeline's end and its successor's claim, in one transaction: the link's next small
/// whole files of the most urgent job, never a large or resumed one, never another link's.
async fn successor_pipelines(db: Db) {
    db.heartbeat(100).await.unwrap();
    let mut low = job("low", 3);
    low.files[2].filesize = Some(1 << 30);
    let mut high = job("high", 3);
    high.priority = 5;
    high.files[2].link = "gsiftp://a:2811 → gsiftp://c:2811".into();
    db.insert_job(low, 100).await.unwrap();
    let first: Vec<i64> = db
        .ready_files(100, 10)
        .await
        .unwrap()
        .iter()
        .map(|f| f.file_id)
        .take(2)
        .collect();
    let running = db.start_attempts(first.clone(), 100).await.unwrap();
    assert_eq!(running.len(), 2);
    // A more urgent job arrives while the pipeline runs.
    db.insert_job(high, 101).await.unwrap();
    let link = running[0].link.clone();
    let finished = Ending::Finished {
        bytes: 10,
        moved: 10,
        throughput: 1.0,
        checksum: None,
    };
    let endings = first.iter().map(|&id| (id, finished.clone())).collect();
    let (each, next) = db
        .end_attempts_then_claim(endings, 102, Some((link.clone(), 32)))
        .await
        .unwrap();
    assert!(each.iter().all(Result::is_ok));
    let (next_job, rows) = next.expect("a successor");
    assert_eq!(next_job.job_id, "high", "the most urgent job first");
    assert_eq!(rows.len(), 2, "not the file of the other link: {rows:?}");
    assert!(rows
        .iter()
        .all(|r| r.link == link && r.file_state == FileState::Active && r.attempts == 1));
    let endings = rows.iter().map(|r| (r.file_id, finished.clone())).collect();
    let (_, next) = db
        .end_attempts_then_claim(endings, 103, Some((link.clone(), 32)))
        .await
        .unwrap();
    assert!(
        next.is_none(),
        "the low job's 1 GiB file runs alone, not in a pipeline: {next:?}"
    );
    assert_eq!(state(&db, "high").await, JobState::Active);
    let ready = db.ready_files(104, 10).await.unwrap();
    assert_eq!(
        ready.len(),
        2,
        "the other link's file and the large one wait"
    );
}

async fn cancel_and_list(db: Db) {
    db.insert_job(job("j2", 3), 100).await.unwrap();
    let ready = db.ready_files(100, 10).await.unwrap();
    db.start_attempt(ready[0].file_id, 100).await.unwrap();
    assert!(matches!(
        db.cancel(vec!["j2".into()], Some("/CN=mallory".into()), 101)
            .await,
        Err(ServiceError::NotFound(_))
    ));
    assert!(matches!(
        db.cancel(vec!["nope".into()], None, 101).await,
        Err(ServiceError::NotFound(_))
    ));
    let active = db
        .cancel(vec!["j2".into()], Some("/CN=alice".into()), 101)
        .await
        .unwrap();
    assert_eq!(active, vec![ready[0].file_id]);
    assert_eq!(db.canceled_here().await.unwrap(), vec![ready[0].file_id]);
    assert_eq!(
        state(&db, "j2").await,
        JobState::Active,
        "one file still moving"
    );
    db.end_attempt(ready[0].file_id, Ending::Canceled, 102)
        .await
        .unwrap();
    assert_eq!(state(&db, "j2").await, JobState::Canceled);
    let listed = |states: Vec<JobState>, user: Option<&str>| {
        db.jobs(JobFilter {
            user_dn: user.map(str::to_owned),
            states,
            limit: 10,
        })
    };
    assert!(listed(vec![], Some("/CN=alice")).await.unwrap().is_empty());
    assert_eq!(
        listed(vec![JobState::Canceled], Some("/CN=alice"))
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(listed(vec![JobState::Canceled], Some("/CN=bob"))
        .await
        .unwrap()
        .is_empty());
    let summaries = db.job_summaries(None, 10).await.unwrap();
    assert_eq!(summaries[0].1.iter().map(|(_, n)| n).sum::<i64>(), 3);
    assert_eq!(
        db.recent_files(Some("/CN=bob".into()), 10)
            .await
            .unwrap()
            .len(),
        0
    );
    assert_eq!(
        db.recent_files(Some("/CN=alice".into()), 10)
            .await
            .unwrap()
            .len(),
        3
    );
}

/// The counts the triggers keep, as (state, n) of link L1, sorted.
async fn counted(db: &Db) -> Vec<(String, i64)> {
    let mut c: Vec<(String, i64)> = db
        .link_counts()
        .await
        .unwrap()
        .into_iter()
        .filter(|(l, _, _)| l == L1)
        .map(|(_, s, n)| (s, n))
        .collect();
    c.sort();
    c
}

fn states(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
    pairs.iter().map(|(s, n)| ((*s).to_owned(), *n)).collect()
}

/// The per-link and per-state counts follow every change of a file, before and after their
/// deltas are folded, and the totals agree.
async fn counts_follow_every_change(db: Db) {
    db.heartbeat(100).await.unwrap();
    db.insert_job(job("c", 3), 100).await.unwrap();
    assert_eq!(counted(&db).await, states(&[("SUBMITTED", 3)]));
    let ready = db.ready_files(100, 10).await.unwrap();
    db.fold_counts().await.unwrap();
    assert_eq!(counted(&db).await, states(&[("READY", 3)]));
    db.start_attempt(ready[0].file_id, 101).await.unwrap();
    assert_eq!(counted(&db).await, states(&[("ACTIVE", 1), ("READY", 2)]));
    db.end_attempt(
        ready[0].file_id,
        Ending::Finished {
            bytes: 10,
            moved: 10,
            throughput: 1.0,
            checksum: None,
        },
        102,
    )
    .await
    .unwrap();
    db.fold_counts().await.unwrap();
    db.fold_counts().await.unwrap();
    assert_eq!(counted(&db).await, states(&[("FINISHED", 1), ("READY", 2)]));
    db.cancel(vec!["c".into()], None, 103).await.unwrap();
    assert_eq!(
        counted(&db).await,
        states(&[("CANCELED", 2), ("FINISHED", 1)])
    );
    let mut totals = db.state_counts().await.unwrap();
    totals.sort();
    assert_eq!(totals, states(&[("CANCELED", 2), ("FINISHED", 1)]));
}

#[tokio::test]
async fn sqlite_keeps_counts_that_follow_every_change() {
    counts_follow_every_change(Db::in_memory().unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_keeps_counts_that_follow_every_change() {
    let Some(pg) = blocking(pg::or_skip) else {
        return;
    };
    let (_, db) = pg_db(&pg, "counts", "h1");
    counts_follow_every_change(db).await;
}

#[tokio::test]
async fn sqlite_pipelines_claim_their_successors_with_their_ends() {
    successor_pipelines(Db::in_memory().unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pipelines_claim_their_successors_with_their_ends() {
    let Some(pg) = blocking(pg::or_skip) else {
        return;
    };
    let (_, db) = pg_db(&pg, "successors", "h1");
    successor_pipelines(db).await;
}

/// A destination found absent before a copy began stays the file's own across its attempts
/// (a job that must not overwrite resumes into it); only a file this host runs is marked.
async fn destinations_found_absent_stay_the_files_own(db: Db) {
    db.heartbeat(100).await.unwrap();
    db.insert_job(job("own", 2), 100).await.unwrap();
    let ready = db.ready_files(100, 10).await.unwrap();
    let (running, waiting) = (ready[0].file_id, ready[1].file_id);
    let f = db.start_attempt(running, 101).await.unwrap().unwrap();
    assert!(!f.dest_own, "not before an attempt asked");
    let owned = db.own_destinations(vec![running, waiting]).await.unwrap();
    assert_eq!(owned, vec![running], "only the file this host runs");
    db.end_attempt(
        running,
        Ending::Retry {
            error: "lost".into(),
            stored: String::new(),
            delay: 0,
            counted: true,
        },
        102,
    )
    .await
    .unwrap();
    assert!(db.file(running).await.unwrap().unwrap().dest_own);
    db.ready_files(103, 10).await.unwrap();
    let again = db.start_attempt(running, 103).await.unwrap().unwrap();
    assert!(again.dest_own, "the next attempt knows");
    assert!(!db.file(waiting).await.unwrap().unwrap().dest_own);
}

#[tokio::test]
async fn sqlite_keeps_a_destination_found_absent_as_the_files_own() {
    destinations_found_absent_stay_the_files_own(Db::in_memory().unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_keeps_a_destination_found_absent_as_the_files_own() {
    let Some(pg) = blocking(pg::or_skip) else {
        return;
    };
    let (_, db) = pg_db(&pg, "dest_own", "h1");
    destinations_found_absent_stay_the_files_own(db).await;
}

#[tokio::test]
async fn sqlite_runs_retries_resumes_and_cancels() {
    retry_and_resume(Db::in_memory().unwrap()).await;
    cancel_and_list(Db::in_memory().unwrap()).await;
}

#[tokio::test]
async fn an_sqlite_file_is_migrated_once_kept_private_and_refused_when_newer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q/queue.db");
    let spec = path.to_string_lossy().into_owned();
    {
        let db = Db::open(&spec, "h").unwrap();
        db.insert_job(job("j3", 1), 1).await.unwrap();
    }
    let db = Db::open(&spec, "h").unwrap();
    assert!(
        db.job("j3".into()).await.unwrap().is_some(),
        "kept across opens"
    );
    drop(db);
    let c = rusqlite::Connection::open(&path).unwrap();
    c.pragma_update(None, "user_version", 99).unwrap();
    drop(c);
    let e = Db::open(&spec, "h").err().unwrap();
    assert!(e.to_string().contains("newer than this ferry knows"), "{e}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

/// Blocking calls (the synchronous PostgreSQL client) from the async tests.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn pg_db(pg: &pg::Postgres, name: &str, host: &str) -> (String, Db) {
    blocking(|| {
        let url = pg.database(name);
        let db = Db::open(&url, host).unwrap();
        (url, db)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_runs_retries_resumes_and_cancels() {
    let Some(pg) = blocking(pg::or_skip) else {
        return;
    };
    let (_, db) = pg_db(&pg, "lifecycle", "h1");
    retry_and_resume(db).await;
    let (url, db) = pg_db(&pg, "cancels", "h1");
    cancel_and_list(db).await;
    // A second opening finds the schema done (and a second host migrating at once waits).
    let again = blocking(|| Db::open(&url, "h2").unwrap());
    assert!(again.job("j2".into()).await.unwrap().is_some());
    let err = blocking(|| Db::open("postgres://ferry:secret@127.0.0.1:1/x", "h").unwrap_err());
    assert!(
        err.to_string().contains("ferry:***@"),
        "the password is not shown: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_on_one_postgres_queue_claim_each_file_once_and_take_back_a_silent_hosts() {
    let Some(pg) = blocking(pg::or_skip) else {
        return;
    };
    let (url, a) = pg_db(&pg, "shared", "host-a");
    let b = blocking(|| Db::open(&url, "host-b").unwrap());
    a.heartbeat(1000).await.unwrap();
    b.heartbeat(1000).await.unwrap();
    a.insert_job(job("big", 200), 1000).await.unwrap();
    // Both hosts race for every file; each file goes to exactly one.
    let (ra, rb) = (a.clone(), b.clone());
    let take = |db: Db| async move {
        let mut mine = Vec::new();
        for f in db.ready_files(1000, 500).await.unwrap() {
            if let Some(row) = db.start_attempt(f.file_id, 1001).await.unwrap() {
                mine.push(row.file_id);
            }
        }
        mine
    };
    let (got_a, got_b) = tokio::join!(take(ra), take(rb));
    let mut all: Vec<i64> = got_a.iter().chain(&got_b).copied().collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 200, "every file claimed");
    assert_eq!(got_a.len() + got_b.len(), 200, "and none twice");
    // B cannot end A's attempts.
    if let Some(f) = got_a.first() {
        let e = b.end_attempt(*f, Ending::Canceled, 1002).await.unwrap_err();
        assert!(matches!(e, ServiceError::Conflict(_)), "{e}");
    }
    // A goes silent; within the timeout nothing moves, after it B takes A's files back.
    b.heartbeat(1000 + HOST_TIMEOUT).await.unwrap();
    assert_eq!(
        b.reclaim(1000 + HOST_TIMEOUT - 1, false, HOST_TIMEOUT)
            .await
            .unwrap(),
        0
    );
    let back = b
        .reclaim(1001 + HOST_TIMEOUT, false, HOST_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(back, got_a.len(), "A's claims, not B's");
    for f in &got_b {
        assert_eq!(
            b.file(*f).await.unwrap().unwrap().file_state,
            FileState::Active
        );
    }
    // A comes back and reports an end: refused, the file is B's to run now.
    if let Some(f) = got_a.first() {
        let e = a
            .end_attempt(
                *f,
                Ending::Failed {
                    error: "x".into(),
                    retryable: false,
                },
                1040,
            )
            .await;
        assert!(matches!(e, Err(ServiceError::Conflict(_))));
        let again = b.ready_files(1100, 500).await.unwrap();
        assert!(again.iter().any(|r| r.file_id == *f));
    }
}

const L1: &str = "gsiftp://a:2811 → gsiftp://b:2811";
const L2: &str = "gsiftp://a:2811 → gsiftp://c:2811";

fn room(link: &str) -> Room {
    Room {
        link: link.into(),
        link_max: 2,
        endpoint_max: 3,
        host_timeout: HOST_TIMEOUT,
    }
}

/// Jobs of 4 files on L1 and 4 on L2 (which share server a); their READY files' ids.
async fn two_links(db: &Db) -> (Vec<i64>, Vec<i64>) {
    let mut other = job("l2", 4);
    for f in &mut other.files {
        f.link = L2.into();
    }
    db.insert_job(job("l1", 4), 1000).await.unwrap();
    db.insert_job(other, 1000).await.unwrap();
    let ready = db.ready_files(1000, 100).await.unwrap();
    let ids = |link: &str| -> Vec<i64> {
        ready
            .iter()
            .filter(|f| f.link == link)
            .map(|f| f.file_id)
            .collect()
    };
    (ids(L1), ids(L2))
}

/// Whether `db` got a slot (and the file) in `room(link)`.
async fn took(db: &Db, id: i64, link: &str, now: i64) -> bool {
    match db
        .start_attempts_in(vec![id], now, room(link))
        .await
        .unwrap()
    {
        Some(rows) => {
            assert_eq!(rows.len(), 1, "the file was READY");
            true
        }
        None => false,
    }
}

#[tokio::test]
async fn sqlite_link_and_server_limits_hold_until_a_slot_is_given_back() {
    let db = Db::in_memory().unwrap();
    db.heartbeat(1000).await.unwrap();
    let (l1, l2) = two_links(&db).await;
    assert!(took(&db, l1[0], L1, 1000).await);
    assert!(took(&db, l1[1], L1, 1000).await);
    assert!(!took(&db, l1[2], L1, 1000).await, "the link holds 2");
    assert_eq!(
        db.file(l1[2]).await.unwrap().unwrap().file_state,
        FileState::Ready,
        "a file refused for room stays in the queue"
    );
    assert!(took(&db, l2[0], L2, 1000).await);
    assert!(!took(&db, l2[1], L2, 1000).await, "server a holds 3 in all");
    db.end_slot(L1.into()).await.unwrap();
    assert!(
        took(&db, l2[1], L2, 1000).await,
        "a slot given back on L1 frees server a"
    );
    // A claim of files no longer READY takes no slot.
    db.end_slot(L2.into()).await.unwrap();
    let again = db
        .start_attempts_in(vec![l1[0]], 1000, room(L1))
        .await
        .unwrap();
    assert!(matches!(again, Some(rows) if rows.is_empty()));
    let held = db.shared_slots(1000, HOST_TIMEOUT).await.unwrap();
    assert_eq!((held[L1], held[L2]), (1, 1));
    // Started again, the host counts nothing of its last life.
    db.reclaim(1001, true, HOST_TIMEOUT).await.unwrap();
    assert!(db
        .shared_slots(1001, HOST_TIMEOUT)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_on_one_postgres_queue_share_link_and_server_limits() {
    let Some(pg) = blocking(pg::or_skip) else {
        return;
    };
    let (url, a) = pg_db(&pg, "limits", "host-a");
    let b = blocking(|| Db::open(&url, "host-b").unwrap());
    a.heartbeat(1000).await.unwrap();
    b.heartbeat(1000).await.unwrap();
    let (l1, l2) = two_links(&a).await;
    assert!(took(&a, l1[0], L1, 1000).await);
    assert!(took(&b, l1[1], L1, 1000).await);
    assert!(
        !took(&a, l1[2], L1, 1000).await && !took(&b, l1[2], L1, 1000).await,
        "the link's 2 are one per host"
    );
    assert!(took(&b, l2[0], L2, 1000).await);
    assert!(
        !took(&a, l2[1], L2, 1000).await,
        "server a holds 3 over both hosts"
    );
    let held = a.shared_slots(1000, HOST_TIMEOUT).await.unwrap();
    assert_eq!((held[L1], held[L2]), (2, 1));
    a.end_slot(L1.into()).await.unwrap();
    assert!(
        took(&b, l1[2], L1, 1000).await,
        "A's slot given back is B's to take"
    );

    // Both hosts race for the last slot of L2 (server a is at 3 again): one gets it.
    b.end_slot(L1.into()).await.unwrap();
    let (ra, rb) = tokio::join!(
        a.start_attempts_in(vec![l2[1]], 1000, room(L2)),
        b.start_attempts_in(vec![l2[2]], 1000, room(L2))
    );
    let (a_won, b_won) = (
        matches!(ra.unwrap(), Some(rows) if rows.len() == 1),
        matches!(rb.unwrap(), Some(rows) if rows.len() == 1),
    );
    assert!(a_won != b_won, "exactly one host takes the last slot");

    // A goes silent: after the timeout its slots no longer count for B, and B's reclaim
    // drops them.
    let late = 1001 + HOST_TIMEOUT;
    let b_holds = 2 + i64::from(b_won);
    b.heartbeat(late).await.unwrap();
    let total = |m: std::collections::HashMap<String, i64>| m.values().sum::<i64>();
    assert_eq!(
        total(b.shared_slots(late, HOST_TIMEOUT).await.unwrap()),
        b_holds
    );
    assert_eq!(
        total(a.shared_slots(late, HOST_TIMEOUT).await.unwrap()),
        3,
        "a host always counts its own"
    );
    b.reclaim(late, false, HOST_TIMEOUT).await.unwrap();
    assert_eq!(
        total(a.shared_slots(late, HOST_TIMEOUT).await.unwrap()),
        b_holds,
        "A's slots were dropped with its claims"
    );
}

#[tokio::test]
async fn a_full_link_does_not_hide_the_files_of_other_links() {
    let db = Db::in_memory().unwrap();
    let busy = job("busy", 50);
    let mut other = job("other", 2);
    other.priority = 1; // less urgent than "busy"
    for f in &mut other.files {
        f.link = "gsiftp://c:2811 → gsiftp://d:2811".into();
    }
    db.insert_job(busy, 100).await.unwrap();
    db.insert_job(other, 100).await.unwrap();
    let top = db.ready_files(100, 10).await.unwrap();
    assert!(
        top.iter().all(|f| f.job_id == "busy"),
        "the urgent job first"
    );
    let rest = db
        .ready_files_except(100, 10, vec!["gsiftp://a:2811 → gsiftp://b:2811".into()])
        .await
        .unwrap();
    assert_eq!(rest.len(), 2);
    assert!(rest.iter().all(|f| f.job_id == "other"));
}

/// `Db::open`'s error, as text (`Db` has no `Debug` for `unwrap_err`).
fn open_err(url: &str) -> String {
    match blocking(|| Db::open(url, "h")) {
        Ok(_) => panic!("{url} was accepted"),
        Err(e @ ServiceError::Database(_)) => e.to_string(),
        Err(e) => panic!("not a database error: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sslmode_require_runs_the_queue_over_tls_and_disable_is_refused() {
    let Some(pg) = blocking(pg::ssl_only_or_skip) else {
        return;
    };
    let url = blocking(|| pg.database("tls_require"));
    let db = blocking(|| Db::open(&format!("{url}?sslmode=require"), "h1").unwrap());
    assert!(db.insert_job(job("j-tls", 2), 100).await.unwrap());
    let row = db.job("j-tls".into()).await.unwrap().unwrap();
    assert_eq!(
        (row.user_dn.as_str(), row.job_state),
        ("/CN=alice", JobState::Submitted)
    );
    assert_eq!(db.ready_files(100, 10).await.unwrap().len(), 2);
    // Seen from the server: the queue's own session is encrypted.
    let (tls, plain) = blocking(|| pg.sessions("tls_require"));
    assert_eq!((tls.len(), plain), (1, 0), "{tls:?}");
    assert!(tls[0].starts_with("TLSv1."), "{tls:?}");
    // prefer, the default, takes TLS where the server offers it.
    let by_default = blocking(|| Db::open(&url, "h2").unwrap());
    assert!(by_default.job("j-tls".into()).await.unwrap().is_some());
    assert_eq!(
        blocking(|| pg.sessions("tls_require")),
        (vec![tls[0].clone(); 2], 0)
    );
    // allow tries without TLS first and, turned away, again with it.
    let allowed = blocking(|| Db::open(&format!("{url}?sslmode=allow"), "h3").unwrap());
    assert!(allowed.job("j-tls".into()).await.unwrap().is_some());
    assert_eq!(blocking(|| pg.sessions("tls_require")).0.len(), 3);
    // The server's pg_hba.conf turns away a session without TLS.
    let e = open_err(&format!("{url}?sslmode=disable"));
    assert!(e.contains("pg_hba.conf rejects connection"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_verify_full_trusts_only_the_ca_in_sslrootcert_and_checks_the_host_name() {
    let Some(pg) = blocking(pg::ssl_only_or_skip) else {
        return;
    };
    let url = blocking(|| pg.database("tls_verify"));
    let port = url
        .rsplit_once(':')
        .and_then(|(_, p)| p.split_once('/'))
        .map(|(p, _)| p.to_owned())
        .unwrap();
    // The right CA, from a path with a space in it (the URL escapes it, as libpq's does).
    let dir = tempfile::tempdir().unwrap();
    let spaced = dir.path().join("root certs");
    std::fs::create_dir(&spaced).unwrap();
    std::fs::copy(pg.ca_file(), spaced.join("ca.pem")).unwrap();
    let root = format!("{}/ca.pem", spaced.display()).replace(' ', "%20");
    let mut open = Vec::new();
    for host in ["127.0.0.1", "localhost"] {
        let good = format!(
            "postgres://ferry@{host}:{port}/tls_verify?sslmode=verify-full&sslrootcert={root}"
        );
        let db = blocking(|| Db::open(&good, "h1").unwrap());
        assert!(db.insert_job(job(host, 1), 100).await.unwrap());
        open.push(db);
    }
    let (tls, plain) = blocking(|| pg.sessions("tls_verify"));
    assert_eq!((tls.len(), plain), (2, 0), "{tls:?}");
    // A CA that did not sign the server's certificate: refused, in require too (libpq
    // checks against a root file given in any mode).
    let (_, other) = pg::make_ca(dir.path(), "Some other CA").unwrap();
    for mode in ["verify-full", "verify-ca", "require"] {
        let e = open_err(&format!(
            "{url}?sslmode={mode}&sslrootcert={}",
            other.display()
        ));
        assert!(e.contains("certificate verify failed"), "{mode}: {e}");
    }
    // Reached by address under a name the certificate does not hold: verify-ca is content
    // with the chain, verify-full wants the name too.
    let renamed = format!(
        "postgres://ferry@db.example.org:{port}/tls_verify?hostaddr=127.0.0.1&sslrootcert={}",
        pg.ca_file().display()
    );
    let db = blocking(|| Db::open(&format!("{renamed}&sslmode=verify-ca"), "h2").unwrap());
    assert!(db.job("localhost".into()).await.unwrap().is_some());
    let e = open_err(&format!("{renamed}&sslmode=verify-full"));
    assert!(e.contains("certificate verify failed"), "{e}");
    assert!(e.contains("hostname mismatch"), "{e}");
}

#[test]
fn a_bad_tls_parameter_is_refused_by_name_without_showing_the_password() {
    let base = "postgres://ferry:secret@127.0.0.1:1/q";
    let cases = [
        ("sslmode=verify", "sslmode=\"verify\" is not one of"),
        (
            "sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem",
            "sslrootcert /nonexistent/ca.pem: cannot read it",
        ),
        ("sslcert=/c.pem", "sslcert is given without sslkey"),
        (
            "sslrootcert=system&sslmode=require",
            "weak sslmode \"require\" may not be used with sslrootcert=system",
        ),
        ("sslrootcert=%ff", "sslrootcert is not UTF-8"),
        // libpq parameters beyond these four go to tokio-postgres, which names what it lacks.
        ("sslcrl=/crl.pem", "unknown option `sslcrl`"),
    ];
    for (query, says) in cases {
        let e = match Db::open(&format!("{base}?{query}"), "h") {
            Ok(_) => panic!("{query} was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(says), "{query}: {e}");
        assert!(e.contains("ferry:***@"), "{query}: {e}");
        assert!(!e.contains("secret"), "{query}: {e}");
    }
    // A password given as a parameter is hidden too.
    let e = match Db::open(
        "postgres://ferry@127.0.0.1:1/q?password=secret&sslmode=x",
        "h",
    ) {
        Ok(_) => panic!("sslmode=x was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("password=***") && !e.contains("secret"), "{e}");
}

#[test]
fn prefer_tries_without_tls_only_after_a_server_turned_tls_down() {
    // Nothing listens on port 1: no server to ask, so no second try without TLS.
    let e = match Db::open("postgres://ferry@127.0.0.1:1/q", "h") {
        Ok(_) => panic!("port 1 answered"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("with TLS: error connecting to server"), "{e}");
    assert!(!e.contains("without TLS"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sslcert_and_sslkey_present_a_client_certificate_where_the_server_wants_one() {
    let Some(pg) = blocking(pg::ssl_only_or_skip) else {
        return;
    };
    // pg_hba.conf wants a certificate whose CN is the user for this database.
    let url = blocking(|| pg.database("tls_cert"));
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = pg.client_certificate(dir.path(), "ferry");
    let (_, other_key) = pg.client_certificate(dir.path(), "someone");
    let e = open_err(&format!("{url}?sslmode=require"));
    assert!(e.contains("requires a valid client certificate"), "{e}");
    let with = format!(
        "{url}?sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
        pg.ca_file().display(),
        cert.display(),
        key.display()
    );
    let db = blocking(|| Db::open(&with, "h1").unwrap());
    assert!(db.insert_job(job("j-cert", 1), 100).await.unwrap());
    assert_eq!(blocking(|| pg.sessions("tls_cert")).0.len(), 1);
    // Another certificate's key is caught before any connection.
    let e = open_err(&format!(
        "{url}?sslmode=require&sslcert={}&sslkey={}",
        cert.display(),
        other_key.display()
    ));
    assert!(e.contains("is not the key of sslcert"), "{e}");
}
