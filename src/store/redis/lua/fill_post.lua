redis.call('HSETNX', KEYS[1], 'a', ARGV[2])
redis.call('HSETNX', KEYS[1], 'u', ARGV[3])
redis.call('HSETNX', KEYS[1], 'b', ARGV[4])
redis.call('HSETNX', KEYS[1], 't', ARGV[5])
redis.call('HSETNX', KEYS[1], 'm', ARGV[7])
if ARGV[6] == '1' then redis.call('HSET', KEYS[1], 'd', '1') end
if redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1])) end
return 1
