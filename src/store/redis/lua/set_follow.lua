local state = redis.call('HGET', KEYS[1], '')
local applied = 0
-- Whether no copy tells which change is the newest.
local unknown = not state
if state == 'b' or (state and not named(KEYS[3])) then
  redis.call('DEL', KEYS[1], KEYS[3])
  unknown = true
elseif state then
  local seq = tonumber(ARGV[2])
  local cur = redis.call('HGET', KEYS[1], ARGV[1])
  if seq > tonumber(state) and (not cur or seq_of(cur) < seq) then
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[3] .. seq)
    if ARGV[3] == 'F' then
      redis.call('SADD', KEYS[3], ARGV[1])
    else
      redis.call('SREM', KEYS[3], ARGV[1])
    end
    applied = 1
  end
end
local entries = packed(7)
if ARGV[4] == 'push' then
  push(KEYS[2], tonumber(ARGV[5]), ARGV[6], entries)
elseif ARGV[4] == 'remove' and applied == 1 then
  remove_all(KEYS[2], entries)
elseif ARGV[4] == 'remove' and unknown then
  -- The author's posts may have to go, or a newer follow may have brought
  -- them: the inbox is built again from the records.
  redis.call('DEL', KEYS[2])
end
return applied
