-- One denial of a key under a rule's penalty, counted for the whole fleet:
-- `Penalty::escalate` (throttle-fleet-core, operate/penalty.rs) step for
-- step. When it starts a block, the block is written to the blocks table
-- and the log, as an operator's would be.
--
-- KEYS[1]: the key's history (a hash: ws, n, lvl, last); KEYS[2]: the
-- blocks table; KEYS[3]: the log; KEYS[4]: the blocks table's sweep
-- cursor (`sweep.lua`); KEYS[5]: the stamps table (`op.lua`), which
-- orders this block against an operator's changes made later; KEYS[6]:
-- its sweep cursor; KEYS[7]: the epoch (`poll.lua`), written here if
-- Redis has none. ARGV: now (µs, 0 = Redis TIME), after, within (µs),
-- block (µs), max (µs), memory (µs), field (`<rule> <key>`), most entries
-- kept in the log, the channel a block is published on, how long a stamp
-- is kept at least (µs).
-- Reply: 0, or `<length> <level> <until>` of the block it started.
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local after, within, block = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local max, memory = tonumber(ARGV[5]), tonumber(ARGV[6])
local h = redis.call('HMGET', KEYS[1], 'ws', 'n', 'lvl', 'last')
local ws, n = tonumber(h[1] or '0'), tonumber(h[2] or '0')
local lvl, last = tonumber(h[3] or '0'), tonumber(h[4] or '0')
if n == 0 or now >= ws + within then
  ws = now
  n = 0
end
n = n + 1
local reply = 0
if n >= after then
  n = 0
  if last ~= 0 and now <= last + memory then lvl = lvl + 1 else lvl = 0 end
  local length = math.min(block * 2 ^ math.min(lvl, 40), max)
  last = now + length
  local value = string.format('%.0f %d ', last, lvl)
  redis.call('HSET', KEYS[2], ARGV[7], value)
  local id = redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[8], '*', 'o', 'b', 'f', ARGV[7], 'v', value)
  redis.call('PUBLISH', ARGV[9], id)
  redis.call('SET', KEYS[7], string.format('%.0f', now), 'NX')
  redis.call('HSET', KEYS[5], ARGV[7], string.format('%.0f %.0f', math.max(last, now + tonumber(ARGV[10])), now))
  sweep(KEYS[5], KEYS[6], now, false)
  reply = string.format('%.0f %d %.0f', length, lvl, last)
  sweep(KEYS[2], KEYS[4], now, false)
end
redis.call('HSET', KEYS[1], 'ws', string.format('%.0f', ws), 'n', n, 'lvl', lvl, 'last', string.format('%.0f', last))
-- Kept until it is back to a key never denied.
local idle = math.max(ws + within, 0)
if last ~= 0 then idle = math.max(idle, last + memory) end
redis.call('PEXPIRE', KEYS[1], math.floor((idle - now) / 1000) + 1000)
return reply
