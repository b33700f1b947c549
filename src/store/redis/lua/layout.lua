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
