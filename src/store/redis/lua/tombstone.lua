redis.call('HSET', KEYS[1], 'd', '1')
if redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1])) end
return 1
