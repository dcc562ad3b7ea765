//! The exact mode's backend: rate limits checked by one atomic script each,
//! and concurrency rules held as slots.

use std::sync::Arc;

use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{ConfigError, Rule, backend::Backend};

use super::ExactLimiter;
use crate::config::RedisConfig;
use crate::link::{Redis, RedisStats};
use crate::shutdown::{Unflushed, three_tries};
use crate::slots::{self, SlotStats};

/// The exact mode (built by [`RedisBackend::exact`](crate::RedisBackend::exact)):
/// one atomic script per check (or per batch of concurrent checks of one
/// rule), with Redis' clock, and concurrency rules. Cheap to clone; clones
/// share connections, breakers and counters.
#[derive(Clone)]
pub struct ExactBackend {
    redis: Arc<Redis>,
    slots: Arc<slots::Shared>,
}

impl std::fmt::Debug for ExactBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExactBackend")
            .field("config", &self.redis.config)
            .finish_non_exhaustive()
    }
}

impl ExactBackend {
    pub(crate) async fn connect(config: RedisConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            redis: Redis::connect(config).await?,
            slots: slots::Shared::new(),
        })
    }

    /// The concurrency rules' counters.
    pub fn slot_stats(&self) -> SlotStats {
        self.slots.stats()
    }

    /// The connection's counters: calls, errors, timeouts, breaker state,
    /// degraded decisions.
    pub fn stats(&self) -> RedisStats {
        self.redis.stats()
    }

    /// Graceful shutdown: gives back every concurrency slot still held,
    /// trying up to three times (the slots that could not be given back
    /// expire after one slot lifetime). Rate limits hold nothing to send.
    pub async fn shutdown(&self) -> Result<(), Unflushed> {
        three_tries(|| self.slots.release_all()).await;
        Ok(())
    }
}

impl Backend for ExactBackend {
    fn limiter(&self, rule: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
        Ok(if rule.algorithm().is_concurrency() {
            Arc::new(slots::SlotLimiter::new(
                self.redis.clone(),
                self.slots.clone(),
                rule,
            )?)
        } else {
            Arc::new(ExactLimiter::new(self.redis.clone(), rule)?)
        })
    }
}
