local raw = redis.call('LINDEX', KEYS[1], -1)
if not raw or floor_of(raw) ~= nil then return 0 end
unmark(KEYS[1])
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
