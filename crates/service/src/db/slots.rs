//! Slots: the transfers each host runs per link, kept in the queue so that `--link-max` and
//! `--endpoint-max` hold over every host that shares it.

use super::claims::start_many;
use super::*;

impl Db {
    /// [`Db::start_attempts`] inside the limits that every host of the queue shares: the
    /// files are claimed, and one slot of `room.link` taken for this host, only while the
    /// live hosts together run fewer than `room.link_max` transfers on that link and fewer
    /// than `room.endpoint_max` on each of its two servers. `None` when there is no room
    /// (another host may hold it); an empty list when none of the files was still READY
    /// (then no slot is taken). PostgreSQL: slot changes are serialised by one advisory lock,
    /// so two hosts cannot both take the last slot.
    pub async fn start_attempts_in(
        &self,
        file_ids: Vec<i64>,
        now: i64,
        room: Room,
    ) -> Result<Option<Vec<FileRow>>, ServiceError> {
        self.tx(false, move |tx, kind, host| {
            if kind == Kind::Postgres {
                tx.rows("SELECT pg_advisory_xact_lock(7305470)::TEXT", &[])?;
            }
            let held = slots_held(tx, kind, host, now, room.host_timeout)?;
            let on_link = held.get(&room.link).copied().unwrap_or(0);
            let on = |server: &str| -> i64 {
                held.iter()
                    .filter(|(l, _)| endpoints_of(l).iter().any(|e| e == server))
                    .map(|(_, n)| *n)
                    .sum()
            };
            if on_link >= room.link_max
                || endpoints_of(&room.link)
                    .iter()
                    .any(|e| on(e) >= room.endpoint_max)
            {
                return Ok(None);
            }
            let rows = start_many(tx, kind, host, &file_ids, now)?;
            if rows.is_empty() {
                return Ok(Some(rows));
            }
            refresh_jobs(tx, rows.iter().map(|r| r.job_id.as_str()).collect(), now)?;
            tx.exec(
                "INSERT INTO slots (host_id, link, n) VALUES (?1, ?2, 1) \
                 ON CONFLICT (host_id, link) DO UPDATE SET n = slots.n + 1",
                vals![host, &room.link],
            )?;
            Ok(Some(rows))
        })
        .await
    }

    /// Gives back a slot [`Db::start_attempts_in`] took: the transfer or pipeline of `link`
    /// ended.
    pub async fn end_slot(&self, link: String) -> Result<(), ServiceError> {
        self.tx(false, move |tx, _, host| {
            tx.exec(
                "UPDATE slots SET n = n - 1 WHERE host_id = ?1 AND link = ?2",
                vals![host, &link],
            )?;
            tx.exec(
                "DELETE FROM slots WHERE host_id = ?1 AND n <= 0",
                vals![host],
            )?;
            Ok(())
        })
        .await
    }

    /// The transfers the live hosts run per link (this host's own always count), as the
    /// limits of [`Db::start_attempts_in`] see them.
    pub async fn shared_slots(
        &self,
        now: i64,
        host_timeout: i64,
    ) -> Result<HashMap<String, i64>, ServiceError> {
        self.tx(false, move |tx, kind, host| {
            slots_held(tx, kind, host, now, host_timeout)
        })
        .await
    }
}

/// The limits a claim must stay within, shared by every host of the queue.
#[derive(Debug, Clone)]
pub struct Room {
    /// The link the claim runs on (`A → B`).
    pub link: String,
    /// Transfers the link may run, over all hosts.
    pub link_max: i64,
    /// Transfers each of the link's two servers may take part in, over all its links and
    /// hosts.
    pub endpoint_max: i64,
    /// Seconds after which a silent host's slots no longer count (it is taken for dead and
    /// its files go back to the queue).
    pub host_timeout: i64,
}

/// The two servers of a link (`A → B`).
pub fn endpoints_of(link: &str) -> [String; 2] {
    match link.split_once(" → ") {
        Some((a, b)) => [a.to_owned(), b.to_owned()],
        None => [link.to_owned(), link.to_owned()],
    }
}

/// Slots per link of this host and of the hosts heard from within `timeout` (with SQLite,
/// one host per file, every row).
fn slots_held(
    tx: &mut dyn Tx,
    kind: Kind,
    host: &str,
    now: i64,
    timeout: i64,
) -> Result<HashMap<String, i64>, ServiceError> {
    let alive_since = match kind {
        Kind::Sqlite => i64::MIN,
        Kind::Postgres => now - timeout,
    };
    tx.rows(
        "SELECT link, CAST(SUM(n) AS BIGINT) FROM slots WHERE host_id = ?1 OR host_id IN \
         (SELECT host_id FROM hosts WHERE heartbeat >= ?2) GROUP BY link",
        vals![host, alive_since],
    )?
    .iter()
    .map(|r| Ok((r.t(0)?, r.i(1)?)))
    .collect()
}
