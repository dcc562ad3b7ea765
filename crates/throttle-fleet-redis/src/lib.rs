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
//! collide with another key. TLS (`rediss://`, feature `tls`:
//! [`tls_ca_file`](RedisConfig::tls_ca_file),
//! [`tls_client_cert`](RedisConfig::tls_client_cert)) and ACL credentials
//! ([`username`](RedisConfig::username),
//! [`password`](RedisConfig::password)) apply to every node the backend
//! opens, a Cluster's discovered nodes included.
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
//! breaker open and probes until Redis answers. Redis refusing the
//! credentials or the backend refusing its certificate is a configuration
//! error, naming the setting.
//!
//! ```no_run
//! use throttle_fleet_core::{memory::MemoryBackend, Quota, Rule, rule_set::RuleSet};
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

mod algorithm_scripts;
mod approximate;
mod backend;
mod breaker;
mod call_failure;
mod config;
pub mod connection;
mod credentials;
mod exact;
mod failure_policy;
mod hash_slot;
mod health;
mod instance;
mod keys;
mod leased;
mod link;
pub mod metrics;
mod operate;
mod registry;
mod reply;
pub mod schedule;
mod shutdown;
mod slots;
mod tls;

pub use approximate::{ApproximateBackend, ApproximateOptions, ApproximateStats};
pub use backend::RedisBackend;
pub use config::RedisConfig;
pub use exact::ExactBackend;
pub use leased::{LeaseOptions, LeaseStats, LeasedBackend, WhenEmpty};
pub use link::RedisStats;
pub use shutdown::Unflushed;
pub use slots::SlotStats;

/// The bounds the backends enforce on their settings.
pub mod limits {
    pub use crate::config::MAX_PREFIX_LEN;
    pub use crate::leased::MAX_BATCH;
}
