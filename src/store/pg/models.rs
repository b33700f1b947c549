//! Row types: `Queryable`/`Selectable` for reads, `New…` `Insertable` for writes,
//! `QueryableByName` for `sql_query`; rows of `Prepared` SQL are `Queryable`
//! (by position).

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Int4, Nullable, Text};
use serde::Serialize;

use super::schema::{fanout_jobs, posts, settings, users};

#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Serialize)]
#[diesel(table_name = users, check_for_backend(diesel::pg::Pg))]
pub struct User {
    pub id: i64,
    pub username: String,
    pub follower_count: i64,
    pub following_count: i64,
    pub big_v: bool,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = users)]
pub struct NewUser<'a> {
    pub username: &'a str,
}

/// A live post as clients see it.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, QueryableByName, Serialize)]
pub struct Post {
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
}

#[derive(Debug, Insertable)]
#[diesel(table_name = posts)]
pub struct NewPost<'a> {
    pub author_id: i64,
    pub body: &'a str,
    pub created_at_ms: i64,
}

/// A post's place in a feed, as hand-written SQL returns it.
#[derive(Debug, Clone, Copy, QueryableByName)]
pub struct EntryRow {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = BigInt)]
    pub created_at_ms: i64,
}

/// The admin-tunable settings row.
#[derive(
    Debug, Clone, PartialEq, Eq, Queryable, Selectable, AsChangeset, Serialize, serde::Deserialize,
)]
#[diesel(table_name = settings, check_for_backend(diesel::pg::Pg))]
pub struct SettingsRow {
    pub big_v_threshold: i64,
    pub big_v_demote_threshold: i64,
    pub active_window_secs: i64,
    pub inbox_max_len: i64,
    pub outbox_max_len: i64,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = fanout_jobs)]
pub struct NewJob<'a> {
    pub kind: &'a str,
    pub author_id: i64,
    pub post_id: Option<i64>,
    pub follower_id: Option<i64>,
    pub since_ms: Option<i64>,
    pub created_at_ms: i64,
}

/// A claimed fan-out job.
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
    #[diesel(sql_type = Nullable<BigInt>)]
    pub since_ms: Option<i64>,
    #[diesel(sql_type = BigInt)]
    pub checkpoint: i64,
    #[diesel(sql_type = Int4)]
    pub attempts: i32,
    #[diesel(sql_type = BigInt)]
    pub created_at_ms: i64,
}

/// A followed author whose outbox a reader pulls.
#[derive(Debug, Clone, Copy, Queryable)]
pub struct PulledRow {
    pub id: i64,
    pub big_v: bool,
}
