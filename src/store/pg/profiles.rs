//! What clients show of people: accounts with their counts, the
//! relationship between two users, and the lists of followers and
//! followings (paged by user id).

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Bool, Nullable, Text};
use diesel_async::RunQueryDsl;

use super::PgStore;
use crate::error::AppResult;
use crate::types::{AccountStatus, PostId, UserId};

/// Accounts with their counts, relationships and follow lists
/// ([`PgStore::profiles`]).
#[derive(Clone, Copy)]
pub struct ProfileRecords<'a>(pub(super) &'a PgStore);

/// An account as a profile shows it.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct AccountRow {
    #[diesel(sql_type = BigInt)]
    pub id: UserId,
    #[diesel(sql_type = Text)]
    pub username: String,
    #[diesel(sql_type = BigInt)]
    pub follower_count: i64,
    #[diesel(sql_type = BigInt)]
    pub following_count: i64,
    /// Live posts (kept by the records: no count at read).
    #[diesel(sql_type = BigInt)]
    pub post_count: i64,
    #[diesel(sql_type = BigInt)]
    pub created_at_ms: i64,
    /// The newest live post's time, if any.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub last_post_ms: Option<i64>,
}

/// How one user stands to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, QueryableByName)]
pub struct RelationshipRow {
    #[diesel(sql_type = Bool)]
    pub following: bool,
    #[diesel(sql_type = Bool)]
    pub followed_by: bool,
    #[diesel(sql_type = Bool)]
    pub blocking: bool,
    #[diesel(sql_type = Bool)]
    pub blocked_by: bool,
    #[diesel(sql_type = Bool)]
    pub muting: bool,
}

/// Which side of the follows a list reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowList {
    /// Who follows the owner.
    Followers,
    /// Whom the owner follows.
    Following,
}

/// A range of user ids, exclusive at both ends (absent: unbounded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdRange {
    pub below: Option<i64>,
    pub above: Option<i64>,
    /// The ids right above `above` (oldest first), rather than the highest.
    pub closest: bool,
}

impl ProfileRecords<'_> {
    /// The active accounts among `ids` (in no particular order).
    pub async fn accounts(self, ids: &[UserId]) -> AppResult<Vec<AccountRow>> {
        let mut conn = self.0.conn().await?;
        Ok(diesel::sql_query(
            "SELECT u.id, u.username, u.follower_count, u.following_count, \
                (extract(epoch FROM u.created_at) * 1000)::bigint AS created_at_ms, \
                u.post_count, \
                (SELECT p.created_at_ms FROM posts p \
                 WHERE p.author_id = u.id AND p.deleted_at IS NULL \
                 ORDER BY p.created_at_ms DESC LIMIT 1) AS last_post_ms \
             FROM users u WHERE u.id = ANY($1) AND u.status = 'active'",
        )
        .bind::<Array<BigInt>, _>(ids)
        .load(&mut conn)
        .await?)
    }

    /// The active account named `username`.
    pub async fn account_id_by_name(self, username: &str) -> AppResult<Option<UserId>> {
        use super::schema::users;
        let mut conn = self.0.conn().await?;
        Ok(users::table
            .filter(users::username.eq(username))
            .filter(users::status.eq(AccountStatus::Active))
            .select(users::id)
            .first(&mut conn)
            .await
            .optional()?)
    }

    /// How `of` stands to each of `others`, in their order.
    pub async fn relationships(
        self,
        of: UserId,
        others: &[UserId],
    ) -> AppResult<Vec<RelationshipRow>> {
        let mut conn = self.0.conn().await?;
        #[derive(QueryableByName)]
        struct Row {
            #[diesel(sql_type = BigInt)]
            other: i64,
            #[diesel(embed)]
            rel: RelationshipRow,
        }
        let rows: Vec<Row> = diesel::sql_query(
            "SELECT o AS other, \
                EXISTS (SELECT 1 FROM follows WHERE follower_id = $1 AND followee_id = o) AS following, \
                EXISTS (SELECT 1 FROM follows WHERE follower_id = o AND followee_id = $1) AS followed_by, \
                EXISTS (SELECT 1 FROM blocks WHERE blocker_id = $1 AND blocked_id = o) AS blocking, \
                EXISTS (SELECT 1 FROM blocks WHERE blocker_id = o AND blocked_id = $1) AS blocked_by, \
                EXISTS (SELECT 1 FROM mutes WHERE muter_id = $1 AND muted_id = o) AS muting \
             FROM unnest($2::bigint[]) AS o",
        )
        .bind::<BigInt, _>(of)
        .bind::<Array<BigInt>, _>(others)
        .load(&mut conn)
        .await?;
        let by_id: std::collections::HashMap<i64, RelationshipRow> =
            rows.into_iter().map(|r| (r.other, r.rel)).collect();
        Ok(others
            .iter()
            .map(|o| by_id.get(&o.0).copied().unwrap_or_default())
            .collect())
    }

    /// Up to `limit` active users of `owner`'s followers or followings with
    /// ids in `range`, highest id first.
    pub async fn follow_list(
        self,
        owner: UserId,
        list: FollowList,
        range: IdRange,
        limit: i64,
    ) -> AppResult<Vec<UserId>> {
        let (mine, theirs) = match list {
            FollowList::Followers => ("followee_id", "follower_id"),
            FollowList::Following => ("follower_id", "followee_id"),
        };
        let order = if range.closest { "ASC" } else { "DESC" };
        let mut conn = self.0.conn().await?;
        #[derive(QueryableByName)]
        struct Row {
            #[diesel(sql_type = BigInt)]
            id: UserId,
        }
        let rows: Vec<Row> = diesel::sql_query(format!(
            "SELECT f.{theirs} AS id FROM follows f JOIN users u ON u.id = f.{theirs} \
             WHERE f.{mine} = $1 AND f.{theirs} < $2 AND f.{theirs} > $3 AND u.status = 'active' \
             ORDER BY f.{theirs} {order} LIMIT $4"
        ))
        .bind::<BigInt, _>(owner)
        .bind::<BigInt, _>(range.below.unwrap_or(i64::MAX))
        .bind::<BigInt, _>(range.above.unwrap_or(0))
        .bind::<BigInt, _>(limit)
        .load(&mut conn)
        .await?;
        let mut ids: Vec<UserId> = rows.into_iter().map(|r| r.id).collect();
        if range.closest {
            ids.reverse();
        }
        Ok(ids)
    }

    /// Active accounts whose username starts with `prefix` (of `[a-z0-9_]`,
    /// as usernames are), in the byte order of their usernames, so an
    /// exact match comes first; `offset` skipped, `limit` at most; with
    /// `followed_by`, only those that user follows.
    pub async fn accounts_named_from(
        self,
        prefix: &str,
        followed_by: Option<UserId>,
        offset: i64,
        limit: i64,
    ) -> AppResult<Vec<UserId>> {
        let mut conn = self.0.conn().await?;
        #[derive(QueryableByName)]
        struct Row {
            #[diesel(sql_type = BigInt)]
            id: UserId,
        }
        // Every username is of bytes below `~`: [prefix, prefix~) holds
        // exactly the usernames that start with the prefix.
        let rows: Vec<Row> = diesel::sql_query(
            "SELECT u.id FROM users u \
             WHERE u.status = 'active' AND u.username ~>=~ $1 AND u.username ~<~ $2 \
             AND ($3 IS NULL OR EXISTS (SELECT 1 FROM follows f \
                  WHERE f.follower_id = $3 AND f.followee_id = u.id)) \
             ORDER BY u.username USING ~<~ OFFSET $4 LIMIT $5",
        )
        .bind::<Text, _>(prefix)
        .bind::<Text, _>(format!("{prefix}~"))
        .bind::<Nullable<BigInt>, _>(followed_by.map(|u| u.0))
        .bind::<BigInt, _>(offset)
        .bind::<BigInt, _>(limit)
        .load(&mut conn)
        .await?;
        Ok(rows.into_iter().map(|r| r.id).collect())
    }

    /// A post's time, deleted or not (gone once purged).
    pub async fn post_time(self, id: PostId) -> AppResult<Option<i64>> {
        use super::schema::posts;
        let mut conn = self.0.conn().await?;
        Ok(posts::table
            .find(id)
            .select(posts::created_at_ms)
            .first(&mut conn)
            .await
            .optional()?)
    }
}
