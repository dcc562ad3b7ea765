-- Prepended to the scripts that write a table (`op.lua`, `penalty.lua`):
-- each write looks at the next few fields of the table (`HSCAN` from a
-- cursor kept beside it) and removes those whose entry has ended, so ended
-- blocks and resets leave without a scan of the whole table: a bounded cost
-- per write, whatever the table holds.
--
-- `resets`: the values are `<generation> <until>` (else `<until> ...`).
local function sweep(table, cursor_key, now, resets)
  local cursor = redis.call('GET', cursor_key) or '0'
  local page = redis.call('HSCAN', table, cursor, 'COUNT', 16)
  local fields = page[2]
  for i = 1, #fields, 2 do
    local v = fields[i + 1]
    local untl
    if resets then untl = string.match(v, '^%S+ (%d+)') else untl = string.match(v, '^(%d+)') end
    if tonumber(untl or '0') <= now then redis.call('HDEL', table, fields[i]) end
  end
  redis.call('SET', cursor_key, page[1])
end
