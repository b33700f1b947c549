//! Lua scripts over feed ZSETs, and the contract they keep.
//!
//! # The contract of a feed ZSET
//!
//! A feed ZSET (an inbox or an outbox) holds entries (member: a post id in
//! decimal; score: the post's `created_at_ms`) and exactly one *sentinel*,
//! the member `""`, whose score is the ZSET's **floor**. What a ZSET should
//! hold is the engine's business (an author's posts for an outbox; the
//! posts pushed to a reader for an inbox); the scripts keep only this:
//!
//! 1. **Complete above the floor.** The ZSET holds every entry it should
//!    whose score is strictly above its floor. At or below the floor it may
//!    miss some, and readers go to PostgreSQL there.
//!    - floor `-inf`: complete down to the first post;
//!    - floor `+inf`: *building* (see 5): it keeps the pushes it receives,
//!      but nothing in it is trusted yet;
//!    - no sentinel: the key is *missing*; nothing is known, rebuild it.
//! 2. **The sentinel comes first.** No entry is kept below the floor, and
//!    `""` sorts before every other member of equal score, so the sentinel
//!    has rank 0 and entries have ranks 1 and up.
//! 3. **Push** ([`PUSH`]): adds entries to ZSETs that exist (a missing one
//!    stays missing: it is rebuilt on its next read, so memory follows active
//!    readers), and only entries scored at or above the floor. A push that
//!    is *cut* (the pusher sent only the newest entries of a longer list)
//!    names its lowest score, and the floor is raised to it, entries below
//!    it dropped: the ZSET then claims nothing about what the pusher left
//!    out. A cut push into a building ZSET abandons the build (the key is
//!    deleted), since the build's floor could not know of the cut.
//! 4. **Trim**: after a push, a ZSET more than `cap + max(1, cap/32) - 1`
//!    entries long is cut to its newest `cap`, the floor raised to the
//!    highest score removed (the slack keeps fan-out from moving a compact
//!    ZSET on every push).
//! 5. **Build** ([`BEGIN`], then [`FILL`]): a missing key is created in the
//!    building state (with a TTL, so an abandoned build expires) *before*
//!    PostgreSQL is read, so that pushes racing with the read land in it.
//!    FILL adds what was read, sets the floor (`-inf` if everything was
//!    read, else the lowest score read), drops entries below it, removes
//!    the TTL and trims. FILL completes only a ZSET still building: one that
//!    vanished or whose build was abandoned is left as it is.
//! 6. **Read**: the sentinel and a range are read in one MULTI (in the
//!    store), so the floor a reader sees describes the range it read.
//!
//! A build's read is bounded by PostgreSQL's statement timeout (seconds),
//! well inside the build TTL, so a FILL never lands in a later build.

use std::sync::LazyLock;

use redis::Script;

/// Shared Lua: floors, trimming and one key's push.
const PRELUDE: &str = r#"
local function floor_of(raw)
  if raw == 'inf' or raw == '+inf' then return nil end
  if raw == '-inf' then return -math.huge end
  return tonumber(raw)
end
local function trim(key, cap)
  local n = redis.call('ZCARD', key) - 1
  if n > cap + math.max(1, math.floor(cap / 32)) - 1 then
    local excess = n - cap
    local top = redis.call('ZRANGE', key, excess, excess, 'WITHSCORES')
    redis.call('ZREMRANGEBYRANK', key, 1, excess)
    redis.call('ZADD', key, top[2], '')
  end
end
local function push(key, cap, cut, first)
  local raw = redis.call('ZSCORE', key, '')
  if not raw then return 0 end
  local floor = floor_of(raw)
  if cut ~= '' then
    if floor == nil then
      redis.call('DEL', key)
      return 0
    end
    if tonumber(cut) > floor then
      floor = tonumber(cut)
      redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. cut)
      redis.call('ZADD', key, cut, '')
    end
  end
  local added = 0
  for i = first, #ARGV, 2 do
    if floor == nil or tonumber(ARGV[i]) >= floor then
      added = added + redis.call('ZADD', key, ARGV[i], ARGV[i + 1])
    end
  end
  if floor ~= nil then trim(key, cap) end
  return added
end
"#;

/// PUSH: KEYS feed ZSETs; ARGV[1] cap; ARGV[2] the lowest score of a cut
/// push, or `""`; ARGV[3..] score, member pairs, pushed into every key
/// (clauses 3 and 4). One call serves many keys, so fan-out pays the call
/// once per group of followers. Returns the number of entries added.
pub static PUSH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{PRELUDE}
local cap = tonumber(ARGV[1])
local added = 0
for k = 1, #KEYS do
  added = added + push(KEYS[k], cap, ARGV[2], 3)
end
return added
"#
    ))
});

/// BEGIN: KEYS[1] feed ZSET; ARGV[1] TTL in seconds. Creates a missing key
/// in the building state (clause 5); returns 1 if this caller builds it.
pub static BEGIN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('ZADD', KEYS[1], 'inf', '')
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
return 1
"#,
    )
});

/// FILL: KEYS[1] feed ZSET; ARGV[1] cap; ARGV[2] floor (`-inf` or a score);
/// ARGV[3..] score, member pairs. Completes a build (clause 5). Returns 1
/// if it did, 0 if the key was no longer building.
pub static FILL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{PRELUDE}
local raw = redis.call('ZSCORE', KEYS[1], '')
if not raw or floor_of(raw) ~= nil then return 0 end
for i = 3, #ARGV, 2 do
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('ZADD', KEYS[1], ARGV[2], '')
if ARGV[2] ~= '-inf' then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2])
end
redis.call('PERSIST', KEYS[1])
trim(KEYS[1], tonumber(ARGV[1]))
return 1
"#
    ))
});
