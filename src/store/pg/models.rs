//! Row types: `Queryable`/`Selectable` for reads, `New…` `Insertable` for writes,
//! `QueryableByName` for `sql_query`; rows of `Prepared` SQL are `Queryable`
//! (by position).

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Int4, Nullable, Text};
use serde::Serialize;

use super::schema::{fanout_jobs, settings, users};

/// A user.
#[derive(
    Debug, Clone, PartialEq, Eq, Queryable, QueryableByName, Selectable, Serialize, utoipa::ToSchema,
)]
#[diesel(table_name = users, check_for_backend(diesel::pg::Pg))]
#[schema(example = json!({"id": 42, "username": "alice", "follower_count": 120, "following_count": 300, "big_v": false, "status": "active"}))]
pub struct User {
    pub id: i64,
    pub username: String,
    pub follower_count: i64,
    pub following_count: i64,
    /// Whether this author's posts are currently pulled rather than pushed.
    pub big_v: bool,
    /// `active`, or `suspended` by an admin (its posts are in no feed; it
    /// cannot post, follow, mute or block). A deleted account is not found.
    #[schema(value_type = String, pattern = "^(active|suspended)$")]
    pub status: AccountStatus,
}

/// Where an account stands (the `users.status` column).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    diesel::expression::AsExpression,
    diesel::deserialize::FromSqlRow,
)]
#[diesel(sql_type = Text)]
#[serde(rename_all = "lowercase")]
pub enum AccountStatus {
    Active,
    /// Suspended by an admin: its posts are in no feed.
    Suspended,
    /// Being deleted, or deleted: never shown.
    Deleted,
}

impl AccountStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AccountStatus::Active => "active",
            AccountStatus::Suspended => "suspended",
            AccountStatus::Deleted => "deleted",
        }
    }
}

impl diesel::serialize::ToSql<Text, diesel::pg::Pg> for AccountStatus {
    fn to_sql<'b>(
        &'b self,
        out: &mut diesel::serialize::Output<'b, '_, diesel::pg::Pg>,
    ) -> diesel::serialize::Result {
        <str as diesel::serialize::ToSql<Text, diesel::pg::Pg>>::to_sql(self.as_str(), out)
    }
}

impl diesel::deserialize::FromSql<Text, diesel::pg::Pg> for AccountStatus {
    fn from_sql(bytes: diesel::pg::PgValue<'_>) -> diesel::deserialize::Result<Self> {
        let text = <String as diesel::deserialize::FromSql<Text, diesel::pg::Pg>>::from_sql(bytes)?;
        [
            AccountStatus::Active,
            AccountStatus::Suspended,
            AccountStatus::Deleted,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
        .ok_or_else(|| format!("unknown account status {text:?}").into())
    }
}

#[derive(Debug, Insertable)]
#[diesel(table_name = users)]
pub struct NewUser<'a> {
    pub username: &'a str,
}

/// A live post as clients see it.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, QueryableByName, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 9001, "author_id": 42, "author_username": "alice", "body": "hello", "created_at_ms": 1764500000123_i64}))]
pub struct Post {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = BigInt)]
    pub author_id: i64,
    #[diesel(sql_type = Text)]
    pub author_username: String,
    #[diesel(sql_type = Text)]
    pub body: String,
    /// Milliseconds since the Unix epoch: the feed's score.
    #[diesel(sql_type = BigInt)]
    pub created_at_ms: i64,
    /// The app's own JSON object, as published (absent if none).
    #[diesel(sql_type = Nullable<Text>)]
    #[serde(serialize_with = "raw_json", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub meta: Option<String>,
}

/// Writes stored JSON text as the JSON it is.
fn raw_json<S: serde::Serializer>(text: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::Error;
    match text {
        Some(t) => serde_json::from_str::<serde_json::Value>(t)
            .map_err(S::Error::custom)?
            .serialize(s),
        None => s.serialize_none(),
    }
}

/// A post's place in a feed, as hand-written SQL returns it.
#[derive(Debug, Clone, Copy, QueryableByName)]
pub struct EntryRow {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = BigInt)]
    pub created_at_ms: i64,
}

/// A row of a feed read from the records: a post, live or deleted (a
/// deleted one keeps its place in the feed; its body is not read).
#[derive(Debug, Clone, PartialEq, Eq, Queryable)]
pub struct FeedRow {
    pub id: i64,
    pub author_id: i64,
    pub author_username: String,
    pub body: String,
    pub created_at_ms: i64,
    pub live: bool,
    pub meta: Option<String>,
}

impl FeedRow {
    /// The post, if it is live.
    pub fn into_post(self) -> Option<Post> {
        self.live.then_some(Post {
            id: self.id,
            author_id: self.author_id,
            author_username: self.author_username,
            body: self.body,
            created_at_ms: self.created_at_ms,
            meta: self.meta,
        })
    }
}

/// What a fan-out job needs of its post: the post, whether it is pulled,
/// and its author's big-V state now.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct DeliveryRow {
    #[diesel(sql_type = BigInt)]
    pub author_id: i64,
    #[diesel(sql_type = Text)]
    pub author_username: String,
    #[diesel(sql_type = Text)]
    pub body: String,
    #[diesel(sql_type = BigInt)]
    pub created_at_ms: i64,
    #[diesel(sql_type = Bool)]
    pub deleted: bool,
    #[diesel(sql_type = Nullable<Text>)]
    pub meta: Option<String>,
    /// Published while its author was big-V: pulled from the outbox.
    #[diesel(sql_type = Bool)]
    pub pulled: bool,
    #[diesel(sql_type = Bool)]
    pub big_v: bool,
    #[diesel(sql_type = BigInt)]
    pub big_v_epoch: i64,
}

/// The admin-tunable settings.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Queryable,
    Selectable,
    AsChangeset,
    Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[schema(as = Settings, example = json!({"big_v_threshold": 10000, "big_v_demote_threshold": 8000, "active_window_secs": 604800, "inbox_max_len": 1000, "outbox_max_len": 1000, "inbox_idle_ttl_secs": 2592000, "max_follows": 10000, "max_fanout_backlog": 100000, "home_includes_own_posts": true, "follow_copy_limit": 100}))]
#[diesel(table_name = settings, check_for_backend(diesel::pg::Pg))]
pub struct SettingsRow {
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

#[derive(Debug, Insertable)]
#[diesel(table_name = fanout_jobs)]
pub struct NewJob {
    pub kind: &'static str,
    pub author_id: i64,
    pub post_id: Option<i64>,
    pub follower_id: Option<i64>,
    pub epoch: Option<i64>,
    pub created_at_ms: i64,
    pub task_id: Option<i64>,
    pub targets: Option<Vec<i64>>,
}

/// Work a user or an admin started and can watch (`GET /api/v1/jobs/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 7, "kind": "delete_account", "user_id": 42, "state": "running", "total": 1200, "done": 300, "skipped": 0, "created_at_ms": 1764500000123_i64, "finished_at_ms": null}))]
pub struct Task {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    /// `delete_account` or `import_follows`.
    #[diesel(sql_type = Text)]
    #[schema(pattern = "^(delete_account|import_follows)$")]
    pub kind: String,
    /// The account deleted, or the importer.
    #[diesel(sql_type = BigInt)]
    pub user_id: i64,
    /// `pending`, `running`, `done` or `failed`.
    #[diesel(sql_type = Text)]
    #[schema(pattern = "^(pending|running|done|failed)$")]
    pub state: String,
    /// Units of work in all: follows, posts (a deletion); ids (an import).
    #[diesel(sql_type = BigInt)]
    pub total: i64,
    /// Units done so far.
    #[diesel(sql_type = BigInt)]
    pub done: i64,
    /// Of an import's ids, those not followed: unknown, oneself, across a
    /// block, suspended, or past `max_follows`.
    #[diesel(sql_type = BigInt)]
    pub skipped: i64,
    #[diesel(sql_type = BigInt)]
    pub created_at_ms: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub finished_at_ms: Option<i64>,
}

/// A claimed fan-out job as stored; [`crate::types::Job`] once its kind
/// is known.
#[derive(Debug, Clone, QueryableByName)]
pub struct JobRow {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = Text)]
    pub kind: String,
    #[diesel(sql_type = BigInt)]
    pub author_id: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub post_id: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub follower_id: Option<i64>,
    #[diesel(sql_type = BigInt)]
    pub checkpoint: i64,
    #[diesel(sql_type = Int4)]
    pub attempts: i32,
    #[diesel(sql_type = BigInt)]
    pub created_at_ms: i64,
    #[diesel(sql_type = BigInt)]
    pub lease: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub epoch: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub task_id: Option<i64>,
    #[diesel(sql_type = Nullable<diesel::sql_types::Array<BigInt>>)]
    pub targets: Option<Vec<i64>>,
}

/// A row of the pulled authors' state: a big-V (epoch), a backfill
/// (epoch), or a delivery in flight (post).
#[derive(Debug, Clone, Copy, PartialEq, Eq, QueryableByName)]
pub struct PulledRow {
    #[diesel(sql_type = BigInt)]
    pub author: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub epoch: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub post: Option<i64>,
}
