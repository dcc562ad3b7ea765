//! The ordered rules a request must pass, each with its key extractor.

use std::fmt;
use std::sync::Arc;

use crate::RequestHead;
use http::StatusCode;
use throttle_fleet_core::rule_set::RefundFn;
use throttle_fleet_core::{Class, Rule, backend::Backend};

use crate::KeyExtractor;

/// What happens when a rule's key material is missing or malformed
/// ([`Extracted::Missing`](crate::key::Extracted::Missing)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingKey {
    /// Answer with this status and a body naming the rule (default: 400).
    /// Nothing is counted.
    Reject(StatusCode),
    /// Let the request pass this rule unchecked. Chosen explicitly: never
    /// the default, so no rule goes unenforced by accident.
    Skip,
}

impl Default for MissingKey {
    fn default() -> Self {
        Self::Reject(StatusCode::BAD_REQUEST)
    }
}

/// A per-request cost: a function of the request. Returning 0 exempts the
/// request from the rule.
pub type CostFn = Arc<dyn Fn(&RequestHead<'_>) -> u32 + Send + Sync>;

/// One rule of a [`Policy`] with everything the layer needs to apply it: the
/// key extractor, what to do when the key is missing, an optional
/// per-request cost and an optional backend of its own.
///
/// ```
/// use http::StatusCode;
/// use throttle_fleet_tower::{Limit, MissingKey, Policy, Quota, Rule};
/// use throttle_fleet_tower::key::Header;
///
/// let uploads = Limit::new(Rule::new("upload-bytes", Quota::per_minute(10_000_000)), Header::new("x-api-key"))
///     .on_missing_key(MissingKey::Reject(StatusCode::UNAUTHORIZED))
///     .cost_fn(|req| {
///         req.headers.get("content-length")
///             .and_then(|v| v.to_str().ok()?.parse().ok())
///             .unwrap_or(1)
///     });
/// let policy = Policy::new().limit(uploads);
/// # let _ = policy;
/// ```
pub struct Limit {
    pub(crate) rule: Rule,
    pub(crate) extractor: Box<dyn KeyExtractor>,
    pub(crate) on_missing: MissingKey,
    pub(crate) cost: Option<CostFn>,
    pub(crate) backend: Option<Arc<dyn Backend>>,
    pub(crate) refund: Option<RefundFn>,
    pub(crate) class: Option<ClassFn>,
}

/// What [`Limit::class_by`] keeps: a request's class under a rule.
pub type ClassFn = Arc<dyn Fn(&RequestHead<'_>) -> Class + Send + Sync>;

impl Limit {
    /// `rule`, keyed by `extractor`.
    pub fn new(rule: Rule, extractor: impl KeyExtractor) -> Self {
        Self {
            rule,
            on_missing: extractor.on_missing(),
            extractor: Box::new(extractor),
            cost: None,
            backend: None,
            refund: None,
            class: None,
        }
    }

    /// Gives each request a class under this rule: what a rule with a
    /// reserve ([`InFlightLimit::reserve`](throttle_fleet_core::InFlightLimit::reserve)) or an adaptive limit
    /// ([`InFlightLimit::adaptive`](throttle_fleet_core::InFlightLimit::adaptive)) weighs when capacity runs short. Without it,
    /// every request is [`Class::Default`].
    ///
    /// ```
    /// use throttle_fleet_tower::{InFlightLimit, Limit, Rule};
    /// use throttle_fleet_tower::core::Class;
    /// use throttle_fleet_tower::key::Global;
    ///
    /// let pool = InFlightLimit { reserve: 8, ..InFlightLimit::new(64) };
    /// let backend = Limit::new(Rule::concurrency("backend", pool), Global)
    ///     .class_by(|req| match req.uri.path() {
    ///         "/book" => Class::Critical,
    ///         "/browse" => Class::Sheddable,
    ///         _ => Class::Default,
    ///     });
    /// # let _ = backend;
    /// ```
    #[must_use]
    pub fn class_by(
        mut self,
        class: impl Fn(&RequestHead<'_>) -> Class + Send + Sync + 'static,
    ) -> Self {
        self.class = Some(Arc::new(class));
        self
    }

    /// What to do when the key is missing (default: the extractor's
    /// [`on_missing`](KeyExtractor::on_missing), usually reject with 400).
    #[must_use]
    pub fn on_missing_key(mut self, on_missing: MissingKey) -> Self {
        self.on_missing = on_missing;
        self
    }

    /// Weighs each request with `cost(request)` instead of the rule's static
    /// cost. A cost above the rule's capacity is always denied; 0 exempts
    /// the request from this rule.
    #[must_use]
    pub fn cost_fn(
        mut self,
        cost: impl Fn(&RequestHead<'_>) -> u32 + Send + Sync + 'static,
    ) -> Self {
        self.cost = Some(Arc::new(cost));
        self
    }

    /// Makes the cost depend on the response: the cost is taken when the
    /// request is checked, as always, and given back once the inner
    /// service has answered with a status for which `refund(status)` is
    /// true. For example, a rule that should not charge for the service's
    /// own failures: `refund_when(|s| s.is_server_error())`.
    ///
    /// The refund goes through the same path as the refund of a request
    /// another rule denied ([`RuleSet::refund`](throttle_fleet_core::rule_set::RuleSet::refund)),
    /// so its precision is the backend's: exact in memory and in the exact
    /// mode, best effort where a window has moved on since the check (a
    /// window algorithm's refund of a request checked in the previous window
    /// is dropped). The cost is kept when the inner service fails
    /// (`Err`), when the response future is dropped before it answers (a
    /// client that went away), and when the request was rejected.
    ///
    /// Because the charge comes first, concurrent requests see each other's
    /// cost until their responses arrive: a burst can be denied by cost that
    /// is refunded a moment later. The count is never lower than what the
    /// rule is meant to count.
    ///
    /// ```
    /// use throttle_fleet_tower::{Limit, Quota, Rule};
    /// use throttle_fleet_tower::key::Header;
    ///
    /// let api = Limit::new(Rule::new("tenant", Quota::per_minute(1_000)), Header::new("x-api-key"))
    ///     .refund_when(|status| status.is_server_error());
    /// # let _ = api;
    /// ```
    #[must_use]
    pub fn refund_when(
        mut self,
        refund: impl Fn(StatusCode) -> bool + Send + Sync + 'static,
    ) -> Self {
        // The rule set settles by the status code's number.
        let refund = move |status: u16| StatusCode::from_u16(status).is_ok_and(&refund);
        self.refund = Some(Arc::new(refund));
        self
    }

    /// Counts only the requests whose response status satisfies `counted`:
    /// the cost is taken up front and given back for any other status
    /// (`refund_when(|s| !counted(s))`, with everything said there). The
    /// classic use is a brute-force guard that counts only failed logins:
    ///
    /// ```
    /// use http::StatusCode;
    /// use throttle_fleet_tower::{Limit, Quota, Rule};
    /// use throttle_fleet_tower::key::Header;
    ///
    /// let logins = Limit::new(Rule::new("failed-logins", Quota::per_hour(10)), Header::new("x-user"))
    ///     .charge_when(|s| s == StatusCode::UNAUTHORIZED || s == StatusCode::FORBIDDEN);
    /// # let _ = logins;
    /// ```
    ///
    /// With 10 failures left, 10 concurrent logins are all charged while
    /// they run, so an eleventh concurrent one is denied even if the ten
    /// all succeed and are refunded: the limit may bind early under a
    /// burst, never late.
    #[must_use]
    pub fn charge_when(self, counted: impl Fn(StatusCode) -> bool + Send + Sync + 'static) -> Self {
        self.refund_when(move |s| !counted(s))
    }

    /// Counts this rule in `backend` instead of the layer's backend.
    #[must_use]
    pub fn backend(mut self, backend: impl Backend) -> Self {
        self.backend = Some(Arc::new(backend));
        self
    }
}

impl fmt::Debug for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limit")
            .field("rule", &self.rule)
            .field("on_missing", &self.on_missing)
            .field("cost_fn", &self.cost.is_some())
            .field("own_backend", &self.backend.is_some())
            .field("refund_when", &self.refund.is_some())
            .finish_non_exhaustive()
    }
}

/// The ordered rules a request must pass. All must allow; the first that
/// denies is named in the answer.
///
/// ```
/// use throttle_fleet_tower::{Policy, Quota, Rule};
/// use throttle_fleet_tower::key::{Global, Header};
///
/// let policy = Policy::new()
///     .rule(Rule::new("tenant", Quota::per_minute(1_000)).token_bucket(), Header::new("x-api-key"))
///     .rule(Rule::new("global", Quota::per_second(5_000)).sliding_window_counter(), Global);
/// assert_eq!(policy.len(), 2);
/// ```
#[derive(Debug, Default)]
pub struct Policy {
    pub(crate) limits: Vec<Limit>,
    pub(crate) shadow_header: bool,
}

impl Policy {
    /// An empty policy.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `rule`, keyed by `extractor`, with the defaults of [`Limit`].
    #[must_use]
    pub fn rule(self, rule: Rule, extractor: impl KeyExtractor) -> Self {
        self.limit(Limit::new(rule, extractor))
    }

    /// Adds a fully configured [`Limit`].
    #[must_use]
    pub fn limit(mut self, limit: Limit) -> Self {
        self.limits.push(limit);
        self
    }

    /// Adds `X-RateLimit-Shadow: <rule>[, <rule>...]` to a response when
    /// shadow rules ([`Rule::shadow`]) would have denied its request (off
    /// by default: it tells clients about limits that are not enforced yet;
    /// useful in staging and to test a rollout from outside).
    ///
    /// Whatever this says, every shadow denial is reported as a `tracing`
    /// event (target `throttle::shadow`, level debug, naming the rules and
    /// never the key) and in [`Decision::shadow_denied`](throttle_fleet_core::decision::Decision::shadow_denied).
    #[must_use]
    pub fn shadow_header(mut self, on: bool) -> Self {
        self.shadow_header = on;
        self
    }

    /// How many rules the policy has.
    pub fn len(&self) -> usize {
        self.limits.len()
    }

    /// Whether the policy has no rules.
    pub fn is_empty(&self) -> bool {
        self.limits.is_empty()
    }
}
