-- Each key's window (KEYS[1], then ARGV[3..]), its entries packed end to
-- end in one string when they all take 9 bytes (as ids below 2^32 do),
-- else as a list.
local max, take = ARGV[1], tonumber(ARGV[2])
local out = {}
local function add(key)
  local read = read_source(key, max, take)
  local entries = read[3]
  local packed = table.concat(entries)
  if #packed == 9 * #entries then read[3] = packed end
  out[#out + 1] = read
end
add(KEYS[1])
for i = 3, #ARGV do add(ARGV[i]) end
return out
