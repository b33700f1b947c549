//! Lua scripts over feed ZSETs (inboxes and outboxes).
//!
//! Every feed ZSET holds, besides its entries, one sentinel: the member ""
//! whose score is the ZSET's *floor*. The ZSET holds every entry it should
//! for scores strictly above its floor; below it, PostgreSQL answers.
//! - floor `-inf`: complete down to the first post;
//! - floor `+inf`: being built (pushes are kept, reads go elsewhere);
//! - no sentinel: the key is missing and must be rebuilt.
//!
//! "" sorts before any other member at an equal score, and no entry is
//! kept below the floor, so the sentinel always has rank 0: trimming
//! removes ranks 1.. and raises the floor to the highest score removed.

use std::sync::LazyLock;

use redis::Script;

/// Shared Lua: trim `key` to `cap` entries (sentinel excluded), raising the
/// floor. Trimming waits until the ZSET is `cap/32` (at least 1) over its
/// cap and then removes the excess at once: removing from the head of a
/// compact (listpack) ZSET moves all of it, so one move per 32 pushes keeps
/// fan-out cheap in the memory-saving encoding.
const TRIM: &str = r#"
local function trim(key, cap)
  local n = redis.call('ZCARD', key) - 1
  if n > cap + math.max(1, math.floor(cap / 32)) - 1 then
    local excess = n - cap
    local top = redis.call('ZRANGE', key, excess, excess, 'WITHSCORES')
    redis.call('ZREMRANGEBYRANK', key, 1, excess)
    redis.call('ZADD', key, top[2], '')
  end
end
local function floor_of(raw)
  if raw == 'inf' or raw == '+inf' then return nil end
  if raw == '-inf' then return -math.huge end
  return tonumber(raw)
end
"#;

/// PUSH: KEYS[1] feed ZSET; ARGV[1] cap; ARGV[2..] score, member pairs.
/// Adds only to a ZSET that exists (a missing one is rebuilt on its next
/// read, so memory follows active users) and only at or above its floor.
/// Returns the number of entries added.
pub static PUSH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{TRIM}
local raw = redis.call('ZSCORE', KEYS[1], '')
if not raw then return 0 end
local floor = floor_of(raw)
local added = 0
for i = 2, #ARGV, 2 do
  if floor == nil or tonumber(ARGV[i]) >= floor then
    added = added + redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
if floor ~= nil then trim(KEYS[1], tonumber(ARGV[1])) end
return added
"#
    ))
});

/// PUSH_MANY: KEYS feed ZSETs; ARGV[1] cap; ARGV[2..] score, member pairs
/// for every key. PUSH for many keys in one call: fan-out pays the script
/// call once per group of keys instead of once per follower. (On Redis
/// Cluster the keys of one call must share a slot.) Returns entries added.
pub static PUSH_MANY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{TRIM}
local cap = tonumber(ARGV[1])
local added = 0
for k = 1, #KEYS do
  local raw = redis.call('ZSCORE', KEYS[k], '')
  if raw then
    local floor = floor_of(raw)
    for i = 2, #ARGV, 2 do
      if floor == nil or tonumber(ARGV[i]) >= floor then
        added = added + redis.call('ZADD', KEYS[k], ARGV[i], ARGV[i + 1])
      end
    end
    if floor ~= nil then trim(KEYS[k], cap) end
  end
end
return added
"#
    ))
});

/// BEGIN: KEYS[1] feed ZSET; ARGV[1] ttl seconds. Creates a ZSET in the
/// building state if the key is missing; returns 1 if this caller builds it.
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

/// FILL: KEYS[1] feed ZSET; ARGV[1] cap; ARGV[2] floor ('-inf' or a score);
/// ARGV[3..] score, member pairs. Completes a build: adds the entries, sets
/// the floor (never lowering a floor already set), drops what lies below it
/// and trims. A key that vanished meanwhile is left missing. Returns 1 if filled.
pub static FILL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{TRIM}
local raw = redis.call('ZSCORE', KEYS[1], '')
if not raw then return 0 end
for i = 3, #ARGV, 2 do
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1])
end
local floor = floor_of(ARGV[2])
local current = floor_of(raw)
if current ~= nil and current > floor then floor = current end
local text = ARGV[2]
if floor ~= floor_of(ARGV[2]) then text = raw end
redis.call('ZADD', KEYS[1], text, '')
if floor ~= -math.huge then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. text)
end
redis.call('PERSIST', KEYS[1])
trim(KEYS[1], tonumber(ARGV[1]))
return 1
"#
    ))
});
