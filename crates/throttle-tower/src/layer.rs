use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;
use http::request::Parts;
use smallvec::SmallVec;
use throttle_core::{Backend, Carried, Charged, Check, ConfigError, Demand, Outcome, RuleSet};
use tower_layer::Layer;

use crate::KeyExtractor;
use crate::extract::Extracted;
use crate::metrics::{Enforcement, Metered};
use crate::policy::{CostFn, MissingKey, Policy, RefundFn};
use crate::responder::{HttpResponder, Rejection, Responder};
use crate::service::Throttle;

/// Applies a [`Policy`] to every request of the services it wraps.
///
/// The layer is built once and is a cheap clone of an `Arc`: every clone,
/// every route it is applied to and every connection share the same counters.
///
/// The responder type `R` decides what rejections look like; the
/// integration crates fix it (`throttle_axum::ThrottleLayer` answers HTTP
/// 429, `throttle_tonic::ThrottleLayer` answers gRPC `RESOURCE_EXHAUSTED`).
///
/// ```
/// use throttle_tower::{Global, HttpResponder, MemoryBackend, Policy, Quota, Rule, ThrottleLayer};
///
/// let policy = Policy::new().rule(Rule::new("global", Quota::per_second(1_000)), Global);
/// let layer = ThrottleLayer::<HttpResponder>::new(policy, MemoryBackend::default())?;
/// # let _ = layer;
/// # Ok::<(), throttle_tower::ConfigError>(())
/// ```
pub struct ThrottleLayer<R = HttpResponder> {
    /// The current rules; [`reload`](Self::reload) replaces them whole.
    pub(crate) shared: Arc<ArcSwap<Shared<R>>>,
}

impl<R> Clone for ThrottleLayer<R> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<R> fmt::Debug for ThrottleLayer<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleLayer")
            .field("rules", &self.shared.load().rules)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Shared<R> {
    pub(crate) rules: RuleSet,
    limits: Box<[Bound]>,
    pub(crate) responder: R,
    /// `Policy::shadow_header`.
    pub(crate) shadow_header: bool,
    /// Whether any limit settles its cost from the response.
    settles: bool,
}

struct Bound {
    index: usize,
    extractor: Box<dyn KeyExtractor>,
    on_missing: MissingKey,
    cost: Option<CostFn>,
    static_cost: u64,
    refund: Option<RefundFn>,
}

/// The charges of response-aware limits, settled when the inner service
/// answers (boxed in the response future only when there are some).
pub(crate) struct Settle<R> {
    shared: Arc<Shared<R>>,
    charges: SmallVec<[(Demand, Outcome); 2]>,
}

impl<R> Settle<R> {
    /// Keeps the charges of `taken` whose limit refunds by response.
    pub(crate) fn of(
        shared: &Arc<Shared<R>>,
        demands: &[Demand],
        charged: &Charged,
    ) -> Option<Box<Self>> {
        let charges: SmallVec<[(Demand, Outcome); 2]> = charged
            .taken
            .iter()
            .map(|&(i, o)| (demands[i], o))
            .filter(|(d, _)| shared.limits[d.rule].refund.is_some())
            .collect();
        (!charges.is_empty()).then(|| {
            Box::new(Self {
                shared: shared.clone(),
                charges,
            })
        })
    }

    /// Gives back the costs whose limit says so for `status`.
    pub(crate) fn settle(self, status: http::StatusCode) {
        for (demand, outcome) in &self.charges {
            if let Some(refund) = &self.shared.limits[demand.rule].refund
                && refund(status)
            {
                self.shared.rules.release(demand, outcome);
            }
        }
    }
}

impl<R: Responder + Default> ThrottleLayer<R> {
    /// Builds the layer: validates every rule and extractor, and binds each
    /// rule to `backend` (or to the rule's own backend).
    ///
    /// Fails with a [`ConfigError`] naming the rule and field when a value
    /// cannot work, or when the policy has no rules.
    pub fn new(policy: Policy, backend: impl Backend) -> Result<Self, ConfigError> {
        Self::with_responder(policy, backend, R::default())
    }
}

impl<R: Responder> ThrottleLayer<R> {
    /// Like [`new`](Self::new), answering rejections with `responder`.
    pub fn with_responder(
        policy: Policy,
        backend: impl Backend,
        responder: R,
    ) -> Result<Self, ConfigError> {
        let (shared, _) = Shared::build(policy, Arc::new(backend), responder, None)?;
        Ok(Self {
            shared: Arc::new(ArcSwap::from_pointee(shared)),
        })
    }

    /// Replaces the policy of this layer and of every service it wraps,
    /// from the next request on, binding new rules to `backend` (pass the
    /// backend the layer was built with). Counts carry over: a rule whose
    /// name and algorithm are unchanged keeps its counts, and a changed
    /// quota applies from the next request (see [`Carried`]). A policy that
    /// does not validate is refused whole, with the error, and the running
    /// rules stay.
    ///
    /// ```
    /// use throttle_tower::{Global, HttpResponder, MemoryBackend, Policy, Quota, Rule, ThrottleLayer};
    /// use throttle_tower::Carried;
    ///
    /// let backend = MemoryBackend::default();
    /// let policy = |n| Policy::new().rule(Rule::new("global", Quota::per_second(n)), Global);
    /// let layer = ThrottleLayer::<HttpResponder>::new(policy(100), backend.clone())?;
    /// let reloaded = layer.reload(policy(200), backend.clone())?;
    /// assert_eq!(reloaded.rules, [("global".to_owned(), Carried::Requoted)]);
    /// assert!(layer.reload(policy(0), backend).is_err()); // the old rules stay
    /// assert_eq!(layer.rules().rule(0).quota().limit(), 200);
    /// # Ok::<(), throttle_tower::ConfigError>(())
    /// ```
    pub fn reload(&self, policy: Policy, backend: impl Backend) -> Result<Reloaded, ConfigError>
    where
        R: Clone,
    {
        let current = self.shared.load();
        let responder = current.responder.clone();
        self.reload_with_responder(policy, backend, responder)
    }

    /// Like [`reload`](Self::reload), answering with `responder` from now
    /// on.
    pub fn reload_with_responder(
        &self,
        policy: Policy,
        backend: impl Backend,
        responder: R,
    ) -> Result<Reloaded, ConfigError> {
        let current = self.shared.load_full();
        let (shared, rules) =
            Shared::build(policy, Arc::new(backend), responder, Some(&current.rules))?;
        let removed = (0..current.rules.len())
            .map(|i| current.rules.rule(i).name().to_owned())
            .filter(|name| !rules.iter().any(|(n, _)| n == name))
            .collect();
        self.shared.store(Arc::new(shared));
        Ok(Reloaded { rules, removed })
    }

    /// The rules, bound to their backends, in policy order (as they are
    /// now: a reload replaces them).
    pub fn rules(&self) -> RuleSet {
        self.shared.load().rules.clone()
    }
}

impl<S, R> Layer<S> for ThrottleLayer<R> {
    type Service = Throttle<S, R>;

    fn layer(&self, inner: S) -> Self::Service {
        Throttle::new(inner, self.shared.clone())
    }
}

/// What a [`reload`](ThrottleLayer::reload) did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reloaded {
    /// Every rule of the new policy, in order, and what became of its counts.
    pub rules: Vec<(String, Carried)>,
    /// Rules of the old policy that the new one no longer has.
    pub removed: Vec<String>,
}

impl<R> Shared<R> {
    /// Binds every rule of `policy` (after `previous`, on a reload).
    fn build(
        policy: Policy,
        backend: Arc<dyn Backend>,
        mut responder: R,
        previous: Option<&RuleSet>,
    ) -> Result<(Self, Vec<(String, Carried)>), ConfigError>
    where
        R: Responder,
    {
        if policy.limits.is_empty() {
            return Err(ConfigError::new(
                "policy",
                "has no rules: add at least one with Policy::rule",
            ));
        }
        let mut rules = RuleSet::new();
        let mut limits = Vec::with_capacity(policy.limits.len());
        let mut carried = Vec::with_capacity(policy.limits.len());
        let mut kinds = Vec::with_capacity(policy.limits.len());
        let shadow_header = policy.shadow_header;
        let settles = policy.limits.iter().any(|l| l.refund.is_some());
        for limit in policy.limits {
            limit
                .extractor
                .validate()
                .map_err(|e| e.in_rule(limit.rule.name()))?;
            let static_cost = u64::from(limit.rule.static_cost());
            kinds.push(limit.extractor.kind());
            let name = limit.rule.name().to_owned();
            // Each rule is bound through a meter of its decisions.
            let own = limit.backend.as_ref().unwrap_or(&backend).clone();
            let enforcement = if limit.rule.is_shadow() {
                Enforcement::Shadow
            } else {
                Enforcement::Enforced
            };
            let own = Metered::new(own, enforcement);
            let (index, how) = match previous {
                Some(previous) => rules.bind_after(limit.rule, &own, previous)?,
                None => (rules.bind(limit.rule, &own)?, Carried::Fresh),
            };
            carried.push((name, how));
            limits.push(Bound {
                index,
                extractor: limit.extractor,
                on_missing: limit.on_missing,
                cost: limit.cost,
                static_cost,
                refund: limit.refund,
            });
            // Demands name their rule by index; the limits are kept at the
            // same index so that a settlement finds its limit.
            debug_assert_eq!(index, limits.len() - 1);
        }
        let bound: Vec<_> = (0..rules.len())
            .map(|i| (&**rules.rule(i), &*kinds[i]))
            .collect();
        responder.bind(&bound);
        Ok((
            Self {
                rules,
                limits: limits.into(),
                responder,
                shadow_header,
                settles,
            },
            carried,
        ))
    }
}

/// What the policy made of a request before the backends are asked.
pub(crate) enum Prepared<'a> {
    Check(Check),
    /// A check whose charges a response-aware limit settles later (boxed:
    /// only policies with such a limit pay for its size).
    Settle(Box<(Check<Charged>, SmallVec<[Demand; 4]>)>),
    Rejected(Rejection<'a>),
}

impl Bound {
    /// This rule's demand for `req`: `None` when the rule does not apply
    /// (skipped, or free), the status to answer when its key is missing and
    /// the rule rejects such requests.
    #[inline]
    fn demand(&self, req: &Parts) -> Result<Option<Demand>, http::StatusCode> {
        let key = match self.extractor.extract(req) {
            Extracted::Key(key) => key,
            Extracted::Skip => return Ok(None),
            Extracted::Missing => match self.on_missing {
                MissingKey::Skip => return Ok(None),
                MissingKey::Reject(status) => return Err(status),
            },
        };
        let cost = match &self.cost {
            Some(f) => u64::from(f(req)),
            None => self.static_cost,
        };
        Ok((cost > 0).then_some(Demand {
            rule: self.index,
            key,
            cost,
        }))
    }
}

impl<R: Responder> Shared<R> {
    #[cold]
    fn missing(&self, limit: &Bound, status: http::StatusCode) -> Prepared<'_> {
        let rule = self.rules.rule(limit.index);
        tracing::debug!(rule = rule.name(), %status, "rate limit key missing: rejecting");
        Prepared::Rejected(Rejection::MissingKey { rule, status })
    }

    /// Extracts every rule's key and cost, then checks them.
    pub(crate) fn prepare(&self, req: &Parts) -> Prepared<'_> {
        if let [limit] = &*self.limits
            && !self.settles
        {
            // One rule, nothing to settle: no list of demands.
            return match limit.demand(req) {
                Ok(Some(demand)) => {
                    Prepared::Check(self.rules.check(std::slice::from_ref(&demand)))
                }
                Ok(None) => Prepared::Check(Check::Ready(throttle_core::Decision::Unlimited)),
                Err(status) => self.missing(limit, status),
            };
        }
        let mut demands: SmallVec<[Demand; 4]> = SmallVec::new();
        for limit in self.limits.iter() {
            match limit.demand(req) {
                Ok(Some(demand)) => demands.push(demand),
                Ok(None) => {}
                Err(status) => return self.missing(limit, status),
            }
        }
        if self.settles {
            let check = self.rules.check_charged(&demands);
            return Prepared::Settle(Box::new((check, demands)));
        }
        Prepared::Check(self.rules.check(&demands))
    }
}
