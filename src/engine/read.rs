//! The page read path: a reader's inbox merged with the outboxes it pulls,
//! where Redis can prove it holds the page; PostgreSQL everywhere else,
//! with the same order and cursor.

use std::collections::HashMap;

use super::cut::{after_seen, cut, Cut, Slot};
use super::merge::{merge, Horizon};
use super::{now_ms, Engine, Page, Stats, MARKED_READERS};
use crate::error::{AppError, AppResult};
use crate::metrics;
use crate::store::pg::models::{FeedRow, Post};
use crate::store::pg::{EntriesOf, FeedRows};
use crate::types::{Entry, Fallback, PageRequest, Range, Scope};

/// Redis reads of one page before the engine answers from PostgreSQL.
const MAX_READ_ROUNDS: usize = 4;

/// Offsets deeper than this are answered from PostgreSQL, which skips a
/// run of equal scores in SQL instead of reading it out of every source:
/// a page's work does not grow with its offset.
const REDIS_MAX_OFFSET: u32 = 100;

/// Entries a page reads from one source at the most (a read that would
/// need more answers from PostgreSQL).
const MAX_FETCH: usize = 1000;

/// Which feed ZSET a source is, to rebuild it when missing.
#[derive(Debug, Clone, Copy)]
enum Source {
    Inbox(i64),
    Outbox(i64),
}

/// A feed row as the cut sees it: shown if live, hidden if deleted.
fn slot(row: FeedRow) -> (Entry, Slot<Post>) {
    let entry = Entry::new(row.created_at_ms, row.id);
    match row.into_post() {
        Some(post) => (entry, Slot::Shown(post)),
        None => (entry, Slot::Hidden),
    }
}

impl Engine {
    /// A page of `reader`'s home feed.
    #[tracing::instrument(skip(self))]
    pub async fn home_page(&self, reader: i64, req: PageRequest) -> AppResult<Page> {
        self.page(Scope::Home(reader), req).await
    }

    /// A page of `author`'s own posts.
    #[tracing::instrument(skip(self))]
    pub async fn author_page(&self, author: i64, req: PageRequest) -> AppResult<Page> {
        self.user(author).await?;
        self.page(Scope::Author(author), req).await
    }

    async fn page(&self, scope: Scope, req: PageRequest) -> AppResult<Page> {
        if req.offset > PageRequest::MAX_OFFSET {
            self.check_deep_offset(scope, &req).await?;
        }
        let fallback = if req.offset > REDIS_MAX_OFFSET {
            Fallback::DeepOffset
        } else {
            match self.page_from_redis(scope, &req).await? {
                Ok(page) => {
                    metrics::page_served(None);
                    return Ok(page);
                }
                Err(reason) => reason,
            }
        };
        metrics::page_served(Some(fallback));
        self.page_from_pg(scope, &req).await
    }

    /// An offset above [`PageRequest::MAX_OFFSET`] is one the service gave
    /// only inside a longer run of entries scored exactly `max`.
    async fn check_deep_offset(&self, scope: Scope, req: &PageRequest) -> AppResult<()> {
        let Some(max) = req.max else {
            return Err(AppError::BadRequest("offset needs max".into()));
        };
        let run = self.inner.pg.count_at(scope, max).await?;
        if i64::from(req.offset) > run {
            return Err(AppError::BadRequest(format!(
                "offset must be from 0 to {}, or within the run of entries scored exactly max \
                 ({run} here), got {}",
                PageRequest::MAX_OFFSET,
                req.offset
            )));
        }
        Ok(())
    }

    /// The page straight from PostgreSQL.
    pub async fn page_from_pg(&self, scope: Scope, req: &PageRequest) -> AppResult<Page> {
        Stats::bump(&self.inner.stats.pg_pages, 1);
        let mut window = i64::from(req.limit) + 1;
        loop {
            let FeedRows { rows, complete } = self
                .inner
                .pg
                .feed(scope, req.max, req.offset, window)
                .await?;
            Stats::bump(&self.inner.stats.rows_read, rows.len() as u64);
            match cut(rows.into_iter().map(slot), req, complete) {
                Cut::Page { items, next } => return Ok(Page { items, next }),
                // Deleted posts filled the window: read further.
                Cut::NeedMore => window *= 4,
            }
        }
    }

    /// The page from Redis, or why it must come from PostgreSQL (past a
    /// floor, a source being built, Redis failing). PostgreSQL errors are
    /// returned.
    async fn page_from_redis(
        &self,
        scope: Scope,
        req: &PageRequest,
    ) -> AppResult<Result<Page, Fallback>> {
        let keys = self.inner.redis.keys();
        let (sources, big_vs): (Vec<Source>, Vec<i64>) = match scope {
            Scope::Home(reader) => {
                let pulled = self.inner.pg.pulled_followees(reader).await?;
                if pulled.iter().any(|p| p.outbox_unsure) {
                    return Ok(Err(Fallback::OutboxUnsure));
                }
                let mut sources = vec![Source::Inbox(reader)];
                sources.extend(pulled.iter().map(|p| Source::Outbox(p.id)));
                let big_vs = pulled.iter().filter(|p| p.big_v).map(|p| p.id).collect();
                (sources, big_vs)
            }
            Scope::Author(author) => (vec![Source::Outbox(author)], Vec::new()),
        };
        if let Scope::Home(reader) = scope {
            self.note_active(reader, big_vs);
        }
        let names: Vec<String> = sources
            .iter()
            .map(|s| match *s {
                Source::Inbox(u) => keys.inbox(u),
                Source::Outbox(a) => keys.outbox(a),
            })
            .collect();
        let mut fetch = req.window();
        let mut rebuilt = false;
        for _ in 0..MAX_READ_ROUNDS {
            Stats::bump(&self.inner.stats.range_reads, names.len() as u64);
            let ranges = match self.inner.redis.ranges(&names, req.max, fetch).await {
                Ok(r) => r,
                Err(e) => {
                    Stats::bump(&self.inner.stats.redis_read_errors, 1);
                    tracing::warn!(error = %e.chain(), "Redis read failed; answering from PostgreSQL");
                    return Ok(Err(Fallback::RedisUnavailable));
                }
            };
            let missing: Vec<Source> = ranges
                .iter()
                .zip(&sources)
                .filter(|(r, _)| **r == Range::Missing)
                .map(|(_, s)| *s)
                .collect();
            if !missing.is_empty() {
                if rebuilt {
                    return Ok(Err(Fallback::RebuildFailed));
                }
                rebuilt = true;
                let builds = missing.iter().map(|s| self.rebuild(*s));
                for outcome in futures::future::join_all(builds).await {
                    match outcome {
                        Ok(true) => {}
                        Ok(false) => return Ok(Err(Fallback::SourceBuilding)),
                        Err(e) => {
                            tracing::warn!(error = %e.chain(), "rebuild failed; answering from PostgreSQL");
                            return Ok(Err(Fallback::RebuildFailed));
                        }
                    }
                }
                continue;
            }
            let mut reads = Vec::with_capacity(ranges.len());
            for range in ranges {
                if let Range::Read(r) = &range {
                    Stats::bump(&self.inner.stats.entries_read, r.entries.len() as u64);
                }
                match range {
                    Range::Read(read) => reads.push(read),
                    Range::Building | Range::Missing => return Ok(Err(Fallback::SourceBuilding)),
                }
            }
            let merged = merge(&reads);
            let complete = merged.horizon == Horizon::Complete;
            if let Some(page) = self
                .cut_hydrated(scope, req, &merged.entries, complete)
                .await?
            {
                return Ok(Ok(page));
            }
            match merged.horizon {
                Horizon::Truncated(_) if fetch * 4 <= MAX_FETCH => fetch *= 4,
                Horizon::Truncated(_) => return Ok(Err(Fallback::ReadRounds)),
                Horizon::Floor(_) | Horizon::Complete => return Ok(Err(Fallback::PastFloor)),
            }
        }
        Ok(Err(Fallback::ReadRounds))
    }

    /// Hydrates the merged entries (which of them are in the feed, and
    /// which of those are live) and cuts the page. Hydrates a window at a
    /// time; `None` if the entries run out before the page is decided.
    async fn cut_hydrated(
        &self,
        scope: Scope,
        req: &PageRequest,
        entries: &[Entry],
        complete: bool,
    ) -> AppResult<Option<Page>> {
        let mut take = req.window().min(entries.len());
        loop {
            let ids: Vec<i64> = entries[..take].iter().map(|e| e.id).collect();
            Stats::bump(&self.inner.stats.hydrations, 1);
            let mut rows: HashMap<i64, FeedRow> = self
                .inner
                .pg
                .hydrate(&ids, scope)
                .await?
                .into_iter()
                .map(|r| (r.id, r))
                .collect();
            Stats::bump(&self.inner.stats.rows_read, rows.len() as u64);
            // An entry without a row is not in the feed (its author is no
            // longer followed): it is not counted.
            let stream = entries[..take]
                .iter()
                .filter_map(|e| rows.remove(&e.id))
                .map(slot);
            let all = take == entries.len();
            match cut(after_seen(stream, req), req, complete && all) {
                Cut::Page { items, next } => return Ok(Some(Page { items, next })),
                Cut::NeedMore if all => return Ok(None),
                Cut::NeedMore => take = (take * 2).min(entries.len()),
            }
        }
    }

    /// Rebuilds a missing inbox or outbox from PostgreSQL. The key is
    /// created (in the building state) before the query, so that a push
    /// racing with the rebuild lands in it rather than being skipped.
    /// Returns false if someone else is building it, or the build was
    /// abandoned meanwhile.
    async fn rebuild(&self, source: Source) -> AppResult<bool> {
        let s = self.settings();
        let keys = self.inner.redis.keys();
        let (key, of, cap) = match source {
            Source::Inbox(u) => (keys.inbox(u), EntriesOf::Home(u), s.inbox_max_len),
            Source::Outbox(a) => (keys.outbox(a), EntriesOf::Author(a), s.outbox_max_len),
        };
        if !self.inner.redis.begin_build(&key).await? {
            return Ok(false);
        }
        let entries = self.inner.pg.entries(of, cap).await?;
        let floor = if entries.len() as i64 >= cap {
            entries.last().map(|e| e.score)
        } else {
            None
        };
        if !self.inner.redis.fill(&key, cap, floor, &entries).await? {
            return Ok(false);
        }
        Stats::bump(&self.inner.stats.rebuilds, 1);
        metrics::REBUILDS.inc();
        tracing::debug!(key, entries = entries.len(), "rebuilt from PostgreSQL");
        Ok(true)
    }

    /// Records the reader as an active fan of the big-Vs it follows, at
    /// most once per interval, off the request's path.
    fn note_active(&self, reader: i64, big_vs: Vec<i64>) {
        if big_vs.is_empty() {
            return;
        }
        let interval = self.inner.tuning.active_mark_interval_secs;
        let now = now_ms();
        {
            let mut marked = match self.inner.marked.lock() {
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
        let engine = self.clone();
        tokio::spawn(async move {
            if let Err(e) = engine
                .inner
                .redis
                .record_active_fan(reader, &big_vs, now, interval)
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
