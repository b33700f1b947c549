//! Posts: publishing (a post and its delivery job committed, then the post
//! written to its outbox and among the deliveries in flight, which every
//! follower pulls, so that it shows at once), reading one, deleting one.

use std::sync::atomic::Ordering;

use super::write::retried;
use super::{now_ms, Engine, Publication};
use crate::domain::{IdempotencyKey, PostBody, PostMeta};
use crate::error::{AppError, AppResult};
use crate::store::pg::{Deletion, Published};
use crate::store::redis::hints::Signal;
use crate::types::{CachedPost, Entry, Post, PostId, UserId};

/// Seconds a publish refused for the backlog asks its client to wait.
const BACKLOG_RETRY_SECS: u64 = 5;

/// Publishing, reading and deleting a post ([`Engine::posts`]).
#[derive(Clone, Copy)]
pub struct Posts<'a>(pub(crate) &'a Engine);

impl Posts<'_> {
    pub async fn publish(self, author: UserId, body: &PostBody) -> AppResult<Post> {
        self.publish_at(author, body, now_ms()).await
    }

    /// Publishes with a chosen timestamp (tests and seeding use it to make
    /// ties, or to stand for an instance whose clock lags).
    pub async fn publish_at(
        self,
        author: UserId,
        body: &PostBody,
        created_at_ms: i64,
    ) -> AppResult<Post> {
        Ok(self
            .publish_keyed_at(author, (body, None), None, created_at_ms)
            .await?
            .post)
    }

    /// Publishes a post with the app's own data and, if the client names
    /// one, a key: a publish with a key the author used in the last day
    /// answers that first post (`replayed`) and writes nothing, whatever
    /// became of the first call's answer; the same key with another body
    /// or meta is refused.
    pub async fn publish_keyed(
        self,
        author: UserId,
        draft: (&PostBody, Option<&PostMeta>),
        key: Option<&IdempotencyKey>,
    ) -> AppResult<Publication> {
        self.publish_keyed_at(author, draft, key, now_ms()).await
    }

    /// [`Self::publish_keyed`] with a chosen timestamp. Returns once the
    /// post and its `deliver` job are committed and the post is in its
    /// author's outbox and among the deliveries in flight, which every
    /// follower pulls; the fan-out itself runs in the workers. (If Redis
    /// cannot be written even after retries, the post is committed and
    /// shows once its delivery job has run: about a second.)
    #[tracing::instrument(skip(self, draft))]
    pub async fn publish_keyed_at(
        self,
        author: UserId,
        draft: (&PostBody, Option<&PostMeta>),
        key: Option<&IdempotencyKey>,
        created_at_ms: i64,
    ) -> AppResult<Publication> {
        let (body, meta) = (draft.0.as_str(), draft.1.map(PostMeta::as_str));
        // A retry answers even past the backlog: its post is committed.
        if let Some(key) = key {
            if let Some(first) = self.first_publish(author, key, (body, meta)).await? {
                return Ok(first);
            }
        }
        let (backlog, max) = (
            self.0.inner.backlog.load(Ordering::Relaxed),
            self.0.settings().max_fanout_backlog,
        );
        if backlog >= max {
            return Err(AppError::Overloaded {
                message: format!(
                    "{backlog} deliveries are waiting (the limit is {max}): retry in \
                     {BACKLOG_RETRY_SECS} s"
                ),
                retry_after_secs: BACKLOG_RETRY_SECS,
            });
        }
        if !crate::store::redis::layout::fits(&Entry::new(created_at_ms, PostId(0))) {
            return Err(AppError::internal(
                "a post's time",
                crate::error::Message(format!(
                    "{created_at_ms} ms is outside what a feed entry holds (2020 to 2054): \
                     is the clock right?"
                )),
            ));
        }
        let published = self
            .0
            .inner
            .pg
            .posts()
            .publish(
                author,
                (body, meta),
                key.map(IdempotencyKey::as_str),
                created_at_ms,
                now_ms(),
            )
            .await?;
        let post = match (published, key) {
            (Published::New(post), _) => post,
            (Published::NoAuthor, _) => {
                // No active author: none or deleted (404), or suspended (403).
                self.0.accounts().active_user(author).await?;
                return Err(AppError::NotFound(format!("user {author} does not exist")));
            }
            // A retry committed the key meanwhile: its post is the answer.
            (Published::KeyTaken, Some(key)) => {
                return self
                    .first_publish(author, key, (body, meta))
                    .await?
                    .ok_or_else(|| {
                        AppError::Conflict(format!(
                            "a publish with Idempotency-Key {:?} is in progress: retry",
                            key.as_str()
                        ))
                    })
            }
            (Published::KeyTaken, None) => {
                return Err(AppError::internal(
                    "a publish",
                    crate::error::Message("a key was taken by a publish without one".into()),
                ))
            }
        };
        let cached = CachedPost::of(&post, false);
        let cap = self.0.settings().outbox_max_len;
        let ttl = self.0.tuning().post_cache_ttl_secs;
        let hint = Signal::Published {
            author,
            post: post.id,
            score: post.created_at_ms,
        };
        // Remembered first, for this instance's streams that hear the hint;
        // they hold it until this publish's answer is written (`held`).
        self.0.remember(std::slice::from_ref(&post));
        let held = self.0.publishing(post.id);
        let cache = || async {
            let mark = self.0.inner.redis.write_mark();
            self.0
                .inner
                .redis
                .posts()
                .publish(&cached, post.id, cap, ttl, Some(&hint))
                .await?;
            self.0.inner.redis.replicated(mark).await
        };
        if let Err(e) = retried(cache).await {
            self.0.deferred();
            tracing::warn!(post = post.id.0, error = %e.chain(),
                "post committed but not cached: it shows once its delivery job has run");
            self.0.hint(hint).await;
        }
        // The workers start its delivery once the publish is done with Redis.
        self.0.inner.wake.notify_waiters();
        Ok(Publication {
            post,
            replayed: false,
            held: Some(held),
        })
    }

    /// The post `author` published with `key` (deleted since or not), if
    /// it did in the last day; refused if `draft` is not that post's.
    async fn first_publish(
        self,
        author: UserId,
        key: &IdempotencyKey,
        draft: (&str, Option<&str>),
    ) -> AppResult<Option<Publication>> {
        let Some(post) = self
            .0
            .inner
            .pg
            .posts()
            .published_with(author, key.as_str())
            .await?
        else {
            return Ok(None);
        };
        if (post.body.as_str(), post.meta.as_deref()) != draft {
            return Err(AppError::Unprocessable(format!(
                "Idempotency-Key {:?} was used for another post (id {}) in the last {} hours",
                key.as_str(),
                post.id,
                crate::store::pg::PUBLISH_KEY_HOURS
            )));
        }
        Ok(Some(Publication {
            post,
            replayed: true,
            held: None,
        }))
    }

    /// A live post as `viewer` sees it (`None`: an admin): not found while
    /// its author and the viewer block one another.
    pub async fn post_seen_by(self, viewer: Option<UserId>, id: PostId) -> AppResult<Post> {
        let post = self.post(id).await?;
        match viewer {
            Some(v) if self.0.relations().apart(v, post.author_id).await? => {
                Err(AppError::NotFound(format!("post {id} does not exist")))
            }
            _ => Ok(post),
        }
    }

    /// Post `id` of `author` as a feed shows it, read once for every
    /// stream of this instance: none once deleted or while its author is
    /// hidden. From the post cache and the marks (asked at once), else
    /// from PostgreSQL.
    pub async fn live(self, id: PostId, author: UserId) -> AppResult<Option<Post>> {
        let redis = &self.0.inner.redis;
        let ids = [id];
        let (cached, hidden) = futures::join!(redis.posts().cached(&ids), redis.hidden(author));
        match (cached, hidden) {
            (Ok(mut cached), Ok(Some(hidden))) => {
                if let Some(c) = cached.remove(&id) {
                    let shown = !c.deleted && !hidden && c.author_id == author;
                    return Ok(shown.then(|| c.into_post(id)));
                }
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::debug!(error = %e.chain(), "could not read a cached post")
            }
            // The marks' copy is being built: PostgreSQL knows.
            (Ok(_), Ok(None)) => {}
        }
        self.0.inner.pg.posts().post(id).await
    }

    pub async fn post(self, id: PostId) -> AppResult<Post> {
        self.0
            .inner
            .pg
            .posts()
            .post(id)
            .await?
            .ok_or_else(|| AppError::NotFound(format!("post {id} does not exist")))
    }

    /// Deletes a post; `actor` is the user asking (`None` for an admin).
    /// Returns once no page shows it (its tombstone is written through); if
    /// Redis cannot be written the call fails with 503 and its `retract`
    /// job does it (repeating the call is safe: it answers 404 once the
    /// post is gone everywhere). The job stays either way: it takes the
    /// post's entries out of its outbox and the inboxes, in batches.
    #[tracing::instrument(skip(self))]
    pub async fn delete_post(self, id: PostId, actor: Option<UserId>) -> AppResult<()> {
        let ttl = self.0.tuning().post_cache_ttl_secs;
        let gone = || AppError::NotFound(format!("post {id} does not exist"));
        match self
            .0
            .inner
            .pg
            .posts()
            .delete_post(id, actor, now_ms())
            .await?
        {
            Deletion::NotFound => Err(gone()),
            Deletion::Forbidden => Err(AppError::Forbidden(format!(
                "post {id} belongs to another user"
            ))),
            Deletion::AlreadyDeleted => {
                // A repeated call: the post is gone whatever Redis says. The
                // tombstone is rewritten if it can be; if it cannot, the
                // first call's retract job still writes it.
                if let Err(e) = self.0.inner.redis.posts().tombstone(id, ttl).await {
                    tracing::debug!(error = %e.chain(), "could not rewrite a tombstone");
                }
                Err(gone())
            }
            Deletion::Deleted {
                author_id,
                created_at_ms,
            } => {
                self.0
                    .hint(Signal::Deleted {
                        author: author_id,
                        post: id,
                        score: Some(created_at_ms),
                    })
                    .await;
                let queued = "the post is deleted; hiding it everywhere is queued";
                self.0.inner.wake.notify_waiters();
                self.0
                    .write_through(None, queued, || {
                        self.0.inner.redis.posts().tombstone(id, ttl)
                    })
                    .await
            }
        }
    }
}
