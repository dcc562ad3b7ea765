//! One named limit: a dimension, an algorithm, a quota, a cost and a failure
//! policy.

use std::sync::Arc;
use std::time::Duration;

use crate::algorithm::{
    Algorithm, FixedWindow, Gcra, Meter, SlidingWindowCounter, SlidingWindowLog,
};
use crate::{ConfigError, Quota};

/// The longest rule name accepted.
pub const MAX_RULE_NAME_LEN: usize = 64;

/// What a rule does when its backend cannot answer (Redis down, hung, or its
/// circuit breaker open). The memory backend always answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Allow the request (counting it locally), log and count the failure.
    /// Availability first: the default.
    #[default]
    FailOpen,
    /// Deny with a response saying the limiter is unavailable. For limits
    /// where an unmetered request costs more than a refused one.
    FailClosed,
    /// Decide with a conservative local limit (a share of the quota) until
    /// the backend answers again.
    LocalFallback,
}

/// One named limit: the *dimension* (`ip`, `tenant`, `search`, ...), the
/// algorithm, the quota, the cost a request takes, and the failure policy.
///
/// Building a rule never fails; the layer or backend validates it and returns
/// a [`ConfigError`] naming the rule and the field.
///
/// ```
/// use throttle_core::{Algorithm, Quota, Rule};
///
/// let rule = Rule::new("search", Quota::per_minute(20)).fixed_window().cost(2);
/// assert_eq!(rule.name(), "search");
/// assert_eq!(rule.algorithm(), Algorithm::FixedWindow);
/// assert!(rule.validate().is_ok());
///
/// let err = Rule::new("ip", Quota::per_minute(0)).validate().unwrap_err();
/// assert_eq!(err.field(), "quota.limit");
/// assert_eq!(
///     err.to_string(),
///     "invalid rate-limit configuration: rule `ip`: quota.limit must be at least 1 (got 0)"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    name: Arc<str>,
    quota: Quota,
    algorithm: Algorithm,
    cost: u32,
    failure: FailurePolicy,
}

impl Rule {
    /// A rule named `name` (the dimension reported to clients) with `quota`,
    /// using the token bucket, cost 1 and fail-open until told otherwise.
    pub fn new(name: impl AsRef<str>, quota: Quota) -> Self {
        Self {
            name: Arc::from(name.as_ref()),
            quota,
            algorithm: Algorithm::default(),
            cost: 1,
            failure: FailurePolicy::default(),
        }
    }

    /// Uses `algorithm`.
    #[must_use]
    pub fn algorithm_is(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// Uses the fixed window (see [`FixedWindow`]).
    #[must_use]
    pub fn fixed_window(self) -> Self {
        self.algorithm_is(Algorithm::FixedWindow)
    }

    /// Uses the sliding window log (see [`SlidingWindowLog`]).
    #[must_use]
    pub fn sliding_window_log(self) -> Self {
        self.algorithm_is(Algorithm::SlidingWindowLog)
    }

    /// Uses the sliding window counter (see [`SlidingWindowCounter`]).
    #[must_use]
    pub fn sliding_window_counter(self) -> Self {
        self.algorithm_is(Algorithm::SlidingWindowCounter)
    }

    /// Uses the token bucket (see [`Gcra`]); the default.
    #[must_use]
    pub fn token_bucket(self) -> Self {
        self.algorithm_is(Algorithm::TokenBucket)
    }

    /// Uses the leaky bucket (see [`Gcra`]): admitted requests wait for
    /// their turn.
    #[must_use]
    pub fn leaky_bucket(self) -> Self {
        self.algorithm_is(Algorithm::LeakyBucket)
    }

    /// Each request takes `cost` units of the quota (default 1). A layer can
    /// also weigh each request with a function of the request.
    #[must_use]
    pub fn cost(mut self, cost: u32) -> Self {
        self.cost = cost;
        self
    }

    /// What to do when the backend cannot answer.
    #[must_use]
    pub fn on_failure(mut self, policy: FailurePolicy) -> Self {
        self.failure = policy;
        self
    }

    /// Shorthand for [`FailurePolicy::FailOpen`].
    #[must_use]
    pub fn fail_open(self) -> Self {
        self.on_failure(FailurePolicy::FailOpen)
    }

    /// Shorthand for [`FailurePolicy::FailClosed`].
    #[must_use]
    pub fn fail_closed(self) -> Self {
        self.on_failure(FailurePolicy::FailClosed)
    }

    /// Shorthand for [`FailurePolicy::LocalFallback`].
    #[must_use]
    pub fn local_fallback(self) -> Self {
        self.on_failure(FailurePolicy::LocalFallback)
    }

    /// The rule's name: the dimension reported to clients.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name, shared.
    pub fn shared_name(&self) -> &Arc<str> {
        &self.name
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The static cost of one request.
    pub fn static_cost(&self) -> u32 {
        self.cost
    }

    /// The failure policy.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.failure
    }

    /// The most cost a key can spend at once: the window's limit, or the
    /// bucket's capacity (burst).
    pub fn capacity(&self) -> u64 {
        if self.algorithm.uses_burst() {
            self.quota.burst()
        } else {
            self.quota.limit()
        }
    }

    /// Checks every field; the error names the rule and the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check().map_err(|e| e.in_rule(&self.name))
    }

    fn check(&self) -> Result<(), ConfigError> {
        let name = &*self.name;
        if name.is_empty() {
            return Err(ConfigError::new("name", "must not be empty"));
        }
        if name.len() > MAX_RULE_NAME_LEN {
            return Err(ConfigError::new(
                "name",
                format!(
                    "must be at most {MAX_RULE_NAME_LEN} bytes (got {})",
                    name.len()
                ),
            ));
        }
        if let Some(c) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
        {
            return Err(ConfigError::new(
                "name",
                format!("may hold only ASCII letters, digits, '_', '-' and '.' (found {c:?})"),
            ));
        }
        if self.cost == 0 {
            return Err(ConfigError::new("cost", "must be at least 1 (got 0)"));
        }
        self.quota.validate(self.algorithm.uses_burst())?;
        if u64::from(self.cost) > self.capacity() {
            return Err(ConfigError::new(
                "cost",
                format!(
                    "must not exceed the rule's capacity of {} (got {}): no request could ever pass",
                    self.capacity(),
                    self.cost
                ),
            ));
        }
        Ok(())
    }

    /// Compiles the rule's algorithm into a meter and hands it to `visit`,
    /// which is generic over the meter type (so a backend can build a
    /// specialised store for each algorithm).
    pub fn with_meter<V: MeterVisitor>(&self, visit: V) -> Result<V::Output, ConfigError> {
        self.validate()?;
        let q = self.quota;
        let named = |e: ConfigError| e.in_rule(&self.name);
        Ok(match self.algorithm {
            Algorithm::FixedWindow => visit.visit(FixedWindow::new(q).map_err(named)?),
            Algorithm::SlidingWindowLog => visit.visit(SlidingWindowLog::new(q).map_err(named)?),
            Algorithm::SlidingWindowCounter => {
                visit.visit(SlidingWindowCounter::new(q).map_err(named)?)
            }
            Algorithm::TokenBucket => visit.visit(Gcra::token_bucket(q).map_err(named)?),
            Algorithm::LeakyBucket => visit.visit(Gcra::leaky_bucket(q).map_err(named)?),
        })
    }

    /// The period, for `RateLimit-Policy`-style reporting.
    pub fn window(&self) -> Duration {
        self.quota.period()
    }
}

/// Receives a rule's compiled meter; see [`Rule::with_meter`].
pub trait MeterVisitor {
    /// What the visit builds.
    type Output;
    /// Builds something from the meter.
    fn visit<M: Meter>(self, meter: M) -> Self::Output;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(rule: Rule) -> &'static str {
        rule.validate().unwrap_err().field()
    }

    #[test]
    fn every_impossible_value_names_its_field() {
        let q = Quota::per_minute(10);
        assert_eq!(field(Rule::new("", q)), "name");
        assert_eq!(field(Rule::new("a b", q)), "name");
        assert_eq!(field(Rule::new("x".repeat(65), q)), "name");
        assert_eq!(field(Rule::new("ip", Quota::per_minute(0))), "quota.limit");
        assert_eq!(
            field(Rule::new("ip", Quota::per_minute(1 << 41))),
            "quota.limit"
        );
        assert_eq!(
            field(Rule::new("ip", Quota::new(5, Duration::ZERO))),
            "quota.period"
        );
        assert_eq!(
            field(Rule::new(
                "ip",
                Quota::new(5, Duration::from_nanos(1_500_001))
            )),
            "quota.period"
        );
        assert_eq!(
            field(Rule::new(
                "ip",
                Quota::new(5, Duration::from_secs(400 * 86_400))
            )),
            "quota.period"
        );
        assert_eq!(field(Rule::new("ip", q.with_burst(0))), "quota.burst");
        assert_eq!(
            field(Rule::new("ip", q.with_burst(5)).fixed_window()),
            "quota.burst"
        );
        assert_eq!(field(Rule::new("ip", q).cost(0)), "cost");
        assert_eq!(field(Rule::new("ip", q).cost(11)), "cost");
        assert_eq!(
            Rule::new("ip", q).cost(0).validate().unwrap_err().rule(),
            Some("ip")
        );
    }

    #[test]
    fn valid_rules_pass() {
        for rule in [
            Rule::new("ip", Quota::per_second(1)),
            Rule::new("tenant.tier-1_a", Quota::per_day(1 << 40)).sliding_window_counter(),
            Rule::new("b", Quota::per_minute(3).with_burst(1)).leaky_bucket(),
            Rule::new("c", Quota::new(1, Duration::from_millis(1))).sliding_window_log(),
        ] {
            rule.validate().unwrap();
        }
    }
}
