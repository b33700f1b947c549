//! The API's bodies: what clients read, built from the engine's values.
//! Their JSON and their OpenAPI schemas are the v1 contract; the engine's
//! types and the stores' rows may change under them.

use serde::Serialize;
use utoipa::ToSchema;

use crate::engine::{Followed, Page, UserPage};
use crate::types::{Cursor, FeedSettings, Post, PostId, Prev, Task, TaskId, User, UserId};

/// A user.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = User, example = json!({"id": 42, "username": "alice", "follower_count": 120, "following_count": 300, "big_v": false, "status": "active"}))]
pub struct UserView {
    pub id: i64,
    pub username: String,
    pub follower_count: i64,
    pub following_count: i64,
    /// Whether this author's posts are currently pulled rather than pushed.
    pub big_v: bool,
    /// `active`, or `suspended` by an admin (its posts are in no feed; it
    /// cannot post, follow, mute or block). A deleted account is not found.
    #[schema(pattern = "^(active|suspended)$")]
    pub status: &'static str,
}

impl From<&User> for UserView {
    fn from(u: &User) -> Self {
        UserView {
            id: u.id.0,
            username: u.username.clone(),
            follower_count: u.follower_count,
            following_count: u.following_count,
            big_v: u.big_v,
            status: u.status.as_str(),
        }
    }
}

/// A live post as clients see it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Post, example = json!({"id": 9001, "author_id": 42, "author_username": "alice", "body": "hello", "created_at_ms": 1764500000123_i64}))]
pub struct PostView<'a> {
    #[schema(value_type = i64)]
    pub id: PostId,
    #[schema(value_type = i64)]
    pub author_id: UserId,
    pub author_username: &'a str,
    pub body: &'a str,
    /// Milliseconds since the Unix epoch: the feed's score.
    pub created_at_ms: i64,
    /// The app's own JSON object, as published (absent if none).
    #[serde(serialize_with = "raw_json", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub meta: Option<&'a str>,
}

impl<'a> From<&'a Post> for PostView<'a> {
    fn from(p: &'a Post) -> Self {
        PostView {
            id: p.id,
            author_id: p.author_id,
            author_username: &p.author_username,
            body: &p.body,
            created_at_ms: p.created_at_ms,
            meta: p.meta.as_deref(),
        }
    }
}

/// Writes stored JSON text as the JSON it is.
fn raw_json<S: serde::Serializer>(text: &Option<&str>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::Error;
    match text {
        Some(t) => serde_json::from_str::<serde_json::Value>(t)
            .map_err(S::Error::custom)?
            .serialize(s),
        None => s.serialize_none(),
    }
}

/// A page of a feed.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Page)]
pub struct PageView<'a> {
    /// Newest first.
    pub items: Vec<PostView<'a>>,
    /// Where the entries older than the last item start (send back as
    /// `max` and `offset`); null when nothing older exists.
    pub next: Option<Cursor>,
    /// Where the entries newer than the first item start (send back as
    /// `min` and `offset` to refresh); on a page with no item, the
    /// position it was read from (the bottom of the feed for a first page).
    pub prev: Prev,
}

impl<'a> From<&'a Page> for PageView<'a> {
    fn from(p: &'a Page) -> Self {
        PageView {
            items: p.items.iter().map(PostView::from).collect(),
            next: p.next,
            prev: p.prev,
        }
    }
}

/// A page of users (whom one mutes or blocks), newest first by when.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = UserPage)]
pub struct UserPageView {
    pub items: Vec<UserView>,
    /// Where the next page starts (send back as `max` and `offset`); null
    /// at the end.
    pub next: Option<Cursor>,
}

impl From<&UserPage> for UserPageView {
    fn from(p: &UserPage) -> Self {
        UserPageView {
            items: p.items.iter().map(UserView::from).collect(),
            next: p.next,
        }
    }
}

/// What a follow of many answered: the authors followed now, those
/// followed before, and those it could not follow (no such account,
/// oneself, suspended, across a block).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Followed, example = json!({"followed": [7, 9], "already": [12], "skipped": [99999]}))]
pub struct FollowedView<'a> {
    #[schema(value_type = Vec<i64>)]
    pub followed: &'a [UserId],
    #[schema(value_type = Vec<i64>)]
    pub already: &'a [UserId],
    #[schema(value_type = Vec<i64>)]
    pub skipped: &'a [UserId],
}

impl<'a> From<&'a Followed> for FollowedView<'a> {
    fn from(f: &'a Followed) -> Self {
        FollowedView {
            followed: &f.followed,
            already: &f.already,
            skipped: &f.skipped,
        }
    }
}

/// Work a user or an admin started and can watch (`GET /api/v1/jobs/{id}`).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Task, example = json!({"id": 7, "kind": "delete_account", "user_id": 42, "state": "running", "total": 1200, "done": 300, "skipped": 0, "created_at_ms": 1764500000123_i64, "finished_at_ms": null}))]
pub struct TaskView {
    #[schema(value_type = i64)]
    pub id: TaskId,
    /// `delete_account` or `import_follows`.
    #[schema(pattern = "^(delete_account|import_follows)$")]
    pub kind: &'static str,
    /// The account deleted, or the importer.
    #[schema(value_type = i64)]
    pub user_id: UserId,
    /// `pending`, `running`, `done` or `failed`.
    #[schema(pattern = "^(pending|running|done|failed)$")]
    pub state: &'static str,
    /// Units of work in all: follows, posts (a deletion); ids (an import).
    pub total: i64,
    /// Units done so far.
    pub done: i64,
    /// Of an import's ids, those not followed: unknown, oneself, across a
    /// block, suspended, or past `max_follows`.
    pub skipped: i64,
    pub created_at_ms: i64,
    pub finished_at_ms: Option<i64>,
}

impl From<&Task> for TaskView {
    fn from(t: &Task) -> Self {
        TaskView {
            id: t.id,
            kind: t.kind.as_str(),
            user_id: t.user_id,
            state: t.state.as_str(),
            total: t.total,
            done: t.done,
            skipped: t.skipped,
            created_at_ms: t.created_at_ms,
            finished_at_ms: t.finished_at_ms,
        }
    }
}

/// The admin-tunable settings.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Settings, example = json!({"big_v_threshold": 10000, "big_v_demote_threshold": 8000, "active_window_secs": 604800, "inbox_max_len": 1000, "outbox_max_len": 1000, "inbox_idle_ttl_secs": 2592000, "max_follows": 10000, "max_fanout_backlog": 100000, "home_includes_own_posts": true, "follow_copy_limit": 100}))]
pub struct SettingsView {
    pub big_v_threshold: i64,
    pub big_v_demote_threshold: i64,
    pub active_window_secs: i64,
    pub inbox_max_len: i64,
    pub outbox_max_len: i64,
    /// An inbox unread for this long expires (rebuilt when its reader returns).
    pub inbox_idle_ttl_secs: i64,
    /// Follows per user at most (a follow beyond answers 422).
    pub max_follows: i64,
    /// Pending fan-out jobs past which publishes answer 503.
    pub max_fanout_backlog: i64,
    /// Whether a reader's home feed shows its own posts.
    pub home_includes_own_posts: bool,
    /// An author's newest posts a follow copies into the inbox (the rest
    /// is read through the fallback).
    pub follow_copy_limit: i64,
}

impl From<&FeedSettings> for SettingsView {
    fn from(s: &FeedSettings) -> Self {
        SettingsView {
            big_v_threshold: s.big_v_threshold,
            big_v_demote_threshold: s.big_v_demote_threshold,
            active_window_secs: s.active_window_secs,
            inbox_max_len: s.inbox_max_len,
            outbox_max_len: s.outbox_max_len,
            inbox_idle_ttl_secs: s.inbox_idle_ttl_secs,
            max_follows: s.max_follows,
            max_fanout_backlog: s.max_fanout_backlog,
            home_includes_own_posts: s.home_includes_own_posts,
            follow_copy_limit: s.follow_copy_limit,
        }
    }
}
