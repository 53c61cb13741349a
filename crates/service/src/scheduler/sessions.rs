//! Logged-in sessions per (owner, link), with the owner's delegated credential.

use super::*;

impl Scheduler {
    /// Sessions that act as the job's owner (the proxy they delegated, for `gsiftp://` ends),
    /// from the pool when some wait for this link; with when their credential ends.
    pub(super) async fn sessions_for(
        &self,
        job: &JobRow,
        link: &str,
        src: &Location,
        dst: &Location,
    ) -> Result<(Sessions, i64), String> {
        let key = (job.user_dn.clone(), link.to_owned());
        if let Ok(mut pool) = self.pool.lock() {
            if let Some(list) = pool.get_mut(&key) {
                while let Some(p) = list.pop() {
                    // A minute of credential left at least: a transfer should not outlive it.
                    if p.until > now() + 60 {
                        return Ok((p.sessions, p.until));
                    }
                }
            }
        }
        let gsi = [src, dst].iter().any(
            |l| matches!(l, Location::Remote(r) if r.scheme == ferry_client::url::Scheme::GsiFtp),
        );
        if !gsi {
            return Ok((Sessions::new(), i64::MAX));
        }
        let id = crate::delegation::id_for(&job.user_dn);
        let row = self.db.delegation(id).await.map_err(|e| e.to_string())?;
        let Some(proxy) = row.and_then(|r| r.proxy.map(|p| (p, r.termination))) else {
            return Err(format!(
                "no credential of {} is delegated to the service: delegate one (ferry submit does; fts-rest-delegate)",
                job.user_dn
            ));
        };
        let (pem, termination) = proxy;
        let until = termination.unwrap_or(0);
        if until <= now() {
            return Err(format!(
                "the credential {} delegated to the service has expired: delegate a new one",
                job.user_dn
            ));
        }
        let credential = Credential::from_proxy_pem(pem.as_bytes())
            .map_err(|e| format!("the delegated credential cannot be read: {e}"))?;
        let setup =
            GsiSetup::with_credential(GsiOptions::default(), credential, Arc::clone(&self.trust))
                .map_err(|e| e.to_string())?;
        Ok((Sessions::with_gsi(Arc::new(setup)), until))
    }

    /// Sessions whose transfer finished wait for the link's next file.
    pub(super) fn give_back(&self, job: &JobRow, link: &str, sessions: Sessions, until: i64) {
        if let Ok(mut pool) = self.pool.lock() {
            let list = pool
                .entry((job.user_dn.clone(), link.to_owned()))
                .or_default();
            if list.len() < self.limits.link_max {
                list.push(Pooled {
                    sessions,
                    until,
                    idle_since: Instant::now(),
                });
            }
        }
    }

    /// Logs out sessions idle for [`POOL_IDLE`].
    pub(super) fn sweep_pool(&self) {
        if let Ok(mut pool) = self.pool.lock() {
            for list in pool.values_mut() {
                list.retain(|p| p.idle_since.elapsed() < POOL_IDLE);
            }
            pool.retain(|_, l| !l.is_empty());
        }
    }
}
