//! Lists: a user's named groups of accounts it follows. Each change to a
//! list is one transaction, its caps checked inside it; a change to an
//! exclusive list's members changes what the owner's home hides, and
//! queues the jobs that apply it, in the same transaction.

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Bool, Nullable, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::filters::count;
use super::users::{queue_home_change, EdgeChange};
use super::PgStore;
use crate::error::{AppError, AppResult};
use crate::types::{ListId, UserId};

/// Lists ([`PgStore::lists`]).
#[derive(Clone, Copy)]
pub struct ListRecords<'a>(pub(super) &'a PgStore);

/// A list.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct ListRow {
    #[diesel(sql_type = BigInt)]
    pub id: ListId,
    #[diesel(sql_type = Text)]
    pub title: String,
    /// `followed`, `list` or `none`.
    #[diesel(sql_type = Text)]
    pub replies_policy: String,
    #[diesel(sql_type = Bool)]
    pub exclusive: bool,
}

/// What a change sets of a list (`None`: left as it is).
#[derive(Debug, Clone, Default)]
pub struct ListFields {
    pub title: Option<String>,
    pub replies_policy: Option<String>,
    pub exclusive: Option<bool>,
}

/// What a change of a list did to its owner's home: each member whose
/// posts it now hides (`true`) or may show again, with the change queued.
pub type HomeChanges = Vec<(UserId, bool, EdgeChange)>;

/// Why a change of members was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MembersRefused {
    /// The owner has no list of that id.
    Missing,
    /// The owner does not follow these accounts.
    NotFollowed(Vec<UserId>),
}

const COLUMNS: &str = "l.id, l.title, l.replies_policy, l.exclusive";

#[derive(QueryableByName)]
struct Member {
    #[diesel(sql_type = Nullable<BigInt>)]
    id: Option<UserId>,
}

impl ListRecords<'_> {
    /// `owner`'s lists, oldest first.
    pub async fn all(self, owner: UserId) -> AppResult<Vec<ListRow>> {
        let mut conn = self.0.conn().await?;
        Ok(diesel::sql_query(format!(
            "SELECT {COLUMNS} FROM lists l WHERE l.owner_id = $1 ORDER BY l.id"
        ))
        .bind::<BigInt, _>(owner)
        .load(&mut conn)
        .await?)
    }

    /// One of `owner`'s lists.
    pub async fn one(self, owner: UserId, list: ListId) -> AppResult<Option<ListRow>> {
        let mut conn = self.0.conn().await?;
        one(&mut conn, owner, list).await
    }

    /// `owner`'s lists that hold `member`, oldest first.
    pub async fn holding(self, owner: UserId, member: UserId) -> AppResult<Vec<ListRow>> {
        let mut conn = self.0.conn().await?;
        Ok(diesel::sql_query(format!(
            "SELECT {COLUMNS} FROM lists l JOIN list_members m ON m.list_id = l.id \
             WHERE l.owner_id = $1 AND m.member_id = $2 ORDER BY l.id"
        ))
        .bind::<BigInt, _>(owner)
        .bind::<BigInt, _>(member)
        .load(&mut conn)
        .await?)
    }

    /// The authors list `list` of `owner` shows (`feed_authors`: its
    /// members but those `owner` mutes and those not active), in id
    /// order, read with the list in one query; not found without it.
    pub async fn authors(self, owner: UserId, list: ListId) -> AppResult<Vec<UserId>> {
        let mut conn = self.0.conn().await?;
        let rows: Vec<Member> = diesel::sql_query(
            "SELECT f.a AS id FROM lists l \
             LEFT JOIN LATERAL feed_authors(l.owner_id, false, false, l.id) f ON true \
             WHERE l.id = $2 AND l.owner_id = $1 ORDER BY f.a",
        )
        .bind::<BigInt, _>(owner)
        .bind::<BigInt, _>(list)
        .load(&mut conn)
        .await?;
        if rows.is_empty() {
            return Err(no_list(list));
        }
        Ok(rows.into_iter().filter_map(|m| m.id).collect())
    }

    /// The members of `owner`'s list `list`, by account id: up to `limit`
    /// of those between `above` and `below` (each excluded), the lowest
    /// first if `lowest` else the highest; `None` without the list.
    pub async fn members(
        self,
        owner: UserId,
        list: ListId,
        (above, below): (Option<i64>, Option<i64>),
        lowest: bool,
        limit: i64,
    ) -> AppResult<Option<Vec<UserId>>> {
        let mut conn = self.0.conn().await?;
        if one(&mut conn, owner, list).await?.is_none() {
            return Ok(None);
        }
        let order = if lowest { "ASC" } else { "DESC" };
        let rows: Vec<Member> = diesel::sql_query(format!(
            "SELECT member_id AS id FROM list_members \
             WHERE list_id = $1 AND member_id > coalesce($2, -1) \
               AND member_id < coalesce($3, 9223372036854775807) \
             ORDER BY member_id {order} LIMIT $4"
        ))
        .bind::<BigInt, _>(list)
        .bind::<Nullable<BigInt>, _>(above)
        .bind::<Nullable<BigInt>, _>(below)
        .bind::<BigInt, _>(limit)
        .load(&mut conn)
        .await?;
        Ok(Some(rows.into_iter().filter_map(|m| m.id).collect()))
    }

    /// A new list of `owner` (every field set), unless it has `most`
    /// already (`None`).
    pub async fn create(
        self,
        owner: UserId,
        fields: &ListFields,
        most: i64,
        now_ms: i64,
    ) -> AppResult<Option<ListRow>> {
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            // (The owner's row, locked: two creations count one after the
            // other.)
            diesel::sql_query("SELECT id FROM users WHERE id = $1 FOR UPDATE")
                .bind::<BigInt, _>(owner)
                .execute(conn)
                .await?;
            if count(conn, "SELECT count(*) AS n FROM lists WHERE owner_id = $1", owner.0).await?
                >= most
            {
                return Ok(None);
            }
            let row: ListRow = diesel::sql_query(format!(
                "INSERT INTO lists AS l (owner_id, title, replies_policy, exclusive, created_at_ms) \
                 VALUES ($1, $2, coalesce($3, 'list'), coalesce($4, false), $5) RETURNING {COLUMNS}"
            ))
            .bind::<BigInt, _>(owner)
            .bind::<Text, _>(fields.title.clone().unwrap_or_default())
            .bind::<Nullable<Text>, _>(fields.replies_policy.as_deref())
            .bind::<Nullable<Bool>, _>(fields.exclusive)
            .bind::<BigInt, _>(now_ms)
            .get_result(conn)
            .await?;
            Ok(Some(row))
        })
        .await
    }

    /// Changes one of `owner`'s lists; `None` without it. A list made
    /// exclusive hides its members from the home, one no longer exclusive
    /// may show them again.
    pub async fn update(
        self,
        owner: UserId,
        list: ListId,
        fields: &ListFields,
        now_ms: i64,
    ) -> AppResult<Option<(ListRow, HomeChanges)>> {
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            let Some(before) = one_locked(conn, owner, list).await? else {
                return Ok(None);
            };
            let row: ListRow = diesel::sql_query(format!(
                "UPDATE lists AS l SET title = coalesce($3, title), \
                    replies_policy = coalesce($4, replies_policy), \
                    exclusive = coalesce($5, exclusive) \
                 WHERE l.owner_id = $1 AND l.id = $2 RETURNING {COLUMNS}"
            ))
            .bind::<BigInt, _>(owner)
            .bind::<BigInt, _>(list)
            .bind::<Nullable<Text>, _>(fields.title.as_deref())
            .bind::<Nullable<Text>, _>(fields.replies_policy.as_deref())
            .bind::<Nullable<Bool>, _>(fields.exclusive)
            .get_result(conn)
            .await?;
            let changes = match row.exclusive != before.exclusive {
                true => {
                    let members = all_members(conn, list).await?;
                    home_changes(conn, owner, &members, row.exclusive, now_ms).await?
                }
                false => Vec::new(),
            };
            Ok(Some((row, changes)))
        })
        .await
    }

    /// Removes one of `owner`'s lists; `None` without it. An exclusive
    /// list's members may show in the home again.
    pub async fn delete(
        self,
        owner: UserId,
        list: ListId,
        now_ms: i64,
    ) -> AppResult<Option<HomeChanges>> {
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            let Some(before) = one_locked(conn, owner, list).await? else {
                return Ok(None);
            };
            let members = all_members(conn, list).await?;
            diesel::sql_query("DELETE FROM lists WHERE id = $1")
                .bind::<BigInt, _>(list)
                .execute(conn)
                .await?;
            let changes = match before.exclusive {
                true => home_changes(conn, owner, &members, false, now_ms).await?,
                false => Vec::new(),
            };
            Ok(Some(changes))
        })
        .await
    }

    /// Adds `accounts` (each one `owner` follows) to its list `list`,
    /// unless it would hold more than `most`; those there already stay.
    pub async fn add(
        self,
        owner: UserId,
        list: ListId,
        accounts: &[UserId],
        most: i64,
        now_ms: i64,
    ) -> AppResult<Result<HomeChanges, MembersRefused>> {
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            let Some(row) = one_locked(conn, owner, list).await? else {
                return Ok(Err(MembersRefused::Missing));
            };
            // (Locked: an unfollow racing with the add waits, and then
            // takes the member out.)
            let followed: Vec<Member> = diesel::sql_query(
                "SELECT followee_id AS id FROM follows \
                 WHERE follower_id = $1 AND followee_id = ANY($2) FOR SHARE",
            )
            .bind::<BigInt, _>(owner)
            .bind::<Array<BigInt>, _>(accounts)
            .load(conn)
            .await?;
            let followed: Vec<UserId> = followed.into_iter().filter_map(|m| m.id).collect();
            let strangers: Vec<UserId> = accounts
                .iter()
                .copied()
                .filter(|a| !followed.contains(a))
                .collect();
            if !strangers.is_empty() {
                return Ok(Err(MembersRefused::NotFollowed(strangers)));
            }
            let added: Vec<Member> = diesel::sql_query(
                "INSERT INTO list_members (list_id, member_id, owner_id, created_at_ms) \
                 SELECT $1, a, $2, $4 FROM unnest($3::bigint[]) a \
                 ON CONFLICT DO NOTHING RETURNING member_id AS id",
            )
            .bind::<BigInt, _>(list)
            .bind::<BigInt, _>(owner)
            .bind::<Array<BigInt>, _>(accounts)
            .bind::<BigInt, _>(now_ms)
            .load(conn)
            .await?;
            let held = count(
                conn,
                "SELECT count(*) AS n FROM list_members WHERE list_id = $1",
                list.0,
            )
            .await?;
            if held > most {
                // (Rolled back with the transaction.)
                return Err(AppError::Unprocessable(format!(
                    "a list holds at most {most} accounts"
                )));
            }
            let added: Vec<UserId> = added.into_iter().filter_map(|m| m.id).collect();
            Ok(Ok(match row.exclusive {
                true => home_changes(conn, owner, &added, true, now_ms).await?,
                false => Vec::new(),
            }))
        })
        .await
    }

    /// Takes `accounts` out of `owner`'s list `list` (those not in it are
    /// let be); `None` without the list.
    pub async fn remove(
        self,
        owner: UserId,
        list: ListId,
        accounts: &[UserId],
        now_ms: i64,
    ) -> AppResult<Option<HomeChanges>> {
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            let Some(row) = one_locked(conn, owner, list).await? else {
                return Ok(None);
            };
            let removed: Vec<Member> = diesel::sql_query(
                "DELETE FROM list_members WHERE list_id = $1 AND member_id = ANY($2) \
                 RETURNING member_id AS id",
            )
            .bind::<BigInt, _>(list)
            .bind::<Array<BigInt>, _>(accounts)
            .load(conn)
            .await?;
            let removed: Vec<UserId> = removed.into_iter().filter_map(|m| m.id).collect();
            Ok(Some(match row.exclusive {
                true => home_changes(conn, owner, &removed, false, now_ms).await?,
                false => Vec::new(),
            }))
        })
        .await
    }
}

fn no_list(list: ListId) -> AppError {
    AppError::NotFound(format!("list {list} does not exist"))
}

async fn one(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    list: ListId,
) -> AppResult<Option<ListRow>> {
    Ok(diesel::sql_query(format!(
        "SELECT {COLUMNS} FROM lists l WHERE l.owner_id = $1 AND l.id = $2"
    ))
    .bind::<BigInt, _>(owner)
    .bind::<BigInt, _>(list)
    .get_result(conn)
    .await
    .optional()?)
}

/// One of `owner`'s lists, locked for the caller's transaction (changes
/// of one list's members and of its flag come one after the other).
async fn one_locked(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    list: ListId,
) -> AppResult<Option<ListRow>> {
    Ok(diesel::sql_query(format!(
        "SELECT {COLUMNS} FROM lists l WHERE l.owner_id = $1 AND l.id = $2 FOR UPDATE"
    ))
    .bind::<BigInt, _>(owner)
    .bind::<BigInt, _>(list)
    .get_result(conn)
    .await
    .optional()?)
}

async fn all_members(conn: &mut AsyncPgConnection, list: ListId) -> AppResult<Vec<UserId>> {
    let rows: Vec<Member> =
        diesel::sql_query("SELECT member_id AS id FROM list_members WHERE list_id = $1")
            .bind::<BigInt, _>(list)
            .load(conn)
            .await?;
    Ok(rows.into_iter().filter_map(|m| m.id).collect())
}

/// What the home of `owner` hides changed for `members` (`hide`: now
/// hidden; else perhaps shown again): one queued change each.
async fn home_changes(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    members: &[UserId],
    hide: bool,
    now_ms: i64,
) -> AppResult<HomeChanges> {
    let mut changes = Vec::with_capacity(members.len());
    for &member in members {
        let change = queue_home_change(conn, owner, member, hide, now_ms).await?;
        changes.push((member, hide, change));
    }
    Ok(changes)
}
