//! A live post, as the engine hands it out.

use crate::types::{PostId, UserId};
/// A live post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Post {
    pub id: PostId,
    pub author_id: UserId,
    pub author_username: String,
    pub body: String,
    /// Milliseconds since the Unix epoch: the feed's score.
    pub created_at_ms: i64,
    /// The app's own JSON object as published, as text (none if none).
    pub meta: Option<String>,
}

/// A post of a feed as the records hold it: live, or deleted (a hydration
/// reads deleted ones, to cache their tombstones; their bodies are not
/// read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedPost {
    pub post: Post,
    pub live: bool,
}

impl FeedPost {
    /// The post, if it is live.
    pub fn into_live(self) -> Option<Post> {
        self.live.then_some(self.post)
    }
}

/// Feed posts from a position on, in feed order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedRows {
    pub rows: Vec<FeedPost>,
    /// The rows run to the end of the feed.
    pub complete: bool,
}

/// Whose entries a feed list is rebuilt from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntriesOf {
    /// A reader's home feed (an inbox rebuild).
    Home(UserId),
    /// An author's posts (an outbox rebuild, a follow).
    Author(UserId),
    /// An author's pulled posts: those published while it was big-V.
    Pulled(UserId),
    /// What of an author's an inbox may hold, for an unfollow or a purge
    /// to take out: its newest posts, and those deleted since the oldest
    /// of them (their entries may still wait for their retract jobs).
    Held(UserId),
}
