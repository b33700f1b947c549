//! The page read path: a reader's inbox merged with the outboxes it pulls,
//! where Redis can prove it holds the page; PostgreSQL everywhere else,
//! with the same order and cursor.
//!
//! - `stores`: what a page needs of the stores (its two traits);
//! - `reader`: the algorithm, over those traits;
//! - here: the engine's page calls, over PostgreSQL and Redis.

mod reader;
mod stores;
#[cfg(test)]
mod tests;

use super::{now_ms, Engine, Page, MARKED_READERS};
use crate::error::{AppError, AppResult};
use crate::store::pg::PgStore;
use crate::store::redis::RedisStore;
use crate::types::{PageRequest, Prev, Scope, UserId};
pub(super) use reader::within_run;
use reader::Reader;

/// Pages of a home or an author, from Redis or PostgreSQL ([`Engine::reads`]).
#[derive(Clone, Copy)]
pub struct Reads<'a>(pub(crate) &'a Engine);

impl Reads<'_> {
    /// A page of `reader`'s home feed.
    #[tracing::instrument(skip(self))]
    pub async fn home_page(self, reader: UserId, req: PageRequest) -> AppResult<Page> {
        let note = |reader, big_vs| self.note_active(reader, big_vs);
        self.reader(&note).page(self.home_scope(reader), req).await
    }

    /// A page of a list's timeline ([`crate::engine::lists`]).
    #[tracing::instrument(skip(self))]
    pub async fn list_page(self, list: Scope, req: PageRequest) -> AppResult<Page> {
        self.reader(&|_, _| {}).page(list, req).await
    }

    /// A page of `author`'s own posts as `viewer` sees them (`None`: an
    /// admin, who sees everything): nothing while either blocks the other
    /// (a PostgreSQL query; while PostgreSQL is down the page is served
    /// unchecked, as warm pages are).
    pub async fn author_page_seen_by(
        self,
        viewer: Option<UserId>,
        author: UserId,
        req: PageRequest,
    ) -> AppResult<Page> {
        if let Some(viewer) = viewer {
            match self.0.relations().apart(viewer, author).await {
                Ok(false) => {}
                Ok(true) => {
                    self.0.user(author).await?;
                    return Ok(Page {
                        items: Vec::new(),
                        next: None,
                        prev: Prev::BOTTOM,
                        marks: Vec::new(),
                    });
                }
                // Blocks are read from PostgreSQL: while it is away, warm
                // pages are still served (as homes are), blocks unchecked.
                Err(e @ (AppError::Unavailable { .. } | AppError::TimedOut { .. })) => {
                    tracing::warn!(error = %e.chain(), "blocks unread: the author page is served without them");
                }
                Err(e) => return Err(e),
            }
        }
        self.author_page(author, req).await
    }

    /// A reader's home feed as the settings define it now.
    pub fn home_scope(self, reader: UserId) -> Scope {
        Scope::Home {
            reader,
            own: self.0.settings().home_includes_own_posts,
        }
    }

    /// A page of `author`'s own posts. (An author that does not exist has
    /// no outbox: the cold path answers 404.)
    #[tracing::instrument(skip(self))]
    pub async fn author_page(self, author: UserId, req: PageRequest) -> AppResult<Page> {
        self.reader(&|_, _| {})
            .page(Scope::Author(author), req)
            .await
    }

    /// The page straight from PostgreSQL.
    pub async fn page_from_pg(self, scope: Scope, req: &PageRequest) -> AppResult<Page> {
        self.reader(&|_, _| {}).page_from_pg(scope, req).await
    }

    /// A reader of pages over this engine's stores, telling `pulled` of
    /// each warm read of a home.
    fn reader<'a>(
        &'a self,
        pulled: &'a (dyn Fn(UserId, Vec<UserId>) + Sync),
    ) -> Reader<'a, PgStore, RedisStore> {
        Reader {
            records: &self.0.inner.pg,
            cache: &self.0.inner.redis,
            stats: &self.0.inner.stats,
            settings: self.0.settings(),
            post_cache_ttl_secs: self.0.inner.tuning.post_cache_ttl_secs,
            bodies: &self.0.inner.bodies,
            pulled,
        }
    }

    /// Notes a read, at most once per interval and off the request's path:
    /// the reader's keys get the idle TTL again, and it is recorded as an
    /// active fan of the big-Vs it follows.
    fn note_active(self, reader: UserId, big_vs: Vec<UserId>) {
        let interval = self.0.inner.tuning.active_mark_interval_secs;
        let live = self.0.settings();
        let ttls = (
            live.inbox_idle_ttl_secs as u64,
            live.active_window_secs as u64,
        );
        let now = now_ms();
        {
            let mut marked = match self.0.inner.marked.lock() {
                Ok(m) => m,
                Err(poisoned) => poisoned.into_inner(),
            };
            if marked
                .get(&reader)
                .is_some_and(|&at| now - at < interval as i64 * 1000)
            {
                return;
            }
            if marked.len() >= MARKED_READERS {
                marked.clear();
            }
            marked.insert(reader, now);
        }
        let engine = self.0.clone();
        tokio::spawn(async move {
            if let Err(e) = engine
                .inner
                .redis
                .fans()
                .touch_reader(reader, &big_vs, now, interval, ttls)
                .await
            {
                tracing::debug!(error = %e.chain(), "could not record an active fan");
                if let Ok(mut marked) = engine.inner.marked.lock() {
                    marked.remove(&reader);
                }
            }
        });
    }
}
