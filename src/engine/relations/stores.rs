//! What changes to follows, mutes and blocks need of the stores, beside
//! what the engine's parts share (`engine/stores.rs`): the records'
//! changes of edges, and the cache's copy of whom a home shows.

use std::future::Future;

use crate::engine::policy;
use crate::engine::stores::{Accounts, FeedEntries, Hints, Jobs, Pulled, Replicas};
use crate::error::AppResult;
use crate::store::pg::{Blocked, EdgeChange, FollowedMany, PgStore};
use crate::store::redis::RedisStore;
use crate::types::{Edge, Entry, UserId};

/// The records, as changes of edges write them: each change committed with
/// the job that applies it to the cache.
pub trait EdgeRecords: Accounts + FeedEntries + Jobs {
    /// `follower` follows `followee` (idempotent; refused across a block).
    fn follow(
        &self,
        follower: UserId,
        followee: UserId,
        now_ms: i64,
    ) -> impl Future<Output = AppResult<EdgeChange>> + Send;

    /// `follower` follows `targets` at once, those it cannot skipped;
    /// with `fit`, past `max_follows` too (else the call is refused).
    fn follow_many(
        &self,
        follower: UserId,
        targets: &[UserId],
        fit: bool,
        now_ms: i64,
    ) -> impl Future<Output = AppResult<FollowedMany>> + Send;

    fn unfollow(
        &self,
        follower: UserId,
        followee: UserId,
        now_ms: i64,
    ) -> impl Future<Output = AppResult<EdgeChange>> + Send;

    fn set_mute(
        &self,
        reader: UserId,
        target: UserId,
        mute: bool,
        now_ms: i64,
    ) -> impl Future<Output = AppResult<EdgeChange>> + Send;

    /// `blocker` blocks `target`: the follows between them go.
    fn block(
        &self,
        blocker: UserId,
        target: UserId,
        now_ms: i64,
    ) -> impl Future<Output = AppResult<Blocked>> + Send;

    /// Those of `entries` that are posts of `author`, deleted ones
    /// included.
    fn authored_by(
        &self,
        author: UserId,
        entries: &[Entry],
    ) -> impl Future<Output = AppResult<Vec<Entry>>> + Send;

    /// The newest `limit` entries of each of `authors`.
    fn entries_of_many(
        &self,
        authors: &[UserId],
        limit: i64,
    ) -> impl Future<Output = AppResult<Vec<(UserId, Vec<Entry>)>>> + Send;
}

/// The cache, as changes of edges write it: a reader's copy of whom its
/// home shows, in the order of its sequence numbers, and its inbox.
pub trait EdgeCache: Hints + Pulled + Replicas {
    /// Whether `reader`'s copy shows `author` (`None`: it does not name
    /// it, or there is no copy).
    fn followed_in_copy(
        &self,
        reader: UserId,
        author: UserId,
    ) -> impl Future<Output = AppResult<Option<bool>>> + Send;

    /// Every entry `reader`'s inbox holds (none if it is not cached).
    fn inbox(&self, reader: UserId) -> impl Future<Output = AppResult<Vec<Entry>>> + Send;

    /// Applies change `seq` of what `reader`'s home shows of `author`, and
    /// for a follow `entries` into its inbox (for an unfollow, out of it).
    #[allow(clippy::too_many_arguments)]
    fn set_follow(
        &self,
        reader: UserId,
        author: UserId,
        seq: i64,
        change: (Edge, bool),
        cap: i64,
        cut: Option<i64>,
        entries: &[Entry],
    ) -> impl Future<Output = AppResult<bool>> + Send;

    /// Applies follows `seq` of `reader` (each author, shown or muted) and
    /// their `entries` into its inbox, at most `cap`, nothing claimed at or
    /// below `cut`.
    fn follow_many(
        &self,
        reader: UserId,
        seq: i64,
        authors: &[(UserId, bool)],
        cap_cut: (i64, Option<i64>),
        entries: &[Entry],
    ) -> impl Future<Output = AppResult<i64>> + Send;

    /// `reader` is no longer an active fan of `author`.
    fn forget_active_fan(
        &self,
        author: UserId,
        reader: UserId,
    ) -> impl Future<Output = AppResult<()>> + Send;
}

impl EdgeRecords for PgStore {
    async fn follow(
        &self,
        follower: UserId,
        followee: UserId,
        now_ms: i64,
    ) -> AppResult<EdgeChange> {
        self.users()
            .follow(follower, followee, now_ms, policy::big_v_change)
            .await
    }

    async fn follow_many(
        &self,
        follower: UserId,
        targets: &[UserId],
        fit: bool,
        now_ms: i64,
    ) -> AppResult<FollowedMany> {
        let rule = policy::big_v_change;
        self.users()
            .follow_many(follower, targets, fit, now_ms, rule)
            .await
    }

    async fn unfollow(
        &self,
        follower: UserId,
        followee: UserId,
        now_ms: i64,
    ) -> AppResult<EdgeChange> {
        self.users()
            .unfollow(follower, followee, now_ms, policy::big_v_change)
            .await
    }

    async fn set_mute(
        &self,
        reader: UserId,
        target: UserId,
        mute: bool,
        now_ms: i64,
    ) -> AppResult<EdgeChange> {
        self.users().set_mute(reader, target, mute, now_ms).await
    }

    async fn block(&self, blocker: UserId, target: UserId, now_ms: i64) -> AppResult<Blocked> {
        self.users()
            .block(blocker, target, now_ms, policy::big_v_change)
            .await
    }

    async fn authored_by(&self, author: UserId, entries: &[Entry]) -> AppResult<Vec<Entry>> {
        self.posts().authored_by(author, entries).await
    }

    async fn entries_of_many(
        &self,
        authors: &[UserId],
        limit: i64,
    ) -> AppResult<Vec<(UserId, Vec<Entry>)>> {
        self.posts().entries_of_many(authors, limit).await
    }
}

impl EdgeCache for RedisStore {
    async fn followed_in_copy(&self, reader: UserId, author: UserId) -> AppResult<Option<bool>> {
        self.state().followed_in_copy(reader, author).await
    }

    async fn inbox(&self, reader: UserId) -> AppResult<Vec<Entry>> {
        self.feeds().all(&self.keys().inbox(reader)).await
    }

    async fn set_follow(
        &self,
        reader: UserId,
        author: UserId,
        seq: i64,
        change: (Edge, bool),
        cap: i64,
        cut: Option<i64>,
        entries: &[Entry],
    ) -> AppResult<bool> {
        self.state()
            .set_follow(reader, author, seq, change, cap, cut, entries)
            .await
    }

    async fn follow_many(
        &self,
        reader: UserId,
        seq: i64,
        authors: &[(UserId, bool)],
        cap_cut: (i64, Option<i64>),
        entries: &[Entry],
    ) -> AppResult<i64> {
        self.state()
            .follow_many(reader, seq, authors, cap_cut, entries)
            .await
    }

    async fn forget_active_fan(&self, author: UserId, reader: UserId) -> AppResult<()> {
        self.fans().forget_active_fan(author, reader).await
    }
}
