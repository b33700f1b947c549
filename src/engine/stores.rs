//! The operations of the stores that more than one of the engine's parts
//! needs (each part declares the rest of what it needs beside its code:
//! `read/stores.rs`, `fanout/stores.rs`, `relations/stores.rs`). PostgreSQL
//! and Redis implement them here; each part's unit tests, a world in
//! memory.

use std::future::Future;

use crate::error::AppResult;
use crate::store::pg::PgStore;
use crate::store::redis::hints::Signal;
use crate::store::redis::state::PulledChange;
use crate::store::redis::{RedisStore, WriteMark};
use crate::types::{EntriesOf, Entry, JobId, User, UserId};

/// Accounts, as the records hold them.
pub trait Accounts: Sync {
    /// The account `id`, in whatever state (`None`: no such account).
    fn user(&self, id: UserId) -> impl Future<Output = AppResult<Option<User>>> + Send;
}

/// Feed lists, as the records rebuild them.
pub trait FeedEntries: Sync {
    /// The newest `limit` entries of a feed list, deleted posts included.
    fn entries(
        &self,
        of: EntriesOf,
        limit: i64,
    ) -> impl Future<Output = AppResult<Vec<Entry>>> + Send;
}

/// The jobs that redo a change's cache side.
pub trait Jobs: Sync {
    /// Drops job `id`: its requester did its work.
    fn drop_job(&self, id: JobId) -> impl Future<Output = AppResult<()>> + Send;
}

/// The cache's replicas.
pub trait Replicas: Sync {
    /// Marks the connection the next writes go on.
    fn write_mark(&self) -> WriteMark;

    /// Waits until a replica holds the writes made since `mark`.
    fn replicated(&self, mark: WriteMark) -> impl Future<Output = AppResult<()>> + Send;
}

/// The authors every follower pulls.
pub trait Pulled: Sync {
    fn pulled_change(
        &self,
        author: UserId,
        change: PulledChange,
    ) -> impl Future<Output = AppResult<()>> + Send;
}

/// Hints to every instance's streams.
pub trait Hints: Sync {
    /// Sends `signal` (best effort).
    fn hint(&self, signal: Signal) -> impl Future<Output = ()> + Send;
}

impl Accounts for PgStore {
    async fn user(&self, id: UserId) -> AppResult<Option<User>> {
        self.users().user(id).await
    }
}

impl FeedEntries for PgStore {
    async fn entries(&self, of: EntriesOf, limit: i64) -> AppResult<Vec<Entry>> {
        self.posts().entries(of, limit).await
    }
}

impl Jobs for PgStore {
    async fn drop_job(&self, id: JobId) -> AppResult<()> {
        self.jobs().drop_job(id).await
    }
}

impl Replicas for RedisStore {
    fn write_mark(&self) -> WriteMark {
        RedisStore::write_mark(self)
    }

    async fn replicated(&self, mark: WriteMark) -> AppResult<()> {
        RedisStore::replicated(self, mark).await
    }
}

impl Pulled for RedisStore {
    async fn pulled_change(&self, author: UserId, change: PulledChange) -> AppResult<()> {
        self.state().pulled_change(author, change).await
    }
}

impl Hints for RedisStore {
    async fn hint(&self, signal: Signal) {
        if let Err(e) = RedisStore::hint(self, signal).await {
            tracing::debug!(error = %e.chain(), "a hint was not sent");
        }
    }
}
