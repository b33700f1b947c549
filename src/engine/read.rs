//! The page read path: a reader's inbox merged with the outboxes it pulls,
//! where Redis can prove it holds the page; PostgreSQL everywhere else,
//! with the same order and cursor.

use std::collections::{BTreeMap, HashMap};

use super::cut::{after_seen, cut, Cut, Slot};
use super::merge::{merge, Horizon};
use super::{now_ms, Engine, Page, Stats, MARKED_READERS};
use crate::error::{AppError, AppResult};
use crate::metrics;
use crate::store::pg::models::{FeedRow, Post};
use crate::store::pg::{EntriesOf, FeedRows};
use crate::store::redis::state::PulledAuthor;
use crate::types::{
    CachedPost, Entry, EntryMeta, Fallback, PageRequest, Range, Scope, StateKey, WarmRead,
};

/// Redis reads of one page before the engine answers from PostgreSQL.
const MAX_READ_ROUNDS: usize = 4;

/// Offsets deeper than this are answered from PostgreSQL, which skips a
/// run of equal scores in SQL instead of reading it out of every source:
/// a page's work does not grow with its offset.
const REDIS_MAX_OFFSET: u32 = 100;

/// Entries a page reads from one source at the most (a read that would
/// need more answers from PostgreSQL).
const MAX_FETCH: usize = 1000;

/// Which feed list a source is, to rebuild it when missing.
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

    /// A page of `author`'s own posts. (An author that does not exist has
    /// no outbox: the cold path answers 404.)
    #[tracing::instrument(skip(self))]
    pub async fn author_page(&self, author: i64, req: PageRequest) -> AppResult<Page> {
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
        if let Scope::Author(a) = scope {
            self.user(a).await?;
        }
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
                Cut::Page { items, mut next } => {
                    // Below `max` the rows were live ones only: the cursor
                    // also passes the deleted posts that share the last
                    // item's millisecond and come before it.
                    if let (Some(c), Some(last)) = (next.as_mut(), items.last()) {
                        if Some(c.max) != req.max {
                            let hidden = self.inner.pg.deleted_ahead(scope, c.max, last.id).await?;
                            c.offset = c
                                .offset
                                .saturating_add(u32::try_from(hidden).unwrap_or(u32::MAX));
                        }
                    }
                    return Ok(Page { items, next });
                }
                // The run of entries scored `max` filled the window (deleted
                // ones included): read further into it.
                Cut::NeedMore => window *= 4,
            }
        }
    }

    /// The page from Redis, or why it must come from PostgreSQL (past a
    /// floor, a source being built, Redis failing). A warm page (everything
    /// in Redis) is one round trip and no SQL; PostgreSQL errors of a cold
    /// one are returned.
    async fn page_from_redis(
        &self,
        scope: Scope,
        req: &PageRequest,
    ) -> AppResult<Result<Page, Fallback>> {
        let keys = self.inner.redis.keys();
        let (reader, first) = match scope {
            Scope::Home(r) => (Some(r), Source::Inbox(r)),
            Scope::Author(a) => (None, Source::Outbox(a)),
        };
        let first_key = match first {
            Source::Inbox(r) => keys.inbox(r),
            Source::Outbox(a) => keys.outbox(a),
        };
        let mut fetch = req.window();
        // Each kind of missing state is rebuilt once per page at most.
        let mut rebuilt_state: Vec<StateKey> = Vec::new();
        let mut rebuilt_sources = false;
        for _ in 0..MAX_READ_ROUNDS + 2 {
            let read = match self
                .inner
                .redis
                .warm_read(reader, &first_key, req.max, fetch)
                .await
            {
                Ok(r) => r,
                Err(e) => {
                    Stats::bump(&self.inner.stats.redis_read_errors, 1);
                    tracing::warn!(error = %e.chain(), "Redis read failed; answering from PostgreSQL");
                    return Ok(Err(Fallback::RedisUnavailable));
                }
            };
            let (sources, meta) = match read {
                WarmRead::Building(_) => return Ok(Err(Fallback::SourceBuilding)),
                WarmRead::Missing(state) => {
                    if rebuilt_state.contains(&state) {
                        return Ok(Err(Fallback::RebuildFailed));
                    }
                    rebuilt_state.push(state);
                    match self.rebuild_state(state, reader).await {
                        Ok(true) => continue,
                        Ok(false) => return Ok(Err(Fallback::SourceBuilding)),
                        Err(e) => {
                            tracing::warn!(error = %e.chain(), "rebuild failed; answering from PostgreSQL");
                            return Ok(Err(Fallback::RebuildFailed));
                        }
                    }
                }
                WarmRead::Read { sources, meta } => (sources, meta),
            };
            if let Some(reader) = reader {
                let pulled: Vec<i64> = sources.iter().filter_map(|(a, _)| *a).collect();
                // Pulled authors are big-Vs, or have a delivery in flight:
                // being an active fan of the latter is harmless.
                self.note_active(reader, pulled);
            }
            let missing: Vec<Source> = sources
                .iter()
                .filter(|(_, r)| *r == Range::Missing)
                .map(|(author, _)| author.map_or(first, Source::Outbox))
                .collect();
            if !missing.is_empty() {
                if rebuilt_sources {
                    return Ok(Err(Fallback::RebuildFailed));
                }
                rebuilt_sources = true;
                if let Scope::Author(a) = scope {
                    // The outbox of an author who may not exist.
                    self.user(a).await?;
                }
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
            let mut reads = Vec::with_capacity(sources.len());
            for (_, range) in sources {
                match range {
                    Range::Read(read) => {
                        Stats::bump(&self.inner.stats.entries_read, read.entries.len() as u64);
                        reads.push(read)
                    }
                    Range::Building | Range::Missing => return Ok(Err(Fallback::SourceBuilding)),
                }
            }
            let merged = merge(&reads);
            let complete = merged.horizon == Horizon::Complete;
            if let Some(page) = self
                .cut_known(scope, req, &merged.entries, &meta, complete)
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

    /// Cuts the page from the merged entries with what the cache knows of
    /// them: followed or not, deleted or not, and their bodies (from this
    /// instance's cache, else Redis). Entries the cache lacks are read from
    /// PostgreSQL (and cached). `None` if the entries run out before the
    /// page is decided.
    async fn cut_known(
        &self,
        scope: Scope,
        req: &PageRequest,
        entries: &[Entry],
        meta: &HashMap<i64, EntryMeta>,
        complete: bool,
    ) -> AppResult<Option<Page>> {
        let mut take = req.window().min(entries.len());
        loop {
            let window = &entries[..take];
            // Shown posts need bodies; posts the cache does not know need
            // PostgreSQL.
            let mut unknown = Vec::new();
            let mut wanted = Vec::new();
            for e in window {
                match meta.get(&e.id) {
                    Some(m) if m.author.is_some() => {
                        if m.followed && !m.deleted {
                            wanted.push(e.id);
                        }
                    }
                    _ => unknown.push(e.id),
                }
            }
            let mut posts = self.recall(&wanted);
            let missing: Vec<i64> = wanted
                .iter()
                .copied()
                .filter(|id| !posts.contains_key(id))
                .collect();
            if !missing.is_empty() {
                let cached = match self.inner.redis.posts(&missing).await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::debug!(error = %e.chain(), "could not read cached posts");
                        HashMap::new()
                    }
                };
                let found: Vec<Post> = cached
                    .into_iter()
                    .map(|(id, c)| Post {
                        id,
                        author_id: c.author_id,
                        author_username: c.author_username,
                        body: c.body,
                        created_at_ms: c.created_at_ms,
                        meta: c.meta,
                    })
                    .collect();
                self.remember(&found);
                posts.extend(found.into_iter().map(|p| (p.id, p)));
                unknown.extend(missing.iter().filter(|id| !posts.contains_key(id)));
            }
            let mut from_pg: HashMap<i64, FeedRow> = HashMap::new();
            if !unknown.is_empty() {
                Stats::bump(&self.inner.stats.hydrations, 1);
                let rows = self.inner.pg.hydrate(&unknown, scope).await?;
                Stats::bump(&self.inner.stats.rows_read, rows.len() as u64);
                // Cache them: the live ones whole, the deleted ones as
                // tombstones (a deletion is final), so the next page over
                // them needs no SQL either.
                let known: Vec<(i64, CachedPost)> = rows
                    .iter()
                    .map(|r| {
                        (
                            r.id,
                            CachedPost {
                                author_id: r.author_id,
                                author_username: r.author_username.clone(),
                                body: r.body.clone(),
                                created_at_ms: r.created_at_ms,
                                deleted: !r.live,
                                meta: r.meta.clone(),
                            },
                        )
                    })
                    .collect();
                if let Err(e) = self
                    .inner
                    .redis
                    .fill_posts(&known, self.tuning().post_cache_ttl_secs)
                    .await
                {
                    tracing::debug!(error = %e.chain(), "could not cache posts");
                }
                from_pg = rows.into_iter().map(|r| (r.id, r)).collect();
            }
            let stream = window.iter().filter_map(|e| {
                if unknown.contains(&e.id) {
                    // In the feed only if PostgreSQL has it there.
                    return from_pg.remove(&e.id).map(slot);
                }
                let m = meta.get(&e.id)?;
                if !m.followed {
                    return None;
                }
                if m.deleted {
                    return Some((*e, Slot::Hidden));
                }
                posts.remove(&e.id).map(|p| (*e, Slot::Shown(p)))
            });
            let all = take == entries.len();
            match cut(after_seen(stream, req), req, complete && all) {
                Cut::Page { items, next } => return Ok(Some(Page { items, next })),
                Cut::NeedMore if all => return Ok(None),
                Cut::NeedMore => take = (take * 2).min(entries.len()),
            }
        }
    }

    /// Rebuilds the reader state a warm read missed, from PostgreSQL; false
    /// if someone else is building it.
    async fn rebuild_state(&self, state: StateKey, reader: Option<i64>) -> AppResult<bool> {
        let built = match (state, reader) {
            (StateKey::Following, Some(r)) => {
                if !self.inner.redis.begin_following(r).await? {
                    return Ok(false);
                }
                let (seq, followees) = self.inner.pg.following_state(r).await?;
                let ttl = self.settings().inbox_idle_ttl_secs as u64;
                self.inner
                    .redis
                    .fill_following(r, seq, &followees, ttl)
                    .await?
            }
            (StateKey::Pulled, _) => {
                if !self.inner.redis.begin_pulled().await? {
                    return Ok(false);
                }
                let mut by_author: BTreeMap<i64, PulledAuthor> = BTreeMap::new();
                for row in self.inner.pg.pulled_state().await? {
                    let a = by_author.entry(row.author).or_insert(PulledAuthor {
                        author: row.author,
                        epoch: None,
                        in_flight: Vec::new(),
                    });
                    // `None` (no big-V time) is below every epoch.
                    a.epoch = a.epoch.max(row.epoch);
                    a.in_flight.extend(row.post);
                }
                let authors: Vec<PulledAuthor> = by_author.into_values().collect();
                self.inner.redis.fill_pulled(&authors).await?
            }
            (StateKey::Following, None) => return Ok(false),
        };
        if built {
            Stats::bump(&self.inner.stats.rebuilds, 1);
            metrics::REBUILDS.inc();
        }
        Ok(built)
    }

    /// Rebuilds a missing inbox or outbox from PostgreSQL. The key is
    /// created (in the building state) before the query, so that a push
    /// racing with the rebuild lands in it rather than being skipped.
    /// Returns false if someone else is building it, or the build was
    /// abandoned meanwhile.
    async fn rebuild(&self, source: Source) -> AppResult<bool> {
        let s = self.settings();
        let keys = self.inner.redis.keys();
        // Inboxes of idle readers expire; outboxes stay.
        let (key, of, cap, ttl) = match source {
            Source::Inbox(u) => (
                keys.inbox(u),
                EntriesOf::Home(u),
                s.inbox_max_len,
                s.inbox_idle_ttl_secs as u64,
            ),
            Source::Outbox(a) => (keys.outbox(a), EntriesOf::Author(a), s.outbox_max_len, 0),
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
        if !self
            .inner
            .redis
            .fill(&key, cap, floor, &entries, ttl)
            .await?
        {
            return Ok(false);
        }
        Stats::bump(&self.inner.stats.rebuilds, 1);
        metrics::REBUILDS.inc();
        tracing::debug!(key, entries = entries.len(), "rebuilt from PostgreSQL");
        Ok(true)
    }

    /// Notes a read, at most once per interval and off the request's path:
    /// the reader's keys get the idle TTL again, and it is recorded as an
    /// active fan of the big-Vs it follows.
    fn note_active(&self, reader: i64, big_vs: Vec<i64>) {
        let interval = self.inner.tuning.active_mark_interval_secs;
        let live = self.settings();
        let ttls = (
            live.inbox_idle_ttl_secs as u64,
            live.active_window_secs as u64,
        );
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
