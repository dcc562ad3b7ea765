//! The Lua scripts of the exact mode. Each mirrors a meter of
//! `throttle_core::algorithm` line by line, in integer microseconds held in
//! Lua numbers (doubles, exact below 2^53), and returns the state it ended
//! with; the shared Rust code turns that state into remaining, reset and
//! retry-after, so both backends report the same figures. Differential tests
//! run the same timelines through both.
//!
//! Conventions of every script:
//! - `ARGV[1]` is "now" in microseconds, or `0` to read Redis `TIME` (the
//!   default: one clock for the whole fleet).
//! - Numbers written back to Redis go through `int()` (`%.0f`), never Lua's
//!   `tostring`, which would round large values to 14 digits.
//! - Every key gets an expiry a second past the time its state becomes
//!   equivalent to a fresh one, so nothing lives forever.
//! - State is one compact string (`"a b c"`) read with one `GET` and written
//!   with one `SET .. PX`: two commands per check.

use std::sync::LazyLock;

use redis::Script;

const PRELUDE: &str = r#"
local function now_us(arg)
  local n = tonumber(arg)
  if n == 0 then
    local t = redis.call('TIME')
    n = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return n
end
-- floor(a / b) for non-negative integers, exact where a / b may round up
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function int(x) return string.format('%.0f', x) end
-- expiry: a second past the time the state stops mattering
local function ttl_ms(us) return math.floor(us / 1000) + 1000 end
local function fields(s)
  local out = {}
  if s then
    for part in string.gmatch(s, '%S+') do out[#out + 1] = tonumber(part) end
  end
  return out
end
"#;

/// Fixed window. KEYS: state. ARGV: now, limit, period, cost.
/// Returns {allowed, window, count, now}.
const FIXED_WINDOW: &str = r#"
local now = now_us(ARGV[1])
local limit, period, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local f = fields(redis.call('GET', KEYS[1]))
local w, c = f[1] or 0, f[2] or 0
if now < w * period then now = w * period end
local cw = idiv(now, period)
if cw ~= w then w = cw; c = 0 end
if c + cost <= limit then
  c = c + cost
  redis.call('SET', KEYS[1], int(w) .. ' ' .. int(c), 'PX', ttl_ms((w + 1) * period - now))
  return {1, w, c, now}
end
return {0, w, c, now}
"#;

/// Fixed window refund. ARGV: acquired at, period, cost.
const FIXED_WINDOW_RELEASE: &str = r#"
local at, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local f = fields(redis.call('GET', KEYS[1]))
if f[1] and f[1] == idiv(at, period) then
  redis.call('SET', KEYS[1], int(f[1]) .. ' ' .. int(math.max(0, f[2] - cost)), 'KEEPTTL')
end
return 0
"#;

/// Sliding window counter. KEYS: state. ARGV: now, limit, period, cost.
/// Returns {allowed, window, cur, prev, now}.
const SLIDING_COUNTER: &str = r#"
local now = now_us(ARGV[1])
local limit, period, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local f = fields(redis.call('GET', KEYS[1]))
local w, cur, prev = f[1] or 0, f[2] or 0, f[3] or 0
if now < w * period then now = w * period end
local cw = idiv(now, period)
if cw == w + 1 then prev = cur; cur = 0; w = cw
elseif cw > w + 1 then prev = 0; cur = 0; w = cw end
local elapsed = now - w * period
local weighted = 0
if prev > 0 then weighted = math.floor(prev * (period - elapsed) / period) end
if weighted + cur + cost <= limit then
  cur = cur + cost
  redis.call('SET', KEYS[1], int(w) .. ' ' .. int(cur) .. ' ' .. int(prev), 'PX', ttl_ms((w + 2) * period - now))
  return {1, w, cur, prev, now}
end
return {0, w, cur, prev, now}
"#;

/// Sliding window counter refund. ARGV: acquired at, period, cost.
const SLIDING_COUNTER_RELEASE: &str = r#"
local at, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local f = fields(redis.call('GET', KEYS[1]))
if f[1] and f[1] == idiv(at, period) then
  redis.call('SET', KEYS[1], int(f[1]) .. ' ' .. int(math.max(0, f[2] - cost)) .. ' ' .. int(f[3]), 'KEEPTTL')
end
return 0
"#;

/// GCRA (token and leaky bucket). KEYS: state "tat_us tat_rem". ARGV: now,
/// limit, increment (us, rem), tau (us, rem). Returns {allowed, tat_us,
/// tat_rem, now}.
const GCRA: &str = r#"
local now = now_us(ARGV[1])
local l = tonumber(ARGV[2])
local inc_us, inc_rem = tonumber(ARGV[3]), tonumber(ARGV[4])
local tau_us, tau_rem = tonumber(ARGV[5]), tonumber(ARGV[6])
local f = fields(redis.call('GET', KEYS[1]))
local tat, rem = f[1] or 0, f[2] or 0
local t, r = tat, rem
if t < now then t = now; r = 0 end
local nt, nr = t + inc_us, r + inc_rem
if nr >= l then nr = nr - l; nt = nt + 1 end
local lead = nt - now
if lead < tau_us or (lead == tau_us and nr <= tau_rem) then
  redis.call('SET', KEYS[1], int(nt) .. ' ' .. int(nr), 'PX', ttl_ms(lead + 1))
  return {1, nt, nr, now}
end
return {0, tat, rem, now}
"#;

/// GCRA refund. ARGV: limit, increment (us, rem).
const GCRA_RELEASE: &str = r#"
local l, inc_us, inc_rem = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local f = fields(redis.call('GET', KEYS[1]))
if f[1] then
  local t, r = f[1] - inc_us, f[2] - inc_rem
  if r < 0 then r = r + l; t = t - 1 end
  if t < 0 then t = 0; r = 0 end
  redis.call('SET', KEYS[1], int(t) .. ' ' .. int(r), 'KEEPTTL')
end
return 0
"#;

/// GCRA lease: takes up to `want` tokens at once, and none unless at least
/// `need` fit. KEYS: state "tat_us tat_rem". ARGV: now, limit, emission
/// interval (us, rem), tau (us, rem), need, want. Returns {granted, tat_us,
/// tat_rem, now}.
const GCRA_LEASE: &str = r#"
local now = now_us(ARGV[1])
local l = tonumber(ARGV[2])
local t_us, t_rem = tonumber(ARGV[3]), tonumber(ARGV[4])
local tau_us, tau_rem = tonumber(ARGV[5]), tonumber(ARGV[6])
local need, want = tonumber(ARGV[7]), tonumber(ARGV[8])
local f = fields(redis.call('GET', KEYS[1]))
local tat, rem = f[1] or 0, f[2] or 0
local t, r = tat, rem
if t < now then t = now; r = 0 end
-- The TAT after taking k tokens, as (us, rem).
local function after(k)
  local kr = r + k * t_rem
  local carry = idiv(kr, l)
  return t + k * t_us + carry, kr - carry * l
end
local function fits(k)
  local nt, nr = after(k)
  local lead = nt - now
  return lead < tau_us or (lead == tau_us and nr <= tau_rem)
end
-- Estimate in doubles, then settle exactly.
local k = math.floor(((tau_us - (t - now)) + (tau_rem - r) / l) / (t_us + t_rem / l))
if k > want then k = want end
if k < 0 then k = 0 end
while k > 0 and not fits(k) do k = k - 1 end
while k < want and fits(k + 1) do k = k + 1 end
if k < need then return {0, tat, rem, now} end
local nt, nr = after(k)
redis.call('SET', KEYS[1], int(nt) .. ' ' .. int(nr), 'PX', ttl_ms(nt - now + 1))
return {k, nt, nr, now}
"#;

/// Sliding window log. KEYS: the log (sorted set of "seq:cost" scored by
/// time), its meta "total seq". ARGV: now, limit, period, cost. Returns
/// {allowed, total, now, newest (-1 if none), fit (-1 if none)}: `fit` is the
/// time of the entry whose expiry makes room for a denied cost.
const SLIDING_LOG: &str = r#"
local now = now_us(ARGV[1])
local limit, period, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local m = fields(redis.call('GET', KEYS[2]))
local total, seq = m[1] or 0, m[2] or 0
local function cost_of(member) return tonumber(string.match(member, ':(%d+)$')) end
local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if newest[2] and now < tonumber(newest[2]) then now = tonumber(newest[2]) end
local cutoff = int(now - period)
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff)
if #old > 0 then
  for i = 1, #old do total = total - cost_of(old[i]) end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cutoff)
end
if total + cost <= limit then
  seq = seq + 1
  total = total + cost
  local ttl = ttl_ms(period)
  redis.call('ZADD', KEYS[1], int(now), int(seq) .. ':' .. int(cost))
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('SET', KEYS[2], int(total) .. ' ' .. int(seq), 'PX', ttl)
  return {1, total, now, now, -1}
end
if #old > 0 then redis.call('SET', KEYS[2], int(total) .. ' ' .. int(seq), 'KEEPTTL') end
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
    freed = freed + cost_of(batch[i])
    if freed >= need then fit = tonumber(batch[i + 1]); break end
  end
  from = from + 128
end
return {0, total, now, last, fit}
"#;

/// Sliding window log refund. ARGV: acquired at, cost.
const SLIDING_LOG_RELEASE: &str = r#"
local at, cost = ARGV[1], tonumber(ARGV[2])
local entries = redis.call('ZRANGEBYSCORE', KEYS[1], at, at)
for i = #entries, 1, -1 do
  if tonumber(string.match(entries[i], ':(%d+)$')) == cost then
    redis.call('ZREM', KEYS[1], entries[i])
    local m = fields(redis.call('GET', KEYS[2]))
    if m[1] then
      redis.call('SET', KEYS[2], int(math.max(0, m[1] - cost)) .. ' ' .. int(m[2]), 'KEEPTTL')
    end
    break
  end
end
return 0
"#;

fn script(body: &str) -> Script {
    Script::new(&[PRELUDE, body].concat())
}

pub(crate) static FIXED_WINDOW_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(FIXED_WINDOW));
pub(crate) static FIXED_WINDOW_RELEASE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| script(FIXED_WINDOW_RELEASE));
pub(crate) static SLIDING_COUNTER_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| script(SLIDING_COUNTER));
pub(crate) static SLIDING_COUNTER_RELEASE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| script(SLIDING_COUNTER_RELEASE));
pub(crate) static GCRA_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(GCRA));
pub(crate) static GCRA_LEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(GCRA_LEASE));
pub(crate) static GCRA_RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(GCRA_RELEASE));
pub(crate) static SLIDING_LOG_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(SLIDING_LOG));
pub(crate) static SLIDING_LOG_RELEASE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| script(SLIDING_LOG_RELEASE));
