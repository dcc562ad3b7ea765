//! A share of a rule's quota as the token bucket Envoy enforces: the
//! share of the rate, the share of the fleet's burst.

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use envoy_types::pb::google::protobuf::{self as pb, UInt32Value};
use throttle_fleet_core::{Quota, Rule, algorithm::Algorithm};

use super::shares::STEPS;

/// The token bucket of an Envoy holding `steps` of [`STEPS`] of `quota`'s
/// rate; `None` for no steps (the Envoy stays on its own no-assignment
/// default).
///
/// - rate: `limit × steps / STEPS` per period (`tokens_per_fill` per
///   `fill_interval` of the period: Envoy fills continuously at that rate,
///   and reads the interval in whole seconds, which every period is);
///   at least one token per period;
/// - size: the share of the fleet's burst, at least one token. The fleet's
///   burst is the rule's `burst` when it sets one (token bucket), else one
///   second of the rate: Envoy starts a changed bucket full, so every
///   change of share refills its size, and a larger one (a reporting
///   interval's worth measured 1.23x the quota in the fleet test, one
///   second 1.03x) lets the fleet admit past the quota.
pub(crate) fn token_bucket(rule: &Rule, quota: Quota, steps: u32) -> Option<RateLimitStrategy> {
    if steps == 0 {
        return None;
    }
    let limit = u128::from(quota.limit());
    let share = |total: u128| (total * u128::from(steps) / u128::from(STEPS)).max(1);
    let burst = fleet_burst(rule, quota);
    Some(RateLimitStrategy {
        strategy: Some(Strategy::TokenBucket(TokenBucket {
            max_tokens: u32::try_from(share(u128::from(burst))).unwrap_or(u32::MAX),
            tokens_per_fill: Some(UInt32Value {
                value: u32::try_from(share(limit)).unwrap_or(u32::MAX),
            }),
            fill_interval: Some(pb::Duration {
                seconds: i64::try_from(quota.period().as_secs().max(1)).unwrap_or(i64::MAX),
                nanos: 0,
            }),
        })),
    })
}

/// The fleet's burst for `quota`: the rule's own for a token bucket with
/// one, else one second of the rate (at least one token).
pub(crate) fn fleet_burst(rule: &Rule, quota: Quota) -> u64 {
    if rule.algorithm() == Algorithm::TokenBucket
        && let Some(b) = quota.explicit_burst()
    {
        return b;
    }
    let per_second = u128::from(quota.limit()) * 1000 / quota.period().as_millis().max(1);
    u64::try_from(per_second).unwrap_or(u64::MAX).max(1)
}

/// Every request allowed (a request no rule limits, or a shadow rule's).
pub(crate) fn allow_all() -> RateLimitStrategy {
    RateLimitStrategy {
        strategy: Some(Strategy::BlanketRule(BlanketRule::AllowAll as i32)),
    }
}

/// The rate of `strategy` in requests per second (for the tightest of
/// several rules on one bucket); allow-all is unbounded.
pub(crate) fn rate(strategy: &RateLimitStrategy) -> f64 {
    match &strategy.strategy {
        Some(Strategy::TokenBucket(tb)) => {
            let per = tb.fill_interval.map_or(1, |d| d.seconds.max(1));
            f64::from(tb.tokens_per_fill.map_or(1, |v| v.value)) / per as f64
        }
        Some(Strategy::BlanketRule(r)) if *r == BlanketRule::DenyAll as i32 => 0.0,
        _ => f64::INFINITY,
    }
}

#[cfg(test)]
mod tests;
