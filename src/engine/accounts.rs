//! Accounts suspended by an admin, and accounts deleted.
//!
//! Either way the account's posts leave every feed when the call returns:
//! its id joins the hidden accounts, which every read checks (in Redis, and
//! by its status in PostgreSQL), whatever the inboxes still hold. A deleted
//! account's follows (either way), posts and Redis keys then go in the
//! background, a batch at a time ([`AccountChanges::purge_step`]), its progress a
//! task the caller can watch; last its row goes, and its id leaves the
//! hidden accounts, with nothing left that names it.

use futures::StreamExt;

use super::{now_ms, Engine};
use crate::error::{AppError, AppResult};
use crate::store::redis::hints::{HiddenChange, Signal};
use crate::store::redis::state::PulledChange;
use crate::types::EntriesOf;
use crate::types::{AccountStatus, Edge, Entry, Job, JobId, Task, TaskId, TaskState, User, UserId};

/// The follow sequence number a purge writes into a follower's copy of
/// whom it follows for the deleted account: above any real one, so no
/// older change of that pair applies after it.
const PURGED_SEQ: i64 = 1 << 53;

/// Followers' copies a purge batch updates at once.
const PURGE_CONCURRENCY: usize = 8;

/// Suspensions and deletions of accounts, and their tasks ([`Engine::accounts`]).
#[derive(Clone, Copy)]
pub struct AccountChanges<'a>(pub(crate) &'a Engine);

impl AccountChanges<'_> {
    /// An account that may act (post, follow, mute, block): 404 if there
    /// is none (or it is being deleted), 403 while it is suspended.
    pub async fn active_user(self, id: UserId) -> AppResult<User> {
        super::active(id, self.0.inner.pg.users().user(id).await?)
    }

    /// Suspends (`suspend`) an account or lifts its suspension (admin;
    /// idempotent). Returns once no page shows its posts (or, lifted, once
    /// they are back); if Redis cannot be written the call fails with 503
    /// and its `hide` job does it.
    #[tracing::instrument(skip(self))]
    pub async fn suspend(self, id: UserId, suspend: bool) -> AppResult<User> {
        let (from, to) = if suspend {
            (AccountStatus::Active, AccountStatus::Suspended)
        } else {
            (AccountStatus::Suspended, AccountStatus::Active)
        };
        match self
            .0
            .inner
            .pg
            .accounts()
            .set_status(id.0, &[from], to, now_ms())
            .await?
        {
            Some(change) => {
                self.hide_now(id, suspend, Some(change.job)).await?;
                let hidden = match suspend {
                    true => HiddenChange::Suspended,
                    false => HiddenChange::Restored,
                };
                self.0
                    .hint(Signal::Hidden {
                        account: id,
                        change: hidden,
                    })
                    .await;
                Ok(change.user)
            }
            // Already so, or no such account (404).
            None => self.0.user(id).await,
        }
    }

    /// Deletes an account (the user itself, or an admin): its posts leave
    /// every feed when this returns, the rest goes in the background. The
    /// task says how far it has got; a repeated call answers the same task.
    #[tracing::instrument(skip(self))]
    pub async fn delete_account(self, id: UserId) -> AppResult<Task> {
        let (task, job) = match self
            .0
            .inner
            .pg
            .accounts()
            .delete_account(id, now_ms())
            .await?
        {
            Some((task, job)) => (task, Some(job)),
            None => match self.0.inner.pg.accounts().deletion_of(id).await? {
                Some(task) => (task, None),
                None => return Err(AppError::NotFound(format!("user {id} does not exist"))),
            },
        };
        self.0.account_gone(id);
        // (A repeated call hides it again while its purge runs; once the
        // purge is over there is nothing left to hide.)
        if job.is_some() || self.0.pg().accounts().hidden(id).await? {
            self.hide_now(id, true, job).await?;
            self.0
                .hint(Signal::Hidden {
                    account: id,
                    change: HiddenChange::Deleted,
                })
                .await;
        }
        self.0.inner.wake.notify_waiters();
        // Its own reads stop: its copy and inbox go, and a rebuild of them
        // refuses a deleted account.
        let keys = self.0.redis().keys();
        let own = [
            keys.following(id),
            keys.followees(id),
            keys.inbox(id),
            keys.active_mark(id),
        ];
        if let Err(e) = self.0.redis().delete_many(&own).await {
            tracing::debug!(error = %e.chain(), "a deleted account's keys wait for its purge");
        }
        Ok(task)
    }

    /// A task, as its user or an admin (`viewer` `None`) sees it.
    pub async fn task(self, viewer: Option<UserId>, id: TaskId) -> AppResult<Task> {
        match self.0.inner.pg.accounts().task(id).await? {
            Some(task) if viewer.is_none_or(|v| v == task.user_id) => Ok(task),
            _ => Err(AppError::NotFound(format!("job {id} does not exist"))),
        }
    }

    /// The hidden accounts take `account` (`hide`) or let it go, done by
    /// the requester; its job (if any) is dropped once done, else left to
    /// a worker and the call answers 503.
    async fn hide_now(self, account: UserId, hide: bool, job: Option<JobId>) -> AppResult<()> {
        let queued = "the account's status is recorded; hiding its posts is queued";
        self.0
            .write_through(job, queued, || {
                self.0.redis().state().hidden_change(account, hide)
            })
            .await
    }

    /// A `hide` job: the hidden accounts take the account's status now.
    pub(crate) async fn hide_step(self, account: UserId) -> AppResult<()> {
        let hide = self.0.pg().accounts().hidden(account).await?;
        // A purged account is gone from the records: it is let go.
        self.0.redis().state().hidden_change(account, hide).await
    }

    /// One batch of a deleted account's purge, in this order: its
    /// followers (their copies drop it and its posts leave their inboxes,
    /// as an unfollow does, then the rows go), whom it follows (each an
    /// unfollow, counts and big-V state included), its posts (cache, then
    /// rows); last its keys, its row and its place among the pulled and the
    /// hidden. Each batch removes what it has done, so a batch done twice
    /// (a crash before its checkpoint) finds nothing to do. True once the
    /// purge is over. `newest`: the account's newest posts, for inboxes.
    pub(crate) async fn purge_step(
        self,
        job: &Job,
        task: TaskId,
        newest: &[Entry],
    ) -> AppResult<bool> {
        let account = job.author_id;
        let batch = self.0.tuning().fanout_batch_size;
        let cap = self.0.settings().inbox_max_len;
        let progress = async |n: usize| {
            self.0
                .pg()
                .accounts()
                .task_progress(task, n as i64, 0, TaskState::Running)
                .await
        };
        let followers = self
            .0
            .pg()
            .accounts()
            .edges_of(account, true, batch)
            .await?;
        if !followers.is_empty() {
            let unfollow = (Edge::Unfollow, false);
            let copies = futures::stream::iter(followers.iter().copied())
                .map(|f| {
                    self.0
                        .redis()
                        .state()
                        .set_follow(f, account, PURGED_SEQ, unfollow, cap, None, newest)
                })
                .buffer_unordered(PURGE_CONCURRENCY)
                .collect::<Vec<_>>()
                .await;
            for copy in copies {
                copy?;
            }
            let n = self
                .0
                .pg()
                .accounts()
                .drop_followers(account, &followers)
                .await?;
            progress(n).await?;
            return Ok(false);
        }
        let following = self
            .0
            .pg()
            .accounts()
            .edges_of(account, false, batch)
            .await?;
        if !following.is_empty() {
            for &author in &following {
                self.0.relations().unfollow(account, author).await?;
            }
            progress(following.len()).await?;
            return Ok(false);
        }
        let posts = self.0.pg().accounts().post_ids_of(account, batch).await?;
        if !posts.is_empty() {
            let keys = self.0.redis().keys();
            let cached: Vec<String> = posts.iter().map(|id| keys.post(*id)).collect();
            self.0.redis().delete_many(&cached).await?;
            let n = self.0.pg().accounts().drop_posts(account, &posts).await?;
            progress(n).await?;
            return Ok(false);
        }
        let keys = self.0.redis().keys();
        self.0
            .redis()
            .delete_many(&[
                keys.inbox(account),
                keys.following(account),
                keys.followees(account),
                keys.active_mark(account),
                keys.outbox(account),
                keys.active_fans(account),
            ])
            .await?;
        self.0
            .redis()
            .state()
            .pulled_change(account, PulledChange::Forget)
            .await?;
        self.0
            .pg()
            .accounts()
            .finish_purge(account, job.id, task)
            .await?;
        if let Err(e) = self.0.redis().state().hidden_change(account, false).await {
            // Its id stays among the hidden: it names no post any more.
            tracing::warn!(error = %e.chain(), %account, "a purged account stays among the hidden");
        }
        Ok(true)
    }

    /// A deleted account's newest posts, which its followers' inboxes may
    /// hold (as many as an inbox holds, with its trimming slack, and the
    /// deleted ones among them).
    pub(crate) async fn newest_of(self, account: UserId) -> AppResult<Vec<Entry>> {
        let cap = self.0.settings().inbox_max_len;
        self.0
            .pg()
            .posts()
            .entries(EntriesOf::Held(account), cap + (cap / 32).max(1))
            .await
    }
}
