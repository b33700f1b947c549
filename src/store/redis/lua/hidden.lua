if redis.call('SISMEMBER', KEYS[1], '0') == 1 then
  if ARGV[1] == 'add' then redis.call('SADD', KEYS[1], ARGV[2])
  else redis.call('SREM', KEYS[1], ARGV[2]) end
  return 1
end
if redis.call('SISMEMBER', KEYS[1], 'b') == 1 then redis.call('DEL', KEYS[1]) end
return 0
