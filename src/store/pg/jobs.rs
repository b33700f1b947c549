//! The fan-out jobs table: a transactional outbox. A job is inserted in the
//! same transaction as the change it serves, claimed by one worker at a time
//! (`FOR UPDATE SKIP LOCKED` and a lease), checkpointed, and deleted when its
//! work is done.
//!
//! A job's own bookkeeping (its claim, checkpoints and end, and the
//! instances' heartbeats) commits without waiting for the disk (`quick!`):
//! a dozen such commits a post would otherwise queue each
//! publish's commit behind their flushes. PostgreSQL flushes its log in
//! order, so a crash of the database loses only the latest of them (at
//! most three `wal_writer_delay`s' worth, 600 ms by default), and what it
//! finds is the state of a moment before: a job claimed or
//! checkpointed earlier, or not yet finished, which runs again from there,
//! as after a worker that stopped (its writes to Redis are idempotent).
//! The changes themselves, and the jobs with them, wait for the disk.

use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Bool, Double, Integer, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::models::{JobRow, NewJob};
use super::prepared::{Bind, Prepared};
use super::schema::fanout_jobs;
use super::PgStore;
use crate::error::{AppError, AppResult, Message};
use crate::types::{Job, JobId, JobKind, Payload, PostId, TaskId, UserId, Work};

/// Claims the first job a worker may run at its pick, from the oldest or
/// the newest (`claim_job`); one text per order, so that each connection
/// prepares each once.
macro_rules! claim_sql {
    ($order:literal) => {
        concat!(
            quick!(),
            "UPDATE fanout_jobs SET lease_until = now() + make_interval(secs => $1::float8), \
                attempts = attempts + (lease_until < now())::int, instance = $3, \
                lease = (random() * 9007199254740991)::bigint \
             FROM quick WHERE id = (SELECT j.id FROM fanout_jobs j \
                 WHERE NOT j.dead AND (j.lease_until < now() OR EXISTS ( \
                     SELECT 1 FROM instances i WHERE i.id = j.instance AND i.id <> $3 \
                     AND i.seen_at < now() - make_interval(secs => $4 / 1000.0))) \
                 AND (j.follower_id IS NULL OR NOT EXISTS ( \
                     SELECT 1 FROM fanout_jobs o WHERE o.author_id = j.author_id \
                     AND o.follower_id = j.follower_id AND o.id < j.id AND NOT o.dead)) \
                 AND (j.kind <> 'retract' OR NOT EXISTS ( \
                     SELECT 1 FROM fanout_jobs d WHERE d.author_id = j.author_id \
                     AND (d.kind = 'backfill' OR d.kind = 'deliver' AND d.post_id = j.post_id) \
                     AND NOT d.dead)) \
                 AND (j.kind = ANY ($6)) = $5 \
                 ORDER BY j.id ",
            $order,
            " OFFSET $2 LIMIT 1 FOR UPDATE SKIP LOCKED) \
             RETURNING id, kind, author_id, post_id, follower_id, checkpoint, attempts, \
                created_at_ms, lease, epoch, task_id, targets"
        )
    };
}
/// The start of a bookkeeping statement that commits without waiting for
/// the disk (see the module's doc): a `quick` that the statement names in
/// its `FROM` (or `USING`), as PostgreSQL runs only what is named.
macro_rules! quick {
    () => {
        "WITH quick AS (SELECT set_config('synchronous_commit', 'off', true)) "
    };
}

const CLAIM_FROM_OLDEST: &str = claim_sql!("ASC");
const CLAIM_FROM_NEWEST: &str = claim_sql!("DESC");

/// The SQL types of a claimed job's row ([`JobRow`]).
type JobSql = (
    BigInt,
    Text,
    BigInt,
    Nullable<BigInt>,
    Nullable<BigInt>,
    BigInt,
    Integer,
    BigInt,
    BigInt,
    Nullable<BigInt>,
    Nullable<BigInt>,
    Nullable<Array<BigInt>>,
);

/// The fan-out jobs table and the instances' heartbeats
/// ([`PgStore::jobs`]).
#[derive(Clone, Copy)]
pub struct JobTable<'a>(pub(super) &'a PgStore);

/// A claimed job as stored, or why it cannot be run.
pub enum Claimed {
    Job(Job),
    /// Its kind is unknown to this binary (a newer one wrote it), or the
    /// row lacks what its kind needs: `why` says which.
    Unusable {
        id: JobId,
        lease: i64,
        why: String,
    },
}

impl From<JobRow> for Claimed {
    fn from(r: JobRow) -> Self {
        let kind = match r.kind.parse::<JobKind>() {
            Ok(kind) => kind,
            Err(unknown) => {
                return Claimed::Unusable {
                    id: JobId(r.id),
                    lease: r.lease,
                    why: unknown.to_string(),
                }
            }
        };
        let payload = Payload {
            post: r.post_id.map(PostId),
            reader: r.follower_id.map(UserId),
            epoch: r.epoch,
            task: r.task_id.map(TaskId),
            targets: r.targets.map(|t| t.into_iter().map(UserId).collect()),
        };
        match Work::of(kind, payload) {
            Ok(work) => Claimed::Job(Job {
                id: JobId(r.id),
                author_id: UserId(r.author_id),
                checkpoint: r.checkpoint,
                attempts: r.attempts,
                created_at_ms: r.created_at_ms,
                lease: r.lease,
                work,
            }),
            Err(what) => Claimed::Unusable {
                id: JobId(r.id),
                lease: r.lease,
                why: format!("a {kind} job lacking {what}"),
            },
        }
    }
}

/// How often an instance says it is alive.
pub const HEARTBEAT: Duration = Duration::from_millis(200);

/// An instance silent this long is taken for dead: its jobs are taken over
/// (without counting an attempt) whatever their leases say.
pub const QUIET_INSTANCE: Duration = Duration::from_millis(1200);

impl JobTable<'_> {
    /// Says this instance is alive (see [`QUIET_INSTANCE`]); forgets
    /// instances silent for a day.
    pub async fn heartbeat(self) -> AppResult<()> {
        // Bookkeeping of the process, not a query of a request: uncounted.
        let mut conn = self.0.uncounted_conn().await?;
        Prepared::<BigInt>::new(
            concat!(
                quick!(),
                ", gone AS (DELETE FROM instances WHERE seen_at < now() - interval '1 day') \
                 INSERT INTO instances (id, seen_at) SELECT $1, now() FROM quick \
                 ON CONFLICT (id) DO UPDATE SET seen_at = now()"
            ),
            vec![Bind::BigInt(self.0.instance)],
        )
        .execute(&mut conn)
        .await?;
        Ok(())
    }

    /// Claims a job whose lease has expired, for `lease`: the oldest
    /// (`pick` 0), the `pick`-th oldest, or with a negative `pick` the
    /// `-pick`-th newest (tests claim in every order), among the bulk kinds
    /// ([`JobKind::BULK`]) if `bulk`, else among the others (so that the
    /// order stays the primary key's, read from its index). The jobs of one
    /// (author, follower) pair are claimed one at a time, in order: a
    /// `follow` never runs before an earlier `unfollow` of the same pair has
    /// finished. A `retract` waits for its post's `deliver` and its
    /// author's `backfill`s (unless parked as dead): what they write, from
    /// a reading of the post taken before its delete, it takes out.
    pub async fn claim_job(
        self,
        lease: Duration,
        pick: i64,
        bulk: bool,
    ) -> AppResult<Option<Claimed>> {
        // Idle workers poll a few times a second: bookkeeping, uncounted.
        let mut conn = self.0.uncounted_conn().await?;
        let (text, skip) = if pick < 0 {
            (CLAIM_FROM_NEWEST, -pick - 1)
        } else {
            (CLAIM_FROM_OLDEST, pick)
        };
        let bulk_kinds = JobKind::BULK.map(JobKind::as_str);
        let binds = vec![
            Bind::BigInt(lease.as_secs() as i64),
            Bind::BigInt(skip),
            Bind::BigInt(self.0.instance),
            Bind::BigInt(QUIET_INSTANCE.as_millis() as i64),
            Bind::Bool(bulk),
            Bind::Texts(&bulk_kinds),
        ];
        let row: Option<JobRow> = Prepared::<JobSql>::new(text, binds)
            .get_result(&mut conn)
            .await
            .optional()?;
        Ok(row.map(Claimed::from))
    }

    /// Records progress and renews the lease, if it is still this holder's.
    pub async fn checkpoint_job(
        self,
        job: &Job,
        checkpoint: i64,
        lease: Duration,
    ) -> AppResult<()> {
        let mut conn = self.0.conn().await?;
        let binds = vec![
            Bind::BigInt(job.id.0),
            Bind::BigInt(job.lease),
            Bind::BigInt(checkpoint),
            Bind::BigInt(lease.as_secs() as i64),
        ];
        let n = Prepared::<BigInt>::new(
            concat!(
                quick!(),
                "UPDATE fanout_jobs SET checkpoint = $3, \
                    lease_until = now() + make_interval(secs => $4::float8) \
                 FROM quick WHERE id = $1 AND lease = $2"
            ),
            binds,
        )
        .execute(&mut conn)
        .await?;
        held(n, job.id)
    }

    /// Deletes a finished job, if its lease is still this holder's.
    pub async fn finish_job(self, id: JobId, lease: i64) -> AppResult<()> {
        let mut conn = self.0.conn().await?;
        let n = Prepared::<BigInt>::new(
            concat!(
                quick!(),
                "DELETE FROM fanout_jobs USING quick WHERE id = $1 AND lease = $2"
            ),
            vec![Bind::BigInt(id.0), Bind::BigInt(lease)],
        )
        .execute(&mut conn)
        .await?;
        held(n, id)
    }

    /// Records a failure: retried after `retry_in`, or parked as dead for an
    /// operator. A failure that is not `counted` (a store unavailable) gives
    /// the attempt back.
    pub async fn fail_job(
        self,
        id: JobId,
        lease: i64,
        error: &str,
        retry_in: Duration,
        dead: bool,
        counted: bool,
    ) -> AppResult<()> {
        let mut conn = self.0.conn().await?;
        diesel::sql_query(
            "UPDATE fanout_jobs SET last_error = $3, dead = $4, instance = NULL, \
                attempts = attempts - CASE WHEN $6 THEN 0 ELSE 1 END, \
                lease_until = now() + make_interval(secs => $5::float8) \
             WHERE id = $1 AND lease = $2",
        )
        .bind::<BigInt, _>(id)
        .bind::<BigInt, _>(lease)
        .bind::<Text, _>(error)
        .bind::<Bool, _>(dead)
        .bind::<Double, _>(retry_in.as_secs_f64())
        .bind::<Bool, _>(counted)
        .execute(&mut conn)
        .await?;
        Ok(())
    }

    /// Deletes a job its requester has done itself, unless a worker has
    /// claimed it meanwhile (that worker then does it again: harmless).
    pub async fn drop_job(self, id: JobId) -> AppResult<()> {
        let mut conn = self.0.conn().await?;
        diesel::sql_query("DELETE FROM fanout_jobs WHERE id = $1 AND attempts = 0")
            .bind::<BigInt, _>(id)
            .execute(&mut conn)
            .await?;
        Ok(())
    }

    /// Lets another worker take a job at once (graceful shutdown).
    pub async fn release_job(self, job: &Job) -> AppResult<()> {
        let mut conn = self.0.conn().await?;
        diesel::sql_query(
            "UPDATE fanout_jobs SET lease_until = '-infinity' WHERE id = $1 AND lease = $2",
        )
        .bind::<BigInt, _>(job.id)
        .bind::<BigInt, _>(job.lease)
        .execute(&mut conn)
        .await?;
        Ok(())
    }

    /// Jobs (pending, running, dead): pending waits for a worker; running is
    /// leased (or waiting out a retry backoff).
    pub async fn job_counts(self) -> AppResult<(i64, i64, i64)> {
        let mut conn = self.0.conn().await?;
        let row: JobCounts = diesel::sql_query(
            "SELECT count(*) FILTER (WHERE NOT dead AND lease_until <= now()) AS pending, \
                    count(*) FILTER (WHERE NOT dead AND lease_until > now()) AS running, \
                    count(*) FILTER (WHERE dead) AS dead FROM fanout_jobs",
        )
        .get_result(&mut conn)
        .await?;
        Ok((row.pending, row.running, row.dead))
    }

    /// Dead row versions in the jobs table, as PostgreSQL's statistics count
    /// them (jobs are inserted and deleted at the publish rate).
    pub async fn job_table_dead_rows(self) -> AppResult<i64> {
        let mut conn = self.0.conn().await?;
        let row: DeadRows = diesel::sql_query(
            "SELECT COALESCE((SELECT n_dead_tup FROM pg_stat_user_tables \
                              WHERE relid = 'fanout_jobs'::regclass), 0) AS dead",
        )
        .get_result(&mut conn)
        .await?;
        Ok(row.dead)
    }

    /// Vacuums the jobs table, unless another session holds it (an
    /// autovacuum, or another instance's vacuum).
    pub async fn vacuum_jobs(self) -> AppResult<()> {
        use diesel_async::SimpleAsyncConnection;
        let mut conn = self.0.conn().await?;
        conn.batch_execute("VACUUM (SKIP_LOCKED) fanout_jobs")
            .await?;
        Ok(())
    }

    /// Jobs not yet done and not dead.
    pub async fn pending_jobs(self) -> AppResult<i64> {
        let mut conn = self.0.conn().await?;
        Ok(fanout_jobs::table
            .filter(fanout_jobs::dead.eq(false))
            .count()
            .get_result(&mut conn)
            .await?)
    }

    /// A page of the inboxes an author's posts go to, after `after`,
    /// ascending (keyset): its followers', and its own (a reader's home
    /// holds its own posts).
    pub async fn inboxes_after(
        self,
        author: UserId,
        after: i64,
        limit: i64,
    ) -> AppResult<Vec<UserId>> {
        let mut conn = self.0.conn().await?;
        let ids: Vec<i64> = Prepared::<BigInt>::new(
            "SELECT id FROM ((SELECT follower_id AS id FROM follows \
                 WHERE followee_id = $1 AND follower_id > $2 ORDER BY follower_id LIMIT $3) \
               UNION ALL SELECT $1 WHERE $1 > $2) r ORDER BY id LIMIT $3",
            vec![
                Bind::BigInt(author.0),
                Bind::BigInt(after),
                Bind::BigInt(limit),
            ],
        )
        .load(&mut conn)
        .await?;
        Ok(ids.into_iter().map(UserId).collect())
    }
}

/// A lease lost to another worker (it expired) is an error: that worker
/// now owns the job's progress.
fn held(rows: usize, id: JobId) -> AppResult<()> {
    if rows == 1 {
        Ok(())
    } else {
        Err(AppError::internal(
            "fan-out job lease lost",
            Message(format!("job {id} is no longer held by this worker")),
        ))
    }
}

pub(super) async fn queue_job(
    conn: &mut AsyncPgConnection,
    kind: JobKind,
    author: UserId,
    post: Option<i64>,
    follower: Option<UserId>,
    epoch: Option<i64>,
    now_ms: i64,
) -> AppResult<JobId> {
    Ok(diesel::insert_into(fanout_jobs::table)
        .values(NewJob {
            kind: kind.as_str(),
            author_id: author.0,
            post_id: post,
            follower_id: follower.map(|i| i.0),
            epoch,
            created_at_ms: now_ms,
            task_id: None,
            targets: None,
        })
        .returning(fanout_jobs::id)
        .get_result(conn)
        .await?)
}

/// Queues the job a follow or unfollow needs on one follower's inbox. A job
/// of the same pair that no worker has touched yet is replaced (its work is
/// superseded), so toggling a follow queues at most one job per pair
/// besides one already running.
pub(super) async fn queue_pair_job(
    conn: &mut AsyncPgConnection,
    kind: JobKind,
    author: UserId,
    follower: UserId,
    seq: i64,
    now_ms: i64,
) -> AppResult<JobId> {
    diesel::sql_query(
        "DELETE FROM fanout_jobs WHERE author_id = $1 AND follower_id = $2 \
         AND attempts = 0 AND NOT dead AND lease_until = '-infinity'",
    )
    .bind::<BigInt, _>(author)
    .bind::<BigInt, _>(follower)
    .execute(conn)
    .await?;
    queue_job(conn, kind, author, None, Some(follower), Some(seq), now_ms).await
}

#[derive(QueryableByName)]
struct DeadRows {
    #[diesel(sql_type = BigInt)]
    dead: i64,
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
