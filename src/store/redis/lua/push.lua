local cap = tonumber(ARGV[1])
local entries = packed(3)
local added = 0
for k = 1, #KEYS do
  added = added + push(KEYS[k], cap, ARGV[2], entries)
end
return added
