//! The concurrency rule's scripts. A key's slots are a sorted set
//! (`<prefix>:{<rule>:<key hex>}:cz`) of members `<instance>:<seq>:<cost>`
//! scored by the millisecond at which each expires unless renewed, and
//! the cost they hold together (`...:ct`), kept in step by every script:
//! an acquire first drops the members whose time has passed (an
//! instance that died stops renewing, so its slots come back), then adds
//! its own if the cost fits. Both keys expire a second after the last
//! member would, so nothing lives forever.

use std::sync::LazyLock;

use redis::Script;

use crate::scripts::NOW;

/// Acquire (after the shared `NOW` prelude). KEYS: set, held. ARGV: now
/// (us, 0 for Redis `TIME`), limit,
/// cost, slot lifetime (ms), member. Reply: `allowed remaining now_us`.
const ACQUIRE: &str = r#"
local ms = math.floor(now / 1000)
local limit, cost, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local held = tonumber(redis.call('GET', KEYS[2]) or '0')
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ms)
if #gone > 0 then
  for i = 1, #gone do
    held = held - (tonumber(string.match(gone[i], '(%d+)$')) or 0)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms)
  if held < 0 then held = 0 end
end
local ok = 0
if held + cost <= limit then
  redis.call('ZADD', KEYS[1], ms + ttl, ARGV[5])
  held = held + cost
  ok = 1
end
if held > 0 then
  redis.call('SET', KEYS[2], held, 'PX', ttl + 1000)
  redis.call('PEXPIRE', KEYS[1], ttl + 1000)
else
  redis.call('DEL', KEYS[1], KEYS[2])
end
return string.format('%d %d %d', ok, math.max(0, limit - held), now)
"#;

/// Release. KEYS: set, held. ARGV: member, cost. A member already gone
/// (expired, or released before) changes nothing.
const RELEASE: &str = r#"
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  local held = redis.call('DECRBY', KEYS[2], tonumber(ARGV[2]))
  if redis.call('ZCARD', KEYS[1]) == 0 then
    redis.call('DEL', KEYS[1], KEYS[2])
  elseif held < 0 then
    redis.call('SET', KEYS[2], 0, 'KEEPTTL')
  end
end
return 0
"#;

/// Renewal of one key's members of one instance (after the shared `NOW`
/// prelude). KEYS: set, held. ARGV:
/// now (us, 0 for Redis `TIME`), slot lifetime (ms), members. Only members
/// still present are renewed (`XX`): one that expired while this instance
/// could not reach Redis is not added back, since a release racing the
/// renewal could otherwise bring back a slot whose request had ended.
/// Reply: how many members were missing.
const RENEW: &str = r#"
local until_ms = math.floor(now / 1000) + tonumber(ARGV[2])
local lost = 0
for i = 3, #ARGV do
  if redis.call('ZADD', KEYS[1], 'XX', 'CH', until_ms, ARGV[i]) == 0
    and not redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    lost = lost + 1
  end
end
if lost < #ARGV - 2 then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + 1000)
  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[2]) + 1000)
end
return lost
"#;

pub(crate) static ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{NOW}{ACQUIRE}")));
pub(crate) static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE));
pub(crate) static RENEW_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{NOW}{RENEW}")));
