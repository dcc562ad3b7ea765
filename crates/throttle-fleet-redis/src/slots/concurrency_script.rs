//! The concurrency rule's script. A key's slots are a sorted set
//! (`<prefix>:{<rule>:<key hex>}:cz`) of members `<instance>:<seq>:<cost>`
//! scored by the millisecond at which each expires unless renewed, and
//! the cost they hold together (`...:ct`), kept in step by every call:
//! an acquire first drops the members whose time has passed (an
//! instance that died stops renewing, so its slots come back), then adds
//! its own if the cost fits. Both keys expire a second after the last
//! member would, so nothing lives forever.
//!
//! Acquire, release and renewal are one script, chosen by `ARGV[2]`: the
//! acquire that a release follows has loaded it on the connection, so a
//! release is never answered `NOSCRIPT` and sent again later, behind the
//! next request's acquire.

use std::sync::LazyLock;

use crate::link::LuaScript;

use crate::algorithm_scripts::NOW;

/// After the shared `NOW` prelude (`ARGV[1]`: now in us, 0 for Redis
/// `TIME`). KEYS: set, held. `ARGV[2]` is the operation:
///
/// - `a`, acquire. ARGV: limit (the rule's, or the share of the
///   request's class), cost, slot lifetime (ms), member. Reply:
///   `allowed held now_us`, `held` the cost in flight after the call.
/// - `r`, release. ARGV: member, cost. A member already gone (expired, or
///   released before) changes nothing. Reply: 0.
/// - `p`, a read (an operator's inspect). No ARGV. Writes nothing. Reply:
///   `held now_us`, `held` the cost of the members whose time has not
///   passed (those an acquire would keep).
/// - `n`, renewal of one key's members of one instance. ARGV: slot
///   lifetime (ms), members. Only members still present are renewed
///   (`XX`): one that expired while this instance could not reach Redis
///   is not added back, since a release racing the renewal could
///   otherwise bring back a slot whose request had ended. Reply: the
///   positions (1-based, in the call's order) of the members that were
///   missing: expired, or released after the renewal listed them, which
///   only the instance can tell apart.
const CONCURRENCY: &str = r#"
local op = ARGV[2]
if op == 'r' then
  if redis.call('ZREM', KEYS[1], ARGV[3]) == 1 then
    local held = redis.call('DECRBY', KEYS[2], tonumber(ARGV[4]))
    if redis.call('ZCARD', KEYS[1]) == 0 then
      redis.call('DEL', KEYS[1], KEYS[2])
    elseif held < 0 then
      redis.call('SET', KEYS[2], 0, 'KEEPTTL')
    end
  end
  return 0
end
local ms = math.floor(now / 1000)
if op == 'n' then
  local ttl = tonumber(ARGV[3])
  local missing = {}
  for i = 4, #ARGV do
    if redis.call('ZADD', KEYS[1], 'XX', 'CH', ms + ttl, ARGV[i]) == 0
      and not redis.call('ZSCORE', KEYS[1], ARGV[i]) then
      missing[#missing + 1] = i - 3
    end
  end
  if #missing < #ARGV - 3 then
    redis.call('PEXPIRE', KEYS[1], ttl + 1000)
    redis.call('PEXPIRE', KEYS[2], ttl + 1000)
  end
  return missing
end
local held = tonumber(redis.call('GET', KEYS[2]) or '0')
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ms)
for i = 1, #gone do
  held = held - (tonumber(string.match(gone[i], '(%d+)$')) or 0)
end
if held < 0 then held = 0 end
if op == 'p' then
  return string.format('%d %d', held, now)
end
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms)
end
local limit, cost, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ok = 0
if held + cost <= limit then
  redis.call('ZADD', KEYS[1], ms + ttl, ARGV[6])
  held = held + cost
  ok = 1
end
if held > 0 then
  redis.call('SET', KEYS[2], held, 'PX', ttl + 1000)
  redis.call('PEXPIRE', KEYS[1], ttl + 1000)
else
  redis.call('DEL', KEYS[1], KEYS[2])
end
return string.format('%d %d %d', ok, held, now)
"#;

pub(crate) static CONCURRENCY_SCRIPT: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(&format!("{NOW}{CONCURRENCY}")));

/// `now` for a release, which reads no clock: any value but 0 spares the
/// script a `TIME` call.
pub(crate) const NO_CLOCK: u64 = 1;
