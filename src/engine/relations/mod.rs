//! What a reader's home shows of whom: follows, mutes and blocks.
//!
//! - `edges`: the changes of edges, over `stores` (what they need of
//!   PostgreSQL and Redis);
//! - here: the engine's calls, imports of follow lists, and the lists of
//!   mutes and blocks.

mod edges;
mod stores;
#[cfg(test)]
mod tests;

use super::{now_ms, Engine};
use crate::error::{AppError, AppResult};
use crate::store::pg::{HomeChanges, PgStore};
use crate::store::redis::RedisStore;
use crate::types::{
    AccountStatus, Cursor, Edge, Entry, Job, PageRequest, Task, TaskId, TaskState, User, UserId,
};
use edges::Edges;

/// A page of users (whom one mutes or blocks), newest first by when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserPage {
    pub items: Vec<User>,
    /// Where the next page starts (send back as `max` and `offset`); null
    /// at the end.
    pub next: Option<Cursor>,
}

/// The newest `copy` of an author's entries (newest first) a follow
/// pushes, and its cut when the author has more: the score of the first one
/// left out (the inbox claims nothing at or below it for this author).
pub(crate) fn copied(mut entries: Vec<Entry>, copy: i64) -> (Vec<Entry>, Option<i64>) {
    let copy = copy.max(0) as usize;
    if entries.len() <= copy {
        return (entries, None);
    }
    let cut = entries[copy].score;
    entries.truncate(copy);
    (entries, Some(cut))
}

/// Authors one call follows at the most.
pub const MAX_FOLLOW_MANY: usize = 1000;

/// Ids one import takes at the most.
pub const MAX_IMPORT: usize = 1_000_000;

/// What a follow of many answered: the authors followed now, those
/// followed before, and those it could not follow (no such account,
/// oneself, suspended, across a block).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Followed {
    pub followed: Vec<UserId>,
    pub already: Vec<UserId>,
    pub skipped: Vec<UserId>,
}

/// Which list of users a reader keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    Mutes,
    Blocks,
}

/// Follows, mutes, blocks and imports of follow lists ([`Engine::relations`]).
#[derive(Clone, Copy)]
pub struct Relations<'a>(pub(crate) &'a Engine);

impl<'a> Relations<'a> {
    /// Follows ([`Edges::follow`]).
    #[tracing::instrument(skip(self))]
    pub async fn follow(self, follower: UserId, followee: UserId) -> AppResult<()> {
        self.edges().follow(follower, followee).await
    }

    /// `follower` follows up to [`MAX_FOLLOW_MANY`] authors at once: one
    /// transaction, one job (done here, as a follow's is), each author's
    /// newest posts (the admin's copy limit) into the inbox in one call.
    /// Those it cannot follow are skipped and named; past `max_follows`
    /// the whole call is refused (422) and nothing changes.
    #[tracing::instrument(skip(self, targets), fields(targets = targets.len()))]
    pub async fn follow_many(self, follower: UserId, targets: &[UserId]) -> AppResult<Followed> {
        if targets.is_empty() || targets.len() > MAX_FOLLOW_MANY {
            return Err(AppError::Unprocessable(format!(
                "from 1 to {MAX_FOLLOW_MANY} authors at once, got {}",
                targets.len()
            )));
        }
        let done = self.edges().follow_many(follower, targets).await?;
        Ok(Followed {
            followed: done.new,
            already: done.already,
            skipped: done.skipped,
        })
    }

    /// Applies follows `seq` of `follower` to Redis ([`Edges::apply_follows`]).
    pub(crate) async fn apply_follows(
        self,
        follower: UserId,
        seq: i64,
        new: &[UserId],
        muted: &[UserId],
    ) -> AppResult<()> {
        let edges = self.edges();
        edges.apply_follows(follower, seq, new, muted).await
    }

    /// Imports a follow list of any length (up to [`MAX_IMPORT`] ids) as a
    /// task: a job follows them [`MAX_FOLLOW_MANY`] at a time, skipping
    /// those it cannot follow and, once `max_follows` is reached, the rest.
    pub async fn import_follows(self, follower: UserId, targets: &[UserId]) -> AppResult<Task> {
        if targets.is_empty() || targets.len() > MAX_IMPORT {
            return Err(AppError::Unprocessable(format!(
                "from 1 to {MAX_IMPORT} ids in one import, got {}",
                targets.len()
            )));
        }
        self.0.accounts().active_user(follower).await?;
        let most = self.0.tuning().imports_per_user;
        let task = self
            .0
            .inner
            .pg
            .accounts()
            .create_import(follower, targets, most, now_ms())
            .await?;
        self.0.inner.wake.notify_waiters();
        Ok(task)
    }

    /// Refuses (429) while `follower` has `feed.imports_per_user` imports
    /// queued or running (before their body is read).
    pub async fn import_room(self, follower: UserId) -> AppResult<()> {
        let most = self.0.tuning().imports_per_user;
        self.0.inner.pg.accounts().import_room(follower, most).await
    }

    /// One batch of an import: the next [`MAX_FOLLOW_MANY`] ids of its list
    /// followed (as [`Self::follow_many`] does, past `max_follows`
    /// skipped), its progress recorded. True once the list is done.
    pub(crate) async fn import_step(
        self,
        job: &mut Job,
        task: TaskId,
        record: bool,
    ) -> AppResult<bool> {
        let follower = job.author_id;
        let from = job.checkpoint;
        let batch = self
            .0
            .inner
            .pg
            .accounts()
            .import_batch(task, from, MAX_FOLLOW_MANY as i64)
            .await?;
        if batch.is_empty() {
            self.0
                .inner
                .pg
                .accounts()
                .task_progress(task, 0, 0, TaskState::Done)
                .await?;
            return Ok(true);
        }
        match self.0.user(follower).await {
            Ok(u) if u.status == AccountStatus::Active => {}
            // The importer was suspended or deleted: the rest is not done.
            _ => {
                self.0
                    .inner
                    .pg
                    .accounts()
                    .task_progress(task, 0, 0, TaskState::Failed)
                    .await?;
                return Ok(true);
            }
        }
        let done = self
            .edges()
            .follow_many_fitting(follower, &batch, true)
            .await?;
        if record {
            let to = from + batch.len() as i64;
            self.0
                .inner
                .pg
                .accounts()
                .task_progress(
                    task,
                    batch.len() as i64,
                    done.skipped.len() as i64,
                    TaskState::Running,
                )
                .await?;
            self.0
                .pg()
                .jobs()
                .checkpoint_job(
                    job,
                    to,
                    std::time::Duration::from_secs(self.0.tuning().fanout_lease_secs),
                )
                .await?;
            job.checkpoint = to;
        }
        Ok(false)
    }

    /// Unfollows ([`Edges::unfollow`]).
    #[tracing::instrument(skip(self))]
    pub async fn unfollow(self, follower: UserId, followee: UserId) -> AppResult<()> {
        self.edges().unfollow(follower, followee).await
    }

    /// Mutes or unmutes ([`Edges::mute`]).
    #[tracing::instrument(skip(self))]
    pub async fn mute(self, reader: UserId, target: UserId, mute: bool) -> AppResult<()> {
        self.edges().mute(reader, target, mute).await
    }

    /// Applies what a change of `owner`'s lists did to its home
    /// ([`Edges::home_changed`]).
    pub(crate) async fn home_changed(self, owner: UserId, changes: HomeChanges) -> AppResult<()> {
        self.edges().home_changed(owner, changes).await
    }

    /// Blocks ([`Edges::block`]).
    #[tracing::instrument(skip(self))]
    pub async fn block(self, blocker: UserId, target: UserId) -> AppResult<()> {
        self.edges().block(blocker, target).await
    }

    /// `blocker` no longer blocks `target` (idempotent; no follow comes
    /// back).
    pub async fn unblock(self, blocker: UserId, target: UserId) -> AppResult<()> {
        self.0.inner.pg.users().unblock(blocker, target).await?;
        Ok(())
    }

    /// Whether `viewer` sees nothing of `author`: either blocks the other.
    pub async fn apart(self, viewer: UserId, author: UserId) -> AppResult<bool> {
        if viewer == author {
            return Ok(false);
        }
        self.0
            .inner
            .pg
            .users()
            .blocked_between(viewer.0, author.0)
            .await
    }

    /// A page of the users `owner` mutes or blocks, newest first by when,
    /// with the feed's cursor over (time, id).
    pub async fn relations(
        self,
        owner: UserId,
        which: Relation,
        req: PageRequest,
    ) -> AppResult<UserPage> {
        use super::cut::{after_seen, cut, Cut, Slot};
        if req.id.is_some() || req.min.is_some() {
            // A list's entries name accounts, not posts: it pages by count.
            return Err(AppError::BadRequest(
                "a list pages down from max and offset: min and id are for feeds".into(),
            ));
        }
        let mutes = which == Relation::Mutes;
        if req.offset > PageRequest::MAX_OFFSET {
            let Some(at) = req.max else {
                return Err(AppError::BadRequest("offset needs max".into()));
            };
            let run = self
                .0
                .inner
                .pg
                .users()
                .relations_at(owner, mutes, at)
                .await?;
            super::read::within_run(&req, run)?;
        }
        let mut window = i64::from(req.limit) + 1;
        loop {
            let rows = self
                .0
                .inner
                .pg
                .users()
                .relations(owner, mutes, req.max, req.offset, window)
                .await?;
            let complete = (rows.len() as i64) < window + i64::from(req.offset);
            let stream = rows.into_iter().map(|(at, user)| (at, Slot::Shown(user)));
            match cut(after_seen(stream, &req), &req, complete) {
                Cut::Page { items, next, .. } => return Ok(UserPage { items, next }),
                Cut::NeedMore => window *= 4,
            }
        }
    }

    /// Applies change `seq` of what `follower`'s home shows of `author`
    /// to Redis ([`Edges::apply_edge`]).
    pub(crate) async fn apply_edge(
        self,
        follower: UserId,
        author: UserId,
        seq: i64,
        change: (Edge, bool),
    ) -> AppResult<()> {
        self.edges().apply_edge(follower, author, seq, change).await
    }

    /// The changes of edges over this engine's stores.
    fn edges(self) -> Edges<'a, PgStore, RedisStore> {
        Edges {
            records: &self.0.inner.pg,
            cache: &self.0.inner.redis,
            settings: self.0.settings(),
            deferred: Box::new(|| self.0.deferred_to_job()),
        }
    }
}
