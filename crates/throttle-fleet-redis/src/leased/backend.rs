//! The leased mode's backend: its rules, their give-backs and shutdown.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{ConfigError, Rule, backend::Backend};

use super::limiter::{LeaseLimiter, LeaseRule};
use super::options::LeaseOptions;
use super::shared::Shared;
use super::stats::LeaseStats;
use crate::config::RedisConfig;
use crate::link::{Redis, RedisStats};
use crate::registry::Registry;
use crate::shutdown::{Unflushed, three_tries};

/// The leased mode (built by [`RedisBackend::leased`](crate::RedisBackend::leased)):
/// tokens taken from a Redis token bucket in batches and spent locally;
/// about one Redis call per batch. Cheap to clone; clones share
/// connections, rules and counters.
///
/// Call [`shutdown`](Self::shutdown) before exiting so idle tokens go back.
#[derive(Clone)]
pub struct LeasedBackend {
    redis: Arc<Redis>,
    shared: Arc<Shared>,
    rules: Arc<Registry<LeaseRule>>,
}

impl std::fmt::Debug for LeasedBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedBackend")
            .field("config", &self.redis.config)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

impl LeasedBackend {
    pub(crate) async fn connect(
        config: RedisConfig,
        options: LeaseOptions,
    ) -> Result<Self, ConfigError> {
        options.validate()?;
        Ok(Self {
            redis: Redis::connect(config).await?,
            shared: Arc::new(Shared::new(options)),
            rules: Arc::default(),
        })
    }

    /// Waits for background leases, then gives back the tokens of keys idle
    /// for the return delay (all of them when `all`). Returns whether every
    /// return reached Redis.
    async fn give_back(&self, all: bool) -> bool {
        loop {
            // Made before the count is read, so that the last lease's
            // arrival between the two is not missed.
            let settled = self.shared.settled.notified();
            if self.shared.in_flight.load(Ordering::Acquire) == 0 {
                break;
            }
            settled.await;
        }
        let mut ok = true;
        for rule in self.rules.live() {
            ok &= rule.give_back(all).await;
        }
        ok
    }

    /// Brings Redis up to date now: waits for background leases and gives
    /// back the tokens of idle keys. Returns whether it all got there (what
    /// did not is given back next time).
    pub async fn flush(&self) -> bool {
        self.give_back(false).await
    }

    /// The mode's counters: leases, tokens leased and given back, waits.
    pub fn lease_stats(&self) -> LeaseStats {
        self.shared.counters.snapshot()
    }

    /// The connection's counters: calls, errors, timeouts, breaker state,
    /// degraded decisions.
    pub fn stats(&self) -> RedisStats {
        self.redis.stats()
    }

    /// Graceful shutdown: gives every leased token back, trying up to three
    /// times. Returns whether some could not be (the bucket gets them again
    /// as it refills; nothing is admitted twice).
    pub async fn shutdown(&self) -> Result<(), Unflushed> {
        if three_tries(|| self.give_back(true)).await {
            Ok(())
        } else {
            Err(Unflushed {
                counts: 0,
                tokens_kept: true,
            })
        }
    }
}

impl Backend for LeasedBackend {
    fn limiter(&self, rule: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
        if rule.algorithm().is_concurrency() {
            return Err(crate::slots::needs_exact_mode(rule));
        }
        Ok(Arc::new(LeaseLimiter::new(
            self.redis.clone(),
            self.shared.clone(),
            &self.rules,
            rule,
        )?))
    }
}
