//! The stateful model test of the engine: random sequences of operations
//! and faults against the real PostgreSQL and Redis, every page checked
//! against a reference model of the feed.
//!
//! The reference is the feed as docs/design.md defines it from the records: every
//! post of the authors a reader follows, newest first (ties by the id's
//! decimal bytes, descending); a deleted post leaves it.
//! The model keeps its own copy of users, follows and posts, and computes
//! every page a request should get, with a cursor implemented here apart
//! from the engine's. Each page the engine serves must equal it, item for
//! item and `next` for `next`, whatever Redis holds or has lost and however
//! far the fan-out has got. A finished scroll must also have shown every
//! post that existed when it started, was not deleted, and whose author was
//! followed throughout, exactly once and in order; the only slack is the one
//! a count-based cursor cannot avoid: when the set of posts scored exactly
//! the cursor's `max` changes while the client stands there (a post stamped
//! with that millisecond, a delete of one, a follow or unfollow of an author
//! with a post in it), a post of that millisecond may repeat or be skipped.
//!
//! Scrolls go down with `next`, or turn to refresh and go up with `prev`
//! to the top (a client paging up checks the same: every post above where
//! it started, once, in order).
//!
//! Operations: publish (bursts in one millisecond, stamps from a lagging
//! clock), delete, follow, unfollow, re-follow, own posts at home on or
//! off, both thresholds, both caps,
//! dropping any or every Redis key, and fan-out by hand: two workers claim
//! jobs in any order and run them one batch at a time, a worker may crash
//! between a batch and its checkpoint, leases expire, and Redis calls fail
//! (refused, or run with the reply lost); on a cluster, the map of which
//! master serves which slot goes wrong (as after a resharding), so calls
//! travelling per master are refused and resent alone. At the end every
//! job is drained
//! and every feed, inbox and outbox is checked.
//!
//! A failure shrinks to a minimal sequence and prints it. `cargo test` runs
//! a fixed number of cases from a fixed seed (`MODEL_SEED` picks
//! another, `MODEL_CASES` another count); `MODEL_SOAK_SECS=1200`
//! runs cases from fresh seeds for that long instead; `MODEL_TRACE=1` prints
//! every operation, page checked and stream event, and `MODEL_WATCH=u`
//! user `u`'s inbox after every operation.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use diesel::sql_types::BigInt;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use feed_service::domain::{IdempotencyKey, PostBody};
use feed_service::engine::fanout::{Lease, Step};
use feed_service::engine::lists::ListInput;
use feed_service::engine::stream::{Event, Events, Opening, Streams};
use feed_service::engine::{Bounds, Engine, Feed as EngineFeed, Page, SettingsPatch, Stats};
use feed_service::error::AppError;
use feed_service::settings::Settings;
use feed_service::store::pg::PgStore;
use feed_service::store::redis::keys::MARK_COPIES;
use feed_service::store::redis::{Fault, RedisStore};
use feed_service::types::{
    Cursor, Entry, ListId, MarkCopy, PageRequest, PostId, Prev, Scope, UserId,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use secrecy::ExposeSecret;

use crate::helpers::{test_settings, Cleanup};

/// Users of a case.
const USERS: usize = 24;
/// The model's clock starts here (fixed, so that a case replays the same).
const T0: i64 = 1_800_000_000_000;
/// Pages sizes a scroll draws from.
const SIZES: [u32; 8] = [1, 2, 3, 4, 5, 6, 7, 20];
/// (big_v_threshold, big_v_demote_threshold) pairs: low enough for two
/// dozen users to cross them.
const THRESHOLDS: [(i64, i64); 6] = [
    (2, 1),
    (3, 2),
    (5, 3),
    (1000, 900),
    (1000, 900),
    (1000, 900),
];
/// Inbox and outbox caps: small ones make floors, cuts and trims common.
const CAPS: [i64; 5] = [2, 3, 5, 10, 1000];
/// How many of an author's posts a follow copies.
const COPY_LIMITS: [i64; 4] = [0, 1, 3, 100];

#[derive(Debug, Clone, Copy)]
enum Stamp {
    /// The clock moves on by this many milliseconds (0: the same one).
    Advance(u8),
    /// An instance whose clock lags by this many milliseconds.
    Lagging(u8),
}

#[derive(Debug, Clone, Copy)]
enum KeyDrop {
    All,
    Inbox(u8),
    Outbox(u8),
    /// An inbox whose builder died between beginning the build and filling
    /// it: the key stays building, with its mark, and the pushes land in
    /// it until it expires; no read may trust it meanwhile.
    Unfilled(u8),
    /// A big-V's record of its active fans.
    ActiveFans(u8),
    /// The copy of whom a reader follows (its HASH: the SET of names is
    /// left, half a state).
    Following(u8),
    /// The SET of whom a reader follows (the HASH is left).
    Followees(u8),
    /// An idle reader's keys expire: its inbox, its copy of whom it
    /// follows (both keys) and its active mark, together.
    Idle(u8),
    /// A copy of the pulled authors (the HASH; the SET of names is left),
    /// the `pick`-th modulo how many there are.
    Pulled(u8),
    /// A copy of the hidden accounts.
    Hidden(u8),
    /// A copy's SET of the pulled authors' names (the HASH is left).
    PulledAuthors(u8),
    /// A cached post (the `pick`-th, modulo how many there are).
    Post(u16),
    /// One key of the prefix, whatever it is.
    Any(u16),
}

#[derive(Debug, Clone)]
enum Op {
    /// `count` posts by `author`, all with one stamp.
    Publish {
        author: u8,
        stamp: Stamp,
        count: u8,
    },
    /// The `pick`-th post (modulo how many there are).
    Delete {
        pick: u16,
    },
    /// The `pick`-th post's publish again, with its key (a client retrying
    /// after a lost answer): answers that post and changes nothing.
    Retry {
        pick: u16,
    },
    Follow {
        who: u8,
        whom: u8,
    },
    Unfollow {
        who: u8,
        whom: u8,
    },
    /// Unfollow and follow again at once; with `grab`, that worker (if
    /// idle) claims the newest job in between, as a worker woken by the
    /// unfollow would.
    Refollow {
        who: u8,
        whom: u8,
        grab: Option<u8>,
    },
    Thresholds(u8),
    Caps {
        inbox: u8,
        outbox: u8,
    },
    DropKeys(KeyDrop),
    /// A worker claims a job (if it holds none): the `pick`-th oldest
    /// claimable one, or with a negative `pick` the `-pick`-th newest.
    Claim {
        worker: u8,
        pick: i8,
    },
    /// A worker runs one batch of its job and records it.
    Step {
        worker: u8,
    },
    /// A worker runs one batch and dies before recording it.
    Crash {
        worker: u8,
    },
    /// Leases of jobs no live worker holds run out (crashes, backoffs).
    ExpireLeases,
    /// The next `calls` Redis calls fail: refused (`kind` 0), their
    /// replies lost (1), or, for a change to the copies of the marks, one
    /// copy left behind (2; any other call is refused).
    Fault {
        calls: u8,
        kind: u8,
    },
    /// The store's map of which master serves which slot goes wrong, as
    /// after a resharding it has not seen, until a call finds it out (on a
    /// cluster; nothing on one node).
    Reshard,
    /// The store's read links to the nodes (the single node, or each
    /// master) are cut from the nodes' side, as by a restart or a network
    /// cut: the next reads on them fail and are sent again through the
    /// store's other connections.
    CutLinks,
    /// Redis forgets its scripts (a restart, a failover to a replica that
    /// never ran them): every call must load what it runs again.
    ForgetScripts,
    /// The places the instances remember their views last read their feed
    /// lists at all move by this many entries (as if posts came and went
    /// unseen), and each scroll reads its next page: its guesses of where
    /// its cursor is lie.
    Mislead(i8),
    /// Runs every claimable job to its end.
    Drain,
    /// An operator makes an ordinary author big-V by SQL, without the
    /// service's promotion (its epoch stays as it was, 0 if it never was
    /// big-V) and without telling Redis.
    HandFlag {
        author: u8,
    },
    /// Starts a scroll in `slot` (its first page): of `reader`'s home
    /// feed, or with `own` of its own posts.
    Scroll {
        slot: u8,
        reader: u8,
        own: bool,
        size: u8,
    },
    /// The next page of the scroll in `slot`; with `cold`, the page as
    /// PostgreSQL answers it (a cold or Redis-less read).
    Page {
        slot: u8,
        size: u8,
        cold: bool,
    },
    /// An instance clears the pulled authors' deliveries that are done.
    Sweep,
    /// An instance's heartbeats stop reaching PostgreSQL (a pause, a
    /// partition) while its workers go on, and the other instance's idle
    /// worker claims at once (it may take over the silent one's job).
    Quiet {
        instance: u8,
    },
    /// An instance's heartbeat reaches PostgreSQL again.
    Beat {
        instance: u8,
    },
    /// An admin turns readers' own posts in their homes on or off.
    OwnPosts(bool),
    /// The scroll in `slot` turns to refresh, paging up with `prev` until
    /// nothing newer is left (with no scroll there, one starts up from
    /// the bottom of `reader`'s home).
    Rise {
        slot: u8,
        reader: u8,
        size: u8,
    },
    /// `who` mutes (or unmutes) `whom`.
    Mute {
        who: u8,
        whom: u8,
        on: bool,
    },
    /// `who` blocks (or unblocks) `whom`.
    Block {
        who: u8,
        whom: u8,
        on: bool,
    },
    /// An admin suspends `who` (or lifts it).
    Suspend {
        who: u8,
        on: bool,
    },
    /// `who` deletes its account; its purge runs to its end at once.
    Remove {
        who: u8,
    },
    /// `who` follows several at once.
    FollowMany {
        who: u8,
        whom: Vec<u8>,
    },
    /// An admin sets how many of an author's posts a follow copies.
    CopyLimit(u8),
    /// A live stream of `reader`'s home opens on the operation's instance
    /// (the one open before is checked and closed).
    Listen {
        reader: u8,
    },
    /// A live stream of a list opens (the `reader`-th of the users with a
    /// list), as `Listen` does.
    ListenList {
        reader: u8,
    },
    /// `who` follows the reader of the live stream (if one is open): a
    /// notification it may send.
    FollowListened {
        who: u8,
    },
    /// The reader of the live stream (if one is open) adds a filter, or
    /// removes its filters: the stream tells its client.
    FilterListened {
        add: bool,
    },
    /// The live stream drops and reconnects, on the other instance, with
    /// the id of an event it got: the last (`back` 0), or the one `back`
    /// events before it, as a client that lost what it got after that one
    /// (all of it is sent again).
    Reconnect {
        back: u8,
    },
    /// A page of `reader`'s home bounded by an entry, as clients that page
    /// by ids ask: the `pick`-th entry of the home's authors' posts
    /// (deleted ones too) as the bound; `how` 0: older than it (`max_id`), 1: the ones
    /// immediately newer (`min_id`), 2: the newest newer (`since_id`).
    Between {
        reader: u8,
        pick: u16,
        how: u8,
        size: u8,
    },
    /// `who` puts `whom` in its list (made the first time, `exclusive` or
    /// not), or takes it out.
    ListMember {
        who: u8,
        whom: u8,
        on: bool,
        exclusive: bool,
    },
    /// `who` makes its list exclusive (its members leave its home), or not.
    Exclusive {
        who: u8,
        on: bool,
    },
    /// Starts a scroll in `slot` of `reader`'s list (if it has one).
    ListScroll {
        slot: u8,
        reader: u8,
        size: u8,
    },
    /// A post stamped with the very millisecond a client's position
    /// stands on, arriving late (a clock behind, a publish held up): of
    /// the scroll in slot `target` (0 or 1), or of the live stream (2); by
    /// the `pick`-th author its feed shows.
    Late {
        target: u8,
        pick: u8,
    },
}

impl Op {
    /// A bit per kind that a case may leave out (publish, follow and page
    /// are always in).
    fn kind(&self) -> u32 {
        match self {
            Op::Publish { .. } | Op::Retry { .. } | Op::Follow { .. } | Op::Page { .. } => 0,
            Op::Rise { .. } => 1 << 17,
            Op::Mute { .. } => 1 << 18,
            Op::Block { .. } => 1 << 19,
            Op::Suspend { .. } => 1 << 20,
            Op::Remove { .. } => 1 << 21,
            Op::FollowMany { .. } | Op::CopyLimit(_) => 1 << 22,
            Op::Listen { .. }
            | Op::Reconnect { .. }
            | Op::FollowListened { .. }
            | Op::FilterListened { .. } => 1 << 23,
            Op::Between { .. } => 1 << 24,
            Op::Late { .. } => 1 << 25,
            Op::ListMember { .. }
            | Op::Exclusive { .. }
            | Op::ListScroll { .. }
            | Op::ListenList { .. } => 1 << 26,
            Op::Delete { .. } => 1,
            Op::Unfollow { .. } => 1 << 1,
            Op::Refollow { .. } => 1 << 2,
            Op::Thresholds(_) => 1 << 3,
            Op::Caps { .. } => 1 << 4,
            Op::DropKeys(_) => 1 << 5,
            Op::Claim { .. } => 1 << 6,
            Op::Step { .. } => 1 << 7,
            Op::Crash { .. } => 1 << 8,
            Op::ExpireLeases | Op::Quiet { .. } | Op::Beat { .. } => 1 << 9,
            Op::Fault { .. } => 1 << 10,
            Op::Drain => 1 << 11,
            Op::Scroll { .. } => 1 << 12,
            Op::Reshard | Op::CutLinks => 1 << 13,
            Op::HandFlag { .. } => 1 << 14,
            Op::Sweep => 1 << 15,
            Op::OwnPosts(_) => 1 << 16,
            Op::ForgetScripts | Op::Mislead(_) => 1 << 17,
        }
    }
}

/// A case: starting settings and graph, then operations.
#[derive(Debug, Clone)]
struct Case {
    /// Kinds of operation this case leaves out (bits of [`Op::kind`]):
    /// cases that do without some kinds reach states the others rarely do
    /// ("swarm testing").
    without: u32,
    /// Bit `i % 64` picks the instance of operation `i`.
    instances: u64,
    /// Indexes into THRESHOLDS and CAPS (inbox, outbox).
    settings: (u8, u8, u8),
    /// Whether homes show their readers' own posts at the start.
    own: bool,
    follows: Vec<(u8, u8)>,
    ops: Vec<Op>,
}

/// Users, most often from a few: follows, posts and scrolls then meet.
/// The `pick`-th copy of the marks, modulo how many there are.
fn copy(pick: u8) -> MarkCopy {
    MarkCopy(pick % MARK_COPIES)
}

fn user() -> impl Strategy<Value = u8> {
    prop_oneof![3 => 0u8..5, 1 => 0..USERS as u8]
}

fn op() -> impl Strategy<Value = Op> {
    let stamp = prop_oneof![
        3 => (0u8..3).prop_map(Stamp::Advance),
        1 => (1u8..40).prop_map(Stamp::Lagging),
    ];
    // The shared reader state (pulled authors, follow copies) is dropped
    // more often than one feed: every reader depends on it.
    let drop = prop_oneof![
        2 => Just(KeyDrop::All),
        2 => user().prop_map(KeyDrop::Inbox),
        2 => user().prop_map(KeyDrop::Outbox),
        2 => user().prop_map(KeyDrop::Unfilled),
        2 => user().prop_map(KeyDrop::ActiveFans),
        3 => user().prop_map(KeyDrop::Following),
        2 => user().prop_map(KeyDrop::Followees),
        2 => user().prop_map(KeyDrop::Idle),
        4 => any::<u8>().prop_map(KeyDrop::Pulled),
        2 => any::<u8>().prop_map(KeyDrop::Hidden),
        2 => any::<u8>().prop_map(KeyDrop::PulledAuthors),
        2 => any::<u16>().prop_map(KeyDrop::Post),
        2 => any::<u16>().prop_map(KeyDrop::Any),
    ];
    prop_oneof![
        14 => (user(), stamp, 1u8..5).prop_map(|(author, stamp, count)| Op::Publish { author, stamp, count }),
        4 => any::<u16>().prop_map(|pick| Op::Delete { pick }),
        3 => any::<u16>().prop_map(|pick| Op::Retry { pick }),
        8 => (user(), user()).prop_map(|(who, whom)| Op::Follow { who, whom }),
        4 => (user(), user()).prop_map(|(who, whom)| Op::Unfollow { who, whom }),
        6 => (user(), user(), prop::option::weighted(0.75, 0u8..2)).prop_map(|(who, whom, grab)| Op::Refollow { who, whom, grab }),
        4 => (0..THRESHOLDS.len() as u8).prop_map(Op::Thresholds),
        3 => (0..CAPS.len() as u8, 0..CAPS.len() as u8).prop_map(|(inbox, outbox)| Op::Caps { inbox, outbox }),
        6 => drop.prop_map(Op::DropKeys),
        8 => (0u8..2, -2i8..3).prop_map(|(worker, pick)| Op::Claim { worker, pick }),
        10 => (0u8..2).prop_map(|worker| Op::Step { worker }),
        2 => (0u8..2).prop_map(|worker| Op::Crash { worker }),
        3 => Just(Op::ExpireLeases),
        // Short faults are absorbed by the write paths' retries; long ones
        // defer a write's Redis update to its job.
        3 => (prop_oneof![3 => 1u8..4, 1 => 4u8..13], 0u8..3)
            .prop_map(|(calls, kind)| Op::Fault { calls, kind }),
        2 => Just(Op::Reshard),
        2 => Just(Op::CutLinks),
        2 => Just(Op::ForgetScripts),
        // Mostly down by 2 to 4: past the entry read above a guess, where
        // only the proof that the first entry read is above the cursor
        // tells a lying guess from a true one.
        6 => prop_oneof![1 => -4i8..2, 3 => 2i8..5].prop_map(Op::Mislead),
        2 => user().prop_map(|author| Op::HandFlag { author }),
        6 => Just(Op::Drain),
        7 => (0u8..2, user(), prop::bool::weighted(0.2), 0..SIZES.len() as u8)
            .prop_map(|(slot, reader, own, size)| Op::Scroll { slot, reader, own, size }),
        16 => (0u8..2, 0..SIZES.len() as u8, prop::bool::weighted(0.2))
            .prop_map(|(slot, size, cold)| Op::Page { slot, size, cold }),
        2 => Just(Op::Sweep),
        2 => (0u8..2).prop_map(|instance| Op::Quiet { instance }),
        2 => (0u8..2).prop_map(|instance| Op::Beat { instance }),
        2 => any::<bool>().prop_map(Op::OwnPosts),
        6 => (0u8..2, user(), 0..SIZES.len() as u8)
            .prop_map(|(slot, reader, size)| Op::Rise { slot, reader, size }),
        5 => (user(), user(), prop::bool::weighted(0.6))
            .prop_map(|(who, whom, on)| Op::Mute { who, whom, on }),
        3 => (user(), user(), prop::bool::weighted(0.6))
            .prop_map(|(who, whom, on)| Op::Block { who, whom, on }),
        3 => (user(), prop::bool::weighted(0.6)).prop_map(|(who, on)| Op::Suspend { who, on }),
        1 => user().prop_map(|who| Op::Remove { who }),
        4 => (user(), prop::collection::vec(user(), 1..6))
            .prop_map(|(who, whom)| Op::FollowMany { who, whom }),
        2 => (0..COPY_LIMITS.len() as u8).prop_map(Op::CopyLimit),
        3 => user().prop_map(|reader| Op::Listen { reader }),
        3 => user().prop_map(|reader| Op::ListenList { reader }),
        3 => user().prop_map(|who| Op::FollowListened { who }),
        2 => any::<bool>().prop_map(|add| Op::FilterListened { add }),
        3 => prop_oneof![Just(0u8), 1u8..30].prop_map(|back| Op::Reconnect { back }),
        5 => (user(), any::<u16>(), 0u8..3, 0..SIZES.len() as u8)
            .prop_map(|(reader, pick, how, size)| Op::Between { reader, pick, how, size }),
        5 => (0u8..3, any::<u8>()).prop_map(|(target, pick)| Op::Late { target, pick }),
        10 => (user(), user(), prop::bool::weighted(0.7), any::<bool>())
            .prop_map(|(who, whom, on, exclusive)| Op::ListMember { who, whom, on, exclusive }),
        6 => (user(), any::<bool>()).prop_map(|(who, on)| Op::Exclusive { who, on }),
        5 => (0u8..2, user(), 0..SIZES.len() as u8)
            .prop_map(|(slot, reader, size)| Op::ListScroll { slot, reader, size }),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let cap = prop_oneof![3 => 0u8..3, 1 => 0..CAPS.len() as u8];
    (
        (any::<u32>(), any::<u32>(), any::<u64>()),
        (0..THRESHOLDS.len() as u8, cap.clone(), cap),
        prop::bool::weighted(0.75),
        prop::collection::vec((user(), user()), 0..50),
        prop::collection::vec(op(), 1..120),
    )
        .prop_map(|((a, b, instances), settings, own, follows, ops)| Case {
            // Each kind left out with probability 1/4.
            without: a & b,
            instances,
            settings,
            own,
            follows,
            ops,
        })
}

// ----- the reference model -----

#[derive(Debug, Clone)]
struct MPost {
    id: i64,
    author: usize,
    score: i64,
    deleted: bool,
    /// The key it was published with.
    key: IdempotencyKey,
}

/// Feed order, written apart from the engine's: newest first, ties by the
/// id's decimal string, descending (as Redis orders equal scores).
fn newer_first(a: &MPost, b: &MPost) -> std::cmp::Ordering {
    b.score
        .cmp(&a.score)
        .then_with(|| b.id.to_string().cmp(&a.id.to_string()))
}

/// [`newer_first`] of two entries (score, id): `Less` if `a` is newer.
fn entry_order(a: (i64, i64), b: (i64, i64)) -> std::cmp::Ordering {
    b.0.cmp(&a.0)
        .then_with(|| b.1.to_string().cmp(&a.1.to_string()))
}

/// Which feed a scroll reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    /// A reader's home feed.
    Home(usize),
    /// An author's own posts.
    Author(usize),
    /// A user's list.
    List(usize),
}

/// A user's list (one at most each here).
struct MList {
    id: ListId,
    members: BTreeSet<usize>,
    exclusive: bool,
}

struct Scroll {
    feed: Feed,
    /// Where the next page is read from: down from a `next`, or up from a
    /// `prev` (a refresh); `None` before the first page, and for a scroll
    /// down once it has ended.
    at: Option<At>,
    /// The `prev` of the last page read.
    last_prev: Option<Prev>,
    /// Live posts of the feed when the scroll started (for a scroll up,
    /// those above where it started).
    initial: BTreeSet<i64>,
    /// Authors unfollowed at some point during the scroll.
    lost: BTreeSet<usize>,
    deleted: BTreeSet<i64>,
    /// Scores at which the feed changed while the cursor stood on them.
    disturbed: BTreeSet<i64>,
    /// Items shown, in the order a client lays them out: for a scroll up,
    /// each page goes above the ones before.
    seen: Vec<(i64, i64)>,
    /// Pages of this scroll were read while a write's Redis update was
    /// deferred to its job: the scroll as a whole is not checked.
    unchecked: bool,
    /// The client sends back positions by the entry they name (`id`), not
    /// by count: nothing excuses a repeat or a skip then.
    named: bool,
}

/// The position a scroll reads its next page from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Down(Cursor),
    Up(Prev),
}

impl Scroll {
    /// A scroll of the client in `slot`: the first holds positions by
    /// name, the second by count.
    fn new(slot: usize, feed: Feed, initial: BTreeSet<i64>, unchecked: bool) -> Self {
        Scroll {
            feed,
            at: None,
            last_prev: None,
            initial,
            lost: BTreeSet::new(),
            deleted: BTreeSet::new(),
            disturbed: BTreeSet::new(),
            seen: Vec::new(),
            unchecked,
            named: slot == 0,
        }
    }

    /// The score the cursor's offset counts entries of.
    fn score(&self) -> Option<i64> {
        match self.at? {
            At::Down(c) => Some(c.max),
            At::Up(p) => Some(p.min),
        }
    }
}

struct Model {
    ids: Vec<UserId>,
    follows: BTreeSet<(usize, usize)>,
    /// (muter, muted)
    mutes: BTreeSet<(usize, usize)>,
    /// (blocker, blocked)
    blocks: BTreeSet<(usize, usize)>,
    suspended: BTreeSet<usize>,
    /// Deleted accounts.
    gone: BTreeSet<usize>,
    /// Users' lists, by owner.
    lists: BTreeMap<usize, MList>,
    posts: Vec<MPost>,
    big_v: Vec<bool>,
    thresholds: (i64, i64),
    /// Homes show their readers' own posts.
    own: bool,
    clock: i64,
    scrolls: [Option<Scroll>; 2],
}

impl Model {
    fn followers(&self, u: usize) -> i64 {
        self.follows.iter().filter(|(_, b)| *b == u).count() as i64
    }

    /// The engine's big-V rule, restated.
    fn rule(&mut self, u: usize) {
        let n = self.followers(u);
        let (t, d) = self.thresholds;
        if !self.big_v[u] && n >= t {
            self.big_v[u] = true;
        } else if self.big_v[u] && n < d {
            self.big_v[u] = false;
        }
    }

    /// Whether `author`'s posts are in `feed`.
    fn holds(&self, feed: Feed, author: usize) -> bool {
        self.holds_with(&self.suspended, feed, author)
    }

    /// [`Self::holds`] with these accounts suspended.
    fn holds_with(&self, suspended: &BTreeSet<usize>, feed: Feed, author: usize) -> bool {
        if suspended.contains(&author) || self.gone.contains(&author) {
            return false;
        }
        match feed {
            Feed::Home(reader) => {
                (self.follows.contains(&(reader, author))
                    && !self.mutes.contains(&(reader, author))
                    && !self.apart(reader, author))
                    || (self.own && reader == author)
            }
            Feed::Author(a) => a == author,
            Feed::List(owner) => {
                self.listed(owner, author) && !self.mutes.contains(&(owner, author))
            }
        }
    }

    /// Whether `owner`'s list holds `member`.
    fn listed(&self, owner: usize, member: usize) -> bool {
        self.lists
            .get(&owner)
            .is_some_and(|l| l.members.contains(&member))
    }

    /// Whether `owner`'s exclusive list holds `member` (out of its home).
    fn apart(&self, owner: usize, member: usize) -> bool {
        self.lists
            .get(&owner)
            .is_some_and(|l| l.exclusive && l.members.contains(&member))
    }

    /// `member`'s posts join or leave `feed` (`lost`: they leave).
    fn moved(&mut self, feed: Feed, member: usize, lost: bool) {
        let scores = self.scores_of(member);
        for s in self.scrolls.iter_mut().flatten().filter(|s| s.feed == feed) {
            if let Some(at) = s.score() {
                if scores.contains(&at) {
                    s.disturbed.insert(at);
                }
            }
            if lost {
                s.lost.insert(member);
            }
        }
    }

    /// An unfollow takes the followee out of the follower's list.
    fn unlist(&mut self, follower: usize, followee: usize) {
        let held = self
            .lists
            .get_mut(&follower)
            .is_some_and(|l| l.members.remove(&followee));
        if held {
            self.moved(Feed::List(follower), followee, true);
        }
    }

    /// A feed: every live post of the authors a reader follows (or of one
    /// author), in feed order.
    fn feed(&self, feed: Feed) -> Vec<&MPost> {
        let mut v: Vec<&MPost> = self
            .posts
            .iter()
            .filter(|p| !p.deleted && self.holds(feed, p.author))
            .collect();
        v.sort_by(|a, b| newer_first(a, b));
        v
    }

    /// The page a request should get, by the cursor's definition:
    /// (items, next, prev), and on a page read up the position above each
    /// item (a stream's event ids).
    fn page(&self, feed: Feed, req: &PageRequest) -> ((Vec<i64>, Option<Cursor>, Prev), Vec<Prev>) {
        let s = self.feed(feed);
        let count =
            |range: &[&MPost], score: i64| range.iter().filter(|p| p.score == score).count() as u32;
        // Above an item: the entries of its score from it down.
        let prev_of = |i: usize| Prev {
            min: s[i].score,
            offset: count(&s[i..], s[i].score),
            id: Some(PostId(s[i].id)),
        };
        // Where the `i`-th entry lies from the entry a position names
        // (`Less`: above it).
        let beside =
            |i: usize, score: i64, id: PostId| entry_order((s[i].score, s[i].id), (score, id.0));
        if let Some(min) = req.min {
            // Up: the newer side leaves below it the `offset` oldest
            // entries scored `min`, or the named entry and those older;
            // the page is its last `limit` live entries.
            let run = count(&s, min);
            let below = match req.id {
                Some(id) => (0..s.len())
                    .filter(|&i| s[i].score == min && beside(i, min, id).is_ge())
                    .count() as u32,
                None => req.offset.min(run),
            };
            let end = s.iter().position(|p| p.score < min).unwrap_or(s.len());
            let picked: Vec<usize> = (0..end - below as usize)
                .rev()
                .take(req.limit as usize)
                .collect();
            let (Some(&newest), Some(&oldest)) = (picked.last(), picked.as_slice().first()) else {
                // By name, below the named entry: it and those above it.
                let above = match req.id {
                    Some(id) => (0..s.len())
                        .filter(|&i| s[i].score == min && beside(i, min, id).is_le())
                        .count() as u32,
                    None => run - below,
                };
                let next = Cursor {
                    max: min,
                    offset: above,
                    id: req.id,
                };
                let prev = Prev {
                    min,
                    offset: if req.id.is_some() { below } else { req.offset },
                    id: req.id,
                };
                return ((Vec::new(), Some(next), prev), Vec::new());
            };
            let items = picked.iter().rev().map(|&i| s[i].id).collect();
            let next = Cursor {
                max: s[oldest].score,
                offset: count(&s[..=oldest], s[oldest].score),
                id: Some(PostId(s[oldest].id)),
            };
            let marks = picked.iter().rev().map(|&i| prev_of(i)).collect();
            return ((items, Some(next), prev_of(newest)), marks);
        }
        let mut i = 0;
        if let Some(max) = req.max {
            // The entries of `max` the position has passed.
            let mut passed = 0;
            while i < s.len() && s[i].score > max {
                i += 1;
            }
            while i < s.len()
                && s[i].score == max
                && match req.id {
                    Some(id) => beside(i, max, id).is_le(),
                    None => passed < req.offset,
                }
            {
                i += 1;
                passed += 1;
            }
        }
        let mut items = Vec::new();
        let mut first = None;
        let mut last = None;
        let mut more = false;
        for (j, p) in s.iter().enumerate().skip(i) {
            if items.len() == req.limit as usize {
                more = true;
                break;
            }
            items.push(p.id);
            first = first.or(Some(j));
            last = Some(j);
        }
        let next = match last {
            Some(l) if more => {
                let mut start = l;
                while start > 0 && s[start - 1].score == s[l].score {
                    start -= 1;
                }
                Some(Cursor {
                    max: s[l].score,
                    offset: (l - start + 1) as u32,
                    id: Some(PostId(s[l].id)),
                })
            }
            _ => None,
        };
        let prev = match (first, req.max) {
            (Some(f), _) => prev_of(f),
            (None, None) => Prev::BOTTOM,
            // By name, above the named entry: it and those below it.
            (None, Some(max)) => Prev {
                min: max,
                offset: match req.id {
                    Some(id) => (0..s.len())
                        .filter(|&i| s[i].score == max && beside(i, max, id).is_ge())
                        .count() as u32,
                    None => count(&s, max).saturating_sub(req.offset),
                },
                id: req.id,
            },
        };
        ((items, next, prev), Vec::new())
    }

    /// The live posts of `feed` above a refresh position.
    fn above(&self, feed: Feed, at: Prev) -> BTreeSet<i64> {
        let s = self.feed(feed);
        if let Some(id) = at.id {
            return s
                .iter()
                .filter(|p| entry_order((p.score, p.id), (at.min, id.0)).is_lt())
                .map(|p| p.id)
                .collect();
        }
        let run = s.iter().filter(|p| p.score == at.min).count();
        let end = s.iter().position(|p| p.score < at.min).unwrap_or(s.len());
        s[..end - (at.offset as usize).min(run)]
            .iter()
            .map(|p| p.id)
            .collect()
    }

    fn scrolls_of(&mut self, reader: usize) -> impl Iterator<Item = &mut Scroll> {
        self.scrolls
            .iter_mut()
            .flatten()
            .filter(move |s| s.feed == Feed::Home(reader))
    }

    /// Posts with these scores join or leave `reader`'s home feed.
    fn disturb(&mut self, reader: usize, scores: &[i64]) {
        for s in self.scrolls_of(reader) {
            if let Some(at) = s.score() {
                if scores.contains(&at) {
                    s.disturbed.insert(at);
                }
            }
        }
    }

    fn scores_of(&self, author: usize) -> Vec<i64> {
        self.posts
            .iter()
            .filter(|p| p.author == author)
            .map(|p| p.score)
            .collect()
    }
}

/// Checks a finished scroll against what it had to show.
fn check_scroll(model: &Model, s: &Scroll) -> Result<(), String> {
    let score_of: BTreeMap<i64, i64> = model.posts.iter().map(|p| (p.id, p.score)).collect();
    let author_of: BTreeMap<i64, usize> = model.posts.iter().map(|p| (p.id, p.author)).collect();
    // A count moves when its millisecond's entries change while the client
    // stands there (the count form's one slack); a named entry never does.
    let excused = |score: i64| !s.named && s.disturbed.contains(&score);
    let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
    for (id, _) in &s.seen {
        *counts.entry(*id).or_default() += 1;
    }
    for id in &s.initial {
        if s.deleted.contains(id) || s.lost.contains(&author_of[id]) {
            continue;
        }
        let n = counts.get(id).copied().unwrap_or(0);
        if n != 1 && !excused(score_of[id]) {
            return Err(format!("scroll of {:?}: post {id} shown {n} times", s.feed));
        }
    }
    for (id, n) in &counts {
        if *n > 1 && !excused(score_of[id]) {
            return Err(format!("scroll of {:?}: post {id} shown {n} times", s.feed));
        }
    }
    for w in s.seen.windows(2) {
        let (a, b) = (w[0], w[1]);
        let ordered = a.1 > b.1 || (a.1 == b.1 && a.0.to_string() > b.0.to_string());
        if !(ordered || (a.1 == b.1 && excused(a.1))) {
            return Err(format!(
                "scroll of {:?}: post {} (at {}) before post {} (at {})",
                s.feed, a.0, a.1, b.0, b.1
            ));
        }
    }
    Ok(())
}

// ----- running a case against the engine -----

/// Two service instances on one PostgreSQL database and one Redis prefix;
/// each operation goes through one of them (the case says which).
struct World {
    engines: [Engine; 2],
    /// Each instance's live streams, listening to hints.
    hubs: [Streams; 2],
    hints: Vec<tokio::task::JoinHandle<()>>,
    /// The live stream open, if any.
    listener: Option<Listener>,
    /// The instance of the operation at hand.
    current: usize,
    redis: RedisStore,
    pg: AsyncPgConnection,
    model: Model,
    workers: [Option<Lease>; 2],
    /// A write's Redis update was deferred to its job (the write answered
    /// 503, or a publish could not write its post through) and the jobs
    /// have not all run since: pages may lag the records until they have.
    dirty: bool,
    /// Deferred writes counted so far, over both instances.
    deferred: u64,
}

impl Drop for World {
    fn drop(&mut self) {
        for h in &self.hints {
            h.abort();
        }
    }
}

/// A live stream of a reader's home (or of its list), and what it must
/// send.
struct Listener {
    reader: usize,
    /// The list it follows, if not the home.
    list: Option<ListId>,
    instance: usize,
    events: Events,
    /// Live posts of the home when it opened: none may come.
    initial: BTreeSet<i64>,
    /// Posts that must come: each at the top of the home when published.
    expected: BTreeSet<i64>,
    /// Authors whose posts joined or left the home while it was open.
    touched: BTreeSet<usize>,
    /// The authors the home showed after the last operation.
    shown: BTreeSet<usize>,
    seen: Vec<i64>,
    /// The id of the last event.
    last: Option<Prev>,
    /// Every event's id and post, in the order they came (what a client
    /// may resume from).
    history: Vec<(Prev, Option<i64>)>,
    /// Opened while a write's Redis update was deferred: the home it read
    /// its position from may have lagged the records (what it had is not
    /// known).
    lagged: bool,
    /// Posts whose Redis update was deferred to their job: each enters the
    /// home when the job runs, at its place in the feed, which may lie
    /// below the stream's position by then (a later post of its
    /// millisecond came first and was sent). It may come, once.
    deferred: BTreeSet<i64>,
    /// The newest entry the home has held since it opened (score, id): the
    /// stream's position is at or above it, even after it left the home
    /// (an unfollow, say), and a post entering below it is not streamed.
    high: Option<(i64, i64)>,
    /// A resume announced a gap: the posts at or below this millisecond
    /// are the client's to reload from the top of its home, not the
    /// stream's to send.
    floor: Option<i64>,
    /// Each open event's gap (the position it names), in order: the
    /// first is the stream's opening, each other a resume's.
    opens: Vec<Option<Prev>>,
    /// The resumes asked for: the position sent, and the posts of the home
    /// above it then if the model knew them (no Redis update deferred), to
    /// check that a gap is announced only past [`STREAM_REPLAY`].
    resumed: Vec<(Prev, Option<usize>)>,
    /// The notifications sent (id, the account it is from), in order.
    told: Vec<(i64, i64)>,
    /// Who began to follow the reader since the stream last opened: each
    /// is told, unless hidden from the reader by then.
    followers: Vec<usize>,
    /// Who began to follow the reader while a stream of it was open.
    ever: BTreeSet<usize>,
    /// The reader's filters changed since the stream last opened.
    filters_changed: bool,
    /// The stream said the filters changed since it last opened.
    filters_told: usize,
}

/// Whether entry `a` (score, id) is newer than `b` in the feed order.
fn above(a: (i64, i64), b: Option<(i64, i64)>) -> bool {
    b.is_none_or(|b| a.0 > b.0 || (a.0 == b.0 && a.1.to_string() > b.1.to_string()))
}

impl Listener {
    /// The feed it follows.
    fn feed(&self) -> Feed {
        match self.list {
            None => Feed::Home(self.reader),
            Some(_) => Feed::List(self.reader),
        }
    }

    /// How it opens, on behalf of `reader` (its id).
    fn opening(&self, reader: UserId) -> Opening {
        opening_of(reader, self.reader, self.list)
    }

    /// Raises the newest entry held to `entry` if it is newer.
    fn held(&mut self, entry: (i64, i64)) {
        if above(entry, self.high) {
            self.high = Some(entry);
        }
    }

    /// The position a client resumes from: its last event's id, or the one
    /// `back` events before it, forgetting what came after that one (it
    /// is to come again).
    fn rewind(&mut self, back: usize) -> Option<Prev> {
        let keep = self.history.len().saturating_sub(back).max(1);
        self.history.truncate(keep);
        let posts = self.history.iter().filter(|(_, p)| p.is_some()).count();
        self.seen.truncate(posts);
        if let Some((at, _)) = self.history.last() {
            self.last = Some(*at);
        }
        self.last
    }

    /// Takes every event sent so far.
    fn pump(&mut self) {
        while let Some(event) = self.events.try_recv() {
            self.take(event);
        }
    }

    fn take(&mut self, event: Event) {
        if std::env::var("MODEL_TRACE").is_ok() {
            eprintln!("TRACE event {event:?}");
        }
        match event {
            Event::Open { at, gap } => {
                if gap.is_some() {
                    GAPS.fetch_add(1, Ordering::Relaxed);
                    self.floor = self.floor.max(Some(at.min));
                }
                self.opens.push(gap);
                self.last = Some(at);
                self.history.push((at, None));
            }
            Event::Post { post, id, .. } => {
                self.seen.push(post.id.0);
                self.last = Some(id);
                self.history.push((id, Some(post.id.0)));
            }
            Event::Notification(told) => self.told.push((told.0.id, told.1.id.0)),
            Event::FiltersChanged => self.filters_told += 1,
            Event::Delete { .. } | Event::Remove { .. } | Event::Heartbeat => {}
        }
    }
}

/// A stream of the user with index `index` (its id `reader`), of its home
/// or of its `list`: every other user's streams send their posts' authors'
/// profiles and (of its home) its notifications, as Mastodon's do.
fn opening_of(reader: UserId, index: usize, list: Option<ListId>) -> Opening {
    Opening {
        list,
        profiles: index % 2 == 1,
        own_events: index % 2 == 1 && list.is_none(),
        ..Opening::of(reader)
    }
}

/// Posts a resumed stream replays at most (`feed.stream_replay`).
const STREAM_REPLAY: usize = 2;

/// Resumes that announced a gap, over all cases.
static GAPS: AtomicUsize = AtomicUsize::new(0);

/// Live streams checked against the model, over all cases.
static STREAMS: AtomicUsize = AtomicUsize::new(0);

/// Live streams of lists checked.
static LIST_STREAMS: AtomicUsize = AtomicUsize::new(0);

/// Notifications the checked streams sent, over all cases.
static TOLD: AtomicUsize = AtomicUsize::new(0);

/// Pages of lists checked, and pages of homes checked while an exclusive
/// list kept a followed author out of them.
static LIST_PAGES: AtomicUsize = AtomicUsize::new(0);
static APART_PAGES: AtomicUsize = AtomicUsize::new(0);

/// Pages checked against the model, over all cases.
static PAGES: AtomicUsize = AtomicUsize::new(0);

/// Jobs one instance's worker claimed while the other's still held them
/// (taken over from a quiet instance), over all cases.
static TAKEOVERS: AtomicUsize = AtomicUsize::new(0);

type Outcome = Result<(), String>;

fn fail<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl World {
    async fn start(settings: &Settings) -> Result<Self, String> {
        // Connecting runs the migrations (the first case's).
        let store = PgStore::connect(&settings.database)
            .await
            .map_err(|e| e.chain())?;
        let url = settings.database.url.expose_secret().to_string();
        let mut pg = AsyncPgConnection::establish(&url)
            .await
            .map_err(fail("connecting"))?;
        pg.batch_execute(
            "TRUNCATE users, follows, posts, fanout_jobs, mutes, blocks RESTART IDENTITY CASCADE; \
             UPDATE settings SET big_v_threshold = 1000, big_v_demote_threshold = 900, \
                inbox_max_len = 1000, outbox_max_len = 1000, home_includes_own_posts = TRUE, \
                follow_copy_limit = 100",
        )
        .await
        .map_err(fail("resetting"))?;
        let redis = RedisStore::new(&settings.redis).map_err(|e| e.chain())?;
        redis.delete_all().await.map_err(|e| e.chain())?;
        let engine = Engine::new(store, redis.clone(), settings.feed.clone())
            .await
            .map_err(|e| e.chain())?;
        let other = Engine::new(
            PgStore::connect(&settings.database)
                .await
                .map_err(|e| e.chain())?,
            RedisStore::new(&settings.redis).map_err(|e| e.chain())?,
            settings.feed.clone(),
        )
        .await
        .map_err(|e| e.chain())?;
        // Users in pairs, each pair in a block of ids of its own (keys.rs):
        // a fan-out's PUSH calls then serve one inbox or two, and on a
        // cluster the readers' keys lie on every master.
        let block = feed_service::store::redis::keys::READER_BLOCK;
        let mut ids = Vec::with_capacity(USERS);
        for i in 0..USERS {
            if i % 2 == 0 {
                pg.batch_execute(&format!(
                    "SELECT setval('users_id_seq', {}, false)",
                    1 + (i as i64 / 2) * block
                ))
                .await
                .map_err(fail("spreading ids"))?;
            }
            let u = engine
                .pg()
                .users()
                .create_user(&format!("u{i}"))
                .await
                .map_err(|e| e.chain())?;
            ids.push(u.id);
        }
        let hubs = [Streams::new(engine.clone()), Streams::new(other.clone())];
        let hints = hubs
            .iter()
            .map(|h| {
                let h = h.clone();
                tokio::spawn(async move { h.listen_forever().await })
            })
            .collect();
        Ok(World {
            redis,
            hubs,
            hints,
            listener: None,
            engines: [engine, other],
            current: 0,
            pg,
            model: Model {
                ids,
                follows: BTreeSet::new(),
                mutes: BTreeSet::new(),
                blocks: BTreeSet::new(),
                suspended: BTreeSet::new(),
                gone: BTreeSet::new(),
                lists: BTreeMap::new(),
                posts: Vec::new(),
                big_v: vec![false; USERS],
                thresholds: (1000, 900),
                own: true,
                clock: T0,
                scrolls: [None, None],
            },
            workers: [None, None],
            dirty: false,
            deferred: 0,
        })
    }

    fn id(&self, u: u8) -> i64 {
        self.model.ids[u as usize % USERS].0
    }

    fn engine(&self) -> &Engine {
        &self.engines[self.current]
    }

    async fn apply(&mut self, op: &Op) -> Outcome {
        match *op {
            Op::Publish {
                author,
                stamp,
                count,
            } => {
                let a = author as usize % USERS;
                let score = match stamp {
                    Stamp::Advance(ms) => {
                        self.model.clock += i64::from(ms);
                        self.model.clock
                    }
                    Stamp::Lagging(ms) => self.model.clock - i64::from(ms),
                };
                for _ in 0..count {
                    self.publish_at(a, score).await?;
                }
            }
            Op::Delete { pick } => {
                if self.model.posts.is_empty() {
                    return Ok(());
                }
                let i = pick as usize % self.model.posts.len();
                let id = self.model.posts[i].id;
                let result = self.engine().posts().delete_post(PostId(id), None).await;
                // A deleted account's posts are gone with it.
                let gone = self.model.gone.contains(&self.model.posts[i].author);
                match (self.model.posts[i].deleted || gone, result) {
                    (false, Ok(()) | Err(AppError::Unavailable { what: "Redis", .. })) => {
                        self.model.posts[i].deleted = true;
                        let (author, score) =
                            (self.model.posts[i].author, self.model.posts[i].score);
                        let holding: Vec<bool> = (self.model.scrolls.iter().flatten())
                            .map(|s| self.model.holds(s.feed, author))
                            .collect();
                        for (s, held) in self.model.scrolls.iter_mut().flatten().zip(holding) {
                            s.deleted.insert(id);
                            // The post leaves the feed: a count standing on
                            // its millisecond moves.
                            if held && s.score() == Some(score) {
                                s.disturbed.insert(score);
                            }
                        }
                    }
                    (
                        true,
                        Err(AppError::NotFound(_) | AppError::Unavailable { what: "Redis", .. }),
                    ) => {}
                    (was, other) => {
                        return Err(format!(
                            "delete of post {id} (deleted before: {was}): {:?}",
                            other.map_err(|e| e.chain())
                        ))
                    }
                }
            }
            Op::Retry { pick } => {
                if self.model.posts.is_empty() {
                    return Ok(());
                }
                let first = &self.model.posts[pick as usize % self.model.posts.len()];
                let body = PostBody::parse("m").unwrap();
                // Another clock: a retry is a new request.
                let answer = self
                    .engine()
                    .posts()
                    .publish_keyed_at(
                        self.model.ids[first.author],
                        (&body, None),
                        Some(&first.key),
                        self.model.clock + 1,
                    )
                    .await;
                if self.model.gone.contains(&first.author) {
                    // Its keys went with it: not found.
                    return match answer {
                        Err(AppError::NotFound(_)) => Ok(()),
                        other => Err(format!(
                            "a retry by a deleted account answered {:?}",
                            other.map(|a| a.post.id).map_err(|e| e.chain())
                        )),
                    };
                }
                let answer = answer.map_err(|e| format!("retried publish: {}", e.chain()))?;
                if (answer.post.id, answer.replayed) != (PostId(first.id), true) {
                    return Err(format!(
                        "a retry of post {} answered post {} (replayed: {})",
                        first.id, answer.post.id, answer.replayed
                    ));
                }
            }
            Op::Follow { who, whom } => self.follow(who, whom).await?,
            Op::Unfollow { who, whom } => self.unfollow(who, whom).await?,
            Op::Refollow { who, whom, grab } => {
                let pair = (who as usize % USERS, whom as usize % USERS);
                if self.model.follows.contains(&pair) {
                    self.unfollow(who, whom).await?;
                    if let Some(worker) = grab {
                        self.claim(worker, -1).await?;
                    }
                    self.follow(who, whom).await?;
                }
            }
            Op::Thresholds(pick) => {
                let (t, d) = THRESHOLDS[pick as usize % THRESHOLDS.len()];
                self.settings(SettingsPatch {
                    big_v_threshold: Some(t),
                    big_v_demote_threshold: Some(d),
                    ..Default::default()
                })
                .await?;
                self.model.thresholds = (t, d);
                for u in 0..USERS {
                    self.model.rule(u);
                }
            }
            Op::Caps { inbox, outbox } => {
                self.settings(SettingsPatch {
                    inbox_max_len: Some(CAPS[inbox as usize % CAPS.len()]),
                    outbox_max_len: Some(CAPS[outbox as usize % CAPS.len()]),
                    ..Default::default()
                })
                .await?;
                // Every settings change applies the thresholds again (which
                // demotes a big-V flagged by hand below them).
                for u in 0..USERS {
                    self.model.rule(u);
                }
            }
            Op::DropKeys(which) => {
                let keys = self.redis.keys().clone();
                // A drop that fails (an armed fault) drops nothing.
                let _ = match which {
                    KeyDrop::All => self.redis.delete_all().await.map(|_| ()),
                    KeyDrop::Inbox(u) => self.redis.delete(&keys.inbox(UserId(self.id(u)))).await,
                    KeyDrop::Outbox(u) => self.redis.delete(&keys.outbox(UserId(self.id(u)))).await,
                    // A deleted account reads nothing: no build of its
                    // inbox begins.
                    KeyDrop::Unfilled(u) if self.model.gone.contains(&(u as usize % USERS)) => {
                        Ok(())
                    }
                    KeyDrop::Unfilled(u) => {
                        let inbox = keys.inbox(UserId(self.id(u)));
                        match self.redis.delete(&inbox).await {
                            Ok(()) => self.redis.feeds().begin_build(&inbox).await.map(|_| ()),
                            Err(e) => Err(e),
                        }
                    }
                    KeyDrop::ActiveFans(u) => {
                        self.redis
                            .delete(&keys.active_fans(UserId(self.id(u))))
                            .await
                    }
                    KeyDrop::Following(u) => {
                        self.redis.delete(&keys.following(UserId(self.id(u)))).await
                    }
                    KeyDrop::Followees(u) => {
                        self.redis.delete(&keys.followees(UserId(self.id(u)))).await
                    }
                    KeyDrop::Idle(u) => {
                        let r = self.id(u);
                        self.redis
                            .delete_many(&[
                                keys.inbox(UserId(r)),
                                keys.following(UserId(r)),
                                keys.followees(UserId(r)),
                                keys.active_mark(UserId(r)),
                            ])
                            .await
                    }
                    KeyDrop::Pulled(pick) => self.redis.delete(&keys.pulled(copy(pick))).await,
                    KeyDrop::Hidden(pick) => self.redis.delete(&keys.hidden(copy(pick))).await,
                    KeyDrop::PulledAuthors(pick) => {
                        self.redis.delete(&keys.pulled_authors(copy(pick))).await
                    }
                    KeyDrop::Post(pick) => match self.model.posts.len() {
                        0 => Ok(()),
                        n => {
                            let id = self.model.posts[pick as usize % n].id;
                            self.redis.delete(&keys.post(PostId(id))).await
                        }
                    },
                    KeyDrop::Any(pick) => {
                        let all = self.all_keys().await?;
                        match all.get(pick as usize % all.len().max(1)) {
                            Some(k) => self.redis.delete(k).await,
                            None => Ok(()),
                        }
                    }
                };
            }
            Op::Claim { worker, pick } => self.claim(worker, pick).await?,
            Op::Step { worker } => {
                // Worker w is a worker of instance w.
                let w = worker as usize % 2;
                if let Some(mut lease) = self.workers[w].take() {
                    match self.engines[w].fanout().step(&mut lease, true).await {
                        Ok(Step::More) => self.workers[w] = Some(lease),
                        Ok(Step::Done) => {}
                        Err(e) => self.engines[w].fanout().fail(lease, &e).await,
                    }
                }
            }
            Op::Crash { worker } => {
                let w = worker as usize % 2;
                if let Some(mut lease) = self.workers[w].take() {
                    let _ = self.engines[w].fanout().step(&mut lease, false).await;
                }
            }
            Op::ExpireLeases => self.expire_leases().await?,
            Op::Fault { calls, kind } => {
                let fault = match kind {
                    0 => Fault::Refuse,
                    1 => Fault::LoseReply,
                    _ => Fault::CopyBehind,
                };
                self.engine().redis().faults().arm(u32::from(calls), fault);
            }
            Op::Reshard => {
                // A map that cannot be read is no map: nothing to spoil.
                let _ = self.engine().redis().misroute_slots().await;
            }
            Op::CutLinks => self.engine().redis().cut_links().await,
            Op::ForgetScripts => {
                // Redis down: nothing to forget.
                let _ = self.engine().redis().forget_scripts().await;
            }
            Op::Mislead(by) => {
                for engine in &self.engines {
                    engine.redis().places().mislead(isize::from(by));
                }
                // The next page of each scroll reads at the lying guesses
                // (on this instance; the other's wait for their next page).
                for slot in 0..2 {
                    self.page(slot, 3, false).await?;
                }
            }
            Op::Drain => self.drain().await?,
            Op::HandFlag { author } => {
                let u = author as usize % USERS;
                if !self.model.big_v[u] {
                    diesel::sql_query("UPDATE users SET big_v = TRUE WHERE id = $1")
                        .bind::<BigInt, _>(self.id(author))
                        .execute(&mut self.pg)
                        .await
                        .map_err(fail("flagging a big-V by hand"))?;
                    self.model.big_v[u] = true;
                }
            }
            Op::Scroll {
                slot,
                reader,
                own,
                size,
            } => {
                let r = reader as usize % USERS;
                if self.model.gone.contains(&r) {
                    // A deleted account reads nothing (and has no page).
                    return Ok(());
                }
                let feed = if own { Feed::Author(r) } else { Feed::Home(r) };
                let initial = self.model.feed(feed).iter().map(|p| p.id).collect();
                self.model.scrolls[slot as usize % 2] =
                    Some(Scroll::new(slot as usize % 2, feed, initial, self.dirty));
                self.page(slot as usize % 2, SIZES[size as usize % SIZES.len()], false)
                    .await?;
            }
            Op::Page { slot, size, cold } => {
                self.page(slot as usize % 2, SIZES[size as usize % SIZES.len()], cold)
                    .await?;
            }
            Op::Sweep => {
                // Faults armed by an earlier operation may fail it: a sweep
                // is best effort, and the next one does its work.
                let _ = self.engine().maintenance().sweep_pulled().await;
            }
            Op::Quiet { instance } => {
                let id = self.engines[instance as usize % 2].pg().instance();
                diesel::sql_query(
                    "INSERT INTO instances (id, seen_at) VALUES ($1, now() - interval '1 minute') \
                     ON CONFLICT (id) DO UPDATE SET seen_at = EXCLUDED.seen_at",
                )
                .bind::<BigInt, _>(id)
                .execute(&mut self.pg)
                .await
                .map_err(fail("silencing an instance"))?;
                let other = 1 - instance as usize % 2;
                if self.workers[other].is_none() {
                    self.workers[other] = self.engines[other]
                        .fanout()
                        .claim(0)
                        .await
                        .map_err(|e| format!("claim: {}", e.chain()))?;
                    self.count_takeover(other);
                }
            }
            Op::Beat { instance } => {
                self.engines[instance as usize % 2]
                    .pg()
                    .jobs()
                    .heartbeat()
                    .await
                    .map_err(|e| format!("heartbeat: {}", e.chain()))?;
            }
            Op::Suspend { who, on } => self.suspend(who, on).await?,
            Op::Listen { reader } => self.listen(reader as usize % USERS, None).await?,
            Op::ListenList { reader } => {
                let owners: Vec<(usize, ListId)> =
                    self.model.lists.iter().map(|(o, l)| (*o, l.id)).collect();
                if let Some(&(r, list)) = owners.get(reader as usize % owners.len().max(1)) {
                    self.listen(r, Some(list)).await?;
                }
            }
            Op::FollowListened { who } => {
                if let Some(reader) = self.listener.as_ref().map(|l| l.reader) {
                    self.follow(who, reader as u8).await?;
                }
            }
            Op::FilterListened { add } => self.filter_listened(add).await?,
            Op::Reconnect { back } => self.reconnect(back as usize).await?,
            Op::Between {
                reader,
                pick,
                how,
                size,
            } => {
                // Boxed: the operations' future lives on the test thread's stack.
                Box::pin(self.between(reader, pick, how, SIZES[size as usize % SIZES.len()]))
                    .await?
            }
            Op::FollowMany { who, ref whom } => self.follow_many(who, whom).await?,
            Op::Late { target, pick } => self.late(target, pick).await?,
            Op::CopyLimit(pick) => {
                self.settings(SettingsPatch {
                    follow_copy_limit: Some(COPY_LIMITS[pick as usize % COPY_LIMITS.len()]),
                    ..Default::default()
                })
                .await?;
                for u in 0..USERS {
                    self.model.rule(u);
                }
            }
            Op::Remove { who } => self.remove(who).await?,
            Op::Mute { who, whom, on } => self.mute(who, whom, on).await?,
            Op::ListMember {
                who,
                whom,
                on,
                exclusive,
            } => self.list_member((who, whom, on), exclusive).await?,
            Op::Exclusive { who, on } => self.exclusive(who, on).await?,
            Op::ListScroll { slot, reader, size } => {
                // One who has a list.
                let owners: Vec<usize> = self.model.lists.keys().copied().collect();
                let Some(&r) = owners.get(reader as usize % owners.len().max(1)) else {
                    return Ok(());
                };
                let feed = Feed::List(r);
                let initial = self.model.feed(feed).iter().map(|p| p.id).collect();
                self.model.scrolls[slot as usize % 2] =
                    Some(Scroll::new(slot as usize % 2, feed, initial, self.dirty));
                self.page(slot as usize % 2, SIZES[size as usize % SIZES.len()], false)
                    .await?;
            }
            Op::Block { who, whom, on } => self.block(who, whom, on).await?,
            Op::Rise { slot, reader, size } => {
                self.rise(
                    slot as usize % 2,
                    reader,
                    SIZES[size as usize % SIZES.len()],
                )
                .await?;
            }
            Op::OwnPosts(on) => {
                self.settings(SettingsPatch {
                    home_includes_own_posts: Some(on),
                    ..Default::default()
                })
                .await?;
                // As every settings change, it applies the thresholds again.
                for u in 0..USERS {
                    self.model.rule(u);
                }
                if self.model.own != on {
                    self.model.own = on;
                    // Every reader's own posts join or leave its home.
                    for r in 0..USERS {
                        let scores = self.model.scores_of(r);
                        self.model.disturb(r, &scores);
                        if !on {
                            for s in self.model.scrolls_of(r) {
                                s.lost.insert(r);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// A post stamped with the millisecond a client's position stands on:
    /// a scroll's (`target` 0 or 1) or the live stream's (2), by the
    /// `pick`-th author of its feed.
    async fn late(&mut self, target: u8, pick: u8) -> Outcome {
        let at = match target % 3 {
            2 => self.listener.as_mut().and_then(|l| {
                l.pump();
                // (Below every entry: an empty home.)
                l.last.filter(|at| at.min > 0).map(|at| (l.feed(), at.min))
            }),
            slot => self.model.scrolls[slot as usize]
                .as_ref()
                .and_then(|s| Some((s.feed, s.score()?))),
        };
        let Some((feed, score)) = at else {
            return Ok(());
        };
        let authors: Vec<usize> = (0..USERS).filter(|&u| self.model.holds(feed, u)).collect();
        if authors.is_empty() {
            return Ok(());
        }
        self.publish_at(authors[pick as usize % authors.len()], score)
            .await
    }

    /// One post by `a` at `score`, and what the model expects of it.
    async fn publish_at(&mut self, a: usize, score: i64) -> Outcome {
        let body = PostBody::parse("m").unwrap();
        let key = IdempotencyKey::parse(format!("k{}", self.model.posts.len()).as_bytes()).unwrap();
        let deferred_before = self.deferred_total();
        let published = self
            .engine()
            .posts()
            .publish_keyed_at(self.model.ids[a], (&body, None), Some(&key), score)
            .await;
        let deferred = self.deferred_total() > deferred_before;
        if self.model.gone.contains(&a) || self.model.suspended.contains(&a) {
            // A deleted account is not found; a suspended one may not.
            return match published {
                Err(AppError::NotFound(_)) if self.model.gone.contains(&a) => Ok(()),
                Err(AppError::Forbidden(_)) if !self.model.gone.contains(&a) => Ok(()),
                other => Err(format!(
                    "a publish by a deleted or suspended account answered {:?}",
                    other.map(|p| p.post.id).map_err(|e| e.chain())
                )),
            };
        }
        let post = published
            .map_err(|e| format!("publish: {}", e.chain()))?
            .post;
        let model = &mut self.model;
        for slot in 0..2 {
            let Some(feed) = model.scrolls[slot].as_ref().map(|s| s.feed) else {
                continue;
            };
            if !model.holds(feed, a) {
                continue;
            }
            let at = model.scrolls[slot].as_ref().and_then(|s| s.at);
            let moved = match at {
                Some(At::Down(c)) => c.max == score,
                // A refresh position counts the oldest entries
                // of its score: only a post that sorts among
                // them moves it.
                Some(At::Up(p)) => {
                    p.min == score
                        && model
                            .feed(feed)
                            .iter()
                            .filter(|q| q.score == score)
                            .filter(|q| q.id.to_string() < post.id.to_string())
                            .count()
                            < p.offset as usize
                }
                None => false,
            };
            if moved {
                let s = model.scrolls[slot].as_mut().expect("checked");
                s.disturbed.insert(score);
            }
        }
        if let Some(l) = self.listener.as_mut() {
            let home = l.feed();
            // It enters the home above anything it has held
            // since the stream opened (a stream sends what
            // enters above its position).
            if self.model.holds(home, a) {
                if above((score, post.id.0), l.high) {
                    l.expected.insert(post.id.0);
                }
                l.held((score, post.id.0));
            }
            // A post whose Redis update was deferred enters the
            // home when its job runs.
            if self.model.holds(home, a) && deferred {
                l.deferred.insert(post.id.0);
            }
        }
        self.model.posts.push(MPost {
            id: post.id.0,
            author: a,
            score,
            deleted: false,
            key,
        });
        Ok(())
    }
    async fn claim(&mut self, worker: u8, pick: i8) -> Outcome {
        let w = worker as usize % 2;
        if self.workers[w].is_none() {
            self.workers[w] = self
                .engine()
                .fanout()
                .claim(i64::from(pick))
                .await
                .map_err(|e| format!("claim: {}", e.chain()))?;
            self.count_takeover(w);
        }
        Ok(())
    }

    /// Counts the job worker `w` just claimed if the other worker holds it.
    fn count_takeover(&self, w: usize) {
        if let (Some(a), Some(b)) = (&self.workers[w], &self.workers[1 - w]) {
            if a.job.id == b.job.id {
                TAKEOVERS.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    async fn follow(&mut self, who: u8, whom: u8) -> Outcome {
        let (a, b) = (who as usize % USERS, whom as usize % USERS);
        let result = self
            .engine()
            .relations()
            .follow(self.model.ids[a], self.model.ids[b])
            .await;
        let m = &self.model;
        // In the engine's order: oneself, the follower, the followee.
        let refused = if a == b {
            Some("unprocessable")
        } else if m.gone.contains(&a) {
            Some("not_found")
        } else if m.suspended.contains(&a) {
            Some("forbidden")
        } else if m.gone.contains(&b) {
            Some("not_found")
        } else if m.suspended.contains(&b)
            || m.blocks.contains(&(a, b))
            || m.blocks.contains(&(b, a))
        {
            Some("unprocessable")
        } else {
            None
        };
        if let Some(code) = refused {
            return match result {
                Err(e) if e.code() == code => Ok(()),
                other => Err(format!(
                    "a follow refused as {code} answered {:?}",
                    other.map_err(|e| e.chain())
                )),
            };
        }
        committed(result).map_err(|e| format!("follow: {}", e.chain()))?;
        if self.model.follows.insert((a, b)) {
            self.note_follower(a, b);
            let scores = self.model.scores_of(b);
            self.model.disturb(a, &scores);
            self.model.rule(b);
        }
        Ok(())
    }

    /// `who` puts `whom` in its list (made here the first time) or takes
    /// it out: the list's pages follow at once, and an exclusive list's
    /// owner's home.
    async fn list_member(&mut self, (who, whom, on): (u8, u8, bool), exclusive: bool) -> Outcome {
        let a = who as usize % USERS;
        // Mostly one it follows (or a member), else anyone.
        let known: Vec<usize> = match on {
            true => (self.model.follows.iter())
                .filter(|(f, _)| *f == a)
                .map(|(_, g)| *g)
                .collect(),
            false => (self.model.lists.get(&a))
                .map(|l| l.members.iter().copied().collect())
                .unwrap_or_default(),
        };
        let b = match known.len() {
            n if n > 0 && whom % 4 != 0 => known[whom as usize % n],
            _ => whom as usize % USERS,
        };
        if self.model.gone.contains(&a) || self.model.suspended.contains(&a) {
            return Ok(());
        }
        if !self.model.lists.contains_key(&a) {
            let input = ListInput {
                title: Some(format!("list of {a}")),
                exclusive: Some(exclusive),
                ..ListInput::default()
            };
            let made = self
                .engine()
                .lists()
                .create(self.model.ids[a], &input)
                .await;
            let made = made.map_err(|e| format!("a list: {}", e.chain()))?;
            let list = MList {
                id: made.id,
                members: BTreeSet::new(),
                exclusive,
            };
            self.model.lists.insert(a, list);
        }
        let (owner, list) = (self.model.ids[a], self.model.lists[&a].id);
        let lists = self.engine().lists();
        let result = match on {
            true => lists.add(owner, list, &[self.model.ids[b]]).await,
            false => lists.remove(owner, list, &[self.model.ids[b]]).await,
        };
        if on && !self.model.follows.contains(&(a, b)) {
            return match result {
                Err(e) if e.code() == "unprocessable" => Ok(()),
                other => Err(format!(
                    "a list member not followed answered {:?}",
                    other.map_err(|e| e.chain())
                )),
            };
        }
        committed(result).map_err(|e| format!("list member: {}", e.chain()))?;
        let l = self.model.lists.get_mut(&a).expect("made above");
        let changed = if on {
            l.members.insert(b)
        } else {
            l.members.remove(&b)
        };
        let exclusive = l.exclusive;
        if changed {
            self.model.moved(Feed::List(a), b, !on);
            if exclusive {
                self.model.moved(Feed::Home(a), b, on);
            }
        }
        Ok(())
    }

    /// `who` makes its list exclusive, or not: its members leave its home,
    /// or come back, at once.
    async fn exclusive(&mut self, who: u8, on: bool) -> Outcome {
        let a = who as usize % USERS;
        let Some(l) = self.model.lists.get(&a) else {
            return Ok(());
        };
        let input = ListInput {
            exclusive: Some(on),
            ..ListInput::default()
        };
        let result = (self.engine().lists())
            .update(self.model.ids[a], l.id, &input)
            .await
            .map(|_| ());
        committed(result).map_err(|e| format!("exclusive list: {}", e.chain()))?;
        let l = self.model.lists.get_mut(&a).expect("checked");
        if l.exclusive == on {
            return Ok(());
        }
        l.exclusive = on;
        let members: Vec<usize> = l.members.iter().copied().collect();
        for m in members {
            self.model.moved(Feed::Home(a), m, on);
        }
        Ok(())
    }

    async fn mute(&mut self, who: u8, whom: u8, on: bool) -> Outcome {
        let (a, b) = (who as usize % USERS, whom as usize % USERS);
        let result = self
            .engine()
            .relations()
            .mute(self.model.ids[a], self.model.ids[b], on)
            .await;
        let m = &self.model;
        let refused = if a == b {
            Some("unprocessable")
        } else if m.gone.contains(&a) {
            Some("not_found")
        } else if m.suspended.contains(&a) {
            Some("forbidden")
        } else if on && m.gone.contains(&b) {
            Some("not_found")
        } else {
            None
        };
        if let Some(code) = refused {
            return match result {
                Err(e) if e.code() == code => Ok(()),
                other => Err(format!(
                    "a mute refused as {code} answered {:?}",
                    other.map_err(|e| e.chain())
                )),
            };
        }
        committed(result).map_err(|e| format!("mute: {}", e.chain()))?;
        let changed = if on {
            self.model.mutes.insert((a, b))
        } else {
            self.model.mutes.remove(&(a, b))
        };
        if changed && self.model.follows.contains(&(a, b)) {
            let scores = self.model.scores_of(b);
            self.model.disturb(a, &scores);
            if on {
                for s in self.model.scrolls_of(a) {
                    s.lost.insert(b);
                }
            }
        }
        if changed && self.model.listed(a, b) {
            self.model.moved(Feed::List(a), b, on);
        }
        Ok(())
    }

    async fn block(&mut self, who: u8, whom: u8, on: bool) -> Outcome {
        let (a, b) = (who as usize % USERS, whom as usize % USERS);
        let (ia, ib) = (self.model.ids[a], self.model.ids[b]);
        if !on {
            self.engine()
                .relations()
                .unblock(ia, ib)
                .await
                .map_err(|e| format!("unblock: {}", e.chain()))?;
            self.model.blocks.remove(&(a, b));
            return Ok(());
        }
        let result = self.engine().relations().block(ia, ib).await;
        let m = &self.model;
        let refused = if a == b {
            Some("unprocessable")
        } else if m.gone.contains(&a) {
            Some("not_found")
        } else if m.suspended.contains(&a) {
            Some("forbidden")
        } else if m.gone.contains(&b) {
            Some("not_found")
        } else {
            None
        };
        if let Some(code) = refused {
            return match result {
                Err(e) if e.code() == code => Ok(()),
                other => Err(format!(
                    "a block refused as {code} answered {:?}",
                    other.map_err(|e| e.chain())
                )),
            };
        }
        committed(result).map_err(|e| format!("block: {}", e.chain()))?;
        self.model.blocks.insert((a, b));
        // The follows between them go, either way, as unfollows.
        for (f, g) in [(a, b), (b, a)] {
            if self.model.follows.remove(&(f, g)) {
                let scores = self.model.scores_of(g);
                self.model.disturb(f, &scores);
                for s in self.model.scrolls_of(f) {
                    s.lost.insert(g);
                }
                self.model.unlist(f, g);
                self.model.rule(g);
            }
        }
        Ok(())
    }

    /// The authors `reader`'s home shows now.
    fn shown_by(&self, feed: Feed) -> BTreeSet<usize> {
        (0..USERS).filter(|a| self.model.holds(feed, *a)).collect()
    }

    /// Opens a live stream of `reader`'s home, or of its `list` (the one
    /// open is checked first).
    async fn listen(&mut self, reader: usize, list: Option<ListId>) -> Outcome {
        self.check_listener().await?;
        if self.model.gone.contains(&reader) {
            return Ok(());
        }
        let instance = self.current;
        let feed = match list {
            None => Feed::Home(reader),
            Some(_) => Feed::List(reader),
        };
        let opening = opening_of(self.model.ids[reader], reader, list);
        let events = match self.hubs[instance].follow(opening, None).await {
            Ok(events) => events,
            // Redis refusing (an armed fault), or the hints not connected yet.
            Err(AppError::Unavailable { .. } | AppError::TimedOut { .. }) => return Ok(()),
            Err(e) => return Err(format!("listen: {}", e.chain())),
        };
        let initial = self.model.feed(feed).iter().map(|p| p.id).collect();
        let shown = self.shown_by(feed);
        let high = (self.model.feed(feed).into_iter().next()).map(|p| (p.score, p.id));
        self.listener = Some(Listener {
            reader,
            list,
            instance,
            events,
            initial,
            expected: BTreeSet::new(),
            touched: BTreeSet::new(),
            shown,
            seen: Vec::new(),
            last: None,
            history: Vec::new(),
            lagged: self.dirty,
            deferred: BTreeSet::new(),
            high,
            floor: None,
            opens: Vec::new(),
            resumed: Vec::new(),
            told: Vec::new(),
            followers: Vec::new(),
            ever: BTreeSet::new(),
            filters_changed: false,
            filters_told: 0,
        });
        Ok(())
    }

    /// The live stream drops and reconnects on the other instance with the
    /// id of its last event, or of the one `back` events before it.
    async fn reconnect(&mut self, back: usize) -> Outcome {
        let Some(l) = self.listener.as_mut() else {
            return Ok(());
        };
        // Let what is under way arrive, then drop.
        tokio::task::yield_now().await;
        l.pump();
        let Some(last) = l.rewind(back) else {
            return Ok(());
        };
        let instance = 1 - l.instance;
        let reader = self.model.ids[l.reader];
        let above = self
            .model
            .feed(l.feed())
            .iter()
            .filter(|p| p.score >= last.min)
            .count();
        let known = (!self.dirty).then_some(above);
        let opening = Opening {
            from: Some(last),
            ..l.opening(reader)
        };
        match self.hubs[instance].follow(opening, None).await {
            Ok(events) => {
                l.events = events;
                l.instance = instance;
                l.resumed.push((last, known));
                // (Notifications are live only: a resumed stream tells
                // those written from now; so are filter changes.)
                l.followers.clear();
                (l.filters_changed, l.filters_told) = (false, 0);
            }
            Err(AppError::Unavailable { .. } | AppError::TimedOut { .. }) => {}
            Err(AppError::NotFound(_)) => self.listener = None,
            Err(e) => return Err(format!("reconnect: {}", e.chain())),
        }
        Ok(())
    }

    /// Checks the notifications a stream sent, once every stream has read
    /// again: only on a stream that asked for them, in order, each once,
    /// each of a follow made while a stream was open; and every follow
    /// since it last opened, unless the reader is hidden from its
    /// follower by then (suspended, deleted, blocked either way, muted).
    fn check_told(&self, l: &Listener, filters_told: usize) -> Outcome {
        let r = l.reader;
        let wants = l.opening(self.model.ids[r]).own_events;
        if !wants && !l.told.is_empty() {
            return Err(format!("stream of {r}: notifications it did not ask for"));
        }
        if !wants && l.filters_told > 0 {
            return Err(format!("stream of {r}: filter changes it did not ask for"));
        }
        if wants && l.filters_changed && filters_told == 0 && !self.model.suspended.contains(&r) {
            return Err(format!(
                "stream of {r}: its filters changed and it never said so"
            ));
        }
        if l.told.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(format!(
                "stream of {r}: notifications out of order or twice: {:?}",
                l.told
            ));
        }
        TOLD.fetch_add(l.told.len(), Ordering::Relaxed);
        let index_of = |account: i64| self.model.ids.iter().position(|id| id.0 == account);
        let told: BTreeSet<usize> = l.told.iter().filter_map(|t| index_of(t.1)).collect();
        if told.len() != l.told.iter().map(|t| t.1).collect::<BTreeSet<_>>().len()
            || !told.is_subset(&l.ever)
        {
            return Err(format!(
                "stream of {r}: notifications from {:?}, followed only by {:?}",
                l.told, l.ever
            ));
        }
        let m = &self.model;
        let hidden = |a: usize| {
            m.suspended.contains(&r)
                || m.gone.contains(&a)
                || m.suspended.contains(&a)
                || m.blocks.contains(&(a, r))
                || m.blocks.contains(&(r, a))
                || m.mutes.contains(&(r, a))
        };
        for &a in l.followers.iter().filter(|a| wants && !hidden(**a)) {
            if !told.contains(&a) {
                return Err(format!(
                    "stream of {r}: user {a} followed it and was never told (told {:?})",
                    l.told
                ));
            }
        }
        Ok(())
    }

    /// The listened reader adds a filter, or removes every filter of its.
    async fn filter_listened(&mut self, add: bool) -> Outcome {
        let Some(r) = self.listener.as_ref().map(|l| l.reader) else {
            return Ok(());
        };
        let user = self.model.ids[r];
        // (Its hint may be lost to a fault: then only a later read tells.)
        let faulty = self.engine().redis().faults().armed();
        let filters = self.engine().filters();
        let changed = if add {
            let input = feed_service::engine::filters::FilterInput {
                title: Some("model".into()),
                contexts: Some(vec!["home".into()]),
                ..Default::default()
            };
            let word = feed_service::store::pg::KeywordOp::Add {
                keyword: "never-posted".into(),
                whole_word: true,
            };
            match filters.create(user, &input, &[word]).await {
                Ok(_) => true,
                Err(AppError::NotFound(_) | AppError::Forbidden(_)) => false,
                Err(e) => return Err(format!("a filter: {}", e.chain())),
            }
        } else {
            let all = match filters.all(user).await {
                Ok(all) => all,
                Err(AppError::NotFound(_) | AppError::Forbidden(_)) => return Ok(()),
                Err(e) => return Err(format!("the filters: {}", e.chain())),
            };
            for (f, _) in &all {
                filters.delete(user, f.id).await.map_err(|e| e.chain())?;
            }
            !all.is_empty()
        };
        if let Some(l) = self.listener.as_mut() {
            l.filters_changed |= changed && !faulty;
        }
        Ok(())
    }

    /// Notes that `a` began to follow `b`: a new notification of `b`.
    fn note_follower(&mut self, a: usize, b: usize) {
        if let Some(l) = self.listener.as_mut().filter(|l| l.reader == b) {
            l.followers.push(a);
            l.ever.insert(a);
        }
    }

    /// Notes the authors whose posts joined or left the open stream's home
    /// with the last operation. (The stream's position names its entry:
    /// entries joining or leaving beside it do not move it.)
    fn note_listener(&mut self) {
        let Some(feed) = self.listener.as_ref().map(|l| l.feed()) else {
            return;
        };
        let now = self.shown_by(feed);
        let l = self.listener.as_mut().expect("checked");
        let changed: Vec<usize> = l.shown.symmetric_difference(&now).copied().collect();
        // Posts joining the home may be sent, and raise the position.
        let joined: Vec<(i64, i64)> = self
            .model
            .posts
            .iter()
            .filter(|p| !p.deleted && now.contains(&p.author) && !l.shown.contains(&p.author))
            .map(|p| (p.score, p.id))
            .collect();
        for entry in joined {
            l.held(entry);
        }
        l.touched.extend(changed);
        l.shown = now;
    }

    /// Checks the open stream, then closes it: once every stream has read
    /// again and nothing more comes, it sent every post it had to (each the
    /// newest of the home when published, still there, its author's posts
    /// in the home throughout), none it had when it opened, none twice.
    async fn check_listener(&mut self) -> Outcome {
        let Some(mut l) = self.listener.take() else {
            return Ok(());
        };
        for e in &self.engines {
            e.redis().faults().disarm();
        }
        // A filter change is told by its hint alone (the reads below tell
        // every stream): what is under way arrives first.
        if l.filters_changed && l.filters_told == 0 {
            while let Ok(Some(event)) =
                tokio::time::timeout(Duration::from_millis(500), l.events.recv()).await
            {
                l.take(event);
            }
        }
        let told_by_hint = l.filters_told;
        self.hubs[l.instance].refresh_all();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            match tokio::time::timeout(Duration::from_millis(200), l.events.recv()).await {
                Ok(Some(event)) => l.take(event),
                _ => break,
            }
        }
        STREAMS.fetch_add(1, Ordering::Relaxed);
        if l.list.is_some() {
            LIST_STREAMS.fetch_add(1, Ordering::Relaxed);
        }
        let mut once = BTreeSet::new();
        for id in &l.seen {
            // Only what the home showed, at some time while it was open.
            let author = self
                .model
                .posts
                .iter()
                .find(|p| p.id == *id)
                .map(|p| p.author);
            if author.is_none_or(|a| !l.shown.contains(&a) && !l.touched.contains(&a)) {
                return Err(format!(
                    "stream of {}: post {id} of user {author:?}, whom the home never showed",
                    l.reader
                ));
            }
            if !once.insert(*id) {
                return Err(format!(
                    "stream of {}: post {id} sent twice: {:?}",
                    l.reader, l.seen
                ));
            }
            if l.initial.contains(id) && !l.lagged {
                return Err(format!(
                    "stream of {}: post {id} was there at the start",
                    l.reader
                ));
            }
        }
        self.check_told(&l, told_by_hint)?;
        // A gap only where the client was more than the replay behind (the
        // home then held more posts above its position; the posts of the
        // position's own millisecond are all counted, so that a gap the
        // engine had reason for is never taken for a fault).
        if let [Some(gap), ..] = l.opens.as_slice() {
            return Err(format!("stream of {}: opened with a gap {gap:?}", l.reader));
        }
        for (resume, gap) in l.opens.iter().skip(1).enumerate() {
            let Some(gap) = gap else { continue };
            let Some((from, above)) = l.resumed.get(resume) else {
                return Err(format!(
                    "stream of {}: a gap {gap:?} of no resume",
                    l.reader
                ));
            };
            if from != gap {
                return Err(format!(
                    "stream of {}: resumed from {from:?}, its gap names {gap:?}",
                    l.reader
                ));
            }
            if above.is_some_and(|n| n < STREAM_REPLAY) && !l.lagged {
                return Err(format!(
                    "stream of {}: a gap from {gap:?} with only {above:?} posts above it",
                    l.reader,
                ));
            }
        }
        if self.dirty {
            return Ok(());
        }
        let floor = l.floor;
        for id in &l.expected {
            let Some(p) = self.model.posts.iter().find(|p| p.id == *id) else {
                continue;
            };
            let kept = !p.deleted
                && !l.deferred.contains(&p.id)
                && floor.is_none_or(|f| p.score > f)
                && !l.touched.contains(&p.author)
                && self.model.holds(l.feed(), p.author);
            if kept && !once.contains(id) {
                return Err(format!(
                    "stream of {}: post {id} of user {} never came (sent {:?})",
                    l.reader, p.author, l.seen
                ));
            }
        }
        Ok(())
    }

    async fn follow_many(&mut self, who: u8, whom: &[u8]) -> Outcome {
        let a = who as usize % USERS;
        let targets: Vec<usize> = whom.iter().map(|w| *w as usize % USERS).collect();
        let ids: Vec<UserId> = targets.iter().map(|t| self.model.ids[*t]).collect();
        let result = self
            .engine()
            .relations()
            .follow_many(self.model.ids[a], &ids)
            .await;
        let m = &self.model;
        let refused = if m.gone.contains(&a) {
            Some("not_found")
        } else if m.suspended.contains(&a) {
            Some("forbidden")
        } else {
            None
        };
        if let Some(code) = refused {
            return match result {
                Err(e) if e.code() == code => Ok(()),
                other => Err(format!(
                    "a follow of many refused as {code} answered {:?}",
                    other.map_err(|e| e.chain())
                )),
            };
        }
        // What it should answer, author by author in the order given.
        let (mut new, mut already, mut skipped) = (vec![], vec![], vec![]);
        let mut seen = BTreeSet::new();
        for &b in &targets {
            if !seen.insert(b) {
                continue;
            }
            let id = m.ids[b];
            if b == a
                || m.gone.contains(&b)
                || m.suspended.contains(&b)
                || m.blocks.contains(&(a, b))
                || m.blocks.contains(&(b, a))
            {
                skipped.push(id);
            } else if m.follows.contains(&(a, b)) {
                already.push(id);
            } else {
                new.push(b);
            }
        }
        match result {
            Ok(got) => {
                let want: Vec<UserId> = new.iter().map(|b| m.ids[*b]).collect();
                if (
                    got.followed.clone(),
                    got.already.clone(),
                    got.skipped.clone(),
                ) != (want.clone(), already.clone(), skipped.clone())
                {
                    return Err(format!(
                        "a follow of many answered {got:?}, want followed {want:?} already \
                         {already:?} skipped {skipped:?}"
                    ));
                }
            }
            Err(AppError::Unavailable { what: "Redis", .. }) => {}
            Err(e) => return Err(format!("follow many: {}", e.chain())),
        }
        for b in new {
            self.model.follows.insert((a, b));
            self.note_follower(a, b);
            let scores = self.model.scores_of(b);
            self.model.disturb(a, &scores);
            self.model.rule(b);
        }
        Ok(())
    }

    async fn suspend(&mut self, who: u8, on: bool) -> Outcome {
        let u = who as usize % USERS;
        let result = self
            .engine()
            .accounts()
            .suspend(self.model.ids[u], on)
            .await;
        if self.model.gone.contains(&u) {
            return match result {
                Err(AppError::NotFound(_)) => Ok(()),
                other => Err(format!(
                    "a suspension of a deleted account answered {:?}",
                    other.map(|u| u.status).map_err(|e| e.chain())
                )),
            };
        }
        match result {
            Ok(_) | Err(AppError::Unavailable { what: "Redis", .. }) => {}
            Err(e) => return Err(format!("suspend: {}", e.chain())),
        }
        if on == self.model.suspended.contains(&u) {
            return Ok(());
        }
        // Its posts leave (or join) every feed that holds it.
        let scores = self.model.scores_of(u);
        let mut after = self.model.suspended.clone();
        if on {
            after.insert(u);
        } else {
            after.remove(&u);
        }
        for slot in 0..2 {
            let Some(feed) = self.model.scrolls[slot].as_ref().map(|s| s.feed) else {
                continue;
            };
            let changed = self.model.holds(feed, u) || self.model.holds_with(&after, feed, u);
            if changed {
                let s = self.model.scrolls[slot].as_mut().expect("checked");
                if let Some(at) = s.score() {
                    if scores.contains(&at) {
                        s.disturbed.insert(at);
                    }
                }
                if on {
                    s.lost.insert(u);
                }
            }
        }
        self.model.suspended = after;
        Ok(())
    }

    /// An account deleted: its posts leave every feed at once; its purge
    /// then runs (drained here) and removes its follows either way.
    async fn remove(&mut self, who: u8) -> Outcome {
        let u = who as usize % USERS;
        let result = self
            .engine()
            .accounts()
            .delete_account(self.model.ids[u])
            .await;
        match result {
            Ok(_) | Err(AppError::Unavailable { what: "Redis", .. }) => {}
            Err(e) => return Err(format!("delete account: {}", e.chain())),
        }
        if !self.model.gone.insert(u) {
            return Ok(());
        }
        let scores = self.model.scores_of(u);
        for slot in 0..2 {
            let Some(s) = self.model.scrolls[slot].as_mut() else {
                continue;
            };
            if s.feed == Feed::Home(u) || s.feed == Feed::Author(u) || s.feed == Feed::List(u) {
                // Its own pages are not found any more.
                self.model.scrolls[slot] = None;
                continue;
            }
            if let Some(at) = s.score() {
                if scores.contains(&at) {
                    s.disturbed.insert(at);
                }
            }
            s.lost.insert(u);
        }
        let edges: Vec<(usize, usize)> = self
            .model
            .follows
            .iter()
            .filter(|(f, g)| *f == u || *g == u)
            .copied()
            .collect();
        for (f, g) in edges {
            self.model.follows.remove(&(f, g));
            if f == u {
                self.model.rule(g);
            }
        }
        self.model.mutes.retain(|(a, b)| *a != u && *b != u);
        self.model.blocks.retain(|(a, b)| *a != u && *b != u);
        self.model.lists.remove(&u);
        for l in self.model.lists.values_mut() {
            l.members.remove(&u);
        }
        self.model.suspended.remove(&u);
        self.drain().await
    }

    async fn unfollow(&mut self, who: u8, whom: u8) -> Outcome {
        let (a, b) = (who as usize % USERS, whom as usize % USERS);
        let result = self
            .engine()
            .relations()
            .unfollow(self.model.ids[a], self.model.ids[b])
            .await;
        committed(result).map_err(|e| format!("unfollow: {}", e.chain()))?;
        if self.model.follows.remove(&(a, b)) {
            let scores = self.model.scores_of(b);
            self.model.disturb(a, &scores);
            for s in self.model.scrolls_of(a) {
                s.lost.insert(b);
            }
            self.model.unlist(a, b);
            self.model.rule(b);
        }
        Ok(())
    }

    async fn settings(&mut self, patch: SettingsPatch) -> Outcome {
        self.engine()
            .update_settings(&patch)
            .await
            .map_err(|e| format!("settings: {}", e.chain()))?;
        // The other instance reloads them (within a second in a service).
        self.engines[1 - self.current]
            .refresh_settings()
            .await
            .map_err(|e| format!("settings: {}", e.chain()))
    }

    /// The next page of the scroll in `slot`, checked against the model.
    /// A page bounded by an entry, checked against the model's home.
    async fn between(&mut self, reader: u8, pick: u16, how: u8, size: u32) -> Outcome {
        let r = reader as usize % USERS;
        if self.model.gone.contains(&r) {
            return Ok(());
        }
        // Bounds are any of the home's entries, deleted ones too.
        let mut entries: Vec<&MPost> = (self.model.posts.iter())
            .filter(|p| self.model.holds(Feed::Home(r), p.author))
            .collect();
        if entries.is_empty() {
            return Ok(());
        }
        entries.sort_by(|a, b| newer_first(a, b));
        let bound = entries[pick as usize % entries.len()];
        let bound = Entry::new(bound.score, PostId(bound.id));
        let bounds = match how % 3 {
            0 => Bounds {
                older_than: Some(bound),
                ..Default::default()
            },
            how => Bounds {
                newer_than: Some(bound),
                closest: how == 1,
                ..Default::default()
            },
        };
        let got: Vec<i64> = self
            .engine()
            .reads()
            .page_between(EngineFeed::Home(self.model.ids[r]), bounds, size)
            .await
            .map_err(|e| format!("page of {r}'s home within {bounds:?}: {}", e.chain()))?
            .iter()
            .map(|p| p.id.0)
            .collect();
        PAGES.fetch_add(1, Ordering::Relaxed);
        if self.dirty {
            return Ok(());
        }
        // The model's answer: its live entries strictly past the bound.
        let live = self.model.feed(Feed::Home(r));
        // As `newer_first(p, bound)`: Greater when p is older.
        let position = |p: &MPost| {
            bound
                .score
                .cmp(&p.score)
                .then_with(|| bound.id.to_string().cmp(&p.id.to_string()))
        };
        let want: Vec<i64> = match how % 3 {
            0 => live
                .iter()
                .filter(|p| position(p) == std::cmp::Ordering::Greater)
                .take(size as usize)
                .map(|p| p.id)
                .collect(),
            1 => {
                let newer: Vec<i64> = live
                    .iter()
                    .filter(|p| position(p) == std::cmp::Ordering::Less)
                    .map(|p| p.id)
                    .collect();
                newer[newer.len().saturating_sub(size as usize)..].to_vec()
            }
            _ => live
                .iter()
                .filter(|p| position(p) == std::cmp::Ordering::Less)
                .take(size as usize)
                .map(|p| p.id)
                .collect(),
        };
        if got != want {
            return Err(format!(
                "page of {r}'s home within {bounds:?}:\n  got  {got:?}\n  want {want:?}"
            ));
        }
        Ok(())
    }

    async fn page(&mut self, slot: usize, size: u32, cold: bool) -> Outcome {
        let Some(scroll) = self.model.scrolls[slot].as_ref() else {
            return Ok(());
        };
        let feed = scroll.feed;
        // A cursor goes back through the same validation a client's does.
        // A client holding counts sends no id.
        let named = |id: Option<PostId>| id.filter(|_| scroll.named).map(|id| id.0);
        let req = match scroll.at {
            None if !scroll.seen.is_empty() => return Ok(()),
            None => Ok(PageRequest::first(size)),
            Some(At::Down(c)) => PageRequest::parse(
                Some(c.max),
                None,
                Some(i64::from(c.offset)),
                named(c.id),
                Some(i64::from(size)),
            ),
            Some(At::Up(p)) => PageRequest::parse(
                None,
                Some(p.min),
                Some(i64::from(p.offset)),
                named(p.id),
                Some(i64::from(size)),
            ),
        }
        .map_err(|e| format!("a cursor the service gave is refused: {e}"))?;
        let page = match (feed, cold) {
            (Feed::Home(reader), false) => {
                self.engine()
                    .reads()
                    .home_page(self.model.ids[reader], req)
                    .await
            }
            (Feed::Author(author), false) => {
                self.engine()
                    .reads()
                    .author_page(self.model.ids[author], req)
                    .await
            }
            (Feed::Home(reader), true) => {
                let scope = self.engine().reads().home_scope(self.model.ids[reader]);
                self.engine().reads().page_from_pg(scope, &req).await
            }
            (Feed::Author(author), true) => {
                let scope = Scope::Author(self.model.ids[author]);
                self.engine().reads().page_from_pg(scope, &req).await
            }
            (Feed::List(owner), false) => {
                let list = self.model.lists[&owner].id;
                (self.engine().lists())
                    .page(self.model.ids[owner], list, req)
                    .await
            }
            (Feed::List(owner), true) => {
                let list = self.model.lists[&owner].id;
                let scope = Scope::List {
                    owner: self.model.ids[owner],
                    list,
                };
                self.engine().reads().page_from_pg(scope, &req).await
            }
        };
        let Page {
            items,
            next,
            prev,
            marks,
        } = page.map_err(|e| format!("page of {feed:?} {req:?}: {}", e.chain()))?;
        PAGES.fetch_add(1, Ordering::Relaxed);
        let got: Vec<i64> = items.iter().map(|p| p.id.0).collect();
        let (want, want_marks) = self.model.page(feed, &req);
        if std::env::var("MODEL_TRACE").is_ok() {
            eprintln!("page {feed:?} {req:?} got {got:?} {next:?} {prev:?} want {want:?}");
        }
        let up = req.min.is_some();
        if !self.dirty {
            match feed {
                Feed::List(_) => _ = LIST_PAGES.fetch_add(1, Ordering::Relaxed),
                Feed::Home(r)
                    if self.model.lists.get(&r).is_some_and(|l| {
                        l.exclusive
                            && l.members
                                .iter()
                                .any(|m| self.model.follows.contains(&(r, *m)))
                    }) =>
                {
                    _ = APART_PAGES.fetch_add(1, Ordering::Relaxed)
                }
                _ => {}
            }
            if (got.clone(), next, prev) != want || marks != want_marks {
                return Err(format!(
                    "page of {feed:?} {req:?}:\n  got  {got:?} next {next:?} prev {prev:?} \
                     marks {marks:?}\n  want {:?} next {:?} prev {:?} marks {want_marks:?}",
                    want.0, want.1, want.2
                ));
            }
            for p in &items {
                let author = self.model.ids.iter().position(|id| *id == p.author_id);
                let deleted = self.model.posts.iter().any(|m| m.id == p.id.0 && m.deleted);
                if deleted || !author.is_some_and(|a| self.model.holds(feed, a)) {
                    return Err(format!("page of {feed:?} shows post {}", p.id));
                }
            }
        }
        let scroll = self.model.scrolls[slot].as_mut().expect("checked above");
        // The records changed and Redis lags: only the cursor goes on.
        scroll.unchecked |= self.dirty;
        let shown = items.iter().map(|p| (p.id.0, p.created_at_ms));
        if up {
            // A page read up goes above the ones before.
            scroll.seen.splice(0..0, shown);
        } else {
            scroll.seen.extend(shown);
        }
        scroll.last_prev = Some(prev);
        // A scroll down ends with no `next`, one up with an empty page.
        scroll.at = match (up, next) {
            (false, Some(c)) => Some(At::Down(c)),
            (true, _) if !items.is_empty() => Some(At::Up(prev)),
            _ => None,
        };
        if scroll.at.is_none() {
            if let Some(done) = self.model.scrolls[slot].take() {
                if !done.unchecked {
                    check_scroll(&self.model, &done)?;
                }
            }
        }
        Ok(())
    }

    /// The scroll in `slot` turns to refresh: up from the `prev` of its
    /// last page (a client back at the top of what it holds), or, with no
    /// scroll there, from the bottom of `reader`'s home feed.
    async fn rise(&mut self, slot: usize, reader: u8, size: u32) -> Outcome {
        let (feed, from) = match self.model.scrolls[slot].as_ref() {
            Some(s) => match s.last_prev {
                Some(p) if s.named => (s.feed, p),
                Some(p) => (s.feed, Prev { id: None, ..p }),
                None => return Ok(()),
            },
            None if self.model.gone.contains(&(reader as usize % USERS)) => return Ok(()),
            None => (Feed::Home(reader as usize % USERS), Prev::BOTTOM),
        };
        let initial = self.model.above(feed, from);
        let mut scroll = Scroll::new(slot, feed, initial, self.dirty);
        scroll.at = Some(At::Up(from));
        self.model.scrolls[slot] = Some(scroll);
        self.page(slot, size, false).await
    }

    async fn all_keys(&mut self) -> Result<Vec<String>, String> {
        // SCAN (of every master of a cluster), not KEYS: the Redis may hold
        // other keys by the million, and KEYS would stall every other client
        // while it walks them.
        self.redis
            .scan(&self.redis.keys().pattern())
            .await
            .map_err(|e| e.chain())
    }

    /// Leases of jobs that no live worker holds run out.
    async fn expire_leases(&mut self) -> Outcome {
        let held: Vec<i64> = self.workers.iter().flatten().map(|l| l.job.id.0).collect();
        diesel::sql_query(
            "UPDATE fanout_jobs SET lease_until = '-infinity' \
             WHERE lease_until > now() AND NOT (id = ANY($1))",
        )
        .bind::<diesel::sql_types::Array<BigInt>, _>(held)
        .execute(&mut self.pg)
        .await
        .map_err(fail("expiring leases"))?;
        Ok(())
    }

    /// Runs every job no model worker holds to its end, expiring the
    /// leases of failed ones, until none can be claimed (what is left waits
    /// behind a job a model worker holds).
    async fn drain(&mut self) -> Outcome {
        let mut expired = false;
        for _ in 0..2000 {
            let claimed = self
                .engine()
                .fanout()
                .claim(0)
                .await
                .map_err(|e| format!("claim: {}", e.chain()))?;
            let Some(mut lease) = claimed else {
                if expired {
                    if self.workers.iter().all(Option::is_none) && self.jobs_left().await? == 0 {
                        self.dirty = false;
                    }
                    return Ok(());
                }
                self.expire_leases().await?;
                expired = true;
                continue;
            };
            expired = false;
            loop {
                match self.engine().fanout().step(&mut lease, true).await {
                    Ok(Step::More) => {}
                    Ok(Step::Done) => break,
                    Err(e) => {
                        self.engine().fanout().fail(lease, &e).await;
                        break;
                    }
                }
            }
        }
        Err("the fan-out does not drain".into())
    }

    /// Writes whose Redis update was deferred to its job, on either engine.
    fn deferred_total(&self) -> u64 {
        self.engines
            .iter()
            .map(|e| Stats::get(&e.stats().deferred_writes))
            .sum()
    }

    /// Counts the writes whose Redis update was deferred since the last
    /// call; any makes the world dirty until the jobs have all run.
    fn note_deferred(&mut self) {
        let total = self.deferred_total();
        if total > self.deferred {
            self.deferred = total;
            self.dirty = true;
        }
    }

    /// Jobs not parked as dead, held or not.
    async fn jobs_left(&mut self) -> Result<i64, String> {
        #[derive(diesel::QueryableByName)]
        struct N {
            #[diesel(sql_type = BigInt)]
            n: i64,
        }
        Ok(
            diesel::sql_query("SELECT count(*) AS n FROM fanout_jobs WHERE NOT dead")
                .get_result::<N>(&mut self.pg)
                .await
                .map_err(fail("counting jobs"))?
                .n,
        )
    }

    async fn pending_unheld(&mut self) -> Result<i64, String> {
        #[derive(diesel::QueryableByName)]
        struct N {
            #[diesel(sql_type = BigInt)]
            n: i64,
        }
        let held: Vec<i64> = self.workers.iter().flatten().map(|l| l.job.id.0).collect();
        Ok(diesel::sql_query(
            "SELECT count(*) AS n FROM fanout_jobs WHERE NOT dead AND NOT (id = ANY($1))",
        )
        .bind::<diesel::sql_types::Array<BigInt>, _>(held)
        .get_result::<N>(&mut self.pg)
        .await
        .map_err(fail("counting jobs"))?
        .n)
    }

    /// The end of a case: faults off, the workers finish, every job
    /// drains; then every scroll, feed, inbox and outbox is checked.
    async fn finish(&mut self, size: u32) -> Outcome {
        for e in &self.engines {
            e.redis().faults().disarm();
        }
        for slot in 0..2 {
            for _ in 0..1000 {
                if self.model.scrolls[slot].is_none() {
                    break;
                }
                self.page(slot, size, false).await?;
            }
        }
        for w in 0..2 {
            if let Some(mut lease) = self.workers[w].take() {
                loop {
                    match self.engines[w].fanout().step(&mut lease, true).await {
                        Ok(Step::More) => {}
                        Ok(Step::Done) => break,
                        Err(e) => {
                            self.engines[w].fanout().fail(lease, &e).await;
                            break;
                        }
                    }
                }
            }
        }
        self.drain().await?;
        if self.pending_unheld().await? != 0 {
            return Err("jobs left after draining".into());
        }
        let dead = diesel::sql_query("SELECT id FROM fanout_jobs WHERE dead")
            .execute(&mut self.pg)
            .await
            .map_err(fail("dead jobs"))?;
        if dead > 0 {
            return Err(format!("{dead} dead jobs"));
        }
        for u in 0..USERS {
            if self.model.gone.contains(&u) {
                match self.engine().user(self.model.ids[u]).await {
                    Err(AppError::NotFound(_)) => continue,
                    other => {
                        return Err(format!(
                            "deleted user {u} answered {:?}",
                            other.map_err(|e| e.chain())
                        ))
                    }
                }
            }
            let user = self
                .engine()
                .user(self.model.ids[u])
                .await
                .map_err(|e| e.chain())?;
            if user.big_v != self.model.big_v[u] {
                return Err(format!(
                    "user {u} big_v {} with {} followers, want {}",
                    user.big_v,
                    self.model.followers(u),
                    self.model.big_v[u]
                ));
            }
        }
        self.check_feeds().await?;
        self.check_listener().await?;
        let readers: Vec<usize> = (0..USERS)
            .filter(|r| !self.model.gone.contains(r))
            .collect();
        for r in readers {
            let feed = Feed::Home(r);
            let initial = self.model.feed(feed).iter().map(|p| p.id).collect();
            self.model.scrolls[0] = Some(Scroll::new(1, feed, initial, false));
            for _ in 0..1000 {
                if self.model.scrolls[0].is_none() {
                    break;
                }
                self.page(0, size, false).await?;
            }
        }
        Ok(())
    }

    /// Prints user `u`'s inbox as Redis holds it after operation `i`.
    async fn watch(&self, i: usize, u: usize) -> Outcome {
        let mut conn = self.redis.connection().await.map_err(|e| e.chain())?;
        let key = self.redis.keys().inbox(self.model.ids[u]);
        let list = crate::helpers::feed_list(&mut conn, &key).await;
        eprintln!("WATCH inbox of {u} after op {i}: {list:?}");
        Ok(())
    }

    /// Every inbox and outbox in Redis keeps its contract once the jobs are
    /// done: nothing below its floor, and above it every entry it should
    /// hold (an outbox: its author's live posts; an inbox: the live posts
    /// of every followed author that is not big-V), and no deleted post.
    async fn check_feeds(&mut self) -> Outcome {
        let mut conn = self.redis.connection().await.map_err(|e| e.chain())?;
        let keys = self.redis.keys().clone();
        for u in 0..USERS {
            let id = self.model.ids[u];
            if self.model.gone.contains(&u) {
                // Nothing of a deleted account is left: no key, no post.
                let mut owned = vec![
                    keys.inbox(id),
                    keys.outbox(id),
                    keys.following(id),
                    keys.followees(id),
                    keys.active_fans(id),
                    keys.active_mark(id),
                ];
                owned.extend(
                    self.model
                        .posts
                        .iter()
                        .filter(|p| p.author == u)
                        .map(|p| keys.post(PostId(p.id))),
                );
                for key in owned {
                    let n: i64 = redis::cmd("EXISTS")
                        .arg(&key)
                        .query_async(&mut conn)
                        .await
                        .map_err(|e| format!("{key}: {e}"))?;
                    if n != 0 {
                        return Err(format!("{key} of deleted user {u} is left"));
                    }
                }
                continue;
            }
            for (key, inbox) in [(keys.inbox(id), true), (keys.outbox(id), false)] {
                let Some((entries, floor)) = crate::helpers::feed_list(&mut conn, &key).await
                else {
                    continue;
                };
                let floor = match floor.as_str() {
                    "inf" => continue,
                    "-inf" => f64::NEG_INFINITY,
                    n => n
                        .parse::<f64>()
                        .map_err(|e| format!("{key}: floor {n}: {e}"))?,
                };
                let in_order = entries.windows(2).all(|w| {
                    feed_service::types::feed_order(&w[0], &w[1]) == std::cmp::Ordering::Less
                });
                if !in_order || entries.iter().any(|e| (e.score as f64) < floor) {
                    return Err(format!("{key}: entries out of order or below the floor"));
                }
                let held: BTreeSet<i64> = entries.iter().map(|e| e.id.0).collect();
                for p in &self.model.posts {
                    if p.deleted {
                        if held.contains(&p.id) {
                            return Err(format!(
                                "{key} still holds post {} (at {}) of user {}, deleted",
                                p.id, p.score, p.author
                            ));
                        }
                        continue;
                    }
                    // An inbox holds the posts pushed to its reader: of the
                    // authors it follows, and its own (whatever its home
                    // shows), unless pulled.
                    let owed = if inbox {
                        (self.model.follows.contains(&(u, p.author)) || p.author == u)
                            && !self.model.big_v[p.author]
                    } else {
                        p.author == u
                    };
                    if owed && (p.score as f64) > floor && !held.contains(&p.id) {
                        return Err(format!(
                            "{key} (floor {floor}) lacks post {} (at {}) of user {}; it holds {:?}",
                            p.id, p.score, p.author, held
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

async fn run_case(settings: &Settings, case: &Case) -> Outcome {
    let mut world = World::start(settings).await?;
    let (t, inbox, outbox) = case.settings;
    world.apply(&Op::OwnPosts(case.own)).await?;
    world.apply(&Op::Thresholds(t)).await?;
    world.apply(&Op::Caps { inbox, outbox }).await?;
    for (who, whom) in &case.follows {
        if who != whom {
            world.follow(*who, *whom).await?;
        }
    }
    for (i, op) in case.ops.iter().enumerate() {
        if op.kind() & case.without != 0 {
            continue;
        }
        world.current = (case.instances >> (i % 64)) as usize & 1;
        if std::env::var("MODEL_TRACE").is_ok() {
            eprintln!("TRACE op {i} {op:?} ids {:?}", world.model.ids);
        }
        world
            .apply(op)
            .await
            .map_err(|e| format!("at op {i} {op:?}: {e}"))?;
        world.note_deferred();
        world.note_listener();
        if let Some(u) = env_u64("MODEL_WATCH") {
            world.watch(i, u as usize % USERS).await?;
        }
    }
    let size = SIZES[case.ops.len() % SIZES.len()];
    world
        .finish(size)
        .await
        .map_err(|e| format!("at the end: {e}"))
}

/// A write's answer: done, or committed with its Redis update left to its
/// job (503), which the model records as done.
fn committed(result: Result<(), AppError>) -> Result<(), AppError> {
    match result {
        Err(AppError::Unavailable { what: "Redis", .. }) => Ok(()),
        other => other,
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Runs `cases` cases from `seed`; a failure is shrunk and reported.
fn explore(rt: &tokio::runtime::Runtime, settings: &Settings, seed: u64, cases: u32) {
    let mut bytes = [0u8; 32];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (seed >> ((i % 8) * 8)) as u8 ^ i as u8;
    }
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_time: 180_000,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    let result = runner.run(&case(), |case| {
        rt.block_on(run_case(settings, &case))
            .map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, minimal)) => panic!(
            "the engine departs from the model (seed {seed}):\n{reason}\n\nminimal failing case:\n{minimal:#?}"
        ),
        Err(TestError::Abort(reason)) => panic!("model test aborted (seed {seed}): {reason}"),
    }
}

#[test]
fn the_engine_behaves_like_the_model() {
    // A case's operations make a deep future, and shrinking a deep
    // strategy tree: more stack than a test thread's.
    std::thread::Builder::new()
        .name("model".into())
        .stack_size(64 << 20)
        .spawn(run_the_model)
        .expect("the model's thread starts")
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
}

fn run_the_model() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut settings = test_settings();
    // Tiny batches: a job of two dozen followers takes several.
    settings.feed.fanout_batch_size = 3;
    settings.database.pool_size = 4;
    // Streams read one at a time: every read waits its turn.
    settings.feed.stream_reads = 1;
    // A resume replays at most this many posts: further back, the stream
    // starts below them and says where its gap is.
    settings.feed.stream_replay = STREAM_REPLAY;
    // Every case connects anew: under the whole suite's load a connection
    // has taken over 2 s to open, a wait that is the machine's, not the
    // engine's (the PostgreSQL outage tests cover the timeout itself).
    settings.database.pool_timeout_ms = 10_000;
    let _cleanup = Cleanup::of(&settings);
    rt.block_on(feed_service::store::pg::ensure_database(
        settings.database.url.expose_secret(),
    ))
    .expect("model database");
    match env_u64("MODEL_SOAK_SECS") {
        Some(secs) => {
            let deadline = Instant::now() + Duration::from_secs(secs);
            let mut rounds = 0u64;
            while Instant::now() < deadline {
                let seed = rand_seed();
                eprintln!("model soak: round {rounds}, seed {seed}");
                explore(&rt, &settings, seed, 16);
                rounds += 1;
            }
            eprintln!(
                "model soak: {rounds} rounds of 16 cases, {} pages ({} of lists, {} of homes \
                 with an exclusive list) and {} live streams ({} of lists) checked \
                 ({} resumes past the replay, {} notifications), {} jobs taken over from a quiet instance, no \
                 departure ({} cluster calls resent after a wrong slot map, {} reads resent after \
                 their link was cut)",
                AtomicUsize::load(&PAGES, Ordering::Relaxed),
                AtomicUsize::load(&LIST_PAGES, Ordering::Relaxed),
                AtomicUsize::load(&APART_PAGES, Ordering::Relaxed),
                AtomicUsize::load(&STREAMS, Ordering::Relaxed),
                AtomicUsize::load(&LIST_STREAMS, Ordering::Relaxed),
                AtomicUsize::load(&GAPS, Ordering::Relaxed),
                AtomicUsize::load(&TOLD, Ordering::Relaxed),
                AtomicUsize::load(&TAKEOVERS, Ordering::Relaxed),
                feed_service::metrics::REDIS_RESENT.get(),
                feed_service::metrics::REDIS_LINKS_FAILED.get()
            );
            eprintln!("{}", windows_read());
        }
        None => {
            let seed = env_u64("MODEL_SEED").unwrap_or(20261130);
            let cases = env_u64("MODEL_CASES").unwrap_or(64) as u32;
            let started = Instant::now();
            explore(&rt, &settings, seed, cases);
            eprintln!(
                "model: {cases} cases from seed {seed}, {} pages ({} of lists, {} of homes with an \
                 exclusive list) and {} live streams ({} of lists) checked ({} \
                 resumes past the replay, {} notifications), {} jobs taken over from a quiet instance, {:.1} s ({} \
                 cluster calls resent after a wrong slot map, {} reads resent after their link was \
                 cut)",
                AtomicUsize::load(&PAGES, Ordering::Relaxed),
                AtomicUsize::load(&LIST_PAGES, Ordering::Relaxed),
                AtomicUsize::load(&APART_PAGES, Ordering::Relaxed),
                AtomicUsize::load(&STREAMS, Ordering::Relaxed),
                AtomicUsize::load(&LIST_STREAMS, Ordering::Relaxed),
                AtomicUsize::load(&GAPS, Ordering::Relaxed),
                AtomicUsize::load(&TOLD, Ordering::Relaxed),
                AtomicUsize::load(&TAKEOVERS, Ordering::Relaxed),
                started.elapsed().as_secs_f64(),
                feed_service::metrics::REDIS_RESENT.get(),
                feed_service::metrics::REDIS_LINKS_FAILED.get()
            );
            eprintln!("{}", windows_read());
        }
    }
}

/// How the pages of this process read their feed lists' windows.
fn windows_read() -> String {
    use feed_service::metrics::{windows_so_far, WindowRead};
    format!(
        "windows read: {} from the top, {} below a cursor at the place last read, {} searched",
        windows_so_far(WindowRead::Top),
        windows_so_far(WindowRead::Guessed),
        windows_so_far(WindowRead::Searched)
    )
}

fn rand_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}
