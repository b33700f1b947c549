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
