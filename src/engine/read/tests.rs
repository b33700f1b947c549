//! The read path over a world in memory: records that answer every query
//! from a list of posts and follows, and a cache that holds only what the
//! reader rebuilt or a publish pushed, and can lose any part of it or fail.
//! What a reader checks: a scroll shows every post of its home once, newest
//! first, whatever the cache holds, and a warm scroll asks the records
//! nothing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use proptest::prelude::*;

use super::reader::Reader;
use super::stores::{Cache, FeedList, ListFill, Part, Records};
use crate::engine::bodies::SharedBodies;
use crate::engine::stores::{Accounts, FeedEntries};
use crate::engine::testing::{ids, run, settings, user};
use crate::engine::{Page, Stats};
use crate::error::{AppError, AppResult};
use crate::types::{
    feed_order, AccountStatus, CachedPost, EntriesOf, Entry, EntryMeta, FeedPost, FeedRows,
    FeedSettings, ListId, MarkCopy, PageRequest, Post, PostId, PulledAuthor, Range, Scope,
    SourceRead, StateKey, User, UserId, WarmRead,
};

/// A part of the cache: being built, or built.
#[derive(Debug, Clone)]
enum Held<T> {
    Building,
    Built(T),
}

/// A feed list as the cache holds it.
#[derive(Debug, Clone, Default)]
struct List {
    entries: Vec<Entry>,
    floor: Option<i64>,
}

#[derive(Debug, Default)]
struct Truth {
    users: HashSet<UserId>,
    follows: HashSet<(UserId, UserId)>,
    big_vs: HashSet<UserId>,
    /// Post id to (author, time, live).
    posts: BTreeMap<PostId, (UserId, i64, bool)>,
    /// List id to its owner and members.
    lists: HashMap<ListId, (UserId, HashSet<UserId>)>,
}

#[derive(Debug, Default)]
struct Cached {
    following: HashMap<UserId, Held<HashSet<UserId>>>,
    pulled: Option<Held<HashSet<UserId>>>,
    hidden: Option<Held<HashSet<UserId>>>,
    lists: HashMap<FeedList, Held<List>>,
    posts: HashMap<PostId, CachedPost>,
}

/// The world: records, a cache, a switch that fails every cache call, and
/// a count of the records' feed queries.
#[derive(Debug, Default)]
struct World {
    truth: Mutex<Truth>,
    cache: Mutex<Cached>,
    down: AtomicBool,
    queries: AtomicU64,
}

fn post_of(id: PostId, (author, at, _): (UserId, i64, bool)) -> Post {
    Post {
        id,
        author_id: author,
        author_username: format!("u{author}"),
        body: format!("post {id}"),
        created_at_ms: at,
        meta: None,
    }
}

impl Truth {
    fn shows(&self, scope: Scope, author: UserId) -> bool {
        match scope {
            Scope::Home { reader, own } => {
                self.follows.contains(&(reader, author)) || (own && author == reader)
            }
            Scope::Author(a) => a == author,
            Scope::List { owner, list } => self
                .lists
                .get(&list)
                .is_some_and(|(o, members)| *o == owner && members.contains(&author)),
        }
    }

    /// `scope`'s feed, deleted posts included (a hydration finds them), in
    /// feed order.
    fn feed(&self, scope: Scope) -> Vec<FeedPost> {
        let mut rows: Vec<FeedPost> = self
            .posts
            .iter()
            .filter(|(_, (author, _, _))| self.shows(scope, *author))
            .map(|(id, p)| FeedPost {
                post: post_of(*id, *p),
                live: p.2,
            })
            .collect();
        rows.sort_by(|a, b| feed_order(&entry(&a.post), &entry(&b.post)));
        rows
    }

    /// `scope`'s feed: its live posts, in feed order.
    fn live(&self, scope: Scope) -> Vec<FeedPost> {
        self.feed(scope).into_iter().filter(|r| r.live).collect()
    }

    fn entries_of(&self, authors: impl Fn(UserId) -> bool, limit: i64) -> Vec<Entry> {
        let mut all: Vec<Entry> = self
            .posts
            .iter()
            .filter(|(_, (a, _, live))| authors(*a) && *live)
            .map(|(id, (_, at, _))| Entry::new(*at, *id))
            .collect();
        all.sort_by(feed_order);
        all.truncate(limit as usize);
        all
    }
}

fn entry(p: &Post) -> Entry {
    Entry::new(p.created_at_ms, p.id)
}

fn down() -> AppError {
    AppError::Unavailable {
        what: "the cache",
        source: "down".into(),
    }
}

impl World {
    fn truth(&self) -> std::sync::MutexGuard<'_, Truth> {
        self.truth.lock().unwrap()
    }

    fn cached(&self) -> AppResult<std::sync::MutexGuard<'_, Cached>> {
        if self.down.load(Ordering::Relaxed) {
            return Err(down());
        }
        Ok(self.cache.lock().unwrap())
    }

    fn query(&self) {
        self.queries.fetch_add(1, Ordering::Relaxed);
    }

    /// Publishes a post, as the service does: into the records, then the
    /// author's outbox and, for an ordinary author, the inboxes of its
    /// followers (and its own) where the cache holds them.
    fn publish(&self, id: PostId, author: UserId, at: i64) {
        let mut truth = self.truth();
        truth.posts.insert(id, (author, at, true));
        let mut lists = vec![FeedList::Outbox(author)];
        if !truth.big_vs.contains(&author) {
            lists.push(FeedList::Inbox(author));
            for (f, a) in &truth.follows {
                if *a == author {
                    lists.push(FeedList::Inbox(*f));
                }
            }
        }
        let mut cache = self.cache.lock().unwrap();
        for list in lists {
            if let Some(Held::Built(l)) = cache.lists.get_mut(&list) {
                l.entries.push(Entry::new(at, id));
                l.entries.sort_by(feed_order);
            }
        }
    }

    /// An unfollow, as the service applies it: the records, then the
    /// reader's copy of whom it follows; its inbox keeps the posts.
    fn unfollow(&self, reader: UserId) {
        let mut truth = self.truth();
        let Some(&edge) = truth.follows.iter().find(|(f, _)| *f == reader) else {
            return;
        };
        truth.follows.remove(&edge);
        if let Some(Held::Built(f)) = self.cache.lock().unwrap().following.get_mut(&reader) {
            f.remove(&edge.1);
        }
    }

    /// Deletes a post: its cached copy becomes a tombstone; its entries
    /// stay (as they do until its retract job runs).
    fn delete(&self, id: PostId) {
        if let Some(p) = self.truth().posts.get_mut(&id) {
            p.2 = false;
        }
        if let Some(c) = self.cache.lock().unwrap().posts.get_mut(&id) {
            c.deleted = true;
        }
    }

    /// The source a warm read finds for `list`, from `max` down.
    fn range(cache: &Cached, list: FeedList, max: Option<i64>) -> Range {
        match cache.lists.get(&list) {
            None => Range::Missing,
            Some(Held::Building) => Range::Building,
            Some(Held::Built(l)) => Range::Read(SourceRead {
                entries: l
                    .entries
                    .iter()
                    .copied()
                    .filter(|e| max.is_none_or(|m| e.score <= m))
                    .collect(),
                floor: l.floor,
                cut: None,
            }),
        }
    }
}

impl Accounts for World {
    async fn user(&self, id: UserId) -> AppResult<Option<User>> {
        Ok(self
            .truth()
            .users
            .contains(&id)
            .then(|| user(id, AccountStatus::Active)))
    }
}

impl FeedEntries for World {
    async fn entries(&self, of: EntriesOf, limit: i64) -> AppResult<Vec<Entry>> {
        let truth = self.truth();
        Ok(match of {
            EntriesOf::Home(u) => {
                truth.entries_of(|a| a == u || truth.follows.contains(&(u, a)), limit)
            }
            EntriesOf::Author(author) | EntriesOf::Pulled(author) | EntriesOf::Held(author) => {
                truth.entries_of(|a| a == author, limit)
            }
        })
    }
}

impl Records for World {
    async fn feed(
        &self,
        scope: Scope,
        max: Option<i64>,
        offset: u32,
        _window: i64,
    ) -> AppResult<FeedRows> {
        self.query();
        let top = max.unwrap_or(i64::MAX);
        let feed = self.truth().live(scope);
        let at_max = feed.iter().filter(|r| r.post.created_at_ms == top);
        let below = feed.iter().filter(|r| r.post.created_at_ms < top);
        let rows = at_max.skip(offset as usize).chain(below).cloned().collect();
        Ok(FeedRows {
            rows,
            complete: true,
        })
    }

    async fn feed_up(&self, scope: Scope, min: i64, _window: i64) -> AppResult<FeedRows> {
        self.query();
        let rows = self.truth().live(scope);
        let rows = rows
            .into_iter()
            .filter(|r| r.post.created_at_ms >= min)
            .collect();
        Ok(FeedRows {
            rows,
            complete: true,
        })
    }

    async fn count_from(&self, scope: Scope, score: i64, id: PostId) -> AppResult<i64> {
        let feed = self.truth().live(scope);
        let named = Entry::new(score, id);
        let run = feed.iter().filter(|r| r.post.created_at_ms == score);
        Ok(run
            .filter(|r| feed_order(&entry(&r.post), &named).is_ge())
            .count() as i64)
    }

    async fn count_at(&self, scope: Scope, score: i64) -> AppResult<i64> {
        let feed = self.truth().live(scope);
        Ok(feed
            .iter()
            .filter(|r| r.post.created_at_ms == score)
            .count() as i64)
    }

    async fn hydrate(&self, ids: &[PostId], scope: Scope) -> AppResult<Vec<FeedPost>> {
        self.query();
        let feed = self.truth().feed(scope);
        Ok(feed
            .into_iter()
            .filter(|r| ids.contains(&r.post.id))
            .collect())
    }

    async fn following_state(&self, reader: UserId) -> AppResult<(i64, Vec<UserId>)> {
        let truth = self.truth();
        if !truth.users.contains(&reader) {
            return Err(AppError::NotFound(format!("user {reader} does not exist")));
        }
        let followees = truth.follows.iter().filter(|(f, _)| *f == reader);
        Ok((1, followees.map(|(_, a)| *a).collect()))
    }

    async fn pulled_state(&self) -> AppResult<Vec<PulledAuthor>> {
        let truth = self.truth();
        Ok(truth
            .big_vs
            .iter()
            .map(|a| PulledAuthor {
                author: *a,
                epoch: Some(1),
                in_flight: Vec::new(),
            })
            .collect())
    }

    async fn hidden_accounts(&self) -> AppResult<Vec<UserId>> {
        Ok(Vec::new())
    }

    async fn list_authors(&self, owner: UserId, list: ListId) -> AppResult<Vec<UserId>> {
        self.query();
        let truth = self.truth();
        match truth.lists.get(&list) {
            Some((o, members)) if *o == owner => {
                let mut all: Vec<UserId> = members.iter().copied().collect();
                all.sort_unstable();
                Ok(all)
            }
            _ => Err(AppError::NotFound(format!("list {list} does not exist"))),
        }
    }
}

/// The world keeps one copy of the marks (the copies are the Redis
/// store's: its tests and the model test run them).
const ONE_COPY: MarkCopy = MarkCopy(0);

impl Cache for World {
    async fn warm_read(
        &self,
        scope: Scope,
        authors: &[UserId],
        max: Option<i64>,
        _fetch: usize,
    ) -> AppResult<WarmRead> {
        let cache = self.cached()?;
        let hidden = match &cache.hidden {
            None => return Ok(WarmRead::Missing(StateKey::Hidden(ONE_COPY))),
            Some(Held::Building) => return Ok(WarmRead::Building(StateKey::Hidden(ONE_COPY))),
            Some(Held::Built(h)) => h,
        };
        let (first, pulled, shown) = match scope {
            Scope::Home { reader, own } => {
                let following = match cache.following.get(&reader) {
                    None => return Ok(WarmRead::Missing(StateKey::Following)),
                    Some(Held::Building) => return Ok(WarmRead::Building(StateKey::Following)),
                    Some(Held::Built(f)) => f,
                };
                let big_vs = match &cache.pulled {
                    None => return Ok(WarmRead::Missing(StateKey::Pulled(ONE_COPY))),
                    Some(Held::Building) => {
                        return Ok(WarmRead::Building(StateKey::Pulled(ONE_COPY)))
                    }
                    Some(Held::Built(p)) => p,
                };
                let mut shown = following.clone();
                if own {
                    shown.insert(reader);
                }
                let mut pulled: Vec<UserId> = shown.intersection(big_vs).copied().collect();
                pulled.sort_unstable();
                (Some(FeedList::Inbox(reader)), pulled, shown)
            }
            Scope::Author(a) => (Some(FeedList::Outbox(a)), Vec::new(), HashSet::from([a])),
            Scope::List { .. } => (None, authors.to_vec(), authors.iter().copied().collect()),
        };
        let mut sources = Vec::new();
        if let Some(first) = first {
            sources.push((None, Self::range(&cache, first, max)));
        }
        for a in pulled.into_iter().filter(|a| !hidden.contains(a)) {
            sources.push((Some(a), Self::range(&cache, FeedList::Outbox(a), max)));
        }
        let mut meta = HashMap::new();
        for (_, range) in &sources {
            let Range::Read(read) = range else { continue };
            for e in &read.entries {
                let known = cache.posts.get(&e.id);
                meta.insert(
                    e.id,
                    EntryMeta {
                        author: known.map(|p| p.author_id),
                        deleted: known.is_some_and(|p| p.deleted),
                        followed: known.is_none_or(|p| {
                            shown.contains(&p.author_id) && !hidden.contains(&p.author_id)
                        }),
                    },
                );
            }
        }
        Ok(WarmRead::Read { sources, meta })
    }

    async fn posts(&self, ids: &[PostId]) -> AppResult<HashMap<PostId, CachedPost>> {
        let cache = self.cached()?;
        Ok(ids
            .iter()
            .filter_map(|id| cache.posts.get(id).map(|p| (*id, p.clone())))
            .collect())
    }

    async fn fill_posts(&self, posts: &[(PostId, CachedPost)], _ttl_secs: u64) -> AppResult<()> {
        self.cached()?.posts.extend(posts.iter().cloned());
        Ok(())
    }

    async fn begin(&self, part: Part) -> AppResult<bool> {
        let mut cache = self.cached()?;
        let absent = match part {
            Part::Following(r) => !cache.following.contains_key(&r),
            Part::Pulled(_) => cache.pulled.is_none(),
            Part::Hidden(_) => cache.hidden.is_none(),
            Part::List(list) => !cache.lists.contains_key(&list),
        };
        if absent {
            match part {
                Part::Following(r) => drop(cache.following.insert(r, Held::Building)),
                Part::Pulled(_) => cache.pulled = Some(Held::Building),
                Part::Hidden(_) => cache.hidden = Some(Held::Building),
                Part::List(list) => drop(cache.lists.insert(list, Held::Building)),
            }
        }
        Ok(absent)
    }

    async fn abandon(&self, part: Part) -> AppResult<()> {
        let mut cache = self.cached()?;
        match part {
            Part::Following(r) => drop(cache.following.remove(&r)),
            Part::Pulled(_) => cache.pulled = None,
            Part::Hidden(_) => cache.hidden = None,
            Part::List(list) => drop(cache.lists.remove(&list)),
        }
        Ok(())
    }

    async fn fill_following(
        &self,
        reader: UserId,
        _seq: i64,
        followees: &[UserId],
        _idle_ttl_secs: u64,
    ) -> AppResult<bool> {
        let mut cache = self.cached()?;
        let held = cache.following.get_mut(&reader);
        Ok(fill(held, followees.iter().copied().collect()))
    }

    async fn fill_pulled(&self, _copy: MarkCopy, authors: &[PulledAuthor]) -> AppResult<bool> {
        let mut cache = self.cached()?;
        let pulled = authors.iter().map(|a| a.author).collect();
        Ok(fill(cache.pulled.as_mut(), pulled))
    }

    async fn fill_hidden(&self, _copy: MarkCopy, accounts: &[UserId]) -> AppResult<bool> {
        let mut cache = self.cached()?;
        Ok(fill(
            cache.hidden.as_mut(),
            accounts.iter().copied().collect(),
        ))
    }

    async fn fill_list(&self, list: FeedList, fill_: ListFill<'_>) -> AppResult<bool> {
        let mut cache = self.cached()?;
        let filled = List {
            entries: fill_.entries.to_vec(),
            floor: fill_.floor,
        };
        Ok(fill(cache.lists.get_mut(&list), filled))
    }
}

/// Completes a build still under way.
fn fill<T>(held: Option<&mut Held<T>>, value: T) -> bool {
    match held {
        Some(h @ Held::Building) => {
            *h = Held::Built(value);
            true
        }
        _ => false,
    }
}

/// A reader over `world` and what it counts.
struct Harness {
    world: World,
    stats: Stats,
    bodies: SharedBodies,
    inbox_max_len: i64,
}

impl Harness {
    fn new(world: World) -> Self {
        Harness {
            world,
            stats: Stats::default(),
            bodies: SharedBodies::new(1000, 1 << 20),
            inbox_max_len: 1000,
        }
    }

    fn reader(&self) -> Reader<'_, World, World> {
        Reader {
            records: &self.world,
            cache: &self.world,
            stats: &self.stats,
            settings: FeedSettings {
                inbox_max_len: self.inbox_max_len,
                ..settings()
            },
            post_cache_ttl_secs: 60,
            bodies: &self.bodies,
            pulled: &|_, _| {},
        }
    }

    async fn page(&self, reader: UserId, req: PageRequest) -> Page {
        let scope = Scope::Home { reader, own: true };
        self.reader().page(scope, req).await.expect("a page")
    }

    /// Every post of `reader`'s home, scrolled `limit` at a time.
    async fn scroll(&self, reader: UserId, limit: u32) -> Vec<PostId> {
        let mut seen = Vec::new();
        let mut page = self.page(reader, PageRequest::first(limit)).await;
        loop {
            seen.extend(page.items.iter().map(|p| p.id));
            let Some(next) = page.next else { break };
            assert!(seen.len() < 10_000, "a scroll that does not end");
            page = self.page(reader, PageRequest::after(next, limit)).await;
        }
        seen
    }

    /// What `reader`'s home holds, newest first, as the records say.
    fn home(&self, reader: UserId) -> Vec<PostId> {
        let feed = self.world.truth().feed(Scope::Home { reader, own: true });
        feed.into_iter()
            .filter(|r| r.live)
            .map(|r| r.post.id)
            .collect()
    }

    fn queries(&self) -> u64 {
        self.world.queries.load(Ordering::Relaxed)
    }

    /// Every post of list `list` of `owner`, scrolled `limit` at a time.
    async fn scroll_list(&self, owner: UserId, list: ListId, limit: u32) -> Vec<PostId> {
        let scope = Scope::List { owner, list };
        let mut seen = Vec::new();
        let mut req = PageRequest::first(limit);
        loop {
            let page = self.reader().page(scope, req).await.expect("a page");
            seen.extend(page.items.iter().map(|p| p.id));
            let Some(next) = page.next else { break };
            assert!(seen.len() < 10_000, "a scroll that does not end");
            req = PageRequest::after(next, limit);
        }
        seen
    }

    /// What a list holds, newest first, as the records say.
    fn list(&self, owner: UserId, list: ListId) -> Vec<PostId> {
        let feed = self.world.truth().feed(Scope::List { owner, list });
        feed.into_iter()
            .filter(|r| r.live)
            .map(|r| r.post.id)
            .collect()
    }
}

/// Reader 1 follows authors 2 (ordinary) and 3 (big-V); 4 is followed by
/// nobody. Posts in runs of equal times.
fn small_world() -> World {
    let world = World::default();
    {
        let mut t = world.truth();
        t.users.extend(ids([1, 2, 3, 4]));
        t.follows
            .extend([(UserId(1), UserId(2)), (UserId(1), UserId(3))]);
        t.big_vs.insert(UserId(3));
    }
    let mut id = 100;
    for at in [10, 10, 10, 20, 30, 30, 40, 50, 50, 50, 50, 60] {
        for author in [1, 2, 3, 4] {
            id += 1;
            if (id + author) % 3 != 0 {
                world.publish(PostId(id), UserId(author), at);
            }
        }
    }
    world
}

#[test]
fn a_cold_then_warm_scroll_shows_every_post_once_and_the_warm_one_asks_the_records_nothing() {
    let h = Harness::new(small_world());
    run(async {
        let home = h.home(UserId(1));
        assert!(home.len() > 10);
        assert_eq!(h.scroll(UserId(1), 3).await, home, "cold");
        let before = h.queries();
        assert_eq!(h.scroll(UserId(1), 3).await, home, "warm");
        assert_eq!(h.queries(), before, "a warm scroll queried the records");
        assert_eq!(Stats::get(&h.stats.pg_pages), 0);
    });
}

#[test]
fn a_list_pages_its_members_outboxes_and_follows_its_members_at_once() {
    let h = Harness::new(small_world());
    let (owner, list) = (UserId(1), ListId(7));
    let members = |m: &[i64]| (owner, m.iter().map(|&a| UserId(a)).collect());
    run(async {
        h.world.truth().lists.insert(list, members(&[2]));
        let only_2 = h.list(owner, list);
        assert!(only_2.len() > 5);
        assert_eq!(h.scroll_list(owner, list, 3).await, only_2, "cold");
        assert_eq!(h.scroll_list(owner, list, 3).await, only_2, "warm");
        // Members read per page: one added shows with its past posts, one
        // taken out leaves, at once.
        h.world.truth().lists.insert(list, members(&[2, 4]));
        let with_4 = h.list(owner, list);
        assert!(with_4.len() > only_2.len());
        assert_eq!(h.scroll_list(owner, list, 4).await, with_4);
        h.world.truth().lists.insert(list, members(&[4]));
        assert_eq!(h.scroll_list(owner, list, 4).await, h.list(owner, list));
        assert_eq!(Stats::get(&h.stats.pg_pages), 0, "a page left the cache");
        // Another owner's list, and no list, are not found.
        let reader = h.reader();
        let other = reader.page(
            Scope::List {
                owner: UserId(2),
                list,
            },
            PageRequest::first(3),
        );
        assert!(matches!(other.await, Err(AppError::NotFound(_))));
        h.world.truth().lists.insert(list, members(&[]));
        assert_eq!(h.scroll_list(owner, list, 4).await, Vec::<PostId>::new());
    });
}

#[test]
fn deleted_posts_leave_every_page() {
    let h = Harness::new(small_world());
    run(async {
        h.scroll(UserId(1), 2).await;
        let home = h.home(UserId(1));
        for id in home.iter().step_by(3) {
            h.world.delete(*id);
        }
        let live = h.home(UserId(1));
        assert!(live.len() < home.len());
        assert_eq!(h.scroll(UserId(1), 2).await, live);
        assert_eq!(h.scroll(UserId(1), 5).await, live);
    });
}

#[test]
fn a_failing_cache_sends_every_page_to_the_records() {
    let h = Harness::new(small_world());
    run(async {
        h.world.down.store(true, Ordering::Relaxed);
        let seen = h.scroll(UserId(1), 4).await;
        assert_eq!(seen, h.home(UserId(1)));
        let pages = seen.len().div_ceil(4) as u64;
        assert!(Stats::get(&h.stats.pg_pages) >= pages);
        assert!(Stats::get(&h.stats.redis_read_errors) >= pages);
    });
}

#[test]
fn each_lost_part_of_the_cache_is_rebuilt_and_read_warm_again() {
    let h = Harness::new(small_world());
    run(async {
        let home = h.home(UserId(1));
        h.scroll(UserId(1), 3).await;
        let lose: [fn(&mut Cached); 5] = [
            |c| drop(c.following.remove(&UserId(1))),
            |c| c.pulled = None,
            |c| c.hidden = None,
            |c| drop(c.lists.remove(&FeedList::Inbox(UserId(1)))),
            |c| drop(c.lists.remove(&FeedList::Outbox(UserId(3)))),
        ];
        for (i, lose) in lose.iter().enumerate() {
            lose(&mut h.world.cache.lock().unwrap());
            let rebuilds = Stats::get(&h.stats.rebuilds);
            assert_eq!(h.scroll(UserId(1), 3).await, home, "after loss {i}");
            assert_eq!(Stats::get(&h.stats.rebuilds), rebuilds + 1, "loss {i}");
            let before = h.queries();
            assert_eq!(h.scroll(UserId(1), 3).await, home, "warm after loss {i}");
            assert_eq!(h.queries(), before, "loss {i} was not rebuilt");
        }
        assert_eq!(Stats::get(&h.stats.pg_pages), 0);
    });
}

#[test]
fn a_part_another_request_is_building_sends_the_page_to_the_records() {
    let h = Harness::new(small_world());
    run(async {
        let home = h.home(UserId(1));
        h.scroll(UserId(1), 3).await;
        let building = Held::Building;
        h.world
            .cache
            .lock()
            .unwrap()
            .lists
            .insert(FeedList::Outbox(UserId(3)), building);
        let page = h.page(UserId(1), PageRequest::first(5)).await;
        let ids: Vec<PostId> = page.items.iter().map(|p| p.id).collect();
        assert_eq!(ids, home[..5]);
        assert_eq!(Stats::get(&h.stats.pg_pages), 1);
    });
}

#[test]
fn a_capped_inbox_hands_the_scroll_to_the_records_below_its_floor() {
    let mut h = Harness::new(small_world());
    h.inbox_max_len = 6;
    run(async {
        let home = h.home(UserId(1));
        assert_eq!(h.scroll(UserId(1), 2).await, home);
        assert!(
            Stats::get(&h.stats.pg_pages) > 0,
            "the floor was not heeded"
        );
        let first = h.page(UserId(1), PageRequest::first(2)).await;
        assert_eq!(first.items.len(), 2);
    });
}

#[test]
fn posts_published_during_a_scroll_are_neither_repeated_below_nor_missed_above() {
    let h = Harness::new(small_world());
    run(async {
        let home = h.home(UserId(1));
        let first = h.page(UserId(1), PageRequest::first(4)).await;
        // New posts come later, or at the same millisecond as the top with
        // greater ids (above it in feed order).
        for (i, author) in [2, 3, 1, 4, 2].into_iter().enumerate() {
            h.world.publish(PostId(900 + i as i64), UserId(author), 60);
        }
        h.world.publish(PostId(910), UserId(3), 70);
        let mut seen: Vec<PostId> = first.items.iter().map(|p| p.id).collect();
        let mut next = first.next;
        while let Some(cursor) = next {
            let page = h.page(UserId(1), PageRequest::after(cursor, 4)).await;
            seen.extend(page.items.iter().map(|p| p.id));
            next = page.next;
        }
        assert_eq!(seen, home, "the scroll down moved");
        // Refreshing from the first page's top gives exactly the new ones.
        let mut fresh = Vec::new();
        let mut prev = first.prev;
        loop {
            let page = h.page(UserId(1), PageRequest::before(prev, 2)).await;
            if page.items.is_empty() {
                break;
            }
            let mut ids: Vec<PostId> = page.items.iter().map(|p| p.id).collect();
            ids.extend(fresh);
            fresh = ids;
            prev = page.prev;
        }
        let now = h.home(UserId(1));
        let new: Vec<PostId> = now
            .iter()
            .copied()
            .filter(|id| !home.contains(id))
            .collect();
        assert_eq!(fresh, new);
    });
}

/// A world drawn at random: who follows whom, who is big-V, posts in runs
/// of equal times, some deleted; then what befalls the cache between
/// scrolls (a part lost, or every call failing) and unfollows.
fn worlds() -> impl Strategy<Value = (World, u32, Vec<u8>)> {
    (
        prop::collection::vec((1..=6i64, 1..=6i64), 0..20),
        prop::collection::vec(any::<bool>(), 6),
        prop::collection::vec((1..=6i64, 0..8i64, any::<bool>()), 0..60),
        1..6u32,
        prop::collection::vec(0..7u8, 0..4),
    )
        .prop_map(|(follows, big, posts, limit, losses)| {
            let world = World::default();
            {
                let mut t = world.truth();
                t.users.extend((1..=6).map(UserId));
                t.follows.extend(
                    follows
                        .into_iter()
                        .filter(|(a, b)| a != b)
                        .map(|(a, b)| (UserId(a), UserId(b))),
                );
                t.big_vs
                    .extend((1..=6).filter(|a| big[*a as usize - 1]).map(UserId));
            }
            for (i, (author, at, live)) in posts.into_iter().enumerate() {
                let id = 1 + i as i64;
                world.publish(PostId(id), UserId(author), at);
                if !live {
                    world.delete(PostId(id));
                }
            }
            (world, limit, losses)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_home_scrolls_whole_whatever_the_cache_holds((world, limit, losses) in worlds()) {
        let h = Harness::new(world);
        run(async {
            for reader in 1..=6 {
                let home = h.home(UserId(reader));
                prop_assert_eq!(h.scroll(UserId(reader), limit).await, home.clone());
                for loss in &losses {
                    if *loss == 6 {
                        h.world.unfollow(UserId(reader));
                    }
                    let home = h.home(UserId(reader));
                    {
                        let mut c = h.world.cache.lock().unwrap();
                        match loss {
                            0 => c.following.clear(),
                            1 => c.pulled = None,
                            2 => c.hidden = None,
                            3 => c.lists.clear(),
                            4 => c.posts.clear(),
                            5 => h.world.down.store(true, Ordering::Relaxed),
                            _ => {}
                        }
                    }
                    prop_assert_eq!(h.scroll(UserId(reader), limit).await, home.clone());
                    h.world.down.store(false, Ordering::Relaxed);
                }
            }
            Ok(())
        })?;
    }
}
