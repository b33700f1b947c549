//! Changes of edges over a world in memory: records that commit follows,
//! mutes and blocks with their jobs, and a cache holding readers' copies
//! of whom their homes show and their inboxes, which may refuse writes.
//! What a reader checks: after a call returns, its home shows the change;
//! a call the cache could not take answers 503 and a repeat finishes it;
//! a refused call changes nothing.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::edges::Edges;
use super::stores::{EdgeCache, EdgeRecords};
use crate::engine::stores::{Accounts, FeedEntries, Hints, Jobs, Pulled, Replicas};
use crate::engine::testing::{ids, run, settings, user};
use crate::error::{AppError, AppResult};
use crate::store::pg::{Blocked, EdgeChange, FollowedMany};
use crate::store::redis::hints::{ShownChange, Signal};
use crate::store::redis::state::PulledChange;
use crate::store::redis::WriteMark;
use crate::types::{
    feed_order, AccountStatus, Edge, EntriesOf, Entry, FeedSettings, JobId, PostId, User, UserId,
};

#[derive(Debug, Default)]
struct Records {
    users: HashMap<UserId, AccountStatus>,
    /// (follower, followee).
    follows: BTreeSet<(UserId, UserId)>,
    mutes: BTreeSet<(UserId, UserId)>,
    blocks: BTreeSet<(UserId, UserId)>,
    seq: HashMap<UserId, i64>,
    jobs: BTreeSet<JobId>,
    next_job: i64,
    big_vs: BTreeSet<UserId>,
    /// (author, time, id).
    posts: Vec<(UserId, i64, i64)>,
}

/// A reader's copy of whom its home shows: its sequence number, and each
/// author named, shown or not.
#[derive(Debug, Default, Clone)]
struct Copy {
    seq: i64,
    shows: HashMap<UserId, bool>,
}

#[derive(Debug, Default)]
struct Cached {
    copies: HashMap<UserId, Copy>,
    inboxes: HashMap<UserId, Vec<Entry>>,
    pulled: Vec<PulledChange>,
    hints: Vec<Signal>,
}

#[derive(Debug, Default)]
struct World {
    records: Mutex<Records>,
    cache: Mutex<Cached>,
    /// Every cache write fails.
    down: AtomicBool,
    /// Calls that wrote a reader's copy.
    copy_writes: AtomicUsize,
    deferred: AtomicUsize,
}

const THRESHOLD: usize = 3;

impl World {
    /// Users 1 to 5, each with a copy and an inbox, each having published
    /// five posts.
    fn new() -> World {
        let world = World::default();
        {
            let mut r = world.records();
            let mut c = world.cache.lock().unwrap();
            for u in 1..=5 {
                r.users.insert(UserId(u), AccountStatus::Active);
                c.copies.insert(UserId(u), Copy::default());
                c.inboxes.insert(UserId(u), Vec::new());
                for k in 0..5 {
                    r.posts.push((UserId(u), 1000 * k + u, 100 * u + k));
                }
            }
        }
        world
    }

    fn records(&self) -> std::sync::MutexGuard<'_, Records> {
        self.records.lock().unwrap()
    }

    fn cached(&self) -> AppResult<std::sync::MutexGuard<'_, Cached>> {
        if self.down.load(Ordering::Relaxed) {
            return Err(AppError::Unavailable {
                what: "Redis",
                source: "down".into(),
            });
        }
        Ok(self.cache.lock().unwrap())
    }

    /// Whom `reader`'s copy shows.
    fn shown(&self, reader: UserId) -> BTreeSet<UserId> {
        let c = self.cache.lock().unwrap();
        let copy = c.copies.get(&reader).cloned().unwrap_or_default();
        copy.shows
            .into_iter()
            .filter(|(_, s)| *s)
            .map(|(a, _)| a)
            .collect()
    }

    /// The authors whose posts `reader`'s inbox holds.
    fn inbox_authors(&self, reader: UserId) -> BTreeSet<UserId> {
        let c = self.cache.lock().unwrap();
        c.inboxes
            .get(&reader)
            .into_iter()
            .flatten()
            .map(|e| UserId(e.id.0 / 100))
            .collect()
    }

    fn hints(&self) -> Vec<Signal> {
        self.cache.lock().unwrap().hints.clone()
    }

    fn change(&self, follower: UserId, changed: bool, shown: bool) -> EdgeChange {
        let mut r = self.records();
        let seq = r.seq.entry(follower).or_default();
        if changed {
            *seq += 1;
        }
        let seq = *seq;
        let job = changed.then(|| {
            r.next_job += 1;
            let job = JobId(r.next_job);
            r.jobs.insert(job);
            job
        });
        EdgeChange {
            changed,
            seq,
            job,
            promoted: None,
            shown,
        }
    }
}

impl Records {
    fn apart(&self, a: i64, b: i64) -> bool {
        self.blocks.contains(&(UserId(a), UserId(b)))
            || self.blocks.contains(&(UserId(b), UserId(a)))
    }

    /// Whether `follower` may follow `followee` (an active account, not
    /// itself, not across a block).
    fn may_follow(&self, follower: UserId, followee: UserId) -> bool {
        follower != followee
            && self.users.get(&followee) == Some(&AccountStatus::Active)
            && !self.apart(follower.0, followee.0)
    }

    fn followers(&self, author: UserId) -> usize {
        self.follows.iter().filter(|(_, a)| *a == author).count()
    }

    /// The epoch of `author`'s promotion, if its followers reached the
    /// threshold now.
    fn promote(&mut self, author: UserId) -> Option<i64> {
        (self.followers(author) >= THRESHOLD && self.big_vs.insert(author)).then_some(7)
    }

    fn newest(&self, author: UserId, limit: i64) -> Vec<Entry> {
        let mut all: Vec<Entry> = self
            .posts
            .iter()
            .filter(|(a, _, _)| *a == author)
            .map(|(_, at, id)| Entry::new(*at, PostId(*id)))
            .collect();
        all.sort_by(feed_order);
        all.truncate(limit as usize);
        all
    }
}

impl Accounts for World {
    async fn user(&self, id: UserId) -> AppResult<Option<User>> {
        Ok(self
            .records()
            .users
            .get(&id)
            .map(|status| user(id, *status)))
    }
}

impl FeedEntries for World {
    async fn entries(&self, of: EntriesOf, limit: i64) -> AppResult<Vec<Entry>> {
        let (EntriesOf::Author(author) | EntriesOf::Held(author)) = of else {
            return Ok(Vec::new());
        };
        Ok(self.records().newest(author, limit))
    }
}

impl Jobs for World {
    async fn drop_job(&self, id: JobId) -> AppResult<()> {
        self.records().jobs.remove(&id);
        Ok(())
    }
}

impl EdgeRecords for World {
    async fn follow(
        &self,
        follower: UserId,
        followee: UserId,
        _now_ms: i64,
    ) -> AppResult<EdgeChange> {
        let (new, shown, promoted) = {
            let mut r = self.records();
            if r.apart(follower.0, followee.0) {
                return Err(AppError::Unprocessable("a block stands".into()));
            }
            let new = r.follows.insert((follower, followee));
            let promoted = r.promote(followee);
            (new, !r.mutes.contains(&(follower, followee)), promoted)
        };
        Ok(EdgeChange {
            promoted,
            ..self.change(follower, new, shown)
        })
    }

    async fn follow_many(
        &self,
        follower: UserId,
        targets: &[UserId],
        _fit: bool,
        _now_ms: i64,
    ) -> AppResult<FollowedMany> {
        let mut done = FollowedMany::default();
        {
            let mut r = self.records();
            for t in targets {
                if !r.may_follow(follower, *t) {
                    done.skipped.push(*t);
                } else if r.follows.insert((follower, *t)) {
                    done.new.push(*t);
                    if r.mutes.contains(&(follower, *t)) {
                        done.muted.push(*t);
                    }
                } else {
                    done.already.push(*t);
                }
            }
        }
        let change = self.change(follower, !done.new.is_empty(), true);
        done.seq = change.seq;
        done.job = change.job;
        Ok(done)
    }

    async fn unfollow(
        &self,
        follower: UserId,
        followee: UserId,
        _now_ms: i64,
    ) -> AppResult<EdgeChange> {
        let gone = self.records().follows.remove(&(follower, followee));
        Ok(self.change(follower, gone, false))
    }

    async fn set_mute(
        &self,
        reader: UserId,
        target: UserId,
        mute: bool,
        _now_ms: i64,
    ) -> AppResult<EdgeChange> {
        let (changed, shown) = {
            let mut r = self.records();
            let changed = match mute {
                true => r.mutes.insert((reader, target)),
                false => r.mutes.remove(&(reader, target)),
            };
            (changed, !mute && r.follows.contains(&(reader, target)))
        };
        Ok(self.change(reader, changed, shown))
    }

    async fn block(&self, blocker: UserId, target: UserId, _now_ms: i64) -> AppResult<Blocked> {
        let (new, gone) = {
            let mut r = self.records();
            let new = r.blocks.insert((blocker, target));
            let gone: Vec<(UserId, UserId)> = [(blocker, target), (target, blocker)]
                .into_iter()
                .filter(|edge| r.follows.remove(edge))
                .collect();
            (new, gone)
        };
        let unfollowed = gone
            .into_iter()
            .map(|(f, a)| (f, a, self.change(f, true, false)))
            .collect();
        Ok(Blocked { new, unfollowed })
    }

    async fn authored_by(&self, author: UserId, entries: &[Entry]) -> AppResult<Vec<Entry>> {
        let r = self.records();
        Ok(entries
            .iter()
            .filter(|e| r.posts.iter().any(|p| p.0 == author && p.2 == e.id.0))
            .copied()
            .collect())
    }

    async fn entries_of_many(
        &self,
        authors: &[UserId],
        limit: i64,
    ) -> AppResult<Vec<(UserId, Vec<Entry>)>> {
        let r = self.records();
        Ok(authors.iter().map(|a| (*a, r.newest(*a, limit))).collect())
    }
}

impl Replicas for World {
    fn write_mark(&self) -> WriteMark {
        WriteMark::default()
    }

    async fn replicated(&self, _mark: WriteMark) -> AppResult<()> {
        self.cached().map(drop)
    }
}

impl Hints for World {
    async fn hint(&self, signal: Signal) {
        self.cache.lock().unwrap().hints.push(signal);
    }
}

impl Pulled for World {
    async fn pulled_change(&self, _author: UserId, change: PulledChange) -> AppResult<()> {
        self.cached()?.pulled.push(change);
        Ok(())
    }
}

/// Applies change `seq` to `reader`'s copy if it is newer; true if it was.
fn advance(copy: &mut Copy, seq: i64, authors: &[(UserId, bool)]) -> bool {
    if seq <= copy.seq {
        return false;
    }
    copy.seq = seq;
    copy.shows.extend(authors.iter().copied());
    true
}

/// `entries` into `inbox`, each once, in feed order.
fn merge_into(inbox: &mut Vec<Entry>, entries: &[Entry]) {
    for e in entries {
        if !inbox.contains(e) {
            inbox.push(*e);
        }
    }
    inbox.sort_by(feed_order);
}

impl EdgeCache for World {
    async fn followed_in_copy(&self, reader: UserId, author: UserId) -> AppResult<Option<bool>> {
        let c = self.cached()?;
        Ok(c.copies
            .get(&reader)
            .and_then(|copy| copy.shows.get(&author).copied()))
    }

    async fn inbox(&self, reader: UserId) -> AppResult<Vec<Entry>> {
        let c = self.cached()?;
        Ok(c.inboxes.get(&reader).cloned().unwrap_or_default())
    }

    async fn set_follow(
        &self,
        reader: UserId,
        author: UserId,
        seq: i64,
        (edge, shown): (Edge, bool),
        _cap: i64,
        _cut: Option<i64>,
        entries: &[Entry],
    ) -> AppResult<bool> {
        let mut c = self.cached()?;
        self.copy_writes.fetch_add(1, Ordering::Relaxed);
        let Some(copy) = c.copies.get_mut(&reader) else {
            // No copy tells whether a newer follow came: the inbox goes.
            if edge == Edge::Unfollow {
                c.inboxes.remove(&reader);
            }
            return Ok(false);
        };
        if !advance(copy, seq, &[(author, shown)]) {
            return Ok(false);
        }
        if edge == Edge::Unfollow {
            copy.shows.remove(&author);
        }
        let inbox = c.inboxes.entry(reader).or_default();
        match edge {
            Edge::Follow => merge_into(inbox, entries),
            Edge::Unfollow => inbox.retain(|e| !entries.contains(e)),
            Edge::Mute | Edge::Unmute => {}
        }
        Ok(true)
    }

    async fn follow_many(
        &self,
        reader: UserId,
        seq: i64,
        authors: &[(UserId, bool)],
        (cap, _cut): (i64, Option<i64>),
        entries: &[Entry],
    ) -> AppResult<i64> {
        let mut c = self.cached()?;
        self.copy_writes.fetch_add(1, Ordering::Relaxed);
        let Some(copy) = c.copies.get_mut(&reader) else {
            return Ok(0);
        };
        if !advance(copy, seq, authors) {
            return Ok(0);
        }
        let inbox = c.inboxes.entry(reader).or_default();
        let before = inbox.len();
        merge_into(inbox, entries);
        inbox.truncate(cap as usize);
        Ok((inbox.len() - before) as i64)
    }

    async fn forget_active_fan(&self, _author: UserId, _reader: UserId) -> AppResult<()> {
        self.cached().map(drop)
    }
}

fn edges(world: &World) -> Edges<'_, World, World> {
    Edges {
        records: world,
        cache: world,
        settings: FeedSettings {
            big_v_threshold: THRESHOLD as i64,
            big_v_demote_threshold: 1,
            inbox_max_len: 100,
            follow_copy_limit: 3,
            ..settings()
        },
        deferred: Box::new(|| {
            world.deferred.fetch_add(1, Ordering::Relaxed);
        }),
    }
}

fn notified(user: UserId, account: UserId) -> Signal {
    Signal::Notified { user, account }
}

fn shown(reader: UserId, author: UserId, change: ShownChange) -> Signal {
    Signal::Shown {
        reader,
        author,
        change,
    }
}

#[test]
fn a_follow_shows_the_authors_newest_posts_once_it_returns() {
    let world = World::new();
    let e = edges(&world);
    run(async {
        e.follow(UserId(1), UserId(2)).await.unwrap();
        assert_eq!(world.shown(UserId(1)), BTreeSet::from_iter(ids([2])));
        let inbox = world.cache.lock().unwrap().inboxes[&UserId(1)].clone();
        let newest: Vec<PostId> = inbox.iter().map(|e| e.id).collect();
        assert_eq!(
            newest,
            vec![PostId(204), PostId(203), PostId(202)],
            "the copy limit's newest, newest first"
        );
        assert!(
            world.records().jobs.is_empty(),
            "the follow's job was not dropped"
        );
        assert_eq!(
            world.hints(),
            vec![
                shown(UserId(1), UserId(2), ShownChange::Followed),
                notified(UserId(2), UserId(1))
            ],
            "the reader's streams and the followee's"
        );
    });
}

#[test]
fn a_follow_the_cache_cannot_take_answers_503_and_a_repeat_finishes_it() {
    let world = World::new();
    let e = edges(&world);
    run(async {
        world.down.store(true, Ordering::Relaxed);
        let err = e.follow(UserId(1), UserId(2)).await.unwrap_err();
        assert!(matches!(err, AppError::Unavailable { .. }), "{err:?}");
        assert!(
            world.records().follows.contains(&(UserId(1), UserId(2))),
            "not recorded"
        );
        assert_eq!(
            world.records().jobs.len(),
            1,
            "its job is not left for a worker"
        );
        assert_eq!(world.deferred.load(Ordering::Relaxed), 1);
        assert!(world.shown(UserId(1)).is_empty());
        assert_eq!(
            world.hints(),
            vec![
                shown(UserId(1), UserId(2), ShownChange::Followed),
                notified(UserId(2), UserId(1))
            ],
            "the streams did not hear of the recorded follow"
        );
        world.down.store(false, Ordering::Relaxed);
        e.follow(UserId(1), UserId(2)).await.unwrap();
        assert_eq!(world.shown(UserId(1)), BTreeSet::from_iter(ids([2])));
        assert_eq!(
            world.inbox_authors(UserId(1)),
            BTreeSet::from_iter(ids([2]))
        );
        let told = world
            .hints()
            .into_iter()
            .filter(|h| matches!(h, Signal::Notified { .. }));
        assert_eq!(told.count(), 1, "the repeat told the followee again");
    });
}

#[test]
fn a_repeated_unfollow_touches_the_copy_only_while_it_still_shows_the_author() {
    let world = World::new();
    let e = edges(&world);
    run(async {
        e.follow(UserId(1), UserId(2)).await.unwrap();
        world.down.store(true, Ordering::Relaxed);
        assert!(e.unfollow(UserId(1), UserId(2)).await.is_err());
        assert_eq!(
            world.hints().last(),
            Some(&shown(UserId(1), UserId(2), ShownChange::Unfollowed)),
            "the streams did not hear of the recorded unfollow"
        );
        world.down.store(false, Ordering::Relaxed);
        assert_eq!(
            world.shown(UserId(1)),
            BTreeSet::from_iter(ids([2])),
            "the copy moved while down"
        );
        e.unfollow(UserId(1), UserId(2)).await.unwrap();
        assert!(
            world.shown(UserId(1)).is_empty(),
            "the owed unfollow was not applied"
        );
        assert!(
            world.inbox_authors(UserId(1)).is_empty(),
            "its posts stayed in the inbox"
        );
        let writes = world.copy_writes.load(Ordering::Relaxed);
        e.unfollow(UserId(1), UserId(2)).await.unwrap();
        e.unfollow(UserId(1), UserId(3)).await.unwrap();
        assert_eq!(
            world.copy_writes.load(Ordering::Relaxed),
            writes,
            "a repeat wrote the copy"
        );
    });
}

#[test]
fn an_unfollow_takes_out_every_post_of_the_author_the_inbox_holds_under_any_cap() {
    let world = World::new();
    let e = edges(&world);
    run(async {
        e.follow(UserId(1), UserId(2)).await.unwrap();
        // All five, pushed while the cap was larger than it is now.
        let all = world.records().newest(UserId(2), 5);
        world.cache.lock().unwrap().inboxes.insert(UserId(1), all);
        let small = Edges {
            settings: FeedSettings {
                inbox_max_len: 1,
                ..e.settings.clone()
            },
            ..edges(&world)
        };
        small.unfollow(UserId(1), UserId(2)).await.unwrap();
        assert!(
            world.inbox_authors(UserId(1)).is_empty(),
            "posts pushed under a larger cap stayed in the inbox"
        );
    });
}

#[test]
fn a_mute_hides_the_author_and_keeps_its_posts_for_the_unmute() {
    let world = World::new();
    let e = edges(&world);
    run(async {
        e.follow(UserId(1), UserId(2)).await.unwrap();
        e.mute(UserId(1), UserId(2), true).await.unwrap();
        assert!(world.shown(UserId(1)).is_empty());
        assert_eq!(
            world.inbox_authors(UserId(1)),
            BTreeSet::from_iter(ids([2])),
            "a mute emptied the inbox"
        );
        e.mute(UserId(1), UserId(2), false).await.unwrap();
        assert_eq!(world.shown(UserId(1)), BTreeSet::from_iter(ids([2])));
        let hints = world.hints();
        assert_eq!(
            hints[2..],
            [
                shown(UserId(1), UserId(2), ShownChange::Muted),
                shown(UserId(1), UserId(2), ShownChange::Followed)
            ]
        );
    });
}

#[test]
fn a_block_ends_the_follows_both_ways_and_no_follow_crosses_it() {
    let world = World::new();
    let e = edges(&world);
    run(async {
        e.follow(UserId(1), UserId(2)).await.unwrap();
        e.follow(UserId(2), UserId(1)).await.unwrap();
        e.block(UserId(1), UserId(2)).await.unwrap();
        assert!(world.shown(UserId(1)).is_empty() && world.shown(UserId(2)).is_empty());
        assert!(
            world.inbox_authors(UserId(1)).is_empty() && world.inbox_authors(UserId(2)).is_empty()
        );
        let hints = world.hints();
        assert!(hints.contains(&shown(UserId(1), UserId(2), ShownChange::Blocked)));
        assert!(hints.contains(&shown(UserId(2), UserId(1), ShownChange::Blocked)));
        assert!(matches!(
            e.follow(UserId(2), UserId(1)).await,
            Err(AppError::Unprocessable(_))
        ));
        assert!(world.shown(UserId(2)).is_empty());
    });
}

#[test]
fn refused_calls_change_nothing() {
    let world = World::new();
    world
        .records()
        .users
        .insert(UserId(3), AccountStatus::Suspended);
    world
        .records()
        .users
        .insert(UserId(4), AccountStatus::Deleted);
    let e = edges(&world);
    run(async {
        let refusals = [
            (e.follow(UserId(1), UserId(1)).await, "unprocessable"),
            (e.follow(UserId(1), UserId(3)).await, "unprocessable"),
            (e.follow(UserId(3), UserId(1)).await, "forbidden"),
            (e.follow(UserId(1), UserId(4)).await, "not_found"),
            (e.follow(UserId(1), UserId(9)).await, "not_found"),
            (e.mute(UserId(1), UserId(1), true).await, "unprocessable"),
            (e.mute(UserId(1), UserId(9), true).await, "not_found"),
            (e.block(UserId(1), UserId(1)).await, "unprocessable"),
            (e.block(UserId(9), UserId(1)).await, "not_found"),
        ];
        for (i, (refused, code)) in refusals.into_iter().enumerate() {
            let err = refused.expect_err("refused");
            assert_eq!(err.code(), code, "refusal {i}: {err:?}");
        }
        let r = world.records();
        assert!(r.follows.is_empty() && r.mutes.is_empty() && r.blocks.is_empty());
        assert!(r.jobs.is_empty());
        assert_eq!(world.copy_writes.load(Ordering::Relaxed), 0);
        assert!(world.hints().is_empty());
    });
}

#[test]
fn the_follow_that_makes_a_big_v_records_its_promotion() {
    let world = World::new();
    let e = edges(&world);
    run(async {
        for follower in [2, 3, 4] {
            e.follow(UserId(follower), UserId(1)).await.unwrap();
        }
        let c = world.cache.lock().unwrap();
        assert_eq!(c.pulled, vec![PulledChange::Promote(7)]);
    });
}

#[test]
fn a_follow_of_many_follows_whom_it_may_and_names_the_rest() {
    let world = World::new();
    world
        .records()
        .users
        .insert(UserId(4), AccountStatus::Suspended);
    let e = edges(&world);
    run(async {
        e.follow(UserId(1), UserId(3)).await.unwrap();
        let done = e
            .follow_many(
                UserId(1),
                &[
                    UserId(2),
                    UserId(3),
                    UserId(1),
                    UserId(9),
                    UserId(4),
                    UserId(5),
                ],
            )
            .await
            .unwrap();
        assert_eq!(done.new, ids([2, 5]));
        assert_eq!(done.already, ids([3]));
        assert_eq!(done.skipped, ids([1, 9, 4]));
        assert_eq!(world.shown(UserId(1)), BTreeSet::from_iter(ids([2, 3, 5])));
        assert_eq!(
            world.inbox_authors(UserId(1)),
            BTreeSet::from_iter(ids([2, 3, 5]))
        );
        let inbox = world.cache.lock().unwrap().inboxes[&UserId(1)].clone();
        assert!(inbox.windows(2).all(|w| feed_order(&w[0], &w[1]).is_lt()));
        assert!(world.records().jobs.is_empty());
    });
}

#[test]
fn a_user_unfollowing_itself_keeps_its_own_posts_and_changes_nothing() {
    let world = World::new();
    let own = vec![
        Entry {
            score: 4001,
            id: PostId(104),
        },
        Entry {
            score: 3001,
            id: PostId(103),
        },
    ];
    {
        let mut c = world.cache.lock().unwrap();
        c.inboxes.insert(UserId(1), own.clone());
        // Whatever the reader's copy says of the reader itself, an
        // unfollow would otherwise take it as owed and remove its posts.
        c.copies
            .get_mut(&UserId(1))
            .unwrap()
            .shows
            .insert(UserId(1), true);
    }
    // The reader has changed its follows since its copy was built.
    world.records().seq.insert(UserId(1), 5);
    let e = edges(&world);
    run(async {
        e.unfollow(UserId(1), UserId(1)).await.unwrap();
        assert_eq!(world.cache.lock().unwrap().inboxes[&UserId(1)], own);
        assert_eq!(world.copy_writes.load(Ordering::Relaxed), 0);
        assert!(world.records().jobs.is_empty());
        assert!(world.hints().is_empty());
        assert!(
            e.unfollow(UserId(9), UserId(9)).await.is_ok(),
            "idempotent, as for no follow"
        );
    });
}
