//! Changes of what a home shows (follows, unfollows, mutes, blocks) over
//! the stores' interface: each committed to the records with the job that
//! applies it to the cache, then applied by its requester at once (the job
//! dropped), so that a page read after the call returns shows it.

use super::copied;
use super::stores::{EdgeCache, EdgeRecords};
use crate::engine::write::write_through;
use crate::engine::{active, existing, now_ms};
use crate::error::{AppError, AppResult};
use crate::store::pg::{EdgeChange, FollowedMany, HomeChanges};
use crate::store::redis::hints::{ShownChange, Signal};
use crate::store::redis::state::PulledChange;
use crate::types::{
    feed_order, AccountStatus, Edge, EntriesOf, Entry, FeedSettings, JobId, User, UserId,
};

/// Hints a bulk follow sends at once (one per followee).
const HINTS_AT_ONCE: usize = 32;

/// One call's changes of edges: the stores, and what of this instance it
/// uses.
pub struct Edges<'a, R, C> {
    pub records: &'a R,
    pub cache: &'a C,
    pub settings: FeedSettings,
    /// Told when a change's cache side is left to its job.
    pub deferred: Box<dyn Fn() + Send + Sync + 'a>,
}

impl<R: EdgeRecords, C: EdgeCache> Edges<'_, R, C> {
    /// Follows (idempotent). Returns once the follow is recorded and the
    /// reader's cache state has it, the followee's newest posts in the
    /// reader's inbox; if the cache cannot be written the call fails with
    /// 503 and its `follow` job does it (repeating the call is safe).
    /// Refused (422) while either blocks the other, or the followee is
    /// suspended; a suspended follower is refused (403).
    pub async fn follow(&self, follower: UserId, followee: UserId) -> AppResult<()> {
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
        let change = self.records.follow(follower, followee, now_ms()).await?;
        let applied = self
            .after_edge_change(follower, followee, Edge::Follow, change)
            .await;
        // Recorded: the streams hear of it even while its job is owed.
        self.hint_edge(follower, followee, Edge::Follow, change.shown)
            .await;
        if change.changed {
            self.hint_notified(follower, &[followee]).await;
        }
        applied
    }

    /// `follower` follows `targets` at once ([`super::MAX_FOLLOW_MANY`] at
    /// the most: the caller checks), as [`Self::follow_many_fitting`]
    /// does, and each home stream hears of the authors it shows now.
    pub async fn follow_many(
        &self,
        follower: UserId,
        targets: &[UserId],
    ) -> AppResult<FollowedMany> {
        self.active_user(follower).await?;
        let done = self
            .records
            .follow_many(follower, targets, false, now_ms())
            .await?;
        let applied = self.after_follows(follower, &done).await;
        for author in done.new.iter().filter(|a| !done.muted.contains(a)) {
            self.hint_edge(follower, *author, Edge::Follow, true).await;
        }
        self.hint_notified(follower, &done.new).await;
        applied.map(|()| done)
    }

    /// One transaction, one job (done here, as a follow's is), each
    /// author's newest posts (the admin's copy limit) into the inbox in one
    /// call. Those it cannot follow are skipped; past `max_follows` the
    /// whole call is refused (422) and nothing changes, or with `fit` the
    /// authors past it are skipped.
    pub async fn follow_many_fitting(
        &self,
        follower: UserId,
        targets: &[UserId],
        fit: bool,
    ) -> AppResult<FollowedMany> {
        let done = self
            .records
            .follow_many(follower, targets, fit, now_ms())
            .await?;
        self.after_follows(follower, &done).await?;
        self.hint_notified(follower, &done.new).await;
        Ok(done)
    }

    /// The cache side of follows `done` recorded, by their requester.
    async fn after_follows(&self, follower: UserId, done: &FollowedMany) -> AppResult<()> {
        for (author, epoch) in &done.promoted {
            self.promoted(*author, *epoch).await;
        }
        let Some(job) = done.job else {
            return Ok(());
        };
        let queued = "the follows are recorded; their cache update is queued";
        self.write_through(Some(job), queued, || {
            self.apply_follows(follower, done.seq, &done.new, &done.muted)
        })
        .await
    }

    /// Applies follows `seq` of `follower` (the authors `new`, of which it
    /// mutes `muted`) to the cache: the reader's copy, and into its inbox
    /// the newest posts of each (the copy limit), merged, at most the
    /// inbox's cap, in one call. Idempotent.
    pub async fn apply_follows(
        &self,
        follower: UserId,
        seq: i64,
        new: &[UserId],
        muted: &[UserId],
    ) -> AppResult<()> {
        let cap = self.settings.inbox_max_len;
        let copy = self.copy_limit();
        let mut all: Vec<Entry> = Vec::new();
        let mut cut: Option<i64> = None;
        for (_, entries) in self.records.entries_of_many(new, copy + 1).await? {
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
        let authors: Vec<(UserId, bool)> = new.iter().map(|a| (*a, !muted.contains(a))).collect();
        self.cache
            .follow_many(follower, seq, &authors, (cap, cut), &all)
            .await?;
        Ok(())
    }

    /// Unfollows (idempotent). Returns once no page of the reader shows the
    /// author's posts; if the cache cannot be written the call fails with
    /// 503 and its `unfollow` job does it (repeating the call is safe).
    /// A user never follows itself, so its own unfollow changes nothing
    /// (its own posts stay in its inbox), as any unfollow of no follow.
    pub async fn unfollow(&self, follower: UserId, followee: UserId) -> AppResult<()> {
        if follower == followee {
            return Ok(());
        }
        let change = self.records.unfollow(follower, followee, now_ms()).await?;
        let applied = self
            .after_edge_change(follower, followee, Edge::Unfollow, change)
            .await;
        self.hint_edge(follower, followee, Edge::Unfollow, false)
            .await;
        applied
    }

    /// Mutes (`mute`) or unmutes `target` for `reader` (idempotent).
    /// Returns once the reader's pages show the change: a muted author's
    /// posts leave its home (the inbox keeps them), an unmuted one's come
    /// back if it is followed.
    pub async fn mute(&self, reader: UserId, target: UserId, mute: bool) -> AppResult<()> {
        if reader == target {
            return Err(AppError::Unprocessable("a user cannot mute itself".into()));
        }
        self.active_user(reader).await?;
        if mute {
            self.user(target).await?;
        }
        let change = self
            .records
            .set_mute(reader, target, mute, now_ms())
            .await?;
        let edge = if mute { Edge::Mute } else { Edge::Unmute };
        let applied = self.after_edge_change(reader, target, edge, change).await;
        self.hint_edge(reader, target, edge, change.shown).await;
        applied
    }

    /// Applies what a change of `owner`'s lists did to its home: each
    /// member now hidden, as a mute is, or perhaps shown again, as an
    /// unmute is. Returns once the home shows it.
    pub async fn home_changed(&self, owner: UserId, changes: HomeChanges) -> AppResult<()> {
        let mut first_error = Ok(());
        for (member, hide, change) in changes {
            let edge = if hide { Edge::Mute } else { Edge::Unmute };
            let done = self.after_edge_change(owner, member, edge, change).await;
            self.hint_edge(owner, member, edge, change.shown).await;
            if first_error.is_ok() {
                first_error = done;
            }
        }
        first_error
    }

    /// `blocker` blocks `target` (idempotent): the follows between them
    /// go, either way, as unfollows do, and none is made while the block
    /// stands; neither sees the other's posts.
    pub async fn block(&self, blocker: UserId, target: UserId) -> AppResult<()> {
        if blocker == target {
            return Err(AppError::Unprocessable("a user cannot block itself".into()));
        }
        self.active_user(blocker).await?;
        self.user(target).await?;
        let blocked = self.records.block(blocker, target, now_ms()).await?;
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
            self.cache
                .hint(Signal::Shown {
                    reader: who,
                    author: other,
                    change: ShownChange::Blocked,
                })
                .await;
        }
        first_error
    }

    /// Applies change `seq` of what `follower`'s home shows of `author`
    /// (`shown` after it) to the cache: the reader's copy, and for a follow
    /// the author's newest posts into its inbox, for an unfollow out of it.
    /// Idempotent; changes apply in `seq` order.
    pub async fn apply_edge(
        &self,
        follower: UserId,
        author: UserId,
        seq: i64,
        (edge, shown): (Edge, bool),
    ) -> AppResult<()> {
        let cap = self.settings.inbox_max_len;
        let (entries, cut) = match edge {
            Edge::Follow => {
                let copy = self.copy_limit();
                let of = EntriesOf::Author(author);
                copied(self.records.entries(of, copy + 1).await?, copy)
            }
            Edge::Unfollow => (self.held_of(follower, author).await?, None),
            Edge::Mute | Edge::Unmute => (Vec::new(), None),
        };
        self.cache
            .set_follow(follower, author, seq, (edge, shown), cap, cut, &entries)
            .await?;
        if edge == Edge::Unfollow {
            self.cache.forget_active_fan(author, follower).await?;
        }
        Ok(())
    }

    /// What `reader`'s inbox may hold of `author`, for an unfollow to take
    /// out: every entry of the author it holds now, whatever cap it was
    /// pushed under and deleted or not, and the author's newest (those a
    /// push still in flight may bring).
    async fn held_of(&self, reader: UserId, author: UserId) -> AppResult<Vec<Entry>> {
        let cap = self.settings.inbox_max_len;
        let newest = EntriesOf::Held(author);
        let mut held = self
            .records
            .entries(newest, cap + (cap / 32).max(1))
            .await?;
        let inbox = self.cache.inbox(reader).await?;
        held.extend(self.records.authored_by(author, &inbox).await?);
        held.sort_by(feed_order);
        held.dedup();
        Ok(held)
    }

    /// The cache side of a follow, unfollow, mute or unmute, done by its
    /// requester.
    async fn after_edge_change(
        &self,
        follower: UserId,
        followee: UserId,
        edge: Edge,
        change: EdgeChange,
    ) -> AppResult<()> {
        if !change.changed && !self.owed(follower, followee, edge, &change).await {
            return Ok(());
        }
        if let Some(epoch) = change.promoted {
            // The deliveries of its pulled posts do it too: this is early.
            self.promoted(followee, epoch).await;
        }
        let queued = "the change is recorded; its cache update is queued";
        self.write_through(change.job, queued, || {
            self.apply_edge(follower, followee, change.seq, (edge, change.shown))
        })
        .await
    }

    /// Whether a repeated change's cache side is owed: only if an earlier
    /// call's is still missing there. (Anything else, an id never followed
    /// above all, must leave the reader's copy as it is.)
    async fn owed(
        &self,
        follower: UserId,
        followee: UserId,
        edge: Edge,
        change: &EdgeChange,
    ) -> bool {
        let copy = self.cache.followed_in_copy(follower, followee).await;
        match (edge, copy) {
            (Edge::Follow, _) => true,
            (_, Ok(Some(shown))) => shown != change.shown,
            (_, Ok(None)) => false,
            (_, Err(_)) => true,
        }
    }

    /// Records a promotion in the cache (best effort: the deliveries of
    /// the author's pulled posts record it too).
    async fn promoted(&self, author: UserId, epoch: i64) {
        let promote = PulledChange::Promote(epoch);
        if let Err(e) = self.cache.pulled_change(author, promote).await {
            tracing::warn!(error = %e.chain(), "could not record a promotion in Redis yet");
        }
    }

    /// Tells every instance's streams of `follower` what its home shows of
    /// `author` now.
    async fn hint_edge(&self, follower: UserId, author: UserId, edge: Edge, shown: bool) {
        let change = match edge {
            Edge::Follow | Edge::Unmute if shown => ShownChange::Followed,
            Edge::Follow | Edge::Unmute => return,
            Edge::Unfollow => ShownChange::Unfollowed,
            Edge::Mute => ShownChange::Muted,
        };
        self.cache
            .hint(Signal::Shown {
                reader: follower,
                author,
                change,
            })
            .await;
    }

    /// Tells every instance's streams of `followees` that `follower`
    /// follows them now (their notification is written), a few hints at
    /// a time.
    async fn hint_notified(&self, follower: UserId, followees: &[UserId]) {
        use futures::StreamExt;
        futures::stream::iter(followees)
            .for_each_concurrent(HINTS_AT_ONCE, |&user| {
                self.cache.hint(Signal::Notified {
                    user,
                    account: follower,
                })
            })
            .await;
    }

    /// How many of an author's newest posts a follow copies: the admin's
    /// limit, at most the inbox cap.
    fn copy_limit(&self) -> i64 {
        let s = &self.settings;
        s.follow_copy_limit.min(s.inbox_max_len)
    }

    async fn write_through<F, Fut>(
        &self,
        job: Option<JobId>,
        queued: &str,
        apply: F,
    ) -> AppResult<()>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = AppResult<()>>,
    {
        let deferred = || (self.deferred)();
        write_through(self.records, self.cache, job, queued, apply, deferred).await
    }

    async fn user(&self, id: UserId) -> AppResult<User> {
        existing(id, self.records.user(id).await?)
    }

    async fn active_user(&self, id: UserId) -> AppResult<User> {
        active(id, self.records.user(id).await?)
    }
}
