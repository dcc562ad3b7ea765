-- The flush script of 0.1, kept verbatim for the tests that run it beside
-- today's (a rolling upgrade: old and new instances on one Redis).
--
-- Approximate-mode flush of many keys sharing one bucket hash: writes this
-- instance's count of each key and hands it a claim on what the fleet has
-- left (see flush.rs for the protocol and the bound it gives).
--
-- KEYS[1]: the bucket's hash for the interval written; KEYS[2]: the same
-- bucket's hash for the interval before (read for the sliding estimate).
-- ARGV: instance id, expiry (ms, set when a field is added), limit, weight
-- of the previous interval (x1000, 0 for a fixed window), writer's span
-- (absolute), fleet size the writer knows, credit per instance, sequence
-- number of this flush, overdraft per key and interval; then per key: field, count, hold, demand, the
-- fleet count the writer last heard (a floor should Redis have lost data),
-- and the cost of the writer's requests waiting for this answer (need).
--
-- Each field holds `@<first span>:<overdraft>` then
-- `,<id>=<seq>:<count>:<claim>:<span>:<demand>` entries, one per instance. The reply is one string per key:
-- `<fleet count>:<claim>:<limit now>:<instances>:<previous total>:<estimate>:<rate>:<free>`
-- (estimate: the fleet count with every other entry brought forward by its
-- demand over the spans since it was written; rate: the others' demand;
-- free: what no instance holds a claim on after this one's), or
-- `S` when this instance already wrote a later flush (a late flush never
-- overwrites a newer count).
local inst, ttl = ARGV[1], ARGV[2]
local limit, weight = tonumber(ARGV[3]), tonumber(ARGV[4])
local span, fleet, credit, seq = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local overdraft = tonumber(ARGV[9])
local n = (#ARGV - 9) / 6
local fields = {}
for i = 1, n do fields[i] = ARGV[4 + 6 * i] end
local current = redis.call('HMGET', KEYS[1], unpack(fields))
local previous = {}
if weight > 0 then previous = redis.call('HMGET', KEYS[2], unpack(fields)) end
local out, update = {}, {}
for i = 1, n do
  local base = 4 + 6 * i
  local cum, hold, demand = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
  local known, need = tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5])
  local first, stale, overdrawn = span, false, 0
  local others, spent, claimed, wanted, count = {}, cum, 0, demand, 0
  local estimate, rate = cum, 0
  local value = current[i]
  if value then
    for entry in string.gmatch(value, '[^,]+') do
      if string.sub(entry, 1, 1) == '@' then
        local f, o = string.match(entry, '^@(%d+):?(%d*)$')
        first = tonumber(f)
        if o ~= '' then overdrawn = tonumber(o) end
      else
        local id, eseq, ecum, eclaim, espan, edemand =
          string.match(entry, '^([^=]+)=(%d+):(%d+):(%d+):(%d+):(%d+)$')
        if id == inst then
          if tonumber(eseq) > seq then stale = true end
        elseif id then
          ecum, eclaim = tonumber(ecum), tonumber(eclaim)
          others[#others + 1] = entry
          count = count + 1
          spent = spent + ecum
          edemand, espan = tonumber(edemand), tonumber(espan)
          estimate = estimate + ecum + edemand * math.max(0, span - espan)
          rate = rate + edemand
          if espan + 2 >= span then
            -- A live claim: its owner may spend up to it.
            claimed = claimed + math.max(ecum, eclaim)
            wanted = wanted + edemand
          else
            -- Expired: its owner stopped spending it, but may have spent
            -- all of it without a write that got here.
            claimed = claimed + math.max(ecum, eclaim)
          end
        end
      end
    end
  end
  if stale then
    out[i] = 'S'
  else
    local prev = 0
    if previous[i] then
      for c in string.gmatch(previous[i], '=%d+:(%d+):') do prev = prev + tonumber(c) end
    end
    local now_limit = limit - math.floor(prev * weight / 1000)
    -- Instances the writer knows of that have not written this key yet may
    -- each spend their credit: keep it for them during the key's first two
    -- spans.
    local reserve = 0
    if span <= first + 1 then reserve = math.max(0, fleet - 1 - count) * credit end
    -- `known`: what the writer heard last; more than Redis holds only if
    -- Redis lost data (a restart or failover), when it is the better floor.
    spent = math.max(spent, known)
    local free = now_limit - math.max(claimed + cum, known) - reserve
    local pool = now_limit - spent
    local share = 0
    if wanted > 0 then share = math.floor(pool * demand / wanted) end
    -- Claims made on demand seen take at most half of what is free, and
    -- leave one unit per instance known unclaimed (while the fleet has that
    -- much): requests waiting for an answer get what they need from what is
    -- free, whatever the shares say, however the traffic moves. Not once
    -- the key's demand is more than twice what is left (a key over its
    -- quota), nor while no other instance is known: then what is free goes
    -- by the shares.
    local spare = free
    local others_known = math.max(fleet - 1, count)
    if wanted <= 2 * pool and others_known > 0 then
      spare = math.min(free - math.min(pool, others_known + 1), math.floor(free / 2))
    end
    local grant = math.max(0, math.min(free, math.max(need, math.min(spare, share, 3 * demand))))
    -- Waiting requests the free part cannot cover, while the fleet has not
    -- spent the limit (the rest is claimed by instances that may not spend
    -- it): a small overdraft per key and interval covers them (flush.rs:
    -- the bound counts it).
    if need > grant then
      local extra = math.min(need - grant, overdraft - overdrawn, pool - grant)
      if extra > 0 then
        grant = grant + extra
        overdrawn = overdrawn + extra
      end
    end
    local claim = math.max(hold, cum + grant)
    local list = '@' .. first .. ':' .. overdrawn .. ',' .. inst .. '=' .. seq .. ':' .. cum .. ':' .. claim .. ':' .. span .. ':' .. demand
    for j = 1, #others do list = list .. ',' .. others[j] end
    update[#update + 1] = fields[i]
    update[#update + 1] = list
    out[i] = spent .. ':' .. claim .. ':' .. now_limit .. ':' .. (count + 1) .. ':' .. prev
      .. ':' .. math.max(estimate, spent) .. ':' .. rate .. ':' .. math.max(0, free - grant)
  end
end
if #update > 0 then
  if redis.call('HSET', KEYS[1], unpack(update)) > 0 then
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
end
-- One string, the keys' replies separated by spaces: a reply array costs the
-- client a parsed value per key.
return table.concat(out, ' ')
