//! The Lua scripts of the exact and leased modes. Each mirrors a meter of
//! `throttle_fleet_core::algorithm` line by line, in integer microseconds held in
//! Lua numbers (doubles, exact below 2^53), and returns the state it ended
//! with; the shared Rust code turns that state into remaining, reset and
//! retry-after, so both backends report the same figures. Differential tests
//! run the same timelines through both.
//!
//! Conventions of every script:
//! - `ARGV[1]` is "now" in microseconds, or `0` to read Redis `TIME` (the
//!   default: one clock for the whole fleet).
//! - State is one value per key, two doubles packed with Redis' bundled
//!   `struct` library (exact for the integers stored, no number formatting
//!   or parsing), read with one `GET` and written with one `SET .. PX`.
//! - Every key expires a second past the time its state becomes equivalent
//!   to a fresh one, so nothing lives forever.
//! - The batch scripts and the lease script reply with one string of
//!   decimal integers separated by spaces (`%d` of the doubles, exact below 2^53): the client reads
//!   one bulk string instead of an array value per integer.
//! - The code is written inline, without helper functions: a function
//!   defined in a script is a new closure on every call, and the scripts run
//!   on every request.
//! - Each algorithm has a read too (an operator's inspect): what a check of
//!   cost 0 would find, in the reply the check's script gives, with no key
//!   written (no `SET`, no expiry moved, no entry added or dropped).

use std::sync::LazyLock;

use crate::link::LuaScript;

/// `now`: the caller's, or Redis `TIME`.
pub(crate) const NOW: &str = r#"
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
"#;

/// Fixed window refund. ARGV: acquired at, period, cost.
const FIXED_WINDOW_REFUND: &str = r#"
local at, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local s = redis.call('GET', KEYS[1])
if not s then return 0 end
local w, c = struct.unpack('dd', s)
local aw = math.floor(at / period)
if aw * period > at then aw = aw - 1 elseif (aw + 1) * period <= at then aw = aw + 1 end
if w == aw then
  redis.call('SET', KEYS[1], struct.pack('dd', w, math.max(0, c - cost)), 'KEEPTTL')
end
return 0
"#;

/// Sliding window counter refund. ARGV: acquired at, period, cost.
const SLIDING_COUNTER_REFUND: &str = r#"
local at, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local s = redis.call('GET', KEYS[1])
if not s then return 0 end
local w, cur, prev = struct.unpack('ddd', s)
local aw = math.floor(at / period)
if aw * period > at then aw = aw - 1 elseif (aw + 1) * period <= at then aw = aw + 1 end
if w == aw then
  redis.call('SET', KEYS[1], struct.pack('ddd', w, math.max(0, cur - cost), prev), 'KEEPTTL')
end
return 0
"#;

/// GCRA refund. ARGV: limit, increment (us, rem).
const GCRA_REFUND: &str = r#"
local l, inc_us, inc_rem = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local s = redis.call('GET', KEYS[1])
if not s then return 0 end
local t, r = struct.unpack('dd', s)
t, r = t - inc_us, r - inc_rem
if r < 0 then r = r + l; t = t - 1 end
if t < 0 then t = 0; r = 0 end
redis.call('SET', KEYS[1], struct.pack('dd', t, r), 'KEEPTTL')
return 0
"#;

/// GCRA lease: takes up to `want` tokens at once, and none unless at least
/// `need` fit. KEYS: state (TAT us, rem). ARGV: now, limit, emission
/// interval (us, rem), tau (us, rem), need, want. Returns {granted, tat_us,
/// tat_rem, now}.
const GCRA_LEASE: &str = r#"
local l = tonumber(ARGV[2])
local t_us, t_rem = tonumber(ARGV[3]), tonumber(ARGV[4])
local tau_us, tau_rem = tonumber(ARGV[5]), tonumber(ARGV[6])
local need, want = tonumber(ARGV[7]), tonumber(ARGV[8])
local s = redis.call('GET', KEYS[1])
local tat, rem = 0, 0
if s then tat, rem = struct.unpack('dd', s) end
local t, r = tat, rem
if t < now then t = now; r = 0 end
-- k tokens fit when (t, r) + k * (t_us, t_rem) leads now by at most tau.
-- Estimate k in doubles, then settle it exactly.
local k = math.floor(((tau_us - (t - now)) + (tau_rem - r) / l) / (t_us + t_rem / l))
if k > want then k = want end
if k < 0 then k = 0 end
local nt, nr
for _ = 1, 2 * want + 2 do
  local kr = r + k * t_rem
  local carry = math.floor(kr / l)
  if carry * l > kr then carry = carry - 1 elseif (carry + 1) * l <= kr then carry = carry + 1 end
  nt, nr = t + k * t_us + carry, kr - carry * l
  local lead = nt - now
  local fits = lead < tau_us or (lead == tau_us and nr <= tau_rem)
  if not fits then
    k = k - 1
  else
    -- Would one more fit?
    local kr2 = r + (k + 1) * t_rem
    local c2 = math.floor(kr2 / l)
    if c2 * l > kr2 then c2 = c2 - 1 elseif (c2 + 1) * l <= kr2 then c2 = c2 + 1 end
    local lead2 = t + (k + 1) * t_us + c2 - now
    local nr2 = kr2 - c2 * l
    if k < want and (lead2 < tau_us or (lead2 == tau_us and nr2 <= tau_rem)) then
      k = k + 1
    else
      break
    end
  end
  if k <= 0 then k = 0; nt = nil; break end
end
if k < need or k == 0 then return string.format('%d %d %d %d', 0, tat, rem, now) end
redis.call('SET', KEYS[1], struct.pack('dd', nt, nr), 'PX', math.floor((nt - now + 1) / 1000) + 1000)
return string.format('%d %d %d %d', k, nt, nr, now)
"#;

/// Fixed window, many checks in one call (any keys; a key repeated is read
/// once and written once). KEYS: one per check. ARGV: now, limit, period,
/// then each check's cost. Returns, per check, "allowed window count now";
/// the checks run in order, exactly as one call each would.
const FIXED_WINDOW_BATCH: &str = r#"
local limit, period = tonumber(ARGV[2]), tonumber(ARGV[3])
local cache, dirty, out = {}, {}, {}
for i = 1, #KEYS do
  local k = KEYS[i]
  local cost = tonumber(ARGV[3 + i])
  local st = cache[k]
  if not st then
    local s = redis.call('GET', k)
    if s then local w, c = struct.unpack('dd', s); st = {w, c} else st = {0, 0} end
    cache[k] = st
  end
  local t = now
  if t < st[1] * period then t = st[1] * period end
  local cw = math.floor(t / period)
  if cw * period > t then cw = cw - 1 elseif (cw + 1) * period <= t then cw = cw + 1 end
  if cw ~= st[1] then st[1] = cw; st[2] = 0 end
  local ok = 0
  if st[2] + cost <= limit then st[2] = st[2] + cost; ok = 1; dirty[k] = t end
  out[i] = string.format('%d %d %d %d', ok, st[1], st[2], t)
end
for k, t in pairs(dirty) do
  local st = cache[k]
  redis.call('SET', k, struct.pack('dd', st[1], st[2]), 'PX', math.floor(((st[1] + 1) * period - t) / 1000) + 1000)
end
return table.concat(out, ' ')
"#;

/// Sliding window counter, many checks in one call (as
/// [`FIXED_WINDOW_BATCH`]). ARGV: now, limit, period, then each check's
/// cost. Returns, per check, "allowed window cur prev now".
const SLIDING_COUNTER_BATCH: &str = r#"
local limit, period = tonumber(ARGV[2]), tonumber(ARGV[3])
local cache, dirty, out = {}, {}, {}
for i = 1, #KEYS do
  local k = KEYS[i]
  local cost = tonumber(ARGV[3 + i])
  local st = cache[k]
  if not st then
    local s = redis.call('GET', k)
    if s then local w, cur, prev = struct.unpack('ddd', s); st = {w, cur, prev} else st = {0, 0, 0} end
    cache[k] = st
  end
  local t = now
  if t < st[1] * period then t = st[1] * period end
  local cw = math.floor(t / period)
  if cw * period > t then cw = cw - 1 elseif (cw + 1) * period <= t then cw = cw + 1 end
  if cw == st[1] + 1 then st[3] = st[2]; st[2] = 0; st[1] = cw
  elseif cw > st[1] + 1 then st[3] = 0; st[2] = 0; st[1] = cw end
  local elapsed = t - st[1] * period
  local weighted = 0
  if st[3] > 0 then weighted = math.floor(st[3] * (period - elapsed) / period) end
  local ok = 0
  if weighted + st[2] + cost <= limit then st[2] = st[2] + cost; ok = 1; dirty[k] = t end
  out[i] = string.format('%d %d %d %d %d', ok, st[1], st[2], st[3], t)
end
for k, t in pairs(dirty) do
  local st = cache[k]
  redis.call('SET', k, struct.pack('ddd', st[1], st[2], st[3]), 'PX', math.floor(((st[1] + 2) * period - t) / 1000) + 1000)
end
return table.concat(out, ' ')
"#;

/// GCRA, many checks in one call (as [`FIXED_WINDOW_BATCH`]). ARGV: now,
/// limit, tau (us, rem), then each check's increment (us, rem). Returns, per
/// check, "allowed tat_us tat_rem", then now.
const GCRA_BATCH: &str = r#"
local l = tonumber(ARGV[2])
local tau_us, tau_rem = tonumber(ARGV[3]), tonumber(ARGV[4])
local cache, dirty, out = {}, {}, {}
for i = 1, #KEYS do
  local k = KEYS[i]
  local inc_us, inc_rem = tonumber(ARGV[3 + 2 * i]), tonumber(ARGV[4 + 2 * i])
  local st = cache[k]
  if not st then
    local s = redis.call('GET', k)
    if s then local a, b = struct.unpack('dd', s); st = {a, b} else st = {0, 0} end
    cache[k] = st
  end
  local t, r = st[1], st[2]
  if t < now then t = now; r = 0 end
  local nt, nr = t + inc_us, r + inc_rem
  if nr >= l then nr = nr - l; nt = nt + 1 end
  local lead = nt - now
  local ok = 0
  if lead < tau_us or (lead == tau_us and nr <= tau_rem) then
    st[1] = nt; st[2] = nr; ok = 1; dirty[k] = true
  end
  out[i] = string.format('%d %d %d', ok, st[1], st[2])
end
for k, _ in pairs(dirty) do
  local st = cache[k]
  redis.call('SET', k, struct.pack('dd', st[1], st[2]), 'PX', math.floor((st[1] - now + 1) / 1000) + 1000)
end
out[#out + 1] = string.format('%d', now)
return table.concat(out, ' ')
"#;

/// Sliding window log. KEYS: the log (sorted set of "seq:cost" scored by
/// time), its meta (total, seq). ARGV: now, limit, period, cost. Returns
/// {allowed, total, now, newest (-1 if none), fit (-1 if none)}: `fit` is the
/// time of the entry whose expiry makes room for a denied cost.
const SLIDING_LOG: &str = r#"
local limit, period, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local m = redis.call('GET', KEYS[2])
local total, seq = 0, 0
if m then total, seq = struct.unpack('dd', m) end
local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if newest[2] and now < tonumber(newest[2]) then now = tonumber(newest[2]) end
local cutoff = string.format('%.0f', now - period)
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff)
if #old > 0 then
  for i = 1, #old do total = total - tonumber(string.match(old[i], ':(%d+)$')) end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cutoff)
end
if total + cost <= limit then
  seq = seq + 1
  total = total + cost
  local ttl = math.floor(period / 1000) + 1000
  redis.call('ZADD', KEYS[1], string.format('%.0f', now), string.format('%.0f:%.0f', seq, cost))
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('SET', KEYS[2], struct.pack('dd', total, seq), 'PX', ttl)
  return {1, total, now, now, -1}
end
if #old > 0 then redis.call('SET', KEYS[2], struct.pack('dd', total, seq), 'KEEPTTL') end
local last = -1
if total > 0 then
  local n = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if n[2] then last = tonumber(n[2]) end
end
local need, freed, fit, from = total + cost - limit, 0, -1, 0
while fit < 0 do
  local batch = redis.call('ZRANGE', KEYS[1], from, from + 127, 'WITHSCORES')
  if #batch == 0 then break end
  for i = 1, #batch, 2 do
    freed = freed + tonumber(string.match(batch[i], ':(%d+)$'))
    if freed >= need then fit = tonumber(batch[i + 1]); break end
  end
  from = from + 128
end
return {0, total, now, last, fit}
"#;

/// Sliding window log refund. ARGV: acquired at, cost.
const SLIDING_LOG_REFUND: &str = r#"
local at, cost = ARGV[1], tonumber(ARGV[2])
local entries = redis.call('ZRANGEBYSCORE', KEYS[1], at, at)
for i = #entries, 1, -1 do
  if tonumber(string.match(entries[i], ':(%d+)$')) == cost then
    redis.call('ZREM', KEYS[1], entries[i])
    local m = redis.call('GET', KEYS[2])
    if m then
      local total, seq = struct.unpack('dd', m)
      redis.call('SET', KEYS[2], struct.pack('dd', math.max(0, total - cost), seq), 'KEEPTTL')
    end
    break
  end
end
return 0
"#;

/// Fixed window, read: [`FIXED_WINDOW_BATCH`] for one check of cost 0,
/// writing nothing. KEYS: the state. ARGV: now, limit, period. Returns
/// "allowed window count now".
const FIXED_WINDOW_READ: &str = r#"
local limit, period = tonumber(ARGV[2]), tonumber(ARGV[3])
local w, c = 0, 0
local s = redis.call('GET', KEYS[1])
if s then w, c = struct.unpack('dd', s) end
local t = now
if t < w * period then t = w * period end
local cw = math.floor(t / period)
if cw * period > t then cw = cw - 1 elseif (cw + 1) * period <= t then cw = cw + 1 end
if cw ~= w then w = cw; c = 0 end
local ok = 0
if c <= limit then ok = 1 end
return string.format('%d %d %d %d', ok, w, c, t)
"#;

/// Sliding window counter, read: [`SLIDING_COUNTER_BATCH`] for one check
/// of cost 0, writing nothing. KEYS: the state. ARGV: now, limit, period.
/// Returns "allowed window cur prev now".
const SLIDING_COUNTER_READ: &str = r#"
local limit, period = tonumber(ARGV[2]), tonumber(ARGV[3])
local w, cur, prev = 0, 0, 0
local s = redis.call('GET', KEYS[1])
if s then w, cur, prev = struct.unpack('ddd', s) end
local t = now
if t < w * period then t = w * period end
local cw = math.floor(t / period)
if cw * period > t then cw = cw - 1 elseif (cw + 1) * period <= t then cw = cw + 1 end
if cw == w + 1 then prev = cur; cur = 0; w = cw
elseif cw > w + 1 then prev = 0; cur = 0; w = cw end
local elapsed = t - w * period
local weighted = 0
if prev > 0 then weighted = math.floor(prev * (period - elapsed) / period) end
local ok = 0
if weighted + cur <= limit then ok = 1 end
return string.format('%d %d %d %d %d', ok, w, cur, prev, t)
"#;

/// GCRA, read: [`GCRA_BATCH`] for one check of cost 0, writing nothing.
/// KEYS: the state. ARGV: now, limit, tau (us, rem). Returns "allowed
/// tat_us tat_rem now".
const GCRA_READ: &str = r#"
local tau_us, tau_rem = tonumber(ARGV[3]), tonumber(ARGV[4])
local t, r = 0, 0
local s = redis.call('GET', KEYS[1])
if s then t, r = struct.unpack('dd', s) end
local nt, nr = t, r
if nt < now then nt = now; nr = 0 end
local lead = nt - now
local ok = 0
if lead < tau_us or (lead == tau_us and nr <= tau_rem) then ok = 1; t = nt; r = nr end
return string.format('%d %d %d %d', ok, t, r, now)
"#;

/// Sliding window log, read: [`SLIDING_LOG`] for a check of cost 0, writing
/// nothing: entries past the window are left out of the total, not dropped.
/// KEYS: the log, its meta. ARGV: now, limit, period (the check's cost,
/// if sent after them, is not read). Returns what the
/// check returns; a cost of 0 fits while the total is within the limit,
/// and counts (as the check's entry of cost 0 would) as the newest entry.
const SLIDING_LOG_READ: &str = r#"
local limit, period = tonumber(ARGV[2]), tonumber(ARGV[3])
local m = redis.call('GET', KEYS[2])
local total = 0
if m then total = struct.unpack('dd', m) end
local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if newest[2] and now < tonumber(newest[2]) then now = tonumber(newest[2]) end
local cutoff = string.format('%.0f', now - period)
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff)
for i = 1, #old do total = total - tonumber(string.match(old[i], ':(%d+)$')) end
if total <= limit then return {1, total, now, now, -1} end
local last = -1
local n = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', '(' .. cutoff, 'WITHSCORES', 'LIMIT', 0, 1)
if n[2] then last = tonumber(n[2]) end
local need, freed, fit, from = total - limit, 0, -1, 0
while fit < 0 do
  local batch = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. cutoff, '+inf', 'WITHSCORES', 'LIMIT', from, 128)
  if #batch == 0 then break end
  for i = 1, #batch, 2 do
    freed = freed + tonumber(string.match(batch[i], ':(%d+)$'))
    if freed >= need then fit = tonumber(batch[i + 1]); break end
  end
  from = from + 128
end
return {0, total, now, last, fit}
"#;

/// A script that reads "now" first.
fn script(body: &str) -> LuaScript {
    LuaScript::new(&[NOW, body].concat())
}

/// A script that takes no "now" (the refunds).
fn refund(body: &str) -> LuaScript {
    LuaScript::new(body)
}

pub(crate) static FIXED_WINDOW_REFUND_SCRIPT: LazyLock<LuaScript> =
    LazyLock::new(|| refund(FIXED_WINDOW_REFUND));
pub(crate) static SLIDING_COUNTER_REFUND_SCRIPT: LazyLock<LuaScript> =
    LazyLock::new(|| refund(SLIDING_COUNTER_REFUND));
pub(crate) static FIXED_WINDOW_BATCH_SCRIPT: LazyLock<LuaScript> =
    LazyLock::new(|| script(FIXED_WINDOW_BATCH));
pub(crate) static SLIDING_COUNTER_BATCH_SCRIPT: LazyLock<LuaScript> =
    LazyLock::new(|| script(SLIDING_COUNTER_BATCH));
pub(crate) static GCRA_BATCH_SCRIPT: LazyLock<LuaScript> = LazyLock::new(|| script(GCRA_BATCH));
pub(crate) static GCRA_LEASE_SCRIPT: LazyLock<LuaScript> = LazyLock::new(|| script(GCRA_LEASE));
pub(crate) static GCRA_REFUND_SCRIPT: LazyLock<LuaScript> = LazyLock::new(|| refund(GCRA_REFUND));
pub(crate) static SLIDING_LOG_SCRIPT: LazyLock<LuaScript> = LazyLock::new(|| script(SLIDING_LOG));
pub(crate) static SLIDING_LOG_REFUND_SCRIPT: LazyLock<LuaScript> =
    LazyLock::new(|| refund(SLIDING_LOG_REFUND));
pub(crate) static FIXED_WINDOW_READ_SCRIPT: LazyLock<LuaScript> =
    LazyLock::new(|| script(FIXED_WINDOW_READ));
pub(crate) static SLIDING_COUNTER_READ_SCRIPT: LazyLock<LuaScript> =
    LazyLock::new(|| script(SLIDING_COUNTER_READ));
pub(crate) static GCRA_READ_SCRIPT: LazyLock<LuaScript> = LazyLock::new(|| script(GCRA_READ));
pub(crate) static SLIDING_LOG_READ_SCRIPT: LazyLock<LuaScript> =
    LazyLock::new(|| script(SLIDING_LOG_READ));
