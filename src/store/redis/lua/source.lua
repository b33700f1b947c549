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
