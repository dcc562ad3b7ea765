//! One named limit: a dimension, an algorithm, a quota, a cost and a failure
//! policy.

use std::sync::Arc;
use std::time::Duration;

use crate::adaptive::Vegas;
use crate::algorithm::{
    Algorithm, Concurrency, FixedWindow, Gcra, Meter, SlidingWindowCounter, SlidingWindowLog,
};
use crate::operate::Penalty;
use crate::tier::Tiers;
use crate::{Class, ConfigError, Key, Quota};

/// The longest rule name accepted.
pub const MAX_RULE_NAME_LEN: usize = 64;

/// How long a concurrency rule's slot lives in a shared backend without
/// being renewed, unless the rule says otherwise ([`Rule::slot_ttl`]).
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
    tiers: Option<Tiers>,
    shadow: bool,
    slot_ttl: Duration,
    penalty: Option<Penalty>,
    reserve: u64,
    adaptive: Option<Vegas>,
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
            slot_ttl: DEFAULT_SLOT_TTL,
            penalty: None,
            reserve: 0,
            adaptive: None,
        }
    }

    /// A concurrency rule named `name`: at most `limit` requests of a key in
    /// flight at once (see [`Concurrency`]). A request takes its slot (its
    /// cost, 1 unless told otherwise) when it is admitted, and the layer
    /// gives it back when the response body has been sent in full or
    /// dropped; a denial is answered like a rate limit's, with
    /// `Retry-After: 1`.
    ///
    /// ```
    /// use throttle_fleet_core::{algorithm::Algorithm, Quota, Rule};
    ///
    /// let rule = Rule::concurrency("inflight", 20);
    /// assert_eq!(rule.algorithm(), Algorithm::Concurrency);
    /// assert_eq!(rule.quota(), Quota::in_flight(20));
    /// assert!(rule.validate().is_ok());
    /// assert_eq!(Rule::concurrency("inflight", 0).validate().unwrap_err().field(), "quota.limit");
    /// ```
    pub fn concurrency(name: impl AsRef<str>, limit: u64) -> Self {
        Self::new(name, Quota::in_flight(limit)).algorithm_is(Algorithm::Concurrency)
    }

    /// How long a concurrency rule's slot lives in a shared backend (Redis)
    /// unless its instance renews it (default [`DEFAULT_SLOT_TTL`], from
    /// [`MIN_SLOT_TTL`] to [`MAX_SLOT_TTL`], whole milliseconds). An
    /// instance renews the slots of its running requests three times per
    /// lifetime, so a slow request keeps its slot however long it runs,
    /// while the slots of an instance that died come back after at most
    /// this long. Rate rules and the memory backend do not use it.
    #[must_use]
    pub fn slot_ttl(mut self, ttl: Duration) -> Self {
        self.slot_ttl = ttl;
        self
    }

    /// The slot lifetime (see [`slot_ttl`](Self::slot_ttl)).
    pub fn slot_lifetime(&self) -> Duration {
        self.slot_ttl
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
    ///     .tiers([("premium-key", Quota::per_minute(5_000))]);
    /// assert_eq!(rule.quota_for(&Key::new("premium-key")), Quota::per_minute(5_000));
    /// assert_eq!(rule.quota_for(&Key::new("other")), Quota::per_minute(1_000));
    /// assert!(rule.validate().is_ok());
    ///
    /// let bad = Rule::new("tenant", Quota::per_minute(10)).tiers([("k", Quota::per_minute(0))]);
    /// let err = bad.validate().unwrap_err();
    /// assert_eq!((err.rule(), err.field()), (Some("tenant"), "tiers"));
    /// ```
    #[must_use]
    pub fn tiers<K: Into<Key>>(mut self, tiers: impl IntoIterator<Item = (K, Quota)>) -> Self {
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
    ///     .tier_fn([paid], move |key: &Key| if key.as_bytes().starts_with(b"paid:") { paid } else { free });
    /// assert_eq!(rule.quota_for(&Key::new("paid:42")), paid);
    /// assert_eq!(rule.quota_for(&Key::new("u:42")), free);
    /// ```
    #[must_use]
    pub fn tier_fn(
        mut self,
        quotas: impl IntoIterator<Item = Quota>,
        select: impl Fn(&Key) -> Quota + Send + Sync + 'static,
    ) -> Self {
        self.tiers = Some(Tiers::from_fn(quotas, select));
        self
    }

    /// The rule's tiers, if it has any.
    pub fn tier_set(&self) -> Option<&Tiers> {
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
    /// [`tier_set`](Self::tier_set) of the rule they are given first.
    #[must_use]
    pub fn for_tier(&self, quota: Quota) -> Self {
        Self {
            quota,
            tiers: None,
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
    ///     .penalty(Penalty::new(10, Duration::from_secs(60), Duration::from_secs(60)));
    /// assert!(login.validate().is_ok());
    /// let bad = Rule::concurrency("inflight", 4).penalty(Penalty::new(1, Duration::from_secs(1), Duration::from_secs(1)));
    /// assert_eq!(bad.validate().unwrap_err().field(), "penalty");
    /// ```
    #[must_use]
    pub fn penalty(mut self, penalty: Penalty) -> Self {
        self.penalty = Some(penalty);
        self
    }

    /// Keeps `reserve` of a concurrency rule's slots for each class above a
    /// request's ([`Class`]): a [`Critical`](Class::Critical) request may
    /// use all `n`, a [`Default`](Class::Default) one `n − reserve`, a
    /// [`Sheddable`](Class::Sheddable) one `n − 2 × reserve`. With an
    /// [adaptive](Self::adaptive) limit `L`, the reserve shrinks with it:
    /// `⌈reserve × L / n⌉` per class. A request refused for capacity that
    /// only a higher class may use (or, under an adaptive limit, below
    /// `n`) is *shed* ([`Decision::is_shed`](crate::Decision::is_shed)):
    /// answered 503, not 429.
    ///
    /// At most `(n − 1) / 2`, so that a sheddable request can still take a
    /// slot; no tiers.
    ///
    /// ```
    /// use throttle_fleet_core::{Class, Rule};
    ///
    /// let rule = Rule::concurrency("backend", 40).reserve(10);
    /// assert_eq!(rule.limit_for(Class::Critical, 40), 40);
    /// assert_eq!(rule.limit_for(Class::Default, 40), 30);
    /// assert_eq!(rule.limit_for(Class::Sheddable, 40), 20);
    /// // Under an adaptive limit of 20, the reserve is 5 a class.
    /// assert_eq!(rule.limit_for(Class::Sheddable, 20), 10);
    /// assert_eq!(Rule::concurrency("backend", 40).reserve(20).validate().unwrap_err().field(), "reserve");
    /// ```
    #[must_use]
    pub fn reserve(mut self, reserve: u64) -> Self {
        self.reserve = reserve;
        self
    }

    /// The slots kept for each class above a request's (see
    /// [`reserve`](Self::reserve)); 0 when none are.
    pub fn reserved(&self) -> u64 {
        self.reserve
    }

    /// Makes a concurrency rule's limit adapt to the latency of the
    /// requests it admits, in this process, between the algorithm's minimum
    /// and the rule's own limit `n` (see [`Vegas`]). A request refused
    /// under a limit below `n` is shed (503). Bound to a backend that
    /// decides in the process (the memory backend); no tiers.
    ///
    /// ```
    /// use throttle_fleet_core::{memory::MemoryBackend, Rule, rule_set::RuleSet};
    /// use throttle_fleet_core::adaptive::Vegas;
    ///
    /// let mut rules = RuleSet::new();
    /// let backend = rules.bind(Rule::concurrency("backend", 64).adaptive(Vegas::new()), &MemoryBackend::default())?;
    /// assert_eq!(rules.adaptive_limit(backend), Some(20));
    /// # Ok::<(), throttle_fleet_core::ConfigError>(())
    /// ```
    #[must_use]
    pub fn adaptive(mut self, vegas: Vegas) -> Self {
        self.adaptive = Some(vegas);
        self
    }

    /// The rule's adaptive limit's parameters, if it has one.
    pub fn adaptive_limit(&self) -> Option<&Vegas> {
        self.adaptive.as_ref()
    }

    /// How many slots a request of `class` may find held and still take
    /// one, when the rule's limit is `limit` now (`n`, or the adaptive
    /// limit): `limit − steps × reserve`, the reserve scaled by `limit / n`.
    pub fn limit_for(&self, class: Class, limit: u64) -> u64 {
        let steps = class.steps_below_critical();
        if steps == 0 || self.reserve == 0 {
            return limit;
        }
        let n = self.quota.limit().max(1);
        let reserve = if limit >= n {
            self.reserve
        } else {
            (u128::from(self.reserve) * u128::from(limit)).div_ceil(u128::from(n)) as u64
        };
        limit.saturating_sub(steps.saturating_mul(reserve))
    }

    /// Whether the rule may shed a request (answer it 503 while the
    /// rule's own limit is not reached): it has a reserve, which weighs a
    /// request's class, or an adaptive limit.
    pub fn sheds(&self) -> bool {
        self.reserve > 0 || self.adaptive.is_some()
    }

    /// The rule's penalty, if it has one (see [`penalty`](Self::penalty)).
    pub fn penalty_policy(&self) -> Option<&Penalty> {
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
        if self.algorithm.is_concurrency() {
            let ttl = self.slot_ttl;
            if ttl < MIN_SLOT_TTL
                || ttl > MAX_SLOT_TTL
                || !ttl.subsec_nanos().is_multiple_of(1_000_000)
            {
                return Err(ConfigError::new(
                    "slot_ttl",
                    format!(
                        "must be a whole number of milliseconds from {MIN_SLOT_TTL:?} to one day (got {ttl:?})"
                    ),
                ));
            }
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
        if self.reserve > 0 {
            let n = self.quota.limit();
            if !self.algorithm.is_concurrency() {
                return Err(ConfigError::new(
                    "reserve",
                    "applies to concurrency rules only",
                ));
            }
            if self.reserve.saturating_mul(2) >= n {
                return Err(ConfigError::new(
                    "reserve",
                    format!(
                        "must be at most {} for a limit of {n}, so that a sheddable request can still take a slot (got {})",
                        n.saturating_sub(1) / 2,
                        self.reserve
                    ),
                ));
            }
        }
        if let Some(vegas) = &self.adaptive {
            if !self.algorithm.is_concurrency() {
                return Err(ConfigError::new(
                    "adaptive",
                    "applies to concurrency rules only",
                ));
            }
            vegas.validate(self.quota.limit())?;
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
pub trait MeterVisitor {
    /// What the visit builds.
    type Output;
    /// Builds something from the meter.
    fn visit<M: Meter>(self, meter: M) -> Self::Output;
}

#[cfg(test)]
mod tests;
