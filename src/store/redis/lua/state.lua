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
