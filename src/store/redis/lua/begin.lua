if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('RPUSH', KEYS[1], 'inf', 'inf')
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
return 1
