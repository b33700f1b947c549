//! What a reader's home shows of whom: follows, mutes and blocks.
//!
//! Each change is committed to PostgreSQL with the job that applies it to
//! Redis, then applied by its requester at once (the job dropped), so that
//! a page read after the call returns shows it: the reader's copy of whom
//! its home shows, and the inbox (a follow's recent posts in, an
//! unfollow's out; a mute keeps them, so an unmute brings them back).

use serde::Serialize;

use super::{now_ms, policy, retried, Engine};
use crate::error::{AppError, AppResult};
use crate::store::pg::models::User;
use crate::store::pg::{EdgeChange, EntriesOf};
use crate::types::{Cursor, Edge, PageRequest};

/// A page of users (whom one mutes or blocks), newest first by when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct UserPage {
    pub items: Vec<User>,
    /// Where the next page starts (send back as `max` and `offset`); null
    /// at the end.
    pub next: Option<Cursor>,
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
    /// (422) while either blocks the other.
    #[tracing::instrument(skip(self))]
    pub async fn follow(&self, follower: i64, followee: i64) -> AppResult<()> {
        if follower == followee {
            return Err(AppError::Unprocessable(
                "a user cannot follow itself".into(),
            ));
        }
        self.user(follower).await?;
        self.user(followee).await?;
        let change = self
            .inner
            .pg
            .follow(follower, followee, now_ms(), policy::big_v_change)
            .await?;
        self.after_edge_change(follower, followee, Edge::Follow, change)
            .await
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
            .await
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
        self.user(reader).await?;
        if mute {
            self.user(target).await?;
        }
        let change = self
            .inner
            .pg
            .set_mute(reader, target, mute, now_ms())
            .await?;
        let edge = if mute { Edge::Mute } else { Edge::Unmute };
        self.after_edge_change(reader, target, edge, change).await
    }

    /// `blocker` blocks `target` (idempotent): the follows between them
    /// go, either way, as unfollows do, and none is made while the block
    /// stands; neither sees the other's posts.
    #[tracing::instrument(skip(self))]
    pub async fn block(&self, blocker: i64, target: i64) -> AppResult<()> {
        if blocker == target {
            return Err(AppError::Unprocessable("a user cannot block itself".into()));
        }
        self.user(blocker).await?;
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
        let mut window = i64::from(req.limit) + 1;
        loop {
            let rows = self
                .inner
                .pg
                .relations(owner, which == Relation::Mutes, req.max, req.offset, window)
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
        let applied = retried(|| async {
            let mark = self.inner.redis.write_mark();
            self.apply_edge(follower, followee, change.seq, (edge, change.shown))
                .await?;
            // Its job is dropped: a failover must not lose the change.
            self.inner.redis.replicated(mark).await
        })
        .await;
        match (applied, change.job) {
            (Ok(()), Some(job)) => {
                if let Err(e) = self.inner.pg.drop_job(job).await {
                    tracing::debug!(error = %e.chain(), "a done job stays for a worker");
                }
                Ok(())
            }
            (Ok(()), None) => Ok(()),
            (Err(e), _) => {
                self.deferred();
                self.inner.wake.notify_waiters();
                Err(AppError::Unavailable {
                    what: "Redis",
                    source: format!(
                        "the change is recorded; its cache update is queued: {}",
                        e.chain()
                    )
                    .into(),
                })
            }
        }
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
                let entries = self
                    .inner
                    .pg
                    .entries(EntriesOf::Author(author), cap)
                    .await?;
                let cut = (entries.len() as i64 >= cap)
                    .then(|| entries.last().map(|e| e.score))
                    .flatten();
                (entries, cut)
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
