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

    /// Inserts the edge (idempotent), bumps both counters, queues the
    /// follower's `follow` job and records what `rule` decides for the
    /// followee, all in one transaction. False when the edge existed.
    pub async fn follow(
        &self,
        follower: i64,
        followee: i64,
        now_ms: i64,
        rule: impl BigVRule,
    ) -> AppResult<bool> {
        self.change_edge(follower, followee, true, now_ms, rule)
            .await
    }

    /// Deletes the edge (idempotent), bumps both counters, queues the
    /// follower's `unfollow` job and records what `rule` decides for the
    /// followee. False when there was no edge.
    pub async fn unfollow(
        &self,
        follower: i64,
        followee: i64,
        now_ms: i64,
        rule: impl BigVRule,
    ) -> AppResult<bool> {
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
    ) -> AppResult<bool> {
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
                return Ok(false);
            }
            let delta = if follow { 1 } else { -1 };
            let (count, big_v) = bump_counts(conn, follower, followee, delta).await?;
            let kind = if follow {
                JobKind::Follow
            } else {
                JobKind::Unfollow
            };
            queue_pair_job(conn, kind, followee, follower, now_ms).await?;
            // The thresholds as committed now, not as this instance last
            // loaded them.
            let live = settings::table
                .select(SettingsRow::as_select())
                .first(conn)
                .await?;
            if let Some(change) = rule(count, big_v, &live) {
                record_big_v(conn, followee, change, now_ms).await?;
            }
            Ok(true)
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
    /// its backfill. Returns (new settings, promoted, demoted).
    pub async fn update_settings(
        &self,
        change: impl FnOnce(&SettingsRow) -> AppResult<SettingsRow> + Send,
        now_ms: i64,
    ) -> AppResult<(SettingsRow, usize, usize)> {
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
            let promoted = diesel::update(users::table)
                .filter(users::big_v.eq(false))
                .filter(users::follower_count.ge(new.big_v_threshold))
                .set(users::big_v.eq(true))
                .execute(conn)
                .await?;
            let demoted = diesel::sql_query(
                "WITH d AS (UPDATE users SET big_v = FALSE \
                    WHERE big_v AND follower_count < $1 RETURNING id) \
                 INSERT INTO fanout_jobs (kind, author_id, created_at_ms) \
                 SELECT $2, d.id, $3 FROM d",
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

/// Bumps the follower's following_count and the followee's follower_count
/// by `delta`, locking the two rows in id order (no deadlock between A→B and
/// B→A). Returns the followee's new follower_count and big-V state.
async fn bump_counts(
    conn: &mut AsyncPgConnection,
    follower: i64,
    followee: i64,
    delta: i64,
) -> AppResult<(i64, bool)> {
    let bump_follower = async |conn: &mut AsyncPgConnection| -> AppResult<()> {
        diesel::update(users::table.find(follower))
            .set(users::following_count.eq(users::following_count + delta))
            .execute(conn)
            .await?;
        Ok(())
    };
    if follower < followee {
        bump_follower(conn).await?;
    }
    let (count, big_v) = diesel::update(users::table.find(followee))
        .set(users::follower_count.eq(users::follower_count + delta))
        .returning((users::follower_count, users::big_v))
        .get_result::<(i64, bool)>(conn)
        .await?;
    if follower > followee {
        bump_follower(conn).await?;
    }
    Ok((count, big_v))
}

/// Records a promotion or a demotion (with the backfill a demotion owes).
async fn record_big_v(
    conn: &mut AsyncPgConnection,
    author: i64,
    change: BigVChange,
    now_ms: i64,
) -> AppResult<()> {
    let big_v = change == BigVChange::Promote;
    diesel::update(users::table.find(author))
        .set(users::big_v.eq(big_v))
        .execute(conn)
        .await?;
    if change == BigVChange::Demote {
        queue_job(conn, JobKind::Backfill, author, None, None, now_ms).await?;
    }
    Ok(())
}
