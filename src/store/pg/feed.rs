//! Posts and the feed queries.
//!
//! A reader's home feed, as the records define it: every live post (a
//! deleted one leaves the feed) of the authors the reader follows, in feed
//! order (`created_at_ms` descending, then the id's
//! decimal bytes descending). An author's page: that author's posts.

use std::collections::BTreeMap;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Nullable, Text};
use diesel_async::{AsyncConnection, RunQueryDsl};

use super::jobs::queue_job;
use super::models::{DeliveryRow, EntryRow, FeedRow, PostRow, PulledRow};
use super::prepared::{Bind, Prepared};
use super::schema::posts;
use super::{PgStore, FEED_ORDER};
use crate::error::{AppError, AppResult};
use crate::types::{
    feed_order, AccountStatus, Delivery, EntriesOf, Entry, FeedPost, FeedRows, JobKind, Post,
    PostId, PulledAuthor, Scope, UserId,
};

/// Posts and the feed queries ([`PgStore::posts`]).
#[derive(Clone, Copy)]
pub struct PostRecords<'a>(pub(super) &'a PgStore);

/// The feed queries, each in a file of its own (see each for its binds).
const FEED_DOWN: &str = include_str!("sql/feed_down.sql");
const FEED_UP: &str = include_str!("sql/feed_up.sql");
const HYDRATE: &str = include_str!("sql/hydrate.sql");
const PUBLISH: &str = include_str!("sql/publish.sql");

/// The SQL types of a [`FeedRow`].
type FeedRowSql = (BigInt, BigInt, Text, Text, BigInt, Bool, Nullable<Text>);

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
    /// Deleted now, with its `retract` job queued.
    Deleted {
        author_id: UserId,
        /// The post's time (its place in feeds).
        created_at_ms: i64,
    },
    /// Deleted before.
    AlreadyDeleted,
    NotFound,
    Forbidden,
}

impl PostRecords<'_> {
    /// Commits a post and its `deliver` job in one statement (one round
    /// trip, one transaction). Under the author's row lock the post records
    /// whether it is pulled (the author is big-V) or pushed; what that means
    /// for its audience is the engine's. With a `key`, the key is recorded
    /// with the post, and if the author holds it already (a retry running
    /// at the same time) nothing is inserted: [`Published::KeyTaken`].
    pub async fn publish(
        self,
        author: UserId,
        draft: (&str, Option<&str>),
        key: Option<&str>,
        created_at_ms: i64,
        now_ms: i64,
    ) -> AppResult<Published> {
        let (body, meta) = draft;
        let mut conn = self.0.conn().await?;
        let binds = vec![
            Bind::BigInt(author.0),
            Bind::OptText(key),
            Bind::Text(body),
            Bind::OptText(meta),
            Bind::BigInt(created_at_ms),
            Bind::Text(JobKind::Deliver.as_str()),
            Bind::BigInt(now_ms),
        ];
        let post: Option<PostRow> =
            Prepared::<(BigInt, BigInt, Text, Text, BigInt, Nullable<Text>)>::new(PUBLISH, binds)
                .get_result(&mut conn)
                .await
                .optional()?;
        Ok(match post {
            Some(post) => Published::New(post.into()),
            None if key.is_some()
                && self
                    .0
                    .users()
                    .user(author)
                    .await?
                    .is_some_and(|u| u.status == AccountStatus::Active) =>
            {
                Published::KeyTaken
            }
            None => Published::NoAuthor,
        })
    }

    /// The post `author` published with `key` in the last
    /// [`PUBLISH_KEY_HOURS`] hours, deleted since or not; forgets the key if
    /// it is older.
    pub async fn published_with(self, author: UserId, key: &str) -> AppResult<Option<Post>> {
        let mut conn = self.0.conn().await?;
        let row: Option<PostRow> = diesel::sql_query(format!(
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
        .optional()?;
        Ok(row.map(Post::from))
    }

    /// Forgets the publish keys older than [`PUBLISH_KEY_HOURS`]; how many.
    pub async fn forget_old_publish_keys(self) -> AppResult<usize> {
        // Bookkeeping of the process, not a query of a request: uncounted.
        let mut conn = self.0.uncounted_conn().await?;
        Ok(diesel::sql_query(format!(
            "DELETE FROM publish_keys WHERE created_at <= now() - interval '{PUBLISH_KEY_HOURS} hours'"
        ))
        .execute(&mut conn)
        .await?)
    }

    /// A live post of an active account.
    pub async fn post(self, id: PostId) -> AppResult<Option<Post>> {
        let mut conn = self.0.conn().await?;
        let row: Option<PostRow> = diesel::sql_query(
            "SELECT p.id, p.author_id, u.username AS author_username, p.body, p.created_at_ms, \
                p.meta \
             FROM posts p JOIN users u ON u.id = p.author_id \
             WHERE p.id = $1 AND p.deleted_at IS NULL AND u.status = 'active'",
        )
        .bind::<BigInt, _>(id)
        .get_result(&mut conn)
        .await
        .optional()?;
        Ok(row.map(Post::from))
    }

    /// What delivering a post needs: the post (deleted ones are delivered
    /// too: they keep their place in feeds), whether it is pulled, and its
    /// author's big-V state now.
    pub async fn delivery(self, id: PostId) -> AppResult<Option<Delivery>> {
        let mut conn = self.0.conn().await?;
        let row: Option<DeliveryRow> = diesel::sql_query(
            "SELECT p.author_id, u.username AS author_username, p.body, p.created_at_ms, \
                p.deleted_at IS NOT NULL AS deleted, p.meta, p.pulled, u.big_v, u.big_v_epoch \
             FROM posts p JOIN users u ON u.id = p.author_id WHERE p.id = $1",
        )
        .bind::<BigInt, _>(id)
        .get_result(&mut conn)
        .await
        .optional()?;
        Ok(row.map(Delivery::from))
    }

    /// Marks a post deleted, with the `retract` job that writes its
    /// tombstone into the post cache and takes its entries out of its
    /// outbox and inboxes. Pages leave it out from now on.
    pub async fn delete_post(
        self,
        id: PostId,
        actor: Option<UserId>,
        now_ms: i64,
    ) -> AppResult<Deletion> {
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            let row: Option<(i64, i64, bool)> = posts::table
                .find(id)
                .select((
                    posts::author_id,
                    posts::created_at_ms,
                    posts::deleted_at.is_null(),
                ))
                .for_update()
                .first(conn)
                .await
                .optional()?;
            let (author_id, created_at_ms) = match row {
                Some((author_id, at, true)) => (author_id, at),
                Some((_, _, false)) => return Ok(Deletion::AlreadyDeleted),
                None => return Ok(Deletion::NotFound),
            };
            if actor.is_some_and(|a| a != UserId(author_id)) {
                return Ok(Deletion::Forbidden);
            }
            diesel::update(posts::table.find(id))
                .set(posts::deleted_at.eq(diesel::dsl::now))
                .execute(conn)
                .await?;
            queue_job(
                conn,
                JobKind::Retract,
                UserId(author_id),
                Some(id.0),
                None,
                None,
                now_ms,
            )
            .await?;
            Ok(Deletion::Deleted {
                author_id: UserId(author_id),
                created_at_ms,
            })
        })
        .await
    }

    /// The entries among `ids` that belong to `scope`'s feed (a post of an
    /// author the reader follows, or its own with `own`; or of the author),
    /// live or deleted.
    pub async fn hydrate(self, ids: &[PostId], scope: Scope) -> AppResult<Vec<FeedPost>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.0.conn().await?;
        let mut binds = scope_of(scope).to_vec();
        binds.push(Bind::Posts(ids));
        let rows: Vec<FeedRow> = Prepared::<FeedRowSql>::new(HYDRATE, binds)
            .load(&mut conn)
            .await?;
        Ok(rows.into_iter().map(FeedPost::from).collect())
    }

    /// The feed of `scope` from a position on: the entries scored exactly
    /// `max` past the first `offset`, then at least `window` entries below
    /// `max` where the feed has them (live posts only). The rows scored
    /// `max` are read apart from the older ones, so a deep offset costs the
    /// run of equal scores, not the offset times every followee; deleted
    /// posts are skipped by the index of live ones, so however many lie
    /// between live ones, the read stays one window.
    pub async fn feed(
        self,
        scope: Scope,
        max: Option<i64>,
        offset: u32,
        window: i64,
    ) -> AppResult<FeedRows> {
        let mut conn = self.0.conn().await?;
        let top = max.unwrap_or(i64::MAX);
        let mut binds = scope_of(scope).to_vec();
        binds.extend([
            Bind::BigInt(top),
            Bind::BigInt(i64::from(offset)),
            Bind::BigInt(window),
        ]);
        let rows: Vec<FeedRow> = Prepared::<FeedRowSql>::new(FEED_DOWN, binds)
            .load(&mut conn)
            .await?;
        let (mut at_max, mut below): (Vec<FeedRow>, Vec<FeedRow>) =
            rows.into_iter().partition(|r| r.created_at_ms == top);
        let order = |a: &FeedRow, b: &FeedRow| feed_order(&a.entry(), &b.entry());
        at_max.sort_by(order);
        if at_max.len() as i64 >= window {
            // More of the run may follow: the older rows cannot be joined on.
            return Ok(FeedRows {
                rows: at_max.into_iter().map(FeedPost::from).collect(),
                complete: false,
            });
        }
        below.sort_by(order);
        let complete = (below.len() as i64) < window;
        at_max.extend(below);
        Ok(FeedRows {
            rows: at_max.into_iter().map(FeedPost::from).collect(),
            complete,
        })
    }

    /// The feed of `scope` from the run of entries scored `min` up, in
    /// feed order: every entry of that score, then at least `window`
    /// entries above it where the feed has them (live posts only), read
    /// oldest first. `complete`: the rows reach
    /// the top of the feed.
    pub async fn feed_up(self, scope: Scope, min: i64, window: i64) -> AppResult<FeedRows> {
        let mut conn = self.0.conn().await?;
        let mut binds = scope_of(scope).to_vec();
        binds.extend([Bind::BigInt(min), Bind::BigInt(window)]);
        let mut rows: Vec<FeedRow> = Prepared::<FeedRowSql>::new(FEED_UP, binds)
            .load(&mut conn)
            .await?;
        let above = rows.iter().filter(|r| r.created_at_ms > min).count() as i64;
        rows.sort_by(|a, b| feed_order(&a.entry(), &b.entry()));
        Ok(FeedRows {
            rows: rows.into_iter().map(FeedPost::from).collect(),
            complete: above < window,
        })
    }

    /// How many entries of `scope`'s feed are scored exactly `score` and
    /// come at or after post `id` in feed order (their members' bytes are
    /// not greater): the run of `score` from that post down.
    pub async fn count_from(self, scope: Scope, score: i64, id: PostId) -> AppResult<i64> {
        let mut conn = self.0.conn().await?;
        let query = diesel::sql_query(
            "SELECT count(*) AS n FROM posts p \
             WHERE p.created_at_ms = $2 AND p.deleted_at IS NULL \
             AND p.id::text COLLATE \"C\" <= $3::text COLLATE \"C\" \
             AND p.author_id IN (SELECT a FROM feed_authors($1, $4, $5, $6))",
        )
        .into_boxed()
        .bind::<BigInt, _>(scope.user())
        .bind::<BigInt, _>(score)
        .bind::<BigInt, _>(id);
        Ok(scope_binds(query, scope)
            .get_result::<Count>(&mut conn)
            .await?
            .n)
    }

    /// How many entries of `scope`'s feed are scored exactly `score`.
    pub async fn count_at(self, scope: Scope, score: i64) -> AppResult<i64> {
        let mut conn = self.0.conn().await?;
        let query = diesel::sql_query(
            "SELECT count(*) AS n FROM posts p \
             WHERE p.created_at_ms = $2 AND p.deleted_at IS NULL \
             AND p.author_id IN (SELECT a FROM feed_authors($1, $3, $4, $5))",
        )
        .into_boxed()
        .bind::<BigInt, _>(scope.user())
        .bind::<BigInt, _>(score);
        Ok(scope_binds(query, scope)
            .get_result::<Count>(&mut conn)
            .await?
            .n)
    }

    /// The newest `limit` entries of a feed (live posts only): what
    /// an inbox or outbox rebuild fills in, what a follow or a backfill
    /// pushes.
    pub async fn entries(self, of: EntriesOf, limit: i64) -> AppResult<Vec<Entry>> {
        let mut conn = self.0.conn().await?;
        let (sql, who) = match of {
            // An inbox holds the posts pushed to its reader: of the authors
            // it follows, and its own.
            EntriesOf::Home(u) => (
                format!(
                    "SELECT p.id, p.created_at_ms \
                     FROM (SELECT followee_id AS a FROM follows WHERE follower_id = $1 \
                           UNION ALL SELECT $1) f CROSS JOIN LATERAL ( \
                        SELECT id, created_at_ms FROM posts \
                        WHERE author_id = f.a AND deleted_at IS NULL \
                        ORDER BY created_at_ms DESC FETCH FIRST ($2) ROWS WITH TIES) p \
                     {FEED_ORDER} LIMIT $2"
                ),
                u,
            ),
            EntriesOf::Author(a) => (
                format!(
                    "SELECT p.id, p.created_at_ms FROM posts p \
                     WHERE p.author_id = $1 AND p.deleted_at IS NULL {FEED_ORDER} LIMIT $2"
                ),
                a,
            ),
            // The newest `limit` live posts, and the deleted ones not older
            // than the oldest of them (all of them if there are fewer), at
            // most `limit` more.
            EntriesOf::Held(a) => (
                format!(
                    "SELECT p.id, p.created_at_ms FROM posts p WHERE p.author_id = $1 \
                     AND (p.deleted_at IS NULL OR p.created_at_ms >= coalesce( \
                        (SELECT CASE WHEN count(*) < $2 THEN NULL ELSE min(l.created_at_ms) END \
                         FROM (SELECT created_at_ms FROM posts \
                               WHERE author_id = $1 AND deleted_at IS NULL \
                               ORDER BY created_at_ms DESC LIMIT $2) l), \
                        p.created_at_ms)) \
                     {FEED_ORDER} LIMIT $2 * 2"
                ),
                a,
            ),
            EntriesOf::Pulled(a) => (
                format!(
                    "SELECT p.id, p.created_at_ms FROM posts p \
                     WHERE p.author_id = $1 AND p.pulled AND p.deleted_at IS NULL \
                     {FEED_ORDER} LIMIT $2"
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
            .map(|r| Entry::new(r.created_at_ms, PostId(r.id)))
            .collect())
    }

    /// Those of `entries` that are posts of `author`, deleted ones
    /// included: what an unfollow takes out of an inbox.
    pub async fn authored_by(self, author: UserId, entries: &[Entry]) -> AppResult<Vec<Entry>> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<PostId> = entries.iter().map(|e| e.id).collect();
        let mut conn = self.0.conn().await?;
        let rows: Vec<EntryRow> = diesel::sql_query(
            "SELECT id, created_at_ms FROM posts WHERE author_id = $1 AND id = ANY($2)",
        )
        .bind::<BigInt, _>(author)
        .bind::<diesel::sql_types::Array<BigInt>, _>(ids)
        .load(&mut conn)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| Entry::new(r.created_at_ms, PostId(r.id)))
            .collect())
    }

    /// The newest `limit` entries of each of `authors` (live posts only),
    /// by author: what a follow of many copies.
    pub async fn entries_of_many(
        self,
        authors: &[UserId],
        limit: i64,
    ) -> AppResult<Vec<(UserId, Vec<Entry>)>> {
        #[derive(QueryableByName)]
        struct Row {
            #[diesel(sql_type = BigInt)]
            author_id: UserId,
            #[diesel(sql_type = BigInt)]
            id: PostId,
            #[diesel(sql_type = BigInt)]
            created_at_ms: i64,
        }
        let mut conn = self.0.conn().await?;
        let rows: Vec<Row> = diesel::sql_query(format!(
            "SELECT p.author_id, p.id, p.created_at_ms FROM unnest($1::bigint[]) a(id) \
             CROSS JOIN LATERAL (SELECT p.author_id, p.id, p.created_at_ms FROM posts p \
                WHERE p.author_id = a.id AND p.deleted_at IS NULL {FEED_ORDER} LIMIT $2) p"
        ))
        .bind::<diesel::sql_types::Array<BigInt>, _>(authors)
        .bind::<BigInt, _>(limit)
        .load(&mut conn)
        .await?;
        let mut by_author: std::collections::BTreeMap<UserId, Vec<Entry>> = Default::default();
        for r in rows {
            by_author
                .entry(r.author_id)
                .or_default()
                .push(Entry::new(r.created_at_ms, r.id));
        }
        for entries in by_author.values_mut() {
            entries.sort_by(feed_order);
        }
        Ok(by_author.into_iter().collect())
    }

    /// Whom `reader`'s home shows (whom it follows but its home hides:
    /// muted, or in an exclusive list) and
    /// its follow sequence number, read in one snapshot (to build the Redis
    /// copy). Not found for no account, or one being deleted.
    pub async fn following_state(self, reader: UserId) -> AppResult<(i64, Vec<UserId>)> {
        let mut conn = self.0.conn().await?;
        let rows: Vec<(i64, Option<i64>)> =
            Prepared::<(BigInt, diesel::sql_types::Nullable<BigInt>)>::new(
                "SELECT u.follow_seq, f.followee_id FROM users u \
                 LEFT JOIN follows f ON f.follower_id = u.id \
                    AND NOT home_hides(u.id, f.followee_id) \
                 WHERE u.status <> 'deleted' AND u.id = $1",
                vec![Bind::BigInt(reader.0)],
            )
            .load::<(i64, Option<i64>)>(&mut conn)
            .await?;
        if rows.is_empty() {
            // No account, or one being deleted: no home.
            return Err(AppError::NotFound(format!("user {reader} does not exist")));
        }
        let seq = <[_]>::first(&rows).map_or(0, |r| r.0);
        Ok((
            seq,
            rows.into_iter().filter_map(|r| r.1.map(UserId)).collect(),
        ))
    }

    /// Whom each of `readers` follows and its home does not hide (their homes'
    /// authors but themselves): one query for many readers. Readers that
    /// follow nobody (or are no account) are absent.
    pub async fn followees_of_many(
        self,
        readers: &[UserId],
    ) -> AppResult<std::collections::HashMap<UserId, Vec<UserId>>> {
        #[derive(QueryableByName)]
        struct Edge {
            #[diesel(sql_type = BigInt)]
            follower_id: UserId,
            #[diesel(sql_type = BigInt)]
            followee_id: UserId,
        }
        let mut conn = self.0.conn().await?;
        let edges: Vec<Edge> = diesel::sql_query(
            "SELECT f.follower_id, f.followee_id FROM follows f \
             WHERE f.follower_id = ANY($1) AND NOT home_hides(f.follower_id, f.followee_id)",
        )
        .bind::<diesel::sql_types::Array<BigInt>, _>(readers)
        .load(&mut conn)
        .await?;
        let mut out = std::collections::HashMap::<UserId, Vec<UserId>>::new();
        for e in edges {
            out.entry(e.follower_id).or_default().push(e.followee_id);
        }
        Ok(out)
    }

    /// Which of `posts` still have a delivery job (done or not yet, dead
    /// included: its post is still owed to the inboxes).
    pub async fn deliveries_of(self, posts: &[PostId]) -> AppResult<Vec<PostId>> {
        if posts.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.0.conn().await?;
        let rows: Vec<Count> = diesel::sql_query(
            "SELECT post_id AS n FROM fanout_jobs WHERE kind = 'deliver' AND post_id = ANY($1)",
        )
        .bind::<diesel::sql_types::Array<BigInt>, _>(posts)
        .load(&mut conn)
        .await?;
        Ok(rows.into_iter().map(|r| PostId(r.n)).collect())
    }

    /// The authors every follower pulls, read in one snapshot (to build the
    /// Redis copy): big-Vs with their epoch, authors whose big-V time is
    /// being settled (a backfill, with its epoch), and the posts whose
    /// delivery is in flight.
    pub async fn pulled_state(self) -> AppResult<Vec<PulledAuthor>> {
        let mut conn = self.0.conn().await?;
        let rows: Vec<PulledRow> = diesel::sql_query(
            "SELECT id AS author, big_v_epoch AS epoch, NULL::bigint AS post FROM users WHERE big_v \
             UNION ALL \
             SELECT author_id, epoch, NULL FROM fanout_jobs WHERE kind = 'backfill' \
             UNION ALL \
             SELECT author_id, NULL, post_id FROM fanout_jobs WHERE kind = 'deliver'",
        )
        .load(&mut conn)
        .await?;
        let mut by_author: BTreeMap<i64, PulledAuthor> = BTreeMap::new();
        for row in rows {
            let a = by_author.entry(row.author).or_insert(PulledAuthor {
                author: UserId(row.author),
                epoch: None,
                in_flight: Vec::new(),
            });
            // `None` (no big-V time) is below every epoch.
            a.epoch = a.epoch.max(row.epoch);
            a.in_flight.extend(row.post.map(PostId));
        }
        Ok(by_author.into_values().collect())
    }
}

/// The binds `feed_authors` takes for `scope`, in its order: the user,
/// whether the scope is a home, whether that home shows its reader's own
/// posts, the list (or NULL).
fn scope_of(scope: Scope) -> [Bind<'static>; 4] {
    let (home, own, list) = flags(scope);
    [
        Bind::BigInt(scope.user().0),
        Bind::Bool(home),
        Bind::Bool(own),
        Bind::OptBigInt(list),
    ]
}

/// Binds `feed_authors`'s flags and list after a query's own binds (the
/// user is the query's first).
fn scope_binds(query: BoxedSql, scope: Scope) -> BoxedSql {
    let (home, own, list) = flags(scope);
    query
        .bind::<Bool, _>(home)
        .bind::<Bool, _>(own)
        .bind::<diesel::sql_types::Nullable<BigInt>, _>(list)
}

/// Whether `scope` is a home, whether it shows its reader's own posts (an
/// author's page shows them all), and its list if it is one.
fn flags(scope: Scope) -> (bool, bool, Option<i64>) {
    match scope {
        Scope::Home { own, .. } => (true, own, None),
        Scope::Author(_) => (false, true, None),
        Scope::List { list, .. } => (false, false, Some(list.0)),
    }
}

type BoxedSql =
    diesel::query_builder::BoxedSqlQuery<'static, diesel::pg::Pg, diesel::query_builder::SqlQuery>;

#[derive(QueryableByName)]
pub(super) struct Count {
    #[diesel(sql_type = BigInt)]
    pub(super) n: i64,
}
