local state = redis.call('HGET', KEYS[1], '')
local seq, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local applied = 0
if state == 'b' or (state and not named(KEYS[3])) then
  redis.call('DEL', KEYS[1], KEYS[3])
elseif state and seq > tonumber(state) then
  for i = 3, 2 + 2 * n, 2 do
    local cur = redis.call('HGET', KEYS[1], ARGV[i])
    if not cur or seq_of(cur) < seq then
      redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1] .. seq)
      if ARGV[i + 1] == 'F' then
        redis.call('SADD', KEYS[3], ARGV[i])
      else
        redis.call('SREM', KEYS[3], ARGV[i])
      end
      applied = applied + 1
    end
  end
end
local at = 3 + 2 * n
push(KEYS[2], tonumber(ARGV[at]), ARGV[at + 1], packed(at + 2))
return applied
