-- What changed since an instance last read the log: the entries after
-- `last`, or (at start, or when entries it had not read were trimmed) the
-- whole tables and the log's last id.
--
-- KEYS[1]: the log; KEYS[2]: the blocks table; KEYS[3]: the resets table.
-- ARGV: last id read (empty: load everything), most entries returned.
-- Reply: {'e', entries...} (each `{id, {field, value, ...}}`), or
-- {'t', last id, blocks (field, value, ...), resets (field, value, ...)}.
local last = ARGV[1]
local function tables()
  local tip = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
  local id = '0-0'
  if #tip > 0 then id = tip[1][1] end
  return {'t', id, redis.call('HGETALL', KEYS[2]), redis.call('HGETALL', KEYS[3])}
end
if last == '' then return tables() end
local function parts(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local head = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
if #head > 0 and last ~= '0-0' then
  local hm, hs = parts(head[1][1])
  local lm, ls = parts(last)
  -- The oldest entry kept is newer than the last one read: what lay
  -- between may have been trimmed.
  if hm > lm or (hm == lm and hs > ls) then return tables() end
end
local entries = redis.call('XRANGE', KEYS[1], last, '+', 'COUNT', tonumber(ARGV[2]) + 1)
local out = {'e'}
for i = 1, #entries do
  if entries[i][1] ~= last then out[#out + 1] = entries[i] end
end
return out
