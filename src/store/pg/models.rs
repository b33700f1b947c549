//! Row types: `Queryable`/`Selectable` for reads, `New…` `Insertable` for writes,
//! `QueryableByName` for `sql_query`; rows of `Prepared` SQL are `Queryable`
//! (by position).

use super::schema::{fanout_jobs, settings, users};
use crate::error::{AppError, Message};
use crate::types::{
    AccountStatus, CachedPost, Delivery, Entry, FeedPost, FeedSettings, JobId, ListId, Post,
    PostId, Task, TaskId, User, UserId,
};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Int4, Nullable, Text};

/// A user's row.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, QueryableByName, Selectable)]
#[diesel(table_name = users, check_for_backend(diesel::pg::Pg))]
pub struct UserRow {
    pub id: i64,
    pub username: String,
    pub follower_count: i64,
    pub following_count: i64,
    pub big_v: bool,
    pub status: AccountStatus,
}

impl From<UserRow> for User {
    fn from(r: UserRow) -> Self {
        User {
            id: UserId(r.id),
            username: r.username,
            follower_count: r.follower_count,
            following_count: r.following_count,
            big_v: r.big_v,
            status: r.status,
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
        Ok(text.parse()?)
    }
}

/// An id's SQL mapping: a `BIGINT`, as the number.
macro_rules! id_sql {
    ($($id:ident),*) => {$(
        impl diesel::serialize::ToSql<BigInt, diesel::pg::Pg> for $id {
            fn to_sql<'b>(
                &'b self,
                out: &mut diesel::serialize::Output<'b, '_, diesel::pg::Pg>,
            ) -> diesel::serialize::Result {
                <i64 as diesel::serialize::ToSql<BigInt, diesel::pg::Pg>>::to_sql(&self.0, out)
            }
        }

        impl diesel::deserialize::FromSql<BigInt, diesel::pg::Pg> for $id {
            fn from_sql(bytes: diesel::pg::PgValue<'_>) -> diesel::deserialize::Result<Self> {
                <i64 as diesel::deserialize::FromSql<BigInt, diesel::pg::Pg>>::from_sql(bytes).map($id)
            }
        }
    )*};
}

id_sql!(UserId, PostId, JobId, TaskId, ListId);

#[derive(Debug, Insertable)]
#[diesel(table_name = users)]
pub struct NewUser<'a> {
    pub username: &'a str,
}

/// A live post's row.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, QueryableByName)]
pub struct PostRow {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = BigInt)]
    pub author_id: i64,
    #[diesel(sql_type = Text)]
    pub author_username: String,
    #[diesel(sql_type = Text)]
    pub body: String,
    #[diesel(sql_type = BigInt)]
    pub created_at_ms: i64,
    #[diesel(sql_type = Nullable<Text>)]
    pub meta: Option<String>,
}

impl From<PostRow> for Post {
    fn from(r: PostRow) -> Self {
        Post {
            id: PostId(r.id),
            author_id: UserId(r.author_id),
            author_username: r.author_username,
            body: r.body,
            created_at_ms: r.created_at_ms,
            meta: r.meta,
        }
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

/// A row of a feed read from the records: a post, live or deleted (only a
/// hydration reads deleted ones, to cache their tombstones; their bodies
/// are not read).
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
    /// The row's place in its feed.
    pub fn entry(&self) -> Entry {
        Entry::new(self.created_at_ms, PostId(self.id))
    }
}

impl From<FeedRow> for FeedPost {
    fn from(row: FeedRow) -> Self {
        FeedPost {
            post: Post {
                id: PostId(row.id),
                author_id: UserId(row.author_id),
                author_username: row.author_username,
                body: row.body,
                created_at_ms: row.created_at_ms,
                meta: row.meta,
            },
            live: row.live,
        }
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

impl From<DeliveryRow> for Delivery {
    fn from(row: DeliveryRow) -> Self {
        Delivery {
            post: CachedPost {
                author_id: UserId(row.author_id),
                author_username: row.author_username,
                body: row.body,
                created_at_ms: row.created_at_ms,
                deleted: row.deleted,
                meta: row.meta,
            },
            pulled: row.pulled,
            big_v: row.big_v,
            big_v_epoch: row.big_v_epoch,
        }
    }
}

/// The settings' row (one row).
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, AsChangeset)]
#[diesel(table_name = settings, check_for_backend(diesel::pg::Pg))]
pub struct SettingsRow {
    pub big_v_threshold: i64,
    pub big_v_demote_threshold: i64,
    pub active_window_secs: i64,
    pub inbox_max_len: i64,
    pub outbox_max_len: i64,
    pub inbox_idle_ttl_secs: i64,
    pub max_follows: i64,
    pub max_fanout_backlog: i64,
    pub home_includes_own_posts: bool,
    pub follow_copy_limit: i64,
}

/// Copies the settings field by field, both ways.
macro_rules! same_fields {
    ($from:ty => $to:ident, $($field:ident),+) => {
        impl From<$from> for $to {
            fn from(s: $from) -> Self {
                $to { $($field: s.$field),+ }
            }
        }
    };
}
same_fields!(SettingsRow => FeedSettings, big_v_threshold, big_v_demote_threshold,
    active_window_secs, inbox_max_len, outbox_max_len, inbox_idle_ttl_secs, max_follows,
    max_fanout_backlog, home_includes_own_posts, follow_copy_limit);
same_fields!(&FeedSettings => SettingsRow, big_v_threshold, big_v_demote_threshold,
    active_window_secs, inbox_max_len, outbox_max_len, inbox_idle_ttl_secs, max_follows,
    max_fanout_backlog, home_includes_own_posts, follow_copy_limit);

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

/// A task's row.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct TaskRow {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = Text)]
    pub kind: String,
    #[diesel(sql_type = BigInt)]
    pub user_id: i64,
    #[diesel(sql_type = Text)]
    pub state: String,
    #[diesel(sql_type = BigInt)]
    pub total: i64,
    #[diesel(sql_type = BigInt)]
    pub done: i64,
    #[diesel(sql_type = BigInt)]
    pub skipped: i64,
    #[diesel(sql_type = BigInt)]
    pub created_at_ms: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub finished_at_ms: Option<i64>,
}

impl TryFrom<TaskRow> for Task {
    type Error = AppError;

    /// A kind or a state this binary does not know is an error (the
    /// columns' CHECK constraints list the known ones).
    fn try_from(r: TaskRow) -> Result<Self, AppError> {
        let unknown = |e: String| AppError::internal("a task's row", Message(e));
        Ok(Task {
            id: TaskId(r.id),
            kind: r.kind.parse().map_err(unknown)?,
            user_id: UserId(r.user_id),
            state: r.state.parse().map_err(unknown)?,
            total: r.total,
            done: r.done,
            skipped: r.skipped,
            created_at_ms: r.created_at_ms,
            finished_at_ms: r.finished_at_ms,
        })
    }
}

/// A claimed fan-out job as stored; [`crate::types::Job`] once its kind
/// is known.
#[derive(Debug, Clone, Queryable, QueryableByName)]
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
