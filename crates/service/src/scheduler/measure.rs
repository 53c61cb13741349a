//! What the scheduler measures: bytes per link, the throughput history, the gauges, and
//! the optimizer's windows.

use super::*;

impl Scheduler {
    /// Counts what an attempt has moved so far (its total) into its link and the service.
    pub(super) fn count_bytes(&self, file_id: i64, total: u64) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        let Some(a) = s.files.get_mut(&file_id) else {
            return;
        };
        let delta = total.saturating_sub(a.counted);
        if delta == 0 {
            return;
        }
        a.counted = total;
        let link = a.link.clone();
        s.link_bytes.entry(link).or_default().0 += delta;
        s.total_bytes += delta;
        self.metrics.bytes.inc_by(delta);
    }

    /// Once a second: the heartbeat, cancels asked on other hosts, the throughput history
    /// and the gauges.
    pub(super) async fn sample(&self) {
        self.sweep_pool();
        if let Err(e) = self.db.heartbeat(now()).await {
            tracing::warn!(error = %e, "heartbeat failed");
        }
        match self.db.canceled_here().await {
            Ok(ids) if !ids.is_empty() => self.cancel_files(&ids),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "could not look for cancelled jobs"),
        }
        if let Ok(mut s) = self.state.lock() {
            let rate = (s.total_bytes - s.history_mark) as f64;
            s.history_mark = s.total_bytes;
            s.history.push_back((now(), rate));
            while s.history.len() > HISTORY {
                s.history.pop_front();
            }
            for (link, o) in &s.optimizers {
                let label = LinkLabel { link: link.clone() };
                self.metrics
                    .link_active
                    .get_or_create(&label)
                    .set(s.per_link.get(link).copied().unwrap_or(0) as i64);
                self.metrics
                    .link_target
                    .get_or_create(&label)
                    .set(i64::from(o.target()));
            }
        }
        if let Err(e) = self.db.fold_counts().await {
            tracing::warn!(error = %e, "could not fold the file counts");
        }
        if let Ok(counts) = self.db.state_counts().await {
            for state in [
                "SUBMITTED",
                "READY",
                "ACTIVE",
                "FINISHED",
                "FAILED",
                "CANCELED",
            ] {
                let n = counts
                    .iter()
                    .find(|(s, _)| s == state)
                    .map_or(0, |(_, n)| *n);
                self.metrics
                    .files
                    .get_or_create(&StateLabel {
                        state: state.into(),
                    })
                    .set(n);
            }
        }
    }

    /// Once a window: the claims of hosts gone silent come back to the queue, and each
    /// link's optimizer judges what the link did.
    pub(super) async fn optimize(&self) {
        if self.db.shared() {
            let timeout = self.limits.host_timeout.as_secs() as i64;
            match self.db.reclaim(now(), false, timeout).await {
                Ok(0) => {}
                Ok(n) => tracing::warn!(files = n, "took back the files of a service host that stopped; they resume from their stored ranges"),
                Err(e) => tracing::warn!(error = %e, "could not look for stopped hosts"),
            }
        }
        let Ok(counts) = self.db.link_counts().await else {
            return;
        };
        let secs = self.limits.interval.as_secs_f64().max(0.001);
        let mut decisions = Vec::new();
        if let Ok(mut s) = self.state.lock() {
            let links: Vec<String> = s.optimizers.keys().cloned().collect();
            for link in links {
                let waiting: i64 = counts
                    .iter()
                    .filter(|(l, st, _)| *l == link && (st == "READY" || st == "SUBMITTED"))
                    .map(|(_, _, n)| *n)
                    .sum();
                let (total, mark) = s.link_bytes.get(&link).copied().unwrap_or((0, 0));
                s.link_bytes.insert(link.clone(), (total, total));
                let throughput = (total - mark) as f64 / secs;
                s.link_throughput.insert(link.clone(), throughput);
                let (finished, failed) = s.link_ended.remove(&link).unwrap_or((0, 0));
                let active = s.per_link.get(&link).copied().unwrap_or(0) as u64;
                let window = Window {
                    throughput,
                    finished,
                    failed,
                    waiting: waiting.max(0) as u64,
                    active,
                };
                self.metrics
                    .link_throughput
                    .get_or_create(&LinkLabel { link: link.clone() })
                    .set(throughput);
                if let Some(o) = s.optimizers.get_mut(&link) {
                    if let Some(d) = o.evaluate(window) {
                        decisions.push(DecisionRow {
                            link: link.clone(),
                            time: now(),
                            from: i64::from(d.from),
                            to: i64::from(d.to),
                            throughput,
                            reason: d.reason,
                        });
                    }
                }
                // A link with nothing left forgets what it learnt (its next files may differ).
                if waiting == 0 && active == 0 {
                    s.optimizers.remove(&link);
                    s.link_throughput.remove(&link);
                }
            }
        }
        for d in decisions {
            tracing::info!(link = %d.link, from = d.from, to = d.to, reason = %d.reason, "optimizer");
            self.metrics.decisions.inc();
            if let Err(e) = self.db.insert_decision(d).await {
                tracing::warn!(error = %e, "could not record an optimizer decision");
            }
        }
        self.wake();
    }
}
