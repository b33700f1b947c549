//! The PostgreSQL store: the records of truth, through diesel-async.
//!
//! Simple reads and writes use diesel's DSL; the feed queries that need
//! `LATERAL` or `FETCH … WITH TIES` are hand-written SQL with bound parameters.

pub mod models;
mod prepared;
pub mod schema;

use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Text};
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_async::pooled_connection::deadpool::{Object, Pool};
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod,
};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};
use futures::FutureExt;
use secrecy::ExposeSecret;

use crate::engine::cursor::Entry;
use crate::error::{AppError, AppResult, Message};
use crate::settings::DatabaseSettings;
use models::*;
use prepared::{Bind, Prepared};
use schema::{fanout_jobs, follows, posts, settings, users};

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// Ordering of every feed query: the order Redis gives (score, member bytes).
const FEED_ORDER: &str = r#"ORDER BY p.created_at_ms DESC, p.id::text COLLATE "C" DESC"#;

/// Hydration: live posts among the ids bound next, with their authors.
const HYDRATE: &str = "SELECT p.id, p.author_id, u.username, p.body, p.created_at_ms \
     FROM posts p JOIN users u ON u.id = p.author_id \
     WHERE p.deleted_at IS NULL AND p.id = ANY(";

/// Kinds of fan-out job that make readers pull the author's outbox while
/// they are pending (they deliver posts that inboxes may not hold yet).
pub const PULLING_JOB_KINDS: [&str; 2] = ["push", "backfill"];

#[derive(Clone)]
pub struct PgStore {
    pool: Pool<AsyncPgConnection>,
}

/// Outcome of a delete request, decided under the post's row lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    Deleted { author_id: i64 },
    NotFound,
    Forbidden,
}

impl PgStore {
    /// Creates the database if asked and missing, runs the embedded
    /// migrations, then opens the pool.
    pub async fn connect(settings: &DatabaseSettings) -> AppResult<Self> {
        let url = settings.url.expose_secret().to_string();
        if settings.create_if_missing {
            ensure_database(&url).await?;
        }
        run_migrations(&url).await?;
        let statement_timeout = settings.statement_timeout_ms;
        let mut config = ManagerConfig::default();
        // No `SELECT 1` round trip on every checkout: a broken connection
        // is dropped by the pool once a query on it fails.
        config.recycling_method = RecyclingMethod::Fast;
        config.custom_setup = Box::new(move |url| {
            async move {
                let mut conn = AsyncPgConnection::establish(url).await?;
                conn.batch_execute(&format!("SET statement_timeout = {statement_timeout}"))
                    .await
                    .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?;
                Ok(conn)
            }
            .boxed()
        });
        let manager =
            AsyncDieselConnectionManager::<AsyncPgConnection>::new_with_config(url, config);
        let wait = Duration::from_millis(settings.pool_timeout_ms);
        let pool = Pool::builder(manager)
            .max_size(settings.pool_size)
            .wait_timeout(Some(wait))
            .create_timeout(Some(wait))
            .recycle_timeout(Some(wait))
            .runtime(deadpool::Runtime::Tokio1)
            .build()
            .map_err(|e| AppError::internal("building the PostgreSQL pool", e))?;
        Ok(PgStore { pool })
    }

    async fn conn(&self) -> AppResult<Object<AsyncPgConnection>> {
        Ok(self.pool.get().await?)
    }

    pub async fn ping(&self) -> AppResult<()> {
        let mut conn = self.conn().await?;
        conn.batch_execute("SELECT 1").await?;
        Ok(())
    }

    // ----- users -----

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

    // ----- follows -----

    /// Inserts the edge (idempotent), bumps both counters, queues the
    /// follower's inbox merge and promotes the followee when it reaches
    /// `promote_at` followers. False when the edge already existed.
    pub async fn follow(
        &self,
        follower: i64,
        followee: i64,
        promote_at: i64,
        now_ms: i64,
    ) -> AppResult<bool> {
        let mut conn = self.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            let inserted = diesel::insert_into(follows::table)
                .values((
                    follows::follower_id.eq(follower),
                    follows::followee_id.eq(followee),
                ))
                .on_conflict_do_nothing()
                .execute(conn)
                .await?
                == 1;
            if !inserted {
                return Ok(false);
            }
            let (count, big_v) = bump_counts(conn, follower, followee, 1).await?;
            queue_follower_job(conn, "follow", followee, follower, now_ms).await?;
            if !big_v && count >= promote_at {
                promote(conn, followee, now_ms).await?;
            }
            Ok(true)
        })
        .await
    }

    /// Deletes the edge (idempotent), bumps both counters, queues the
    /// follower's inbox clean-up and demotes the followee below
    /// `demote_below` followers (queuing its backfill). False when there was
    /// no edge.
    pub async fn unfollow(
        &self,
        follower: i64,
        followee: i64,
        demote_below: i64,
        now_ms: i64,
    ) -> AppResult<bool> {
        let mut conn = self.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            let deleted = diesel::delete(follows::table.find((follower, followee)))
                .execute(conn)
                .await?
                == 1;
            if !deleted {
                return Ok(false);
            }
            let (count, big_v) = bump_counts(conn, follower, followee, -1).await?;
            queue_follower_job(conn, "unfollow", followee, follower, now_ms).await?;
            if big_v && count < demote_below {
                demote(conn, followee, now_ms).await?;
            }
            Ok(true)
        })
        .await
    }

    /// Followed authors whose outboxes `reader` must pull: big-Vs, and
    /// authors with a delivery still pending (to everyone, or to this
    /// reader after it followed them).
    pub async fn pulled_followees(&self, reader: i64) -> AppResult<Vec<PulledRow>> {
        let mut conn = self.conn().await?;
        Ok(Prepared::<(BigInt, Bool)>::new(
            &[
                "SELECT u.id, u.big_v FROM follows f JOIN users u ON u.id = f.followee_id \
                 WHERE f.follower_id = ",
                " AND (u.big_v OR EXISTS ( \
                    SELECT 1 FROM fanout_jobs j WHERE j.author_id = u.id \
                    AND (j.kind = ANY(",
                ") OR (j.kind = 'follow' AND j.follower_id = ",
                "))))",
            ],
            vec![
                Bind::BigInt(reader),
                Bind::Texts(&PULLING_JOB_KINDS[..]),
                Bind::BigInt(reader),
            ],
        )
        .load(&mut conn)
        .await?)
    }

    /// A page of an author's followers after `after`, ascending (keyset).
    pub async fn followers_after(
        &self,
        author: i64,
        after: i64,
        limit: i64,
    ) -> AppResult<Vec<i64>> {
        let mut conn = self.conn().await?;
        Ok(follows::table
            .filter(follows::followee_id.eq(author))
            .filter(follows::follower_id.gt(after))
            .order(follows::follower_id.asc())
            .select(follows::follower_id)
            .limit(limit)
            .load(&mut conn)
            .await?)
    }

    // ----- posts -----

    /// Commits a post and its fan-out job in one statement (one round trip,
    /// one transaction), deciding push or pull under the author's row lock.
    /// `None`: no such author.
    pub async fn publish(
        &self,
        author: i64,
        body: &str,
        created_at_ms: i64,
        now_ms: i64,
    ) -> AppResult<Option<Post>> {
        let mut conn = self.conn().await?;
        Ok(Prepared::<(BigInt, BigInt, Text, Text, BigInt)>::new(
            &[
                "WITH a AS (SELECT id, username, big_v FROM users WHERE id = ",
                " FOR UPDATE), \
                 p AS (INSERT INTO posts (author_id, body, created_at_ms) \
                       SELECT id, ",
                ", ",
                " FROM a RETURNING id, author_id, body, created_at_ms), \
                 j AS (INSERT INTO fanout_jobs (kind, author_id, post_id, created_at_ms) \
                       SELECT CASE WHEN a.big_v THEN 'push_active' ELSE 'push' END, a.id, p.id, ",
                " FROM a, p) \
                 SELECT p.id, p.author_id, a.username, p.body, p.created_at_ms FROM p, a",
            ],
            vec![
                Bind::BigInt(author),
                Bind::Text(body),
                Bind::BigInt(created_at_ms),
                Bind::BigInt(now_ms),
            ],
        )
        .get_result(&mut conn)
        .await
        .optional()?)
    }

    /// A live post.
    pub async fn post(&self, id: i64) -> AppResult<Option<Post>> {
        let mut conn = self.conn().await?;
        Ok(diesel::sql_query(
            "SELECT p.id, p.author_id, u.username AS author_username, p.body, p.created_at_ms \
             FROM posts p JOIN users u ON u.id = p.author_id \
             WHERE p.id = $1 AND p.deleted_at IS NULL",
        )
        .bind::<BigInt, _>(id)
        .get_result(&mut conn)
        .await
        .optional()?)
    }

    /// A post's feed entry, if it is live.
    pub async fn live_entry(&self, id: i64) -> AppResult<Option<Entry>> {
        let mut conn = self.conn().await?;
        let row: Option<i64> = posts::table
            .find(id)
            .filter(posts::deleted_at.is_null())
            .select(posts::created_at_ms)
            .first(&mut conn)
            .await
            .optional()?;
        Ok(row.map(|score| Entry::new(score, id)))
    }

    /// Marks a post deleted and queues its removal from inboxes.
    pub async fn delete_post(
        &self,
        id: i64,
        actor: Option<i64>,
        now_ms: i64,
    ) -> AppResult<Deletion> {
        let mut conn = self.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            let row: Option<(i64, bool)> = posts::table
                .find(id)
                .select((posts::author_id, posts::deleted_at.is_null()))
                .for_update()
                .first(conn)
                .await
                .optional()?;
            let author_id = match row {
                Some((author_id, true)) => author_id,
                _ => return Ok(Deletion::NotFound),
            };
            if actor.is_some_and(|a| a != author_id) {
                return Ok(Deletion::Forbidden);
            }
            diesel::sql_query("UPDATE posts SET deleted_at = now() WHERE id = $1")
                .bind::<BigInt, _>(id)
                .execute(conn)
                .await?;
            diesel::insert_into(fanout_jobs::table)
                .values(NewJob {
                    kind: "retract",
                    author_id,
                    post_id: Some(id),
                    follower_id: None,
                    since_ms: None,
                    created_at_ms: now_ms,
                })
                .execute(conn)
                .await?;
            Ok(Deletion::Deleted { author_id })
        })
        .await
    }

    /// The live posts among `ids` that belong in `scope`, in no order.
    pub async fn hydrate(&self, ids: &[i64], scope: Scope) -> AppResult<Vec<Post>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn().await?;
        let (parts, who): (&'static [&'static str], i64) = match scope {
            Scope::Home(reader) => (
                &[
                    HYDRATE,
                    ") AND EXISTS (SELECT 1 FROM follows f \
                     WHERE f.follower_id = ",
                    " AND f.followee_id = p.author_id)",
                ],
                reader,
            ),
            Scope::Author(author) => (&[HYDRATE, ") AND p.author_id = ", ""], author),
        };
        Ok(Prepared::<(BigInt, BigInt, Text, Text, BigInt)>::new(
            parts,
            vec![Bind::BigInts(ids), Bind::BigInt(who)],
        )
        .load(&mut conn)
        .await?)
    }

    /// The newest `limit` live posts of `scope` at or below `max`, in feed
    /// order: the feed straight from the records.
    pub async fn feed(&self, scope: Scope, max: i64, limit: i64) -> AppResult<Vec<Post>> {
        let mut conn = self.conn().await?;
        let sql = match scope {
            Scope::Home(_) => format!(
                "SELECT p.id, p.author_id, u.username AS author_username, p.body, p.created_at_ms \
                 FROM follows f CROSS JOIN LATERAL ( \
                    SELECT id, author_id, body, created_at_ms FROM posts \
                    WHERE author_id = f.followee_id AND deleted_at IS NULL AND created_at_ms <= $2 \
                    ORDER BY created_at_ms DESC FETCH FIRST ($3) ROWS WITH TIES) p \
                 JOIN users u ON u.id = p.author_id \
                 WHERE f.follower_id = $1 {FEED_ORDER} LIMIT $3"
            ),
            Scope::Author(_) => format!(
                "SELECT p.id, p.author_id, u.username AS author_username, p.body, p.created_at_ms \
                 FROM posts p JOIN users u ON u.id = p.author_id \
                 WHERE p.author_id = $1 AND p.deleted_at IS NULL AND p.created_at_ms <= $2 \
                 {FEED_ORDER} LIMIT $3"
            ),
        };
        Ok(diesel::sql_query(sql)
            .bind::<BigInt, _>(scope.user())
            .bind::<BigInt, _>(max)
            .bind::<BigInt, _>(limit)
            .load(&mut conn)
            .await?)
    }

    /// The newest `limit` entries of `scope` created at or after `since_ms`:
    /// what a rebuilt inbox or outbox holds, or what a backfill pushes.
    pub async fn entries(&self, scope: Scope, since_ms: i64, limit: i64) -> AppResult<Vec<Entry>> {
        let mut conn = self.conn().await?;
        let sql = match scope {
            Scope::Home(_) => format!(
                "SELECT p.id, p.created_at_ms \
                 FROM follows f CROSS JOIN LATERAL ( \
                    SELECT id, created_at_ms FROM posts \
                    WHERE author_id = f.followee_id AND deleted_at IS NULL AND created_at_ms >= $2 \
                    ORDER BY created_at_ms DESC FETCH FIRST ($3) ROWS WITH TIES) p \
                 WHERE f.follower_id = $1 {FEED_ORDER} LIMIT $3"
            ),
            Scope::Author(_) => format!(
                "SELECT p.id, p.created_at_ms FROM posts p \
                 WHERE p.author_id = $1 AND p.deleted_at IS NULL AND p.created_at_ms >= $2 \
                 {FEED_ORDER} LIMIT $3"
            ),
        };
        let rows: Vec<EntryRow> = diesel::sql_query(sql)
            .bind::<BigInt, _>(scope.user())
            .bind::<BigInt, _>(since_ms)
            .bind::<BigInt, _>(limit)
            .load(&mut conn)
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| Entry::new(r.created_at_ms, r.id))
            .collect())
    }

    // ----- settings -----

    pub async fn settings(&self) -> AppResult<SettingsRow> {
        let mut conn = self.conn().await?;
        Ok(settings::table
            .select(SettingsRow::as_select())
            .first(&mut conn)
            .await?)
    }

    /// Stores new settings and brings every author's big-V state in line
    /// with the thresholds, queuing a backfill for each demoted author.
    /// Returns (promoted, demoted) counts.
    pub async fn update_settings(
        &self,
        new: &SettingsRow,
        now_ms: i64,
    ) -> AppResult<(usize, usize)> {
        let mut conn = self.conn().await?;
        let new = new.clone();
        conn.transaction::<_, AppError, _>(async move |conn| {
            diesel::update(settings::table)
                .set((&new, settings::updated_at.eq(diesel::dsl::now)))
                .execute(conn)
                .await?;
            let promoted = diesel::update(users::table)
                .filter(users::big_v.eq(false))
                .filter(users::follower_count.ge(new.big_v_threshold))
                .set((users::big_v.eq(true), users::big_v_since_ms.eq(now_ms)))
                .execute(conn)
                .await?;
            let demoted = diesel::sql_query(
                "WITH d AS ( \
                    UPDATE users u SET big_v = FALSE, big_v_since_ms = NULL \
                    FROM users o WHERE o.id = u.id AND u.big_v AND u.follower_count < $1 \
                    RETURNING u.id, o.big_v_since_ms AS since) \
                 INSERT INTO fanout_jobs (kind, author_id, since_ms, created_at_ms) \
                 SELECT 'backfill', d.id, COALESCE(d.since, 0), $2 FROM d",
            )
            .bind::<BigInt, _>(new.big_v_demote_threshold)
            .bind::<BigInt, _>(now_ms)
            .execute(conn)
            .await?;
            Ok((promoted, demoted))
        })
        .await
    }

    // ----- fan-out jobs -----

    /// Claims the oldest job whose lease has expired, for `lease`.
    pub async fn claim_job(&self, lease: Duration) -> AppResult<Option<JobRow>> {
        let mut conn = self.conn().await?;
        Ok(diesel::sql_query(
            "UPDATE fanout_jobs SET lease_until = now() + make_interval(secs => $1::float8), \
                attempts = attempts + 1 \
             WHERE id = (SELECT id FROM fanout_jobs WHERE NOT dead AND lease_until < now() \
                         ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) \
             RETURNING id, kind, author_id, post_id, follower_id, since_ms, checkpoint, attempts, created_at_ms",
        )
        .bind::<BigInt, _>(lease.as_secs() as i64)
        .get_result(&mut conn)
        .await
        .optional()?)
    }

    /// Records progress and renews the lease.
    pub async fn checkpoint_job(&self, id: i64, checkpoint: i64, lease: Duration) -> AppResult<()> {
        let mut conn = self.conn().await?;
        diesel::sql_query(
            "UPDATE fanout_jobs SET checkpoint = $2, \
                lease_until = now() + make_interval(secs => $3::float8) WHERE id = $1",
        )
        .bind::<BigInt, _>(id)
        .bind::<BigInt, _>(checkpoint)
        .bind::<BigInt, _>(lease.as_secs() as i64)
        .execute(&mut conn)
        .await?;
        Ok(())
    }

    pub async fn finish_job(&self, id: i64) -> AppResult<()> {
        let mut conn = self.conn().await?;
        diesel::delete(fanout_jobs::table.find(id))
            .execute(&mut conn)
            .await?;
        Ok(())
    }

    /// Records a failure: retried after `retry_in`, or parked as dead. A
    /// transient failure (a store unavailable) does not count as an attempt.
    pub async fn fail_job(
        &self,
        id: i64,
        error: &str,
        retry_in: Duration,
        dead: bool,
        transient: bool,
    ) -> AppResult<()> {
        let mut conn = self.conn().await?;
        diesel::sql_query(
            "UPDATE fanout_jobs SET last_error = $2, dead = $3, \
                attempts = attempts - CASE WHEN $5 THEN 1 ELSE 0 END, \
                lease_until = now() + make_interval(secs => $4::float8) WHERE id = $1",
        )
        .bind::<BigInt, _>(id)
        .bind::<Text, _>(error)
        .bind::<diesel::sql_types::Bool, _>(dead)
        .bind::<diesel::sql_types::Double, _>(retry_in.as_secs_f64())
        .bind::<diesel::sql_types::Bool, _>(transient)
        .execute(&mut conn)
        .await?;
        Ok(())
    }

    /// Lets another worker take a job at once (graceful shutdown).
    pub async fn release_job(&self, id: i64) -> AppResult<()> {
        let mut conn = self.conn().await?;
        diesel::sql_query("UPDATE fanout_jobs SET lease_until = '-infinity' WHERE id = $1")
            .bind::<BigInt, _>(id)
            .execute(&mut conn)
            .await?;
        Ok(())
    }

    /// Jobs (pending, running, dead): pending waits for a worker; running is
    /// leased (or waiting out a retry backoff).
    pub async fn job_counts(&self) -> AppResult<(i64, i64, i64)> {
        let mut conn = self.conn().await?;
        let row: JobCounts = diesel::sql_query(
            "SELECT count(*) FILTER (WHERE NOT dead AND lease_until <= now()) AS pending, \
                    count(*) FILTER (WHERE NOT dead AND lease_until > now()) AS running, \
                    count(*) FILTER (WHERE dead) AS dead FROM fanout_jobs",
        )
        .get_result(&mut conn)
        .await?;
        Ok((row.pending, row.running, row.dead))
    }

    /// Jobs not yet done and not dead.
    pub async fn pending_jobs(&self) -> AppResult<i64> {
        let mut conn = self.conn().await?;
        Ok(fanout_jobs::table
            .filter(fanout_jobs::dead.eq(false))
            .count()
            .get_result(&mut conn)
            .await?)
    }
}

/// Whose feed a query reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// A reader's home feed: the posts of the authors it follows.
    Home(i64),
    /// One author's own posts.
    Author(i64),
}

impl Scope {
    pub fn user(self) -> i64 {
        match self {
            Scope::Home(u) | Scope::Author(u) => u,
        }
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

/// Queues the work on one follower's inbox that a follow or unfollow needs.
async fn queue_follower_job(
    conn: &mut AsyncPgConnection,
    kind: &str,
    author: i64,
    follower: i64,
    now_ms: i64,
) -> AppResult<()> {
    diesel::insert_into(fanout_jobs::table)
        .values(NewJob {
            kind,
            author_id: author,
            post_id: None,
            follower_id: Some(follower),
            since_ms: None,
            created_at_ms: now_ms,
        })
        .execute(conn)
        .await?;
    Ok(())
}

async fn promote(conn: &mut AsyncPgConnection, author: i64, now_ms: i64) -> AppResult<()> {
    diesel::update(users::table.find(author))
        .set((users::big_v.eq(true), users::big_v_since_ms.eq(now_ms)))
        .execute(conn)
        .await?;
    Ok(())
}

/// Demotes an author and queues the backfill of its big-V-era posts into
/// every follower's inbox (readers pull its outbox until that is done).
async fn demote(conn: &mut AsyncPgConnection, author: i64, now_ms: i64) -> AppResult<()> {
    let since: Option<i64> = users::table
        .find(author)
        .select(users::big_v_since_ms)
        .first(conn)
        .await?;
    diesel::update(users::table.find(author))
        .set((
            users::big_v.eq(false),
            users::big_v_since_ms.eq(None::<i64>),
        ))
        .execute(conn)
        .await?;
    diesel::insert_into(fanout_jobs::table)
        .values(NewJob {
            kind: "backfill",
            author_id: author,
            post_id: None,
            follower_id: None,
            since_ms: Some(since.unwrap_or(0)),
            created_at_ms: now_ms,
        })
        .execute(conn)
        .await?;
    Ok(())
}

/// Runs the embedded migrations on a blocking thread (the migration harness
/// is synchronous), through diesel-async's connection wrapper.
pub async fn run_migrations(url: &str) -> AppResult<()> {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || -> AppResult<()> {
        let mut conn =
            <AsyncConnectionWrapper<AsyncPgConnection> as diesel::Connection>::establish(&url)
                .map_err(|e| AppError::Unavailable {
                    what: "PostgreSQL",
                    source: e.into(),
                })?;
        conn.run_pending_migrations(MIGRATIONS)
            .map_err(|e| AppError::internal("running migrations", Message(e.to_string())))?;
        Ok(())
    })
    .await
    .map_err(|e| AppError::internal("migration task", e))?
}

/// Splits a PostgreSQL URL into (server part, database name, query).
fn url_parts(url: &str) -> AppResult<(&str, &str, Option<&str>)> {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let no_name = || {
        AppError::internal(
            "database.url",
            Message("no database name in the URL".into()),
        )
    };
    let slash = base[scheme_end..]
        .rfind('/')
        .map(|i| i + scheme_end)
        .ok_or_else(no_name)?;
    let name = &base[slash + 1..];
    if name.is_empty() {
        return Err(no_name());
    }
    Ok((&base[..slash], name, query))
}

/// The same server and options, another database.
pub fn with_database(url: &str, database: &str) -> AppResult<String> {
    let (server, _, query) = url_parts(url)?;
    Ok(match query {
        Some(q) => format!("{server}/{database}?{q}"),
        None => format!("{server}/{database}"),
    })
}

/// Splits a PostgreSQL URL into (URL of the `postgres` database, database name).
pub fn split_database_url(url: &str) -> AppResult<(String, String)> {
    let (_, name, _) = url_parts(url)?;
    Ok((with_database(url, "postgres")?, name.to_string()))
}

/// Creates the database named in `url` when it does not exist.
pub async fn ensure_database(url: &str) -> AppResult<()> {
    let (server, name) = split_database_url(url)?;
    let mut conn =
        AsyncPgConnection::establish(&server)
            .await
            .map_err(|e| AppError::Unavailable {
                what: "PostgreSQL",
                source: e.into(),
            })?;
    let exists: i64 = diesel::sql_query("SELECT count(*) AS n FROM pg_database WHERE datname = $1")
        .bind::<Text, _>(&name)
        .get_result::<Count>(&mut conn)
        .await?
        .n;
    if exists == 0 {
        let quoted = name.replace('"', "\"\"");
        match conn
            .batch_execute(&format!("CREATE DATABASE \"{quoted}\""))
            .await
        {
            Ok(()) => tracing::info!(database = %name, "created database"),
            // Another instance created it meanwhile.
            Err(diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::UniqueViolation,
                _,
            )) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Drops a database, disconnecting its sessions (tests clean up with it).
pub async fn drop_database(url: &str) -> AppResult<()> {
    let (server, name) = split_database_url(url)?;
    let mut conn =
        AsyncPgConnection::establish(&server)
            .await
            .map_err(|e| AppError::Unavailable {
                what: "PostgreSQL",
                source: e.into(),
            })?;
    let quoted = name.replace('"', "\"\"");
    conn.batch_execute(&format!(
        "DROP DATABASE IF EXISTS \"{quoted}\" WITH (FORCE)"
    ))
    .await?;
    Ok(())
}

#[derive(QueryableByName)]
struct JobCounts {
    #[diesel(sql_type = BigInt)]
    pending: i64,
    #[diesel(sql_type = BigInt)]
    running: i64,
    #[diesel(sql_type = BigInt)]
    dead: i64,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_urls_split_into_server_and_name() {
        let (server, name) =
            split_database_url("postgres://postgres@127.0.0.1:5432/feed?sslmode=disable").unwrap();
        assert_eq!(
            server,
            "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
        );
        assert_eq!(name, "feed");
        assert!(split_database_url("postgres://h:5432/").is_err());
        assert_eq!(
            with_database("postgres://postgres@h/a?x=1", "b").unwrap(),
            "postgres://postgres@h/b?x=1"
        );
    }
}
