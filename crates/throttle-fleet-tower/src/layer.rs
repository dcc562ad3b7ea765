use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use arc_swap::ArcSwap;
use throttle_fleet_core::rule_set::Carried;
use throttle_fleet_core::{ConfigError, backend::Backend, rule_set::RuleSet};
use tower_layer::Layer;

use crate::HttpResponder;
#[cfg(doc)]
use crate::body::ResponseBodies;
use crate::body::Wrap;
use crate::engine::Engine;
use crate::policy::Policy;
use crate::responder::Responder;
use crate::service::Throttle;

/// Applies a [`Policy`] to every request of the services it wraps.
///
/// The layer is built once and is a cheap clone of an `Arc`: every clone,
/// every route it is applied to and every connection share the same counters.
///
/// The responder type `R` decides what rejections look like; the
/// integration crates fix it (`throttle_fleet_axum::ThrottleLayer` answers HTTP
/// 429, `throttle_fleet_tonic::ThrottleLayer` answers gRPC `RESOURCE_EXHAUSTED`).
/// `W` decides the responses' body type ([`ResponseBodies`]): [`Wrap`]
/// (a [`ThrottleBody`](crate::ThrottleBody)) unless the integration answers
/// in its framework's own body (`throttle_fleet_axum::ThrottleLayer` does).
///
/// ```
/// use throttle_fleet_tower::{HttpResponder, MemoryBackend, Policy, Quota, Rule, ThrottleLayer};
/// use throttle_fleet_tower::key::Global;
///
/// let policy = Policy::new().rule(Rule::new("global", Quota::per_second(1_000)), Global);
/// let layer = ThrottleLayer::<HttpResponder>::new(policy, MemoryBackend::default())?;
/// # let _ = layer;
/// # Ok::<(), throttle_fleet_tower::ConfigError>(())
/// ```
pub struct ThrottleLayer<R = HttpResponder, W = Wrap> {
    /// The current rules; [`reload`](Self::reload) replaces them whole.
    pub(crate) shared: Arc<ArcSwap<Engine<R>>>,
    bodies: PhantomData<fn() -> W>,
}

impl<R, W> Clone for ThrottleLayer<R, W> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            bodies: PhantomData,
        }
    }
}

impl<R, W> fmt::Debug for ThrottleLayer<R, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleLayer")
            .field("rules", &self.shared.load().rules)
            .finish_non_exhaustive()
    }
}

impl<R: Responder + Default, W> ThrottleLayer<R, W> {
    /// Builds the layer: validates every rule and extractor, and binds each
    /// rule to `backend` (or to the rule's own backend).
    ///
    /// Fails with a [`ConfigError`] naming the rule and field when a value
    /// cannot work, or when the policy has no rules.
    pub fn new(policy: Policy, backend: impl Backend) -> Result<Self, ConfigError> {
        Self::with_responder(policy, backend, R::default())
    }
}

impl<R: Responder, W> ThrottleLayer<R, W> {
    /// Like [`new`](Self::new), answering rejections with `responder`.
    pub fn with_responder(
        policy: Policy,
        backend: impl Backend,
        responder: R,
    ) -> Result<Self, ConfigError> {
        let (shared, _) = Engine::build(policy, Arc::new(backend), responder, None)?;
        Ok(Self {
            shared: Arc::new(ArcSwap::from_pointee(shared)),
            bodies: PhantomData,
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
    /// use throttle_fleet_tower::{HttpResponder, MemoryBackend, Policy, Quota, Rule, ThrottleLayer};
    /// use throttle_fleet_tower::key::Global;
    /// use throttle_fleet_tower::core::rule_set::Carried;
    ///
    /// let backend = MemoryBackend::default();
    /// let policy = |n| Policy::new().rule(Rule::new("global", Quota::per_second(n)), Global);
    /// let layer = ThrottleLayer::<HttpResponder>::new(policy(100), backend.clone())?;
    /// let reloaded = layer.reload(policy(200), backend.clone())?;
    /// assert_eq!(reloaded.rules, [("global".to_owned(), Carried::Requoted)]);
    /// assert!(layer.reload(policy(0), backend).is_err()); // the old rules stay
    /// assert_eq!(layer.rules().rule(0).quota().limit(), 200);
    /// # Ok::<(), throttle_fleet_tower::ConfigError>(())
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
            Engine::build(policy, Arc::new(backend), responder, Some(&current.rules))?;
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

    /// The key rule `rule` gives a request from a client with `inputs`,
    /// byte for byte as its extractor derives it from a request (see
    /// [`KeyExtractor::key_for`](crate::KeyExtractor::key_for)): what an
    /// operator passes to [`RuleSet::operate`]'s `inspect`, `block`, ...
    /// `None` when no rule has that name or its extractor cannot derive
    /// keys from inputs; `Err` names the input missing or malformed.
    ///
    /// ```
    /// use throttle_fleet_tower::{HttpResponder, MemoryBackend, Policy, Quota, Rule, ThrottleLayer};
    /// use throttle_fleet_tower::key::{Header, KeyInputs};
    ///
    /// let policy = Policy::new().rule(Rule::new("tenant", Quota::per_minute(100)), Header::new("x-api-key"));
    /// let layer = ThrottleLayer::<HttpResponder>::new(policy, MemoryBackend::default())?;
    /// let key = layer.key_for("tenant", &KeyInputs::new().header("X-Api-Key", "k1"));
    /// assert_eq!(key, Some(Ok(throttle_fleet_tower::Key::new("k1"))));
    /// assert!(layer.key_for("tenant", &KeyInputs::new()).unwrap().is_err());
    /// assert_eq!(layer.key_for("nope", &KeyInputs::new()), None);
    /// # Ok::<(), throttle_fleet_tower::ConfigError>(())
    /// ```
    pub fn key_for(
        &self,
        rule: &str,
        inputs: &crate::key::KeyInputs,
    ) -> Option<Result<throttle_fleet_core::Key, String>> {
        self.shared.load().key_for(rule, inputs)
    }
}

impl<S, R, W> Layer<S> for ThrottleLayer<R, W> {
    type Service = Throttle<S, R, W>;

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

impl Reloaded {
    /// What a reload did: `rules`, each rule of the new set in order with
    /// what became of its counts, and the names of those `removed`. For a
    /// server that reloads rules without the layer (the Envoy services).
    pub fn new(rules: Vec<(String, Carried)>, removed: Vec<String>) -> Self {
        Self { rules, removed }
    }
}
