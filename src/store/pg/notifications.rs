//! Notifications: what happened to a user that it is told of (a new
//! follower), the newest [`KEPT`] per user. Written inside the transaction
//! of what they tell of, each in a group (new followers within
//! [`GROUP_SPAN_HOURS`] of a group's first hour share its key); read
//! without those from accounts the user cannot see (suspended, blocked
//! either way, muted).

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::{IdRange, PgStore};
use crate::error::AppResult;
use crate::types::UserId;

/// Notifications kept per user at most: older ones go as new ones come.
pub const KEPT: i64 = 1000;

/// How many hours after a group's first hour a new follower still joins
/// it (Mastodon's span).
pub const GROUP_SPAN_HOURS: i64 = 12;

/// The columns a [`NotificationRow`] is read from.
const COLUMNS: &str = "n.id, n.kind, n.account_id, n.created_at_ms, n.group_key";

/// Notifications ([`PgStore::notifications`]).
#[derive(Clone, Copy)]
pub struct NotificationRecords<'a>(pub(super) &'a PgStore);

/// A notification.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct NotificationRow {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    /// `follow`.
    #[diesel(sql_type = Text)]
    pub kind: String,
    /// Whose act it tells of.
    #[diesel(sql_type = BigInt)]
    pub account_id: UserId,
    #[diesel(sql_type = BigInt)]
    pub created_at_ms: i64,
    /// The group it belongs to (`follow-<hour>`).
    #[diesel(sql_type = Text)]
    pub group_key: String,
}

/// A count or a maximum, as PostgreSQL answers it.
#[derive(QueryableByName)]
struct MaybeCount {
    #[diesel(sql_type = Nullable<BigInt>)]
    n: Option<i64>,
}

/// Which of a user's notifications a read wants.
#[derive(Debug, Clone, Default)]
pub struct NotificationFilter {
    /// Only these kinds (none: all).
    pub kinds: Option<Vec<String>>,
    /// Only from this account.
    pub account: Option<UserId>,
}

/// What a user is shown of its notifications: from active accounts it
/// neither blocks, nor is blocked by, nor mutes.
const SHOWN: &str = "JOIN users a ON a.id = n.account_id AND a.status = 'active' \
     WHERE n.user_id = $1 \
     AND NOT EXISTS (SELECT 1 FROM blocks b \
        WHERE (b.blocker_id = $1 AND b.blocked_id = n.account_id) \
           OR (b.blocker_id = n.account_id AND b.blocked_id = $1)) \
     AND NOT EXISTS (SELECT 1 FROM mutes m WHERE m.muter_id = $1 AND m.muted_id = n.account_id)";

/// A [`NotificationFilter`] as parameters `$4` (kinds) and `$5` (account).
const NARROWED: &str = "AND ($4::text[] IS NULL OR n.kind = ANY($4)) \
     AND ($5::bigint IS NULL OR n.account_id = $5)";

/// Tells each of `followees` that `follower` follows it now, in the group
/// of its newest new follower if that group began less than
/// [`GROUP_SPAN_HOURS`] ago, else in a group of this hour; trims each
/// one's notifications to the newest [`KEPT`]. Inside the follow's
/// transaction.
pub(super) async fn followed(
    conn: &mut AsyncPgConnection,
    followees: &[UserId],
    follower: UserId,
    now_ms: i64,
) -> AppResult<()> {
    diesel::sql_query(
        "INSERT INTO notifications (user_id, kind, account_id, created_at_ms, group_key) \
         SELECT u, 'follow', $2, $3, 'follow-' || coalesce( \
             (SELECT last.hour FROM ( \
                 SELECT split_part(x.group_key, '-', 2)::bigint AS hour FROM notifications x \
                 WHERE x.user_id = u AND x.kind = 'follow' ORDER BY x.id DESC LIMIT 1) last \
              WHERE last.hour + $4 > $3 / 3600000), \
             $3 / 3600000) \
         FROM unnest($1::bigint[]) u",
    )
    .bind::<Array<BigInt>, _>(followees)
    .bind::<BigInt, _>(follower)
    .bind::<BigInt, _>(now_ms)
    .bind::<BigInt, _>(GROUP_SPAN_HOURS)
    .execute(conn)
    .await?;
    diesel::sql_query(format!(
        "DELETE FROM notifications n USING ( \
            SELECT u, (SELECT x.id FROM notifications x WHERE x.user_id = u \
                       ORDER BY x.id DESC OFFSET {KEPT} LIMIT 1) AS past \
            FROM unnest($1::bigint[]) u) f \
         WHERE n.user_id = f.u AND n.id <= f.past"
    ))
    .bind::<Array<BigInt>, _>(followees)
    .execute(conn)
    .await?;
    Ok(())
}

impl NotificationRecords<'_> {
    /// Up to `limit` of `user`'s notifications within `range`, newest
    /// first (with `range.closest`, those right above `range.above`).
    pub async fn page(
        self,
        user: UserId,
        range: IdRange,
        filter: &NotificationFilter,
        limit: i64,
    ) -> AppResult<Vec<NotificationRow>> {
        let order = if range.closest { "ASC" } else { "DESC" };
        let mut conn = self.0.conn().await?;
        let mut rows: Vec<NotificationRow> = diesel::sql_query(format!(
            "SELECT {COLUMNS} FROM notifications n {SHOWN} AND n.id < $2 AND n.id > $3 {NARROWED} ORDER BY n.id {order} LIMIT $6"
        ))
        .bind::<BigInt, _>(user)
        .bind::<BigInt, _>(range.below.unwrap_or(i64::MAX))
        .bind::<BigInt, _>(range.above.unwrap_or(0))
        .bind::<Nullable<Array<Text>>, _>(filter.kinds.as_deref())
        .bind::<Nullable<BigInt>, _>(filter.account.map(|a| a.0))
        .bind::<BigInt, _>(limit)
        .load(&mut conn)
        .await?;
        if range.closest {
            rows.reverse();
        }
        Ok(rows)
    }

    /// One of `user`'s notifications, if it is shown.
    pub async fn one(self, user: UserId, id: i64) -> AppResult<Option<NotificationRow>> {
        let mut conn = self.0.conn().await?;
        Ok(diesel::sql_query(format!(
            "SELECT {COLUMNS} FROM notifications n {SHOWN} AND n.id = $2"
        ))
        .bind::<BigInt, _>(user)
        .bind::<BigInt, _>(id)
        .get_result(&mut conn)
        .await
        .optional()?)
    }

    /// The shown notifications of one of `user`'s groups, newest first.
    pub async fn group(self, user: UserId, key: &str) -> AppResult<Vec<NotificationRow>> {
        let mut conn = self.0.conn().await?;
        Ok(diesel::sql_query(format!(
            "SELECT {COLUMNS} FROM notifications n {SHOWN} AND n.group_key = $2 \
             ORDER BY n.id DESC LIMIT {KEPT}"
        ))
        .bind::<BigInt, _>(user)
        .bind::<Text, _>(key)
        .load(&mut conn)
        .await?)
    }

    /// The id of `user`'s newest notification (0 without one).
    pub async fn newest_id(self, user: UserId) -> AppResult<i64> {
        let mut conn = self.0.conn().await?;
        let newest: Option<i64> =
            diesel::sql_query("SELECT max(id) AS n FROM notifications WHERE user_id = $1")
                .bind::<BigInt, _>(user)
                .get_result::<MaybeCount>(&mut conn)
                .await?
                .n;
        Ok(newest.unwrap_or(0))
    }

    /// How many of `user`'s shown notifications that pass `filter` are
    /// above `after`, up to `limit`; with `grouped`, how many groups they
    /// make.
    pub async fn count_above(
        self,
        user: UserId,
        after: i64,
        filter: &NotificationFilter,
        grouped: bool,
        limit: i64,
    ) -> AppResult<i64> {
        let mut conn = self.0.conn().await?;
        let count: MaybeCount = diesel::sql_query(format!(
            "SELECT count(*) AS n FROM (SELECT DISTINCT \
                 CASE WHEN $6 THEN n.group_key ELSE n.id::text END \
             FROM notifications n {SHOWN} AND n.id > $2 {NARROWED} LIMIT $3) shown"
        ))
        .bind::<BigInt, _>(user)
        .bind::<BigInt, _>(after)
        .bind::<BigInt, _>(limit)
        .bind::<Nullable<Array<Text>>, _>(filter.kinds.as_deref())
        .bind::<Nullable<BigInt>, _>(filter.account.map(|a| a.0))
        .bind::<diesel::sql_types::Bool, _>(grouped)
        .get_result(&mut conn)
        .await?;
        Ok(count.n.unwrap_or(0))
    }

    /// Removes every notification of one of `user`'s groups; how many
    /// went.
    pub async fn dismiss_group(self, user: UserId, key: &str) -> AppResult<usize> {
        let mut conn = self.0.conn().await?;
        Ok(
            diesel::sql_query("DELETE FROM notifications WHERE user_id = $1 AND group_key = $2")
                .bind::<BigInt, _>(user)
                .bind::<Text, _>(key)
                .execute(&mut conn)
                .await?,
        )
    }

    /// Removes one of `user`'s notifications (`None`: all of them); how
    /// many went.
    pub async fn dismiss(self, user: UserId, id: Option<i64>) -> AppResult<usize> {
        let mut conn = self.0.conn().await?;
        Ok(diesel::sql_query(
            "DELETE FROM notifications WHERE user_id = $1 AND ($2::bigint IS NULL OR id = $2)",
        )
        .bind::<BigInt, _>(user)
        .bind::<Nullable<BigInt>, _>(id)
        .execute(&mut conn)
        .await?)
    }
}
