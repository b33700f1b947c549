//! Lua scripts over feed lists, and the contract they keep.
//!
//! The Lua is in `lua/`: a file per script and per part they share. A
//! script is its shared parts, then its own file, with the constants it
//! names (`EPOCH_MS`) filled in.
//!
//! # The layout of a feed list
//!
//! A feed (an inbox or an outbox) is a Redis LIST of *entries* in feed
//! order, newest first, ending with exactly one *sentinel*, whose value is
//! the feed's **floor**. An entry is a post's place packed in 9 bytes (11
//! for ids of 2³² and above): its score (`created_at_ms`, the post's time)
//! less [`EPOCH_MS`], in 5 bytes, then the post id, in 4 (or 6), both
//! big-endian (`layout.rs`). Feed order is the score descending, then the
//! id's decimal bytes descending, as everywhere in the service. A sentinel
//! is `-inf`, `inf` or a score in decimal (13 digits), so its length tells
//! it from an entry; it is always the last element. A list being built
//! (floor `inf`) also starts with a *mark*, `inf`, so that a window read
//! from the top sees the state whether or not it reaches the sentinel
//! (clause 6). At the cap of 1,000 an
//! entry costs Redis about 11.5 bytes, against 110 in a sorted set, and a
//! range read returns packed entries, with no score to format.
//!
//! # The contract of a feed list
//!
//! What a feed should hold is the engine's business (an author's posts for
//! an outbox; the posts pushed to a reader for an inbox); the scripts keep
//! only this:
//!
//! 1. **Complete above the floor.** The list holds every entry it should
//!    whose score is strictly above its floor. At or below the floor it may
//!    miss some, and readers go to PostgreSQL there.
//!    - floor `-inf`: complete down to the first post;
//!    - floor `inf`: *building* (see 5): it keeps the pushes it receives,
//!      but nothing in it is trusted yet;
//!    - no key: *missing*; nothing is known, rebuild it.
//! 2. **In order, once, the sentinel last.** Entries are kept in feed order,
//!    each at most once, none below the floor, and the sentinel after them
//!    (a building list's mark before them).
//! 3. **Push** ([`PUSH`]): adds entries to lists that exist (a missing one
//!    stays missing: it is rebuilt on its next read, so memory follows active
//!    readers), each in its place, and only entries scored at or above the
//!    floor. A push that is *cut* (the pusher sent only the newest entries
//!    of a longer list) names its lowest score, and the floor is raised to
//!    it, entries below it dropped: the list then claims nothing about what
//!    the pusher left out. A cut push into a building list abandons the
//!    build (the key is deleted), since the build's floor could not know of
//!    the cut.
//! 4. **Trim**: after a push, a list of more than `cap + max(1, cap/32) - 1`
//!    entries is cut to its newest `cap`, the floor raised to the highest
//!    score removed (the slack keeps fan-out from trimming on every push).
//! 5. **Build** ([`BEGIN`], then [`FILL`]): a missing key is created in the
//!    building state, its mark and its sentinel (with a TTL, so an
//!    abandoned build expires), *before* PostgreSQL is read, so that
//!    pushes racing with the read land in it, below the mark. FILL takes
//!    the mark off, merges what was read, sets the floor (`-inf` if everything was
//!    read, else the lowest score read), drops entries below it, removes
//!    the TTL and trims. FILL completes only a list still building: one that
//!    vanished or whose build was abandoned is left as it is.
//! 6. **Read**: a source is read as a *window*, its state and a range of
//!    its elements at one moment, so the state a reader sees describes
//!    the range it read: a read from the top is one `LRANGE` of the
//!    list's first elements (a building list's mark, or entries and, if
//!    it reaches it, the sentinel). A read below a cursor is, where the
//!    service remembers the place its view last left the list
//!    (`places.rs`), a transaction of an `LRANGE` around that place and the
//!    sentinel (`LINDEX -1`), kept only if its elements prove the cursor's
//!    place (the first read is above the cursor, or the list's first, and
//!    the window's elements follow the place); else it is one [`SOURCES`]
//!    call, which reads the sentinel and finds the cursor's place by
//!    halving (`LINDEX`). A window that reached the sentinel holds every
//!    entry down to the floor; one that did not holds every entry only
//!    above the last score it read.
//!
//! A build's read is bounded by PostgreSQL's statement timeout (seconds),
//! well inside the build TTL, so a FILL never lands in a later build.
//!
//! # The contract of the reader state and the post cache
//!
//! 7. **Whom a reader's home shows** (`following:{r}`, a HASH): the field
//!    `""` holds the follow sequence number the copy was built at (`b`
//!    while building); each author's field holds `F<seq>` (shown since
//!    change `seq`: followed and not muted) or `U<seq>` (not shown since:
//!    unfollowed, or muted). A change ([`SET_FOLLOW`]) is applied only if
//!    its `seq` is newer than the build and than the field, so changes
//!    applied in any order leave the state of the newest; a change
//!    reaching a copy being built abandons the build. An author is
//!    "followed" (shown) iff its field starts with `F`. Beside the HASH,
//!    `followees:{r}` (a SET, of the same slot) names the shown authors and
//!    `0` (a mark that it is there); the scripts change both at once. A
//!    missing key, or one of the two without the other, is unknown: rebuild
//!    both. A follow also pushes the author's newest posts into the inbox
//!    (as a push, clause 3); an unfollow that applies removes its posts,
//!    one that finds no copy (missing, being built, half there) drops the
//!    inbox (no copy tells whether a newer follow brought them back: the
//!    records rebuild it); a mute or unmute leaves the inbox as it is (the
//!    posts come back with the unmute).
//! 8. **The pulled authors** (`pulled:{m<n>}`, a HASH in each copy of the
//!    marks, [`MARK_COPIES`](super::keys::MARK_COPIES) of them, alike:
//!    every change goes to every copy, one call each, and a page reads the
//!    copy of its reader; a copy missing or being built is rebuilt alone,
//!    while the others serve): `""` is `c` once built
//!    (`b` while building); each author's field is `<epoch>;<ids>`: the
//!    epoch of its current big-V time (empty if none; any number, 0
//!    included, is one) and the posts whose
//!    delivery is in flight. Every follower pulls the outbox of an author
//!    with a field. A post is added (before its outbox entry: the store's
//!    `publish`) before its publish returns and removed once its
//!    delivery is done; a demotion clears only the epoch it ended. Changes
//!    during a build land in it, and the fill merges (epochs by max, ids by
//!    union). Beside it, `pulled_authors` (a SET, of the same slot) names
//!    the authors with a field, and `0`, as `followees:{r}` does. A missing
//!    key, or one of the two without the other, is unknown: rebuild both.
//! 9. **Posts** (`post:{id}`, a HASH with a TTL): `a` author, `u` username,
//!    `b` body, `t` time, and `d` = 1 once deleted. A tombstone is written
//!    whether or not the rest is there; a fill from PostgreSQL adds only
//!    the fields missing. A post without `a` is unknown: read PostgreSQL.
//! 10. **The warm read** (`warm.rs`) reads, in four round trips of plain
//!     reads, the reader's state, which of its authors are pulled or
//!     hidden (of its copy of the marks), the inbox and the outbox of every pulled author it follows,
//!     and for every entry of the page its author and tombstone.
//! 11. **Idle readers expire.** A reader's inbox and its copy of whom it
//!     follows get, when built and again on its reads (at most once per
//!     mark interval, [`TOUCH`]), the admin's idle TTL; an outbox and the
//!     pulled authors never expire. Expiry is a key gone missing (clauses
//!     1 and 7): pushes skip it, and the next read rebuilds it.
//! 12. **Hidden accounts** (`hidden:{m<n>}`, a SET in each copy of the
//!     marks, of the slot of its copy's pulled authors, changed and read
//!     as they are):
//!     the ids of the accounts whose posts are in no feed (suspended, or
//!     being deleted), and `0` once built (`b` while building, with a
//!     TTL). A change ([`HIDDEN`]) adds or removes an id of a built set,
//!     and abandons a build (the key is deleted: the build's read of
//!     PostgreSQL could predate the change); [`FILL_HIDDEN`] completes only
//!     a set still building. A missing key is unknown: rebuild it. Reads
//!     drop every post of a hidden account (as of an author not followed)
//!     and pull no hidden outbox.

use std::sync::LazyLock;

use redis::Script;

pub use super::layout::EPOCH_MS;

/// Shared Lua: entries (packed as `layout.rs` packs them) and feed order.
const LAYOUT: &str = include_str!("lua/layout.lua");

/// Shared Lua: trimming and one key's push (clauses 2 to 4).
const PRELUDE: &str = include_str!("lua/prelude.lua");

/// PUSH: KEYS feed lists; `ARGV[1]` cap; `ARGV[2]` the lowest score of a cut
/// push, or `""`; `ARGV[3..]` score, id pairs, pushed into every key
/// (clauses 3 and 4). One call serves many keys, so fan-out pays the call
/// once per group of followers. Returns the number of entries added.
pub static PUSH: LazyLock<Script> =
    LazyLock::new(|| script(&[LAYOUT, PRELUDE, include_str!("lua/push.lua")]));

/// Entries a source read takes beyond the `fetch + 1` a page needs, so
/// that a page boundary inside a short run of equal scores (a few posts of
/// one millisecond) is settled by the first read: a read holds every entry
/// only above its last score, and a longer run at the boundary costs a
/// second, wider read.
pub const TIE_SLACK: usize = 4;

/// Shared Lua: one source's window (clause 6).
const SOURCE: &str = include_str!("lua/source.lua");

/// SOURCES: `KEYS[1]` a feed list; `ARGV[1]` the highest score to read
/// (`+inf` for all), `ARGV[2]` how many elements of each list to read at
/// the most (`take`), `ARGV[3..]` more feed lists, of any slots the node
/// of `KEYS[1]` serves (`allow-cross-slot-keys`: a cluster routes a call by
/// its declared keys, which must share a slot, and lets the script reach
/// the node's other keys). Returns, for each list in order, its *window*
/// as of one moment (clause 6): its floor (`nil` if the key is missing),
/// whether the window reached the sentinel (`1`) or not (`0`), and its
/// entries from the first scored at most `ARGV[1]` on, `take` elements of
/// the list at the most (the sentinel left out), packed end to end in one
/// string when each takes 9 bytes, else as a list (so a reply holds three
/// values per key, not one per entry). A read from the top (no cursor)
/// takes the same window with plain commands (`FeedLists::ranges`); this
/// script is for a window below a cursor, whose place in each list it
/// finds. It reads only: a page reads all its sources a node holds in one
/// call.
pub static SOURCES: LazyLock<Script> = LazyLock::new(|| {
    script(&[
        "#!lua flags=no-writes,allow-cross-slot-keys\n",
        LAYOUT,
        SOURCE,
        include_str!("lua/sources.lua"),
    ])
});

/// BEGIN: `KEYS[1]` feed list; `ARGV[1]` TTL in seconds. Creates a missing key
/// in the building state (clause 5); returns 1 if this caller builds it.
pub static BEGIN: LazyLock<Script> = LazyLock::new(|| script(&[include_str!("lua/begin.lua")]));

/// FILL: `KEYS[1]` feed list; `ARGV[1]` cap; `ARGV[2]` floor (`-inf` or a score);
/// `ARGV[3]` the idle TTL in seconds (`0`: none); `ARGV[4..]` score, id
/// pairs. Completes a build (clause 5). Returns 1 if it did, 0 if the key
/// was no longer building.
pub static FILL: LazyLock<Script> =
    LazyLock::new(|| script(&[LAYOUT, PRELUDE, include_str!("lua/fill.lua")]));

/// A script whose text names the layout's constants.
/// A script from its parts (shared Lua first), with the constants it
/// names filled in.
fn script(parts: &[&str]) -> Script {
    let text = parts.concat();
    Script::new(&text.replace("EPOCH_MS", &EPOCH_MS.to_string()))
}

/// Shared Lua of the reader state (clauses 7 and 8).
const STATE: &str = include_str!("lua/state.lua");

/// BEGIN_STATE: `KEYS[1]` a state HASH, `KEYS[2]` its SET of names; `ARGV[1]`
/// TTL. Creates a missing state in the building state (clauses 7 and 8;
/// half a state, one key without the other, is missing); returns 1 if
/// this caller builds it.
pub static BEGIN_STATE: LazyLock<Script> =
    LazyLock::new(|| script(&[include_str!("lua/begin_state.lua")]));

/// FILL_FOLLOWING: `KEYS[1]` `following:{r}`, `KEYS[2]` `followees:{r}`;
/// `ARGV[1]` the reader's follow seq; `ARGV[2]` the idle TTL in seconds;
/// `ARGV[3..]` followee ids. Completes a build (clause 7); 0 if the state is
/// no longer building.
pub static FILL_FOLLOWING: LazyLock<Script> =
    LazyLock::new(|| script(&[include_str!("lua/fill_following.lua")]));

/// TOUCH: `KEYS[1]` the reader's active mark, `KEYS[2]` its inbox, `KEYS[3]` its
/// `following:{r}`, `KEYS[4]` its `followees:{r}` (one slot); `ARGV[1]` the mark's time, `ARGV[2]` the mark
/// interval in seconds, `ARGV[3]` the idle TTL in seconds. At most once per
/// interval (the mark): the reader's built keys get the idle TTL again
/// (clause 11); one being built keeps its build TTL. Returns 1 if it did.
pub static TOUCH: LazyLock<Script> = LazyLock::new(|| script(&[include_str!("lua/touch.lua")]));

/// SET_FOLLOW: `KEYS[1]` `following:{r}`, `KEYS[2]` the reader's inbox,
/// `KEYS[3]` `followees:{r}`; `ARGV[1]` author, `ARGV[2]` seq, `ARGV[3]` `F`
/// (the home shows the author: followed, not muted) or `U` (it does not),
/// `ARGV[4]` what the inbox gets: `push` (a follow: the author's newest
/// entries), `remove` (an unfollow: they go if the change applied, the
/// whole inbox if there was no copy to apply it to) or
/// `keep` (a mute or unmute), `ARGV[5]` inbox cap, `ARGV[6]` cut (`""` or a
/// score), `ARGV[7..]` the entries (score, id pairs). Clause 7; a push is as
/// clause 3. Returns 1 if the change applied to the reader's copy.
pub static SET_FOLLOW: LazyLock<Script> =
    LazyLock::new(|| script(&[LAYOUT, PRELUDE, STATE, include_str!("lua/set_follow.lua")]));

/// FOLLOW_MANY: KEYS as [`SET_FOLLOW`]; `ARGV[1]` seq, `ARGV[2]` how many
/// authors (`n`), ARGV[3..3+2n] author, `F` or `U` pairs (clause 7, one
/// change for all), then inbox cap, cut (`""` or a score), and the entries
/// of them all to push (score, id pairs; clause 3). Returns how many of
/// the authors' fields the change set.
pub static FOLLOW_MANY: LazyLock<Script> =
    LazyLock::new(|| script(&[LAYOUT, PRELUDE, STATE, include_str!("lua/follow_many.lua")]));

/// PULLED: `KEYS[1]` `pulled`, `KEYS[2]` `pulled_authors`; `ARGV[1]` `add` / `done` (`ARGV[3]` a post id),
/// `promote` / `demoted` (`ARGV[3]` an epoch), `forget` (a purged account:
/// its field goes); `ARGV[2]` the author. Clause 8.
pub static PULLED: LazyLock<Script> =
    LazyLock::new(|| script(&[STATE, include_str!("lua/pulled.lua")]));

/// FILL_PULLED: `KEYS[1]` `pulled`, `KEYS[2]` `pulled_authors`; ARGV triples (author, epoch or `""` if
/// none, ids joined by commas). Completes a build, merging what landed meanwhile (clause 8).
pub static FILL_PULLED: LazyLock<Script> =
    LazyLock::new(|| script(&[STATE, include_str!("lua/fill_pulled.lua")]));

/// FILL_POST: `KEYS[1]` `post:{id}`; `ARGV[1]` TTL, `ARGV[2]` author, `ARGV[3]`
/// username, `ARGV[4]` body, `ARGV[5]` time, `ARGV[6]` `1` if deleted, `ARGV[7]`
/// meta (`''`: none). Adds only the fields missing (clause 9).
pub static FILL_POST: LazyLock<Script> =
    LazyLock::new(|| script(&[include_str!("lua/fill_post.lua")]));

/// TOMBSTONE: `KEYS[1]` `post:{id}`; `ARGV[1]` TTL. Marks a post deleted,
/// whether or not the rest of it is cached (clause 9).
pub static TOMBSTONE: LazyLock<Script> =
    LazyLock::new(|| script(&[include_str!("lua/tombstone.lua")]));

/// HIDDEN: `KEYS[1]` `hidden`; `ARGV[1]` `add` or `remove`, `ARGV[2]` an account.
/// Clause 12: changes a built set, abandons a build. Returns 1 if it
/// changed a built set.
pub static HIDDEN: LazyLock<Script> = LazyLock::new(|| script(&[include_str!("lua/hidden.lua")]));

/// BEGIN_HIDDEN: `KEYS[1]` `hidden`; `ARGV[1]` TTL. Creates a missing set in
/// the building state (clause 12); returns 1 if this caller builds it.
pub static BEGIN_HIDDEN: LazyLock<Script> =
    LazyLock::new(|| script(&[include_str!("lua/begin_hidden.lua")]));

/// FILL_HIDDEN: `KEYS[1]` `hidden`; ARGV the hidden accounts. Completes a
/// build (clause 12); 0 if the set is no longer building.
pub static FILL_HIDDEN: LazyLock<Script> =
    LazyLock::new(|| script(&[include_str!("lua/fill_hidden.lua")]));
