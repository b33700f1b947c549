if redis.call('HGET', KEYS[1], '') ~= 'b' or redis.call('SISMEMBER', KEYS[2], '0') == 0 then
  return 0
end
for i = 3, #ARGV do redis.call('HSET', KEYS[1], ARGV[i], 'F' .. ARGV[1]) end
for from = 3, #ARGV, 1000 do
  redis.call('SADD', KEYS[2], unpack(ARGV, from, math.min(from + 999, #ARGV)))
end
redis.call('HSET', KEYS[1], '', ARGV[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[2]))
return 1
