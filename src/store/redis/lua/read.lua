local prefix, max, fetch, home = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == 'home'
local cap = fetch + 1 + tonumber(ARGV[5])
local reader, own = ARGV[6], home and ARGV[7] == '1'
if home then
  local f = redis.call('HGET', KEYS[1], '')
  if not f then return {'missing:following'} end
  if f == 'b' then return {'building:following'} end
  local p = redis.call('HGET', KEYS[3], '')
  if not p then return {'missing:pulled'} end
  if p == 'b' then return {'building:pulled'} end
end
if redis.call('SISMEMBER', KEYS[6], '0') == 0 then
  if redis.call('SISMEMBER', KEYS[6], 'b') == 1 then return {'building:hidden'} end
  return {'missing:hidden'}
end
local sources = {{author = '', key = KEYS[2], chunk = fetch + 1}}
if home then
  -- The pulled authors the reader follows: the two SETs of names
  -- intersected, each holding '0' while it is there.
  local authors, named = {}, false
  for _, a in ipairs(redis.call('SINTER', KEYS[4], KEYS[5])) do
    if a == '0' then named = true else authors[#authors + 1] = a end
  end
  if not named then
    if redis.call('SISMEMBER', KEYS[4], '0') == 0 then return {'missing:following'} end
    return {'missing:pulled'}
  end
  if own and redis.call('SISMEMBER', KEYS[5], reader) == 1 then authors[#authors + 1] = reader end
  table.sort(authors)
  -- No hidden account's outbox is pulled.
  local hidden = {}
  if #authors > 0 then hidden = redis.call('SMISMEMBER', KEYS[6], unpack(authors)) end
  for i, a in ipairs(authors) do
    if hidden[i] == 0 then
      sources[#sources + 1] = {author = a, key = prefix .. 'outbox:{' .. a .. '}', chunk = OUTBOX_CHUNK}
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
local part, seen, count, last, bound = {}, {}, 0, nil, horizon
if usable then
  for _, src in ipairs(sources) do
    src.buf, src.i, src.read, src.kept = {}, 0, 0, {}
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
    best.kept[#best.kept + 1] = {s, m}
    if not seen[m] then
      seen[m] = true
      count = count + 1
      part[#part + 1] = {s, id_text(m)}
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
local ids, posts = {}, {}
for _, e in ipairs(part) do
  if e[1] > bound then
    ids[#ids + 1] = e[2]
    posts[#posts + 1] = redis.call('HMGET', prefix .. 'post:{' .. e[2] .. '}', 'a', 'd')
  end
end
-- An author is followed (its posts in the feed) unless it is hidden, or,
-- on a home, the reader does not follow it (itself, with `own`).
local follows, authors, known = {}, {}, {}
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
local meta = {}
for i, id in ipairs(ids) do
  local a = posts[i][1] or ''
  local f = 1
  if a ~= '' and not follows[a] then f = 0 end
  meta[#meta + 1] = id
  meta[#meta + 1] = a
  meta[#meta + 1] = posts[i][2] or ''
  meta[#meta + 1] = f
end
local out = {}
for _, src in ipairs(sources) do
  local kept, cut = {}, ''
  for _, e in ipairs(src.kept or {}) do
    if e[1] > bound then kept[#kept + 1] = e[2] end
  end
  if usable and not (src.ended and not src.hs) then
    cut = string.format('%d', bound)
  end
  out[#out + 1] = {src.author, src.floor or '', cut, kept}
end
return {'ok', out, meta}
