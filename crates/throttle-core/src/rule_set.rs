//! The rule set that combines rules into one decision.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::algorithm::{FixedWindow, Gcra, SlidingWindowCounter};
use crate::backend::{Acquire, Limiter, Outcome, Unavailable};
use crate::decision::{Allowed, Charged, Check, Decision, Demand, Denied, Refused, ShadowDenials};
use crate::{Backend, ConfigError, Key, MemoryLimiter, Quota, Rule, SystemClock};

/// What a check hands back: a decision, or a decision and its charges.
trait Keep: Send + 'static {
    fn keep(decision: Decision, held: &[(usize, Outcome)]) -> Self;
}

impl Keep for Decision {
    #[inline]
    fn keep(decision: Decision, _: &[(usize, Outcome)]) -> Self {
        decision
    }
}

impl Keep for Charged {
    fn keep(decision: Decision, held: &[(usize, Outcome)]) -> Self {
        let taken = if decision.is_allowed() {
            held.iter()
                .filter(|(_, o)| o.step.allowed)
                .copied()
                .collect()
        } else {
            SmallVec::new()
        };
        Self { decision, taken }
    }
}

/// How a rule's limiter is asked: the memory backend's own limiters (on the
/// system clock, for the algorithms whose state is plain data) are called
/// directly, their check inlined into the rule set's; any other limiter
/// goes through the [`Limiter`] trait.
#[derive(Clone)]
enum Engine {
    Bucket(Arc<MemoryLimiter<Gcra, SystemClock>>),
    Window(Arc<MemoryLimiter<FixedWindow, SystemClock>>),
    Counter(Arc<MemoryLimiter<SlidingWindowCounter, SystemClock>>),
    /// Not one of those: ask through the trait.
    Other,
}

impl Engine {
    fn new(limiter: &Arc<dyn Limiter>) -> Self {
        let any: Arc<dyn Any + Send + Sync> = limiter.clone();
        any.downcast()
            .map(Self::Bucket)
            .or_else(|any| any.downcast().map(Self::Window))
            .or_else(|any| any.downcast().map(Self::Counter))
            .unwrap_or(Self::Other)
    }

    /// The memory backend's answer, made here; `None` for another limiter.
    #[inline(always)]
    fn local(&self, key: &Key, cost: u64) -> Option<Outcome> {
        match self {
            Self::Bucket(l) => Some(l.check(key, cost)),
            Self::Window(l) => Some(l.check(key, cost)),
            Self::Counter(l) => Some(l.check(key, cost)),
            Self::Other => None,
        }
    }
}

struct Bound {
    rule: Arc<Rule>,
    limiter: Arc<dyn Limiter>,
    /// How `limiter` is asked.
    engine: Engine,
    /// `rule.quota()` and its capacity, for a rule without tiers.
    quota: Quota,
    limit: u64,
    /// `limiter.is_remote()`, asked once.
    remote: bool,
    /// `rule.is_shadow()`.
    shadow: bool,
    /// One limiter per distinct tier quota, in `rule.tier_set()` order
    /// (the default limiter again where a tier's quota is the rule's).
    tiers: Option<TierLimiters>,
}

/// One limiter per distinct tier quota of a rule.
type TierLimiters = Arc<[Arc<dyn Limiter>]>;

impl Clone for Bound {
    fn clone(&self) -> Self {
        Self {
            rule: self.rule.clone(),
            limiter: self.limiter.clone(),
            engine: self.engine.clone(),
            quota: self.quota,
            limit: self.limit,
            remote: self.remote,
            shadow: self.shadow,
            tiers: self.tiers.clone(),
        }
    }
}

impl Bound {
    /// The limiter of `key`'s tier: one branch for a rule without tiers.
    #[inline]
    fn limiter(&self, key: &Key) -> &dyn Limiter {
        if let Some(tiers) = &self.tiers
            && let Some(i) = self.rule.tier_set().and_then(|t| t.tier_of(key))
        {
            return &*tiers[i];
        }
        &*self.limiter
    }

    /// The answer for `cost` of a memory limiter called directly (see
    /// [`Engine`]), or `None`: ask [`limiter`](Self::limiter).
    #[inline(always)]
    fn local(&self, key: &Key, cost: u64) -> Option<Outcome> {
        if self.tiers.is_some() {
            return None;
        }
        self.engine.local(key, cost)
    }

    /// Asks `key`'s limiter for `cost`.
    #[inline]
    fn acquire(&self, key: &Key, cost: u64) -> Acquire {
        match self.local(key, cost) {
            Some(o) => Acquire::Ready(Ok(o)),
            None => self.limiter(key).acquire(key, cost),
        }
    }

    /// `key`'s quota and capacity under this rule.
    #[inline]
    fn quota(&self, key: &Key) -> (Quota, u64) {
        if self.tiers.is_none() {
            return (self.quota, self.limit);
        }
        let q = self.rule.quota_for(key);
        (q, self.rule.capacity_of(q))
    }
}

/// The ordered rules a request must all pass, each bound to its backend.
///
/// [`check`](Self::check) takes the demands of one request (a key and cost
/// per rule that applies) and decides: every rule must allow; the first
/// denial in rule order is reported; when a rule denies, the cost already
/// taken by the others is given back, so a denied request does not use up the
/// other dimensions' quota. With local backends the whole check completes
/// without awaiting or allocating.
///
/// A rule with tiers ([`Rule::tiers`]) checks each key against its tier's
/// counters; a shadow rule ([`Rule::shadow`]) is checked and counted like
/// the others but its denial only goes into
/// [`Allowed::shadow_denied`]: the request goes on and no other rule gives
/// its cost back. (A shadow rule's own cost is given back when an
/// enforced rule denies, as any rule's is: it counts what it would count
/// if it were enforced.)
///
/// ```
/// use throttle_core::{Check, Decision, Demand, Key, MemoryBackend, Quota, Rule, RuleSet};
///
/// let mut rules = RuleSet::new();
/// let backend = MemoryBackend::default();
/// let ip = rules.bind(Rule::new("ip", Quota::per_minute(2)), &backend).unwrap();
/// let demand = [Demand { rule: ip, key: Key::new("10.0.0.1"), cost: 1 }];
/// for _ in 0..2 {
///     assert!(matches!(rules.check(&demand), Check::Ready(Decision::Allowed(_))));
/// }
/// let Check::Ready(Decision::Denied(d)) = rules.check(&demand) else { panic!() };
/// assert_eq!(rules.rule(d.rule).name(), "ip");
/// ```
#[derive(Clone, Default)]
pub struct RuleSet {
    rules: Arc<[Bound]>,
    /// Whether a remote rule comes before a local one: checks then ask the
    /// local ones first.
    reorder: bool,
}

/// What a reload did with one rule's counts ([`RuleSet::bind_after`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carried {
    /// The rule is unchanged: same limiter, same counts.
    Same,
    /// Same name and algorithm, another quota (or cost, or failure
    /// policy): the counts carried over; the new quota applies from the
    /// next request.
    Requoted,
    /// New, or its algorithm changed: it starts from nothing (a Redis
    /// mode's counts live in Redis under the rule's name, and are read
    /// again).
    Fresh,
}

impl fmt::Debug for RuleSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.rules.iter().map(|b| &b.rule))
            .finish()
    }
}

impl RuleSet {
    /// An empty rule set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Validates `rule`, binds it to `backend` and appends it; returns its
    /// index. Rule names must be unique within a set.
    pub fn bind(&mut self, rule: Rule, backend: &dyn Backend) -> Result<usize, ConfigError> {
        rule.validate()?;
        self.check_unique(&rule)?;
        let limiter = backend.limiter(&rule)?;
        let tiers = Self::tier_limiters(&rule, &limiter, backend)?;
        self.push(rule, limiter, tiers)
    }

    fn check_unique(&self, rule: &Rule) -> Result<(), ConfigError> {
        if self.rules.iter().any(|b| b.rule.name() == rule.name()) {
            return Err(
                ConfigError::new("name", "is used by another rule of the policy")
                    .in_rule(rule.name()),
            );
        }
        Ok(())
    }

    /// One limiter per distinct tier quota of `rule` (the rule's own
    /// `limiter` where a tier's quota is the rule's), or `None`.
    fn tier_limiters(
        rule: &Rule,
        limiter: &Arc<dyn Limiter>,
        backend: &dyn Backend,
    ) -> Result<Option<TierLimiters>, ConfigError> {
        Ok(match rule.tier_set() {
            None => None,
            Some(tiers) => {
                let mut bound = Vec::with_capacity(tiers.quotas().len());
                let n = tiers.quotas().len();
                for (i, q) in tiers.quotas().iter().enumerate() {
                    bound.push(if *q == rule.quota() {
                        limiter.clone()
                    } else {
                        backend.limiter(&rule.for_tier(*q)).map_err(|e| {
                            ConfigError::new(
                                "tiers",
                                format!(
                                    "quota {} of {n} ({} per {:?}): {} {}",
                                    i + 1,
                                    q.limit(),
                                    q.period(),
                                    e.field(),
                                    e.reason()
                                ),
                            )
                            .in_rule(rule.name())
                        })?
                    });
                }
                Some(Arc::from(bound))
            }
        })
    }

    fn push(
        &mut self,
        rule: Rule,
        limiter: Arc<dyn Limiter>,
        tiers: Option<TierLimiters>,
    ) -> Result<usize, ConfigError> {
        self.check_unique(&rule)?;
        if rule.is_shadow() && self.rules.len() >= ShadowDenials::MAX_RULES {
            return Err(ConfigError::new(
                "shadow",
                format!(
                    "only the first {} rules of a policy may be shadow rules",
                    ShadowDenials::MAX_RULES
                ),
            )
            .in_rule(rule.name()));
        }
        let mut rules: Vec<Bound> = self.rules.to_vec();
        rules.push(Bound {
            remote: limiter.is_remote(),
            shadow: rule.is_shadow(),
            quota: rule.quota(),
            limit: rule.capacity(),
            rule: Arc::new(rule),
            engine: Engine::new(&limiter),
            limiter,
            tiers,
        });
        self.reorder = rules.iter().skip_while(|b| !b.remote).any(|b| !b.remote);
        self.rules = rules.into();
        Ok(self.rules.len() - 1)
    }

    /// Like [`bind`](Self::bind) for a rule set replacing `previous` (a
    /// reload): a rule `previous` holds unchanged keeps its limiter, so its
    /// counts carry on; one with the same name and algorithm but another
    /// quota, cost or failure policy asks the old limiter for one that
    /// keeps its counts ([`Limiter::requota`]); anything else is bound
    /// afresh. A kept rule keeps its previous backend: pass the same one.
    pub fn bind_after(
        &mut self,
        rule: Rule,
        backend: &dyn Backend,
        previous: &RuleSet,
    ) -> Result<(usize, Carried), ConfigError> {
        rule.validate()?;
        let old = previous
            .rules
            .iter()
            .find(|b| b.rule.name() == rule.name() && b.rule.algorithm() == rule.algorithm());
        if let Some(b) = old
            && *b.rule == rule
        {
            let (limiter, tiers) = (b.limiter.clone(), b.tiers.clone());
            return Ok((self.push(rule, limiter, tiers)?, Carried::Same));
        }
        // (Tier limiters are bound afresh: a tier's counts carry over only
        // while the rule stays the same.)
        let (limiter, carried) = match old.and_then(|b| b.limiter.requota(&rule)) {
            Some(limiter) => (limiter, Carried::Requoted),
            None => (backend.limiter(&rule)?, Carried::Fresh),
        };
        let tiers = Self::tier_limiters(&rule, &limiter, backend)?;
        let index = self.push(rule, limiter, tiers)?;
        Ok((index, carried))
    }

    /// The rule at `index`.
    pub fn rule(&self, index: usize) -> &Arc<Rule> {
        &self.rules[index].rule
    }

    /// How many rules there are.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Checks `demands` (at most one per rule, in rule order) and takes their
    /// cost if all allow. Rules decided locally are asked first, in order,
    /// then the remote ones: a request a local rule denies costs no round
    /// trip (and no refund of a remote charge).
    pub fn check(&self, demands: &[Demand]) -> Check {
        match demands {
            [d] => self.one(d),
            _ => self.run(demands),
        }
    }

    /// Like [`check`](Self::check), and also hands back what each allowed
    /// demand took ([`Charged::taken`]), for a cost to be given back once
    /// the request's outcome is known ([`release`](Self::release)).
    pub fn check_charged(&self, demands: &[Demand]) -> Check<Charged> {
        match demands {
            [d] => self.one(d),
            _ => self.run(demands),
        }
    }

    /// A check of one demand, the common case: no order to work out,
    /// nothing to give back, nothing to combine.
    #[inline]
    fn one<K: Keep>(&self, d: &Demand) -> Check<K> {
        let bound = &self.rules[d.rule];
        if let Some(o) = bound.local(&d.key, d.cost) {
            return Check::Ready(self.settle_one(d, Ok(o)));
        }
        match bound.limiter(&d.key).acquire(&d.key, d.cost) {
            Acquire::Ready(result) => Check::Ready(self.settle_one(d, result)),
            Acquire::Pending(first) => {
                let (set, d) = (self.clone(), *d);
                Check::Pending(Box::pin(async move { set.settle_one(&d, first.await) }))
            }
        }
    }

    /// The decision on the single demand `d`, whose rule answered `result`.
    #[inline(always)]
    fn settle_one<K: Keep>(&self, d: &Demand, result: Result<Outcome, Unavailable>) -> K {
        let shadow = self.rules[d.rule].shadow;
        match result {
            Ok(o) if o.step.allowed => {
                // A shadow rule never shapes traffic.
                let delay_us = if shadow { 0 } else { o.step.delay_us };
                let decision = self.allowed_by(d, o, shadow, delay_us, ShadowDenials::default());
                K::keep(decision, &[(0, o)])
            }
            result if shadow => {
                let mut denied = ShadowDenials::default();
                denied.insert(d.rule);
                let o = shadow_outcome(result);
                K::keep(self.allowed_by(d, o, true, 0, denied), &[(0, o)])
            }
            result => K::keep(self.refusal(d, result), &[]),
        }
    }

    // Kept out of `check`, so the one-demand path stays small.
    #[inline(never)]
    fn run<K: Keep>(&self, demands: &[Demand]) -> Check<K> {
        // Asked so far: (index in `demands`, outcome). Allowed outcomes
        // took their cost; a shadow rule's denial is kept too (not taken).
        let mut held: SmallVec<[(usize, Outcome); 8]> = SmallVec::new();
        let mut shadow = ShadowDenials::default();
        let remote = |d: &Demand| self.rules[d.rule].remote;
        let order: SmallVec<[usize; 8]> = if self.reorder {
            (0..demands.len())
                .filter(|&i| !remote(&demands[i]))
                .chain((0..demands.len()).filter(|&i| remote(&demands[i])))
                .collect()
        } else {
            (0..demands.len()).collect()
        };
        for (at, &i) in order.iter().enumerate() {
            let d = &demands[i];
            let bound = &self.rules[d.rule];
            match bound.acquire(&d.key, d.cost) {
                Acquire::Ready(Ok(o)) if o.step.allowed => held.push((i, o)),
                Acquire::Ready(result) if bound.shadow => {
                    held.push((i, shadow_outcome(result)));
                    shadow.insert(d.rule);
                }
                Acquire::Ready(result) => {
                    self.give_back(demands, &held);
                    return Check::Ready(K::keep(self.refusal(d, result), &[]));
                }
                Acquire::Pending(first) => {
                    let set = self.clone();
                    let demands = demands.to_vec();
                    let held = held.into_vec();
                    let rest = order[at + 1..].to_vec();
                    return Check::Pending(Box::pin(async move {
                        set.finish(demands, held, i, first, rest).await
                    }));
                }
            }
        }
        Check::Ready(K::keep(self.allowed(demands, &held, shadow), &held))
    }

    /// The asynchronous rest of a check: `held` asked, `demands[first_at]`
    /// pending as `first`, the demands at `rest` (in asking order) not asked
    /// yet. Asks those at once so their round trips overlap.
    async fn finish<K: Keep>(
        self,
        demands: Vec<Demand>,
        held: Vec<(usize, Outcome)>,
        first_at: usize,
        first: crate::backend::PendingOutcome,
        rest: Vec<usize>,
    ) -> K {
        let mut results: Vec<Option<Result<Outcome, Unavailable>>> = vec![None; demands.len()];
        for (i, o) in &held {
            results[*i] = Some(Ok(*o));
        }
        let mut pending = vec![(first_at, first)];
        for j in rest {
            let d = &demands[j];
            let bound = &self.rules[d.rule];
            match bound.acquire(&d.key, d.cost) {
                Acquire::Ready(r) => {
                    let stop = !bound.shadow && !matches!(r, Ok(o) if o.step.allowed);
                    results[j] = Some(r);
                    if stop {
                        break;
                    }
                }
                Acquire::Pending(f) => pending.push((j, f)),
            }
        }
        let (at, futs): (Vec<usize>, Vec<_>) = pending.into_iter().unzip();
        for (j, r) in at
            .into_iter()
            .zip(futures_util::future::join_all(futs).await)
        {
            results[j] = Some(r);
        }
        let mut shadow = ShadowDenials::default();
        let mut asked: Vec<(usize, Outcome)> = Vec::with_capacity(results.len());
        let mut first_refusal = None;
        for (i, r) in results.iter().enumerate() {
            let Some(r) = r else { continue };
            let rule = demands[i].rule;
            match r {
                Ok(o) if o.step.allowed => asked.push((i, *o)),
                r if self.rules[rule].shadow => {
                    shadow.insert(rule);
                    asked.push((i, shadow_outcome(r.clone())));
                }
                r => {
                    if first_refusal.is_none() {
                        first_refusal = Some((i, r.clone()));
                    }
                }
            }
        }
        match first_refusal {
            Some((i, r)) => {
                self.give_back(&demands, &asked);
                K::keep(self.refusal(&demands[i], r), &[])
            }
            None => K::keep(self.allowed(&demands, &asked, shadow), &asked),
        }
    }

    fn give_back(&self, demands: &[Demand], held: &[(usize, Outcome)]) {
        for (i, o) in held {
            if o.step.allowed {
                self.release(&demands[*i], o);
            }
        }
    }

    /// Gives back the cost that `demand` took in a check that allowed it
    /// (`outcome` is what its rule decided then). For costs that depend on
    /// how the request went: the layer's response-aware limits use it once
    /// the inner service has answered. Best effort and never blocking, like
    /// [`Limiter::release`].
    pub fn release(&self, demand: &Demand, outcome: &Outcome) {
        self.rules[demand.rule]
            .limiter(&demand.key)
            .release(&demand.key, demand.cost, outcome);
    }

    fn refusal(&self, d: &Demand, result: Result<Outcome, Unavailable>) -> Decision {
        let rule = d.rule;
        match result {
            Ok(Outcome { step, at_us, .. }) => {
                let (quota, limit) = self.rules[rule].quota(&d.key);
                Decision::Denied(Denied {
                    at_us,
                    limit,
                    quota,
                    remaining: step.remaining,
                    retry_after: Duration::from_micros(step.retry_after_us.max(1)),
                    reset: Duration::from_micros(step.reset_us),
                    rule,
                })
            }
            Err(error) => Decision::Unavailable(Refused { rule, error }),
        }
    }

    fn allowed(
        &self,
        demands: &[Demand],
        held: &[(usize, Outcome)],
        shadow_denied: ShadowDenials,
    ) -> Decision {
        // (index in `demands`, outcome, from a shadow rule)
        let mut tightest: Option<(usize, Outcome, bool)> = None;
        let mut delay_us = 0;
        for &(i, o) in held {
            let shadow = self.rules[demands[i].rule].shadow;
            if !shadow {
                // A shadow rule never shapes traffic either.
                delay_us = delay_us.max(o.step.delay_us);
            }
            // An enforced rule speaks before a shadow one, and a rule
            // decided by its backend speaks for the fleet: it is preferred
            // over one decided by a failure policy.
            let rank = |o: &Outcome, shadow: bool| (shadow, o.degraded, o.step.remaining);
            if tightest.is_none_or(|(_, t, ts)| rank(&o, shadow) < rank(&t, ts)) {
                tightest = Some((i, o, shadow));
            }
        }
        match tightest {
            None => Decision::Unlimited,
            Some((i, o, shadow)) => {
                self.allowed_by(&demands[i], o, shadow, delay_us, shadow_denied)
            }
        }
    }

    /// An allowed decision reporting `d`'s rule, which answered `o`.
    #[inline]
    fn allowed_by(
        &self,
        d: &Demand,
        o: Outcome,
        shadow: bool,
        delay_us: u64,
        shadow_denied: ShadowDenials,
    ) -> Decision {
        let (quota, limit) = self.rules[d.rule].quota(&d.key);
        Decision::Allowed(Allowed {
            limit,
            quota,
            remaining: o.step.remaining,
            reset: Duration::from_micros(o.step.reset_us),
            delay: Duration::from_micros(delay_us),
            at_us: o.at_us,
            rule: d.rule,
            degraded: o.degraded,
            shadow,
            shadow_denied,
        })
    }
}

/// What a shadow rule's denial (or failure) leaves for the report: an
/// outcome that took nothing.
fn shadow_outcome(result: Result<Outcome, Unavailable>) -> Outcome {
    match result {
        Ok(o) => o,
        Err(_) => Outcome {
            step: crate::Step::default(),
            at_us: crate::unix_now_us(),
            degraded: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, ManualClock, MemoryBackend};

    /// What a decision says, without the instants (which the system clock
    /// moves between two rule sets).
    fn figures(check: Check) -> (bool, usize, u64, u64) {
        let Check::Ready(decision) = check else {
            panic!("the memory backend decides at once")
        };
        match decision {
            Decision::Allowed(a) => (true, a.rule, a.limit, a.remaining),
            Decision::Denied(d) => (false, d.rule, d.limit, d.remaining),
            other => panic!("{other:?}"),
        }
    }

    /// The delay of the second of two requests at once to a leaky bucket.
    fn second_delay(rule: Rule) -> Duration {
        let mut set = RuleSet::new();
        set.bind(rule, &MemoryBackend::with_clock(ManualClock::new(0)))
            .unwrap();
        let demand = [Demand {
            rule: 0,
            key: Key::new("k"),
            cost: 1,
        }];
        let _ = set.check(&demand);
        match set.check(&demand) {
            Check::Ready(Decision::Allowed(a)) => a.delay,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_lone_shadow_rule_never_delays() {
        let rule = Rule::new("lb", Quota::per_second(1).with_burst(3)).leaky_bucket();
        assert_eq!(second_delay(rule.clone()), Duration::from_secs(1));
        assert_eq!(second_delay(rule.shadow()), Duration::ZERO);
    }

    #[test]
    fn memory_limiters_are_called_directly_and_decide_as_through_the_trait() {
        for algorithm in Algorithm::ALL {
            let rule = Rule::new("r", Quota::per_hour(3)).algorithm_is(algorithm);
            let mut direct = RuleSet::new();
            direct
                .bind(rule.clone(), &MemoryBackend::default())
                .unwrap();
            let engine = &direct.rules[0].engine;
            let expected = match algorithm {
                Algorithm::TokenBucket | Algorithm::LeakyBucket => {
                    matches!(engine, Engine::Bucket(_))
                }
                Algorithm::FixedWindow => matches!(engine, Engine::Window(_)),
                Algorithm::SlidingWindowCounter => matches!(engine, Engine::Counter(_)),
                _ => matches!(engine, Engine::Other),
            };
            assert!(expected, "{algorithm:?}");

            let mut by_trait = RuleSet::new();
            by_trait.bind(rule, &MemoryBackend::default()).unwrap();
            by_trait.rules = by_trait
                .rules
                .iter()
                .map(|b| Bound {
                    engine: Engine::Other,
                    ..b.clone()
                })
                .collect();
            let demand = [Demand {
                rule: 0,
                key: Key::new("k"),
                cost: 1,
            }];
            let seen: Vec<_> = (0..5).map(|_| figures(direct.check(&demand))).collect();
            for (i, s) in seen.iter().enumerate() {
                assert_eq!(
                    figures(by_trait.check(&demand)),
                    *s,
                    "{algorithm:?} check {i}"
                );
            }
            assert_eq!(
                seen.iter().filter(|s| s.0).count(),
                3,
                "{algorithm:?}: {seen:?}"
            );
        }
        // Another clock goes through the trait.
        let mut manual = RuleSet::new();
        let backend = MemoryBackend::with_clock(ManualClock::new(0));
        manual
            .bind(Rule::new("r", Quota::per_hour(3)), &backend)
            .unwrap();
        assert!(matches!(manual.rules[0].engine, Engine::Other));
    }
}
