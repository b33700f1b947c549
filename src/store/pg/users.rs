//! Users, follows and the admin settings.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::feed::Count;
use super::jobs::{queue_job, queue_pair_job};
use super::models::{NewUser, SettingsRow, UserRow};
use super::schema::{blocks, follows, mutes, settings, users};
use super::PgStore;
use crate::error::{AppError, AppResult};
use crate::types::{AccountStatus, FeedSettings, JobId, User, UserId};
use crate::types::{BigVChange, JobKind};

/// Users, follows, mutes, blocks and the admin settings
/// ([`PgStore::users`]).
#[derive(Clone, Copy)]
pub struct UserRecords<'a>(pub(super) &'a PgStore);

/// The engine's big-V rule, asked under the followee's row lock: given its
/// new follower count, whether it is big-V now, and the live settings.
pub trait BigVRule: FnOnce(i64, bool, &FeedSettings) -> Option<BigVChange> + Send {}
impl<F: FnOnce(i64, bool, &FeedSettings) -> Option<BigVChange> + Send> BigVRule for F {}

/// Where a follow, unfollow, mute or unmute left the reader's view of one
/// author.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdgeChange {
    /// False when the edge already was as asked (nothing changed).
    pub changed: bool,
    /// The follower's follow sequence number after the change (or now).
    pub seq: i64,
    /// The job queued for the change, for its requester to do at once.
    pub job: Option<JobId>,
    /// The followee's new big-V epoch, if the change promoted it.
    pub promoted: Option<i64>,
    /// Whether the reader's home shows the author's posts now: followed
    /// and not muted.
    pub shown: bool,
}

/// What a follow of many authors at once did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FollowedMany {
    /// Followed by this call, in the order given.
    pub new: Vec<UserId>,
    /// Followed before.
    pub already: Vec<UserId>,
    /// Not followed: no such account, the reader itself, suspended or
    /// being deleted, across a block; and, when fitting, past
    /// `max_follows`.
    pub skipped: Vec<UserId>,
    /// The reader's follow sequence number of the change.
    pub seq: i64,
    /// The job that applies it, for its requester to do at once.
    pub job: Option<JobId>,
    /// Authors it promoted, with their new big-V epochs.
    pub promoted: Vec<(UserId, i64)>,
    /// Of the new ones, those the reader mutes (its home does not show
    /// them).
    pub muted: Vec<UserId>,
}

/// What a block changed: whether it is new, and the follows it removed,
/// (follower, followee, change) each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    pub new: bool,
    pub unfollowed: Vec<(UserId, UserId, EdgeChange)>,
}

impl UserRecords<'_> {
    pub async fn create_user(self, username: &str) -> AppResult<User> {
        let mut conn = self.0.conn().await?;
        let inserted = diesel::insert_into(users::table)
            .values(NewUser { username })
            .on_conflict_do_nothing()
            .returning(UserRow::as_returning())
            .get_result(&mut conn)
            .await
            .optional()?;
        inserted
            .map(User::from)
            .ok_or_else(|| AppError::Conflict(format!("username {username:?} is taken")))
    }

    pub async fn user(self, id: UserId) -> AppResult<Option<User>> {
        let mut conn = self.0.conn().await?;
        Ok(users::table
            .find(id)
            .select(UserRow::as_select())
            .first(&mut conn)
            .await
            .optional()?
            .map(User::from))
    }

    /// Inserts the edge (idempotent), bumps both counters and the
    /// follower's follow sequence number, queues the `follow` job and
    /// records what `rule` decides for the followee, all in one
    /// transaction. Refused (422) while either blocks the other.
    pub async fn follow(
        self,
        follower: UserId,
        followee: UserId,
        now_ms: i64,
        rule: impl BigVRule,
    ) -> AppResult<EdgeChange> {
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            lock_pair(conn, follower.0, followee.0).await?;
            if blocked_between(conn, follower.0, followee.0).await? {
                return Err(AppError::Unprocessable(format!(
                    "users {follower} and {followee}: one blocks the other"
                )));
            }
            change_edge(conn, follower, followee, true, now_ms, rule).await
        })
        .await
    }

    /// `follower` follows every author of `targets` it may (those it
    /// cannot are skipped), in one transaction: the edges, both sides'
    /// counts, its sequence number (one change for all), the big-V rule for
    /// each, and one `follows` job. Past `max_follows` the whole call is
    /// refused (422), or with `fit` the ones that do not fit are skipped.
    pub async fn follow_many(
        self,
        follower: UserId,
        targets: &[UserId],
        fit: bool,
        now_ms: i64,
        rule: impl BigVRule + Copy,
    ) -> AppResult<FollowedMany> {
        let targets = targets.to_vec();
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            // Every row touched, locked in id order (as a follow locks its
            // pair): no deadlock with a follow or a block.
            let mut rows: Vec<UserId> = targets.clone();
            rows.push(follower);
            let locked: Vec<(UserId, AccountStatus)> = users::table
                .filter(users::id.eq_any(&rows))
                .order(users::id)
                .select((users::id, users::status))
                .for_update()
                .load(conn)
                .await?;
            // The follower is checked under its lock, as a follow checks
            // its pair (`lock_pair`).
            if !locked
                .iter()
                .any(|(id, status)| *id == follower && *status == AccountStatus::Active)
            {
                return Err(AppError::NotFound(format!(
                    "user {follower} does not exist (or may not follow)"
                )));
            }
            let valid: Vec<UserId> = diesel::sql_query(
                "SELECT u.id AS n FROM users u WHERE u.id = ANY($2) AND u.id <> $1 \
                 AND u.status = 'active' AND NOT EXISTS (SELECT 1 FROM blocks b \
                    WHERE (b.blocker_id = $1 AND b.blocked_id = u.id) \
                       OR (b.blocker_id = u.id AND b.blocked_id = $1))",
            )
            .bind::<BigInt, _>(follower)
            .bind::<diesel::sql_types::Array<BigInt>, _>(&targets)
            .load::<Id>(conn)
            .await?
            .into_iter()
            .map(|r| r.n)
            .collect();
            let already: Vec<UserId> = follows::table
                .filter(follows::follower_id.eq(follower))
                .filter(follows::followee_id.eq_any(&valid))
                .select(follows::followee_id)
                .load(conn)
                .await?;
            let mut out = FollowedMany::default();
            let mut seen = std::collections::HashSet::new();
            for t in targets {
                if !seen.insert(t) {
                    continue;
                }
                if already.contains(&t) {
                    out.already.push(t);
                } else if valid.contains(&t) {
                    out.new.push(t);
                } else {
                    out.skipped.push(t);
                }
            }
            let live = settings::table
                .select(SettingsRow::as_select())
                .first(conn)
                .await?;
            let following: i64 = users::table
                .find(follower)
                .select(users::following_count)
                .first(conn)
                .await?;
            let room = (live.max_follows - following).max(0) as usize;
            if out.new.len() > room {
                if !fit {
                    return Err(AppError::Unprocessable(format!(
                        "user {follower} follows {following} accounts: {} more would pass the \
                         most allowed, {}",
                        out.new.len(),
                        live.max_follows
                    )));
                }
                out.skipped.extend(out.new.split_off(room));
            }
            out.seq = follow_seq(conn, follower).await?;
            if out.new.is_empty() {
                return Ok(out);
            }
            let edges: Vec<_> = out
                .new
                .iter()
                .map(|t| {
                    (
                        follows::follower_id.eq(follower),
                        follows::followee_id.eq(*t),
                    )
                })
                .collect();
            diesel::insert_into(follows::table)
                .values(edges)
                .execute(conn)
                .await?;
            super::notifications::followed(conn, &out.new, follower, now_ms).await?;
            out.seq = diesel::update(users::table.find(follower))
                .set((
                    users::following_count.eq(users::following_count + out.new.len() as i64),
                    users::follow_seq.eq(users::follow_seq + 1),
                ))
                .returning(users::follow_seq)
                .get_result(conn)
                .await?;
            let counted: Vec<(i64, i64, bool)> = diesel::update(users::table)
                .filter(users::id.eq_any(&out.new))
                .set(users::follower_count.eq(users::follower_count + 1))
                .returning((users::id, users::follower_count, users::big_v))
                .load(conn)
                .await?;
            let live = FeedSettings::from(live);
            for (author, count, big_v) in counted {
                if let Some(change) = rule(count, big_v, &live) {
                    if let Some(epoch) = record_big_v(conn, UserId(author), change, now_ms).await? {
                        out.promoted.push((UserId(author), epoch));
                    }
                }
            }
            out.muted = mutes::table
                .filter(mutes::muter_id.eq(follower))
                .filter(mutes::muted_id.eq_any(&out.new))
                .select(mutes::muted_id)
                .load(conn)
                .await?;
            out.job = Some(
                diesel::insert_into(super::schema::fanout_jobs::table)
                    .values(super::models::NewJob {
                        kind: JobKind::Follows.as_str(),
                        author_id: follower.0,
                        post_id: None,
                        follower_id: None,
                        epoch: Some(out.seq),
                        created_at_ms: now_ms,
                        task_id: None,
                        targets: Some(out.new.iter().map(|u| u.0).collect()),
                    })
                    .returning(super::schema::fanout_jobs::id)
                    .get_result(conn)
                    .await?,
            );
            Ok(out)
        })
        .await
    }

    /// Of `authors`, those `reader` mutes.
    pub async fn muted_of(self, reader: UserId, authors: &[UserId]) -> AppResult<Vec<UserId>> {
        let mut conn = self.0.conn().await?;
        Ok(mutes::table
            .filter(mutes::muter_id.eq(reader))
            .filter(mutes::muted_id.eq_any(authors))
            .select(mutes::muted_id)
            .load(&mut conn)
            .await?)
    }

    /// Deletes the edge (idempotent), bumps both counters and the
    /// follower's follow sequence number, queues the `unfollow` job and
    /// records what `rule` decides for the followee.
    pub async fn unfollow(
        self,
        follower: UserId,
        followee: UserId,
        now_ms: i64,
        rule: impl BigVRule,
    ) -> AppResult<EdgeChange> {
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            change_edge(conn, follower, followee, false, now_ms, rule).await
        })
        .await
    }

    /// Mutes (`mute`) or unmutes `target` for `reader` (idempotent):
    /// records it, bumps the reader's follow sequence number and queues the
    /// job that applies it, in one transaction.
    pub async fn set_mute(
        self,
        reader: UserId,
        target: UserId,
        mute: bool,
        now_ms: i64,
    ) -> AppResult<EdgeChange> {
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            if mute {
                lock_pair(conn, reader.0, target.0).await?;
            }
            let changed = (if mute {
                diesel::insert_into(mutes::table)
                    .values((
                        mutes::muter_id.eq(reader),
                        mutes::muted_id.eq(target),
                        mutes::created_at_ms.eq(now_ms),
                    ))
                    .on_conflict_do_nothing()
                    .execute(conn)
                    .await?
            } else {
                diesel::delete(mutes::table.find((reader, target)))
                    .execute(conn)
                    .await?
            }) == 1;
            if !changed {
                return Ok(EdgeChange {
                    changed,
                    seq: follow_seq(conn, reader).await?,
                    job: None,
                    promoted: None,
                    shown: shown_now(conn, reader, target).await?,
                });
            }
            queue_home_change(conn, reader, target, mute, now_ms).await
        })
        .await
    }

    /// `blocker` blocks `target` (idempotent): records it and removes the
    /// follows between them, either way, each as an unfollow (counts, the
    /// follower's sequence number, its job, the followee's big-V state),
    /// in one transaction.
    pub async fn block(
        self,
        blocker: UserId,
        target: UserId,
        now_ms: i64,
        rule: impl BigVRule + Copy,
    ) -> AppResult<Blocked> {
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            lock_pair(conn, blocker.0, target.0).await?;
            let new = diesel::insert_into(blocks::table)
                .values((
                    blocks::blocker_id.eq(blocker),
                    blocks::blocked_id.eq(target),
                    blocks::created_at_ms.eq(now_ms),
                ))
                .on_conflict_do_nothing()
                .execute(conn)
                .await?
                == 1;
            let mut unfollowed = Vec::new();
            for (follower, followee) in [(blocker, target), (target, blocker)] {
                let change = change_edge(conn, follower, followee, false, now_ms, rule).await?;
                if change.changed {
                    unfollowed.push((follower, followee, change));
                }
            }
            Ok(Blocked { new, unfollowed })
        })
        .await
    }

    /// `blocker` no longer blocks `target` (idempotent; no follow comes
    /// back). Whether a block was there.
    pub async fn unblock(self, blocker: UserId, target: UserId) -> AppResult<bool> {
        let mut conn = self.0.conn().await?;
        Ok(diesel::delete(blocks::table.find((blocker, target)))
            .execute(&mut conn)
            .await?
            == 1)
    }

    /// The accounts whose posts are in no feed: suspended, or being
    /// deleted (to build the Redis copy).
    pub async fn hidden_accounts(self) -> AppResult<Vec<UserId>> {
        let mut conn = self.0.conn().await?;
        Ok(users::table
            .filter(users::status.ne(AccountStatus::Active))
            .select(users::id)
            .load(&mut conn)
            .await?)
    }

    /// Whether either of two users blocks the other.
    pub async fn blocked_between(self, a: i64, b: i64) -> AppResult<bool> {
        let mut conn = self.0.conn().await?;
        blocked_between(&mut conn, a, b).await
    }

    /// Whether `reader`'s home shows `author`'s posts: followed, not muted.
    pub async fn shown(self, reader: UserId, author: UserId) -> AppResult<bool> {
        let mut conn = self.0.conn().await?;
        shown_now(&mut conn, reader, author).await
    }

    /// A page of the users `owner` mutes (`mutes`) or blocks, newest first
    /// by when it did, with the feed's cursor over (time, user id).
    pub async fn relations(
        self,
        owner: UserId,
        mutes: bool,
        max: Option<i64>,
        offset: u32,
        window: i64,
    ) -> AppResult<Vec<(i64, User)>> {
        #[derive(QueryableByName)]
        struct Row {
            #[diesel(sql_type = BigInt)]
            at: i64,
            #[diesel(embed)]
            user: UserRow,
        }
        let mut conn = self.0.conn().await?;
        let sql = if mutes {
            concat!(
                "SELECT r.created_at_ms AS at, u.* FROM mutes r JOIN users u ON u.id = r.muted_id \
                 WHERE r.muter_id = $1 AND r.created_at_ms <= $2 ",
                "ORDER BY r.created_at_ms DESC, u.id::text COLLATE \"C\" DESC"
            )
        } else {
            concat!(
                "SELECT r.created_at_ms AS at, u.* FROM blocks r JOIN users u ON u.id = r.blocked_id \
                 WHERE r.blocker_id = $1 AND r.created_at_ms <= $2 ",
                "ORDER BY r.created_at_ms DESC, u.id::text COLLATE \"C\" DESC"
            )
        };
        let rows: Vec<Row> = diesel::sql_query(format!("{sql} LIMIT $3"))
            .bind::<BigInt, _>(owner)
            .bind::<BigInt, _>(max.unwrap_or(i64::MAX))
            .bind::<BigInt, _>(window + i64::from(offset))
            .load(&mut conn)
            .await?;
        Ok(rows.into_iter().map(|r| (r.at, r.user.into())).collect())
    }

    /// How many of `owner`'s mutes (or blocks) were made at `at`.
    pub async fn relations_at(self, owner: UserId, mutes: bool, at: i64) -> AppResult<i64> {
        let mut conn = self.0.conn().await?;
        let sql = if mutes {
            "SELECT count(*) AS n FROM mutes WHERE muter_id = $1 AND created_at_ms = $2"
        } else {
            "SELECT count(*) AS n FROM blocks WHERE blocker_id = $1 AND created_at_ms = $2"
        };
        let row: Count = diesel::sql_query(sql)
            .bind::<BigInt, _>(owner)
            .bind::<BigInt, _>(at)
            .get_result(&mut conn)
            .await?;
        Ok(row.n)
    }

    // ----- settings -----

    pub async fn settings(self) -> AppResult<FeedSettings> {
        let mut conn = self.0.conn().await?;
        let row = settings::table
            .select(SettingsRow::as_select())
            .first(&mut conn)
            .await?;
        Ok(row.into())
    }

    /// Changes the settings under their row lock (concurrent changes apply
    /// one after the other, each to the result of the last), then brings
    /// every author in line with the new thresholds: the engine's big-V rule
    /// (promote at `big_v_threshold` or more followers, demote below
    /// `big_v_demote_threshold`) applied to all at once, each demotion with
    /// its backfill. Returns the new settings, the authors promoted (with
    /// their new epochs) and how many were demoted.
    pub async fn update_settings(
        self,
        change: impl FnOnce(&FeedSettings) -> AppResult<FeedSettings> + Send,
        now_ms: i64,
    ) -> AppResult<(FeedSettings, Vec<(i64, i64)>, usize)> {
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            let current = settings::table
                .select(SettingsRow::as_select())
                .for_update()
                .first(conn)
                .await?;
            let new = change(&current.into())?;
            diesel::update(settings::table)
                .set((
                    SettingsRow::from(&new),
                    settings::updated_at.eq(diesel::dsl::now),
                ))
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

/// Inserts or deletes the edge (idempotent) inside a transaction, bumps
/// both counters and the follower's follow sequence number, queues the
/// job, and records what `rule` decides for the followee.
async fn change_edge(
    conn: &mut AsyncPgConnection,
    follower: UserId,
    followee: UserId,
    follow: bool,
    now_ms: i64,
    rule: impl BigVRule,
) -> AppResult<EdgeChange> {
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
    // Shown unless muted or in one of the follower's exclusive lists.
    let shown = follow && shown_now(conn, follower, followee).await?;
    if !changed {
        return Ok(EdgeChange {
            changed: false,
            seq: follow_seq(conn, follower).await?,
            job: None,
            promoted: None,
            shown,
        });
    }
    if follow {
        super::notifications::followed(conn, &[followee], follower, now_ms).await?;
    } else {
        leave_lists(conn, follower, followee).await?;
    }
    let delta = if follow { 1 } else { -1 };
    let (count, big_v, (seq, following)) = bump_counts(conn, follower, followee, delta).await?;
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
    let promoted = match rule(count, big_v, &live.into()) {
        Some(change) => record_big_v(conn, followee, change, now_ms).await?,
        None => None,
    };
    Ok(EdgeChange {
        changed: true,
        seq,
        job: Some(job),
        promoted,
        shown,
    })
}

/// Locks two users' rows, in id order (no deadlock between A→B and B→A):
/// a follow and a block of the pair go one after the other. Either being
/// deleted (or gone) is refused here, under the lock: an account's
/// deletion takes the same lock, so a change of the pair either commits
/// before it (and the purge, which reads after it, undoes it) or sees it
/// (404), and never writes a row of an account being purged.
async fn lock_pair(conn: &mut AsyncPgConnection, a: i64, b: i64) -> AppResult<()> {
    let rows: Vec<(i64, AccountStatus)> = users::table
        .filter(users::id.eq_any([a, b]))
        .order(users::id)
        .select((users::id, users::status))
        .for_update()
        .load(conn)
        .await?;
    for id in [a, b] {
        if !rows
            .iter()
            .any(|(r, status)| *r == id && *status != AccountStatus::Deleted)
        {
            return Err(AppError::NotFound(format!("user {id} does not exist")));
        }
    }
    Ok(())
}

async fn blocked_between(conn: &mut AsyncPgConnection, a: i64, b: i64) -> AppResult<bool> {
    Ok(blocks::table
        .filter(
            (blocks::blocker_id.eq(a).and(blocks::blocked_id.eq(b)))
                .or(blocks::blocker_id.eq(b).and(blocks::blocked_id.eq(a))),
        )
        .count()
        .get_result::<i64>(conn)
        .await?
        > 0)
}

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = BigInt)]
    n: UserId,
}

/// An unfollow takes the followee out of every list of the follower,
/// inside the unfollow's transaction (its job takes the posts out of the
/// home: nothing more to apply).
async fn leave_lists(
    conn: &mut AsyncPgConnection,
    follower: UserId,
    followee: UserId,
) -> AppResult<()> {
    diesel::sql_query("DELETE FROM list_members WHERE owner_id = $1 AND member_id = $2")
        .bind::<BigInt, _>(follower)
        .bind::<BigInt, _>(followee)
        .execute(conn)
        .await?;
    Ok(())
}

/// Whether `reader`'s home shows `author` now: followed, and neither
/// muted nor in one of the reader's exclusive lists (`home_hides`).
async fn shown_now(
    conn: &mut AsyncPgConnection,
    reader: UserId,
    author: UserId,
) -> AppResult<bool> {
    #[derive(QueryableByName)]
    struct Shown {
        #[diesel(sql_type = Bool)]
        shown: bool,
    }
    let row: Shown = diesel::sql_query(
        "SELECT EXISTS (SELECT 1 FROM follows WHERE follower_id = $1 AND followee_id = $2) \
            AND NOT home_hides($1, $2) AS shown",
    )
    .bind::<BigInt, _>(reader)
    .bind::<BigInt, _>(author)
    .get_result(conn)
    .await?;
    Ok(row.shown)
}

/// A change of whether `reader`'s home hides `author` (`hide`: a mute, a
/// member put in an exclusive list; else their undoing), inside the
/// caller's transaction: bumps the reader's follow sequence number and
/// queues the job that applies it (a `mute` or `unmute`, which keeps the
/// inbox as it is).
pub(super) async fn queue_home_change(
    conn: &mut AsyncPgConnection,
    reader: UserId,
    author: UserId,
    hide: bool,
    now_ms: i64,
) -> AppResult<EdgeChange> {
    let seq: i64 = diesel::update(users::table.find(reader))
        .set(users::follow_seq.eq(users::follow_seq + 1))
        .returning(users::follow_seq)
        .get_result(conn)
        .await?;
    let kind = if hide { JobKind::Mute } else { JobKind::Unmute };
    let job = queue_pair_job(conn, kind, author, reader, seq, now_ms).await?;
    Ok(EdgeChange {
        changed: true,
        seq,
        job: Some(job),
        promoted: None,
        shown: shown_now(conn, reader, author).await?,
    })
}

async fn follow_seq(conn: &mut AsyncPgConnection, user: UserId) -> AppResult<i64> {
    Ok(users::table
        .find(user)
        .select(users::follow_seq)
        .first(conn)
        .await
        .optional()?
        .unwrap_or(0))
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
    follower: UserId,
    followee: UserId,
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
    author: UserId,
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
