-- One source's window: its floor (false for a missing key), whether the
-- window reached the sentinel (1) or not (0), its entries from the
-- first scored at most `max` on, `take` elements of the list at the most
-- (the sentinel, if among them, left out), and, for a list that is not
-- building, the list's index of the first of them.
local function read_source(key, max, take)
  local n = redis.call('LLEN', key)
  if n == 0 then return {false, 0, {}} end
  local floor = redis.call('LINDEX', key, -1)
  if floor_of(floor) == nil then return {floor, 0, {}} end
  local from = find(key, n, max)
  local r = redis.call('LRANGE', key, from, from + take - 1)
  if from + take < n then return {floor, 0, r, from} end
  table.remove(r)
  return {floor, 1, r, from}
end
