//! Fan-out workers: they run the jobs of the `fanout_jobs` table (a
//! transactional outbox). A job is claimed with `FOR UPDATE SKIP LOCKED`
//! and a lease, worked in keyset batches (one Redis pipeline per batch),
//! checkpointed after each batch, retried with backoff, and parked as dead
//! after too many attempts. Pushes are idempotent (ZADD), so a resumed job
//! may repeat a batch but never loses one.

use std::time::Duration;

use tokio::sync::watch;

use super::cursor::Entry;
use super::{now_ms, Engine};
use crate::error::{AppError, AppResult};
use crate::store::pg::models::JobRow;
use crate::store::pg::Scope;

/// Inboxes per PUSH_MANY call in a fan-out batch: the script call is paid
/// once per this many followers, and one call stays well under a millisecond.
const KEYS_PER_CALL: usize = 100;

/// How a job run ended, short of an error.
enum Run {
    Finished,
    /// Stopped between batches for shutdown; the lease is released.
    Interrupted,
}

impl Engine {
    /// Runs `fanout_workers` workers and the settings refresher until
    /// `shutdown` turns true; each finishes its current batch first.
    pub async fn run_background(&self, shutdown: watch::Receiver<bool>) {
        let mut tasks = Vec::new();
        for worker in 0..self.tuning().fanout_workers {
            let engine = self.clone();
            let shutdown = shutdown.clone();
            tasks.push(tokio::spawn(async move {
                engine.worker(worker, shutdown).await
            }));
        }
        let engine = self.clone();
        let mut stop = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            let every = Duration::from_millis(engine.tuning().settings_refresh_ms);
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = stop.changed() => return,
                }
                if let Err(e) = engine.refresh_settings().await {
                    tracing::warn!(error = %e.chain(), "could not reload settings");
                }
            }
        }));
        for task in tasks {
            let _ = task.await;
        }
    }

    async fn worker(&self, worker: usize, mut shutdown: watch::Receiver<bool>) {
        let lease = Duration::from_secs(self.tuning().fanout_lease_secs);
        loop {
            if *shutdown.borrow() {
                return;
            }
            // Register interest before looking, so a wake-up between the
            // claim and the wait is not lost.
            let woken = self.inner.wake.notified();
            match self.pg().claim_job(lease).await {
                Ok(Some(job)) => self.run_job(worker, job, &shutdown).await,
                Ok(None) => {
                    tokio::select! {
                        _ = woken => {}
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = shutdown.changed() => {}
                    }
                }
                Err(e) => {
                    tracing::warn!(worker, error = %e.chain(), "could not claim a fan-out job");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = shutdown.changed() => {}
                    }
                }
            }
        }
    }

    #[tracing::instrument(skip(self, job, shutdown), fields(job = job.id, kind = %job.kind, author = job.author_id))]
    async fn run_job(&self, worker: usize, job: JobRow, shutdown: &watch::Receiver<bool>) {
        let outcome = match job.kind.as_str() {
            "push" | "push_active" | "backfill" | "retract" => self.work(&job, shutdown).await,
            "follow" | "unfollow" => self.work_one_inbox(&job).await,
            other => Err(AppError::internal(
                "unknown job kind",
                crate::error::Message(other.to_string()),
            )),
        };
        let pg = self.pg();
        let recorded = match outcome {
            Ok(Run::Finished) => {
                let lag_ms = now_ms() - job.created_at_ms;
                if job.kind.starts_with("push") {
                    crate::metrics::FANOUT_LAG.observe(lag_ms.max(0) as f64 / 1000.0);
                }
                tracing::debug!(lag_ms, "fan-out job done");
                let r = pg.finish_job(job.id).await;
                self.inner.job_done.notify_waiters();
                r
            }
            Ok(Run::Interrupted) => pg.release_job(job.id).await,
            Err(e) => {
                // A store that is down is waited for, not counted against the job.
                let transient = matches!(e, AppError::Unavailable { .. });
                let dead = !transient && job.attempts >= self.tuning().fanout_max_attempts;
                let backoff = if transient {
                    Duration::from_secs(2)
                } else {
                    Duration::from_secs(1u64 << job.attempts.clamp(0, 8) as u64)
                };
                tracing::warn!(worker, attempts = job.attempts, dead, transient, error = %e.chain(), "fan-out job failed");
                pg.fail_job(job.id, &e.chain(), backoff, dead, transient)
                    .await
            }
        };
        if let Err(e) = recorded {
            // The lease expires and another worker resumes from the checkpoint.
            tracing::warn!(error = %e.chain(), "could not record a fan-out job's outcome");
        }
    }

    /// A follow's or unfollow's work on the one follower's inbox: the
    /// author's recent posts merged in, or taken out.
    async fn work_one_inbox(&self, job: &JobRow) -> AppResult<Run> {
        let Some(follower) = job.follower_id else {
            return Ok(Run::Finished);
        };
        let cap = self.settings().inbox_max_len;
        let inbox = self.redis().keys().inbox(follower);
        let entries = self
            .pg()
            .entries(Scope::Author(job.author_id), i64::MIN, cap)
            .await?;
        if job.kind == "follow" {
            let added = self.redis().push(&[(inbox, &entries[..])], cap).await?;
            crate::metrics::INBOX_WRITES.inc_by(added.max(0) as u64);
        } else {
            let ids: Vec<i64> = entries.iter().map(|e| e.id).collect();
            self.redis().remove(&[inbox], &ids).await?;
            self.redis()
                .forget_active_fan(job.author_id, follower)
                .await?;
        }
        Ok(Run::Finished)
    }

    async fn work(&self, job: &JobRow, shutdown: &watch::Receiver<bool>) -> AppResult<Run> {
        let s = self.settings();
        let keys = self.redis().keys();
        let author = job.author_id;
        // What each follower's inbox receives (or loses, for a retract).
        let (entries, retract): (Vec<Entry>, Option<i64>) = match job.kind.as_str() {
            "push" | "push_active" => {
                let Some(post) = job.post_id else {
                    return Ok(Run::Finished);
                };
                let Some(entry) = self.pg().live_entry(post).await? else {
                    // Deleted before it was delivered: nothing to push.
                    return Ok(Run::Finished);
                };
                self.redis()
                    .push(&[(keys.outbox(author), &[entry][..])], s.outbox_max_len)
                    .await?;
                (vec![entry], None)
            }
            "backfill" => {
                let since = job.since_ms.unwrap_or(0);
                let entries = self
                    .pg()
                    .entries(Scope::Author(author), since, s.inbox_max_len)
                    .await?;
                (entries, None)
            }
            _ => {
                let post = job.post_id.unwrap_or(0);
                self.redis().remove(&[keys.outbox(author)], &[post]).await?;
                (Vec::new(), Some(post))
            }
        };
        if entries.is_empty() && retract.is_none() {
            return Ok(Run::Finished);
        }
        let batch = self.tuning().fanout_batch_size;
        let lease = Duration::from_secs(self.tuning().fanout_lease_secs);
        // Big-V posts go to active fans only; everything else to all followers.
        let active: Option<Vec<i64>> = if job.kind == "push_active" {
            let since = now_ms() - s.active_window_secs * 1000;
            Some(self.redis().active_fans(author, since).await?)
        } else {
            None
        };
        let mut checkpoint = job.checkpoint;
        loop {
            let followers: Vec<i64> = match &active {
                Some(fans) => {
                    let start = fans.partition_point(|f| *f <= checkpoint);
                    fans[start..fans.len().min(start + batch as usize)].to_vec()
                }
                None => self.pg().followers_after(author, checkpoint, batch).await?,
            };
            let Some(&last) = followers.last() else {
                return Ok(Run::Finished);
            };
            let inboxes: Vec<String> = followers.iter().map(|f| keys.inbox(*f)).collect();
            match retract {
                Some(post) => self.redis().remove(&inboxes, &[post]).await?,
                None => {
                    let added = self
                        .redis()
                        .push_same(&inboxes, &entries, s.inbox_max_len, KEYS_PER_CALL)
                        .await?;
                    crate::metrics::INBOX_WRITES.inc_by(added.max(0) as u64);
                }
            }
            checkpoint = last;
            self.pg().checkpoint_job(job.id, checkpoint, lease).await?;
            if *shutdown.borrow() {
                return Ok(Run::Interrupted);
            }
        }
    }
}
