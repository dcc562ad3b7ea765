//! A share of a rule's quota as the token bucket Envoy enforces: the
//! share of the rate, the share of the fleet's burst.

use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use envoy_types::pb::google::protobuf::{self as pb, UInt32Value};
use throttle_fleet_core::{Algorithm, Quota, Rule};

use super::shares::STEPS;

/// The token bucket of an Envoy holding `steps` of [`STEPS`] of `quota`'s
/// rate, `report_interval` being how often Envoys report; `None` for no
/// steps (the Envoy stays on its own no-assignment default).
///
/// - rate: `limit × steps / STEPS` per period (`tokens_per_fill` per
///   `fill_interval` of the period: Envoy fills continuously at that rate,
///   and reads the interval in whole seconds, which every period is);
///   at least one token per period;
/// - size: the share of the fleet's burst, at least one token. The fleet's
///   burst is the rule's `burst` when it sets one (token bucket), else one
///   report interval's worth of the rate: a burst the size of the whole
///   quota, refilled at every change of share, would let the fleet admit
///   far past it.
pub(crate) fn token_bucket(
    rule: &Rule,
    quota: Quota,
    steps: u32,
    report_interval: Duration,
) -> Option<RateLimitStrategy> {
    if steps == 0 {
        return None;
    }
    let limit = u128::from(quota.limit());
    let share = |total: u128| (total * u128::from(steps) / u128::from(STEPS)).max(1);
    let burst = fleet_burst(rule, quota, report_interval);
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
/// one, else the rate over one report interval (at least one token).
pub(crate) fn fleet_burst(rule: &Rule, quota: Quota, report_interval: Duration) -> u64 {
    if rule.algorithm() == Algorithm::TokenBucket
        && let Some(b) = quota.explicit_burst()
    {
        return b;
    }
    let per_interval =
        u128::from(quota.limit()) * report_interval.as_millis() / quota.period().as_millis().max(1);
    u64::try_from(per_interval).unwrap_or(u64::MAX).max(1)
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
mod tests {
    use super::*;

    fn bucket(s: &RateLimitStrategy) -> (u32, u32, i64) {
        match &s.strategy {
            Some(Strategy::TokenBucket(tb)) => (
                tb.max_tokens,
                tb.tokens_per_fill.unwrap().value,
                tb.fill_interval.unwrap().seconds,
            ),
            other => panic!("not a token bucket: {other:?}"),
        }
    }

    #[test]
    fn a_share_is_that_part_of_the_rate_and_of_the_burst() {
        let five = Duration::from_secs(5);
        let rule = Rule::new("r", Quota::per_minute(600)).fixed_window();
        // A quarter of 600 a minute; the burst: 50 a report interval.
        let s = token_bucket(&rule, rule.quota(), STEPS / 4, five).unwrap();
        assert_eq!(bucket(&s), (12, 150, 60));
        assert_eq!(fleet_burst(&rule, rule.quota(), five), 50);
        // The whole share, at least one token however small.
        assert_eq!(
            bucket(&token_bucket(&rule, rule.quota(), STEPS, five).unwrap()),
            (50, 600, 60)
        );
        let tiny = Rule::new("t", Quota::per_minute(10));
        assert_eq!(
            bucket(&token_bucket(&tiny, tiny.quota(), 1, five).unwrap()),
            (1, 1, 60)
        );
        // A token bucket's own burst is the fleet's.
        let tb = Rule::new("b", Quota::per_minute(600).with_burst(100)).token_bucket();
        assert_eq!(fleet_burst(&tb, tb.quota(), five), 100);
        assert!(token_bucket(&rule, rule.quota(), 0, five).is_none());
        assert_eq!(rate(&s), 2.5);
        assert!(rate(&allow_all()).is_infinite());
    }
}
