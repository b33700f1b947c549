//! What a page needs of the stores, and nothing more: the records'
//! queries of a feed, and the cache's warm read and rebuilds. The read path
//! runs over any store that answers them (PostgreSQL and Redis in service,
//! a model in memory in its unit tests).

use std::collections::HashMap;
use std::future::Future;

use crate::engine::stores::{Accounts, FeedEntries};
use crate::error::AppResult;
use crate::store::pg::PgStore;
use crate::store::redis::RedisStore;
use crate::types::{
    CachedPost, Entry, FeedPost, FeedRows, ListId, MarkCopy, PostId, PulledAuthor, Scope, UserId,
    WarmRead,
};

/// The records of truth, as pages read them.
pub trait Records: Accounts + FeedEntries {
    /// `scope`'s feed from `max` (or the top) on: the entries scored
    /// exactly `max` past the first `offset`, then at least `window`
    /// entries below it where the feed has them (live posts only: deleted
    /// ones have left the feed).
    fn feed(
        &self,
        scope: Scope,
        max: Option<i64>,
        offset: u32,
        window: i64,
    ) -> impl Future<Output = AppResult<FeedRows>> + Send;

    /// `scope`'s feed from the run of entries scored `min` up: that run,
    /// then at least `window` entries above it (live posts only).
    fn feed_up(
        &self,
        scope: Scope,
        min: i64,
        window: i64,
    ) -> impl Future<Output = AppResult<FeedRows>> + Send;

    /// Entries of `scope`'s feed scored `score` from post `id` down.
    fn count_from(
        &self,
        scope: Scope,
        score: i64,
        id: PostId,
    ) -> impl Future<Output = AppResult<i64>> + Send;

    /// Entries of `scope`'s feed scored `score`.
    fn count_at(&self, scope: Scope, score: i64) -> impl Future<Output = AppResult<i64>> + Send;

    /// The posts among `ids` that belong to `scope`'s feed, live or not.
    fn hydrate(
        &self,
        ids: &[PostId],
        scope: Scope,
    ) -> impl Future<Output = AppResult<Vec<FeedPost>>> + Send;

    /// Whom `reader`'s home shows, with its follow sequence number.
    fn following_state(
        &self,
        reader: UserId,
    ) -> impl Future<Output = AppResult<(i64, Vec<UserId>)>> + Send;

    /// The authors every follower pulls.
    fn pulled_state(&self) -> impl Future<Output = AppResult<Vec<PulledAuthor>>> + Send;

    /// The accounts whose posts no feed shows.
    fn hidden_accounts(&self) -> impl Future<Output = AppResult<Vec<UserId>>> + Send;

    /// The authors `owner`'s list `list` shows (its members, but those
    /// `owner` mutes and those not active), in id order; not found if
    /// `owner` has no such list.
    fn list_authors(
        &self,
        owner: UserId,
        list: ListId,
    ) -> impl Future<Output = AppResult<Vec<UserId>>> + Send;
}

/// A part of the cache a page rebuilds when it finds it missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Whom a reader's home shows.
    Following(UserId),
    /// A copy of the authors every follower pulls.
    Pulled(MarkCopy),
    /// A copy of the hidden accounts.
    Hidden(MarkCopy),
    /// An inbox or an outbox.
    List(FeedList),
}

/// A feed list: a source of pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FeedList {
    /// A reader's inbox.
    Inbox(UserId),
    /// An author's outbox.
    Outbox(UserId),
}

/// A feed list filled in by a rebuild: at most `cap` entries, complete
/// above `floor` (`None`: to the bottom).
pub struct ListFill<'a> {
    pub cap: i64,
    pub floor: Option<i64>,
    pub entries: &'a [Entry],
    /// Idle seconds before the list expires (0: never).
    pub idle_ttl_secs: u64,
}

/// The cache, as pages read and rebuild it. A rebuild is begun (true if
/// this caller must fill it; false while another builds it), then filled
/// (false if the build was abandoned meanwhile), or abandoned.
pub trait Cache: Sync {
    /// One read of `scope`'s sources from `max` down, `fetch` entries
    /// wide, with what the cache knows of the page's posts. A list's
    /// sources are the outboxes of `authors` (its [`Records::list_authors`]);
    /// other scopes have none there.
    fn warm_read(
        &self,
        scope: Scope,
        authors: &[UserId],
        max: Option<i64>,
        fetch: usize,
    ) -> impl Future<Output = AppResult<WarmRead>> + Send;

    /// The cached posts among `ids`.
    fn posts(
        &self,
        ids: &[PostId],
    ) -> impl Future<Output = AppResult<HashMap<PostId, CachedPost>>> + Send;

    /// Caches posts (tombstones for deleted ones) for `ttl_secs`.
    fn fill_posts(
        &self,
        posts: &[(PostId, CachedPost)],
        ttl_secs: u64,
    ) -> impl Future<Output = AppResult<()>> + Send;

    fn begin(&self, part: Part) -> impl Future<Output = AppResult<bool>> + Send;

    fn abandon(&self, part: Part) -> impl Future<Output = AppResult<()>> + Send;

    fn fill_following(
        &self,
        reader: UserId,
        seq: i64,
        followees: &[UserId],
        idle_ttl_secs: u64,
    ) -> impl Future<Output = AppResult<bool>> + Send;

    fn fill_pulled(
        &self,
        copy: MarkCopy,
        authors: &[PulledAuthor],
    ) -> impl Future<Output = AppResult<bool>> + Send;

    fn fill_hidden(
        &self,
        copy: MarkCopy,
        accounts: &[UserId],
    ) -> impl Future<Output = AppResult<bool>> + Send;

    fn fill_list(
        &self,
        list: FeedList,
        fill: ListFill<'_>,
    ) -> impl Future<Output = AppResult<bool>> + Send;
}

impl Records for PgStore {
    async fn feed(
        &self,
        scope: Scope,
        max: Option<i64>,
        offset: u32,
        window: i64,
    ) -> AppResult<FeedRows> {
        self.posts().feed(scope, max, offset, window).await
    }

    async fn feed_up(&self, scope: Scope, min: i64, window: i64) -> AppResult<FeedRows> {
        self.posts().feed_up(scope, min, window).await
    }

    async fn count_from(&self, scope: Scope, score: i64, id: PostId) -> AppResult<i64> {
        self.posts().count_from(scope, score, id).await
    }

    async fn count_at(&self, scope: Scope, score: i64) -> AppResult<i64> {
        self.posts().count_at(scope, score).await
    }

    async fn hydrate(&self, ids: &[PostId], scope: Scope) -> AppResult<Vec<FeedPost>> {
        self.posts().hydrate(ids, scope).await
    }

    async fn following_state(&self, reader: UserId) -> AppResult<(i64, Vec<UserId>)> {
        self.posts().following_state(reader).await
    }

    async fn pulled_state(&self) -> AppResult<Vec<PulledAuthor>> {
        self.posts().pulled_state().await
    }

    async fn hidden_accounts(&self) -> AppResult<Vec<UserId>> {
        self.users().hidden_accounts().await
    }

    async fn list_authors(&self, owner: UserId, list: ListId) -> AppResult<Vec<UserId>> {
        self.lists().authors(owner, list).await
    }
}

impl Cache for RedisStore {
    async fn warm_read(
        &self,
        scope: Scope,
        authors: &[UserId],
        max: Option<i64>,
        fetch: usize,
    ) -> AppResult<WarmRead> {
        RedisStore::warm_read(self, scope, authors, max, fetch).await
    }

    async fn posts(&self, ids: &[PostId]) -> AppResult<HashMap<PostId, CachedPost>> {
        self.posts().cached(ids).await
    }

    async fn fill_posts(&self, posts: &[(PostId, CachedPost)], ttl_secs: u64) -> AppResult<()> {
        self.posts().fill(posts, ttl_secs).await
    }

    async fn begin(&self, part: Part) -> AppResult<bool> {
        match part {
            Part::Following(reader) => self.state().begin_following(reader).await,
            Part::Pulled(copy) => self.state().begin_pulled(copy).await,
            Part::Hidden(copy) => self.state().begin_hidden(copy).await,
            Part::List(list) => self.feeds().begin_build(&self.list_key(list)).await,
        }
    }

    async fn abandon(&self, part: Part) -> AppResult<()> {
        let keys = self.keys();
        let begun = match part {
            Part::Following(r) => vec![keys.following(r), keys.followees(r)],
            Part::Pulled(copy) => vec![keys.pulled(copy), keys.pulled_authors(copy)],
            Part::Hidden(copy) => vec![keys.hidden(copy)],
            Part::List(list) => vec![self.list_key(list)],
        };
        self.delete_many(&begun).await
    }

    async fn fill_following(
        &self,
        reader: UserId,
        seq: i64,
        followees: &[UserId],
        idle_ttl_secs: u64,
    ) -> AppResult<bool> {
        self.state()
            .fill_following(reader, seq, followees, idle_ttl_secs)
            .await
    }

    async fn fill_pulled(&self, copy: MarkCopy, authors: &[PulledAuthor]) -> AppResult<bool> {
        self.state().fill_pulled(copy, authors).await
    }

    async fn fill_hidden(&self, copy: MarkCopy, accounts: &[UserId]) -> AppResult<bool> {
        self.state().fill_hidden(copy, accounts).await
    }

    async fn fill_list(&self, list: FeedList, fill: ListFill<'_>) -> AppResult<bool> {
        let key = self.list_key(list);
        self.feeds()
            .fill(&key, fill.cap, fill.floor, fill.entries, fill.idle_ttl_secs)
            .await
    }
}

impl RedisStore {
    fn list_key(&self, list: FeedList) -> String {
        match list {
            FeedList::Inbox(reader) => self.keys().inbox(reader),
            FeedList::Outbox(author) => self.keys().outbox(author),
        }
    }
}
