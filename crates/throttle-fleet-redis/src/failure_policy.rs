//! Failure policies shared by every mode: what a rule decides while Redis
//! cannot be asked, and the local limiter a policy needs for that.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use throttle_fleet_core::backend::{Limiter, Outcome, Unavailable};
use throttle_fleet_core::operate::OpError;
use throttle_fleet_core::{Answer, ConfigError, FailurePolicy, Key, Rule, memory::MemoryBackend};

use crate::link::Redis;

/// The refusal of a fail-closed rule while Redis is away: one shared reason,
/// so a refusal (the hot path of an outage) allocates nothing.
pub(crate) fn redis_unavailable() -> Unavailable {
    static REASON: std::sync::LazyLock<Arc<str>> =
        std::sync::LazyLock::new(|| Arc::from("Redis is unavailable"));
    Unavailable {
        reason: REASON.clone(),
    }
}

/// The local limiter a rule's failure policy needs while Redis is away.
pub(crate) fn local_limiter(
    redis: &Redis,
    rule: &Rule,
) -> Result<Option<Arc<dyn Limiter>>, ConfigError> {
    let quota = match rule.failure_policy() {
        FailurePolicy::FailClosed => return Ok(None),
        FailurePolicy::LocalFallback => {
            let share = |n: u64| n.div_ceil(u64::from(redis.config.fleet_size)).max(1);
            let q = rule.quota();
            let scaled = throttle_fleet_core::Quota::new(share(q.limit()), q.period());
            match q.explicit_burst() {
                Some(b) => scaled.with_burst(share(b)),
                None => scaled,
            }
        }
        _ => rule.quota(),
    };
    let local_rule = if rule.algorithm().is_concurrency() {
        Rule::concurrency(rule.name(), quota.limit())
    } else {
        Rule::new(rule.name(), quota).with_algorithm(rule.algorithm())
    }
    .with_cost(rule.cost().min(quota_capacity(rule, quota)));
    let limiter = throttle_fleet_core::backend::Backend::limiter(
        &MemoryBackend::with_clock(redis.local_clock()),
        &local_rule,
    )?;
    Ok(Some(limiter))
}

fn quota_capacity(rule: &Rule, quota: throttle_fleet_core::Quota) -> u32 {
    let cap = if rule.algorithm().uses_burst() {
        quota.burst()
    } else {
        quota.limit()
    };
    u32::try_from(cap).unwrap_or(u32::MAX)
}

/// Decides by the rule's failure policy, with its local limiter.
pub(crate) fn degraded(
    redis: &Redis,
    rule: &Rule,
    local: Option<&dyn Limiter>,
    key: &Key,
    cost: u64,
) -> Result<Outcome, Unavailable> {
    redis.degraded.fetch_add(1, Ordering::Relaxed);
    by_policy(rule, local.map(|l| l.acquire(key, cost, u64::MAX)))
}

/// An operator's read of `key` while Redis cannot be asked, as a request
/// would be decided: the failure policy's local limiter read (its counts,
/// taking nothing), marked degraded; a fail-closed rule has nothing to
/// read but Redis, and answers unavailable.
pub(crate) fn degraded_read(
    rule: &Rule,
    local: Option<&dyn Limiter>,
    key: &Key,
) -> Result<Outcome, OpError> {
    Ok(by_policy(
        rule,
        local.and_then(|l| l.ops()).map(|o| o.peek(key)),
    )?)
}

/// The failure policy's answer from what its local limiter answered
/// (`None`: the rule has none): a fail-closed rule, or one without a local
/// answer, unavailable; the local fallback's answer as it is; fail open
/// allowed whatever the local count says. Marked degraded.
fn by_policy<E>(
    rule: &Rule,
    local: Option<Answer<Result<Outcome, E>>>,
) -> Result<Outcome, Unavailable> {
    let local_outcome = match local {
        Some(Answer::Ready(Ok(o))) => Some(o),
        _ => None,
    };
    match (rule.failure_policy(), local_outcome) {
        (FailurePolicy::FailClosed, _) | (_, None) => Err(redis_unavailable()),
        (FailurePolicy::LocalFallback, Some(mut o)) => {
            o.degraded = true;
            Ok(o)
        }
        (_, Some(mut o)) => {
            o.degraded = true;
            o.step.allowed = true;
            o.step.retry_after_us = 0;
            Ok(o)
        }
    }
}
