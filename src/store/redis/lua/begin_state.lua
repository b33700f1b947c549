if redis.call('EXISTS', KEYS[1]) == 1 and redis.call('SISMEMBER', KEYS[2], '0') == 1 then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('HSET', KEYS[1], '', 'b')
redis.call('SADD', KEYS[2], '0')
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[1]))
return 1
