//! Envoy's rate limit services on throttle's rules and backends.
//!
//! - **RLS v3** ([`Rls`]): `envoy.service.ratelimit.v3.RateLimitService`,
//!   asked by Envoy's `envoy.filters.http.ratelimit` filter on every
//!   request. Each descriptor is matched to the rules of its domain
//!   (`domain` and `descriptor` in the file); every algorithm that answers
//!   yes or no, any period, tiers, shadow rules, failure policies, on
//!   memory or any Redis mode.
//! - **RLQS** ([`Rlqs`]): `envoy.service.rate_limit_quota.v3.RateLimitQuotaService`,
//!   the stream on which each Envoy's `envoy.filters.http.rate_limit_quota`
//!   filter reports its usage per bucket and receives a token bucket of
//!   its own; no request waits for the service.
//!
//! Both read the same [`EnvoyRules`], reloadable with
//! `throttle_fleet_config::reload::Reloader::with_target`.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod catalog;
pub mod metrics;
mod quote;
mod rlqs;
mod rls;
mod rules;
mod server;

pub use envoy_types;
pub use rlqs::{LIFETIME_INTERVALS, REVIEW_PER_TICK, Rlqs, RlqsOptions};
pub use rls::{MAX_DESCRIPTORS, Rls};
pub use rules::EnvoyRules;
pub use server::server;
