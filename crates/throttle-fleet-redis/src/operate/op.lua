-- An operator's change to one key, for the whole fleet: a block, its end,
-- or a reset. Writes the table every instance loads at start, appends the
-- change to the log every instance reads, and publishes that it did.
--
-- Blocks and unblocks are ordered by the time they were made (on the
-- instance that took them), not by when they arrive: a change that waited
-- on its instance while Redis could not be asked (`outbox.rs`) does not
-- undo a later one. The time of each key's last change is kept in the
-- stamps table (`<kept until µs> <made µs>`); a change older than it is
-- not applied, and the answer is what holds instead.
--
-- KEYS[1]: the log (a stream); KEYS[2]: the table (a hash: blocks or
-- resets); KEYS[3]: the table's sweep cursor (`sweep.lua`); KEYS[4]: the
-- key's penalty history (`penalty.lua`), which a reset forgets; KEYS[5]:
-- the stamps table; KEYS[6]: its sweep cursor; KEYS[7]: the epoch
-- (`poll.lua`), written here if Redis has none.
-- ARGV: op (`b` block, `u` unblock, `r` reset), field
-- (`<rule> <key>`), value (a block's `<until> <level> <label>`; a reset's
-- `<until>`, to which its generation, the log entry's id, is prefixed),
-- now (µs, 0 = Redis TIME), most entries kept in the log, the channel
-- the change is published on (its log id), when the change was made (µs;
-- blocks and unblocks), until when its stamp is kept (µs).
-- Reply: the log entry's id; or, for a change older than the key's last,
-- {'s', the block that holds (its value) or ''}.
local op, field, value = ARGV[1], ARGV[2], ARGV[3]
local now = tonumber(ARGV[4])
if now == 0 then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
redis.call('SET', KEYS[7], string.format('%.0f', now), 'NX')
if op ~= 'r' then
  local held = redis.call('HGET', KEYS[5], field)
  if held then
    local prior = tonumber(string.match(held, ' (%d+)$') or '0')
    if prior > tonumber(ARGV[7]) then
      return {'s', redis.call('HGET', KEYS[2], field) or ''}
    end
  end
  redis.call('HSET', KEYS[5], field, ARGV[8] .. ' ' .. ARGV[7])
  sweep(KEYS[5], KEYS[6], now, false)
end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[5], '*', 'o', op, 'f', field, 'v', value)
if op == 'u' then
  redis.call('HDEL', KEYS[2], field)
elseif op == 'r' then
  redis.call('HSET', KEYS[2], field, id .. ' ' .. value)
  redis.call('DEL', KEYS[4])
else
  redis.call('HSET', KEYS[2], field, value)
end
sweep(KEYS[2], KEYS[3], now, op == 'r')
redis.call('PUBLISH', ARGV[6], id)
return id
