//! The shares in Redis, for several service replicas: one hash per bucket
//! (field: the Envoy, value: its steps, demand and expiry), changed by one
//! script doing what [`allocate`](super::shares::allocate) does, so the
//! weights held by every replica's Envoys never sum past one.
//!
//! The calls go through `throttle_fleet_redis::connection`: a standalone
//! Redis or a Cluster (a bucket's hash is one key, `<prefix>rlqs:{<bucket>}`,
//! so its hash tag puts it in one slot), each call bounded by the command
//! timeout and kept off a node whose breaker is open.

use throttle_fleet_core::ConfigError;
use throttle_fleet_redis::RedisConfig;
use throttle_fleet_redis::connection::{CallError, Connection};

use super::shares::{HYSTERESIS, Report, STEPS};

/// The script: KEYS[1] the bucket's hash; ARGV: envoy, demand, now (ms),
/// expiry (ms), steps, hysteresis, capacity (requests a second). Returns
/// the Envoy's steps. The same arithmetic as `allocate`, in the same
/// order. The hash lives twice as long as its latest holding: an
/// expiry earlier than another's never shortens it.
const SCRIPT: &str = r#"
local key, me = KEYS[1], ARGV[1]
local demand, now, expires = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
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
redis.call('HSET', key, me, string.format('%d,%.17g,%d', steps, demand, expires))
local keep = (expires - now) * 2
if redis.call('PTTL', key) < keep then redis.call('PEXPIRE', key, keep) end
return steps
"#;

/// The shares of every bucket in one Redis or one Redis Cluster.
#[derive(Clone)]
pub(crate) struct RedisShares {
    conn: Connection,
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
    /// Connects to the Redis of `config`; keys start with `prefix`. A Redis
    /// that is down is no error: its breaker starts open.
    pub(crate) async fn connect(config: RedisConfig, prefix: &str) -> Result<Self, ConfigError> {
        Ok(Self {
            conn: Connection::connect(config).await?,
            script: redis::Script::new(SCRIPT),
            prefix: prefix.to_owned(),
        })
    }

    fn key(&self, bucket: &str) -> String {
        format!("{}rlqs:{{{bucket}}}", self.prefix)
    }

    /// The steps `report`'s Envoy holds on `bucket` from now.
    pub(crate) async fn report(&self, bucket: &str, report: Report<'_>) -> Result<u32, CallError> {
        let key = self.key(bucket);
        let mut call = self.script.prepare_invoke();
        call.key(&key)
            .arg(report.envoy)
            .arg(report.demand)
            .arg(report.now_ms)
            .arg(report.expires_ms)
            .arg(STEPS)
            .arg(HYSTERESIS)
            .arg(report.capacity.max(f64::MIN_POSITIVE));
        self.conn.eval(&key, &call).await
    }

    /// Gives up `envoy`'s share of `bucket` (its bucket was abandoned).
    pub(crate) async fn release(&self, bucket: &str, envoy: &str) -> Result<(), CallError> {
        let key = self.key(bucket);
        self.conn
            .query(&key, redis::cmd("HDEL").arg(&key).arg(envoy))
            .await
    }
}

#[cfg(test)]
mod tests;
