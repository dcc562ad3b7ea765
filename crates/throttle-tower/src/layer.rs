use std::fmt;
use std::sync::Arc;

use http::request::Parts;
use smallvec::SmallVec;
use throttle_core::{Backend, Check, ConfigError, Demand, RuleSet};
use tower_layer::Layer;

use crate::KeyExtractor;
use crate::extract::Extracted;
use crate::metrics::{Enforcement, Metered};
use crate::policy::{CostFn, MissingKey, Policy};
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
    pub(crate) shared: Arc<Shared<R>>,
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
            .field("rules", &self.shared.rules)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Shared<R> {
    pub(crate) rules: RuleSet,
    limits: Box<[Bound]>,
    pub(crate) responder: R,
}

struct Bound {
    index: usize,
    extractor: Box<dyn KeyExtractor>,
    on_missing: MissingKey,
    cost: Option<CostFn>,
    static_cost: u64,
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
        if policy.limits.is_empty() {
            return Err(ConfigError::new(
                "policy",
                "has no rules: add at least one with Policy::rule",
            ));
        }
        let backend: Arc<dyn Backend> = Arc::new(backend);
        let mut rules = RuleSet::new();
        let mut limits = Vec::with_capacity(policy.limits.len());
        for limit in policy.limits {
            limit
                .extractor
                .validate()
                .map_err(|e| e.in_rule(limit.rule.name()))?;
            let static_cost = u64::from(limit.rule.static_cost());
            let backend = limit.backend.as_ref().unwrap_or(&backend).clone();
            let index = rules.bind(limit.rule, &Metered::new(backend, Enforcement::Enforced))?;
            limits.push(Bound {
                index,
                extractor: limit.extractor,
                on_missing: limit.on_missing,
                cost: limit.cost,
                static_cost,
            });
        }
        Ok(Self {
            shared: Arc::new(Shared {
                rules,
                limits: limits.into(),
                responder,
            }),
        })
    }

    /// The rules, bound to their backends, in policy order.
    pub fn rules(&self) -> &RuleSet {
        &self.shared.rules
    }
}

impl<S, R> Layer<S> for ThrottleLayer<R> {
    type Service = Throttle<S, R>;

    fn layer(&self, inner: S) -> Self::Service {
        Throttle::new(inner, self.shared.clone())
    }
}

/// What the policy made of a request before the backends are asked.
pub(crate) enum Prepared<'a> {
    Check(Check),
    Rejected(Rejection<'a>),
}

impl<R: Responder> Shared<R> {
    /// Extracts every rule's key and cost, then checks them.
    pub(crate) fn prepare(&self, req: &Parts) -> Prepared<'_> {
        let mut demands: SmallVec<[Demand; 4]> = SmallVec::new();
        for limit in self.limits.iter() {
            let key = match limit.extractor.extract(req) {
                Extracted::Key(key) => key,
                Extracted::Skip => continue,
                Extracted::Missing => match limit.on_missing {
                    MissingKey::Skip => continue,
                    MissingKey::Reject(status) => {
                        let rule = self.rules.rule(limit.index);
                        tracing::debug!(rule = rule.name(), %status, "rate limit key missing: rejecting");
                        return Prepared::Rejected(Rejection::MissingKey { rule, status });
                    }
                },
            };
            let cost = match &limit.cost {
                Some(f) => u64::from(f(req)),
                None => limit.static_cost,
            };
            if cost > 0 {
                demands.push(Demand {
                    rule: limit.index,
                    key,
                    cost,
                });
            }
        }
        Prepared::Check(self.rules.check(&demands))
    }
}
