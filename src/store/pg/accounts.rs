//! Accounts' status (suspended, deleted), the purge of a deleted account,
//! and the tasks users watch.

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Text};
use diesel_async::{AsyncConnection, RunQueryDsl};

use super::models::{NewJob, TaskRow, UserRow};
use super::schema::{fanout_jobs, users};
use super::PgStore;
use crate::error::{AppError, AppResult};
use crate::types::{AccountStatus, JobId, JobKind, PostId, Task, TaskId, TaskState, User, UserId};

/// Suspended and deleted accounts, their purge, and tasks
/// ([`PgStore::accounts`]).
#[derive(Clone, Copy)]
pub struct AccountRecords<'a>(pub(super) &'a PgStore);

/// The columns of a [`TaskRow`].
const TASK_COLUMNS: &str = "id, kind, user_id, state, total, done, skipped, \
     (extract(epoch FROM created_at) * 1000)::bigint AS created_at_ms, \
     (extract(epoch FROM finished_at) * 1000)::bigint AS finished_at_ms";

/// How long a task is kept once it has ended.
pub const TASK_KEPT_DAYS: i64 = 7;

/// What a status change committed: the account as it is now, and the job
/// that brings the hidden accounts in Redis in line (for its requester to
/// do at once).
#[derive(Debug, Clone)]
pub struct StatusChange {
    pub user: User,
    pub job: JobId,
}

impl AccountRecords<'_> {
    /// Moves an account from one of `from` to `to`, with the `hide` job
    /// that tells Redis. `None`: no account in one of `from` with that id.
    pub async fn set_status(
        self,
        id: i64,
        from: &[AccountStatus],
        to: AccountStatus,
        now_ms: i64,
    ) -> AppResult<Option<StatusChange>> {
        let from = from.to_vec();
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            let user: Option<UserRow> =
                diesel::update(users::table.find(id).filter(users::status.eq_any(&from)))
                    .set(users::status.eq(to))
                    .returning(UserRow::as_returning())
                    .get_result(conn)
                    .await
                    .optional()?;
            let Some(user) = user else {
                return Ok(None);
            };
            let job = insert_job(conn, JobKind::Hide, UserId(id), None, now_ms).await?;
            Ok(Some(StatusChange {
                user: user.into(),
                job,
            }))
        })
        .await
    }

    /// Marks an account deleted (unless it is already), with its `hide`
    /// job and the `purge` job and task that remove the rest: its follows
    /// either way and its posts count as the task's work. `None`: no such
    /// account, or deleted already.
    pub async fn delete_account(self, id: UserId, now_ms: i64) -> AppResult<Option<(Task, JobId)>> {
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            let marked = diesel::update(
                users::table
                    .find(id)
                    .filter(users::status.ne(AccountStatus::Deleted)),
            )
            .set(users::status.eq(AccountStatus::Deleted))
            .execute(conn)
            .await?;
            if marked == 0 {
                return Ok(None);
            }
            let task: TaskRow = diesel::sql_query(format!(
                "INSERT INTO tasks (kind, user_id, total) SELECT 'delete_account', $1, \
                    (SELECT count(*) FROM follows WHERE follower_id = $1 OR followee_id = $1) \
                    + (SELECT count(*) FROM posts WHERE author_id = $1) \
                 RETURNING {TASK_COLUMNS}"
            ))
            .bind::<BigInt, _>(id)
            .get_result(conn)
            .await?;
            let hide = insert_job(conn, JobKind::Hide, id, None, now_ms).await?;
            insert_job(conn, JobKind::Purge, id, Some(TaskId(task.id)), now_ms).await?;
            Ok(Some((task.try_into()?, hide)))
        })
        .await
    }

    /// The newest deletion task of an account (deleted already, or being).
    pub async fn deletion_of(self, account: UserId) -> AppResult<Option<Task>> {
        let mut conn = self.0.conn().await?;
        let row: Option<TaskRow> = diesel::sql_query(format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE kind = 'delete_account' AND user_id = $1 \
             ORDER BY id DESC LIMIT 1"
        ))
        .bind::<BigInt, _>(account)
        .get_result(&mut conn)
        .await
        .optional()?;
        row.map(Task::try_from).transpose()
    }

    /// An import of follows by `follower`: its task, its list in chunks of
    /// `IMPORT_CHUNK` ids, and the `import` job that follows them. At
    /// most `most_open` imports of one user may be queued or running: the
    /// follower's row is locked while they are counted, so that concurrent
    /// imports cannot pass the cap together (429).
    pub async fn create_import(
        self,
        follower: UserId,
        targets: &[UserId],
        most_open: usize,
        now_ms: i64,
    ) -> AppResult<Task> {
        let targets = targets.to_vec();
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            let active: Option<i64> = users::table
                .find(follower)
                .filter(users::status.eq(AccountStatus::Active))
                .select(users::id)
                .for_update()
                .first(conn)
                .await
                .optional()?;
            if active.is_none() {
                return Err(AppError::NotFound(format!(
                    "user {follower} does not exist (or may not follow)"
                )));
            }
            let open = open_imports(conn, follower).await?;
            if open >= most_open as i64 {
                return Err(too_many_imports(follower, open));
            }
            let task: TaskRow = diesel::sql_query(format!(
                "INSERT INTO tasks (kind, user_id, total) \
                 VALUES ('import_follows', $1, $2) RETURNING {TASK_COLUMNS}"
            ))
            .bind::<BigInt, _>(follower)
            .bind::<BigInt, _>(targets.len() as i64)
            .get_result(conn)
            .await?;
            diesel::sql_query(
                "INSERT INTO import_chunks (task_id, n, ids) \
                 SELECT $1, g, $2[g * $3 + 1 : g * $3 + $3] \
                 FROM generate_series(0, (cardinality($2) - 1) / $3) g",
            )
            .bind::<BigInt, _>(task.id)
            .bind::<Array<BigInt>, _>(&targets)
            .bind::<BigInt, _>(IMPORT_CHUNK as i64)
            .execute(conn)
            .await?;
            insert_job(
                conn,
                JobKind::Import,
                follower,
                Some(TaskId(task.id)),
                now_ms,
            )
            .await?;
            task.try_into()
        })
        .await
    }

    /// Refuses (429) when `user` already has `most_open` imports queued or
    /// running: what the import route checks before it reads a body.
    pub async fn import_room(self, user: UserId, most_open: usize) -> AppResult<()> {
        let mut conn = self.0.conn().await?;
        let open = open_imports(&mut conn, user).await?;
        if open >= most_open as i64 {
            return Err(too_many_imports(user, open));
        }
        Ok(())
    }

    /// The ids of an import's list after the first `from`: one chunk.
    /// Every chunk but the last is full, so a `from` that is not a multiple
    /// of `IMPORT_CHUNK` is past the end. (A task an older release
    /// queued keeps its list whole: sliced.)
    pub async fn import_batch(self, task: TaskId, from: i64, limit: i64) -> AppResult<Vec<UserId>> {
        use super::schema::import_chunks;
        if from % IMPORT_CHUNK as i64 != 0 {
            return Ok(Vec::new());
        }
        let mut conn = self.0.conn().await?;
        let chunk: Option<Vec<UserId>> = import_chunks::table
            .find((task, from / IMPORT_CHUNK as i64))
            .select(import_chunks::ids)
            .first(&mut conn)
            .await
            .optional()?;
        if let Some(ids) = chunk {
            return Ok(ids);
        }
        #[derive(QueryableByName)]
        struct Slice {
            #[diesel(sql_type = diesel::sql_types::Nullable<Array<BigInt>>)]
            ids: Option<Vec<UserId>>,
        }
        let slice: Option<Slice> =
            diesel::sql_query("SELECT targets[$2 + 1 : $2 + $3] AS ids FROM tasks WHERE id = $1")
                .bind::<BigInt, _>(task)
                .bind::<BigInt, _>(from)
                .bind::<BigInt, _>(limit)
                .get_result(&mut conn)
                .await
                .optional()?;
        Ok(slice.and_then(|s| s.ids).unwrap_or_default())
    }

    /// A task, if it is there (kept [`TASK_KEPT_DAYS`] after it ends).
    pub async fn task(self, id: TaskId) -> AppResult<Option<Task>> {
        let mut conn = self.0.conn().await?;
        let row: Option<TaskRow> =
            diesel::sql_query(format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1"))
                .bind::<BigInt, _>(id)
                .get_result(&mut conn)
                .await
                .optional()?;
        row.map(Task::try_from).transpose()
    }

    /// Records a task's progress: `done` and `skipped` more units, and its
    /// state (`running`, or `done` / `failed` with its end).
    pub async fn task_progress(
        self,
        id: TaskId,
        done: i64,
        skipped: i64,
        state: TaskState,
    ) -> AppResult<()> {
        let mut conn = self.0.conn().await?;
        let ended = matches!(state, TaskState::Done | TaskState::Failed);
        diesel::sql_query(
            "UPDATE tasks SET done = done + $2, skipped = skipped + $3, state = $4, \
                finished_at = CASE WHEN $5 THEN now() END, \
                targets = CASE WHEN $5 THEN NULL ELSE targets END \
             WHERE id = $1",
        )
        .bind::<BigInt, _>(id)
        .bind::<BigInt, _>(done)
        .bind::<BigInt, _>(skipped)
        .bind::<Text, _>(state.as_str())
        .bind::<diesel::sql_types::Bool, _>(ended)
        .execute(&mut conn)
        .await?;
        if ended {
            // An ended import keeps no list.
            diesel::sql_query("DELETE FROM import_chunks WHERE task_id = $1")
                .bind::<BigInt, _>(id)
                .execute(&mut conn)
                .await?;
        }
        Ok(())
    }

    /// Forgets the tasks ended more than [`TASK_KEPT_DAYS`] ago.
    pub async fn forget_old_tasks(self) -> AppResult<usize> {
        let mut conn = self.0.uncounted_conn().await?;
        Ok(diesel::sql_query(format!(
            "DELETE FROM tasks WHERE finished_at < now() - interval '{TASK_KEPT_DAYS} days'"
        ))
        .execute(&mut conn)
        .await?)
    }

    /// Whether an account's posts are hidden now: it is suspended, or
    /// being deleted (a purged account is gone: nothing to hide).
    pub async fn hidden(self, id: UserId) -> AppResult<bool> {
        let mut conn = self.0.conn().await?;
        let status: Option<AccountStatus> = users::table
            .find(id)
            .select(users::status)
            .first(&mut conn)
            .await
            .optional()?;
        Ok(status.is_some_and(|s| s != AccountStatus::Active))
    }

    // ----- the purge of a deleted account, a batch at a time -----

    /// The first `limit` of `account`'s followers (`followers`) or of whom
    /// it follows, ascending.
    pub async fn edges_of(
        self,
        account: UserId,
        followers: bool,
        limit: i64,
    ) -> AppResult<Vec<UserId>> {
        use super::schema::follows;
        let mut conn = self.0.conn().await?;
        Ok(if followers {
            follows::table
                .filter(follows::followee_id.eq(account))
                .order(follows::follower_id)
                .select(follows::follower_id)
                .limit(limit)
                .load(&mut conn)
                .await?
        } else {
            follows::table
                .filter(follows::follower_id.eq(account))
                .order(follows::followee_id)
                .select(follows::followee_id)
                .limit(limit)
                .load(&mut conn)
                .await?
        })
    }

    /// Removes `account`'s follows by `followers`, each follower's count
    /// with it, in one transaction. How many were there.
    pub async fn drop_followers(self, account: UserId, followers: &[UserId]) -> AppResult<usize> {
        let mut conn = self.0.conn().await?;
        Ok(diesel::sql_query(
            "WITH gone AS (DELETE FROM follows WHERE followee_id = $1 AND follower_id = ANY($2) \
                RETURNING follower_id) \
             UPDATE users SET following_count = following_count - 1 \
             WHERE id IN (SELECT follower_id FROM gone)",
        )
        .bind::<BigInt, _>(account)
        .bind::<Array<BigInt>, _>(followers)
        .execute(&mut conn)
        .await?)
    }

    /// The first `limit` of `account`'s posts (live or deleted).
    pub async fn post_ids_of(self, account: UserId, limit: i64) -> AppResult<Vec<PostId>> {
        use super::schema::posts;
        let mut conn = self.0.conn().await?;
        Ok(posts::table
            .filter(posts::author_id.eq(account))
            .order(posts::id)
            .select(posts::id)
            .limit(limit)
            .load(&mut conn)
            .await?)
    }

    /// Deletes posts of `account`, and their deliveries still queued.
    pub async fn drop_posts(self, account: UserId, ids: &[PostId]) -> AppResult<usize> {
        let mut conn = self.0.conn().await?;
        diesel::sql_query("DELETE FROM fanout_jobs WHERE kind = 'deliver' AND post_id = ANY($1)")
            .bind::<Array<BigInt>, _>(ids)
            .execute(&mut conn)
            .await?;
        Ok(
            diesel::sql_query("DELETE FROM posts WHERE author_id = $1 AND id = ANY($2)")
                .bind::<BigInt, _>(account)
                .bind::<Array<BigInt>, _>(ids)
                .execute(&mut conn)
                .await?,
        )
    }

    /// The end of a purge: the account's row (its mutes, blocks, keys and
    /// markers with it) and every other job about it go, and its task is done.
    pub async fn finish_purge(
        self,
        account: UserId,
        purge_job: JobId,
        task: TaskId,
    ) -> AppResult<()> {
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            diesel::sql_query(
                "DELETE FROM fanout_jobs WHERE (author_id = $1 OR follower_id = $1) AND id <> $2",
            )
            .bind::<BigInt, _>(account)
            .bind::<BigInt, _>(purge_job)
            .execute(conn)
            .await?;
            diesel::delete(
                users::table
                    .find(account)
                    .filter(users::status.eq(AccountStatus::Deleted)),
            )
            .execute(conn)
            .await?;
            // Its imports end unfinished, and their lists go.
            diesel::sql_query(
                "UPDATE tasks SET state = 'failed', finished_at = now(), targets = NULL, \
                    error = 'the importer was deleted' \
                 WHERE user_id = $1 AND kind = 'import_follows' AND finished_at IS NULL",
            )
            .bind::<BigInt, _>(account)
            .execute(conn)
            .await?;
            diesel::sql_query(
                "DELETE FROM import_chunks WHERE task_id IN \
                    (SELECT id FROM tasks WHERE user_id = $1 AND kind = 'import_follows')",
            )
            .bind::<BigInt, _>(account)
            .execute(conn)
            .await?;
            diesel::sql_query(
                "UPDATE tasks SET state = 'done', done = total, finished_at = now() \
                 WHERE id = $1",
            )
            .bind::<BigInt, _>(task)
            .execute(conn)
            .await?;
            Ok(())
        })
        .await
    }
}

/// Ids of an import's list per chunk: one batch's.
pub const IMPORT_CHUNK: usize = 1000;

/// Imports of `user` queued or running.
async fn open_imports(conn: &mut diesel_async::AsyncPgConnection, user: UserId) -> AppResult<i64> {
    #[derive(QueryableByName)]
    struct Open {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let open: Open = diesel::sql_query(
        "SELECT count(*) AS n FROM tasks \
         WHERE user_id = $1 AND kind = 'import_follows' AND finished_at IS NULL",
    )
    .bind::<BigInt, _>(user)
    .get_result(conn)
    .await?;
    Ok(open.n)
}

fn too_many_imports(user: UserId, open: i64) -> AppError {
    AppError::RateLimited {
        message: format!(
            "user {user} has {open} imports queued or running, the most allowed \
             (feed.imports_per_user): retry once one has ended"
        ),
        retry_after_secs: 30,
    }
}

/// Queues a job of an account (and its task).
async fn insert_job(
    conn: &mut diesel_async::AsyncPgConnection,
    kind: JobKind,
    account: UserId,
    task: Option<TaskId>,
    now_ms: i64,
) -> AppResult<JobId> {
    Ok(diesel::insert_into(fanout_jobs::table)
        .values(NewJob {
            kind: kind.as_str(),
            author_id: account.0,
            post_id: None,
            follower_id: None,
            epoch: None,
            created_at_ms: now_ms,
            task_id: task.map(|i| i.0),
            targets: None,
        })
        .returning(fanout_jobs::id)
        .get_result(conn)
        .await?)
}
