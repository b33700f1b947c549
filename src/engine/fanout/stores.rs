//! What a push (a delivery's, a backfill's, a retraction's) needs of the
//! stores, and nothing more: the records of the post, its audience and the
//! job's progress; the cache's outbox, inboxes, pulled authors and hints.
//! Pushes run (and are tested) over any store that answers them.

use std::future::Future;
use std::time::Duration;

use crate::engine::stores::{Accounts, FeedEntries, Hints, Pulled, Replicas};
use crate::error::AppResult;
use crate::store::pg::PgStore;
use crate::store::redis::RedisStore;
use crate::types::{CachedPost, Delivery, Entry, Job, PostId, UserId};

/// The records, as pushes read and advance them.
pub trait PushRecords: Accounts + FeedEntries {
    /// What delivering post `id` needs (`None`: no such post).
    fn delivery(&self, id: PostId) -> impl Future<Output = AppResult<Option<Delivery>>> + Send;

    /// The next `limit` inboxes a post of `author` goes to (its followers
    /// and itself), by ascending id, after `after`.
    fn inboxes_after(
        &self,
        author: UserId,
        after: i64,
        limit: i64,
    ) -> impl Future<Output = AppResult<Vec<UserId>>> + Send;

    /// Records `job`'s progress up to `checkpoint`, its lease extended by
    /// `lease` (refused if the lease is no longer the job's).
    fn checkpoint_job(
        &self,
        job: &Job,
        checkpoint: i64,
        lease: Duration,
    ) -> impl Future<Output = AppResult<()>> + Send;
}

/// The cache, as pushes write it.
pub trait PushCache: Hints + Pulled + Replicas {
    /// Writes a post's cache entry and puts it in its author's outbox (at
    /// most `outbox_cap`); true if the outbox did not hold it.
    fn publish(
        &self,
        post: &CachedPost,
        id: PostId,
        outbox_cap: i64,
        ttl_secs: u64,
    ) -> impl Future<Output = AppResult<bool>> + Send;

    /// Marks post `id` deleted in the post cache.
    fn tombstone(&self, id: PostId, ttl_secs: u64) -> impl Future<Output = AppResult<()>> + Send;

    /// Takes back what a publish wrote: `author`'s outbox and `post`'s
    /// cache entry go.
    fn take_back(&self, author: UserId, post: PostId)
        -> impl Future<Output = AppResult<()>> + Send;

    /// `author`'s active fans seen since `since_ms`, by ascending id.
    fn active_fans(
        &self,
        author: UserId,
        since_ms: i64,
    ) -> impl Future<Output = AppResult<Vec<UserId>>> + Send;

    /// Pushes `entries` into the inboxes of `readers` that exist (each at
    /// most `cap`; `cut`: nothing at or below it is claimed). Entries added.
    fn push(
        &self,
        readers: &[UserId],
        entries: &[Entry],
        cap: i64,
        cut: Option<i64>,
    ) -> impl Future<Output = AppResult<i64>> + Send;

    /// Takes `entry` out of `author`'s outbox and of the inboxes of
    /// `readers` that hold it.
    fn withdraw(
        &self,
        author: UserId,
        readers: &[UserId],
        entry: Entry,
    ) -> impl Future<Output = AppResult<()>> + Send;
}

impl PushRecords for PgStore {
    async fn delivery(&self, id: PostId) -> AppResult<Option<Delivery>> {
        self.posts().delivery(id).await
    }

    async fn inboxes_after(
        &self,
        author: UserId,
        after: i64,
        limit: i64,
    ) -> AppResult<Vec<UserId>> {
        self.jobs().inboxes_after(author, after, limit).await
    }

    async fn checkpoint_job(&self, job: &Job, checkpoint: i64, lease: Duration) -> AppResult<()> {
        self.jobs().checkpoint_job(job, checkpoint, lease).await
    }
}

impl PushCache for RedisStore {
    async fn publish(
        &self,
        post: &CachedPost,
        id: PostId,
        outbox_cap: i64,
        ttl_secs: u64,
    ) -> AppResult<bool> {
        self.posts()
            .publish(post, id, outbox_cap, ttl_secs, None)
            .await
    }

    async fn tombstone(&self, id: PostId, ttl_secs: u64) -> AppResult<()> {
        self.posts().tombstone(id, ttl_secs).await
    }

    async fn take_back(&self, author: UserId, post: PostId) -> AppResult<()> {
        let keys = self.keys();
        self.delete_many(&[keys.outbox(author), keys.post(post)])
            .await
    }

    async fn active_fans(&self, author: UserId, since_ms: i64) -> AppResult<Vec<UserId>> {
        self.fans().active_fans(author, since_ms).await
    }

    async fn push(
        &self,
        readers: &[UserId],
        entries: &[Entry],
        cap: i64,
        cut: Option<i64>,
    ) -> AppResult<i64> {
        let inboxes: Vec<String> = readers.iter().map(|r| self.keys().inbox(*r)).collect();
        self.feeds().push_same(&inboxes, entries, cap, cut).await
    }

    async fn withdraw(&self, author: UserId, readers: &[UserId], entry: Entry) -> AppResult<()> {
        let keys = self.keys();
        let lists: Vec<String> = std::iter::once(keys.outbox(author))
            .chain(readers.iter().map(|r| keys.inbox(*r)))
            .collect();
        self.feeds().remove(&lists, &[entry]).await
    }
}
