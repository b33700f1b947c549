//! The feed engine: publish, fan-out, follow, and the merged scroll read.
//! Plain Rust over the two stores; it knows nothing of HTTP.
//!
//! The home feed of a reader is, by definition, every post (deleted ones
//! hidden but counted) of the authors it follows, in feed order
//! ([`crate::types::feed_order`]). PostgreSQL can always answer it
//! ([`crate::store::pg::PostRecords::feed`]); Redis answers it faster from
//! the reader's inbox merged with the outboxes it must pull. A Redis answer
//! is used only where every source is known to be complete (above its
//! floor, within what was read); anywhere else the page comes from
//! PostgreSQL with the same order and cursor. So the answer never depends
//! on what Redis happens to hold.
//!
//! A reader pulls the outbox of a followed author while the author is big-V,
//! and also while any delivery of that author's posts to inboxes is pending
//! (a publish's fan-out, the backfill after a demotion, or this reader's
//! follow): a post is in its author's outbox before its publish returns, so
//! every follower sees it at once, whatever the progress of the fan-out.
//!
//! - `posts`: publish, read and delete a post;
//! - `read`: the page read path;
//! - [`fanout`]: the jobs that deliver posts into inboxes;
//! - `relations`: follows, mutes and blocks;
//! - `accounts`: suspended and deleted accounts;
//! - `profiles`, [`markers`], [`notifications`], [`filters`]: what
//!   clients show of people, where users stopped reading, what they are
//!   told of, what they filter out;
//! - `maintenance`: the heartbeat and its named chores;
//! - [`stream`]: live streams of homes, and the hints that wake them;
//! - [`cut`], [`merge`]: pages out of feed streams;
//! - [`policy`]: big-V rule, audiences, valid settings;
//! - `stores`, `write`: what the parts share of the stores, and the
//!   write-through policy.
//!
//! `read`, `fanout` and `relations` run over traits of what they need of
//! the stores (their `stores` modules), so each is tested over a world in
//! memory.

mod accounts;
mod answering;
mod between;
mod bodies;
pub mod cut;
pub mod fanout;
pub mod filters;
pub mod lists;
mod maintenance;
pub mod markers;
mod members;
pub mod merge;
pub mod notifications;
pub mod policy;
mod posts;
mod profiles;
mod read;
mod relations;
mod stores;
pub mod stream;
#[cfg(test)]
mod testing;
mod write;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

use crate::domain::Username;
use crate::error::{AppError, AppResult};
use crate::metrics;
use crate::settings::EngineSettings;
use crate::store::pg::PgStore;
use crate::store::redis::hints::Signal;
use crate::store::redis::state::PulledChange;
use crate::store::redis::RedisStore;
use crate::types::AccountStatus;
use crate::types::{Cursor, JobId, Prev, UserId};
use crate::types::{Post, PostId, User};

pub use answering::Publishing;
pub use between::{Bounds, Feed};
pub use maintenance::JOBS_VACUUM_DEAD_ROWS;
pub use policy::{FeedSettings, SettingsPatch, MAX_ACTIVE_WINDOW_SECS, MAX_CAP};
pub use profiles::MAX_PROFILES;
pub use relations::{Followed, Relation, UserPage, MAX_FOLLOW_MANY, MAX_IMPORT};

/// A page of a feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Newest first.
    pub items: Vec<Post>,
    /// Where the entries older than the last item start (send back as
    /// `max` and `offset`); null when nothing older exists.
    pub next: Option<Cursor>,
    /// Where the entries newer than the first item start (send back as
    /// `min` and `offset` to refresh); on a page with no item, the
    /// position it was read from (the bottom of the feed for a first page).
    pub prev: Prev,
    /// On a refresh page, the position above each item (its first `prev`):
    /// what a stream gives as each event's id.
    pub marks: Vec<Prev>,
}

/// What a publish answered: the post, and whether it is the answer to an
/// earlier publish with the same key (a retry).
#[derive(Debug)]
pub struct Publication {
    pub post: Post,
    pub replayed: bool,
    /// This instance's streams hold the post back while this lives (a new
    /// post only): drop it once the answer is written, so that the answer
    /// does not wait for the cores behind the post's own events.
    pub held: Option<Publishing>,
}

/// Counters of this engine's work (tests assert read costs with them).
#[derive(Debug, Default)]
pub struct Stats {
    /// Range reads of feed lists (one per source per round).
    pub range_reads: AtomicU64,
    /// Hydration queries.
    pub hydrations: AtomicU64,
    /// Pages answered from PostgreSQL.
    pub pg_pages: AtomicU64,
    /// Inboxes and outboxes rebuilt from PostgreSQL.
    pub rebuilds: AtomicU64,
    /// Redis failures on the read path (answered from PostgreSQL).
    pub redis_read_errors: AtomicU64,
    /// Entries read out of feed lists by pages.
    pub entries_read: AtomicU64,
    /// Rows read from PostgreSQL by pages (feed rows and hydrated ones).
    pub rows_read: AtomicU64,
    /// Writes (publish, follow, unfollow, delete) committed whose Redis
    /// update was left to their job: until it runs, pages may not show them.
    pub deferred_writes: AtomicU64,
    /// Posts read for this instance's live streams (once each, whatever
    /// number of streams they went to).
    pub stream_news: AtomicU64,
    /// Posts live streams sent as read for them all, without a page read.
    pub stream_posts_heard: AtomicU64,
}

impl Stats {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }
}

#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    pg: PgStore,
    redis: RedisStore,
    tuning: EngineSettings,
    live: RwLock<FeedSettings>,
    /// Wakes fan-out workers when a job is queued.
    wake: Notify,
    /// Signalled whenever a job finishes.
    job_done: Notify,
    stats: Stats,
    /// When this instance last recorded each reader as an active fan, so
    /// that most reads skip the Redis round trip (cleared when it grows).
    marked: Mutex<HashMap<UserId, i64>>,
    /// Posts' bodies, authors and times (never change; bounded by posts
    /// and bytes, oldest out first).
    bodies: bodies::SharedBodies,
    /// This instance's publishes not answered yet (its streams wait for them).
    answering: Arc<answering::Answering>,
    /// Fan-out jobs not dead, as last counted (see `maintain_forever`).
    backlog: std::sync::atomic::AtomicI64,
    /// Which accounts exist, as this instance last saw.
    members: members::Members,
    /// Turns of this instance's workers for bulk jobs: one fewer than the
    /// workers (or the one), so that deliveries always find a worker.
    bulk: tokio::sync::Semaphore,
}

/// Account `id` as the records hold it, if it exists: an account being
/// deleted does not.
fn existing(id: UserId, user: Option<User>) -> AppResult<User> {
    user.filter(|u| u.status != AccountStatus::Deleted)
        .ok_or_else(|| AppError::NotFound(format!("user {id} does not exist")))
}

/// Account `id`, if it may act (post, follow, mute, block): 404 if there
/// is none (or it is being deleted), 403 while it is suspended.
fn active(id: UserId, user: Option<User>) -> AppResult<User> {
    let user = existing(id, user)?;
    if user.status == AccountStatus::Suspended {
        return Err(AppError::Forbidden(format!("user {id} is suspended")));
    }
    Ok(user)
}

/// Readers remembered in `Inner::marked` before it is cleared.
const MARKED_READERS: usize = 100_000;

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Engine {
    pub async fn new(pg: PgStore, redis: RedisStore, tuning: EngineSettings) -> AppResult<Self> {
        let live = pg.users().settings().await?;
        let bulk_turns = tuning.fanout_workers.saturating_sub(1).max(1);
        Ok(Engine {
            inner: Arc::new(Inner {
                pg,
                redis,
                live: RwLock::new(live),
                wake: Notify::new(),
                job_done: Notify::new(),
                stats: Stats::default(),
                marked: Mutex::new(HashMap::new()),
                bodies: bodies::SharedBodies::new(tuning.body_cache_posts, tuning.body_cache_bytes),
                answering: Arc::default(),
                tuning,
                backlog: Default::default(),
                members: Default::default(),
                bulk: tokio::sync::Semaphore::new(bulk_turns),
            }),
        })
    }

    /// The `FanOut` service.
    pub fn fanout(&self) -> fanout::FanOut<'_> {
        fanout::FanOut(self)
    }

    /// The `Maintenance` service.
    pub fn maintenance(&self) -> maintenance::Maintenance<'_> {
        maintenance::Maintenance(self)
    }

    /// The `Relations` service.
    pub fn relations(&self) -> relations::Relations<'_> {
        relations::Relations(self)
    }

    /// The `Profiles` service.
    pub fn profiles(&self) -> profiles::Profiles<'_> {
        profiles::Profiles(self)
    }

    /// The `Filters` service.
    pub fn filters(&self) -> filters::Filters<'_> {
        filters::Filters(self)
    }

    /// The `Lists` service.
    pub fn lists(&self) -> lists::Lists<'_> {
        lists::Lists(self)
    }

    /// The `Markers` service.
    pub fn markers(&self) -> markers::Markers<'_> {
        markers::Markers(self)
    }

    /// The `Notifications` service.
    pub fn notifications(&self) -> notifications::Notifications<'_> {
        notifications::Notifications(self)
    }

    /// The `AccountChanges` service.
    pub fn accounts(&self) -> accounts::AccountChanges<'_> {
        accounts::AccountChanges(self)
    }

    /// The `Posts` service.
    pub fn posts(&self) -> posts::Posts<'_> {
        posts::Posts(self)
    }

    /// The `Reads` service.
    pub fn reads(&self) -> read::Reads<'_> {
        read::Reads(self)
    }

    pub fn pg(&self) -> &PgStore {
        &self.inner.pg
    }

    pub fn redis(&self) -> &RedisStore {
        &self.inner.redis
    }

    pub fn stats(&self) -> &Stats {
        &self.inner.stats
    }

    pub fn tuning(&self) -> &EngineSettings {
        &self.inner.tuning
    }

    /// The admin settings as this instance last loaded them.
    pub fn settings(&self) -> FeedSettings {
        match self.inner.live.read() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The admin settings as PostgreSQL holds them now (another instance
    /// may have changed them since this one loaded them).
    pub async fn stored_settings(&self) -> AppResult<FeedSettings> {
        self.inner.pg.users().settings().await
    }

    fn set_live(&self, new: FeedSettings) {
        match self.inner.live.write() {
            Ok(mut s) => *s = new,
            Err(poisoned) => *poisoned.into_inner() = new,
        }
    }

    /// Reloads the admin settings from PostgreSQL (every instance does this
    /// periodically, so a change made through any instance is live on all).
    pub async fn refresh_settings(&self) -> AppResult<()> {
        let fresh = self.inner.pg.users().settings().await?;
        self.set_live(fresh);
        Ok(())
    }

    // ----- users -----

    pub async fn create_user(&self, username: &Username) -> AppResult<User> {
        self.inner.pg.users().create_user(username.as_str()).await
    }

    /// A user (an account being deleted is not found).
    pub async fn user(&self, id: UserId) -> AppResult<User> {
        existing(id, self.inner.pg.users().user(id).await?)
    }

    // ----- shared by the parts -----

    /// Tells every instance something of `about` (pub/sub; see
    /// [`stream`]): best effort, a hint is only a hint.
    pub(crate) async fn hint(&self, signal: Signal) {
        stores::Hints::hint(&self.inner.redis, signal).await
    }

    /// The write-through of a change PostgreSQL has recorded, with the job
    /// that would redo it ([`write::write_through`]).
    pub(crate) async fn write_through<F, Fut>(
        &self,
        job: Option<JobId>,
        queued: &str,
        apply: F,
    ) -> AppResult<()>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = AppResult<()>>,
    {
        let (pg, redis) = (&self.inner.pg, &self.inner.redis);
        let deferred = || self.deferred_to_job();
        write::write_through(pg, redis, job, queued, apply, deferred).await
    }

    /// Counts a write whose Redis update was left to its job.
    fn deferred(&self) {
        Stats::bump(&self.inner.stats.deferred_writes, 1);
        metrics::DEFERRED_WRITES.inc();
    }

    /// Counts a write whose Redis update was left to its job, and wakes
    /// the workers for it.
    fn deferred_to_job(&self) {
        self.deferred();
        self.inner.wake.notify_waiters();
    }

    /// Notes `post`'s publish as under way here until the guard drops.
    fn publishing(&self, post: PostId) -> Publishing {
        self.inner.answering.publishing(post)
    }

    /// Returns once `post`'s publish here has answered, if it is one of
    /// this instance's, or after [`answering::MOST_HELD`] from `since`.
    pub(crate) async fn answered(&self, post: PostId, since: tokio::time::Instant) {
        let deadline = since + answering::MOST_HELD;
        self.inner.answering.answered(post, deadline).await
    }

    /// Keeps posts' bodies in this instance's cache.
    pub(crate) fn remember(&self, posts: &[Post]) {
        self.inner.bodies.remember(posts);
    }

    // ----- admin -----

    /// Applies a settings patch under the settings' row lock (concurrent
    /// patches each apply to the result of the one before), and brings every
    /// author's big-V state in line with the new thresholds.
    #[tracing::instrument(skip(self))]
    pub async fn update_settings(&self, patch: &SettingsPatch) -> AppResult<FeedSettings> {
        let (new, promoted, demoted) = self
            .inner
            .pg
            .users()
            .update_settings(
                |current| patch.apply(current).map_err(AppError::Unprocessable),
                now_ms(),
            )
            .await?;
        tracing::info!(promoted = promoted.len(), demoted, "settings changed");
        for (author, epoch) in promoted {
            // Early: the deliveries of its pulled posts do it too.
            if let Err(e) = self
                .inner
                .redis
                .state()
                .pulled_change(UserId(author), PulledChange::Promote(epoch))
                .await
            {
                tracing::warn!(error = %e.chain(), "could not record a promotion in Redis yet");
            }
        }
        self.set_live(new.clone());
        self.inner.wake.notify_waiters();
        Ok(new)
    }

    /// Waits until no fan-out job is pending (tests, and operators draining
    /// an instance). Fails after `timeout`.
    pub async fn wait_for_fanout(&self, timeout: Duration) -> AppResult<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let done = self.inner.job_done.notified();
            if self.inner.pg.jobs().pending_jobs().await? == 0 {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(AppError::Unavailable {
                    what: "fan-out",
                    source: "fan-out jobs still pending".into(),
                });
            }
            // Jobs of other instances finish without notifying this one.
            let _ = tokio::time::timeout(Duration::from_millis(100), done).await;
        }
    }

    pub async fn ready(&self) -> (AppResult<()>, AppResult<()>) {
        futures::join!(self.inner.pg.ping(), self.inner.redis.ping())
    }
}
