//! One named limit: a dimension, an algorithm, a quota, a cost and a failure
//! policy.

use std::sync::Arc;
use std::time::Duration;

use crate::algorithm::{
    Algorithm, Concurrency, FixedWindow, Gcra, Meter, SlidingWindowCounter, SlidingWindowLog,
};
use crate::operate::Penalty;
use crate::tier::Tiers;
use crate::{ConfigError, Key, Quota};

mod in_flight_limit;

pub use in_flight_limit::InFlightLimit;

/// The longest rule name accepted.
pub const MAX_RULE_NAME_LEN: usize = 64;

/// How long a concurrency rule's slot lives in a shared backend without
/// being renewed, unless the rule says otherwise ([`InFlightLimit::slot_ttl`]).
pub const DEFAULT_SLOT_TTL: Duration = Duration::from_secs(10);

/// The shortest slot lifetime accepted: renewals run three times per
/// lifetime, each bounded by a command timeout of tens of milliseconds.
pub const MIN_SLOT_TTL: Duration = Duration::from_millis(100);

/// The longest slot lifetime accepted (one day).
pub const MAX_SLOT_TTL: Duration = Duration::from_secs(86_400);

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
/// use throttle_fleet_core::{algorithm::Algorithm, Quota, Rule};
///
/// let rule = Rule::new("search", Quota::per_minute(20)).fixed_window().with_cost(2);
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
    tiers: Option<Tiers>,
    shadow: bool,
    penalty: Option<Penalty>,
    in_flight: Option<InFlightLimit>,
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
            tiers: None,
            shadow: false,
            penalty: None,
            in_flight: None,
        }
    }

    /// A concurrency rule named `name`: at most `limit.limit` requests of
    /// a key in flight at once (see [`Concurrency`]), with the settings only
    /// a concurrency rule has (a reserve, an adaptive limit, a slot
    /// lifetime: [`InFlightLimit`]). A request takes its slot (its cost,
    /// 1 unless told otherwise) when it is admitted, and the layer gives it
    /// back when the response body has been sent in full or dropped; a
    /// denial is answered like a rate limit's, with `Retry-After: 1`.
    ///
    /// ```
    /// use throttle_fleet_core::{algorithm::Algorithm, InFlightLimit, Quota, Rule};
    ///
    /// let rule = Rule::concurrency("inflight", 20);
    /// assert_eq!(rule.algorithm(), Algorithm::Concurrency);
    /// assert_eq!(rule.quota(), Quota::in_flight(20));
    /// assert!(rule.validate().is_ok());
    /// assert_eq!(Rule::concurrency("inflight", 0).validate().unwrap_err().field(), "quota.limit");
    ///
    /// let backend = Rule::concurrency("backend", InFlightLimit { reserve: 8, ..InFlightLimit::new(64) });
    /// assert_eq!(backend.in_flight_limit().map(|c| c.reserve), Some(8));
    /// ```
    pub fn concurrency(name: impl AsRef<str>, limit: impl Into<InFlightLimit>) -> Self {
        let limit = limit.into();
        Self {
            in_flight: Some(limit),
            ..Self::new(name, Quota::in_flight(limit.limit)).with_algorithm(Algorithm::Concurrency)
        }
    }

    /// A concurrency rule's own settings (`None` for a rate rule).
    pub fn in_flight_limit(&self) -> Option<&InFlightLimit> {
        self.in_flight.as_ref()
    }

    /// Uses `algorithm` for a rate rule (a concurrency rule is made by
    /// [`Rule::concurrency`], and keeps its algorithm).
    #[must_use]
    pub fn with_algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// Uses the fixed window (see [`FixedWindow`]).
    #[must_use]
    pub fn fixed_window(self) -> Self {
        self.with_algorithm(Algorithm::FixedWindow)
    }

    /// Uses the sliding window log (see [`SlidingWindowLog`]).
    #[must_use]
    pub fn sliding_window_log(self) -> Self {
        self.with_algorithm(Algorithm::SlidingWindowLog)
    }

    /// Uses the sliding window counter (see [`SlidingWindowCounter`]).
    #[must_use]
    pub fn sliding_window_counter(self) -> Self {
        self.with_algorithm(Algorithm::SlidingWindowCounter)
    }

    /// Uses the token bucket (see [`Gcra`]); the default.
    #[must_use]
    pub fn token_bucket(self) -> Self {
        self.with_algorithm(Algorithm::TokenBucket)
    }

    /// Uses the leaky bucket (see [`Gcra`]): admitted requests wait for
    /// their turn.
    #[must_use]
    pub fn leaky_bucket(self) -> Self {
        self.with_algorithm(Algorithm::LeakyBucket)
    }

    /// Each request takes `cost` units of the quota (default 1). A layer can
    /// also weigh each request with a function of the request.
    #[must_use]
    pub fn with_cost(mut self, cost: u32) -> Self {
        self.cost = cost;
        self
    }

    /// What to do when the backend cannot answer.
    #[must_use]
    pub fn with_failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.failure = policy;
        self
    }

    /// Shorthand for [`FailurePolicy::FailOpen`].
    #[must_use]
    pub fn fail_open(self) -> Self {
        self.with_failure_policy(FailurePolicy::FailOpen)
    }

    /// Shorthand for [`FailurePolicy::FailClosed`].
    #[must_use]
    pub fn fail_closed(self) -> Self {
        self.with_failure_policy(FailurePolicy::FailClosed)
    }

    /// Shorthand for [`FailurePolicy::LocalFallback`].
    #[must_use]
    pub fn local_fallback(self) -> Self {
        self.with_failure_policy(FailurePolicy::LocalFallback)
    }

    /// Gives the keys of `tiers` their own quota; every other key keeps the
    /// rule's quota (the default). Replaces earlier tiers.
    ///
    /// A key is compared with what the rule's extractor produces (a
    /// header's value as is, an IP address masked to its prefix), byte for
    /// byte. Each distinct quota (at most [`MAX_TIER_QUOTAS`](crate::limits::MAX_TIER_QUOTAS))
    /// is validated like the rule's own, with errors naming the rule and
    /// `tiers`, and compiled into counters of its own when the rule is
    /// bound; the headers and denials of a key report its tier's quota.
    ///
    /// ```
    /// use throttle_fleet_core::{Key, Quota, Rule};
    ///
    /// let rule = Rule::new("tenant", Quota::per_minute(1_000))
    ///     .with_tiers([("premium-key", Quota::per_minute(5_000))]);
    /// assert_eq!(rule.quota_for(&Key::new("premium-key")), Quota::per_minute(5_000));
    /// assert_eq!(rule.quota_for(&Key::new("other")), Quota::per_minute(1_000));
    /// assert!(rule.validate().is_ok());
    ///
    /// let bad = Rule::new("tenant", Quota::per_minute(10)).with_tiers([("k", Quota::per_minute(0))]);
    /// let err = bad.validate().unwrap_err();
    /// assert_eq!((err.rule(), err.field()), (Some("tenant"), "tiers"));
    /// ```
    #[must_use]
    pub fn with_tiers<K: Into<Key>>(mut self, tiers: impl IntoIterator<Item = (K, Quota)>) -> Self {
        self.tiers = Some(Tiers::from_map(tiers));
        self
    }

    /// Picks each key's quota with `select`, which may return only the
    /// rule's own quota (the default) or one of `quotas` (declared up front
    /// so that each is validated and compiled when the rule is bound). A
    /// quota not declared counts as the default. `select` runs once per
    /// request (and once more when a cost is given back) and must be a pure
    /// function of the key.
    ///
    /// ```
    /// use throttle_fleet_core::{Key, Quota, Rule};
    ///
    /// let (free, paid) = (Quota::per_minute(60), Quota::per_minute(600));
    /// let rule = Rule::new("user", free)
    ///     .with_tiers_by([paid], move |key: &Key| if key.as_bytes().starts_with(b"paid:") { paid } else { free });
    /// assert_eq!(rule.quota_for(&Key::new("paid:42")), paid);
    /// assert_eq!(rule.quota_for(&Key::new("u:42")), free);
    /// ```
    #[must_use]
    pub fn with_tiers_by(
        mut self,
        quotas: impl IntoIterator<Item = Quota>,
        select: impl Fn(&Key) -> Quota + Send + Sync + 'static,
    ) -> Self {
        self.tiers = Some(Tiers::from_fn(quotas, select));
        self
    }

    /// The rule's tiers, if it has any.
    pub fn tiers(&self) -> Option<&Tiers> {
        self.tiers.as_ref()
    }

    /// The quota of `key`: its tier's, or the rule's own.
    pub fn quota_for(&self, key: &Key) -> Quota {
        match &self.tiers {
            Some(t) => t.tier_of(key).map_or(self.quota, |i| t.quotas()[i]),
            None => self.quota,
        }
    }

    /// The same rule with `quota` and no tiers: how one tier is bound to a
    /// backend. Backends that cannot honour tiers look at
    /// [`tiers`](Self::tiers) of the rule they are given first.
    #[must_use]
    pub(crate) fn for_tier(&self, quota: Quota) -> Self {
        Self {
            quota,
            tiers: None,
            // A concurrency tier's limit is its quota's, as the rule's is.
            in_flight: self.in_flight.map(|c| InFlightLimit {
                limit: quota.limit(),
                ..c
            }),
            ..self.clone()
        }
    }

    /// Makes the rule a *shadow* rule: it is checked and counts like any
    /// other, but never denies. A request it would have denied goes on, and
    /// the decision says so ([`Decision::shadow_denied`](crate::Decision::shadow_denied)),
    /// for logs and metrics. Its figures never reach the response headers.
    /// The way to roll a new limit out: watch what it would do first.
    #[must_use]
    pub fn shadow(mut self) -> Self {
        self.shadow = true;
        self
    }

    /// Blocks a key that keeps being denied, longer each time (see
    /// [`Penalty`]): while blocked, its requests are denied before the
    /// backend is asked, with `Retry-After` equal to what is left of the
    /// block. A rate rule's option (not a concurrency or shadow rule's).
    ///
    /// ```
    /// use std::time::Duration;
    /// use throttle_fleet_core::{operate::Penalty, Quota, Rule};
    ///
    /// let login = Rule::new("login", Quota::per_minute(5))
    ///     .with_penalty(Penalty::new(10, Duration::from_secs(60), Duration::from_secs(60)));
    /// assert!(login.validate().is_ok());
    /// let bad = Rule::concurrency("inflight", 4).with_penalty(Penalty::new(1, Duration::from_secs(1), Duration::from_secs(1)));
    /// assert_eq!(bad.validate().unwrap_err().field(), "penalty");
    /// ```
    #[must_use]
    pub fn with_penalty(mut self, penalty: Penalty) -> Self {
        self.penalty = Some(penalty);
        self
    }

    /// Whether the rule may shed a request (answer it 503 while the
    /// rule's own limit is not reached): it has a reserve, which weighs a
    /// request's class, or an adaptive limit.
    pub fn sheds(&self) -> bool {
        self.in_flight
            .as_ref()
            .is_some_and(|c| c.reserve > 0 || c.adaptive.is_some())
    }

    /// The rule's penalty, if it has one (see [`with_penalty`](Self::with_penalty)).
    pub fn penalty(&self) -> Option<&Penalty> {
        self.penalty.as_ref()
    }

    /// Whether the rule is a shadow rule (see [`shadow`](Self::shadow)).
    pub fn is_shadow(&self) -> bool {
        self.shadow
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

    /// The cost of one request, unless a layer weighs it (see
    /// [`with_cost`](Self::with_cost)).
    pub fn cost(&self) -> u32 {
        self.cost
    }

    /// The failure policy.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.failure
    }

    /// The most cost a key can spend at once: the window's limit, or the
    /// bucket's capacity (burst).
    pub fn capacity(&self) -> u64 {
        self.capacity_of(self.quota)
    }

    /// The capacity of `quota` under this rule's algorithm (a tier's).
    pub fn capacity_of(&self, quota: Quota) -> u64 {
        if self.algorithm.uses_burst() {
            quota.burst()
        } else {
            quota.limit()
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
        if self.algorithm.is_concurrency() != self.in_flight.is_some() {
            return Err(ConfigError::new(
                "algorithm",
                "a concurrency rule is made by Rule::concurrency and counts requests in flight; \
                 a rate rule cannot use the concurrency algorithm, nor a concurrency rule another",
            ));
        }
        if let Some(penalty) = &self.penalty {
            if self.algorithm.is_concurrency() || self.shadow {
                return Err(ConfigError::new(
                    "penalty",
                    "applies to enforced rate rules only (not a concurrency or shadow rule)",
                ));
            }
            penalty.validate()?;
        }
        if let Some(c) = &self.in_flight {
            c.validate(self.quota.limit())?;
        }
        if self.tiers.is_some() && self.sheds() {
            return Err(ConfigError::new(
                "tiers",
                "a rule with a reserve or an adaptive limit has no tiers",
            ));
        }
        if let Some(tiers) = &self.tiers {
            tiers.validate()?;
            for (i, q) in tiers.quotas().iter().enumerate() {
                let tier = self.for_tier(*q);
                if let Err(e) = tier.check() {
                    return Err(ConfigError::new(
                        "tiers",
                        format!(
                            "quota {} of {} ({} per {:?}): {} {}",
                            i + 1,
                            tiers.quotas().len(),
                            q.limit(),
                            q.period(),
                            e.field(),
                            e.reason()
                        ),
                    ));
                }
            }
        }
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
    pub(crate) fn with_meter<V: MeterVisitor>(&self, visit: V) -> Result<V::Output, ConfigError> {
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
            Algorithm::Concurrency => visit.visit(Concurrency::new(q).map_err(named)?),
        })
    }

    /// The period, for `RateLimit-Policy`-style reporting (a concurrency
    /// rule has none: see [`Algorithm::is_concurrency`]).
    pub fn window(&self) -> Duration {
        self.quota.period()
    }
}

/// Receives a rule's compiled meter; see [`Rule::with_meter`].
pub(crate) trait MeterVisitor {
    /// What the visit builds.
    type Output;
    /// Builds something from the meter.
    fn visit<M: Meter>(self, meter: M) -> Self::Output;
}

#[cfg(test)]
mod tests;
