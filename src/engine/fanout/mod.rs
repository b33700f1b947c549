//! Fan-out: the workers that run the jobs of the `fanout_jobs` table (a
//! transactional outbox). A job is claimed with a lease, worked in keyset
//! batches (a few short Redis pipelines per batch, two in flight, the next
//! batch's followers read meanwhile), checkpointed after each batch,
//! retried with backoff, and given up on after too many attempts by
//! dropping the inboxes it has not reached (they are rebuilt from
//! PostgreSQL), so no author stays pulled for ever. Pushes are idempotent
//! (ZADD), so a resumed job may repeat a batch but never loses one.
//!
//! The steps are public ([`FanOut::claim`], [`FanOut::step`],
//! [`FanOut::fail`]) so that tests can drive fan-out one batch at a time,
//! in any order, crash between a batch and its checkpoint, or fail a batch.
//!
//! - `push`: deliveries and backfills, a batch of inboxes a step, over
//!   `stores` (what a push needs of PostgreSQL and Redis);
//! - here: the workers, the job's plan, its other kinds, its end and its
//!   failures.

mod push;
mod stores;
#[cfg(test)]
mod tests;

use std::time::Duration;

use tokio::sync::watch;

use super::{now_ms, Engine};
use crate::error::{AppError, AppResult};
use crate::store::pg::{Claimed, PgStore};
use crate::store::redis::state::PulledChange;
use crate::store::redis::{RedisStore, WriteMark};
use crate::types::{Edge, Entry, Job, JobKind, PostId, TaskId, TaskState, UserId, Work};
use push::Pusher;

/// A job claimed by this instance, with what it was found to need.
#[derive(Debug)]
pub struct Lease {
    pub job: Job,
    plan: Option<Plan>,
    /// The followers after a checkpoint, read while the batch before it
    /// was pushed: (checkpoint, page).
    ahead: Option<(i64, Vec<UserId>)>,
}

/// A job's work, read once when its first batch runs.
#[derive(Debug)]
enum Plan {
    /// Push `entries` into inboxes; `cut`: they are the newest of a longer
    /// list, and this is their lowest score (the inboxes' floor rises to it).
    Push {
        entries: Vec<Entry>,
        cut: Option<i64>,
        to: Targets,
    },
    /// A follow, unfollow, mute or unmute into Redis (its requester
    /// could not).
    Edge {
        follower: UserId,
        seq: i64,
        edge: Edge,
    },
    /// A deleted post's tombstone into the post cache, then its entry out
    /// of its outbox and the inboxes, a batch of followers a step.
    Retract {
        post: PostId,
        entry: Entry,
    },
    /// The hidden accounts take an account's status.
    Hide,
    /// Many follows of one reader (`seq`) into Redis.
    Follows {
        seq: i64,
        targets: Vec<UserId>,
    },
    /// An import's list (its task's), a batch a step.
    Import {
        task: TaskId,
    },
    /// A deleted account's purge, a batch a step; its newest posts, which
    /// its followers' inboxes may hold.
    Purge {
        task: TaskId,
        newest: Vec<Entry>,
    },
    Nothing,
}

/// A push's work, as a batch reads it: what changes in each inbox, and
/// which inboxes.
struct Push<'a> {
    change: Change<'a>,
    to: &'a Targets,
}

/// What a push does to each inbox it reaches.
#[derive(Clone, Copy)]
enum Change<'a> {
    /// Its entries go in; `cut`: they are the newest of a longer list, and
    /// this is their lowest score.
    Add {
        entries: &'a [Entry],
        cut: Option<i64>,
    },
    /// A deleted post's entry goes out (of the author's outbox too).
    Remove(Entry),
}

#[derive(Debug)]
enum Targets {
    /// The inboxes of every follower of the job's author and its own, in
    /// keyset pages.
    Followers,
    /// These active fans (ascending ids).
    Fans(Vec<UserId>),
}

/// Whether the background work is to stop: told so, or no one is left to
/// tell it (the sender dropped, as when the server's task is cancelled
/// without a shutdown). A closed channel answers `changed()` at once, so a
/// loop that waited on it without this check would spin.
fn stopping(shutdown: &watch::Receiver<bool>) -> bool {
    *shutdown.borrow() || shutdown.has_changed().is_err()
}

/// Where a job stands after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    More,
    Done,
}

/// The fan-out workers: claiming, stepping and failing jobs ([`Engine::fanout`]).
#[derive(Clone, Copy)]
pub struct FanOut<'a>(pub(crate) &'a Engine);

impl<'a> FanOut<'a> {
    /// Runs `fanout_workers` workers and the settings refresher until
    /// `shutdown` turns true or its sender is dropped; each finishes its
    /// current batch first.
    pub async fn run_background(self, shutdown: watch::Receiver<bool>) {
        let mut tasks = Vec::new();
        for worker in 0..self.0.tuning().fanout_workers {
            let engine = self.0.clone();
            let shutdown = shutdown.clone();
            tasks.push(tokio::spawn(async move {
                engine.fanout().worker(worker, shutdown).await
            }));
        }
        let engine = self.0.clone();
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

    async fn worker(self, worker: usize, mut shutdown: watch::Receiver<bool>) {
        const IDLE_POLL: Duration = Duration::from_millis(200);
        loop {
            if stopping(&shutdown) {
                return;
            }
            // Register interest before looking, so a wake-up between the
            // claim and the wait is not lost.
            let woken = self.0.inner.wake.notified();
            // A bulk job only with one of the instance's turns for them (one
            // worker fewer than there are, or the one): the others stay free
            // for deliveries.
            let turn = self.0.inner.bulk.try_acquire().ok();
            match self.claim_for(0, turn.is_some()).await {
                Ok(Some(lease)) => {
                    let turn = turn.filter(|_| lease.job.kind().is_bulk());
                    self.run_job(worker, lease, &shutdown).await;
                    drop(turn);
                }
                Ok(None) => {
                    // Polled often enough to take over a dead instance's
                    // job soon after it goes quiet.
                    tokio::select! {
                        _ = woken => {}
                        _ = tokio::time::sleep(IDLE_POLL) => {}
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

    #[tracing::instrument(skip(self, lease, shutdown), fields(job = lease.job.id.0, kind = %lease.job.kind(), author = %lease.job.author_id))]
    async fn run_job(self, worker: usize, mut lease: Lease, shutdown: &watch::Receiver<bool>) {
        loop {
            match self.step(&mut lease, true).await {
                Ok(Step::Done) => return,
                Ok(Step::More) if stopping(shutdown) => {
                    if let Err(e) = self.0.pg().jobs().release_job(&lease.job).await {
                        // The lease expires and another worker resumes.
                        tracing::warn!(worker, error = %e.chain(), "could not release a fan-out job");
                    }
                    return;
                }
                Ok(Step::More) if lease.job.kind().is_bulk() => {
                    self.others_first(worker, shutdown).await
                }
                Ok(Step::More) => {}
                Err(e) if stopping(shutdown) => {
                    // Failed while the process stops (its connections may
                    // have gone with the server's runtimes): released, not
                    // counted, for another instance to resume from the
                    // checkpoint at once.
                    tracing::warn!(worker, error = %e.chain(), "fan-out batch failed during shutdown");
                    if let Err(e) = self.0.pg().jobs().release_job(&lease.job).await {
                        tracing::warn!(worker, error = %e.chain(), "could not release a fan-out job");
                    }
                    return;
                }
                Err(e) => {
                    tracing::warn!(worker, attempts = lease.job.attempts, error = %e.chain(), "fan-out batch failed");
                    self.fail(lease, &e).await;
                    return;
                }
            }
        }
    }

    /// Between two batches of a bulk job, the jobs of other kinds waiting
    /// run first (an instance with one worker has no other to run them).
    async fn others_first(self, worker: usize, shutdown: &watch::Receiver<bool>) {
        while !stopping(shutdown) {
            match self.claim_for(0, false).await {
                Ok(Some(lease)) => Box::pin(self.run_job(worker, lease, shutdown)).await,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(worker, error = %e.chain(), "could not claim a fan-out job");
                    return;
                }
            }
        }
    }

    fn lease_time(self) -> Duration {
        Duration::from_secs(self.0.tuning().fanout_lease_secs)
    }

    /// A pusher over this engine's stores.
    fn pusher(self) -> Pusher<'a, PgStore, RedisStore> {
        Pusher {
            records: self.0.pg(),
            cache: self.0.redis(),
            settings: self.0.settings(),
            batch: self.0.tuning().fanout_batch_size,
            post_cache_ttl_secs: self.0.tuning().post_cache_ttl_secs,
            lease: self.lease_time(),
        }
    }

    /// Claims the oldest claimable job (`pick` 0; see
    /// [`crate::store::pg::JobTable::claim_job`] for the others). A job of a
    /// kind this binary does not know, or lacking what its kind needs
    /// ([`crate::types::Work::of`]), is parked as dead, with the reason, and the next
    /// one is claimed.
    pub async fn claim(self, pick: i64) -> AppResult<Option<Lease>> {
        self.claim_for(pick, true).await
    }

    /// [`Self::claim`]: every other kind before the bulk ones (a delivery
    /// never waits behind an import), and these only if `bulk`.
    async fn claim_for(self, pick: i64, bulk: bool) -> AppResult<Option<Lease>> {
        loop {
            let lease = self.lease_time();
            let claimed = match self.0.pg().jobs().claim_job(lease, pick, false).await? {
                None if bulk => self.0.pg().jobs().claim_job(lease, pick, true).await?,
                other => other,
            };
            match claimed {
                None => return Ok(None),
                Some(Claimed::Job(job)) => {
                    return Ok(Some(Lease {
                        job,
                        plan: None,
                        ahead: None,
                    }))
                }
                Some(Claimed::Unusable { id, lease, why }) => {
                    let why = format!("{why}: parked as dead");
                    tracing::error!(job = id.0, "{why}");
                    self.0
                        .pg()
                        .jobs()
                        .fail_job(id, lease, &why, Duration::ZERO, true, true)
                        .await?;
                }
            }
        }
    }

    /// Runs one batch of a leased job: its Redis writes, then, if `record`,
    /// its checkpoint (or, after the last batch, its end). A step that does
    /// not record is a worker dying between a batch and its checkpoint.
    pub async fn step(self, lease: &mut Lease, record: bool) -> AppResult<Step> {
        if lease.plan.is_none() {
            lease.plan = Some(self.plan(&lease.job).await?);
        }
        // Every write of this step is on the connection of this mark, or
        // the step fails before it records anything.
        let mark = self.0.redis().write_mark();
        let done = self.batch(lease, record, mark).await?;
        match (done, record) {
            (true, true) => {
                self.finish(&lease.job, mark).await?;
                Ok(Step::Done)
            }
            (true, false) => Ok(Step::Done),
            (false, _) => Ok(Step::More),
        }
    }

    /// One batch of the plan's work; true if it was the last.
    async fn batch(self, lease: &mut Lease, record: bool, mark: WriteMark) -> AppResult<bool> {
        let Lease { job, plan, ahead } = lease;
        Ok(match plan.as_ref() {
            None | Some(Plan::Nothing) => true,
            Some(&Plan::Edge {
                follower,
                seq,
                edge,
            }) => {
                self.edge_step(follower, job.author_id, seq, edge).await?;
                true
            }
            Some(Plan::Hide) => {
                self.0.accounts().hide_step(job.author_id).await?;
                true
            }
            Some(Plan::Follows { seq, targets }) => {
                // Whom the reader mutes is read now, as a follow's job
                // reads whether it is shown.
                let muted = self.0.pg().users().muted_of(job.author_id, targets).await?;
                self.0
                    .relations()
                    .apply_follows(job.author_id, *seq, targets, &muted)
                    .await?;
                true
            }
            Some(&Plan::Import { task }) => {
                self.0.relations().import_step(job, task, record).await?
            }
            Some(Plan::Purge { task, newest }) => {
                let done = self.0.accounts().purge_step(job, *task, newest).await?;
                if !done && record {
                    // A long purge keeps its lease.
                    self.0
                        .pg()
                        .jobs()
                        .checkpoint_job(job, job.checkpoint + 1, self.lease_time())
                        .await?;
                    job.checkpoint += 1;
                }
                done
            }
            Some(&Plan::Retract { post, entry }) => {
                self.pusher()
                    .retract_step(job, ahead, (post, entry), record, mark)
                    .await?
            }
            Some(Plan::Push { entries, cut, to }) => {
                let push = Push {
                    change: Change::Add { entries, cut: *cut },
                    to,
                };
                self.pusher()
                    .push_step(job, ahead, push, record, mark)
                    .await?
            }
        })
    }

    /// A follow, unfollow, mute or unmute into Redis. Whether the home
    /// shows the author is read now: a later change's job applies the
    /// state of its own time after it.
    async fn edge_step(
        self,
        follower: UserId,
        author: UserId,
        seq: i64,
        edge: Edge,
    ) -> AppResult<()> {
        let shown = match edge {
            Edge::Follow | Edge::Unmute => self.0.pg().users().shown(follower, author).await?,
            Edge::Unfollow | Edge::Mute => false,
        };
        self.0
            .relations()
            .apply_edge(follower, author, seq, (edge, shown))
            .await
    }

    /// A job's end: its writes replicated, its row gone, its lag observed,
    /// its author perhaps no longer pulled, and waiters told.
    async fn finish(self, job: &Job, mark: WriteMark) -> AppResult<()> {
        self.0.redis().replicated(mark).await?;
        self.0.pg().jobs().finish_job(job.id, job.lease).await?;
        let lag_ms = now_ms() - job.created_at_ms;
        if job.kind() == JobKind::Deliver {
            crate::metrics::FANOUT_LAG.observe(lag_ms.max(0) as f64 / 1000.0);
        }
        self.settle_pulled(job).await;
        tracing::debug!(lag_ms, "fan-out job done");
        self.0.inner.job_done.notify_waiters();
        Ok(())
    }

    /// A delivery done or a big-V time settled: its author may stop being
    /// pulled (best effort: if Redis misses this, the author is only pulled
    /// longer than it needs).
    async fn settle_pulled(self, job: &Job) {
        let change = match job.work {
            Work::Deliver { post } => PulledChange::Done(post),
            Work::Backfill { epoch } => PulledChange::Demoted(epoch),
            _ => return,
        };
        if let Err(e) = self
            .0
            .redis()
            .state()
            .pulled_change(job.author_id, change)
            .await
        {
            tracing::warn!(job = job.id.0, error = %e.chain(), "could not update the pulled authors");
        }
    }

    /// What a job needs, read when its first batch runs.
    async fn plan(self, job: &Job) -> AppResult<Plan> {
        let author = job.author_id;
        Ok(match &job.work {
            &Work::Deliver { post } => self.pusher().plan_delivery(author, post).await?,
            Work::Backfill { .. } => self.pusher().plan_backfill(author).await?,
            &Work::Edge { edge, reader, seq } => Plan::Edge {
                follower: reader,
                seq,
                edge,
            },
            &Work::Retract { post } => self.pusher().plan_retract(post).await?,
            Work::Hide => Plan::Hide,
            &Work::Purge { task } => Plan::Purge {
                task,
                newest: self.0.accounts().newest_of(author).await?,
            },
            &Work::Import { task } => Plan::Import { task },
            Work::Follows { seq, targets } => Plan::Follows {
                seq: *seq,
                targets: targets.clone(),
            },
        })
    }

    /// Records a failed batch. A store that was unavailable is waited for
    /// without counting an attempt; a Redis call that timed out while Redis
    /// still answers counts (the batch itself was too slow). After
    /// `fanout_max_attempts` counted attempts the job gives up: the inboxes
    /// it has not reached are dropped, to be rebuilt from PostgreSQL, and
    /// the job ends; only if even that fails is it parked as dead.
    pub async fn fail(self, lease: Lease, error: &AppError) {
        let job = &lease.job;
        let counted = match error {
            AppError::Unavailable { .. } => false,
            AppError::TimedOut { .. } => self.0.redis().ping().await.is_ok(),
            _ => true,
        };
        let mut dead = false;
        if counted && job.attempts >= self.0.tuning().fanout_max_attempts {
            match self.give_up(&lease).await {
                Ok(()) => {
                    tracing::warn!(job = job.id.0, kind = %job.kind(), error = %error.chain(),
                        "fan-out job gave up: the inboxes it had not reached are rebuilt on their next read");
                    match self.0.pg().jobs().finish_job(job.id, job.lease).await {
                        Ok(()) => {
                            self.settle_pulled(job).await;
                            self.0.inner.job_done.notify_waiters()
                        }
                        Err(e) => tracing::warn!(error = %e.chain(), "could not end a fan-out job"),
                    }
                    return;
                }
                Err(e) => {
                    tracing::error!(job = job.id.0, error = %e.chain(), "fan-out job could not give up either: parked as dead");
                    dead = true;
                }
            }
        }
        let backoff = if counted {
            Duration::from_secs(1u64 << job.attempts.clamp(0, 8) as u64)
        } else {
            Duration::from_secs(2)
        };
        if let Err(e) = self
            .0
            .pg()
            .jobs()
            .fail_job(job.id, job.lease, &error.chain(), backoff, dead, counted)
            .await
        {
            // The lease expires and another worker resumes from the checkpoint.
            tracing::warn!(error = %e.chain(), "could not record a fan-out job's failure");
        }
    }

    /// Drops the inboxes a job has not reached yet: rebuilt from PostgreSQL
    /// on their next read, they hold what the job would have written.
    async fn give_up(self, lease: &Lease) -> AppResult<()> {
        let job = &lease.job;
        let keys = self.0.redis().keys();
        match (&lease.plan, &job.work) {
            // A big-V's post is pulled by every follower: its push to
            // active fans only saves them a read.
            (
                Some(Plan::Push {
                    to: Targets::Fans(_),
                    ..
                }),
                _,
            )
            | (Some(Plan::Nothing), _) => Ok(()),
            (_, &Work::Edge { reader: f, .. }) => {
                self.0
                    .redis()
                    .delete_many(&[keys.following(f), keys.followees(f), keys.inbox(f)])
                    .await
            }
            // The hidden accounts are rebuilt from the accounts' status.
            (_, Work::Hide) => {
                let copies: Vec<String> = keys.mark_copies().map(|c| keys.hidden(c)).collect();
                self.0.redis().delete_many(&copies).await
            }
            // A purge does not stop halfway: parked as dead, for an
            // operator (its account's posts stay hidden meanwhile).
            (_, Work::Purge { .. }) => Err(AppError::internal(
                "a purge",
                crate::error::Message("an account's purge keeps failing".into()),
            )),
            // An import that keeps failing ends; its task says how far it got.
            (_, &Work::Import { task }) => {
                self.0
                    .pg()
                    .accounts()
                    .task_progress(task, 0, 0, TaskState::Failed)
                    .await
            }
            // The reader's copy and inbox are rebuilt from PostgreSQL.
            (_, Work::Follows { .. }) => {
                let r = job.author_id;
                self.0
                    .redis()
                    .delete_many(&[keys.following(r), keys.followees(r), keys.inbox(r)])
                    .await
            }
            (_, Work::Deliver { .. } | Work::Backfill { .. } | Work::Retract { .. }) => {
                if let &Work::Retract { post } = &job.work {
                    // Read again from PostgreSQL: a tombstone, and an
                    // outbox without the post.
                    let outbox = keys.outbox(job.author_id);
                    self.0
                        .redis()
                        .delete_many(&[keys.post(post), outbox])
                        .await?;
                }
                let mut after = job.checkpoint;
                loop {
                    let page = self
                        .0
                        .pg()
                        .jobs()
                        .inboxes_after(job.author_id, after, self.0.tuning().fanout_batch_size)
                        .await?;
                    let Some(&last) = page.last() else {
                        return Ok(());
                    };
                    let inboxes: Vec<String> = page.iter().map(|f| keys.inbox(*f)).collect();
                    self.0.redis().delete_many(&inboxes).await?;
                    after = last.0;
                }
            }
        }
    }
}
