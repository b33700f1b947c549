if redis.call('SISMEMBER', KEYS[1], 'b') == 0 then return 0 end
for from = 1, #ARGV, 1000 do
  redis.call('SADD', KEYS[1], unpack(ARGV, from, math.min(from + 999, #ARGV)))
end
redis.call('SADD', KEYS[1], '0')
redis.call('SREM', KEYS[1], 'b')
redis.call('PERSIST', KEYS[1])
return 1
