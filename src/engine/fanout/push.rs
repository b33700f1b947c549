//! Pushes: a delivery's or a backfill's entries into inboxes, a batch of
//! followers (or active fans) a step, over the stores' interface; and a
//! deleted post's entry out of them the same way. A delivery first redoes
//! what its publish wrote (idempotent), so the post is in its outbox
//! whatever became of the publish's own writes; a deleted post's delivery
//! writes its tombstone instead, and goes nowhere.

use std::time::Duration;

use super::stores::{PushCache, PushRecords};
use super::{Change, Plan, Push, Targets};
use crate::engine::now_ms;
use crate::engine::policy::{self, Audience};
use crate::error::AppResult;
use crate::store::redis::hints::Signal;
use crate::store::redis::state::PulledChange;
use crate::store::redis::WriteMark;
use crate::types::{
    floor_of_newest, AccountStatus, Delivery, EntriesOf, Entry, FeedSettings, Job, PostId, UserId,
};

/// One job's pusher: the stores, and what of this instance it uses.
pub struct Pusher<'a, R, C> {
    pub records: &'a R,
    pub cache: &'a C,
    pub settings: FeedSettings,
    /// Inboxes a batch pushes to at the most.
    pub batch: i64,
    pub post_cache_ttl_secs: u64,
    /// How long a checkpoint extends the job's lease.
    pub lease: Duration,
}

impl<R: PushRecords, C: PushCache> Pusher<'_, R, C> {
    /// A backfill's plan: the author's pulled posts (its newest `cap`; if
    /// there were more, the push is cut) into every follower's inbox.
    pub async fn plan_backfill(&self, author: UserId) -> AppResult<Plan> {
        let cap = self.settings.inbox_max_len;
        let entries = self.records.entries(EntriesOf::Pulled(author), cap).await?;
        Ok(Plan::Push {
            cut: floor_of_newest(&entries, cap),
            entries,
            to: Targets::Followers,
        })
    }

    /// A delivery's plan: first what its publish did, or could not (the
    /// post's cache state, redone: idempotent), then whom it goes to.
    /// Nothing if the post is gone or deleted (its retract job, which waits
    /// for this one, takes out what the publish wrote), or its author is
    /// being deleted.
    pub async fn plan_delivery(&self, author: UserId, post: PostId) -> AppResult<Plan> {
        let Some(delivery) = self.records.delivery(post).await? else {
            return Ok(Plan::Nothing);
        };
        if delivery.post.deleted {
            // The tombstone first: a publish's write of the post racing
            // this never clears it.
            self.cache.tombstone(post, self.post_cache_ttl_secs).await?;
            self.undone_for_a_deleted_author(author, post).await?;
            return Ok(Plan::Nothing);
        }
        if !self.redo_publish(author, post, &delivery).await? {
            return Ok(Plan::Nothing);
        }
        let to = match policy::audience(delivery.pulled) {
            Audience::Followers => Targets::Followers,
            Audience::ActiveFans => {
                let since = now_ms() - self.settings.active_window_secs * 1000;
                Targets::Fans(self.cache.active_fans(author, since).await?)
            }
        };
        Ok(Plan::Push {
            entries: vec![Entry::new(delivery.post.created_at_ms, post)],
            cut: None,
            to,
        })
    }

    /// A retraction's plan: the deleted post's entry, out of its outbox and
    /// of every inbox a post of its author goes to (an active fan of a
    /// big-V is a follower too). Nothing if the post is gone (purged with
    /// its account, which took its keys).
    pub async fn plan_retract(&self, post: PostId) -> AppResult<Plan> {
        Ok(match self.records.delivery(post).await? {
            Some(d) => Plan::Retract {
                post,
                entry: Entry::new(d.post.created_at_ms, post),
            },
            None => Plan::Nothing,
        })
    }

    /// A retraction's next step: the post's tombstone (the cache may have
    /// lost it meanwhile), then its entry out of the next batch of lists
    /// ([`Self::push_step`]); true after the last batch. If its author is
    /// being deleted, the purge takes the entries out, and this step takes
    /// back what it wrote and ends.
    pub async fn retract_step(
        &self,
        job: &mut Job,
        ahead: &mut Option<(i64, Vec<UserId>)>,
        (post, entry): (PostId, Entry),
        record: bool,
        mark: WriteMark,
    ) -> AppResult<bool> {
        self.cache.tombstone(post, self.post_cache_ttl_secs).await?;
        if self
            .undone_for_a_deleted_author(job.author_id, post)
            .await?
        {
            return Ok(true);
        }
        let push = Push {
            change: Change::Remove(entry),
            to: &Targets::Followers,
        };
        self.push_step(job, ahead, push, record, mark).await
    }

    /// Writes what a publish writes to the cache (the outbox, the post
    /// cache, the delivery in flight; a big-V's place among the pulled), in
    /// case it could not; streams hear of a post it had not written. False
    /// if the author is being deleted (the writes are taken back).
    async fn redo_publish(
        &self,
        author: UserId,
        post: PostId,
        delivery: &Delivery,
    ) -> AppResult<bool> {
        let ttl = self.post_cache_ttl_secs;
        let outbox_cap = self.settings.outbox_max_len;
        let new = self
            .cache
            .publish(&delivery.post, post, outbox_cap, ttl)
            .await?;
        if delivery.big_v {
            let promote = PulledChange::Promote(delivery.big_v_epoch);
            self.cache.pulled_change(author, promote).await?;
        }
        if self.undone_for_a_deleted_author(author, post).await? {
            return Ok(false);
        }
        if new {
            let score = delivery.post.created_at_ms;
            self.cache
                .hint(Signal::Published {
                    author,
                    post,
                    score,
                })
                .await;
        }
        Ok(true)
    }

    /// After a delivery or a retraction wrote its post's cache state: if
    /// its author is being deleted (or gone) by now, that state goes again
    /// and true is returned. An account is marked deleted before its purge starts, so
    /// either this sees the mark, or the purge's own forgetting comes after
    /// these writes: a purged author is never pulled, nor its outbox kept,
    /// by a delivery that raced it.
    async fn undone_for_a_deleted_author(&self, author: UserId, post: PostId) -> AppResult<bool> {
        let here = self
            .records
            .user(author)
            .await?
            .is_some_and(|u| u.status != AccountStatus::Deleted);
        if here {
            return Ok(false);
        }
        self.cache.take_back(author, post).await?;
        self.cache
            .pulled_change(author, PulledChange::Forget)
            .await?;
        Ok(true)
    }

    /// Makes a push's change (its entries in, or a deleted post's entry
    /// out) in the next batch of its inboxes (the next page of followers is
    /// read meanwhile), then checkpoints, once a replica holds the batch;
    /// true after the last batch. Without `record`, the worker dies between
    /// the batch and its checkpoint.
    pub async fn push_step(
        &self,
        job: &mut Job,
        ahead: &mut Option<(i64, Vec<UserId>)>,
        push: Push<'_>,
        record: bool,
        mark: WriteMark,
    ) -> AppResult<bool> {
        let batch = self.batch;
        let (readers, last_page) = match push.to {
            Targets::Followers => {
                let page = match ahead.take() {
                    Some((after, page)) if after == job.checkpoint => page,
                    _ => {
                        self.records
                            .inboxes_after(job.author_id, job.checkpoint, batch)
                            .await?
                    }
                };
                let last = (page.len() as i64) < batch;
                (page, last)
            }
            Targets::Fans(fans) => {
                let start = fans.partition_point(|f| *f <= UserId(job.checkpoint));
                let end = fans.len().min(start + batch as usize);
                (fans[start..end].to_vec(), end == fans.len())
            }
        };
        let Some(&last) = readers.last() else {
            return Ok(last_page);
        };
        let (cap, author) = (self.settings.inbox_max_len, job.author_id);
        let pushed = async {
            match push.change {
                Change::Add { entries, cut } => self.cache.push(&readers, entries, cap, cut).await,
                Change::Remove(entry) => {
                    self.cache.withdraw(author, &readers, entry).await?;
                    Ok(0)
                }
            }
        };
        // The next page is read while this one is pushed: a follower who
        // follows meanwhile is either on it or gets the post from its
        // follow's backfill, as before.
        let added = if matches!(push.to, Targets::Followers) && !last_page {
            let next = self.records.inboxes_after(job.author_id, last.0, batch);
            let (added, next) = futures::future::join(pushed, next).await;
            if let Ok(page) = next {
                *ahead = Some((last.0, page));
            }
            added?
        } else {
            pushed.await?
        };
        crate::metrics::INBOX_WRITES.inc_by(added.max(0) as u64);
        if !last_page && record {
            // A failover must not lose a checkpointed batch.
            self.cache.replicated(mark).await?;
            self.records.checkpoint_job(job, last.0, self.lease).await?;
        }
        job.checkpoint = last.0;
        Ok(last_page)
    }
}
