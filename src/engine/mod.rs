//! The feed engine: publish, fan-out, follow, and the merged scroll read.
//! Plain Rust over the two stores; it knows nothing of HTTP.
//!
//! The home feed of a reader is, by definition, the live posts of the
//! authors it follows, in feed order ([`cursor::feed_order`]). PostgreSQL can
//! always answer it ([`PgStore::feed`]); Redis answers it faster from the
//! reader's inbox merged with the outboxes it must pull. A Redis answer is
//! used only where every source is known to be complete (above its floor,
//! within what was read); anywhere else the page comes from PostgreSQL with
//! the same order and cursor. So the answer never depends on what Redis
//! happens to hold.
//!
//! A reader pulls the outbox of a followed author while the author is big-V,
//! and also while any delivery of that author's posts to inboxes is pending
//! (a publish's fan-out, or the backfill after a demotion): a post is in its
//! author's outbox before its publish returns, so every follower sees it at
//! once, whatever the progress of the fan-out.

pub mod cursor;
pub mod fanout;
pub mod merge;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::domain::{PostBody, Username};
use crate::error::{AppError, AppResult};
use crate::settings::EngineSettings;
use crate::store::pg::models::{Post, SettingsRow, User};
use crate::store::pg::{Deletion, PgStore, Scope};
use crate::store::redis::{Range, RedisStore};
use cursor::{cut, Cursor, Cut, Entry, PageRequest};
use merge::{merge, Horizon};

/// The admin-tunable settings (persisted in PostgreSQL, live on every instance).
pub type FeedSettings = SettingsRow;

/// Bounds of the admin settings.
pub const MAX_CAP: i64 = 100_000;
pub const MAX_ACTIVE_WINDOW_SECS: i64 = 366 * 24 * 3600;

/// Redis reads of one page before the engine answers from PostgreSQL.
const MAX_READ_ROUNDS: usize = 4;

/// A page of a feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Page {
    pub items: Vec<Post>,
    pub next: Option<Cursor>,
}

/// A partial update of the admin settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettingsPatch {
    pub big_v_threshold: Option<i64>,
    pub big_v_demote_threshold: Option<i64>,
    pub active_window_secs: Option<i64>,
    pub inbox_max_len: Option<i64>,
    pub outbox_max_len: Option<i64>,
}

impl SettingsPatch {
    /// Applies the patch and checks the result.
    pub fn apply(&self, current: &FeedSettings) -> Result<FeedSettings, String> {
        let new = FeedSettings {
            big_v_threshold: self.big_v_threshold.unwrap_or(current.big_v_threshold),
            big_v_demote_threshold: self
                .big_v_demote_threshold
                .unwrap_or(current.big_v_demote_threshold),
            active_window_secs: self
                .active_window_secs
                .unwrap_or(current.active_window_secs),
            inbox_max_len: self.inbox_max_len.unwrap_or(current.inbox_max_len),
            outbox_max_len: self.outbox_max_len.unwrap_or(current.outbox_max_len),
        };
        if new.big_v_threshold < 1 {
            return Err("big_v_threshold must be at least 1".into());
        }
        if new.big_v_demote_threshold < 0 {
            return Err("big_v_demote_threshold must be at least 0".into());
        }
        if new.big_v_demote_threshold >= new.big_v_threshold {
            return Err(format!(
                "big_v_demote_threshold ({}) must be below big_v_threshold ({})",
                new.big_v_demote_threshold, new.big_v_threshold
            ));
        }
        if !(1..=MAX_ACTIVE_WINDOW_SECS).contains(&new.active_window_secs) {
            return Err(format!(
                "active_window_secs must be from 1 to {MAX_ACTIVE_WINDOW_SECS}"
            ));
        }
        for (name, value) in [
            ("inbox_max_len", new.inbox_max_len),
            ("outbox_max_len", new.outbox_max_len),
        ] {
            if !(1..=MAX_CAP).contains(&value) {
                return Err(format!("{name} must be from 1 to {MAX_CAP}"));
            }
        }
        Ok(new)
    }
}

/// Which feed ZSET a source is, to rebuild it when missing.
#[derive(Debug, Clone, Copy)]
enum Source {
    Inbox(i64),
    Outbox(i64),
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
        let s = self.settings();
        let changed = self
            .inner
            .pg
            .follow(follower, followee, s.big_v_threshold, now_ms())
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
        let s = self.settings();
        let changed = self
            .inner
            .pg
            .unfollow(follower, followee, s.big_v_demote_threshold, now_ms())
            .await?;
        if changed {
            self.inner.wake.notify_waiters();
        }
        Ok(())
    }

    /// After a failed Redis write, drops the key so that it is rebuilt from
    /// PostgreSQL rather than served stale.
    async fn forget(&self, key: &str, cause: &AppError) {
        tracing::warn!(key, error = %cause.chain(), "Redis write failed; dropping the key");
        if let Err(e) = self.inner.redis.delete(key).await {
            tracing::warn!(key, error = %e.chain(), "could not drop the key either");
        }
    }

    // ----- posts -----

    pub async fn publish(&self, author: i64, body: &PostBody) -> AppResult<Post> {
        self.publish_at(author, body, now_ms()).await
    }

    /// Publishes with a chosen timestamp (tests and seeding use it to make
    /// ties). Returns once the post and its fan-out job are committed and the
    /// post is in the author's outbox; the fan-out itself runs in the workers.
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
            self.forget(&outbox, &e).await;
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
    #[tracing::instrument(skip(self))]
    pub async fn delete_post(&self, id: i64, actor: Option<i64>) -> AppResult<()> {
        match self.inner.pg.delete_post(id, actor, now_ms()).await? {
            Deletion::NotFound => Err(AppError::NotFound(format!("post {id} does not exist"))),
            Deletion::Forbidden => Err(AppError::Forbidden(format!(
                "post {id} belongs to another user"
            ))),
            Deletion::Deleted { author_id } => {
                let outbox = self.inner.redis.keys().outbox(author_id);
                if let Err(e) = self
                    .inner
                    .redis
                    .remove(std::slice::from_ref(&outbox), &[id])
                    .await
                {
                    self.forget(&outbox, &e).await;
                }
                self.inner.wake.notify_waiters();
                Ok(())
            }
        }
    }

    // ----- reads -----

    /// A page of `reader`'s home feed.
    #[tracing::instrument(skip(self))]
    pub async fn home_page(&self, reader: i64, req: PageRequest) -> AppResult<Page> {
        self.page(Scope::Home(reader), req).await
    }

    /// A page of `author`'s own posts.
    #[tracing::instrument(skip(self))]
    pub async fn author_page(&self, author: i64, req: PageRequest) -> AppResult<Page> {
        self.user(author).await?;
        self.page(Scope::Author(author), req).await
    }

    async fn page(&self, scope: Scope, req: PageRequest) -> AppResult<Page> {
        match self.page_from_redis(scope, &req).await {
            Ok(Some(page)) => Ok(page),
            Ok(None) => self.page_from_pg(scope, &req).await,
            Err(e) => Err(e),
        }
    }

    /// The page straight from PostgreSQL.
    pub async fn page_from_pg(&self, scope: Scope, req: &PageRequest) -> AppResult<Page> {
        Stats::bump(&self.inner.stats.pg_pages, 1);
        crate::metrics::FEED_PAGES
            .with_label_values(&["postgres"])
            .inc();
        let window = req.window();
        let rows = self
            .inner
            .pg
            .feed(scope, req.max.unwrap_or(i64::MAX), window as i64)
            .await?;
        let complete = rows.len() < window;
        match cut(rows, |p| Entry::new(p.created_at_ms, p.id), req, complete) {
            Cut::Page { items, next } => Ok(Page { items, next }),
            Cut::NeedMore => Err(AppError::internal(
                "a full PostgreSQL window did not decide the page",
                crate::error::Message(format!("{scope:?} {req:?}")),
            )),
        }
    }

    /// The page from Redis, or `None` where Redis cannot be trusted to hold
    /// it (past a floor, a source being built, Redis failing): the caller
    /// then answers from PostgreSQL. PostgreSQL errors are returned.
    async fn page_from_redis(&self, scope: Scope, req: &PageRequest) -> AppResult<Option<Page>> {
        let keys = self.inner.redis.keys();
        let (sources, big_vs): (Vec<Source>, Vec<i64>) = match scope {
            Scope::Home(reader) => {
                let pulled = self.inner.pg.pulled_followees(reader).await?;
                let mut sources = vec![Source::Inbox(reader)];
                sources.extend(pulled.iter().map(|p| Source::Outbox(p.id)));
                let big_vs = pulled.iter().filter(|p| p.big_v).map(|p| p.id).collect();
                (sources, big_vs)
            }
            Scope::Author(author) => (vec![Source::Outbox(author)], Vec::new()),
        };
        if let Scope::Home(reader) = scope {
            self.note_active(reader, big_vs);
        }
        let names: Vec<String> = sources
            .iter()
            .map(|s| match *s {
                Source::Inbox(u) => keys.inbox(u),
                Source::Outbox(a) => keys.outbox(a),
            })
            .collect();
        let mut fetch = req.window();
        let mut rebuilt = false;
        for _ in 0..MAX_READ_ROUNDS {
            Stats::bump(&self.inner.stats.range_reads, names.len() as u64);
            let ranges = match self.inner.redis.ranges(&names, req.max, fetch).await {
                Ok(r) => r,
                Err(e) => {
                    Stats::bump(&self.inner.stats.redis_read_errors, 1);
                    tracing::warn!(error = %e.chain(), "Redis read failed; answering from PostgreSQL");
                    return Ok(None);
                }
            };
            let missing: Vec<Source> = ranges
                .iter()
                .zip(&sources)
                .filter(|(r, _)| **r == Range::Missing)
                .map(|(_, s)| *s)
                .collect();
            if !missing.is_empty() {
                if rebuilt {
                    return Ok(None);
                }
                rebuilt = true;
                let builds = missing.iter().map(|s| self.rebuild(*s));
                for outcome in futures::future::join_all(builds).await {
                    match outcome {
                        Ok(true) => {}
                        Ok(false) => return Ok(None),
                        Err(e) => {
                            tracing::warn!(error = %e.chain(), "rebuild failed; answering from PostgreSQL");
                            return Ok(None);
                        }
                    }
                }
                continue;
            }
            let mut reads = Vec::with_capacity(ranges.len());
            for range in ranges {
                match range {
                    Range::Read(read) => reads.push(read),
                    Range::Building | Range::Missing => return Ok(None),
                }
            }
            let merged = merge(&reads);
            match self
                .cut_live(
                    scope,
                    req,
                    &merged.entries,
                    merged.horizon == Horizon::Complete,
                )
                .await?
            {
                Some(page) => {
                    crate::metrics::FEED_PAGES
                        .with_label_values(&["redis"])
                        .inc();
                    return Ok(Some(page));
                }
                None => match merged.horizon {
                    Horizon::Truncated(_) => fetch *= 4,
                    Horizon::Floor(_) | Horizon::Complete => return Ok(None),
                },
            }
        }
        Ok(None)
    }

    /// Hydrates the merged entries (dropping posts deleted or no longer
    /// followed) and cuts the page from the live ones. Hydrates a window at a
    /// time; `None` if the entries run out before the page is decided.
    async fn cut_live(
        &self,
        scope: Scope,
        req: &PageRequest,
        entries: &[Entry],
        complete: bool,
    ) -> AppResult<Option<Page>> {
        let mut take = req.window().min(entries.len());
        loop {
            let ids: Vec<i64> = entries[..take].iter().map(|e| e.id).collect();
            Stats::bump(&self.inner.stats.hydrations, 1);
            let mut posts: HashMap<i64, Post> = self
                .inner
                .pg
                .hydrate(&ids, scope)
                .await?
                .into_iter()
                .map(|p| (p.id, p))
                .collect();
            let live: Vec<(Entry, Post)> = entries[..take]
                .iter()
                .filter_map(|e| posts.remove(&e.id).map(|p| (*e, p)))
                .collect();
            let all = take == entries.len();
            match cut(live, |(e, _)| *e, req, complete && all) {
                Cut::Page { items, next } => {
                    return Ok(Some(Page {
                        items: items.into_iter().map(|(_, p)| p).collect(),
                        next,
                    }))
                }
                Cut::NeedMore if all => return Ok(None),
                Cut::NeedMore => take = (take * 2).min(entries.len()),
            }
        }
    }

    /// Rebuilds a missing inbox or outbox from PostgreSQL. The key is
    /// created (in the building state) before the query, so that a push
    /// racing with the rebuild lands in it rather than being skipped.
    /// Returns false if someone else is building it.
    async fn rebuild(&self, source: Source) -> AppResult<bool> {
        let s = self.settings();
        let keys = self.inner.redis.keys();
        let (key, scope, cap) = match source {
            Source::Inbox(u) => (keys.inbox(u), Scope::Home(u), s.inbox_max_len),
            Source::Outbox(a) => (keys.outbox(a), Scope::Author(a), s.outbox_max_len),
        };
        if !self.inner.redis.begin_build(&key).await? {
            return Ok(false);
        }
        let entries = self.inner.pg.entries(scope, i64::MIN, cap).await?;
        let floor = if entries.len() as i64 >= cap {
            entries.last().map(|e| e.score)
        } else {
            None
        };
        self.inner.redis.fill(&key, cap, floor, &entries).await?;
        Stats::bump(&self.inner.stats.rebuilds, 1);
        crate::metrics::REBUILDS.inc();
        tracing::debug!(key, entries = entries.len(), "rebuilt from PostgreSQL");
        Ok(true)
    }

    /// Records the reader as an active fan of the big-Vs it follows, at
    /// most once per interval, off the request's path.
    fn note_active(&self, reader: i64, big_vs: Vec<i64>) {
        if big_vs.is_empty() {
            return;
        }
        let interval = self.inner.tuning.active_mark_interval_secs;
        let now = now_ms();
        {
            let mut marked = match self.inner.marked.lock() {
                Ok(m) => m,
                Err(poisoned) => poisoned.into_inner(),
            };
            if marked
                .get(&reader)
                .is_some_and(|&at| now - at < interval as i64 * 1000)
            {
                return;
            }
            if marked.len() >= MARKED_READERS {
                marked.clear();
            }
            marked.insert(reader, now);
        }
        let engine = self.clone();
        tokio::spawn(async move {
            if let Err(e) = engine
                .inner
                .redis
                .record_active_fan(reader, &big_vs, now, interval)
                .await
            {
                tracing::debug!(error = %e.chain(), "could not record an active fan");
                if let Ok(mut marked) = engine.inner.marked.lock() {
                    marked.remove(&reader);
                }
            }
        });
    }

    // ----- admin -----

    #[tracing::instrument(skip(self))]
    pub async fn update_settings(&self, patch: &SettingsPatch) -> AppResult<FeedSettings> {
        let current = self.inner.pg.settings().await?;
        let new = patch.apply(&current).map_err(AppError::Unprocessable)?;
        let (promoted, demoted) = self.inner.pg.update_settings(&new, now_ms()).await?;
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

    pub async fn ready(&self) -> (AppResult<()>, AppResult<()>) {
        futures::join!(self.inner.pg.ping(), self.inner.redis.ping())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> FeedSettings {
        FeedSettings {
            big_v_threshold: 10_000,
            big_v_demote_threshold: 8_000,
            active_window_secs: 604_800,
            inbox_max_len: 1_000,
            outbox_max_len: 1_000,
        }
    }

    #[test]
    fn settings_patches_are_validated_as_a_whole() {
        let d = defaults();
        let p = SettingsPatch {
            big_v_threshold: Some(5),
            big_v_demote_threshold: Some(3),
            ..Default::default()
        };
        assert_eq!(p.apply(&d).unwrap().big_v_threshold, 5);
        let p = SettingsPatch {
            big_v_threshold: Some(5),
            ..Default::default()
        };
        assert!(p.apply(&d).unwrap_err().contains("big_v_demote_threshold"));
        let p = SettingsPatch {
            inbox_max_len: Some(0),
            ..Default::default()
        };
        assert!(p.apply(&d).is_err());
        let p = SettingsPatch {
            active_window_secs: Some(-1),
            ..Default::default()
        };
        assert!(p.apply(&d).is_err());
        assert_eq!(SettingsPatch::default().apply(&d).unwrap(), d);
    }
}
