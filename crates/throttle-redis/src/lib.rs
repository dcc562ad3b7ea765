//! Redis backends of throttle: limits that hold across a whole fleet of
//! instances, without letting Redis take the service down.
//!
//! - **Exact** ([`RedisBackend::exact`]): one atomic Lua script per check,
//!   with Redis' clock; concurrent instances can never admit more than the
//!   quota. For contractual or costly limits.
//!
//! Standalone Redis and Redis Cluster are both supported: every key of a
//! check shares one hash tag (`<prefix>:{<rule>:<key>}:<suffix>`), and client
//! input is hex-encoded inside it, so it can neither choose the slot nor
//! collide with another key.
//!
//! ## When Redis is slow or gone
//!
//! Every call is bounded by the command timeout (default 50 ms). After
//! [`breaker_threshold`](RedisConfig::breaker_threshold) consecutive
//! failures or timeouts (default 3) the circuit breaker opens: checks are
//! decided locally at once, and a background probe closes the breaker when
//! Redis answers again. A hung Redis therefore adds at most one command
//! timeout to a request, and only until the breaker opens. While Redis is
//! away each rule follows its [`FailurePolicy`]:
//!
//! - `FailOpen` (default): allow, counting locally for the headers.
//! - `FailClosed`: deny with `503` / `UNAVAILABLE` saying the limiter is
//!   unavailable.
//! - `LocalFallback`: decide with a local limit of `quota /`
//!   [`fleet_size`](RedisConfig::fleet_size).
//!
//! Starting never fails because Redis is down: the backend starts with its
//! breaker open and probes until Redis answers.
//!
//! ```no_run
//! use throttle_core::{MemoryBackend, Quota, Rule, RuleSet};
//! use throttle_redis::{RedisBackend, RedisConfig};
//!
//! # async fn demo() -> Result<(), throttle_core::ConfigError> {
//! let backend = RedisBackend::exact(RedisConfig::standalone("redis://127.0.0.1:6379")).await?;
//! let mut rules = RuleSet::new();
//! rules.bind(Rule::new("tenant", Quota::per_minute(1_000)).fail_closed(), &backend)?;
//! # Ok(()) }
//! ```
//!
//! [`FailurePolicy`]: throttle_core::FailurePolicy

mod breaker;
mod config;
mod conn;
mod exact;
mod keys;
mod scripts;

use std::sync::Arc;

use throttle_core::{Backend, ConfigError, Limiter, Rule};

pub use config::{MAX_PREFIX_LEN, RedisConfig};
pub use conn::RedisStats;
pub use exact::ExactLimiter;

/// A Redis backend in one of its modes. Cheap to clone; clones share
/// connections, breaker and counters.
#[derive(Clone)]
pub struct RedisBackend {
    redis: Arc<conn::Redis>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("config", &self.redis.config)
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// The exact mode: one atomic script per check.
    ///
    /// Fails only on invalid configuration (the error names the field);
    /// an unreachable Redis is handled by the failure policies.
    pub async fn exact(config: RedisConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            redis: conn::Redis::connect(config).await?,
        })
    }

    /// The counters: calls, errors, timeouts, breaker state, degraded
    /// decisions.
    pub fn stats(&self) -> RedisStats {
        self.redis.stats()
    }

    /// The exact-mode limiter of `rule`, typed (the [`Backend`] impl gives
    /// the same as a trait object).
    pub fn exact_limiter(&self, rule: &Rule) -> Result<ExactLimiter, ConfigError> {
        ExactLimiter::new(self.redis.clone(), rule)
    }
}

impl Backend for RedisBackend {
    fn limiter(&self, rule: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
        Ok(Arc::new(self.exact_limiter(rule)?))
    }
}
