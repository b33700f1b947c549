//! The feed engine: publish, fan-out, follow, and the merged scroll read.
//! Plain Rust over the two stores; it knows nothing of HTTP.
//!
//! The home feed of a reader is, by definition, every post (deleted ones
//! hidden but counted) of the authors it follows, in feed order
//! ([`crate::types::feed_order`]). PostgreSQL can always answer it
//! ([`PgStore::feed`]); Redis answers it faster from the reader's inbox
//! merged with the outboxes it must pull. A Redis answer is used only where
//! every source is known to be complete (above its floor, within what was
//! read); anywhere else the page comes from PostgreSQL with the same order
//! and cursor. So the answer never depends on what Redis happens to hold.
//!
//! A reader pulls the outbox of a followed author while the author is big-V,
//! and also while any delivery of that author's posts to inboxes is pending
//! (a publish's fan-out, the backfill after a demotion, or this reader's
//! follow): a post is in its author's outbox before its publish returns, so
//! every follower sees it at once, whatever the progress of the fan-out.
//!
//! - [`cut`], [`merge`]: pages out of feed streams;
//! - [`policy`]: big-V rule, audiences, valid settings;
//! - [`fanout`]: the jobs that deliver posts into inboxes;
//! - `read`: the page read path.

pub mod cut;
pub mod fanout;
pub mod merge;
pub mod policy;
mod read;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::Notify;

use crate::domain::{PostBody, Username};
use crate::error::{AppError, AppResult};
use crate::settings::EngineSettings;
use crate::store::pg::models::{Post, User};
use crate::store::pg::{Deletion, PgStore};
use crate::store::redis::RedisStore;
use crate::types::{Cursor, Entry};

pub use policy::{FeedSettings, SettingsPatch, MAX_ACTIVE_WINDOW_SECS, MAX_CAP};

/// A page of a feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Page {
    /// Newest first.
    pub items: Vec<Post>,
    /// Null when nothing older exists.
    pub next: Option<Cursor>,
}

/// Counters of this engine's work (tests assert read costs with them).
#[derive(Debug, Default)]
pub struct Stats {
    /// Range reads of feed ZSETs (one per source per round).
    pub range_reads: AtomicU64,
    /// Hydration queries.
    pub hydrations: AtomicU64,
    /// Pages answered from PostgreSQL.
    pub pg_pages: AtomicU64,
    /// Inboxes and outboxes rebuilt from PostgreSQL.
    pub rebuilds: AtomicU64,
    /// Redis failures on the read path (answered from PostgreSQL).
    pub redis_read_errors: AtomicU64,
    /// Entries read out of feed ZSETs by pages.
    pub entries_read: AtomicU64,
    /// Rows read from PostgreSQL by pages (feed rows and hydrated ones).
    pub rows_read: AtomicU64,
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
    marked: Mutex<HashMap<i64, i64>>,
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
        let live = pg.settings().await?;
        Ok(Engine {
            inner: Arc::new(Inner {
                pg,
                redis,
                tuning,
                live: RwLock::new(live),
                wake: Notify::new(),
                job_done: Notify::new(),
                stats: Stats::default(),
                marked: Mutex::new(HashMap::new()),
            }),
        })
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

    fn set_live(&self, new: FeedSettings) {
        match self.inner.live.write() {
            Ok(mut s) => *s = new,
            Err(poisoned) => *poisoned.into_inner() = new,
        }
    }

    /// Reloads the admin settings from PostgreSQL (every instance does this
    /// periodically, so a change made through any instance is live on all).
    pub async fn refresh_settings(&self) -> AppResult<()> {
        let fresh = self.inner.pg.settings().await?;
        self.set_live(fresh);
        Ok(())
    }

    // ----- users -----

    pub async fn create_user(&self, username: &Username) -> AppResult<User> {
        self.inner.pg.create_user(username.as_str()).await
    }

    pub async fn user(&self, id: i64) -> AppResult<User> {
        self.inner
            .pg
            .user(id)
            .await?
            .ok_or_else(|| AppError::NotFound(format!("user {id} does not exist")))
    }

    /// Follows (idempotent). The followee's recent posts reach the
    /// follower's inbox through a `follow` job; until it is done the reader
    /// pulls the followee's outbox, so they show at once.
    #[tracing::instrument(skip(self))]
    pub async fn follow(&self, follower: i64, followee: i64) -> AppResult<()> {
        if follower == followee {
            return Err(AppError::Unprocessable(
                "a user cannot follow itself".into(),
            ));
        }
        self.user(follower).await?;
        self.user(followee).await?;
        let changed = self
            .inner
            .pg
            .follow(follower, followee, now_ms(), policy::big_v_change)
            .await?;
        if changed {
            self.inner.wake.notify_waiters();
        }
        Ok(())
    }

    /// Unfollows (idempotent). Reads drop the author's posts at once; an
    /// `unfollow` job frees them from the inbox.
    #[tracing::instrument(skip(self))]
    pub async fn unfollow(&self, follower: i64, followee: i64) -> AppResult<()> {
        let changed = self
            .inner
            .pg
            .unfollow(follower, followee, now_ms(), policy::big_v_change)
            .await?;
        if changed {
            self.inner.wake.notify_waiters();
        }
        Ok(())
    }

    /// After a failed Redis write, drops the key so that it is rebuilt from
    /// PostgreSQL rather than served stale. False if that failed too.
    async fn forget(&self, key: &str, cause: &AppError) -> bool {
        tracing::warn!(key, error = %cause.chain(), "Redis write failed; dropping the key");
        match self.inner.redis.delete(key).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(key, error = %e.chain(), "could not drop the key either");
                false
            }
        }
    }

    // ----- posts -----

    pub async fn publish(&self, author: i64, body: &PostBody) -> AppResult<Post> {
        self.publish_at(author, body, now_ms()).await
    }

    /// Publishes with a chosen timestamp (tests and seeding use it to make
    /// ties, or to stand for an instance whose clock lags). Returns once the
    /// post and its `deliver` job are committed and the post is in the
    /// author's outbox; the fan-out itself runs in the workers.
    #[tracing::instrument(skip(self, body))]
    pub async fn publish_at(
        &self,
        author: i64,
        body: &PostBody,
        created_at_ms: i64,
    ) -> AppResult<Post> {
        let post = self
            .inner
            .pg
            .publish(author, body.as_str(), created_at_ms, now_ms())
            .await?
            .ok_or_else(|| AppError::NotFound(format!("user {author} does not exist")))?;
        let outbox = self.inner.redis.keys().outbox(author);
        let entry = [Entry::new(post.created_at_ms, post.id)];
        let cap = self.settings().outbox_max_len;
        if let Err(e) = self
            .inner
            .redis
            .push(&[(outbox.clone(), &entry[..])], cap)
            .await
        {
            if !self.forget(&outbox, &e).await {
                // The outbox may be there without the post: readers must
                // not trust it until the delivery has written the post.
                if let Err(e) = self.inner.pg.mark_outbox_unsure(post.id).await {
                    tracing::error!(post = post.id, error = %e.chain(),
                        "could not mark an outbox unsure: its readers may miss the post until it is delivered");
                }
            }
        }
        self.inner.wake.notify_waiters();
        Ok(post)
    }

    pub async fn post(&self, id: i64) -> AppResult<Post> {
        self.inner
            .pg
            .post(id)
            .await?
            .ok_or_else(|| AppError::NotFound(format!("post {id} does not exist")))
    }

    /// Deletes a post; `actor` is the user asking (`None` for an admin).
    /// Reads hide it from the moment this returns; its entries keep their
    /// place in inboxes and outboxes, so scrolls in progress stay exact.
    #[tracing::instrument(skip(self))]
    pub async fn delete_post(&self, id: i64, actor: Option<i64>) -> AppResult<()> {
        match self.inner.pg.delete_post(id, actor).await? {
            Deletion::NotFound => Err(AppError::NotFound(format!("post {id} does not exist"))),
            Deletion::Forbidden => Err(AppError::Forbidden(format!(
                "post {id} belongs to another user"
            ))),
            Deletion::Deleted { .. } => Ok(()),
        }
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
            .update_settings(
                |current| patch.apply(current).map_err(AppError::Unprocessable),
                now_ms(),
            )
            .await?;
        tracing::info!(promoted, demoted, "settings changed");
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
            if self.inner.pg.pending_jobs().await? == 0 {
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

    /// Keeps the fan-out job gauges of `/metrics` fresh, so that a scrape
    /// makes no query (runs until aborted).
    pub async fn refresh_gauges_forever(&self, every: Duration) {
        loop {
            match self.inner.pg.job_counts().await {
                Ok((pending, running, dead)) => {
                    let jobs = &crate::metrics::FANOUT_JOBS;
                    jobs.with_label_values(&["pending"]).set(pending);
                    jobs.with_label_values(&["running"]).set(running);
                    jobs.with_label_values(&["dead"]).set(dead);
                }
                Err(e) => tracing::debug!(error = %e.chain(), "could not count fan-out jobs"),
            }
            tokio::time::sleep(every).await;
        }
    }

    pub async fn ready(&self) -> (AppResult<()>, AppResult<()>) {
        futures::join!(self.inner.pg.ping(), self.inner.redis.ping())
    }
}
