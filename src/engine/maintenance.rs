//! An instance's periodic chores, each named: its heartbeat, the gauges,
//! the jobs table kept small, old records forgotten and the pulled
//! authors' finished deliveries swept.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Engine;
use crate::error::AppResult;
use crate::metrics;
use crate::store::pg::HEARTBEAT;
use crate::store::redis::state::PulledChange;
use crate::types::PostId;

/// How often an instance forgets the publish keys past their day.
const FORGET_KEYS_EVERY: Duration = Duration::from_secs(60);

/// Dead rows of the fan-out jobs table past which an instance vacuums it.
pub const JOBS_VACUUM_DEAD_ROWS: i64 = 2000;

/// The heartbeat and the named chores ([`Engine::maintenance`]).
#[derive(Clone, Copy)]
pub struct Maintenance<'a>(pub(crate) &'a Engine);

impl<'a> Maintenance<'a> {
    /// Says this instance is alive every [`HEARTBEAT`] (runs until
    /// aborted): while it does, no other instance takes over its jobs
    /// before their leases run out; once it stops, they do within
    /// [`crate::store::pg::QUIET_INSTANCE`].
    pub async fn heartbeat_forever(self) {
        loop {
            if let Err(e) = self.0.inner.pg.jobs().heartbeat().await {
                tracing::debug!(error = %e.chain(), "could not record this instance's heartbeat");
            }
            tokio::time::sleep(HEARTBEAT).await;
        }
    }

    /// Clears the deliveries the pulled authors still hold whose jobs are
    /// gone (done): a `done` that failed, or a rebuild that merged a
    /// delivery finished meanwhile, would otherwise keep an author pulled
    /// by every reader for good. Redis is read first: a delivery it holds
    /// was committed before (publish commits, then marks), so no job then
    /// means done. Returns how many it cleared.
    pub async fn sweep_pulled(self) -> AppResult<usize> {
        let held = self.0.inner.redis.state().pulled_in_flight().await?;
        let ids: Vec<PostId> = held
            .iter()
            .flat_map(|(_, ids)| ids.iter().copied())
            .collect();
        let owed: std::collections::HashSet<PostId> = self
            .0
            .inner
            .pg
            .posts()
            .deliveries_of(&ids)
            .await?
            .into_iter()
            .collect();
        let mut cleared = 0;
        for (author, ids) in held {
            for id in ids.into_iter().filter(|id| !owed.contains(id)) {
                self.0
                    .inner
                    .redis
                    .state()
                    .pulled_change(author, PulledChange::Done(id))
                    .await?;
                cleared += 1;
            }
        }
        Ok(cleared)
    }

    /// The instance's chores, every `every` (runs until aborted): the
    /// gauges of `/metrics` (so that a scrape makes no query), the jobs
    /// table kept small, the pulled authors' finished deliveries swept, and
    /// every [`FORGET_KEYS_EVERY`] the publish keys and tasks past their
    /// time forgotten.
    pub async fn maintain_forever(self, every: Duration) {
        let mut forgotten = Instant::now();
        loop {
            self.refresh_gauges().await;
            self.keep_job_table_small().await;
            if forgotten.elapsed() >= FORGET_KEYS_EVERY {
                forgotten = Instant::now();
                self.forget_old_records().await;
            }
            self.sweep_finished_deliveries().await;
            tokio::time::sleep(every).await;
        }
    }

    /// Whether each store answers, and the fan-out jobs by state (the
    /// backlog publishes are held to among them).
    async fn refresh_gauges(self) {
        let (pg, redis) = self.0.ready().await;
        metrics::store_answered("postgres", pg.is_ok());
        metrics::store_answered("redis", redis.is_ok());
        match self.0.inner.pg.jobs().job_counts().await {
            Ok((pending, running, dead)) => {
                self.0
                    .inner
                    .backlog
                    .store(pending + running, Ordering::Relaxed);
                let jobs = &metrics::FANOUT_JOBS;
                jobs.with_label_values(&["pending"]).set(pending);
                jobs.with_label_values(&["running"]).set(running);
                jobs.with_label_values(&["dead"]).set(dead);
            }
            Err(e) => tracing::debug!(error = %e.chain(), "could not count fan-out jobs"),
        }
    }

    /// Forgets the publish keys past their day and the tasks past their
    /// week.
    async fn forget_old_records(self) {
        match self.0.inner.pg.posts().forget_old_publish_keys().await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(keys = n, "forgot publish keys past their day"),
            Err(e) => tracing::debug!(error = %e.chain(), "could not forget old publish keys"),
        }
        match self.0.inner.pg.accounts().forget_old_tasks().await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(tasks = n, "forgot tasks past their week"),
            Err(e) => tracing::debug!(error = %e.chain(), "could not forget old tasks"),
        }
    }

    /// [`Self::sweep_pulled`], logged.
    async fn sweep_finished_deliveries(self) {
        match self.sweep_pulled().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                deliveries = n,
                "cleared finished deliveries from the pulled authors"
            ),
            Err(e) => tracing::debug!(error = %e.chain(), "could not sweep the pulled authors"),
        }
    }

    /// Vacuums the jobs table once its dead rows pass
    /// [`JOBS_VACUUM_DEAD_ROWS`]. Its per-table autovacuum settings do the
    /// same where autovacuum runs, but autovacuum may be off, and wakes only
    /// once a minute: at a high publish rate the table and its indexes would
    /// swell in between.
    async fn keep_job_table_small(self) {
        match self.0.inner.pg.jobs().job_table_dead_rows().await {
            Ok(dead) if dead > JOBS_VACUUM_DEAD_ROWS => {
                if let Err(e) = self.0.inner.pg.jobs().vacuum_jobs().await {
                    tracing::warn!(error = %e.chain(), "could not vacuum the fan-out jobs");
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %e.chain(), "could not read the jobs table's statistics")
            }
        }
    }
}
