-- Approximate-mode flush of many keys sharing one bucket hash: writes this
-- instance's count of each key and hands it a claim on what the fleet has
-- left. `claims.rs` mirrors this script line for line and holds the
-- formula, the bound and the field format; a test runs both on the same
-- random inputs.
--
-- KEYS[1]: the bucket's hash for the interval written; KEYS[2]: the same
-- bucket's hash for the interval before (read for the sliding estimate).
-- ARGV: instance id, expiry (ms, set when a field is added), limit, weight
-- of the previous interval (x1000, 0 for a fixed window), writer's span
-- (absolute), fleet size the writer knows, credit per instance, sequence
-- number of this flush, overdraft per key and interval, first span of the
-- interval written (absolute); then per key: field, count, hold, demand,
-- the fleet count the writer last heard, and the cost of the writer's
-- requests waiting for this answer (need).
--
-- A key `K` has one field `K` with `@<first span>:<overdrawn>` and the
-- sums of the instances as one entry
-- `~<instances>;<demand x span>;<span>.<demand>;...=0:<counts>:<holds>:<last span>:<demands>`,
-- and one field `K.<id>` per instance with its
-- `<seq>:<count>:<claim>:<span>:<demand>`. A write reads and rewrites two
-- fields: its cost does not grow with the instances.
--
-- The reply is one string per key:
-- `<fleet count>:<claim>:<limit now>:<instances>:<previous total>:<estimate>:<rate>:<free>`,
-- or `S` when this instance already wrote a later flush.
local inst, ttl = ARGV[1], ARGV[2]
local limit, weight = tonumber(ARGV[3]), tonumber(ARGV[4])
local span, fleet, credit, seq = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local overdraft, base = tonumber(ARGV[9]), tonumber(ARGV[10])
local ARGS = 10
local n = (#ARGV - ARGS) / 6
local rel = span - base
local fields, names = {}, {}
for i = 1, n do
  local name = ARGV[ARGS + 1 + 6 * (i - 1)]
  names[i] = name
  fields[2 * i - 1] = name
  fields[2 * i] = name .. '.' .. inst
end
local current = redis.call('HMGET', KEYS[1], unpack(fields))
local previous = {}
if weight > 0 then previous = redis.call('HMGET', KEYS[2], unpack(names)) end
local function int(x) return string.format('%.0f', x) end
local out, update, fresh = {}, {}, false
for i = 1, n do
  local b = ARGS + 1 + 6 * (i - 1)
  local cum, hold, demand = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local known, need = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
  local first, overdrawn, stale = span, 0, false
  -- The sums of the instances writing `K.<id>` fields.
  local members, counts, holds, demands, dspan, last = 0, 0, 0, 0, 0, 0
  local by_span = {}
  local count, spent, claimed, wanted, estimate, rate = 0, cum, 0, demand, cum, 0
  local value = current[2 * i - 1]
  if not value then fresh = true end
  if value then
    for entry in string.gmatch(value, '[^,]+') do
      local c = string.sub(entry, 1, 1)
      if c == '@' then
        local f, o = string.match(entry, '^@(%d+):?(%d*)$')
        first = tonumber(f)
        if o ~= '' then overdrawn = tonumber(o) end
      elseif c == '~' then
        local m, ds, list, ec, eh, es, ed =
          string.match(entry, '^~(%d+);(%d+);([^=]*)=%d+:(%d+):(%d+):(%d+):(%d+)$')
        if m then
          members, dspan, counts, holds = tonumber(m), tonumber(ds), tonumber(ec), tonumber(eh)
          last, demands = tonumber(es), tonumber(ed)
          for s, d in string.gmatch(list, '(%d+)%.(%d+)') do by_span[tonumber(s)] = tonumber(d) end
        end
      end
    end
  end
  -- This instance's own entry leaves the sums; the others' stay.
  local mine = current[2 * i]
  if mine then
    local mseq, mcum, mclaim, mspan, mdemand = string.match(mine, '^(%d+):(%d+):(%d+):(%d+):(%d+)$')
    if mseq then
      if tonumber(mseq) > seq then stale = true end
      mcum, mclaim, mdemand = tonumber(mcum), tonumber(mclaim), tonumber(mdemand)
      local mrel = tonumber(mspan) - base
      members = math.max(0, members - 1)
      counts = math.max(0, counts - mcum)
      holds = math.max(0, holds - math.max(mcum, mclaim))
      demands = math.max(0, demands - mdemand)
      dspan = math.max(0, dspan - mdemand * mrel)
      if by_span[mrel] then by_span[mrel] = math.max(0, by_span[mrel] - mdemand) end
    end
  end
  if stale then
    out[i] = 'S'
  else
    count = count + members
    spent = spent + counts
    claimed = claimed + holds
    estimate = estimate + counts + math.max(0, rel * demands - dspan)
    rate = rate + demands
    for s, d in pairs(by_span) do
      if s + 2 >= rel then wanted = wanted + d end
    end
    -- The previous interval's total, and what it probably lacks: per entry,
    -- the smaller of its demand and what its claim leaves beyond its count
    -- (an instance writes an interval's last count a little after the
    -- next one starts, with demand 0).
    local prev, unwritten = 0, 0
    if previous[i] then
      for c, h, d in string.gmatch(previous[i], '=%d+:(%d+):(%d+):%d+:(%d+)') do
        c = tonumber(c)
        prev = prev + c
        unwritten = unwritten + math.min(tonumber(d), math.max(0, tonumber(h) - c))
      end
    end
    local now_limit = limit - math.floor(prev * weight / 1000)
    -- (what the previous interval's unwritten part will take of the limit)
    local unwritten_now = math.floor((prev + unwritten) * weight / 1000) - (limit - now_limit)
    local reserve = 0
    if span <= first + 1 then reserve = math.max(0, fleet - 1 - count) * credit end
    spent = math.max(spent, known)
    local free = now_limit - math.max(claimed + cum, known) - reserve
    local pool = now_limit - spent
    local share = 0
    if wanted > 0 then share = math.floor(pool * demand / wanted) end
    -- A claim beyond the requests waiting is sized on what is free once
    -- the previous interval's unwritten part is in.
    local likely = free - unwritten_now
    local spare = likely
    local others_known = math.max(fleet - 1, count)
    if wanted <= 2 * pool and others_known > 0 then
      spare = math.min(likely - math.min(pool, others_known + 1), math.floor(likely / 2))
    end
    local grant = math.max(0, math.min(free, math.max(need, math.min(spare, share, 3 * demand))))
    if need > grant then
      local extra = math.min(need - grant, overdraft - overdrawn, pool - grant)
      if extra > 0 then
        grant = grant + extra
        overdrawn = overdrawn + extra
      end
    end
    local claim = math.max(hold, cum + grant)
    -- This instance's entry joins the sums again, as written now.
    members = members + 1
    counts = counts + cum
    holds = holds + math.max(cum, claim)
    demands = demands + demand
    dspan = dspan + demand * rel
    last = math.max(last, span)
    by_span[rel] = (by_span[rel] or 0) + demand
    -- Spans no writer a span behind this one counts as live are dropped.
    local kept = {}
    for s, d in pairs(by_span) do
      if s + 3 >= rel and d > 0 then kept[#kept + 1] = s end
    end
    table.sort(kept)
    local list = {}
    for j = 1, #kept do list[j] = kept[j] .. '.' .. int(by_span[kept[j]]) end
    local field = '@' .. first .. ':' .. overdrawn .. ',~' .. members .. ';' .. int(dspan) .. ';'
      .. table.concat(list, ';') .. '=0:' .. int(counts) .. ':' .. int(holds) .. ':' .. last
      .. ':' .. int(demands)
    update[#update + 1] = fields[2 * i - 1]
    update[#update + 1] = field
    update[#update + 1] = fields[2 * i]
    update[#update + 1] = seq .. ':' .. cum .. ':' .. claim .. ':' .. span .. ':' .. demand
    out[i] = spent .. ':' .. claim .. ':' .. now_limit .. ':' .. (count + 1) .. ':' .. prev
      .. ':' .. math.max(estimate, spent) .. ':' .. rate .. ':' .. math.max(0, free - grant)
  end
end
-- The hash's expiry is set when a key's first field is: an instance's own
-- entry joining a key already there needs none.
if #update > 0 then
  redis.call('HSET', KEYS[1], unpack(update))
  if fresh then redis.call('PEXPIRE', KEYS[1], ttl) end
end
-- One string, the keys' replies separated by spaces: a reply array costs the
-- client a parsed value per key.
return table.concat(out, ' ')
