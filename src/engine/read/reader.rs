//! The page read path over the stores' interface: a reader's inbox merged
//! with the outboxes it pulls, where the cache can prove it holds the page;
//! the records everywhere else, with the same order and cursor.

use std::collections::HashMap;

use super::stores::{Cache, FeedList, ListFill, Part, Records};
use crate::engine::bodies::SharedBodies;
use crate::engine::cut::{after_seen, cut, cut_up, positioned, Cut, CutUp, Slot};
use crate::engine::merge::{merge, Horizon, Merged};
use crate::engine::{existing, Page, Stats};
use crate::error::{AppError, AppResult};
use crate::metrics;
use crate::types::{
    floor_of_newest, CachedPost, EntriesOf, Entry, EntryMeta, Fallback, FeedPost, FeedRows,
    FeedSettings, PageRequest, Post, PostId, Prev, Range, Scope, SourceRead, StateKey, User,
    UserId, WarmRead,
};

/// One page's reader: the stores it reads, and what of this instance it
/// uses (its counters, its settings, its cache of bodies).
pub struct Reader<'a, R, C> {
    pub records: &'a R,
    pub cache: &'a C,
    pub stats: &'a Stats,
    pub settings: FeedSettings,
    pub post_cache_ttl_secs: u64,
    pub bodies: &'a SharedBodies,
    /// Told of each warm read of a home: its reader, and the authors whose
    /// outboxes it pulled.
    pub pulled: &'a (dyn Fn(UserId, Vec<UserId>) + Sync),
}

/// Redis reads of one page before the engine answers from PostgreSQL.
const MAX_READ_ROUNDS: usize = 4;

/// Offsets deeper than this are answered from PostgreSQL, which skips a
/// run of equal scores in SQL instead of reading it out of every source:
/// a page's work does not grow with its offset.
const REDIS_MAX_OFFSET: u32 = 100;

/// An offset above [`PageRequest::MAX_OFFSET`] is one the service gave only
/// inside a run of `run` entries scored exactly the request's `max` (or
/// `min`): any other is refused before a query reads that far.
pub(crate) fn within_run(req: &PageRequest, run: i64) -> AppResult<()> {
    if i64::from(req.offset) > run {
        return Err(AppError::BadRequest(format!(
            "offset must be from 0 to {}, or within the run of entries scored exactly {} \
             ({run} here), got {}",
            PageRequest::MAX_OFFSET,
            if req.min.is_some() { "min" } else { "max" },
            req.offset
        )));
    }
    Ok(())
}

/// Entries a page reads from one source at the most (a read that would
/// need more answers from PostgreSQL).
const MAX_FETCH: usize = 1000;

/// What one page's warm reads have rebuilt: each kind of missing state,
/// and the missing sources, once per page at most.
#[derive(Debug, Default)]
struct Warm {
    state: Vec<StateKey>,
    sources: bool,
}

/// Why a warm read stops short of its page: the page comes from
/// PostgreSQL, or the request fails.
enum Detour {
    Fallback(Fallback),
    Failed(AppError),
}

impl From<Fallback> for Detour {
    fn from(reason: Fallback) -> Self {
        Detour::Fallback(reason)
    }
}

impl From<AppError> for Detour {
    fn from(e: AppError) -> Self {
        Detour::Failed(e)
    }
}

/// A rebuild's outcome: done, or the page comes from PostgreSQL (another
/// request is building it, or it failed).
fn rebuilt(outcome: AppResult<bool>) -> Result<(), Detour> {
    match outcome {
        Ok(true) => Ok(()),
        Ok(false) => Err(Fallback::SourceBuilding.into()),
        Err(e) => {
            tracing::warn!(error = %e.chain(), "rebuild failed; answering from PostgreSQL");
            Err(Fallback::RebuildFailed.into())
        }
    }
}

/// A refresh's page, if its cut decided one.
fn refresh_page(cut: CutUp<Post>) -> Option<Page> {
    match cut {
        CutUp::Page {
            items,
            next,
            prev,
            marks,
        } => Some(Page {
            items,
            next: Some(next),
            prev,
            marks,
        }),
        CutUp::NeedMore => None,
    }
}

/// The sources a warm read found missing: the first (the inbox, or the
/// author's outbox), and pulled authors' outboxes (a list's are all
/// pulled).
fn missing_sources(scope: Scope, sources: &[(Option<UserId>, Range)]) -> Vec<FeedList> {
    let first = match scope {
        Scope::Home { reader, .. } => Some(FeedList::Inbox(reader)),
        Scope::Author(a) => Some(FeedList::Outbox(a)),
        Scope::List { .. } => None,
    };
    sources
        .iter()
        .filter(|(_, r)| *r == Range::Missing)
        .filter_map(|(author, _)| author.map(FeedList::Outbox).or(first))
        .collect()
}

/// A feed post as the cut sees it: shown if live; a deleted one has left
/// the feed.
fn slot(row: FeedPost) -> Option<(Entry, Slot<Post>)> {
    let entry = Entry::new(row.post.created_at_ms, row.post.id);
    row.into_live().map(|post| (entry, Slot::Shown(post)))
}

impl<R: Records, C: Cache> Reader<'_, R, C> {
    pub(super) async fn page(&self, scope: Scope, req: PageRequest) -> AppResult<Page> {
        if req.offset > PageRequest::MAX_OFFSET {
            self.check_deep_offset(scope, &req).await?;
        }
        // A list's authors are read from the records, each page: an
        // account added shows at once, with its past posts, and one taken
        // out leaves at once.
        let authors = match scope {
            Scope::List { owner, list } => self.records.list_authors(owner, list).await?,
            Scope::Home { .. } | Scope::Author(_) => Vec::new(),
        };
        let fallback = if req.offset > REDIS_MAX_OFFSET {
            Fallback::DeepOffset
        } else {
            match self.page_from_redis(scope, &authors, &req).await? {
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
    /// only inside a longer run of entries scored exactly `max` (or `min`).
    async fn check_deep_offset(&self, scope: Scope, req: &PageRequest) -> AppResult<()> {
        let Some(at) = req.at() else {
            return Err(AppError::BadRequest("offset needs max or min".into()));
        };
        within_run(req, self.records.count_at(scope, at).await?)
    }

    /// The page straight from the records.
    pub(super) async fn page_from_pg(&self, scope: Scope, req: &PageRequest) -> AppResult<Page> {
        // No account (or one being deleted) has a home or a page.
        self.user(scope.user()).await?;
        Stats::bump(&self.stats.pg_pages, 1);
        match req.min {
            None => self.page_down_from_pg(scope, req).await,
            Some(_) => self.page_up_from_pg(scope, req).await,
        }
    }

    /// A page down from `max` (or the top), from PostgreSQL.
    async fn page_down_from_pg(&self, scope: Scope, req: &PageRequest) -> AppResult<Page> {
        // A named entry is found in the rows: they start at the top of its
        // millisecond, and the count sent beside it sizes the first read.
        let (skip, ahead) = match req.id {
            Some(_) => (0, i64::from(req.offset)),
            None => (req.offset, 0),
        };
        let mut window = ahead + i64::from(req.limit) + 1;
        loop {
            let FeedRows { rows, complete } =
                self.records.feed(scope, req.max, skip, window).await?;
            Stats::bump(&self.stats.rows_read, rows.len() as u64);
            let stream: Vec<(Entry, Slot<Post>)> = rows.into_iter().filter_map(slot).collect();
            // By count, the query has skipped the entries passed; a named
            // entry is found in the rows.
            let (at, page) = match req.id {
                Some(_) => {
                    let at = positioned(&stream, req);
                    (at, cut(after_seen(stream, &at), &at, complete))
                }
                None => (*req, cut(stream, req, complete)),
            };
            match page {
                Cut::Page { items, next, top } => {
                    let prev = match (top, items.first()) {
                        (Some(top), Some(first)) => Prev {
                            min: top.score,
                            offset: self.count_down_from_pg(scope, top.score, first.id).await?,
                            id: Some(first.id),
                        },
                        _ => self.prev_of_empty(scope, &at).await?,
                    };
                    return Ok(Page {
                        items,
                        next,
                        prev,
                        marks: Vec::new(),
                    });
                }
                // The run of entries scored `max` filled the window: read
                // further into it.
                Cut::NeedMore => window *= 4,
            }
        }
    }

    /// A refresh page (up from `min`), from PostgreSQL: the rows from the
    /// run of `min` up, a wider window until the page is decided.
    async fn page_up_from_pg(&self, scope: Scope, req: &PageRequest) -> AppResult<Page> {
        let min = req.min.unwrap_or(0);
        let mut window = i64::from(req.limit) + 1;
        loop {
            let FeedRows { rows, complete } = self.records.feed_up(scope, min, window).await?;
            Stats::bump(&self.stats.rows_read, rows.len() as u64);
            let stream = rows.into_iter().filter_map(slot).collect();
            match refresh_page(cut_up(stream, req, complete)) {
                Some(page) => return Ok(page),
                None => window *= 4,
            }
        }
    }

    /// Entries of `scope`'s feed scored `score` from post `id` down, by
    /// PostgreSQL.
    async fn count_down_from_pg(&self, scope: Scope, score: i64, id: PostId) -> AppResult<u32> {
        let n = self.records.count_from(scope, score, id).await?;
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }

    /// The `prev` of a page down with no item: the bottom of the feed for
    /// a first page, else the request's own position, from above (by name,
    /// above the entry it names: its count is the entries from that one
    /// down).
    async fn prev_of_empty(&self, scope: Scope, req: &PageRequest) -> AppResult<Prev> {
        let Some(max) = req.max else {
            return Ok(Prev::BOTTOM);
        };
        if let Some(id) = req.id {
            return Ok(Prev {
                min: max,
                offset: self.count_down_from_pg(scope, max, id).await?,
                id: Some(id),
            });
        }
        let run = self.records.count_at(scope, max).await?;
        Ok(Prev {
            min: max,
            offset: u32::try_from(run)
                .unwrap_or(u32::MAX)
                .saturating_sub(req.offset),
            id: req.id,
        })
    }

    /// The page from Redis, or why it must come from PostgreSQL (past a
    /// floor, a source being built, Redis failing). A page down reads from
    /// `max` down; a refresh (up from `min`) reads the feed from its top
    /// down through the run of `min`. Each reads wider while the page is
    /// undecided (past [`MAX_FETCH`] entries, PostgreSQL answers). A warm
    /// page (everything in Redis) is one warm read and no SQL; PostgreSQL
    /// errors of a cold one are returned.
    async fn page_from_redis(
        &self,
        scope: Scope,
        authors: &[UserId],
        req: &PageRequest,
    ) -> AppResult<Result<Page, Fallback>> {
        let from = if req.min.is_some() { None } else { req.max };
        let mut fetch = req.window();
        let mut warm = Warm::default();
        for _ in 0..MAX_READ_ROUNDS {
            let (merged, meta) = match self.warm(&mut warm, (scope, authors), from, fetch).await {
                Ok(read) => read,
                Err(Detour::Fallback(reason)) => return Ok(Err(reason)),
                Err(Detour::Failed(e)) => return Err(e),
            };
            let page = match req.min {
                None => {
                    let complete = merged.horizon == Horizon::Complete;
                    self.cut_known(scope, req, &merged, &meta, complete).await?
                }
                Some(min) if merged.horizon.trusts(min) => {
                    Some(self.cut_refresh(scope, req, min, &merged, &meta).await?)
                }
                Some(_) => None,
            };
            if let Some(page) = page {
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

    /// A refresh page cut from merged entries that hold every entry from
    /// the top down through the run of `min`: the part near the position
    /// first, wider while undecided.
    async fn cut_refresh(
        &self,
        scope: Scope,
        req: &PageRequest,
        min: i64,
        merged: &Merged,
        meta: &HashMap<PostId, EntryMeta>,
    ) -> AppResult<Page> {
        let end = merged.entries.partition_point(|e| e.score >= min);
        let entries = &merged.entries[..end];
        let mut start = end.saturating_sub(req.window() * 2);
        loop {
            let stream = self.slots(scope, &entries[start..], meta).await?;
            match refresh_page(cut_up(stream, req, start == 0)) {
                Some(page) => return Ok(page),
                None => start = start.saturating_sub((end - start).max(1)),
            }
        }
    }

    /// One warm read of `scope`'s sources from `max` down, merged, with
    /// what the cache knows of their entries; missing reader state and
    /// missing sources are rebuilt from PostgreSQL on the way (each once
    /// per page, `warm` remembers: a read, then one more after each
    /// rebuild), or the reason the page must come from PostgreSQL.
    async fn warm(
        &self,
        warm: &mut Warm,
        (scope, authors): (Scope, &[UserId]),
        max: Option<i64>,
        fetch: usize,
    ) -> Result<(Merged, HashMap<PostId, EntryMeta>), Detour> {
        let reader = match scope {
            Scope::Home { reader, .. } => Some(reader),
            Scope::Author(_) | Scope::List { .. } => None,
        };
        for _ in 0..5 {
            match self.warm_read(scope, authors, max, fetch).await? {
                WarmRead::Building(_) => return Err(Fallback::SourceBuilding.into()),
                WarmRead::Missing(state) => self.restore_state(warm, state, reader).await?,
                WarmRead::Read { sources, meta } => {
                    if let Some(reader) = reader {
                        // Pulled authors are big-Vs, or have a delivery in
                        // flight: being an active fan of the latter is
                        // harmless.
                        (self.pulled)(reader, sources.iter().filter_map(|(a, _)| *a).collect());
                    }
                    let missing = missing_sources(scope, &sources);
                    if missing.is_empty() {
                        return Ok((merge(&self.ranges_read(sources)?), meta));
                    }
                    self.restore_sources(warm, scope, &missing).await?;
                }
            }
        }
        Err(Fallback::RebuildFailed.into())
    }

    /// Redis's warm read; a failure is a fallback.
    async fn warm_read(
        &self,
        scope: Scope,
        authors: &[UserId],
        max: Option<i64>,
        fetch: usize,
    ) -> Result<WarmRead, Detour> {
        self.cache
            .warm_read(scope, authors, max, fetch)
            .await
            .map_err(|e| {
                Stats::bump(&self.stats.redis_read_errors, 1);
                tracing::warn!(error = %e.chain(), "Redis read failed; answering from PostgreSQL");
                Fallback::RedisUnavailable.into()
            })
    }

    /// Rebuilds a missing kind of reader state, once per page.
    async fn restore_state(
        &self,
        warm: &mut Warm,
        state: StateKey,
        reader: Option<UserId>,
    ) -> Result<(), Detour> {
        if warm.state.contains(&state) {
            return Err(Fallback::RebuildFailed.into());
        }
        warm.state.push(state);
        rebuilt(self.rebuild_state(state, reader).await)
    }

    /// Rebuilds the missing sources, once per page. An author's outbox is
    /// rebuilt only if the author exists (404 otherwise).
    async fn restore_sources(
        &self,
        warm: &mut Warm,
        scope: Scope,
        missing: &[FeedList],
    ) -> Result<(), Detour> {
        if warm.sources {
            return Err(Fallback::RebuildFailed.into());
        }
        warm.sources = true;
        if let Scope::Author(a) = scope {
            self.user(a).await?;
        }
        let builds = missing.iter().map(|list| self.rebuild_list(*list));
        for outcome in futures::future::join_all(builds).await {
            rebuilt(outcome)?;
        }
        Ok(())
    }

    /// The sources' reads, counted, if every one was read.
    fn ranges_read(
        &self,
        sources: Vec<(Option<UserId>, Range)>,
    ) -> Result<Vec<SourceRead>, Detour> {
        let mut reads = Vec::with_capacity(sources.len());
        for (_, range) in sources {
            let Range::Read(read) = range else {
                return Err(Fallback::SourceBuilding.into());
            };
            Stats::bump(&self.stats.entries_read, read.entries.len() as u64);
            reads.push(read);
        }
        Ok(reads)
    }

    /// Cuts the page from the merged entries with what the cache knows of
    /// them ([`Self::slots`]). `None` if the entries run out before the
    /// page is decided.
    async fn cut_known(
        &self,
        scope: Scope,
        req: &PageRequest,
        merged: &Merged,
        meta: &HashMap<PostId, EntryMeta>,
        complete: bool,
    ) -> AppResult<Option<Page>> {
        let entries = &merged.entries;
        let mut take = req.window().min(entries.len());
        loop {
            let stream = self.slots(scope, &entries[..take], meta).await?;
            let all = take == entries.len();
            let at = positioned(&stream, req);
            match cut(after_seen(stream, &at), &at, complete && all) {
                Cut::Page { items, next, top } => {
                    let prev = match (top, items.first()) {
                        (Some(top), Some(first)) => Prev {
                            min: top.score,
                            offset: self
                                .count_down(scope, merged, meta, top.score, first.id)
                                .await?,
                            id: Some(first.id),
                        },
                        _ => self.prev_of_empty(scope, &at).await?,
                    };
                    return Ok(Some(Page {
                        items,
                        next,
                        prev,
                        marks: Vec::new(),
                    }));
                }
                Cut::NeedMore if all => return Ok(None),
                Cut::NeedMore => take = (take * 2).min(entries.len()),
            }
        }
    }

    /// Entries of `scope`'s feed scored `score` from post `id` down (a
    /// page's `prev`): counted in the merged read when it holds the whole
    /// run of `score`, else by PostgreSQL.
    async fn count_down(
        &self,
        scope: Scope,
        merged: &Merged,
        meta: &HashMap<PostId, EntryMeta>,
        score: i64,
        id: PostId,
    ) -> AppResult<u32> {
        if !merged.horizon.trusts(score) {
            return self.count_down_from_pg(scope, score, id).await;
        }
        let at = merged.entries.partition_point(|e| e.score > score);
        let end = merged.entries.partition_point(|e| e.score >= score);
        let Some(from) = merged.entries[at..end].iter().position(|e| e.id == id) else {
            return self.count_down_from_pg(scope, score, id).await;
        };
        let run = &merged.entries[at + from..end];
        Ok(self.slots_of(scope, run, meta, false).await?.len() as u32)
    }

    /// The entries of `window` that belong to `scope`'s feed, in order,
    /// each shown with its post (deleted posts have left the feed): what
    /// the cache knows of them, from this instance's memory, else
    /// Redis; entries the cache lacks are read from PostgreSQL (and
    /// cached).
    async fn slots(
        &self,
        scope: Scope,
        window: &[Entry],
        meta: &HashMap<PostId, EntryMeta>,
    ) -> AppResult<Vec<(Entry, Slot<Post>)>> {
        self.slots_of(scope, window, meta, true).await
    }

    /// [`Self::slots`]; without `bodies`, shown posts are left without
    /// their bodies (counting them needs none): each slot is then hidden
    /// (counted, not shown).
    async fn slots_of(
        &self,
        scope: Scope,
        window: &[Entry],
        meta: &HashMap<PostId, EntryMeta>,
        bodies: bool,
    ) -> AppResult<Vec<(Entry, Slot<Post>)>> {
        // Shown posts need bodies; posts the cache does not know need
        // PostgreSQL.
        let mut unknown = Vec::new();
        let mut wanted = Vec::new();
        for e in window {
            match meta.get(&e.id) {
                Some(m) if m.author.is_some() => {
                    if bodies && m.followed && !m.deleted {
                        wanted.push(e.id);
                    }
                }
                _ => unknown.push(e.id),
            }
        }
        let mut posts = self.bodies.recall(&wanted);
        let missing: Vec<PostId> = wanted
            .iter()
            .copied()
            .filter(|id| !posts.contains_key(id))
            .collect();
        if !missing.is_empty() {
            let cached = match self.cache.posts(&missing).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(error = %e.chain(), "could not read cached posts");
                    HashMap::new()
                }
            };
            let found: Vec<Post> = cached.into_iter().map(|(id, c)| c.into_post(id)).collect();
            self.bodies.remember(&found);
            posts.extend(found.into_iter().map(|p| (p.id, p)));
            unknown.extend(missing.iter().filter(|id| !posts.contains_key(id)));
        }
        let mut from_pg: HashMap<PostId, FeedPost> = HashMap::new();
        if !unknown.is_empty() {
            Stats::bump(&self.stats.hydrations, 1);
            let rows = self.records.hydrate(&unknown, scope).await?;
            Stats::bump(&self.stats.rows_read, rows.len() as u64);
            // Cache them: the live ones whole, the deleted ones as
            // tombstones (a deletion is final), so the next page over
            // them needs no SQL either.
            let known: Vec<(PostId, CachedPost)> = rows
                .iter()
                .map(|r| (r.post.id, CachedPost::of(&r.post, !r.live)))
                .collect();
            if let Err(e) = self
                .cache
                .fill_posts(&known, self.post_cache_ttl_secs)
                .await
            {
                tracing::debug!(error = %e.chain(), "could not cache posts");
            }
            from_pg = rows.into_iter().map(|r| (r.post.id, r)).collect();
        }
        Ok(window
            .iter()
            .filter_map(|e| {
                if unknown.contains(&e.id) {
                    // In the feed only if PostgreSQL has it there.
                    return from_pg.remove(&e.id).and_then(slot);
                }
                let m = meta.get(&e.id)?;
                if !m.followed || m.deleted {
                    return None;
                }
                if !bodies {
                    return Some((*e, Slot::Hidden));
                }
                posts.remove(&e.id).map(|p| (*e, Slot::Shown(p)))
            })
            .collect())
    }

    /// Rebuilds the reader state a warm read missed, from the records;
    /// false if someone else is building it.
    async fn rebuild_state(&self, state: StateKey, reader: Option<UserId>) -> AppResult<bool> {
        let part = match (state, reader) {
            (StateKey::Following, Some(r)) => Part::Following(r),
            (StateKey::Following, None) => return Ok(false),
            (StateKey::Pulled(copy), _) => Part::Pulled(copy),
            (StateKey::Hidden(copy), _) => Part::Hidden(copy),
        };
        if !self.cache.begin(part).await? {
            return Ok(false);
        }
        let built = match part {
            Part::Following(r) => {
                let (seq, followees) = match self.records.following_state(r).await {
                    Ok(state) => state,
                    Err(e) => {
                        // No account: nothing of it is kept (its build
                        // would wait out its TTL).
                        if matches!(e, AppError::NotFound(_)) {
                            if let Err(e) = self.cache.abandon(part).await {
                                tracing::debug!(error = %e.chain(), "an abandoned build waits out its TTL");
                            }
                        }
                        return Err(e);
                    }
                };
                let ttl = self.settings.inbox_idle_ttl_secs as u64;
                self.cache.fill_following(r, seq, &followees, ttl).await?
            }
            Part::Pulled(copy) => {
                let authors = self.records.pulled_state().await?;
                self.cache.fill_pulled(copy, &authors).await?
            }
            Part::Hidden(copy) => {
                let accounts = self.records.hidden_accounts().await?;
                self.cache.fill_hidden(copy, &accounts).await?
            }
            Part::List(list) => return self.rebuild_list(list).await,
        };
        if built {
            self.rebuilt_one();
        }
        Ok(built)
    }

    /// Rebuilds a missing inbox or outbox from the records. It is begun
    /// (in the building state) before the query, so that a push racing
    /// with the rebuild lands in it rather than being skipped. Returns
    /// false if someone else is building it, or the build was abandoned
    /// meanwhile.
    async fn rebuild_list(&self, list: FeedList) -> AppResult<bool> {
        let s = &self.settings;
        // Inboxes of idle readers expire; outboxes stay.
        let (of, cap, idle_ttl_secs) = match list {
            FeedList::Inbox(u) => (
                EntriesOf::Home(u),
                s.inbox_max_len,
                s.inbox_idle_ttl_secs as u64,
            ),
            FeedList::Outbox(a) => (EntriesOf::Author(a), s.outbox_max_len, 0),
        };
        if !self.cache.begin(Part::List(list)).await? {
            return Ok(false);
        }
        let entries = self.records.entries(of, cap).await?;
        let floor = floor_of_newest(&entries, cap);
        let fill = ListFill {
            cap,
            floor,
            entries: &entries,
            idle_ttl_secs,
        };
        if !self.cache.fill_list(list, fill).await? {
            return Ok(false);
        }
        self.rebuilt_one();
        tracing::debug!(?list, entries = entries.len(), "rebuilt from the records");
        Ok(true)
    }

    fn rebuilt_one(&self) {
        Stats::bump(&self.stats.rebuilds, 1);
        metrics::REBUILDS.inc();
    }

    /// The account `id` (not found if none, or being deleted).
    async fn user(&self, id: UserId) -> AppResult<User> {
        existing(id, self.records.user(id).await?)
    }
}
