//! Lua scripts over feed lists, and the contract they keep.
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
//! it from an entry; it is always the last element. At the cap of 1,000 an
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
//!    each at most once, none below the floor, and the sentinel after them.
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
//!    building state (with a TTL, so an abandoned build expires) *before*
//!    PostgreSQL is read, so that pushes racing with the read land in it.
//!    FILL merges what was read, sets the floor (`-inf` if everything was
//!    read, else the lowest score read), drops entries below it, removes
//!    the TTL and trims. FILL completes only a list still building: one that
//!    vanished or whose build was abandoned is left as it is.
//! 6. **Read**: the floor and a range are read at one moment (one [`RANGE`]
//!    or [`READ`] call), so the floor a reader sees describes the range it
//!    read. Each source's length is read once per page (`LLEN`), its floor
//!    once (`LINDEX -1`); the place of a cursor is found by halving
//!    (`LINDEX`), and entries come by `LRANGE`.
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
//!    (as a push, clause 3); an unfollow that applies removes its posts; a
//!    mute or unmute leaves the inbox as it is (the posts come back with
//!    the unmute).
//! 8. **The pulled authors** (`pulled`, one HASH): `""` is `c` once built
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
//! 10. **The warm read** ([`READ`]) reads, in one call, the reader's state,
//!     the inbox, the outbox of every pulled author it follows, and for
//!     every entry of the page its author, tombstone and whether it is
//!     followed.
//! 11. **Idle readers expire.** A reader's inbox and its copy of whom it
//!     follows get, when built and again on its reads (at most once per
//!     mark interval, [`TOUCH`]), the admin's idle TTL; an outbox and the
//!     pulled authors never expire. Expiry is a key gone missing (clauses
//!     1 and 7): pushes skip it, and the next read rebuilds it.
//! 12. **Hidden accounts** (`hidden`, a SET of the pulled authors' slot):
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
const LAYOUT: &str = r#"
local EPOCH = EPOCH_MS
local function pack(score, id)
  local s, b = score - EPOCH, {}
  for j = 5, 1, -1 do
    b[j] = s % 256
    s = math.floor(s / 256)
  end
  local n, c = 4, {}
  if id >= 4294967296 then n = 6 end
  for j = n, 1, -1 do
    c[j] = id % 256
    id = math.floor(id / 256)
  end
  return string.char(unpack(b)) .. string.char(unpack(c))
end
local function score_of(e)
  local a, b, c, d, f = string.byte(e, 1, 5)
  return EPOCH + (((a * 256 + b) * 256 + c) * 256 + d) * 256 + f
end
local function id_of(e)
  local a, b, c, d, f, g = string.byte(e, 6, -1)
  local v = ((a * 256 + b) * 256 + c) * 256 + d
  if g then v = (v * 256 + f) * 256 + g end
  return v
end
local function id_text(e)
  return string.format('%d', id_of(e))
end
-- Equal scores go by the ids' decimal bytes, descending. An id's place
-- there as numbers: its digits read as a 15-digit fraction, then how many
-- digits it has (a prefix comes first): `tie_after` of two such keys is
-- the byte order of the two decimal texts, with no text made.
local TEN = {}
do
  local p = 1
  for k = 1, 16 do TEN[k], p = p, p * 10 end
end
local function tie_key(id)
  local n = 1
  while n < 15 and id >= TEN[n + 1] do n = n + 1 end
  return id * TEN[16 - n], n
end
local function tie_after(k1, n1, k2, n2)
  if k1 ~= k2 then return k1 > k2 end
  return n1 > n2
end
-- Whether entry e1 (score s1) comes before e2 (score s2) in feed order.
local function newer(s1, e1, s2, e2)
  if s1 ~= s2 then return s1 > s2 end
  local k1, n1 = tie_key(id_of(e1))
  local k2, n2 = tie_key(id_of(e2))
  return tie_after(k1, n1, k2, n2)
end
local function floor_of(raw)
  if raw == 'inf' or raw == '+inf' then return nil end
  if raw == '-inf' then return -math.huge end
  return tonumber(raw)
end
-- The first index of the list (n elements) whose score is at most max (a
-- decimal score or '+inf'); n - 1, the sentinel's, if there is none. It
-- gallops from the head (indexes 0, 1, 3, 7, ...), then halves what is
-- left: a cursor near the head, as most are, costs a probe or two, and a
-- probe near the head is the cheapest.
local function find(key, n, max)
  if max == '+inf' then return 0 end
  local m = tonumber(max)
  local lo, hi, i, step = 0, n - 1, 0, 1
  while i < n - 1 do
    if score_of(redis.call('LINDEX', key, i)) <= m then
      hi = i
      break
    end
    lo = i + 1
    i = i + step
    step = step * 2
  end
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if score_of(redis.call('LINDEX', key, mid)) <= m then hi = mid else lo = mid + 1 end
  end
  return lo
end
-- Drops the entries from index i on and makes the floor `floor`.
local function cut_at(key, i, floor)
  if i == 0 then
    redis.call('LTRIM', key, -1, -1)
    redis.call('LSET', key, 0, floor)
  else
    redis.call('LTRIM', key, 0, i - 1)
    redis.call('RPUSH', key, floor)
  end
end
"#;

/// Shared Lua: trimming and one key's push (clauses 2 to 4).
const PRELUDE: &str = r#"
-- Whether a list of n entries (the sentinel not counted) is past the trim.
local function over(n, cap)
  return n > cap + math.max(1, math.floor(cap / 32)) - 1
end
local function cut_to_cap(key, cap)
  local top = redis.call('LINDEX', key, cap)
  cut_at(key, cap, string.format('%d', score_of(top)))
end
local function trim(key, cap)
  if over(redis.call('LLEN', key) - 1, cap) then cut_to_cap(key, cap) end
end
-- One entry into its place; 1 if it was not there.
local function insert(key, s, e)
  local n = redis.call('LLEN', key)
  local head = redis.call('LINDEX', key, 0)
  if n == 1 or newer(s, e, score_of(head), head) then
    redis.call('LPUSH', key, e)
    return 1
  end
  if head == e then return 0 end
  local lo, hi = 1, n - 1
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local x = redis.call('LINDEX', key, mid)
    if newer(score_of(x), x, s, e) then lo = mid + 1 else hi = mid end
  end
  local at = redis.call('LINDEX', key, lo)
  if at == e then return 0 end
  redis.call('LINSERT', key, 'BEFORE', at, e)
  return 1
end
-- Many entries at once: the list rewritten in order, its TTL kept. The
-- entries (sorted first unless they come in feed order, as a backfill's
-- do) are merged with the list's in one pass.
local function merge(key, list)
  for k = 2, #list do
    if not newer(list[k - 1][1], list[k - 1][2], list[k][1], list[k][2]) then
      table.sort(list, function(a, b) return newer(a[1], a[2], b[1], b[2]) end)
      break
    end
  end
  local have = redis.call('LRANGE', key, 0, -1)
  local sentinel = table.remove(have)
  local out, added, i, j = {}, 0, 1, 1
  local e, es = have[1], have[1] and score_of(have[1])
  while e or list[j] do
    local x = list[j]
    if x and x[2] == e then
      j = j + 1
    elseif x and (not e or newer(x[1], x[2], es, e)) then
      if out[#out] ~= x[2] then
        out[#out + 1] = x[2]
        added = added + 1
      end
      j = j + 1
    else
      out[#out + 1] = e
      i = i + 1
      e = have[i]
      es = e and score_of(e)
    end
  end
  if added == 0 then return 0 end
  local ttl = redis.call('PTTL', key)
  redis.call('DEL', key)
  for from = 1, #out, 1000 do
    redis.call('RPUSH', key, unpack(out, from, math.min(from + 999, #out)))
  end
  redis.call('RPUSH', key, sentinel)
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
  return added
end
-- Entries from ARGV[from..] (score, id pairs), packed: {score, entry}.
local function packed(from)
  local list = {}
  for i = from, #ARGV, 2 do
    local s = tonumber(ARGV[i])
    list[#list + 1] = {s, pack(s, tonumber(ARGV[i + 1]))}
  end
  return list
end
-- The fan-out's usual case, one entry newer than the head (so above the
-- floor): one LPUSH, whose reply tells whether to trim, and the floor read
-- only then (a building list is not trimmed). 0 for a missing key; nil
-- when the entry is not newer than an entry at the head.
local function push_newest(key, cap, s, e)
  local head = redis.call('LINDEX', key, 0)
  if not head then return 0 end
  if #head ~= 9 and #head ~= 11 then return nil end
  if not newer(s, e, score_of(head), head) then return nil end
  if over(redis.call('LPUSH', key, e) - 1, cap) then
    if floor_of(redis.call('LINDEX', key, -1)) ~= nil then cut_to_cap(key, cap) end
  end
  return 1
end
-- Pushes that many entries rewrite the list; fewer go one by one.
local MERGE_FROM = 8
local function push(key, cap, cut, list)
  if cut == '' and #list == 1 then
    local added = push_newest(key, cap, list[1][1], list[1][2])
    if added then return added end
  end
  local raw = redis.call('LINDEX', key, -1)
  if not raw then return 0 end
  local floor = floor_of(raw)
  if cut ~= '' then
    if floor == nil then
      redis.call('DEL', key)
      return 0
    end
    if tonumber(cut) > floor then
      floor = tonumber(cut)
      local n = redis.call('LLEN', key)
      cut_at(key, find(key, n, string.format('%d', floor - 1)), cut)
    end
  end
  local kept = {}
  for _, x in ipairs(list) do
    if floor == nil or x[1] >= floor then kept[#kept + 1] = x end
  end
  local added = 0
  if #kept >= MERGE_FROM then
    added = merge(key, kept)
  else
    for _, x in ipairs(kept) do added = added + insert(key, x[1], x[2]) end
  end
  if floor ~= nil then trim(key, cap) end
  return added
end
-- Removes the entries of `list` ({score, entry} pairs) from the list in
-- one pass, its sentinel and TTL kept: one read and, if anything went, one
-- rewrite, however many entries (an unfollow names an inbox's worth).
-- Returns how many went.
local function remove_all(key, list)
  if #list == 0 then return 0 end
  local gone = {}
  for _, x in ipairs(list) do gone[x[2]] = true end
  local have = redis.call('LRANGE', key, 0, -1)
  local out = {}
  for _, e in ipairs(have) do
    if not gone[e] then out[#out + 1] = e end
  end
  if #out == #have then return 0 end
  local ttl = redis.call('PTTL', key)
  redis.call('DEL', key)
  for from = 1, #out, 1000 do
    redis.call('RPUSH', key, unpack(out, from, math.min(from + 999, #out)))
  end
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
  return #have - #out
end
"#;

/// PUSH: KEYS feed lists; ARGV[1] cap; ARGV[2] the lowest score of a cut
/// push, or `""`; ARGV[3..] score, id pairs, pushed into every key
/// (clauses 3 and 4). One call serves many keys, so fan-out pays the call
/// once per group of followers. Returns the number of entries added.
pub static PUSH: LazyLock<Script> = LazyLock::new(|| {
    script(&format!(
        r#"{LAYOUT}{PRELUDE}
local cap = tonumber(ARGV[1])
local entries = packed(3)
local added = 0
for k = 1, #KEYS do
  added = added + push(KEYS[k], cap, ARGV[2], entries)
end
return added
"#
    ))
});

/// Entries of one score a source read takes beyond its limit, at the most,
/// to settle a page boundary that falls in a run of equal scores (see
/// [`RANGE`]). A longer run costs a second, wider read.
pub const TIES: usize = 256;

/// Shared Lua: one source's read (clause 6).
const SOURCE: &str = r#"
local function read_source(key, max, fetch, ties)
  local n = redis.call('LLEN', key)
  if n == 0 then return {false, '', {}} end
  local floor = redis.call('LINDEX', key, -1)
  local from, last = find(key, n, max), n - 2
  if from + fetch >= n - 1 then
    if from > last then return {floor, '', {}} end
    return {floor, '', redis.call('LRANGE', key, from, last)}
  end
  local r = redis.call('LRANGE', key, from, from + fetch)
  local s = score_of(r[#r])
  if ties == 0 or #r < 2 or score_of(r[#r - 1]) ~= s then
    return {floor, string.format('%d', s), r}
  end
  local upto = math.min(from + fetch + ties, last)
  local rest = redis.call('LRANGE', key, from + fetch + 1, upto)
  for _, e in ipairs(rest) do
    if score_of(e) ~= s then return {floor, string.format('%d', s - 1), r} end
    r[#r + 1] = e
  end
  if upto == last then return {floor, '', r} end
  return {floor, string.format('%d', s), r}
end
"#;

/// RANGE: KEYS[1] a feed list; ARGV[1] the highest score to read (`+inf` for all), ARGV[2] how many
/// entries (`fetch`), ARGV[3] how many more entries of one score to read
/// at the most (`ties`). Returns the floor (`nil` if the key is missing),
/// the *cut*, and the entries from ARGV[1] down (packed), all read at one
/// moment (clause 6):
/// - `fetch + 1` entries at the most;
/// - when the limit stops the read inside a run of equal scores (its last
///   two entries share the score `s`), also the rest of that run, up to
///   `ties` more;
/// - the cut is `""` if the read reached the end; else the score above
///   which the read holds every entry: `s - 1` when it took the whole run
///   of `s` (scores are whole milliseconds), `s` otherwise.
///
/// So a page whose boundary falls in a run of equal scores is settled by
/// that run alone, not by reading every source again with a wider window.
/// One slot, so the calls of many slots may share a pipeline to their
/// master.
pub static RANGE: LazyLock<Script> = LazyLock::new(|| {
    script(&format!(
        r#"{LAYOUT}{SOURCE}
return read_source(KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
"#
    ))
});

/// BEGIN: KEYS[1] feed list; ARGV[1] TTL in seconds. Creates a missing key
/// in the building state (clause 5); returns 1 if this caller builds it.
pub static BEGIN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('RPUSH', KEYS[1], 'inf')
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
return 1
"#,
    )
});

/// FILL: KEYS[1] feed list; ARGV[1] cap; ARGV[2] floor (`-inf` or a score);
/// ARGV[3] the idle TTL in seconds (`0`: none); ARGV[4..] score, id
/// pairs. Completes a build (clause 5). Returns 1 if it did, 0 if the key
/// was no longer building.
pub static FILL: LazyLock<Script> = LazyLock::new(|| {
    script(&format!(
        r#"{LAYOUT}{PRELUDE}
local raw = redis.call('LINDEX', KEYS[1], -1)
if not raw or floor_of(raw) ~= nil then return 0 end
merge(KEYS[1], packed(4))
local n = redis.call('LLEN', KEYS[1])
if ARGV[2] == '-inf' then
  redis.call('LSET', KEYS[1], -1, '-inf')
else
  cut_at(KEYS[1], find(KEYS[1], n, string.format('%d', tonumber(ARGV[2]) - 1)), ARGV[2])
end
if ARGV[3] == '0' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
end
trim(KEYS[1], tonumber(ARGV[1]))
return 1
"#
    ))
});

/// A script whose text names the layout's constants.
fn script(text: &str) -> Script {
    Script::new(&text.replace("EPOCH_MS", &EPOCH_MS.to_string()))
}

/// Shared Lua of the reader state (clauses 7 and 8).
const STATE: &str = r#"
local function seq_of(v)
  return tonumber(string.sub(v, 2))
end
local function parse_pulled(v)
  local sep = string.find(v, ';', 1, true)
  local epoch = tonumber(string.sub(v, 1, sep - 1))  -- nil: no big-V time
  local ids = {}
  for id in string.gmatch(string.sub(v, sep + 1), '[^,]+') do ids[id] = true end
  return epoch, ids
end
local function later(a, b)
  if a == nil then return b end
  if b == nil then return a end
  return math.max(a, b)
end
-- Whether a state's SET of names is there ('0' marks it while it is).
local function named(set)
  return redis.call('SISMEMBER', set, '0') == 1
end
local function store_pulled(key, set, a, epoch, ids)
  local list = {}
  for id in pairs(ids) do list[#list + 1] = id end
  if epoch == nil and #list == 0 then
    redis.call('HDEL', key, a)
    redis.call('SREM', set, a)
  else
    table.sort(list)
    redis.call('HSET', key, a, (epoch or '') .. ';' .. table.concat(list, ','))
    redis.call('SADD', set, a)
  end
end
local function pulled_change(key, set, op, a, x)
  if not redis.call('HGET', key, '') then return 0 end
  if not named(set) then
    redis.call('DEL', key, set)
    return 0
  end
  local cur = redis.call('HGET', key, a)
  local epoch, ids = nil, {}
  if cur then epoch, ids = parse_pulled(cur) end
  if op == 'add' then ids[x] = true
  elseif op == 'done' then ids[x] = nil
  elseif op == 'promote' then epoch = later(epoch, tonumber(x))
  elseif op == 'demoted' then
    if epoch == tonumber(x) then epoch = nil end
  elseif op == 'forget' then
    epoch, ids = nil, {}
  end
  store_pulled(key, set, a, epoch, ids)
  return 1
end
"#;

/// BEGIN_STATE: KEYS[1] a state HASH, KEYS[2] its SET of names; ARGV[1]
/// TTL. Creates a missing state in the building state (clauses 7 and 8;
/// half a state, one key without the other, is missing); returns 1 if
/// this caller builds it.
pub static BEGIN_STATE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('EXISTS', KEYS[1]) == 1 and redis.call('SISMEMBER', KEYS[2], '0') == 1 then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('HSET', KEYS[1], '', 'b')
redis.call('SADD', KEYS[2], '0')
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[1]))
return 1
"#,
    )
});

/// FILL_FOLLOWING: KEYS[1] `following:{r}`, KEYS[2] `followees:{r}`;
/// ARGV[1] the reader's follow seq; ARGV[2] the idle TTL in seconds;
/// ARGV[3..] followee ids. Completes a build (clause 7); 0 if the state is
/// no longer building.
pub static FILL_FOLLOWING: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('HGET', KEYS[1], '') ~= 'b' or redis.call('SISMEMBER', KEYS[2], '0') == 0 then
  return 0
end
for i = 3, #ARGV do redis.call('HSET', KEYS[1], ARGV[i], 'F' .. ARGV[1]) end
for from = 3, #ARGV, 1000 do
  redis.call('SADD', KEYS[2], unpack(ARGV, from, math.min(from + 999, #ARGV)))
end
redis.call('HSET', KEYS[1], '', ARGV[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[2]))
return 1
"#,
    )
});

/// TOUCH: KEYS[1] the reader's active mark, KEYS[2] its inbox, KEYS[3] its
/// `following:{r}`, KEYS[4] its `followees:{r}` (one slot); ARGV[1] the mark's time, ARGV[2] the mark
/// interval in seconds, ARGV[3] the idle TTL in seconds. At most once per
/// interval (the mark): the reader's built keys get the idle TTL again
/// (clause 11); one being built keeps its build TTL. Returns 1 if it did.
pub static TOUCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', tonumber(ARGV[2])) then return 0 end
local floor = redis.call('LINDEX', KEYS[2], -1)
if floor and floor ~= 'inf' and floor ~= '+inf' then
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[3]))
end
local state = redis.call('HGET', KEYS[3], '')
if state and state ~= 'b' then
  redis.call('EXPIRE', KEYS[3], tonumber(ARGV[3]))
  redis.call('EXPIRE', KEYS[4], tonumber(ARGV[3]))
end
return 1
"#,
    )
});

/// SET_FOLLOW: KEYS[1] `following:{r}`, KEYS[2] the reader's inbox,
/// KEYS[3] `followees:{r}`; ARGV[1] author, ARGV[2] seq, ARGV[3] `F`
/// (the home shows the author: followed, not muted) or `U` (it does not),
/// ARGV[4] what the inbox gets: `push` (a follow: the author's newest
/// entries), `remove` (an unfollow: they go, if the change applied) or
/// `keep` (a mute or unmute), ARGV[5] inbox cap, ARGV[6] cut (`""` or a
/// score), ARGV[7..] the entries (score, id pairs). Clause 7; a push is as
/// clause 3. Returns 1 if the change applied to the reader's copy.
pub static SET_FOLLOW: LazyLock<Script> = LazyLock::new(|| {
    script(&format!(
        r#"{LAYOUT}{PRELUDE}{STATE}
local state = redis.call('HGET', KEYS[1], '')
local applied = 0
if state == 'b' or (state and not named(KEYS[3])) then
  redis.call('DEL', KEYS[1], KEYS[3])
elseif state then
  local seq = tonumber(ARGV[2])
  local cur = redis.call('HGET', KEYS[1], ARGV[1])
  if seq > tonumber(state) and (not cur or seq_of(cur) < seq) then
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[3] .. seq)
    if ARGV[3] == 'F' then
      redis.call('SADD', KEYS[3], ARGV[1])
    else
      redis.call('SREM', KEYS[3], ARGV[1])
    end
    applied = 1
  end
end
local entries = packed(7)
if ARGV[4] == 'push' then
  push(KEYS[2], tonumber(ARGV[5]), ARGV[6], entries)
elseif ARGV[4] == 'remove' and applied == 1 then
  remove_all(KEYS[2], entries)
end
return applied
"#
    ))
});

/// FOLLOW_MANY: KEYS as [`SET_FOLLOW`]; ARGV[1] seq, ARGV[2] how many
/// authors (`n`), ARGV[3..3+2n] author, `F` or `U` pairs (clause 7, one
/// change for all), then inbox cap, cut (`""` or a score), and the entries
/// of them all to push (score, id pairs; clause 3). Returns how many of
/// the authors' fields the change set.
pub static FOLLOW_MANY: LazyLock<Script> = LazyLock::new(|| {
    script(&format!(
        r#"{LAYOUT}{PRELUDE}{STATE}
local state = redis.call('HGET', KEYS[1], '')
local seq, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local applied = 0
if state == 'b' or (state and not named(KEYS[3])) then
  redis.call('DEL', KEYS[1], KEYS[3])
elseif state and seq > tonumber(state) then
  for i = 3, 2 + 2 * n, 2 do
    local cur = redis.call('HGET', KEYS[1], ARGV[i])
    if not cur or seq_of(cur) < seq then
      redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1] .. seq)
      if ARGV[i + 1] == 'F' then
        redis.call('SADD', KEYS[3], ARGV[i])
      else
        redis.call('SREM', KEYS[3], ARGV[i])
      end
      applied = applied + 1
    end
  end
end
local at = 3 + 2 * n
push(KEYS[2], tonumber(ARGV[at]), ARGV[at + 1], packed(at + 2))
return applied
"#
    ))
});

/// PULLED: KEYS[1] `pulled`, KEYS[2] `pulled_authors`; ARGV[1] `add` / `done` (ARGV[3] a post id),
/// `promote` / `demoted` (ARGV[3] an epoch), `forget` (a purged account:
/// its field goes); ARGV[2] the author. Clause 8.
pub static PULLED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{STATE}
return pulled_change(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])
"#
    ))
});

/// FILL_PULLED: KEYS[1] `pulled`, KEYS[2] `pulled_authors`; ARGV triples (author, epoch or `""` if
/// none, ids joined by commas). Completes a build, merging what landed meanwhile (clause 8).
pub static FILL_PULLED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{STATE}
if redis.call('HGET', KEYS[1], '') ~= 'b' or not named(KEYS[2]) then return 0 end
for i = 1, #ARGV, 3 do
  local cur = redis.call('HGET', KEYS[1], ARGV[i])
  local epoch, ids = nil, {{}}
  if cur then epoch, ids = parse_pulled(cur) end
  epoch = later(epoch, tonumber(ARGV[i + 1]))
  for id in string.gmatch(ARGV[i + 2], '[^,]+') do ids[id] = true end
  store_pulled(KEYS[1], KEYS[2], ARGV[i], epoch, ids)
end
redis.call('HSET', KEYS[1], '', 'c')
redis.call('PERSIST', KEYS[1])
redis.call('PERSIST', KEYS[2])
return 1
"#
    ))
});

/// FILL_POST: KEYS[1] `post:{id}`; ARGV[1] TTL, ARGV[2] author, ARGV[3]
/// username, ARGV[4] body, ARGV[5] time, ARGV[6] `1` if deleted, ARGV[7]
/// meta (`''`: none). Adds only the fields missing (clause 9).
pub static FILL_POST: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
redis.call('HSETNX', KEYS[1], 'a', ARGV[2])
redis.call('HSETNX', KEYS[1], 'u', ARGV[3])
redis.call('HSETNX', KEYS[1], 'b', ARGV[4])
redis.call('HSETNX', KEYS[1], 't', ARGV[5])
redis.call('HSETNX', KEYS[1], 'm', ARGV[7])
if ARGV[6] == '1' then redis.call('HSET', KEYS[1], 'd', '1') end
if redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1])) end
return 1
"#,
    )
});

/// TOMBSTONE: KEYS[1] `post:{id}`; ARGV[1] TTL. Marks a post deleted,
/// whether or not the rest of it is cached (clause 9).
pub static TOMBSTONE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
redis.call('HSET', KEYS[1], 'd', '1')
if redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1])) end
return 1
"#,
    )
});

/// HIDDEN: KEYS[1] `hidden`; ARGV[1] `add` or `remove`, ARGV[2] an account.
/// Clause 12: changes a built set, abandons a build. Returns 1 if it
/// changed a built set.
pub static HIDDEN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('SISMEMBER', KEYS[1], '0') == 1 then
  if ARGV[1] == 'add' then redis.call('SADD', KEYS[1], ARGV[2])
  else redis.call('SREM', KEYS[1], ARGV[2]) end
  return 1
end
if redis.call('SISMEMBER', KEYS[1], 'b') == 1 then redis.call('DEL', KEYS[1]) end
return 0
"#,
    )
});

/// BEGIN_HIDDEN: KEYS[1] `hidden`; ARGV[1] TTL. Creates a missing set in
/// the building state (clause 12); returns 1 if this caller builds it.
pub static BEGIN_HIDDEN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('SADD', KEYS[1], 'b')
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
return 1
"#,
    )
});

/// FILL_HIDDEN: KEYS[1] `hidden`; ARGV the hidden accounts. Completes a
/// build (clause 12); 0 if the set is no longer building.
pub static FILL_HIDDEN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('SISMEMBER', KEYS[1], 'b') == 0 then return 0 end
for from = 1, #ARGV, 1000 do
  redis.call('SADD', KEYS[1], unpack(ARGV, from, math.min(from + 999, #ARGV)))
end
redis.call('SADD', KEYS[1], '0')
redis.call('SREM', KEYS[1], 'b')
redis.call('PERSIST', KEYS[1])
return 1
"#,
    )
});

/// Entries the first read of a pulled outbox takes in a warm read ([`READ`]);
/// the merge reads more of it (twice as many each time) only while its
/// entries are still the newest.
pub const OUTBOX_CHUNK: usize = 4;

/// READ: KEYS[1] `following:{r}`, KEYS[2] the first source (the inbox, or
/// for an author's page its outbox), KEYS[3] `pulled`, KEYS[4]
/// `followees:{r}`, KEYS[5] `pulled_authors`, KEYS[6] `hidden`; ARGV[1]
/// key prefix,
/// ARGV[2] max (`+inf` or a score), ARGV[3] entries the page reads
/// (`fetch`), ARGV[4] `home` or `author`, ARGV[5] `ties` (as [`RANGE`]),
/// ARGV[6] the reader, ARGV[7] `1` if its home shows its own posts (its
/// own outbox is then pulled while it is, and its posts are followed).
/// Clauses 10 and 12. Returns `{status}` when the reader state or the
/// hidden accounts are missing or being built (`missing:following`,
/// `building:pulled`, `missing:hidden`, ...), else `{'ok', sources, meta}`.
///
/// The sources are the first, then the outbox of each pulled author the
/// reader follows (one `SINTER` of the two SETs of names: Redis walks the
/// smaller, and only the authors both hold come back, so a page never
/// walks every big-V there is). Their lengths and floors are read
/// first; one missing or building ends the read there (the engine rebuilds
/// it or answers from PostgreSQL). Then the script merges them newest
/// first, in feed order, reading each lazily from `max` down: the first
/// source `fetch + 1` entries first, an outbox [`OUTBOX_CHUNK`], each read
/// twice as many as the one before (a pulled outbox rarely holds much of a
/// page). The merge stops at the highest floor, or once it holds `fetch`
/// distinct entries and the rest of the last one's score (the page's part,
/// `page_part` in `types/source.rs`; a run of equal scores at the boundary
/// is read through, so it costs no second read), or when a source has
/// given `fetch + 1 + ties` entries (then nothing at or below its last
/// score is kept).
///
/// Each source is returned as `{author or '', floor or '', cut,
/// entries}`: the entries of the part it gave (packed), and its cut: `''`
/// if it was read to its end, else the score above which it gave every
/// entry. Only the part's posts are looked up: meta is a flat list of id,
/// author (`''` if the post is not cached), `1` if deleted (else `''`), 1
/// if its author is followed (else 0, from `followees:{r}`; 0 for a hidden
/// account's post on any page). So the reads, the lookups and the
/// reply follow the page, not sources × window.
pub static READ: LazyLock<Script> = LazyLock::new(|| {
    script(&format!(
        r#"{LAYOUT}
local prefix, max, fetch, home = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == 'home'
local cap = fetch + 1 + tonumber(ARGV[5])
local reader, own = ARGV[6], home and ARGV[7] == '1'
if home then
  local f = redis.call('HGET', KEYS[1], '')
  if not f then return {{'missing:following'}} end
  if f == 'b' then return {{'building:following'}} end
  local p = redis.call('HGET', KEYS[3], '')
  if not p then return {{'missing:pulled'}} end
  if p == 'b' then return {{'building:pulled'}} end
end
if redis.call('SISMEMBER', KEYS[6], '0') == 0 then
  if redis.call('SISMEMBER', KEYS[6], 'b') == 1 then return {{'building:hidden'}} end
  return {{'missing:hidden'}}
end
local sources = {{{{author = '', key = KEYS[2], chunk = fetch + 1}}}}
if home then
  -- The pulled authors the reader follows: the two SETs of names
  -- intersected, each holding '0' while it is there.
  local authors, named = {{}}, false
  for _, a in ipairs(redis.call('SINTER', KEYS[4], KEYS[5])) do
    if a == '0' then named = true else authors[#authors + 1] = a end
  end
  if not named then
    if redis.call('SISMEMBER', KEYS[4], '0') == 0 then return {{'missing:following'}} end
    return {{'missing:pulled'}}
  end
  if own and redis.call('SISMEMBER', KEYS[5], reader) == 1 then authors[#authors + 1] = reader end
  table.sort(authors)
  -- No hidden account's outbox is pulled.
  local hidden = {{}}
  if #authors > 0 then hidden = redis.call('SMISMEMBER', KEYS[6], unpack(authors)) end
  for i, a in ipairs(authors) do
    if hidden[i] == 0 then
      sources[#sources + 1] = {{author = a, key = prefix .. 'outbox:{{' .. a .. '}}', chunk = OUTBOX_CHUNK}}
    end
  end
end
-- Lengths and floors: the merge trusts nothing at or below the highest.
local horizon, usable = -math.huge, true
for _, src in ipairs(sources) do
  src.n = redis.call('LLEN', src.key)
  if src.n > 0 then src.floor = redis.call('LINDEX', src.key, -1) end
  if not src.floor or src.floor == 'inf' or src.floor == '+inf' then
    usable = false
  elseif src.floor ~= '-inf' then
    horizon = math.max(horizon, tonumber(src.floor))
  end
end
-- Each source's next entry (its head), read a chunk at a time from `pos`;
-- its last entry is at n - 2, before the sentinel.
local function advance(src)
  src.i = src.i + 1
  if src.i > #src.buf then
    if src.pos > src.n - 2 then
      src.ended, src.hs = true, nil
      return
    end
    if src.read >= cap then
      src.hs, src.capped = nil, true
      return
    end
    local want = math.min(src.chunk, cap - src.read)
    local upto = math.min(src.pos + want - 1, src.n - 2)
    src.buf = redis.call('LRANGE', src.key, src.pos, upto)
    src.i, src.pos = 1, upto + 1
    src.read = src.read + #src.buf
    src.chunk = src.chunk * 2
  end
  local m = src.buf[src.i]
  src.hm, src.hs, src.tk = m, score_of(m), nil
end
-- A head's place among equal scores (found once per head).
local function head_key(src)
  if not src.tk then src.tk, src.tn = tie_key(id_of(src.hm)) end
  return src.tk, src.tn
end
local part, seen, count, last, bound = {{}}, {{}}, 0, nil, horizon
if usable then
  for _, src in ipairs(sources) do
    src.buf, src.i, src.read, src.kept = {{}}, 0, 0, {{}}
    src.pos = find(src.key, src.n, max)
    advance(src)
  end
  while true do
    local best, bs = nil, horizon
    for _, src in ipairs(sources) do
      local h = src.hs
      if h and h >= bs then
        if h > bs then
          best, bs = src, h
        elseif best then
          local k1, n1 = head_key(src)
          local k2, n2 = head_key(best)
          if tie_after(k1, n1, k2, n2) then best = src end
        end
      end
    end
    if not best then break end
    if count >= fetch and best.hs ~= last then
      bound = math.max(bound, last - 1)
      break
    end
    local s, m = best.hs, best.hm
    best.kept[#best.kept + 1] = {{s, m}}
    if not seen[m] then
      seen[m] = true
      count = count + 1
      part[#part + 1] = {{s, id_text(m)}}
    end
    last = s
    advance(best)
    if best.capped then
      bound = math.max(bound, s)
      break
    end
  end
end
-- The part's posts (author, tombstone), then whether their authors are
-- followed, in one HMGET.
local ids, posts = {{}}, {{}}
for _, e in ipairs(part) do
  if e[1] > bound then
    ids[#ids + 1] = e[2]
    posts[#posts + 1] = redis.call('HMGET', prefix .. 'post:{{' .. e[2] .. '}}', 'a', 'd')
  end
end
-- An author is followed (its posts in the feed) unless it is hidden, or,
-- on a home, the reader does not follow it (itself, with `own`).
local follows, authors, known = {{}}, {{}}, {{}}
for _, m in ipairs(posts) do
  local a = m[1]
  if a and not known[a] then
    known[a] = true
    authors[#authors + 1] = a
  end
end
if #authors > 0 then
  local hidden = redis.call('SMISMEMBER', KEYS[6], unpack(authors))
  local states = home and redis.call('SMISMEMBER', KEYS[4], unpack(authors))
  for i, a in ipairs(authors) do
    follows[a] = hidden[i] == 0 and (not home or states[i] == 1 or (own and a == reader))
  end
end
local meta = {{}}
for i, id in ipairs(ids) do
  local a = posts[i][1] or ''
  local f = 1
  if a ~= '' and not follows[a] then f = 0 end
  meta[#meta + 1] = id
  meta[#meta + 1] = a
  meta[#meta + 1] = posts[i][2] or ''
  meta[#meta + 1] = f
end
local out = {{}}
for _, src in ipairs(sources) do
  local kept, cut = {{}}, ''
  for _, e in ipairs(src.kept or {{}}) do
    if e[1] > bound then kept[#kept + 1] = e[2] end
  end
  if usable and not (src.ended and not src.hs) then
    cut = string.format('%d', bound)
  end
  out[#out + 1] = {{src.author, src.floor or '', cut, kept}}
end
return {{'ok', out, meta}}
"#
    )
    .replace("OUTBOX_CHUNK", &OUTBOX_CHUNK.to_string()))
});
