//! The connections the Redis backends use, for another store: a handle
//! that sends a script or a command to the node of a key's slot (a
//! standalone Redis, or the primary of the slot in a Redis Cluster,
//! following `MOVED` and `ASK`), bounded by the command timeout, through
//! that node's circuit breaker, and says what happened when no reply came.
//!
//! It is what the backends' own calls go through: the same breakers (one
//! per node, opened after [`breaker_threshold`](RedisConfig::breaker_threshold)
//! failures in a row, closed by a background probe), the same counters
//! ([`RedisStats`]), the same start that never fails because Redis is
//! down. A store keeps its keys in one slot with a hash tag (`{...}`),
//! and passes the key whose slot the call goes to.
//!
//! | what happened | [`CallError`] | sent to Redis |
//! |---|---|---|
//! | no reply within the command timeout | `Timeout` | yes (counts toward the breaker; it may still run) |
//! | the node's breaker is open, or no known primary serves the slot | `Down` | no |
//! | the connection failed (refused, dropped) | `Connection` | tried (counts toward the breaker) |
//! | Redis answered an error, or a reply of another type | `Redis` | yes |
//!
//! [`Connection::health`] publishes which nodes are down (their breaker
//! open) at every change, for a store that stops or resumes work of its
//! own with them.
//!
//! ```no_run
//! use throttle_fleet_redis::RedisConfig;
//! use throttle_fleet_redis::connection::{CallError, Connection};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let redis = Connection::connect(RedisConfig::cluster([
//!     "redis://10.0.0.1:6379",
//!     "redis://10.0.0.2:6379",
//! ]))
//! .await?;
//! let script = redis::Script::new("return redis.call('INCR', KEYS[1])");
//! let key = "visits:{home}";
//! match redis.eval::<i64>(key, &script.key(key)).await {
//!     Ok(n) => println!("{n} visits"),
//!     Err(CallError::Timeout | CallError::Down) => println!("Redis cannot answer now"),
//!     Err(e) => return Err(e.into()),
//! }
//! let mut health = redis.health();
//! health.changed().await?;
//! println!("nodes down now: {:?}", health.borrow().down);
//! # Ok(()) }
//! ```

use std::sync::Arc;

use redis::{Cmd, FromRedisValue, ScriptInvocation};
use throttle_fleet_core::ConfigError;
use tokio::sync::watch;

use crate::config::RedisConfig;
pub use crate::health::Health;
use crate::link::{Call, Failure, Redis, RedisStats};

/// A handle on the connections to one Redis or one Redis Cluster: cheap to
/// clone, every clone sharing the connections, breakers and counters.
#[derive(Clone)]
pub struct Connection {
    redis: Arc<Redis>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("config", &self.redis.config)
            .finish_non_exhaustive()
    }
}

/// Why a call got no reply from Redis, or an error in its place.
#[derive(Debug)]
#[non_exhaustive]
pub enum CallError {
    /// No reply within the command timeout: the node is hung or slow. The
    /// call may still run (a hung node runs what queued up once it
    /// resumes): a store whose calls add must allow for that.
    Timeout,
    /// Not sent: the node's breaker is open (it failed or stopped
    /// answering; a probe waits for it), or no known primary serves the
    /// key's slot yet.
    Down,
    /// The connection to the node failed (refused, dropped).
    Connection(redis::RedisError),
    /// Redis answered with an error, or with a reply of another type.
    Redis(redis::RedisError),
}

impl CallError {
    /// Whether Redis could not be asked (timed out, down, no connection),
    /// as opposed to answering with an error.
    pub fn is_unavailable(&self) -> bool {
        !matches!(self, Self::Redis(_))
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout => f.write_str("Redis did not answer within the command timeout"),
            Self::Down => f.write_str("the Redis node of the key is down (its breaker is open)"),
            Self::Connection(e) => write!(f, "the connection to Redis failed: {e}"),
            Self::Redis(e) => write!(f, "Redis answered an error: {e}"),
        }
    }
}

impl std::error::Error for CallError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Connection(e) | Self::Redis(e) => Some(e),
            Self::Timeout | Self::Down => None,
        }
    }
}

impl From<Failure> for CallError {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Timeout => Self::Timeout,
            Failure::Unrouted => Self::Down,
            Failure::Error(e)
                if e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped() =>
            {
                Self::Connection(e)
            }
            Failure::Error(e) => Self::Redis(e),
        }
    }
}

impl Connection {
    /// Validates `config` and opens lazy connections, then checks once that
    /// Redis answers (a Cluster: reads its slot table). Redis being down
    /// is no error: the breaker starts open and a probe waits for it. The
    /// error names the field of a bad `config`.
    pub async fn connect(config: RedisConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            redis: Redis::connect(config).await?,
        })
    }

    /// Runs `script` on the node of `key`'s slot (`key` is one of the
    /// script's keys, or any key with their hash tag).
    pub async fn eval<T: FromRedisValue>(
        &self,
        key: impl AsRef<[u8]>,
        script: &ScriptInvocation<'_>,
    ) -> Result<T, CallError> {
        self.call(key.as_ref(), script).await
    }

    /// Runs `command` on the node of `key`'s slot.
    pub async fn query<T: FromRedisValue>(
        &self,
        key: impl AsRef<[u8]>,
        command: &Cmd,
    ) -> Result<T, CallError> {
        self.call(key.as_ref(), command).await
    }

    async fn call<T: FromRedisValue>(&self, key: &[u8], call: &impl Call) -> Result<T, CallError> {
        let slot = match self.redis.is_cluster() {
            true => crate::hash_slot::slot_of(key),
            false => 0,
        };
        if self.redis.is_open(slot) {
            return Err(CallError::Down);
        }
        Ok(self.redis.eval(call, slot).await?)
    }

    /// Which nodes are down, now and at every change.
    pub fn health(&self) -> watch::Receiver<Health> {
        self.redis.health()
    }

    /// The calls, errors, timeouts and breaker openings so far.
    pub fn stats(&self) -> RedisStats {
        self.redis.stats()
    }
}

#[cfg(test)]
mod tests;
