//! The approximate mode's backend: its rules, their flushes and shutdown.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{ConfigError, Rule, backend::Backend};

use super::flush_job::FlushJob;
use super::limiter::{ApproxLimiter, ApproxRule};
use super::options::ApproximateOptions;
use super::shared::Shared;
use super::stats::ApproximateStats;
use crate::config::RedisConfig;
use crate::link::{Redis, RedisStats};
use crate::registry::Registry;
use crate::shutdown::{Unflushed, three_tries};

/// The approximate mode (built by
/// [`RedisBackend::approximate`](crate::RedisBackend::approximate)):
/// decided locally, counts flushed to Redis at every span end; Redis is on
/// the request path only for a request that waits for a claim
/// (`Answer::Pending`, at most the command timeout). Cheap to clone; clones
/// share connections, rules and counters.
///
/// Call [`shutdown`](Self::shutdown) before exiting so the last counts
/// reach Redis.
#[derive(Clone)]
pub struct ApproximateBackend {
    redis: Arc<Redis>,
    shared: Arc<Shared>,
    rules: Arc<Registry<ApproxRule>>,
}

impl std::fmt::Debug for ApproximateBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApproximateBackend")
            .field("config", &self.redis.config)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

impl ApproximateBackend {
    pub(crate) async fn connect(
        config: RedisConfig,
        options: ApproximateOptions,
    ) -> Result<Self, ConfigError> {
        options.validate()?;
        let redis = Redis::connect(config).await?;
        // Nothing on the request path would tell a local decision that a
        // node is gone: it is watched.
        Redis::watch(&redis);
        Ok(Self {
            redis,
            shared: Arc::new(Shared::new(options)),
            rules: Arc::default(),
        })
    }

    /// Sends now what is counted locally and not yet in Redis, and applies
    /// the claims granted. Returns whether it all got there (what did not
    /// is sent again at the next flush).
    pub async fn flush(&self) -> bool {
        let mut ok = true;
        for rule in self.rules.live() {
            ok &= rule.flush().await;
        }
        ok
    }

    /// The mode's counters: flushes, waits, local denials, overshoot seen.
    pub fn approximate_stats(&self) -> ApproximateStats {
        let redis_ok = self.rules.live().iter().all(|r| r.redis_ok());
        self.shared.counters.snapshot(redis_ok)
    }

    /// The connection's counters: calls, errors, timeouts, breaker state,
    /// degraded decisions.
    pub fn stats(&self) -> RedisStats {
        self.redis.stats()
    }

    /// Graceful shutdown: gives every unspent claim back and sends every
    /// count still pending, trying up to three times. Call it after the
    /// server stops accepting requests; the router may already be gone (a
    /// rule whose layer was dropped keeps its counts in the backend until
    /// they are written). Returns what could not be written.
    ///
    /// ```no_run
    /// # async fn demo(backend: throttle_fleet_redis::ApproximateBackend) {
    /// if let Err(unflushed) = backend.shutdown().await {
    ///     eprintln!("{unflushed}");
    /// }
    /// # }
    /// ```
    pub async fn shutdown(&self) -> Result<(), Unflushed> {
        self.shared.closing.store(true, Ordering::Relaxed);
        three_tries(|| self.flush()).await;
        let counts = self.rules.live().iter().map(|r| r.unwritten()).sum();
        match counts {
            0 => Ok(()),
            counts => Err(Unflushed {
                counts,
                tokens_kept: false,
            }),
        }
    }
}

impl Backend for ApproximateBackend {
    fn limiter(&self, rule: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
        if rule.algorithm().is_concurrency() {
            return Err(crate::slots::needs_exact_mode(rule));
        }
        let limiter = ApproxLimiter::new(
            self.redis.clone(),
            self.shared.clone(),
            self.rules.clone(),
            rule,
        )?;
        self.redis
            .config
            .scheduler
            .start(Arc::new(FlushJob::new(limiter.rule())));
        Ok(Arc::new(limiter))
    }
}
