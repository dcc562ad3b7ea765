-- What changed since an instance last read the log: the entries after
-- `last`, or (at start) the whole tables and the log's last id; or word
-- that Redis lost what the instance had read.
--
-- A loss is told two ways. The epoch, a key written once by the first
-- change made on a Redis that has none (`op.lua`, `penalty.lua`; a read
-- writes nothing): a Redis restarted without its data has another epoch,
-- or none. And the last entry the instance read: when the log no
-- longer has it, Redis lost it (a replica promoted before it had it) or
-- trimmed it (the instance fell more than the log's length behind).
-- Either way the instance sends again the blocks it holds, which the
-- stamps order against the changes Redis kept (`op.lua`), then loads the
-- tables (`outbox.rs`, `listen.rs`).
--
-- KEYS[1]: the log; KEYS[2]: the blocks table; KEYS[3]: the resets
-- table; KEYS[4]: the epoch.
-- ARGV: last id read (empty: load everything), most entries returned,
-- the epoch the instance read last (empty: none yet; `*`: any, the load
-- after a loss; `-`: Redis had none).
-- Reply: {'e', epoch, entries...} (each `{id, {field, value, ...}}`),
-- {'t', epoch, last id, blocks (field, value, ...), resets (field,
-- value, ...)}, or {'l', epoch}: lost.
local last, known = ARGV[1], ARGV[3]
local epoch = redis.call('GET', KEYS[4]) or '-'
if known ~= '' and known ~= '*' and known ~= epoch then return {'l', epoch} end
if last == '' then
  local tip = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
  local id = '0-0'
  if #tip > 0 then id = tip[1][1] end
  return {'t', epoch, id, redis.call('HGETALL', KEYS[2]), redis.call('HGETALL', KEYS[3])}
end
if last ~= '0-0' and #redis.call('XRANGE', KEYS[1], last, last) == 0 then
  return {'l', epoch}
end
local entries = redis.call('XRANGE', KEYS[1], last, '+', 'COUNT', tonumber(ARGV[2]) + 1)
local out = {'e', epoch}
for i = 1, #entries do
  if entries[i][1] ~= last then out[#out + 1] = entries[i] end
end
return out
