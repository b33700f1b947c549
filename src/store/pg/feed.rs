//! Posts and the feed queries.
//!
//! A reader's home feed, as the records define it: every post (deleted ones
//! included: they keep their place, and reads hide them) of the authors the
//! reader follows, in feed order (`created_at_ms` descending, then the id's
//! decimal bytes descending). An author's page: that author's posts.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Nullable, Text};
use diesel_async::{AsyncConnection, RunQueryDsl};

use super::jobs::queue_job;
use super::models::{DeliveryRow, EntryRow, FeedRow, Post, PulledRow};
use super::prepared::{Bind, Prepared};
use super::schema::posts;
use super::{PgStore, FEED_ORDER};
use crate::error::{AppError, AppResult};
use crate::types::{feed_order, Entry, JobKind, Scope};

/// How long a publish key answers its first post.
pub const PUBLISH_KEY_HOURS: i64 = 24;

/// Outcome of an insert of a post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    New(Post),
    /// The author holds the key already (a retry running at the same time).
    KeyTaken,
    NoAuthor,
}

/// Outcome of a delete request, decided under the post's row lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    /// Deleted now; `job` writes its tombstone if the requester cannot.
    Deleted {
        author_id: i64,
        job: i64,
    },
    /// Deleted before.
    AlreadyDeleted,
    NotFound,
    Forbidden,
}

/// Whose entries [`PgStore::entries`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntriesOf {
    /// A reader's home feed (an inbox rebuild).
    Home(i64),
    /// An author's posts (an outbox rebuild, a follow).
    Author(i64),
    /// An author's pulled posts: those published while it was big-V.
    Pulled(i64),
}

/// Feed rows from a position on, in feed order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedRows {
    pub rows: Vec<FeedRow>,
    /// The rows run to the end of the feed.
    pub complete: bool,
}

impl PgStore {
    /// Commits a post and its `deliver` job in one statement (one round
    /// trip, one transaction). Under the author's row lock the post records
    /// whether it is pulled (the author is big-V) or pushed; what that means
    /// for its audience is the engine's. With a `key`, the key is recorded
    /// with the post, and if the author holds it already (a retry running
    /// at the same time) nothing is inserted: [`Published::KeyTaken`].
    pub async fn publish(
        &self,
        author: i64,
        draft: (&str, Option<&str>),
        key: Option<&str>,
        created_at_ms: i64,
        now_ms: i64,
    ) -> AppResult<Published> {
        let (body, meta) = draft;
        let mut conn = self.conn().await?;
        const END: &str = " FROM p) \
             SELECT p.id, p.author_id, a.username, p.body, p.created_at_ms, p.meta FROM p, a";
        let (parts, mut binds): (&'static [&'static str], Vec<Bind>) = match key {
            // The post's id comes from the key's row: no key row (the key
            // is taken), no post.
            Some(key) => (
                &[
                    "WITH a AS (SELECT id, username, big_v FROM users WHERE id = ",
                    " FOR UPDATE), \
                     k AS (INSERT INTO publish_keys (author_id, key, post_id) SELECT id, ",
                    ", nextval('posts_id_seq') FROM a ON CONFLICT DO NOTHING RETURNING post_id), \
                     p AS (INSERT INTO posts (id, author_id, body, meta, created_at_ms, pulled) \
                       SELECT k.post_id, a.id, ",
                    ", ",
                    ", ",
                    ", a.big_v FROM a, k RETURNING id, author_id, body, meta, created_at_ms), \
                     j AS (INSERT INTO fanout_jobs (kind, author_id, post_id, created_at_ms) \
                       SELECT ",
                    ", p.author_id, p.id, ",
                    END,
                ],
                vec![Bind::BigInt(author), Bind::Text(key)],
            ),
            None => (
                &[
                    "WITH a AS (SELECT id, username, big_v FROM users WHERE id = ",
                    " FOR UPDATE), \
                     p AS (INSERT INTO posts (author_id, body, meta, created_at_ms, pulled) \
                       SELECT a.id, ",
                    ", ",
                    ", ",
                    ", a.big_v FROM a RETURNING id, author_id, body, meta, created_at_ms), \
                     j AS (INSERT INTO fanout_jobs (kind, author_id, post_id, created_at_ms) \
                       SELECT ",
                    ", p.author_id, p.id, ",
                    END,
                ],
                vec![Bind::BigInt(author)],
            ),
        };
        binds.extend([
            Bind::Text(body),
            Bind::OptText(meta),
            Bind::BigInt(created_at_ms),
            Bind::Text(JobKind::Deliver.as_str()),
            Bind::BigInt(now_ms),
        ]);
        let post: Option<Post> =
            Prepared::<(BigInt, BigInt, Text, Text, BigInt, Nullable<Text>)>::new(parts, binds)
                .get_result(&mut conn)
                .await
                .optional()?;
        Ok(match post {
            Some(post) => Published::New(post),
            None if key.is_some() && self.user(author).await?.is_some() => Published::KeyTaken,
            None => Published::NoAuthor,
        })
    }

    /// The post `author` published with `key` in the last
    /// [`PUBLISH_KEY_HOURS`] hours, deleted since or not; forgets the key if
    /// it is older.
    pub async fn published_with(&self, author: i64, key: &str) -> AppResult<Option<Post>> {
        let mut conn = self.conn().await?;
        Ok(diesel::sql_query(format!(
            "WITH old AS (DELETE FROM publish_keys WHERE author_id = $1 AND key = $2 \
                 AND created_at <= now() - interval '{PUBLISH_KEY_HOURS} hours') \
             SELECT p.id, p.author_id, u.username AS author_username, p.body, p.created_at_ms, \
                p.meta \
             FROM publish_keys k JOIN posts p ON p.id = k.post_id \
             JOIN users u ON u.id = p.author_id \
             WHERE k.author_id = $1 AND k.key = $2 \
             AND k.created_at > now() - interval '{PUBLISH_KEY_HOURS} hours'"
        ))
        .bind::<BigInt, _>(author)
        .bind::<Text, _>(key)
        .get_result(&mut conn)
        .await
        .optional()?)
    }

    /// Forgets the publish keys older than [`PUBLISH_KEY_HOURS`]; how many.
    pub async fn forget_old_publish_keys(&self) -> AppResult<usize> {
        // Bookkeeping of the process, not a query of a request: uncounted.
        let mut conn = self.uncounted_conn().await?;
        Ok(diesel::sql_query(format!(
            "DELETE FROM publish_keys WHERE created_at <= now() - interval '{PUBLISH_KEY_HOURS} hours'"
        ))
        .execute(&mut conn)
        .await?)
    }

    /// A live post.
    pub async fn post(&self, id: i64) -> AppResult<Option<Post>> {
        let mut conn = self.conn().await?;
        Ok(diesel::sql_query(
            "SELECT p.id, p.author_id, u.username AS author_username, p.body, p.created_at_ms, \
                p.meta \
             FROM posts p JOIN users u ON u.id = p.author_id \
             WHERE p.id = $1 AND p.deleted_at IS NULL",
        )
        .bind::<BigInt, _>(id)
        .get_result(&mut conn)
        .await
        .optional()?)
    }

    /// What delivering a post needs: the post (deleted ones are delivered
    /// too: they keep their place in feeds), whether it is pulled, and its
    /// author's big-V state now.
    pub async fn delivery(&self, id: i64) -> AppResult<Option<DeliveryRow>> {
        let mut conn = self.conn().await?;
        Ok(diesel::sql_query(
            "SELECT p.author_id, u.username AS author_username, p.body, p.created_at_ms, \
                p.deleted_at IS NOT NULL AS deleted, p.meta, p.pulled, u.big_v, u.big_v_epoch \
             FROM posts p JOIN users u ON u.id = p.author_id WHERE p.id = $1",
        )
        .bind::<BigInt, _>(id)
        .get_result(&mut conn)
        .await
        .optional()?)
    }

    /// Marks a post deleted, with the `retract` job that writes its
    /// tombstone into the post cache. Its entries stay in inboxes and
    /// outboxes: reads hide it, and the cursor keeps counting it.
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
                Some((_, false)) => return Ok(Deletion::AlreadyDeleted),
                None => return Ok(Deletion::NotFound),
            };
            if actor.is_some_and(|a| a != author_id) {
                return Ok(Deletion::Forbidden);
            }
            diesel::update(posts::table.find(id))
                .set(posts::deleted_at.eq(diesel::dsl::now))
                .execute(conn)
                .await?;
            let job = queue_job(
                conn,
                JobKind::Retract,
                author_id,
                Some(id),
                None,
                None,
                now_ms,
            )
            .await?;
            Ok(Deletion::Deleted { author_id, job })
        })
        .await
    }

    /// The entries among `ids` that belong to `scope`'s feed (a post of an
    /// author the reader follows, or of the author), live or deleted.
    pub async fn hydrate(&self, ids: &[i64], scope: Scope) -> AppResult<Vec<FeedRow>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn().await?;
        let parts: &'static [&'static str] = match scope {
            Scope::Home(_) => &[
                "SELECT p.id, p.author_id, u.username, \
                 CASE WHEN p.deleted_at IS NULL THEN p.body ELSE '' END, \
                 p.created_at_ms, p.deleted_at IS NULL, CASE WHEN p.deleted_at IS NULL THEN p.meta END \
                 FROM posts p JOIN users u ON u.id = p.author_id WHERE p.id = ANY(",
                ") AND EXISTS (SELECT 1 FROM follows f WHERE f.follower_id = ",
                " AND f.followee_id = p.author_id)",
            ],
            Scope::Author(_) => &[
                "SELECT p.id, p.author_id, u.username, \
                 CASE WHEN p.deleted_at IS NULL THEN p.body ELSE '' END, \
                 p.created_at_ms, p.deleted_at IS NULL, CASE WHEN p.deleted_at IS NULL THEN p.meta END \
                 FROM posts p JOIN users u ON u.id = p.author_id WHERE p.id = ANY(",
                ") AND p.author_id = ",
                "",
            ],
        };
        Ok(
            Prepared::<(BigInt, BigInt, Text, Text, BigInt, Bool, Nullable<Text>)>::new(
                parts,
                vec![Bind::BigInts(ids), Bind::BigInt(scope.user())],
            )
            .load(&mut conn)
            .await?,
        )
    }

    /// The feed of `scope` from a position on: the entries scored exactly
    /// `max` past the first `offset` (deleted ones too: the offset counts
    /// them), then at least `window` live entries below `max` where the feed
    /// has them. The rows scored `max` are read apart from the older ones,
    /// so a deep offset costs the run of equal scores, not the offset times
    /// every followee; below `max` deleted posts are skipped by the index,
    /// so however many lie between live ones, the read stays one window
    /// (the cursor counts the deleted ones it needs with
    /// [`Self::deleted_ahead`]).
    pub async fn feed(
        &self,
        scope: Scope,
        max: Option<i64>,
        offset: u32,
        window: i64,
    ) -> AppResult<FeedRows> {
        let mut conn = self.conn().await?;
        let top = max.unwrap_or(i64::MAX);
        let who = scope.user();
        let (parts, binds): (&'static [&'static str], Vec<Bind>) = match scope {
            Scope::Home(_) => (
                &[
                    "(SELECT p.id, p.author_id, u.username, \
                     CASE WHEN p.deleted_at IS NULL THEN p.body ELSE '' END, \
                     p.created_at_ms, p.deleted_at IS NULL, CASE WHEN p.deleted_at IS NULL THEN p.meta END \
                     FROM follows f JOIN posts p ON p.author_id = f.followee_id \
                     JOIN users u ON u.id = p.author_id \
                     WHERE f.follower_id = ",
                    " AND p.created_at_ms = ",
                    " ORDER BY p.id::text COLLATE \"C\" DESC OFFSET ",
                    " LIMIT ",
                    ") UNION ALL (SELECT p.id, p.author_id, u.username, \
                     CASE WHEN p.deleted_at IS NULL THEN p.body ELSE '' END, \
                     p.created_at_ms, p.deleted_at IS NULL, CASE WHEN p.deleted_at IS NULL THEN p.meta END \
                     FROM follows f CROSS JOIN LATERAL ( \
                        SELECT id, author_id, body, meta, created_at_ms, deleted_at FROM posts \
                        WHERE author_id = f.followee_id AND deleted_at IS NULL AND created_at_ms < ",
                    " ORDER BY created_at_ms DESC FETCH FIRST (",
                    ") ROWS WITH TIES) p JOIN users u ON u.id = p.author_id \
                     WHERE f.follower_id = ",
                    " ORDER BY p.created_at_ms DESC, p.id::text COLLATE \"C\" DESC LIMIT ",
                    ")",
                ],
                vec![
                    Bind::BigInt(who),
                    Bind::BigInt(top),
                    Bind::BigInt(offset as i64),
                    Bind::BigInt(window),
                    Bind::BigInt(top),
                    Bind::BigInt(window),
                    Bind::BigInt(who),
                    Bind::BigInt(window),
                ],
            ),
            Scope::Author(_) => (
                &[
                    "(SELECT p.id, p.author_id, u.username, \
                     CASE WHEN p.deleted_at IS NULL THEN p.body ELSE '' END, \
                     p.created_at_ms, p.deleted_at IS NULL, CASE WHEN p.deleted_at IS NULL THEN p.meta END \
                     FROM posts p JOIN users u ON u.id = p.author_id \
                     WHERE p.author_id = ",
                    " AND p.created_at_ms = ",
                    " ORDER BY p.id::text COLLATE \"C\" DESC OFFSET ",
                    " LIMIT ",
                    ") UNION ALL (SELECT p.id, p.author_id, u.username, \
                     CASE WHEN p.deleted_at IS NULL THEN p.body ELSE '' END, \
                     p.created_at_ms, p.deleted_at IS NULL, CASE WHEN p.deleted_at IS NULL THEN p.meta END \
                     FROM posts p JOIN users u ON u.id = p.author_id \
                     WHERE p.author_id = ",
                    " AND p.deleted_at IS NULL AND p.created_at_ms < ",
                    " ORDER BY p.created_at_ms DESC, p.id::text COLLATE \"C\" DESC LIMIT ",
                    ")",
                ],
                vec![
                    Bind::BigInt(who),
                    Bind::BigInt(top),
                    Bind::BigInt(offset as i64),
                    Bind::BigInt(window),
                    Bind::BigInt(who),
                    Bind::BigInt(top),
                    Bind::BigInt(window),
                ],
            ),
        };
        let rows: Vec<FeedRow> =
            Prepared::<(BigInt, BigInt, Text, Text, BigInt, Bool, Nullable<Text>)>::new(
                parts, binds,
            )
            .load(&mut conn)
            .await?;
        let (mut at_max, mut below): (Vec<FeedRow>, Vec<FeedRow>) =
            rows.into_iter().partition(|r| r.created_at_ms == top);
        let order = |a: &FeedRow, b: &FeedRow| {
            feed_order(
                &Entry::new(a.created_at_ms, a.id),
                &Entry::new(b.created_at_ms, b.id),
            )
        };
        at_max.sort_by(order);
        if at_max.len() as i64 >= window {
            // More of the run may follow: the older rows cannot be joined on.
            return Ok(FeedRows {
                rows: at_max,
                complete: false,
            });
        }
        below.sort_by(order);
        let complete = (below.len() as i64) < window;
        at_max.extend(below);
        Ok(FeedRows {
            rows: at_max,
            complete,
        })
    }

    /// How many deleted entries of `scope`'s feed are scored exactly
    /// `score` and come before post `id` in feed order (their members'
    /// bytes are greater): the hidden entries a cursor at `id` has passed.
    pub async fn deleted_ahead(&self, scope: Scope, score: i64, id: i64) -> AppResult<i64> {
        let mut conn = self.conn().await?;
        let sql = match scope {
            Scope::Home(_) => {
                "SELECT count(*) AS n FROM posts p \
                 WHERE p.created_at_ms = $2 AND p.deleted_at IS NOT NULL \
                 AND p.id::text COLLATE \"C\" > $3::text COLLATE \"C\" \
                 AND EXISTS (SELECT 1 FROM follows f \
                             WHERE f.follower_id = $1 AND f.followee_id = p.author_id)"
            }
            Scope::Author(_) => {
                "SELECT count(*) AS n FROM posts p \
                 WHERE p.author_id = $1 AND p.created_at_ms = $2 AND p.deleted_at IS NOT NULL \
                 AND p.id::text COLLATE \"C\" > $3::text COLLATE \"C\""
            }
        };
        Ok(diesel::sql_query(sql)
            .bind::<BigInt, _>(scope.user())
            .bind::<BigInt, _>(score)
            .bind::<BigInt, _>(id)
            .get_result::<Count>(&mut conn)
            .await?
            .n)
    }

    /// How many entries of `scope`'s feed are scored exactly `score`.
    pub async fn count_at(&self, scope: Scope, score: i64) -> AppResult<i64> {
        let mut conn = self.conn().await?;
        let sql = match scope {
            Scope::Home(_) => {
                "SELECT count(*) AS n FROM follows f JOIN posts p ON p.author_id = f.followee_id \
                 WHERE f.follower_id = $1 AND p.created_at_ms = $2"
            }
            Scope::Author(_) => {
                "SELECT count(*) AS n FROM posts p WHERE p.author_id = $1 AND p.created_at_ms = $2"
            }
        };
        Ok(diesel::sql_query(sql)
            .bind::<BigInt, _>(scope.user())
            .bind::<BigInt, _>(score)
            .get_result::<Count>(&mut conn)
            .await?
            .n)
    }

    /// The newest `limit` entries of a feed (deleted posts included): what
    /// an inbox or outbox rebuild fills in, what a follow or a backfill
    /// pushes.
    pub async fn entries(&self, of: EntriesOf, limit: i64) -> AppResult<Vec<Entry>> {
        let mut conn = self.conn().await?;
        let (sql, who) = match of {
            EntriesOf::Home(u) => (
                format!(
                    "SELECT p.id, p.created_at_ms \
                     FROM follows f CROSS JOIN LATERAL ( \
                        SELECT id, created_at_ms FROM posts WHERE author_id = f.followee_id \
                        ORDER BY created_at_ms DESC FETCH FIRST ($2) ROWS WITH TIES) p \
                     WHERE f.follower_id = $1 {FEED_ORDER} LIMIT $2"
                ),
                u,
            ),
            EntriesOf::Author(a) => (
                format!(
                    "SELECT p.id, p.created_at_ms FROM posts p WHERE p.author_id = $1 \
                     {FEED_ORDER} LIMIT $2"
                ),
                a,
            ),
            EntriesOf::Pulled(a) => (
                format!(
                    "SELECT p.id, p.created_at_ms FROM posts p \
                     WHERE p.author_id = $1 AND p.pulled {FEED_ORDER} LIMIT $2"
                ),
                a,
            ),
        };
        let rows: Vec<EntryRow> = diesel::sql_query(sql)
            .bind::<BigInt, _>(who)
            .bind::<BigInt, _>(limit)
            .load(&mut conn)
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| Entry::new(r.created_at_ms, r.id))
            .collect())
    }

    /// Whom `reader` follows and its follow sequence number, read in one
    /// snapshot (to build the Redis copy).
    pub async fn following_state(&self, reader: i64) -> AppResult<(i64, Vec<i64>)> {
        let mut conn = self.conn().await?;
        let rows: Vec<(i64, Option<i64>)> =
            Prepared::<(BigInt, diesel::sql_types::Nullable<BigInt>)>::new(
                &[
                    "SELECT u.follow_seq, f.followee_id FROM users u \
                 LEFT JOIN follows f ON f.follower_id = u.id WHERE u.id = ",
                    "",
                ],
                vec![Bind::BigInt(reader)],
            )
            .load::<(i64, Option<i64>)>(&mut conn)
            .await?;
        let seq = <[_]>::first(&rows).map_or(0, |r| r.0);
        Ok((seq, rows.into_iter().filter_map(|r| r.1).collect()))
    }

    /// Which of `posts` still have a delivery job (done or not yet, dead
    /// included: its post is still owed to the inboxes).
    pub async fn deliveries_of(&self, posts: &[i64]) -> AppResult<Vec<i64>> {
        if posts.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn().await?;
        let rows: Vec<Count> = diesel::sql_query(
            "SELECT post_id AS n FROM fanout_jobs WHERE kind = 'deliver' AND post_id = ANY($1)",
        )
        .bind::<diesel::sql_types::Array<BigInt>, _>(posts)
        .load(&mut conn)
        .await?;
        Ok(rows.into_iter().map(|r| r.n).collect())
    }

    /// The authors every follower pulls, read in one snapshot (to build the
    /// Redis copy): big-Vs with their epoch, authors whose big-V time is
    /// being settled (a backfill, with its epoch), and the posts whose
    /// delivery is in flight.
    pub async fn pulled_state(&self) -> AppResult<Vec<PulledRow>> {
        let mut conn = self.conn().await?;
        Ok(diesel::sql_query(
            "SELECT id AS author, big_v_epoch AS epoch, NULL::bigint AS post FROM users WHERE big_v \
             UNION ALL \
             SELECT author_id, epoch, NULL FROM fanout_jobs WHERE kind = 'backfill' \
             UNION ALL \
             SELECT author_id, NULL, post_id FROM fanout_jobs WHERE kind = 'deliver'",
        )
        .load(&mut conn)
        .await?)
    }
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}
