//! The shares in Redis, for several service replicas: one hash per bucket
//! (field: the Envoy, value: its steps, demand and expiry), changed by one
//! script doing what [`allocate`](super::shares::allocate) does, so the
//! weights held by every replica's Envoys never sum past one.

use std::time::Duration;

use redis::aio::ConnectionManager;

/// How long one report waits for Redis.
const TIMEOUT: Duration = Duration::from_millis(250);

use super::shares::{HYSTERESIS, Report, STEPS};

/// The script: KEYS[1] the bucket's hash; ARGV: envoy, demand, now (ms),
/// ttl (ms), steps, hysteresis, capacity (requests a second). Returns the
/// Envoy's steps. The same arithmetic as `allocate`, in the same order.
const SCRIPT: &str = r#"
local key, me = KEYS[1], ARGV[1]
local demand, now, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local steps_all, hyst, capacity = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local all = redis.call('HGETALL', key)
local others, others_demand, n = 0, 0, 0
local prev_steps, prev_demand = nil, nil
local demands = {}
for i = 1, #all, 2 do
  local s, d, e = string.match(all[i + 1], '^(%d+),([^,]+),(%d+)$')
  s, d, e = tonumber(s), tonumber(d), tonumber(e)
  if e <= now then
    redis.call('HDEL', key, all[i])
  elseif all[i] == me then
    prev_steps, prev_demand = s, d
    n = n + 1
  else
    others, others_demand, n = others + s, others_demand + d, n + 1
    demands[#demands + 1] = d
  end
end
if prev_steps == nil then n = n + 1 else demand = (prev_demand + demand) / 2 end
if demand < 0 then demand = 0 end
local total = demand + others_demand
local function target_of(d)
  local share
  if total >= capacity then share = d / total else share = (d + (capacity - total) / n) / capacity end
  local t = math.floor(share * steps_all)
  if t < 1 then t = 1 end
  if t > steps_all then t = steps_all end
  return t
end
local target = target_of(demand)
local others_want = 0
for _, d in ipairs(demands) do others_want = others_want + target_of(d) end
local starving = others_want > others
local spare = steps_all - others
if spare < 0 then spare = 0 end
local wanted = target
if prev_steps ~= nil and prev_steps > 0 and math.abs(prev_steps - target) < math.max(hyst, math.floor(prev_steps / 4))
  and not (prev_steps > target and starving) then wanted = prev_steps end
local steps = math.min(wanted, spare)
redis.call('HSET', key, me, string.format('%d,%.17g,%d', steps, demand, now + ttl))
redis.call('PEXPIRE', key, ttl * 2)
return steps
"#;

/// The shares of every bucket in one Redis.
#[derive(Clone)]
pub(crate) struct RedisShares {
    conn: ConnectionManager,
    script: redis::Script,
    prefix: String,
}

impl std::fmt::Debug for RedisShares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisShares")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisShares {
    /// Connects to `url`; keys start with `prefix`.
    pub(crate) async fn connect(url: &str, prefix: &str) -> redis::RedisResult<Self> {
        let client = redis::Client::open(url)?;
        // A report waits at most this long for Redis; past it the stream
        // ends UNAVAILABLE and Envoy keeps its assignments until they
        // expire.
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(Some(TIMEOUT))
            .set_connection_timeout(Some(TIMEOUT));
        let conn = ConnectionManager::new_with_config(client, config).await?;
        Ok(Self {
            conn,
            script: redis::Script::new(SCRIPT),
            prefix: prefix.to_owned(),
        })
    }

    /// The steps `report`'s Envoy holds on `bucket` from now.
    pub(crate) async fn report(&self, bucket: &str, report: Report<'_>) -> redis::RedisResult<u32> {
        let mut conn = self.conn.clone();
        self.script
            .key(format!("{}rlqs:{{{bucket}}}", self.prefix))
            .arg(report.envoy)
            .arg(report.demand)
            .arg(report.now_ms)
            .arg(report.ttl_ms)
            .arg(STEPS)
            .arg(HYSTERESIS)
            .arg(report.capacity.max(f64::MIN_POSITIVE))
            .invoke_async(&mut conn)
            .await
    }
}
