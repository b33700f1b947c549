if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('SADD', KEYS[1], 'b')
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
return 1
