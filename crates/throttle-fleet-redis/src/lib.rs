//! Redis backends of throttle: limits that hold across a whole fleet of
//! instances, without letting Redis take the service down.
//!
//! - **Exact** ([`RedisBackend::exact`]): one atomic Lua script per check,
//!   with Redis' clock; concurrent instances can never admit more than the
//!   quota. For contractual or costly limits.
//! - **Approximate** ([`RedisBackend::approximate`]): counted and decided
//!   locally, each instance's cumulative counts flushed at every span end,
//!   each instance admitting only within the claim its last flush was
//!   granted; a request past its claim while the fleet has room waits for
//!   an early flush (one round trip, at most the command timeout) instead
//!   of being denied, and otherwise Redis is not on the request path. Worst
//!   case per interval: the quota plus a small overdraft and one small
//!   credit per other instance; measured 1.000x to 1.05x under uniform,
//!   skewed, sticky-and-moving, bursty and churning traffic, with clients
//!   under their quota denied on none of their requests in most runs (the
//!   fleet scenario suite).
//! - **Concurrency rules** ([`Rule::concurrency`](throttle_fleet_core::Rule::concurrency)),
//!   on the exact mode's connections: at most `n` requests of a key in
//!   flight across the fleet, each slot held in Redis with an expiry that
//!   its instance renews while the request runs, so the slots of an
//!   instance that dies come back after one slot lifetime. One round trip
//!   to acquire; the release leaves the response path. The approximate and
//!   leased modes refuse such a rule.
//! - **Leased** ([`RedisBackend::leased`]): tokens taken from a Redis token
//!   bucket in batches sized to each key and spent locally; about one Redis
//!   call per batch (under 0.1 per request for a key at 1 request per
//!   second per instance), at most one batch plus the low-water mark per
//!   instance of overshoot.
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
//! use throttle_fleet_core::{MemoryBackend, Quota, Rule, RuleSet};
//! use throttle_fleet_redis::{RedisBackend, RedisConfig};
//!
//! # async fn demo() -> Result<(), throttle_fleet_core::ConfigError> {
//! let backend = RedisBackend::exact(RedisConfig::standalone("redis://127.0.0.1:6379")).await?;
//! let mut rules = RuleSet::new();
//! rules.bind(Rule::new("tenant", Quota::per_minute(1_000)).fail_closed(), &backend)?;
//! # Ok(()) }
//! ```
//!
//! [`FailurePolicy`]: throttle_fleet_core::FailurePolicy

// docs.rs (`--cfg docsrs`, nightly) marks each feature-gated item with
// the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod approximate;
mod breaker;
mod call_failure;
mod config;
mod conn;
mod exact;
mod failure;
mod keys;
mod leased;
pub mod metrics;
mod registry;
mod reply;
mod scripts;
mod shutdown;
mod slot;
mod slots;

use std::sync::Arc;

use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{Backend, ConfigError, Rule};

pub use approximate::{ApproximateOptions, ApproximateStats};
pub use config::RedisConfig;
pub use conn::RedisStats;
pub use exact::ExactLimiter;
pub use leased::{LeaseOptions, LeaseStats, WhenEmpty};
pub use shutdown::Unflushed;
pub use slots::SlotStats;

/// The bounds the backends enforce on their settings.
pub mod limits {
    pub use crate::config::MAX_PREFIX_LEN;
    pub use crate::leased::MAX_BATCH;
}

/// A Redis backend in one of its modes. Cheap to clone; clones share
/// connections, breaker and counters.
#[derive(Clone)]
pub struct RedisBackend {
    redis: Arc<conn::Redis>,
    mode: Mode,
}

#[derive(Clone)]
enum Mode {
    Exact(Arc<slots::Shared>),
    Approximate(Arc<approximate::Shared>),
    Leased(Arc<leased::Shared>),
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = match self.mode {
            Mode::Exact(_) => "exact",
            Mode::Approximate(_) => "approximate",
            Mode::Leased(_) => "leased",
        };
        f.debug_struct("RedisBackend")
            .field("mode", &mode)
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
            mode: Mode::Exact(slots::Shared::new()),
        })
    }

    /// The approximate mode: decided locally, counts flushed to Redis at
    /// every span end; Redis is on the request path only for a request
    /// that waits for a claim (`Answer::Pending`, at most the command
    /// timeout).
    ///
    /// Flushes run in the background at every span boundary (with a test
    /// clock set, only when [`flush`](Self::flush) is called). Call
    /// [`shutdown`](Self::shutdown) before exiting so the last counts reach
    /// Redis.
    pub async fn approximate(
        config: RedisConfig,
        options: ApproximateOptions,
    ) -> Result<Self, ConfigError> {
        options.validate()?;
        let redis = conn::Redis::connect(config).await?;
        if let Some(version) = redis.server_version().await {
            approximate::check_version(version)?;
        }
        // Nothing on the request path would tell a local decision that a
        // node is gone: it is watched (a test clock's driver flushes, and
        // its flushes' failures say so instead).
        if redis.config.test_clock.is_none() {
            conn::Redis::watch(&redis);
        }
        Ok(Self {
            redis,
            mode: Mode::Approximate(approximate::Shared::new(options)),
        })
    }

    /// The leased mode: tokens taken from a Redis token bucket in batches
    /// and spent locally; about one Redis call per batch.
    pub async fn leased(config: RedisConfig, options: LeaseOptions) -> Result<Self, ConfigError> {
        options.validate()?;
        Ok(Self {
            redis: conn::Redis::connect(config).await?,
            mode: Mode::Leased(leased::Shared::new(options)),
        })
    }

    /// Brings Redis up to date now: the approximate mode sends what is
    /// counted locally and not yet in Redis; the leased mode waits for
    /// background leases and gives back the tokens of idle keys. Returns
    /// whether it all got there (what did not is sent again next time).
    pub async fn flush(&self) -> bool {
        match &self.mode {
            Mode::Approximate(shared) => shared.flush_all().await,
            Mode::Leased(shared) => shared.give_back(false).await,
            Mode::Exact(_) => true,
        }
    }

    /// Renews every concurrency slot this instance holds now (the exact
    /// mode's concurrency rules; the background task does it every third
    /// of the slot lifetime, except with a test clock). Returns whether
    /// every renewal reached Redis. Other modes: `true`.
    pub async fn renew_slots(&self) -> bool {
        match &self.mode {
            Mode::Exact(slots) => slots.renew().await,
            _ => true,
        }
    }

    /// The concurrency rules' counters (`None` outside the exact mode).
    pub fn slot_stats(&self) -> Option<SlotStats> {
        match &self.mode {
            Mode::Exact(slots) => Some(slots.stats()),
            _ => None,
        }
    }

    /// The approximate mode's early flush: sends now only the keys that ran
    /// out of their claim before their span ended, and applies the claims
    /// granted. The background task does this within the early-flush gap
    /// of the first ask; with a test clock, call it when
    /// [`ApproximateStats::early_flushes_asked`] grows. Other modes: `true`.
    pub async fn flush_asked(&self) -> bool {
        match &self.mode {
            Mode::Approximate(shared) => shared.flush_asked().await,
            _ => true,
        }
    }

    async fn flush_for_shutdown(&self) -> bool {
        match &self.mode {
            Mode::Leased(shared) => shared.give_back(true).await,
            Mode::Exact(slots) => slots.release_all().await,
            _ => self.flush().await,
        }
    }

    /// Graceful shutdown: sends what is pending (gives back every leased
    /// token, and every concurrency slot still held), trying up to three times (a connection broken while Redis was
    /// away reconnects on the first failure). Call it after the server stops
    /// accepting requests; the router may already be gone (an approximate
    /// rule whose layer was dropped keeps its counts in the backend until
    /// they are written). Returns what could not be written.
    ///
    /// ```no_run
    /// # async fn demo(backend: throttle_fleet_redis::RedisBackend) {
    /// if let Err(unflushed) = backend.shutdown().await {
    ///     eprintln!("{unflushed}");
    /// }
    /// # }
    /// ```
    pub async fn shutdown(&self) -> Result<(), Unflushed> {
        if let Mode::Approximate(shared) = &self.mode {
            // Give every unspent claim back to the other instances.
            shared
                .closing
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let mut ok = false;
        for attempt in 0..3 {
            if self.flush_for_shutdown().await {
                ok = true;
                break;
            }
            if attempt < 2 {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
        let (counts, tokens_kept) = match &self.mode {
            Mode::Approximate(shared) => (shared.unwritten(), false),
            Mode::Leased(_) => (0, !ok),
            Mode::Exact(_) => (0, false),
        };
        if counts == 0 && !tokens_kept {
            Ok(())
        } else {
            Err(Unflushed {
                counts,
                tokens_kept,
            })
        }
    }

    /// The leased mode's counters (`None` in other modes).
    pub fn lease_stats(&self) -> Option<LeaseStats> {
        match &self.mode {
            Mode::Leased(shared) => Some(shared.stats()),
            _ => None,
        }
    }

    /// The approximate mode's counters (`None` in other modes).
    pub fn approximate_stats(&self) -> Option<ApproximateStats> {
        match &self.mode {
            Mode::Approximate(shared) => Some(shared.stats()),
            _ => None,
        }
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
        if rule.algorithm().is_concurrency() {
            return match &self.mode {
                Mode::Exact(slots) => Ok(Arc::new(slots::SlotLimiter::new(
                    self.redis.clone(),
                    slots.clone(),
                    rule,
                )?)),
                _ => Err(ConfigError::new(
                    "algorithm",
                    "concurrency needs the exact mode: the approximate and leased modes decide from local counts, which cannot bound requests in flight across the fleet",
                )
                .in_rule(rule.name())),
            };
        }
        Ok(match &self.mode {
            Mode::Exact(_) => Arc::new(self.exact_limiter(rule)?),
            Mode::Approximate(shared) => Arc::new(approximate::ApproxLimiter::new(
                self.redis.clone(),
                shared.clone(),
                rule,
            )?),
            Mode::Leased(shared) => Arc::new(leased::LeaseLimiter::new(
                self.redis.clone(),
                shared.clone(),
                rule,
            )?),
        })
    }
}
