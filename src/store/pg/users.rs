//! Users, follows and the admin settings.

use diesel::prelude::*;
use diesel::sql_types::BigInt;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::jobs::{queue_job, queue_pair_job};
use super::models::{NewUser, SettingsRow, User};
use super::schema::{follows, settings, users};
use super::PgStore;
use crate::error::{AppError, AppResult};
use crate::types::{BigVChange, JobKind};

/// The engine's big-V rule, asked under the followee's row lock: given its
/// new follower count, whether it is big-V now, and the live settings.
pub trait BigVRule: FnOnce(i64, bool, &SettingsRow) -> Option<BigVChange> + Send {}
impl<F: FnOnce(i64, bool, &SettingsRow) -> Option<BigVChange> + Send> BigVRule for F {}

/// Where a follow or unfollow left the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdgeChange {
    /// False when the edge already was as asked (nothing changed).
    pub changed: bool,
    /// The follower's follow sequence number after the change (or now).
    pub seq: i64,
    /// The job queued for the change, for its requester to do at once.
    pub job: Option<i64>,
    /// The followee's new big-V epoch, if the change promoted it.
    pub promoted: Option<i64>,
}

impl PgStore {
    pub async fn create_user(&self, username: &str) -> AppResult<User> {
        let mut conn = self.conn().await?;
        let inserted = diesel::insert_into(users::table)
            .values(NewUser { username })
            .on_conflict_do_nothing()
            .returning(User::as_returning())
            .get_result(&mut conn)
            .await
            .optional()?;
        inserted.ok_or_else(|| AppError::Conflict(format!("username {username:?} is taken")))
    }

    pub async fn user(&self, id: i64) -> AppResult<Option<User>> {
        let mut conn = self.conn().await?;
        Ok(users::table
            .find(id)
            .select(User::as_select())
            .first(&mut conn)
            .await
            .optional()?)
    }

    /// Inserts the edge (idempotent), bumps both counters and the
    /// follower's follow sequence number, queues the `follow` job and
    /// records what `rule` decides for the followee, all in one transaction.
    pub async fn follow(
        &self,
        follower: i64,
        followee: i64,
        now_ms: i64,
        rule: impl BigVRule,
    ) -> AppResult<EdgeChange> {
        self.change_edge(follower, followee, true, now_ms, rule)
            .await
    }

    /// Deletes the edge (idempotent), bumps both counters and the
    /// follower's follow sequence number, queues the `unfollow` job and
    /// records what `rule` decides for the followee.
    pub async fn unfollow(
        &self,
        follower: i64,
        followee: i64,
        now_ms: i64,
        rule: impl BigVRule,
    ) -> AppResult<EdgeChange> {
        self.change_edge(follower, followee, false, now_ms, rule)
            .await
    }

    async fn change_edge(
        &self,
        follower: i64,
        followee: i64,
        follow: bool,
        now_ms: i64,
        rule: impl BigVRule,
    ) -> AppResult<EdgeChange> {
        let mut conn = self.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            let changed = (if follow {
                diesel::insert_into(follows::table)
                    .values((
                        follows::follower_id.eq(follower),
                        follows::followee_id.eq(followee),
                    ))
                    .on_conflict_do_nothing()
                    .execute(conn)
                    .await?
            } else {
                diesel::delete(follows::table.find((follower, followee)))
                    .execute(conn)
                    .await?
            }) == 1;
            if !changed {
                let seq = users::table
                    .find(follower)
                    .select(users::follow_seq)
                    .first(conn)
                    .await
                    .optional()?
                    .unwrap_or(0);
                return Ok(EdgeChange {
                    changed: false,
                    seq,
                    job: None,
                    promoted: None,
                });
            }
            let delta = if follow { 1 } else { -1 };
            let (count, big_v, (seq, following)) =
                bump_counts(conn, follower, followee, delta).await?;
            let kind = if follow {
                JobKind::Follow
            } else {
                JobKind::Unfollow
            };
            let job = queue_pair_job(conn, kind, followee, follower, seq, now_ms).await?;
            // The thresholds as committed now, not as this instance last
            // loaded them.
            let live = settings::table
                .select(SettingsRow::as_select())
                .first(conn)
                .await?;
            if follow && following > live.max_follows {
                // The transaction rolls back: nothing changed.
                return Err(AppError::Unprocessable(format!(
                    "user {follower} follows {} accounts already, the most allowed",
                    live.max_follows
                )));
            }
            let promoted = match rule(count, big_v, &live) {
                Some(change) => record_big_v(conn, followee, change, now_ms).await?,
                None => None,
            };
            Ok(EdgeChange {
                changed: true,
                seq,
                job: Some(job),
                promoted,
            })
        })
        .await
    }

    // ----- settings -----

    pub async fn settings(&self) -> AppResult<SettingsRow> {
        let mut conn = self.conn().await?;
        Ok(settings::table
            .select(SettingsRow::as_select())
            .first(&mut conn)
            .await?)
    }

    /// Changes the settings under their row lock (concurrent changes apply
    /// one after the other, each to the result of the last), then brings
    /// every author in line with the new thresholds: the engine's big-V rule
    /// (promote at `big_v_threshold` or more followers, demote below
    /// `big_v_demote_threshold`) applied to all at once, each demotion with
    /// its backfill. Returns the new settings, the authors promoted (with
    /// their new epochs) and how many were demoted.
    pub async fn update_settings(
        &self,
        change: impl FnOnce(&SettingsRow) -> AppResult<SettingsRow> + Send,
        now_ms: i64,
    ) -> AppResult<(SettingsRow, Vec<(i64, i64)>, usize)> {
        let mut conn = self.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            let current = settings::table
                .select(SettingsRow::as_select())
                .for_update()
                .first(conn)
                .await?;
            let new = change(&current)?;
            diesel::update(settings::table)
                .set((&new, settings::updated_at.eq(diesel::dsl::now)))
                .execute(conn)
                .await?;
            let promoted: Vec<(i64, i64)> = diesel::update(users::table)
                .filter(users::big_v.eq(false))
                .filter(users::follower_count.ge(new.big_v_threshold))
                .set((
                    users::big_v.eq(true),
                    users::big_v_epoch.eq(users::big_v_epoch + 1),
                ))
                .returning((users::id, users::big_v_epoch))
                .load(conn)
                .await?;
            let demoted = diesel::sql_query(
                "WITH d AS (UPDATE users SET big_v = FALSE \
                    WHERE big_v AND follower_count < $1 RETURNING id, big_v_epoch) \
                 INSERT INTO fanout_jobs (kind, author_id, epoch, created_at_ms) \
                 SELECT $2, d.id, d.big_v_epoch, $3 FROM d",
            )
            .bind::<BigInt, _>(new.big_v_demote_threshold)
            .bind::<diesel::sql_types::Text, _>(JobKind::Backfill.as_str())
            .bind::<BigInt, _>(now_ms)
            .execute(conn)
            .await?;
            Ok((new, promoted, demoted))
        })
        .await
    }
}

/// Bumps the follower's following_count (and its follow sequence number)
/// and the followee's follower_count by `delta`, locking the two rows in id
/// order (no deadlock between A→B and B→A). Returns the followee's new
/// follower_count and big-V state, and the follower's new sequence number.
/// Bumps the follower's and the followee's counts by `delta` (rows locked
/// in id order) and the follower's follow sequence. Returns the followee's
/// follower count and big-V flag, and the follower's sequence and following
/// count.
async fn bump_counts(
    conn: &mut AsyncPgConnection,
    follower: i64,
    followee: i64,
    delta: i64,
) -> AppResult<(i64, bool, (i64, i64))> {
    let bump_follower = async |conn: &mut AsyncPgConnection| -> AppResult<(i64, i64)> {
        Ok(diesel::update(users::table.find(follower))
            .set((
                users::following_count.eq(users::following_count + delta),
                users::follow_seq.eq(users::follow_seq + 1),
            ))
            .returning((users::follow_seq, users::following_count))
            .get_result(conn)
            .await?)
    };
    let mut seq = (0, 0);
    if follower < followee {
        seq = bump_follower(conn).await?;
    }
    let (count, big_v) = diesel::update(users::table.find(followee))
        .set(users::follower_count.eq(users::follower_count + delta))
        .returning((users::follower_count, users::big_v))
        .get_result::<(i64, bool)>(conn)
        .await?;
    if follower > followee {
        seq = bump_follower(conn).await?;
    }
    Ok((count, big_v, seq))
}

/// Records a promotion (a new big-V epoch, returned) or a demotion (with
/// the backfill of its epoch a demotion owes).
async fn record_big_v(
    conn: &mut AsyncPgConnection,
    author: i64,
    change: BigVChange,
    now_ms: i64,
) -> AppResult<Option<i64>> {
    match change {
        BigVChange::Promote => Ok(Some(
            diesel::update(users::table.find(author))
                .set((
                    users::big_v.eq(true),
                    users::big_v_epoch.eq(users::big_v_epoch + 1),
                ))
                .returning(users::big_v_epoch)
                .get_result(conn)
                .await?,
        )),
        BigVChange::Demote => {
            let epoch: i64 = diesel::update(users::table.find(author))
                .set(users::big_v.eq(false))
                .returning(users::big_v_epoch)
                .get_result(conn)
                .await?;
            queue_job(
                conn,
                JobKind::Backfill,
                author,
                None,
                None,
                Some(epoch),
                now_ms,
            )
            .await?;
            Ok(None)
        }
    }
}
