//! What a reader's home shows of whom: follows, mutes and blocks.
//!
//! Each change is committed to PostgreSQL with the job that applies it to
//! Redis, then applied by its requester at once (the job dropped), so that
//! a page read after the call returns shows it: the reader's copy of whom
//! its home shows, and the inbox (a follow's recent posts in, an
//! unfollow's out; a mute keeps them, so an unmute brings them back).

use super::{now_ms, policy, Engine};
use crate::error::{AppError, AppResult};
use crate::store::pg::{EdgeChange, FollowedMany};
use crate::store::redis::hints::{ShownChange, Signal};
use crate::types::EntriesOf;
use crate::types::{AccountStatus, Cursor, Edge, Entry, Job, PageRequest, Task, TaskState, User};

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
    pub followed: Vec<i64>,
    pub already: Vec<i64>,
    pub skipped: Vec<i64>,
}

/// Which list of users a reader keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    Mutes,
    Blocks,
}

impl Engine {
    /// Follows (idempotent). Returns once the follow is recorded and the
    /// reader's Redis state has it, the followee's newest posts in the
    /// reader's inbox; if Redis cannot be written the call fails with 503
    /// and its `follow` job does it (repeating the call is safe). Refused
    /// (422) while either blocks the other, or the followee is suspended;
    /// a suspended follower is refused (403).
    #[tracing::instrument(skip(self))]
    pub async fn follow(&self, follower: i64, followee: i64) -> AppResult<()> {
        if follower == followee {
            return Err(AppError::Unprocessable(
                "a user cannot follow itself".into(),
            ));
        }
        self.active_user(follower).await?;
        if self.user(followee).await?.status == AccountStatus::Suspended {
            return Err(AppError::Unprocessable(format!(
                "user {followee} is suspended"
            )));
        }
        let change = self
            .inner
            .pg
            .follow(follower, followee, now_ms(), policy::big_v_change)
            .await?;
        self.after_edge_change(follower, followee, Edge::Follow, change)
            .await?;
        self.hint_edge(follower, followee, Edge::Follow, change.shown)
            .await;
        Ok(())
    }

    /// `follower` follows up to [`MAX_FOLLOW_MANY`] authors at once: one
    /// transaction, one job (done here, as a follow's is), each author's
    /// newest posts (the admin's copy limit) into the inbox in one call.
    /// Those it cannot follow are skipped and named; past `max_follows`
    /// the whole call is refused (422) and nothing changes.
    #[tracing::instrument(skip(self, targets), fields(targets = targets.len()))]
    pub async fn follow_many(&self, follower: i64, targets: &[i64]) -> AppResult<Followed> {
        if targets.is_empty() || targets.len() > MAX_FOLLOW_MANY {
            return Err(AppError::Unprocessable(format!(
                "from 1 to {MAX_FOLLOW_MANY} authors at once, got {}",
                targets.len()
            )));
        }
        self.active_user(follower).await?;
        let done = self.follow_many_fitting(follower, targets, false).await?;
        for author in done.new.iter().filter(|a| !done.muted.contains(a)) {
            self.hint_edge(follower, *author, Edge::Follow, true).await;
        }
        Ok(Followed {
            followed: done.new,
            already: done.already,
            skipped: done.skipped,
        })
    }

    /// [`Self::follow_many`]; with `fit`, the authors past `max_follows`
    /// are skipped rather than the call refused.
    async fn follow_many_fitting(
        &self,
        follower: i64,
        targets: &[i64],
        fit: bool,
    ) -> AppResult<FollowedMany> {
        let done = self
            .inner
            .pg
            .follow_many(follower, targets, fit, now_ms(), policy::big_v_change)
            .await?;
        for (author, epoch) in &done.promoted {
            let promote = crate::store::redis::state::PulledChange::Promote(*epoch);
            if let Err(e) = self.inner.redis.pulled_change(*author, promote).await {
                tracing::warn!(error = %e.chain(), "could not record a promotion in Redis yet");
            }
        }
        let Some(job) = done.job else {
            return Ok(done);
        };
        let queued = "the follows are recorded; their cache update is queued";
        self.write_through(Some(job), queued, || {
            self.apply_follows(follower, done.seq, &done.new, &done.muted)
        })
        .await?;
        Ok(done)
    }

    /// Applies follows `seq` of `follower` (the authors `new`, of which it
    /// mutes `muted`) to Redis: the reader's copy, and into its inbox the
    /// newest posts of each (the copy limit), merged, at most the inbox's
    /// cap, in one call. Idempotent.
    pub(crate) async fn apply_follows(
        &self,
        follower: i64,
        seq: i64,
        new: &[i64],
        muted: &[i64],
    ) -> AppResult<()> {
        let cap = self.settings().inbox_max_len;
        let copy = self.copy_limit();
        let mut all: Vec<Entry> = Vec::new();
        let mut cut: Option<i64> = None;
        for (_, entries) in self.inner.pg.entries_of_many(new, copy + 1).await? {
            let (kept, left_out) = copied(entries, copy);
            all.extend(kept);
            cut = cut.max(left_out);
        }
        all.sort_by(crate::types::feed_order);
        if all.len() > cap as usize {
            cut = cut.max(Some(all[cap as usize].score));
            all.truncate(cap as usize);
        }
        if let Some(c) = cut {
            all.retain(|e| e.score >= c);
        }
        let authors: Vec<(i64, bool)> = new.iter().map(|a| (*a, !muted.contains(a))).collect();
        self.inner
            .redis
            .follow_many(follower, seq, &authors, (cap, cut), &all)
            .await?;
        Ok(())
    }

    /// Imports a follow list of any length (up to [`MAX_IMPORT`] ids) as a
    /// task: a job follows them [`MAX_FOLLOW_MANY`] at a time, skipping
    /// those it cannot follow and, once `max_follows` is reached, the rest.
    pub async fn import_follows(&self, follower: i64, targets: &[i64]) -> AppResult<Task> {
        if targets.is_empty() || targets.len() > MAX_IMPORT {
            return Err(AppError::Unprocessable(format!(
                "from 1 to {MAX_IMPORT} ids in one import, got {}",
                targets.len()
            )));
        }
        self.active_user(follower).await?;
        let most = self.tuning().imports_per_user;
        let task = self
            .inner
            .pg
            .create_import(follower, targets, most, now_ms())
            .await?;
        self.inner.wake.notify_waiters();
        Ok(task)
    }

    /// Refuses (429) while `follower` has `feed.imports_per_user` imports
    /// queued or running (before their body is read).
    pub async fn import_room(&self, follower: i64) -> AppResult<()> {
        let most = self.tuning().imports_per_user;
        self.inner.pg.import_room(follower, most).await
    }

    /// One batch of an import: the next [`MAX_FOLLOW_MANY`] ids of its list
    /// followed (as [`Self::follow_many`] does, past `max_follows`
    /// skipped), its progress recorded. True once the list is done.
    pub(crate) async fn import_step(
        &self,
        job: &mut Job,
        task: i64,
        record: bool,
    ) -> AppResult<bool> {
        let follower = job.author_id;
        let from = job.checkpoint;
        let batch = self
            .inner
            .pg
            .import_batch(task, from, MAX_FOLLOW_MANY as i64)
            .await?;
        if batch.is_empty() {
            self.inner
                .pg
                .task_progress(task, 0, 0, TaskState::Done)
                .await?;
            return Ok(true);
        }
        match self.user(follower).await {
            Ok(u) if u.status == AccountStatus::Active => {}
            // The importer was suspended or deleted: the rest is not done.
            _ => {
                self.inner
                    .pg
                    .task_progress(task, 0, 0, TaskState::Failed)
                    .await?;
                return Ok(true);
            }
        }
        let done = self.follow_many_fitting(follower, &batch, true).await?;
        if record {
            let to = from + batch.len() as i64;
            self.inner
                .pg
                .task_progress(
                    task,
                    batch.len() as i64,
                    done.skipped.len() as i64,
                    TaskState::Running,
                )
                .await?;
            self.pg()
                .checkpoint_job(
                    job,
                    to,
                    std::time::Duration::from_secs(self.tuning().fanout_lease_secs),
                )
                .await?;
            job.checkpoint = to;
        }
        Ok(false)
    }

    /// Unfollows (idempotent). Returns once no page of the reader shows the
    /// author's posts; if Redis cannot be written the call fails with 503
    /// and its `unfollow` job does it (repeating the call is safe).
    #[tracing::instrument(skip(self))]
    pub async fn unfollow(&self, follower: i64, followee: i64) -> AppResult<()> {
        let change = self
            .inner
            .pg
            .unfollow(follower, followee, now_ms(), policy::big_v_change)
            .await?;
        self.after_edge_change(follower, followee, Edge::Unfollow, change)
            .await?;
        self.hint_edge(follower, followee, Edge::Unfollow, false)
            .await;
        Ok(())
    }

    /// Mutes (`mute`) or unmutes `target` for `reader` (idempotent).
    /// Returns once the reader's pages show the change: a muted author's
    /// posts leave its home (the inbox keeps them), an unmuted one's come
    /// back if it is followed.
    #[tracing::instrument(skip(self))]
    pub async fn mute(&self, reader: i64, target: i64, mute: bool) -> AppResult<()> {
        if reader == target {
            return Err(AppError::Unprocessable("a user cannot mute itself".into()));
        }
        self.active_user(reader).await?;
        if mute {
            self.user(target).await?;
        }
        let change = self
            .inner
            .pg
            .set_mute(reader, target, mute, now_ms())
            .await?;
        let edge = if mute { Edge::Mute } else { Edge::Unmute };
        self.after_edge_change(reader, target, edge, change).await?;
        self.hint_edge(reader, target, edge, change.shown).await;
        Ok(())
    }

    /// `blocker` blocks `target` (idempotent): the follows between them
    /// go, either way, as unfollows do, and none is made while the block
    /// stands; neither sees the other's posts.
    #[tracing::instrument(skip(self))]
    pub async fn block(&self, blocker: i64, target: i64) -> AppResult<()> {
        if blocker == target {
            return Err(AppError::Unprocessable("a user cannot block itself".into()));
        }
        self.active_user(blocker).await?;
        self.user(target).await?;
        let blocked = self
            .inner
            .pg
            .block(blocker, target, now_ms(), policy::big_v_change)
            .await?;
        let mut first_error = Ok(());
        for (follower, followee, change) in blocked.unfollowed {
            let done = self
                .after_edge_change(follower, followee, Edge::Unfollow, change)
                .await;
            if first_error.is_ok() {
                first_error = done;
            }
        }
        for (who, other) in [(blocker, target), (target, blocker)] {
            self.hint(Signal::Shown {
                reader: who,
                author: other,
                change: ShownChange::Blocked,
            })
            .await;
        }
        first_error
    }

    /// `blocker` no longer blocks `target` (idempotent; no follow comes
    /// back).
    pub async fn unblock(&self, blocker: i64, target: i64) -> AppResult<()> {
        self.inner.pg.unblock(blocker, target).await?;
        Ok(())
    }

    /// Whether `viewer` sees nothing of `author`: either blocks the other.
    pub async fn apart(&self, viewer: i64, author: i64) -> AppResult<bool> {
        if viewer == author {
            return Ok(false);
        }
        self.inner.pg.blocked_between(viewer, author).await
    }

    /// A page of the users `owner` mutes or blocks, newest first by when,
    /// with the feed's cursor over (time, id).
    pub async fn relations(
        &self,
        owner: i64,
        which: Relation,
        req: PageRequest,
    ) -> AppResult<UserPage> {
        use super::cut::{after_seen, cut, Cut, Slot};
        let mutes = which == Relation::Mutes;
        if req.offset > PageRequest::MAX_OFFSET {
            let Some(at) = req.max else {
                return Err(AppError::BadRequest("offset needs max".into()));
            };
            let run = self.inner.pg.relations_at(owner, mutes, at).await?;
            super::read::within_run(&req, run)?;
        }
        let mut window = i64::from(req.limit) + 1;
        loop {
            let rows = self
                .inner
                .pg
                .relations(owner, mutes, req.max, req.offset, window)
                .await?;
            let complete = (rows.len() as i64) < window + i64::from(req.offset);
            let stream = rows
                .into_iter()
                .map(|(at, user)| (crate::types::Entry::new(at, user.id), Slot::Shown(user)));
            match cut(after_seen(stream, &req), &req, complete) {
                Cut::Page { items, next, .. } => return Ok(UserPage { items, next }),
                Cut::NeedMore => window *= 4,
            }
        }
    }

    /// Tells every instance's streams of `follower` what its home shows of
    /// `author` now.
    async fn hint_edge(&self, follower: i64, author: i64, edge: Edge, shown: bool) {
        let change = match edge {
            Edge::Follow | Edge::Unmute if shown => ShownChange::Followed,
            Edge::Follow | Edge::Unmute => return,
            Edge::Unfollow => ShownChange::Unfollowed,
            Edge::Mute => ShownChange::Muted,
        };
        self.hint(Signal::Shown {
            reader: follower,
            author,
            change,
        })
        .await;
    }

    /// The Redis side of a follow, unfollow, mute or unmute, done by its
    /// requester.
    async fn after_edge_change(
        &self,
        follower: i64,
        followee: i64,
        edge: Edge,
        change: EdgeChange,
    ) -> AppResult<()> {
        if !change.changed {
            // A repeat: its Redis side is owed only if an earlier call's
            // is still missing there. (Anything else, an id never followed
            // above all, must leave the reader's copy as it is.)
            let copy = self.inner.redis.followed_in_copy(follower, followee).await;
            let owed = match (edge, copy) {
                (Edge::Follow, _) => true,
                (_, Ok(Some(shown))) => shown != change.shown,
                (_, Ok(None)) => false,
                (_, Err(_)) => true,
            };
            if !owed {
                return Ok(());
            }
        }
        if let Some(epoch) = change.promoted {
            // The deliveries of its pulled posts do it too: this is early.
            let promote = crate::store::redis::state::PulledChange::Promote(epoch);
            if let Err(e) = self.inner.redis.pulled_change(followee, promote).await {
                tracing::warn!(error = %e.chain(), "could not record a promotion in Redis yet");
            }
        }
        let queued = "the change is recorded; its cache update is queued";
        self.write_through(change.job, queued, || {
            self.apply_edge(follower, followee, change.seq, (edge, change.shown))
        })
        .await
    }

    /// How many of an author's newest posts a follow copies: the admin's
    /// limit, at most the inbox cap.
    fn copy_limit(&self) -> i64 {
        let s = self.settings();
        s.follow_copy_limit.min(s.inbox_max_len)
    }

    /// Applies change `seq` of what `follower`'s home shows of `author`
    /// (`shown` after it) to Redis: the reader's copy, and for a follow the
    /// author's newest posts into its inbox, for an unfollow out of it.
    /// Idempotent; changes apply in `seq` order.
    pub(crate) async fn apply_edge(
        &self,
        follower: i64,
        author: i64,
        seq: i64,
        (edge, shown): (Edge, bool),
    ) -> AppResult<()> {
        let cap = self.settings().inbox_max_len;
        let (entries, cut) = match edge {
            Edge::Follow => {
                let copy = self.copy_limit();
                let entries = self
                    .inner
                    .pg
                    .entries(EntriesOf::Author(author), copy + 1)
                    .await?;
                copied(entries, copy)
            }
            // An inbox holds at most its cap and the trimming slack.
            Edge::Unfollow => (
                self.inner
                    .pg
                    .entries(EntriesOf::Author(author), cap + (cap / 32).max(1))
                    .await?,
                None,
            ),
            Edge::Mute | Edge::Unmute => (Vec::new(), None),
        };
        self.inner
            .redis
            .set_follow(follower, author, seq, (edge, shown), cap, cut, &entries)
            .await?;
        if edge == Edge::Unfollow {
            self.inner.redis.forget_active_fan(author, follower).await?;
        }
        Ok(())
    }
}
