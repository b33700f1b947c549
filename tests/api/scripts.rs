//! The contract of a feed list (src/store/redis/scripts.rs), clause by
//! clause, against the real Redis.

use feed_service::store::redis::RedisStore;
use feed_service::store::redis::{layout, scripts};
use feed_service::types::{feed_order, Edge, Entry, PostId, Range, Scope, SourceRead, UserId};
use redis::aio::MultiplexedConnection;

use crate::helpers::test_settings;

/// The view the reads of these tests are of (each remembers where it read
/// a list last, and guesses from it).
const VIEW: Scope = Scope::Author(UserId(0));

/// A view of its own: one that never read a list yet.
fn view(n: usize) -> Scope {
    Scope::Author(UserId(n as i64 + 1))
}

/// A store with a key prefix of its own, its keys deleted when dropped.
struct Zsets {
    store: RedisStore,
    conn: MultiplexedConnection,
}

impl Zsets {
    async fn new() -> Self {
        // The scripts' contract is Lua's, on one node (some take keys of
        // several slots; on a cluster the store splits those calls).
        let mut settings = test_settings();
        settings.redis.cluster_urls = secrecy::SecretString::from("");
        let store = RedisStore::new(&settings.redis).unwrap();
        let url = secrecy::ExposeSecret::expose_secret(&settings.redis.url).to_string();
        let conn = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        Zsets { store, conn }
    }

    /// An inbox; each `n` in a block of readers (and so a slot) of its own.
    fn key(&self, n: i64) -> String {
        let block = feed_service::store::redis::keys::READER_BLOCK;
        self.store.keys().inbox(UserId(n * block))
    }

    /// The list's elements, sentinel included.
    async fn members(&mut self, key: &str) -> Vec<Vec<u8>> {
        redis::cmd("LRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .query_async(&mut self.conn)
            .await
            .unwrap()
    }

    /// Entry ids, oldest first, without the sentinel.
    async fn ids(&mut self, key: &str) -> Vec<i64> {
        let mut ids: Vec<i64> = self
            .members(key)
            .await
            .iter()
            .filter_map(|m| layout::unpack(m))
            .map(|e| e.id.0)
            .collect();
        ids.reverse();
        ids
    }

    /// The floor, as a score after [`T`] (or ±∞).
    async fn floor(&mut self, key: &str) -> Option<f64> {
        let raw: Option<String> = redis::cmd("LINDEX")
            .arg(key)
            .arg(-1)
            .query_async(&mut self.conn)
            .await
            .unwrap();
        raw.map(|r| match r.as_str() {
            "-inf" => f64::NEG_INFINITY,
            "inf" => f64::INFINITY,
            n => (n.parse::<i64>().unwrap() - T) as f64,
        })
    }

    async fn ttl(&mut self, key: &str) -> i64 {
        redis::cmd("TTL")
            .arg(key)
            .query_async(&mut self.conn)
            .await
            .unwrap()
    }

    /// Whether the list is entries in feed order, each once, then one
    /// sentinel, and a building list's mark before them (clause 2).
    async fn in_order(&mut self, key: &str) -> bool {
        let members = self.members(key).await;
        let Some((sentinel, mut rest)) = members.split_last() else {
            return false;
        };
        if sentinel == b"inf" {
            match rest.split_first() {
                Some((mark, entries)) if mark == b"inf" => rest = entries,
                _ => return false,
            }
        }
        let entries: Vec<Entry> = rest.iter().filter_map(|m| layout::unpack(m)).collect();
        layout::unpack(sentinel).is_none()
            && entries.len() == rest.len()
            && entries
                .windows(2)
                .all(|w| feed_order(&w[0], &w[1]) == std::cmp::Ordering::Less)
    }

    /// A complete feed list (floor `-inf`, or `floor`) holding `entries`.
    async fn built(&mut self, key: &str, cap: i64, floor: Option<i64>, entries: &[Entry]) {
        assert!(self.store.feeds().begin_build(key).await.unwrap());
        assert!(self
            .store
            .feeds()
            .fill(key, cap, floor, entries, 0)
            .await
            .unwrap());
    }

    /// Pushes `entries` into one feed list.
    async fn push(&self, key: &str, entries: &[Entry], cap: i64, cut: Option<i64>) -> i64 {
        self.store
            .feeds()
            .push_same(&[key.to_string()], entries, cap, cut)
            .await
            .unwrap()
    }

    /// Builds `reader`'s copy of whom it follows and the pulled authors
    /// (each with a big-V epoch), as a warm read needs them.
    async fn reader_state(&self, reader: i64, follows: &[i64], pulled: &[i64]) {
        use feed_service::types::PulledAuthor;
        self.build_following(reader, 1, follows).await;
        let pulled: Vec<PulledAuthor> = pulled
            .iter()
            .map(|&author| PulledAuthor {
                author: UserId(author),
                epoch: Some(1),
                in_flight: vec![],
            })
            .collect();
        for copy in self.store.keys().mark_copies() {
            assert!(self.store.state().begin_pulled(copy).await.unwrap());
            self.store.state().fill_pulled(copy, &pulled).await.unwrap();
            if self.store.state().begin_hidden(copy).await.unwrap() {
                assert!(self.store.state().fill_hidden(copy, &[]).await.unwrap());
            }
        }
    }

    /// Builds `reader`'s copy of whom it follows, as of `seq`; true if the
    /// fill completed it.
    async fn build_following(&self, reader: i64, seq: i64, follows: &[i64]) -> bool {
        let state = self.store.state();
        assert!(state.begin_following(UserId(reader)).await.unwrap());
        state
            .fill_following(
                UserId(reader),
                seq,
                &follows.iter().copied().map(UserId).collect::<Vec<_>>(),
                3600,
            )
            .await
            .unwrap()
    }

    async fn read(&self, key: &str, fetch: usize) -> Range {
        self.store
            .feeds()
            .ranges(VIEW, &[key.to_string()], None, fetch)
            .await
            .unwrap()
            .remove(0)
    }
}

impl Drop for Zsets {
    fn drop(&mut self) {
        let store = self.store.clone();
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(store.delete_all())
        })
        .join();
    }
}

/// The time the tests' scores count from: entries hold times after 2020.
const T: i64 = 1_764_500_000_000;

/// Reader 9's home, without its own posts.
const HOME_9: Scope = Scope::Home {
    reader: UserId(9),
    own: false,
};

/// A score `s` ms after [`T`].
fn at(s: i64) -> i64 {
    T + s
}

/// Entries of scores after [`T`].
fn entries(scores_and_ids: &[(i64, i64)]) -> Vec<Entry> {
    scores_and_ids
        .iter()
        .map(|&(s, id)| Entry::new(at(s), PostId(id)))
        .collect()
}

#[tokio::test]
async fn clause_1_and_6_a_read_sees_the_floor_of_what_it_read() {
    let mut z = Zsets::new().await;
    let (complete, floored, building, missing) = (z.key(1), z.key(2), z.key(3), z.key(4));
    z.built(&complete, 10, None, &entries(&[(5, 1), (6, 2)]))
        .await;
    z.built(
        &floored,
        10,
        Some(at(5)),
        &entries(&[(5, 1), (6, 2), (7, 3)]),
    )
    .await;
    assert!(z.store.feeds().begin_build(&building).await.unwrap());
    assert_eq!(
        z.read(&complete, 5).await,
        Range::Read(SourceRead {
            entries: entries(&[(6, 2), (5, 1)]),
            floor: None,
            cut: None,
        })
    );
    match z.read(&floored, 5).await {
        Range::Read(r) => assert_eq!(r.floor, Some(at(5))),
        other => panic!("{other:?}"),
    }
    assert_eq!(z.read(&building, 5).await, Range::Building);
    assert_eq!(z.read(&missing, 5).await, Range::Missing);
    // A read that stops at its limit cuts at its last score; one that
    // reaches the sentinel does not cut.
    let long = z.key(5);
    let eight: Vec<(i64, i64)> = (1..=8).map(|s| (s, s)).collect();
    z.built(&long, 10, None, &entries(&eight)).await;
    match z.read(&long, 1).await {
        // fetch 1: two entries and the slack, the sentinel not among them.
        Range::Read(r) => assert_eq!(r.cut, Some(at(8 - 1 - scripts::TIE_SLACK as i64))),
        other => panic!("{other:?}"),
    }
    // Read together (one pipeline per node), each key keeps its answer.
    let keys = [&missing, &floored, &building, &complete].map(|k| k.to_string());
    let together = z.store.feeds().ranges(VIEW, &keys, None, 5).await.unwrap();
    for (key, range) in keys.iter().zip(together) {
        assert_eq!(range, z.read(key, 5).await, "{key}");
    }
}

#[tokio::test]
async fn clause_6_a_read_takes_a_few_entries_past_its_limit_and_holds_all_above_its_last_score() {
    let mut z = Zsets::new().await;
    let (run, floored, long) = (z.key(1), z.key(2), z.key(3));
    let tied = entries(&[(10, 1), (9, 2), (9, 3), (9, 4), (9, 5), (8, 6)]);
    z.built(&run, 100, None, &tied).await;
    let read = |range: Range| match range {
        Range::Read(r) => (r.entries.iter().map(|e| e.id.0).collect::<Vec<_>>(), r.cut),
        other => panic!("{other:?}"),
    };
    let slack = scripts::TIE_SLACK;
    assert_eq!(slack, 4, "the counts below take four entries of slack");
    // fetch 0: five elements (1 + the slack), all entries: the run of 9
    // may go on, so the read holds everything above 9 only.
    assert_eq!(
        read(z.read(&run, 0).await),
        (vec![1, 5, 4, 3, 2], Some(at(9)))
    );
    // fetch 1: six entries, the sentinel not among them: cut at the last.
    assert_eq!(
        read(z.read(&run, 1).await),
        (vec![1, 5, 4, 3, 2, 6], Some(at(8)))
    );
    // fetch 2: the sentinel is read: no cut.
    assert_eq!(read(z.read(&run, 2).await), (vec![1, 5, 4, 3, 2, 6], None));
    // A read that reaches the sentinel (the floor at the run's score)
    // reads to the floor: no cut, the floor bounds it.
    z.built(&floored, 100, Some(at(9)), &tied).await;
    let Range::Read(r) = z.read(&floored, 2).await else {
        panic!("a read");
    };
    assert_eq!((r.cut, r.floor, r.entries.len()), (None, Some(at(9)), 5));
    // A run longer than the slack: the read stops inside it and cuts at it.
    let mut many = vec![(20, 1)];
    many.extend((0..slack as i64 + 10).map(|i| (7, 100 + i)));
    z.built(&long, 1000, None, &entries(&many)).await;
    let (ids, cut) = read(z.read(&long, 2).await);
    assert_eq!((ids.len(), cut), (3 + slack, Some(at(7))));
}

#[tokio::test]
async fn clause_6_a_read_from_the_top_and_one_below_a_cursor_read_the_same_window() {
    let mut z = Zsets::new().await;
    let (run, floored, building, missing) = (z.key(1), z.key(2), z.key(3), z.key(4));
    let tied = entries(&[(10, 1), (9, 2), (9, 3), (9, 4), (9, 5), (8, 6)]);
    z.built(&run, 100, None, &tied).await;
    z.built(&floored, 100, Some(at(9)), &tied).await;
    assert!(z.store.feeds().begin_build(&building).await.unwrap());
    let keys = [&run, &floored, &building, &missing].map(|k| k.to_string());
    let feeds = z.store.feeds();
    // From the top (one LRANGE) and from a cursor above every entry (the
    // SOURCES script, which finds its place): the same windows, whatever
    // the size, but for the floor of one that stops before the sentinel,
    // which a read from the top does not see (its cut vouches for it).
    let floor_seen_only_at_the_end = |mut ranges: Vec<Range>| {
        for range in &mut ranges {
            if let Range::Read(r) = range {
                if r.cut.is_some() {
                    r.floor = None;
                }
            }
        }
        ranges
    };
    // Below the cursor, a view that read the top guesses each place from
    // that read; another has no guess, and the script searches: the same
    // windows.
    for fetch in 0..9 {
        let (seen, unseen) = (view(100 + fetch), view(200 + fetch));
        let top = feeds.ranges(seen, &keys, None, fetch).await.unwrap();
        let searched = feeds
            .ranges(unseen, &keys, Some(at(50)), fetch)
            .await
            .unwrap();
        let guessed = feeds
            .ranges(seen, &keys, Some(at(50)), fetch)
            .await
            .unwrap();
        assert_eq!(guessed, searched, "fetch {fetch}");
        // A guess that lies (posts came and went unseen) reads the same
        // windows, or searches.
        for by in -3isize..=3 {
            let misled = view(300 + fetch * 10 + by.unsigned_abs() * 2 + usize::from(by > 0));
            feeds.ranges(misled, &keys, None, fetch).await.unwrap();
            z.store.places().mislead(by);
            let read = feeds
                .ranges(misled, &keys, Some(at(50)), fetch)
                .await
                .unwrap();
            assert_eq!(read, searched, "fetch {fetch}, guesses {by} off");
        }
        assert_eq!(top, floor_seen_only_at_the_end(searched), "fetch {fetch}");
    }
    // Below a cursor, the run's key alone: its window's ids and cut.
    let below = |max: i64, fetch: usize| {
        let keys = &keys[..1];
        async move {
            match feeds
                .ranges(VIEW, keys, Some(max), fetch)
                .await
                .unwrap()
                .remove(0)
            {
                Range::Read(r) => (r.entries.iter().map(|e| e.id.0).collect::<Vec<_>>(), r.cut),
                other => panic!("{other:?}"),
            }
        }
    };
    // Inside the run: the window starts at the run's first entry, and the
    // read holds everything above its last score.
    assert_eq!(below(at(9), 0).await, (vec![5, 4, 3, 2, 6], Some(at(8))));
    assert_eq!(below(at(9), 1).await, (vec![5, 4, 3, 2, 6], None));
    // Below every entry: nothing, the sentinel reached.
    assert_eq!(below(at(1), 3).await, (vec![], None));
}

#[tokio::test]
async fn clause_2_entries_stay_in_order_once_and_the_sentinel_last() {
    let mut z = Zsets::new().await;
    let key = z.key(1);
    // Filled with entries below its floor: they are dropped.
    z.built(&key, 10, Some(at(5)), &entries(&[(3, 1), (5, 2), (8, 3)]))
        .await;
    assert!(z.in_order(&key).await);
    assert_eq!(z.ids(&key).await, vec![2, 3]);
    // Pushed out of order, into the middle, at the floor's score, twice,
    // and ties ordered by the ids' decimal bytes (9 after 10): each in its
    // place, once.
    for pushed in [
        entries(&[(5, 9)]),
        entries(&[(7, 4), (7, 10), (7, 9), (6, 5)]),
        entries(&[(7, 4), (8, 3)]),
    ] {
        z.store
            .feeds()
            .push(&[(key.clone(), &pushed[..])], 10)
            .await
            .unwrap();
        assert!(z.in_order(&key).await);
    }
    assert_eq!(z.ids(&key).await, vec![2, 9, 5, 10, 4, 9, 3]);
    // One entry at a time, as fan-out pushes: the head again (kept once),
    // a tie with the head that sorts below it ("20" after "3") and one
    // that sorts above ("40").
    for (s, id) in [(8, 3), (8, 20), (8, 40)] {
        z.push(&key, &entries(&[(s, id)]), 10, None).await;
        assert!(z.in_order(&key).await);
    }
    assert_eq!(z.ids(&key).await, vec![2, 9, 5, 10, 4, 9, 20, 3, 40]);
    // Many at once (a follow's backfill), a cut push and a trim.
    let many: Vec<Entry> = (10..30)
        .map(|i| Entry::new(at(i % 7 + 9), PostId(1000 + i)))
        .collect();
    z.push(&key, &many, 100, None).await;
    assert!(z.in_order(&key).await);
    z.push(&key, &entries(&[(9, 4), (7, 5)]), 100, Some(at(7)))
        .await;
    assert!(z.in_order(&key).await);
    z.push(&key, &entries(&[(20, 6), (21, 7), (22, 8)]), 2, None)
        .await;
    assert!(z.in_order(&key).await);
    assert_eq!(z.ids(&key).await.len(), 2);
}

#[tokio::test]
async fn clause_3_pushes_reach_only_existing_lists_at_or_above_the_floor() {
    let mut z = Zsets::new().await;
    let (key, missing) = (z.key(1), z.key(2));
    z.built(&key, 100, Some(at(5)), &entries(&[(6, 1)])).await;
    let added = z
        .store
        .feeds()
        .push_same(
            &[key.clone(), missing.clone()],
            &entries(&[(4, 2), (5, 3), (9, 4)]),
            100,
            None,
        )
        .await
        .unwrap();
    assert_eq!(added, 2, "the entry below the floor is not added");
    assert_eq!(z.ids(&key).await, vec![3, 1, 4]);
    assert!(
        z.members(&missing).await.is_empty(),
        "a missing key stays missing"
    );
}

#[tokio::test]
async fn clause_3_a_cut_push_raises_the_floor_to_its_lowest_score() {
    let mut z = Zsets::new().await;
    let key = z.key(1);
    z.built(&key, 100, None, &entries(&[(2, 1), (6, 2)])).await;
    // The pusher sent the newest of a longer list, down to score 5.
    z.push(&key, &entries(&[(8, 3), (5, 4)]), 100, Some(at(5)))
        .await;
    assert_eq!(z.floor(&key).await, Some(5.0));
    assert_eq!(
        z.ids(&key).await,
        vec![4, 2, 3],
        "below the new floor: dropped"
    );
    match z.read(&key, 10).await {
        Range::Read(r) => assert_eq!(r.floor, Some(at(5))),
        other => panic!("{other:?}"),
    }
    // A cut lower than the floor does not lower it.
    z.push(&key, &entries(&[(7, 5), (3, 6)]), 100, Some(at(3)))
        .await;
    assert_eq!(z.floor(&key).await, Some(5.0));
    assert!(!z.ids(&key).await.contains(&6));
}

#[tokio::test]
async fn clause_3_a_cut_push_abandons_a_build_and_a_plain_one_lands_in_it() {
    let mut z = Zsets::new().await;
    let (plain, cut) = (z.key(1), z.key(2));
    assert!(z.store.feeds().begin_build(&plain).await.unwrap());
    assert!(z.store.feeds().begin_build(&cut).await.unwrap());
    z.push(&plain, &entries(&[(7, 1)]), 10, None).await;
    z.push(&cut, &entries(&[(7, 1)]), 10, Some(at(7))).await;
    assert_eq!(z.ids(&plain).await, vec![1]);
    assert!(z.members(&cut).await.is_empty(), "the build is abandoned");
    // Its builder's fill then leaves it missing.
    assert!(!z
        .store
        .feeds()
        .fill(&cut, 10, None, &entries(&[(3, 2)]), 0)
        .await
        .unwrap());
    assert_eq!(z.read(&cut, 5).await, Range::Missing);
    assert!(z
        .store
        .feeds()
        .fill(&plain, 10, None, &entries(&[(3, 2)]), 0)
        .await
        .unwrap());
    assert_eq!(z.ids(&plain).await, vec![2, 1]);
}

#[tokio::test]
async fn clause_4_a_trim_keeps_the_newest_cap_and_raises_the_floor() {
    let mut z = Zsets::new().await;
    let key = z.key(1);
    z.built(&key, 4, None, &[]).await;
    // Cap 4, slack max(1, 4/32) = 1: at 4 entries no trim.
    z.push(&key, &entries(&[(1, 1), (2, 2), (3, 3), (4, 4)]), 4, None)
        .await;
    assert_eq!(z.floor(&key).await, Some(f64::NEG_INFINITY));
    assert_eq!(z.ids(&key).await.len(), 4);
    // Past it: the newest 4 stay, the floor is the highest score removed.
    z.push(&key, &entries(&[(6, 6), (5, 5)]), 4, None).await;
    assert_eq!(z.ids(&key).await, vec![3, 4, 5, 6]);
    assert_eq!(z.floor(&key).await, Some(2.0));
    // A larger cap waits for its slack (1000: 31 over) before trimming.
    let big = z.key(2);
    z.built(&big, 1000, None, &[]).await;
    let many: Vec<Entry> = (1..=1030).map(|i| Entry::new(at(i), PostId(i))).collect();
    z.push(&big, &many, 1000, None).await;
    assert_eq!(z.ids(&big).await.len(), 1030);
    z.push(&big, &entries(&[(2000, 2000)]), 1000, None).await;
    assert_eq!(z.ids(&big).await.len(), 1000);
    assert_eq!(z.floor(&big).await, Some(31.0));
    // A list being built is not trimmed, however many new heads it gets,
    // and keeps its mark at its head: a window from the top shorter than
    // the list still reads it as building.
    let building = z.key(3);
    assert!(z.store.feeds().begin_build(&building).await.unwrap());
    for i in 1..=12 {
        z.push(&building, &entries(&[(i, i)]), 4, None).await;
    }
    assert_eq!(z.ids(&building).await.len(), 12);
    assert_eq!(z.floor(&building).await, Some(f64::INFINITY));
    assert!(z.in_order(&building).await);
    assert_eq!(z.read(&building, 2).await, Range::Building);
}

#[tokio::test]
async fn clause_5_a_build_is_begun_once_filled_once_and_expires_if_abandoned() {
    let mut z = Zsets::new().await;
    let key = z.key(1);
    assert!(z.store.feeds().begin_build(&key).await.unwrap());
    assert!(
        !z.store.feeds().begin_build(&key).await.unwrap(),
        "one builder"
    );
    assert_eq!(z.floor(&key).await, Some(f64::INFINITY));
    assert!(z.ttl(&key).await > 0, "an abandoned build expires");
    // A push racing with the build lands below its mark, then the fill
    // takes the mark off, and the floor drops what is below it.
    z.push(&key, &entries(&[(9, 1), (2, 2)]), 10, None).await;
    assert!(z.in_order(&key).await);
    assert_eq!(
        z.members(&key).await.len(),
        4,
        "mark, two entries, sentinel"
    );
    assert!(z
        .store
        .feeds()
        .fill(&key, 10, Some(at(5)), &entries(&[(5, 3), (6, 4)]), 0)
        .await
        .unwrap());
    assert_eq!(z.ids(&key).await, vec![3, 4, 1]);
    assert_eq!(z.floor(&key).await, Some(5.0));
    assert!(z.in_order(&key).await);
    assert_eq!(z.members(&key).await.len(), 4, "three entries, sentinel");
    assert_eq!(z.ttl(&key).await, -1, "a filled list does not expire");
    // Filling again (a late builder) changes nothing.
    assert!(!z
        .store
        .feeds()
        .fill(&key, 10, None, &entries(&[(1, 5)]), 0)
        .await
        .unwrap());
    assert_eq!(z.floor(&key).await, Some(5.0));
    assert!(!z.ids(&key).await.contains(&5));
}

impl Zsets {
    /// A SET's names, sorted.
    async fn names(&mut self, key: &str) -> Vec<String> {
        let mut m: Vec<String> = redis::cmd("SMEMBERS")
            .arg(key)
            .query_async(&mut self.conn)
            .await
            .unwrap();
        m.sort();
        m
    }

    async fn hash(&mut self, key: &str) -> std::collections::BTreeMap<String, String> {
        redis::cmd("HGETALL")
            .arg(key)
            .query_async(&mut self.conn)
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn clause_7_follow_changes_apply_in_sequence_order_and_abandon_builds() {
    let mut z = Zsets::new().await;
    let reader = 7;
    let inbox = z.store.keys().inbox(UserId(reader));
    let following = z.store.keys().following(UserId(reader));
    let followees = z.store.keys().followees(UserId(reader));
    z.built(&inbox, 10, None, &[]).await;
    // Missing: a change does nothing to the copy (it is rebuilt later)...
    assert!(!z
        .store
        .state()
        .set_follow(
            UserId(reader),
            UserId(1),
            5,
            (Edge::Follow, true),
            10,
            None,
            &entries(&[(3, 30)])
        )
        .await
        .unwrap());
    assert!(z.hash(&following).await.is_empty());
    // ...but the inbox gets the posts.
    assert_eq!(z.ids(&inbox).await, vec![30]);
    // An unfollow with no copy to tell whether a newer follow came drops
    // the inbox (rebuilt from the records), its posts of the author with it.
    assert!(!z
        .store
        .state()
        .set_follow(
            UserId(reader),
            UserId(1),
            6,
            (Edge::Unfollow, false),
            10,
            None,
            &entries(&[(3, 30)])
        )
        .await
        .unwrap());
    let left: i64 = redis::cmd("EXISTS")
        .arg(&inbox)
        .query_async(&mut z.conn)
        .await
        .unwrap();
    assert_eq!(left, 0, "the inbox stayed");
    z.built(&inbox, 10, None, &entries(&[(3, 30)])).await;
    // Built at sequence 4, following 1 and 2.
    assert!(z.build_following(reader, 4, &[1, 2]).await);
    assert_eq!(z.hash(&following).await["1"], "F4");
    // A change no newer than the build, or than the field, is ignored;
    // newer ones apply, in whatever order they come.
    let set = |author, seq, follow| {
        z.store.state().set_follow(
            UserId(reader),
            author,
            seq,
            (if follow { Edge::Follow } else { Edge::Unfollow }, follow),
            10,
            None,
            &[],
        )
    };
    assert!(!set(UserId(1), 4, false).await.unwrap());
    assert!(set(UserId(1), 9, false).await.unwrap());
    assert!(
        !set(UserId(1), 7, true).await.unwrap(),
        "older than the unfollow"
    );
    assert!(set(UserId(3), 8, true).await.unwrap());
    let h = z.hash(&following).await;
    assert_eq!(
        (h["1"].as_str(), h["2"].as_str(), h["3"].as_str()),
        ("U9", "F4", "F8")
    );
    // The SET of names follows the HASH: the followed authors, and 0.
    assert_eq!(z.names(&followees).await, ["0", "2", "3"]);
    // An unfollow that applies takes the author's posts out of the inbox;
    // one that does not, leaves them.
    z.store
        .state()
        .set_follow(
            UserId(reader),
            UserId(3),
            10,
            (Edge::Unfollow, false),
            10,
            None,
            &entries(&[(3, 30)]),
        )
        .await
        .unwrap();
    assert!(z.ids(&inbox).await.is_empty());
    z.push(&inbox, &entries(&[(3, 30)]), 10, None).await;
    assert!(!z
        .store
        .state()
        .set_follow(
            UserId(reader),
            UserId(3),
            6,
            (Edge::Unfollow, false),
            10,
            None,
            &entries(&[(3, 30)])
        )
        .await
        .unwrap());
    assert_eq!(z.ids(&inbox).await, vec![30]);
    // A mute hides an author and keeps its posts in the inbox; the unmute
    // shows it again, the posts still there.
    z.push(&inbox, &entries(&[(4, 20)]), 10, None).await;
    assert!(z
        .store
        .state()
        .set_follow(
            UserId(reader),
            UserId(2),
            13,
            (Edge::Mute, false),
            10,
            None,
            &[]
        )
        .await
        .unwrap());
    assert_eq!(z.hash(&following).await["2"], "U13");
    assert_eq!(z.names(&followees).await, ["0"]);
    assert_eq!(z.ids(&inbox).await, vec![30, 20]);
    assert!(z
        .store
        .state()
        .set_follow(
            UserId(reader),
            UserId(2),
            14,
            (Edge::Unmute, true),
            10,
            None,
            &[]
        )
        .await
        .unwrap());
    assert_eq!(z.hash(&following).await["2"], "F14");
    assert_eq!(z.names(&followees).await, ["0", "2"]);
    assert_eq!(z.ids(&inbox).await, vec![30, 20]);
    // Half a state (the SET lost) is no state: a change drops the rest,
    // and a build starts over, whichever half is left.
    z.store.delete(&followees).await.unwrap();
    assert!(!z
        .store
        .state()
        .set_follow(
            UserId(reader),
            UserId(4),
            12,
            (Edge::Follow, true),
            10,
            None,
            &[]
        )
        .await
        .unwrap());
    assert!(z.hash(&following).await.is_empty());
    assert!(z.build_following(reader, 12, &[2, 4]).await);
    z.store.delete(&followees).await.unwrap();
    assert!(z
        .store
        .state()
        .begin_following(UserId(reader))
        .await
        .unwrap());
    assert_eq!(z.hash(&following).await[""], "b");
    assert_eq!(z.names(&followees).await, ["0"]);
    // A change during a build abandons it; the fill then finds nothing.
    z.store.delete(&following).await.unwrap();
    assert!(z
        .store
        .state()
        .begin_following(UserId(reader))
        .await
        .unwrap());
    z.store
        .state()
        .set_follow(
            UserId(reader),
            UserId(1),
            11,
            (Edge::Follow, true),
            10,
            None,
            &[],
        )
        .await
        .unwrap();
    assert!(!z
        .store
        .state()
        .fill_following(UserId(reader), 10, &[UserId(2)], 3600)
        .await
        .unwrap());
    assert!(z.hash(&following).await.is_empty());
    assert!(z.names(&followees).await.is_empty());
}

#[tokio::test]
async fn clause_8_pulled_authors_track_epochs_and_deliveries_in_flight() {
    use feed_service::store::redis::state::PulledChange;
    use feed_service::types::MarkCopy;
    use feed_service::types::PulledAuthor;
    let mut z = Zsets::new().await;
    let copy = MarkCopy(0);
    let pulled = z.store.keys().pulled(copy);
    let names = z.store.keys().pulled_authors(copy);
    // Missing: changes do nothing (the copy is rebuilt later).
    z.store
        .state()
        .pulled_change(UserId(5), PulledChange::Add(PostId(50)))
        .await
        .unwrap();
    assert!(z.hash(&pulled).await.is_empty());
    // During a build changes land, and the fill merges.
    assert!(z.store.state().begin_pulled(copy).await.unwrap());
    z.store
        .state()
        .pulled_change(UserId(5), PulledChange::Add(PostId(51)))
        .await
        .unwrap();
    z.store
        .state()
        .pulled_change(UserId(6), PulledChange::Promote(3))
        .await
        .unwrap();
    let fill = [
        PulledAuthor {
            author: UserId(5),
            epoch: None,
            in_flight: vec![PostId(50)],
        },
        PulledAuthor {
            author: UserId(6),
            epoch: Some(2),
            in_flight: vec![],
        },
        // A big-V whose epoch is 0 (flagged before epochs existed) is
        // pulled like any other: the fill never drops a big-V.
        PulledAuthor {
            author: UserId(7),
            epoch: Some(0),
            in_flight: vec![],
        },
    ];
    assert!(z.store.state().fill_pulled(copy, &fill).await.unwrap());
    let h = z.hash(&pulled).await;
    assert_eq!(
        (
            h[""].as_str(),
            h["5"].as_str(),
            h["6"].as_str(),
            h["7"].as_str()
        ),
        ("c", ";50,51", "3;", "0;")
    );
    assert_eq!(z.names(&names).await, ["0", "5", "6", "7"]);
    // Its demotion settles epoch 0 like any other.
    z.store
        .state()
        .pulled_change(UserId(7), PulledChange::Demoted(0))
        .await
        .unwrap();
    assert!(!z.hash(&pulled).await.contains_key("7"));
    // A delivery done; the last one removes an author that is not big-V.
    z.store
        .state()
        .pulled_change(UserId(5), PulledChange::Done(PostId(50)))
        .await
        .unwrap();
    assert_eq!(z.hash(&pulled).await["5"], ";51");
    z.store
        .state()
        .pulled_change(UserId(5), PulledChange::Done(PostId(51)))
        .await
        .unwrap();
    assert!(!z.hash(&pulled).await.contains_key("5"));
    // A demotion settles only the epoch it ended: not a newer promotion's.
    z.store
        .state()
        .pulled_change(UserId(6), PulledChange::Add(PostId(60)))
        .await
        .unwrap();
    z.store
        .state()
        .pulled_change(UserId(6), PulledChange::Demoted(2))
        .await
        .unwrap();
    assert_eq!(z.hash(&pulled).await["6"], "3;60");
    z.store
        .state()
        .pulled_change(UserId(6), PulledChange::Demoted(3))
        .await
        .unwrap();
    assert_eq!(z.hash(&pulled).await["6"], ";60");
    z.store
        .state()
        .pulled_change(UserId(6), PulledChange::Done(PostId(60)))
        .await
        .unwrap();
    assert!(!z.hash(&pulled).await.contains_key("6"));
    assert_eq!(z.names(&names).await, ["0"]);
    // Half a state is no state: a change drops the rest.
    z.store.delete(&names).await.unwrap();
    z.store
        .state()
        .pulled_change(UserId(8), PulledChange::Promote(4))
        .await
        .unwrap();
    assert!(z.hash(&pulled).await.is_empty());
    assert!(z.store.state().begin_pulled(copy).await.unwrap());
}

#[tokio::test]
async fn the_marks_are_kept_in_copies_each_page_reading_the_copy_of_its_reader() {
    use feed_service::store::redis::state::PulledChange;
    use feed_service::store::redis::Fault;
    use feed_service::types::{PulledAuthor, StateKey, WarmRead};
    let mut z = Zsets::new().await;
    let keys = z.store.keys().clone();
    let home = |reader: i64| Scope::Home {
        reader: UserId(reader),
        own: false,
    };
    let pulls = async |z: &Zsets, reader: i64| match z
        .store
        .warm_read(home(reader), &[], None, 5)
        .await
        .unwrap()
    {
        WarmRead::Read { sources, .. } => Ok(sources
            .iter()
            .filter_map(|(a, _)| a.map(|a| a.0))
            .collect::<Vec<_>>()),
        other => Err(other),
    };
    // Readers 8 and 9 follow 2 and read copies of their own.
    let (c8, c9) = (keys.mark_copy(UserId(8)), keys.mark_copy(UserId(9)));
    assert_ne!(c8, c9);
    z.reader_state(8, &[2], &[]).await;
    z.build_following(9, 1, &[2]).await;
    assert_eq!(pulls(&z, 8).await, Ok(vec![]));
    // A change reaches every copy, and both readers pull 2.
    z.store
        .state()
        .pulled_change(UserId(2), PulledChange::Promote(1))
        .await
        .unwrap();
    for copy in keys.mark_copies() {
        assert_eq!(z.hash(&keys.pulled(copy)).await["2"], "1;", "{copy:?}");
    }
    assert_eq!(pulls(&z, 8).await, Ok(vec![2]));
    assert_eq!(pulls(&z, 9).await, Ok(vec![2]));
    // Reader 8's copy lost: its page names it, reader 9's page still
    // reads, and the copy is rebuilt alone.
    z.store.delete(&keys.pulled(c8)).await.unwrap();
    assert_eq!(
        pulls(&z, 8).await,
        Err(WarmRead::Missing(StateKey::Pulled(c8)))
    );
    assert_eq!(pulls(&z, 9).await, Ok(vec![2]));
    assert!(!z.store.state().begin_pulled(c9).await.unwrap());
    assert!(z.store.state().begin_pulled(c8).await.unwrap());
    let big_v = PulledAuthor {
        author: UserId(2),
        epoch: Some(1),
        in_flight: vec![],
    };
    assert!(z.store.state().fill_pulled(c8, &[big_v]).await.unwrap());
    assert_eq!(pulls(&z, 8).await, Ok(vec![2]));
    // A change that leaves a copy behind (its master down) fails, and
    // holds in the others; made again, it holds in all.
    z.store.faults().arm(1, Fault::CopyBehind);
    let demoted = PulledChange::Demoted(1);
    assert!(z
        .store
        .state()
        .pulled_change(UserId(2), demoted)
        .await
        .is_err());
    let held = async |z: &mut Zsets| {
        let mut held = Vec::new();
        for copy in keys.mark_copies() {
            held.push(z.hash(&keys.pulled(copy)).await.contains_key("2"));
        }
        held
    };
    assert_eq!(held(&mut z).await, [true, false, false, false]);
    z.store
        .state()
        .pulled_change(UserId(2), demoted)
        .await
        .unwrap();
    assert_eq!(held(&mut z).await, [false; 4]);
    assert_eq!(pulls(&z, 8).await, Ok(vec![]));
}

#[tokio::test]
async fn clause_9_and_10_posts_are_cached_with_tombstones_and_read_warm() {
    use feed_service::types::{CachedPost, StateKey, WarmRead};
    let mut z = Zsets::new().await;
    let keys = z.store.keys().clone();
    let copy = keys.mark_copy(UserId(9));
    let post = |author: i64, t: i64| CachedPost {
        author_id: UserId(author),
        author_username: format!("u{author}"),
        body: "b".into(),
        created_at_ms: at(t),
        deleted: false,
        meta: None,
    };
    // A read before the reader state exists names what is missing.
    let inbox = keys.inbox(UserId(9));
    let read = z.store.warm_read(HOME_9, &[], None, 5).await.unwrap();
    assert_eq!(read, WarmRead::Missing(StateKey::Following));
    z.build_following(9, 1, &[1, 2]).await;
    assert_eq!(
        z.store.warm_read(HOME_9, &[], None, 5).await.unwrap(),
        WarmRead::Missing(StateKey::Pulled(copy))
    );
    assert!(z.store.state().begin_pulled(copy).await.unwrap());
    z.store.state().fill_pulled(copy, &[]).await.unwrap();
    assert_eq!(
        z.store.warm_read(HOME_9, &[], None, 5).await.unwrap(),
        WarmRead::Missing(StateKey::Hidden(copy))
    );
    assert!(z.store.state().begin_hidden(copy).await.unwrap());
    assert_eq!(
        z.store.warm_read(HOME_9, &[], None, 5).await.unwrap(),
        WarmRead::Building(StateKey::Hidden(copy))
    );
    assert!(z.store.state().fill_hidden(copy, &[]).await.unwrap());
    // Author 2 publishes (its outbox exists): the post is cached, pulled.
    z.built(&keys.outbox(UserId(2)), 10, None, &[]).await;
    z.store
        .posts()
        .publish(&post(2, 20), PostId(200), 10, 60, None)
        .await
        .unwrap();
    // Author 3, not followed, publishes too; and 1's post is in the inbox.
    z.built(&keys.outbox(UserId(3)), 10, None, &[]).await;
    z.store
        .posts()
        .publish(&post(3, 30), PostId(300), 10, 60, None)
        .await
        .unwrap();
    z.built(&inbox, 10, None, &entries(&[(10, 100)])).await;
    z.store
        .posts()
        .fill(&[(PostId(100), post(1, 10))], 60)
        .await
        .unwrap();
    let WarmRead::Read { sources, meta } = z.store.warm_read(HOME_9, &[], None, 5).await.unwrap()
    else {
        panic!("a warm read");
    };
    // The inbox and the outbox of author 2 (pulled, followed); not 3's.
    let authors: Vec<Option<i64>> = sources.iter().map(|(a, _)| a.map(|a| a.0)).collect();
    assert_eq!(authors, vec![None, Some(2)]);
    assert_eq!(meta[&PostId(100)].author, Some(UserId(1)));
    assert!(meta[&PostId(100)].followed && !meta[&PostId(100)].deleted);
    assert!(meta[&PostId(200)].followed);
    // A tombstone is seen; an entry whose post is not cached is unknown.
    z.store.posts().tombstone(PostId(100), 60).await.unwrap();
    z.push(&inbox, &entries(&[(11, 101)]), 10, None).await;
    let WarmRead::Read { meta, .. } = z.store.warm_read(HOME_9, &[], None, 5).await.unwrap() else {
        panic!("a warm read");
    };
    assert!(meta[&PostId(100)].deleted);
    assert_eq!(meta[&PostId(101)].author, None);
    // The reader's own post (9 publishes; the delivery is in flight): with
    // `own`, its outbox is pulled and its post followed; without, neither.
    z.built(&keys.outbox(UserId(9)), 10, None, &[]).await;
    z.store
        .posts()
        .publish(&post(9, 40), PostId(400), 10, 60, None)
        .await
        .unwrap();
    z.push(&inbox, &entries(&[(40, 400)]), 10, None).await;
    let own = Scope::Home {
        reader: UserId(9),
        own: true,
    };
    for (scope, shown) in [(HOME_9, false), (own, true)] {
        let WarmRead::Read { sources, meta } =
            z.store.warm_read(scope, &[], None, 5).await.unwrap()
        else {
            panic!("a warm read");
        };
        let authors: Vec<Option<i64>> = sources.iter().map(|(a, _)| a.map(|a| a.0)).collect();
        let pulled = if shown {
            vec![None, Some(2), Some(9)]
        } else {
            vec![None, Some(2)]
        };
        assert_eq!(authors, pulled, "own posts shown: {shown}");
        assert_eq!(meta[&PostId(400)].followed, shown);
        assert!(meta[&PostId(200)].followed && !meta.contains_key(&PostId(300)));
    }
    // Either SET of names lost: the read names the state to rebuild.
    z.store.delete(&keys.followees(UserId(9))).await.unwrap();
    assert_eq!(
        z.store.warm_read(HOME_9, &[], None, 5).await.unwrap(),
        WarmRead::Missing(StateKey::Following)
    );
    z.store.delete(&keys.pulled_authors(copy)).await.unwrap();
    z.build_following(9, 1, &[1, 2]).await;
    assert_eq!(
        z.store.warm_read(HOME_9, &[], None, 5).await.unwrap(),
        WarmRead::Missing(StateKey::Pulled(copy))
    );
    // A fill from PostgreSQL adds only what is missing (the tombstone stays).
    z.store
        .posts()
        .fill(&[(PostId(100), post(1, 10))], 60)
        .await
        .unwrap();
    assert_eq!(z.hash(&keys.post(PostId(100))).await["d"], "1");
    let cached = z
        .store
        .posts()
        .cached(&[PostId(100), PostId(200), PostId(999)])
        .await
        .unwrap();
    assert!(cached[&PostId(100)].deleted && !cached[&PostId(200)].deleted);
    assert!(!cached.contains_key(&PostId(999)));
    let ttl: i64 = redis::cmd("TTL")
        .arg(keys.post(PostId(200)))
        .query_async(&mut z.conn)
        .await
        .unwrap();
    assert!(ttl > 0 && ttl <= 60, "cached posts expire: {ttl}");
}

#[tokio::test]
async fn clause_10_the_warm_read_returns_and_looks_up_only_what_a_page_can_use() {
    use feed_service::types::WarmRead;
    let mut z = Zsets::new().await;
    let keys = z.store.keys().clone();
    let inbox = keys.inbox(UserId(9));
    z.reader_state(9, &[1, 2], &[]).await;
    // Ten entries, scores 1 to 10, the top of them in a run of three.
    let mut inbox_entries = entries(&[(10, 110), (10, 111), (10, 112)]);
    inbox_entries.extend((1..10).map(|s| Entry::new(at(s), PostId(100 + s))));
    z.built(&inbox, 100, None, &inbox_entries).await;
    let read = |w: WarmRead| match w {
        WarmRead::Read { sources, meta } => {
            let Range::Read(r) = &sources[0].1 else {
                panic!("{sources:?}");
            };
            let mut looked_up: Vec<i64> = meta.keys().map(|id| id.0).collect();
            looked_up.sort_unstable();
            (
                r.entries.iter().map(|e| e.id.0).collect::<Vec<_>>(),
                r.cut,
                looked_up,
            )
        }
        other => panic!("{other:?}"),
    };
    // fetch 4: nine entries read (five and the slack), of which the page
    // can use the first four and the rest of their last score: cut at 8
    // (below it nothing is returned or looked up).
    assert_eq!(
        read(z.store.warm_read(HOME_9, &[], None, 4).await.unwrap()),
        (
            vec![112, 111, 110, 109],
            Some(at(8)),
            vec![109, 110, 111, 112]
        )
    );
    // fetch 1: the page's part is the whole run of 10.
    assert_eq!(
        read(z.store.warm_read(HOME_9, &[], None, 1).await.unwrap()),
        (vec![112, 111, 110], Some(at(9)), vec![110, 111, 112])
    );
}

#[tokio::test]
async fn clause_10_of_the_merged_sources_only_the_page_s_part_is_returned_and_looked_up() {
    use feed_service::types::WarmRead;
    let mut z = Zsets::new().await;
    let keys = z.store.keys().clone();
    let inbox = keys.inbox(UserId(9));
    // More pulled authors than the reader follows (the warm read then
    // starts from whom it follows): 3 to 6 are not followed.
    z.reader_state(9, &[1, 2], &[1, 2, 3, 4, 5, 6]).await;
    // Two pulled outboxes that interleave, and an older inbox.
    let outbox_1 = entries(&[(20, 201), (18, 202), (16, 203), (14, 204)]);
    let outbox_2 = entries(&[(19, 301), (17, 302), (15, 303), (13, 304)]);
    z.built(&keys.outbox(UserId(1)), 100, None, &outbox_1).await;
    z.built(&keys.outbox(UserId(2)), 100, None, &outbox_2).await;
    z.built(
        &inbox,
        100,
        None,
        &entries(&[(10, 101), (9, 102), (8, 103)]),
    )
    .await;
    // fetch 2: each outbox reads three entries (cut at 16 and 15), so the
    // horizon is 16; of 20, 19, 18, 17 above it the page can use the first
    // two, and nothing below 19 is returned or looked up.
    let WarmRead::Read { sources, meta } = z.store.warm_read(HOME_9, &[], None, 2).await.unwrap()
    else {
        panic!("a warm read");
    };
    let mut got: Vec<(Option<i64>, Vec<i64>, Option<i64>)> = sources
        .iter()
        .map(|(author, range)| match range {
            Range::Read(r) => (
                author.map(|a| a.0),
                r.entries.iter().map(|e| e.id.0).collect(),
                r.cut,
            ),
            other => panic!("{other:?}"),
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (None, vec![], Some(at(18))),
            (Some(1), vec![201], Some(at(18))),
            (Some(2), vec![301], Some(at(18))),
        ]
    );
    let mut looked_up: Vec<i64> = meta.keys().map(|id| id.0).collect();
    looked_up.sort_unstable();
    assert_eq!(looked_up, vec![201, 301]);
}

#[tokio::test]
async fn clause_10_a_run_of_equal_scores_longer_than_a_read_may_take_is_left_out() {
    use feed_service::types::WarmRead;
    let mut z = Zsets::new().await;
    let keys = z.store.keys().clone();
    let inbox = keys.inbox(UserId(9));
    z.reader_state(9, &[1], &[]).await;
    let mut run = vec![(20, 1)];
    run.extend((0..scripts::TIE_SLACK as i64 + 10).map(|i| (7, 100 + i)));
    z.built(&inbox, 1000, None, &entries(&run)).await;
    // fetch 2: the run of 7 at the boundary is longer than the read may
    // take (fetch + 1 + `TIE_SLACK` entries): nothing of 7 is kept, and the read
    // says it holds everything above 7 only.
    let WarmRead::Read { sources, meta } = z.store.warm_read(HOME_9, &[], None, 2).await.unwrap()
    else {
        panic!("a warm read");
    };
    let Range::Read(r) = &sources[0].1 else {
        panic!("{sources:?}");
    };
    assert_eq!(
        (r.entries.clone(), r.cut),
        (entries(&[(20, 1)]), Some(at(7)))
    );
    assert_eq!(meta.keys().copied().collect::<Vec<_>>(), vec![PostId(1)]);
}

#[tokio::test]
async fn clause_11_a_reader_s_keys_expire_when_idle_and_reads_renew_them() {
    let mut z = Zsets::new().await;
    let keys = z.store.keys().clone();
    let (inbox, following, outbox) = (
        keys.inbox(UserId(7)),
        keys.following(UserId(7)),
        keys.outbox(UserId(7)),
    );
    let followees = keys.followees(UserId(7));
    // Built with the idle TTL; an outbox never expires.
    assert!(z.store.feeds().begin_build(&inbox).await.unwrap());
    assert!(z
        .store
        .feeds()
        .fill(&inbox, 10, None, &entries(&[(1, 1)]), 3_600)
        .await
        .unwrap());
    z.built(&outbox, 10, None, &entries(&[(1, 1)])).await;
    assert!(z.build_following(7, 1, &[2]).await);
    assert!((3_500..=3_600).contains(&z.ttl(&inbox).await));
    assert!((3_500..=3_600).contains(&z.ttl(&following).await));
    assert_eq!(z.ttl(&outbox).await, -1);
    // Pushes keep the TTL (a reader that only receives still expires).
    z.push(&inbox, &entries(&[(2, 2)]), 10, None).await;
    assert!((3_500..=3_600).contains(&z.ttl(&inbox).await));
    // A read renews both, once per mark interval.
    assert!(z
        .store
        .fans()
        .touch_reader(UserId(7), &[], 1, 60, (7_200, 86_400))
        .await
        .unwrap());
    assert!((7_100..=7_200).contains(&z.ttl(&inbox).await));
    assert!((7_100..=7_200).contains(&z.ttl(&following).await));
    assert!((7_100..=7_200).contains(&z.ttl(&followees).await));
    assert!(!z
        .store
        .fans()
        .touch_reader(UserId(7), &[], 2, 60, (9_000, 86_400))
        .await
        .unwrap());
    assert!(z.ttl(&inbox).await <= 7_200);
    // A key being built keeps its build TTL (an abandoned build still
    // expires soon), and a missing one stays missing.
    let other = keys.inbox(UserId(8));
    assert!(z.store.feeds().begin_build(&other).await.unwrap());
    assert!(z
        .store
        .fans()
        .touch_reader(UserId(8), &[UserId(3)], 1, 60, (7_200, 86_400))
        .await
        .unwrap());
    assert!(z.ttl(&other).await <= 30);
    assert_eq!(z.ttl(&keys.following(UserId(8))).await, -2);
    // ...and the reader is an active fan of the big-Vs it read.
    assert_eq!(
        z.store.fans().active_fans(UserId(3), 0).await.unwrap(),
        vec![UserId(8)]
    );
    let fans = keys.active_fans(UserId(3));
    assert!((86_300..=86_400).contains(&z.ttl(&fans).await));
    // An active-fans set keeps only its window, and expires after it.
    let later = 1 + 86_400_000 + 1;
    assert!(z
        .store
        .fans()
        .touch_reader(UserId(9), &[UserId(3)], later, 60, (7_200, 86_400))
        .await
        .unwrap());
    assert_eq!(
        z.store.fans().active_fans(UserId(3), 0).await.unwrap(),
        vec![UserId(9)]
    );
    assert!(z
        .store
        .fans()
        .touch_reader(UserId(10), &[UserId(3)], later, 60, (7_200, 100))
        .await
        .unwrap());
    assert!((1..=100).contains(&z.ttl(&fans).await));
}

#[tokio::test]
async fn clause_12_hidden_accounts_drop_their_posts_and_their_outboxes_from_every_read() {
    use feed_service::types::{CachedPost, StateKey, WarmRead};
    let mut z = Zsets::new().await;
    let keys = z.store.keys().clone();
    // An author's page reads the copy of the marks of its author.
    let copy = keys.mark_copy(UserId(2));
    let hidden = keys.hidden(copy);
    let post = |author: i64, t: i64| CachedPost {
        author_id: UserId(author),
        author_username: format!("u{author}"),
        body: "b".into(),
        created_at_ms: at(t),
        deleted: false,
        meta: None,
    };
    // Reader 9 follows 1 (pushed) and 2 (a pulled big-V).
    z.reader_state(9, &[1, 2], &[2]).await;
    z.built(&keys.outbox(UserId(2)), 10, None, &[]).await;
    z.store
        .posts()
        .publish(&post(2, 20), PostId(200), 10, 60, None)
        .await
        .unwrap();
    z.built(&keys.inbox(UserId(9)), 10, None, &entries(&[(10, 100)]))
        .await;
    z.store
        .posts()
        .fill(&[(PostId(100), post(1, 10))], 60)
        .await
        .unwrap();
    let hide = async |z: &Zsets, hidden: bool| {
        for account in [UserId(1), UserId(2)] {
            z.store
                .state()
                .hidden_change(account, hidden)
                .await
                .unwrap();
        }
    };
    let read =
        async |z: &Zsets, scope: Scope| match z.store.warm_read(scope, &[], None, 5).await.unwrap()
        {
            WarmRead::Read { sources, meta } => (
                sources
                    .iter()
                    .map(|(a, _)| a.map(|a| a.0))
                    .collect::<Vec<_>>(),
                meta.iter()
                    .filter(|(_, m)| m.followed)
                    .map(|(id, _)| id.0)
                    .collect::<std::collections::BTreeSet<_>>(),
            ),
            other => panic!("{other:?}"),
        };
    assert_eq!(
        read(&z, HOME_9).await,
        (vec![None, Some(2)], [100, 200].into())
    );
    // Both hidden: no outbox of 2 is read, no post of either is followed,
    // on a home and on an author's page.
    hide(&z, true).await;
    assert_eq!(read(&z, HOME_9).await, (vec![None], [].into()));
    assert_eq!(
        read(&z, Scope::Author(UserId(2))).await,
        (vec![None], [].into())
    );
    // Shown again.
    hide(&z, false).await;
    assert_eq!(
        read(&z, HOME_9).await,
        (vec![None, Some(2)], [100, 200].into())
    );
    // A change during a build abandons it; the fill then finds nothing.
    z.store.delete(&hidden).await.unwrap();
    assert_eq!(
        z.store
            .warm_read(Scope::Author(UserId(2)), &[], None, 5)
            .await
            .unwrap(),
        WarmRead::Missing(StateKey::Hidden(copy))
    );
    assert!(z.store.state().begin_hidden(copy).await.unwrap());
    assert!(!z.store.state().begin_hidden(copy).await.unwrap());
    z.store
        .state()
        .hidden_change(UserId(1), true)
        .await
        .unwrap();
    assert!(!z
        .store
        .state()
        .fill_hidden(copy, &[UserId(2)])
        .await
        .unwrap());
    assert!(z.names(&hidden).await.is_empty());
    // A build completes with its ids; it has no TTL once built.
    assert!(z.store.state().begin_hidden(copy).await.unwrap());
    assert!((1..=30).contains(&z.ttl(&hidden).await));
    assert!(z
        .store
        .state()
        .fill_hidden(copy, &[UserId(1)])
        .await
        .unwrap());
    assert_eq!(z.names(&hidden).await, ["0", "1"]);
    assert_eq!(z.ttl(&hidden).await, -1);
    assert_eq!(read(&z, HOME_9).await.1, [200].into());
}

/// The ids a read of `keys` by `view` finds at or below `max`, per list.
async fn ids_below(
    store: &RedisStore,
    view: Scope,
    keys: &[String],
    max: Option<i64>,
) -> Vec<Vec<i64>> {
    let ranges = store.feeds().ranges(view, keys, max, 2).await.unwrap();
    ranges
        .into_iter()
        .map(|range| match range {
            Range::Read(read) => read.entries.iter().map(|e| e.id.0).collect(),
            other => panic!("{other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn reads_go_on_the_stores_own_links_and_land_when_those_are_cut() {
    let mut z = Zsets::new().await;
    let keys: Vec<String> = (1..=3).map(|n| z.key(n)).collect();
    for key in &keys {
        let list = entries(&[(10, 1), (9, 2), (8, 3), (7, 4)]);
        z.built(key, 100, None, &list).await;
    }
    let (on_links, resent) = (z.store.calls_on_links(), z.store.calls_resent());
    for round in 0..2 {
        // From the top (a pipeline), below a cursor at the places the top
        // left (a transaction), and by a view that never read (the script).
        let top = ids_below(&z.store, VIEW, &keys, None).await;
        assert_eq!(top, vec![vec![1, 2, 3, 4]; 3], "round {round}");
        let below = ids_below(&z.store, VIEW, &keys, Some(at(9))).await;
        assert_eq!(below, vec![vec![2, 3, 4]; 3], "round {round}");
        let searched = ids_below(&z.store, view(round), &keys, Some(at(8))).await;
        assert_eq!(searched, vec![vec![3, 4]; 3], "round {round}");
        if round == 0 {
            assert_eq!(z.store.calls_on_links(), on_links + 3);
            assert_eq!(z.store.calls_resent(), resent, "no link failed");
            z.store.cut_links().await;
        }
    }
    assert!(
        z.store.calls_resent() > resent,
        "the read on the cut link was sent again"
    );
}
