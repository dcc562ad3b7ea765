//! The one way to build a Redis backend, and the backend a configuration
//! file builds: one of the three modes.

use std::sync::Arc;

use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{ConfigError, Rule, backend::Backend};

use crate::approximate::{ApproximateBackend, ApproximateOptions};
use crate::config::RedisConfig;
use crate::exact::ExactBackend;
use crate::leased::{LeaseOptions, LeasedBackend};
use crate::link::RedisStats;
use crate::shutdown::Unflushed;

/// A Redis backend in one of its modes, each a type of its own with what
/// means something in it (its counters, its flush). The constructors
/// return the mode's type; a `RedisBackend` holds any of them (what a
/// configuration file builds), with what every mode has: rules bind to it,
/// its connection's counters, its shutdown. Cheap to clone; clones share
/// connections, breakers and counters.
///
/// ```no_run
/// use throttle_fleet_redis::{ApproximateOptions, RedisBackend, RedisConfig};
///
/// # async fn demo() -> Result<(), throttle_fleet_core::ConfigError> {
/// let config = RedisConfig::standalone("redis://127.0.0.1:6379");
/// let approximate = RedisBackend::approximate(config, ApproximateOptions::default()).await?;
/// println!("{:?}", approximate.approximate_stats());
/// // Any mode, as a configuration file would build it:
/// let backend = RedisBackend::from(approximate);
/// if let Err(unflushed) = backend.shutdown().await {
///     eprintln!("{unflushed}");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum RedisBackend {
    /// One atomic script per check; concurrency rules.
    Exact(ExactBackend),
    /// Decided locally, counts flushed at every span end.
    Approximate(ApproximateBackend),
    /// Tokens leased in batches and spent locally.
    Leased(LeasedBackend),
}

impl RedisBackend {
    /// The exact mode: one atomic script per check.
    ///
    /// Fails only on invalid configuration (the error names the field);
    /// an unreachable Redis is handled by the failure policies.
    pub async fn exact(config: RedisConfig) -> Result<ExactBackend, ConfigError> {
        ExactBackend::connect(config).await
    }

    /// The approximate mode: decided locally, counts flushed to Redis at
    /// every span end; Redis is on the request path only for a request
    /// that waits for a claim (`Answer::Pending`, at most the command
    /// timeout). Flushes run in the background at every span boundary, on
    /// the configured [`scheduler`](RedisConfig::scheduler).
    pub async fn approximate(
        config: RedisConfig,
        options: ApproximateOptions,
    ) -> Result<ApproximateBackend, ConfigError> {
        ApproximateBackend::connect(config, options).await
    }

    /// The leased mode: tokens taken from a Redis token bucket in batches
    /// and spent locally; about one Redis call per batch.
    pub async fn leased(
        config: RedisConfig,
        options: LeaseOptions,
    ) -> Result<LeasedBackend, ConfigError> {
        LeasedBackend::connect(config, options).await
    }

    /// The connection's counters: calls, errors, timeouts, breaker state,
    /// degraded decisions.
    pub fn stats(&self) -> RedisStats {
        match self {
            Self::Exact(b) => b.stats(),
            Self::Approximate(b) => b.stats(),
            Self::Leased(b) => b.stats(),
        }
    }

    /// Graceful shutdown (the mode's own: what it sends is in
    /// [`ExactBackend::shutdown`], [`ApproximateBackend::shutdown`] and
    /// [`LeasedBackend::shutdown`]). Returns what could not be written.
    pub async fn shutdown(&self) -> Result<(), Unflushed> {
        match self {
            Self::Exact(b) => b.shutdown().await,
            Self::Approximate(b) => b.shutdown().await,
            Self::Leased(b) => b.shutdown().await,
        }
    }
}

impl Backend for RedisBackend {
    fn limiter(&self, rule: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
        match self {
            Self::Exact(b) => b.limiter(rule),
            Self::Approximate(b) => b.limiter(rule),
            Self::Leased(b) => b.limiter(rule),
        }
    }
}

impl From<ExactBackend> for RedisBackend {
    fn from(backend: ExactBackend) -> Self {
        Self::Exact(backend)
    }
}

impl From<ApproximateBackend> for RedisBackend {
    fn from(backend: ApproximateBackend) -> Self {
        Self::Approximate(backend)
    }
}

impl From<LeasedBackend> for RedisBackend {
    fn from(backend: LeasedBackend) -> Self {
        Self::Leased(backend)
    }
}
