//! Neutral feed types: what the engine and the stores both speak. Nothing
//! here knows of HTTP, the engine or a store.
//!
//! - [`entry`]: a post's place in a feed and the feed order;
//! - [`cursor`]: the scroll position a client sends back;
//! - [`source`]: what one read of one feed source returned;
//! - [`jobs`]: fan-out jobs and their kinds;
//! - [`ids`]: the ids of accounts, posts, jobs and tasks, each a type of its own;
//! - [`account`], [`post`], [`feed_settings`]: what the engine hands out
//!   (the stores' rows and the API's bodies are each their own).

pub mod account;
pub mod cursor;
pub mod entry;
pub mod feed_settings;
pub mod ids;
pub mod jobs;
pub mod post;
pub mod source;
pub mod stream;

pub use account::{AccountStatus, Task, TaskKind, TaskState, User};
pub use cursor::{Cursor, PageRequest, Prev};
pub use entry::{feed_order, floor_of_newest, member_cmp, Entry};
pub use feed_settings::FeedSettings;
pub use ids::{JobId, ListId, PostId, TaskId, UserId};
pub use jobs::{Delivery, Job, JobKind, Payload, Work};
pub use post::{EntriesOf, FeedPost, FeedRows, Post};
pub use source::{
    horizon, page_part, page_reads, CachedPost, EntryMeta, Horizon, MarkCopy, PulledAuthor, Range,
    SourceRead, StateKey, WarmRead,
};
pub use stream::{Closing, End};

/// Whose feed a read or a query is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// A reader's home feed: the posts of the authors it follows, and with
    /// `own` its own posts too.
    Home { reader: UserId, own: bool },
    /// One author's own posts.
    Author(UserId),
    /// One of `owner`'s lists: its members' posts (but those `owner`
    /// mutes).
    List { owner: UserId, list: ListId },
}

impl Scope {
    pub fn user(self) -> UserId {
        match self {
            Scope::Home { reader: u, .. } | Scope::Author(u) | Scope::List { owner: u, .. } => u,
        }
    }
}

/// A change to what one reader's home shows of one author, applied to the
/// reader's copy of whom it follows in the order of its sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    /// Followed: the author's recent posts come into the inbox.
    Follow,
    /// Unfollowed: the author's posts leave the inbox.
    Unfollow,
    /// Muted: out of the home; the inbox keeps the posts.
    Mute,
    /// Unmuted: back in the home if followed.
    Unmute,
}

impl Edge {
    /// The job that applies the change when its requester could not.
    pub fn job(self) -> JobKind {
        match self {
            Edge::Follow => JobKind::Follow,
            Edge::Unfollow => JobKind::Unfollow,
            Edge::Mute => JobKind::Mute,
            Edge::Unmute => JobKind::Unmute,
        }
    }

    /// The change a job applies, if it applies one.
    pub fn of_job(kind: JobKind) -> Option<Edge> {
        [Edge::Follow, Edge::Unfollow, Edge::Mute, Edge::Unmute]
            .into_iter()
            .find(|e| e.job() == kind)
    }
}

/// A change of an author's big-V state, as the engine's policy decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BigVChange {
    /// From now on its posts are pulled from its outbox.
    Promote,
    /// From now on its posts are pushed; those of its big-V time are owed
    /// to every follower (a backfill job).
    Demote,
}

/// Why a page was answered from PostgreSQL rather than Redis; the `reason`
/// label of `feed_pages_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fallback {
    /// A Redis call failed or timed out.
    RedisUnavailable,
    /// Another request is rebuilding a source from PostgreSQL.
    SourceBuilding,
    /// A missing source could not be rebuilt (or vanished again).
    RebuildFailed,
    /// The page lies below what some source holds (its floor: trimmed at
    /// its cap, or filled only that far).
    PastFloor,
    /// The page needed more Redis reads than one page may make.
    ReadRounds,
    /// The request's offset is deeper than a Redis read should go.
    DeepOffset,
}

impl Fallback {
    pub const ALL: [Fallback; 6] = [
        Fallback::RedisUnavailable,
        Fallback::SourceBuilding,
        Fallback::RebuildFailed,
        Fallback::PastFloor,
        Fallback::ReadRounds,
        Fallback::DeepOffset,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::RedisUnavailable => "redis_unavailable",
            Fallback::SourceBuilding => "source_building",
            Fallback::RebuildFailed => "rebuild_failed",
            Fallback::PastFloor => "past_floor",
            Fallback::ReadRounds => "read_rounds",
            Fallback::DeepOffset => "deep_offset",
        }
    }
}
