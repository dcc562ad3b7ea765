-- Approximate-mode flush of many keys sharing one bucket hash. KEYS: the
-- bucket's hash for one interval. ARGV: this instance's id, the expiry in
-- ms (set when the hash has none), then for each key its field and this instance's
-- `count:span`. Each field holds `instance=count:span` entries separated by
-- commas; this instance's entry is replaced (so sending a flush again
-- changes nothing) and the other instances' `count:span` values are
-- returned, comma-separated, one string per key. Four commands for all
-- the keys, the EVALSHA included: HMGET, HSET and PEXPIRE NX (a hash
-- recreated after an eviction or a restart gets its expiry back).
local inst = ARGV[1]
local n = (#ARGV - 2) / 2
local fields = {}
for i = 1, n do fields[i] = ARGV[1 + 2 * i] end
local current = redis.call('HMGET', KEYS[1], unpack(fields))
local out, update = {}, {}
for i = 1, n do
  local list = inst .. '=' .. ARGV[2 + 2 * i]
  local others = {}
  if current[i] then
    for entry in string.gmatch(current[i], '[^,]+') do
      local id, value = string.match(entry, '^([^=]+)=(.+)$')
      if id and id ~= inst then
        list = list .. ',' .. entry
        others[#others + 1] = value
      end
    end
  end
  update[#update + 1] = fields[i]
  update[#update + 1] = list
  out[i] = table.concat(others, ',')
end
redis.call('HSET', KEYS[1], unpack(update))
redis.call('PEXPIRE', KEYS[1], ARGV[2], 'NX')
return out
