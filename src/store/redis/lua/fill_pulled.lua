if redis.call('HGET', KEYS[1], '') ~= 'b' or not named(KEYS[2]) then return 0 end
for i = 1, #ARGV, 3 do
  local cur = redis.call('HGET', KEYS[1], ARGV[i])
  local epoch, ids = nil, {}
  if cur then epoch, ids = parse_pulled(cur) end
  epoch = later(epoch, tonumber(ARGV[i + 1]))
  for id in string.gmatch(ARGV[i + 2], '[^,]+') do ids[id] = true end
  store_pulled(KEYS[1], KEYS[2], ARGV[i], epoch, ids)
end
redis.call('HSET', KEYS[1], '', 'c')
redis.call('PERSIST', KEYS[1])
redis.call('PERSIST', KEYS[2])
return 1
