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
-- Takes a building list's mark off its head (clause 5), for the entries
-- to go in below it; `mark` puts it back.
local function unmark(key)
  if redis.call('LINDEX', key, 0) == 'inf' and redis.call('LLEN', key) > 1 then
    redis.call('LPOP', key)
  end
end
local function mark(key)
  redis.call('LPUSH', key, 'inf')
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
  if floor == nil then unmark(key) end
  local added = 0
  if #kept >= MERGE_FROM then
    added = merge(key, kept)
  else
    for _, x in ipairs(kept) do added = added + insert(key, x[1], x[2]) end
  end
  if floor == nil then mark(key) else trim(key, cap) end
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
