//! Decisions, and the rule set that combines rules into one.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::backend::{Acquire, Limiter, Outcome, Unavailable};
use crate::{Backend, ConfigError, Key, Rule};

/// The request may go on. Figures are those of the most restrictive rule
/// (the fewest units remaining), which is what success headers report.
///
/// Rules are named by their index in the [`RuleSet`] ([`RuleSet::rule`]):
/// a decision is plain data, cheap to make on every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    /// The most restrictive rule that applied (its index in the rule set).
    pub rule: usize,
    /// That rule's capacity (`X-RateLimit-Limit`).
    pub limit: u64,
    /// Units left for this key under that rule (`X-RateLimit-Remaining`).
    pub remaining: u64,
    /// Time until that rule is back to its full allowance (`X-RateLimit-Reset`).
    pub reset: Duration,
    /// How long the request must wait for its turn (leaky bucket rules);
    /// zero for every other algorithm.
    pub delay: Duration,
    /// When that rule's backend decided, in microseconds since the Unix
    /// epoch (`reset` counts from there).
    pub at_us: u64,
    /// The backend could not be asked and the rule's failure policy let the
    /// request through (fail open, or the local fallback): `remaining` is
    /// this instance's own count, not the fleet's, and responders leave it
    /// out rather than report it as the fleet's.
    pub degraded: bool,
}

/// The request is over a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Denied {
    /// The rule (dimension) that denied it, the first in policy order (its
    /// index in the rule set).
    pub rule: usize,
    /// That rule's capacity.
    pub limit: u64,
    /// Units still left under that rule (less than the request's cost).
    pub remaining: u64,
    /// The shortest wait after which the same request fits.
    pub retry_after: Duration,
    /// Time until that rule is back to its full allowance.
    pub reset: Duration,
    /// When that rule's backend decided, in microseconds since the Unix
    /// epoch (`retry_after` and `reset` count from there).
    pub at_us: u64,
}

/// A rule's backend could not answer and the rule fails closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The rule that could not be checked (its index in the rule set).
    pub rule: usize,
    /// What went wrong.
    pub error: Unavailable,
}

/// What a check of all rules decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No rule applied to the request (every rule was skipped).
    Unlimited,
    /// Every rule that applied allowed the request.
    Allowed(Allowed),
    /// A rule denied the request; no other rule keeps its cost.
    Denied(Denied),
    /// A fail-closed rule could not be checked.
    Unavailable(Refused),
}

impl Decision {
    /// Whether the request may go on.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Self::Unlimited | Self::Allowed(_))
    }
}

/// One rule to check for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Demand {
    /// Index of the rule in the [`RuleSet`].
    pub rule: usize,
    /// Who is limited.
    pub key: Key,
    /// Units of cost the request takes under this rule.
    pub cost: u64,
}

/// A decision now, or one that needs a round trip.
pub enum Check {
    /// Decided without waiting.
    Ready(Decision),
    /// Decided by a remote backend.
    Pending(Pin<Box<dyn Future<Output = Decision> + Send>>),
}

impl fmt::Debug for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ready(d) => f.debug_tuple("Ready").field(d).finish(),
            Self::Pending(_) => f.write_str("Pending(..)"),
        }
    }
}

struct Bound {
    rule: Arc<Rule>,
    limiter: Arc<dyn Limiter>,
    /// `limiter.is_remote()`, asked once.
    remote: bool,
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
        self.push(rule, limiter)
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

    fn push(&mut self, rule: Rule, limiter: Arc<dyn Limiter>) -> Result<usize, ConfigError> {
        self.check_unique(&rule)?;
        let mut rules: Vec<Bound> = self
            .rules
            .iter()
            .map(|b| Bound {
                rule: b.rule.clone(),
                limiter: b.limiter.clone(),
                remote: b.remote,
            })
            .collect();
        rules.push(Bound {
            rule: Arc::new(rule),
            remote: limiter.is_remote(),
            limiter,
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
        let (limiter, carried) = match old {
            Some(b) if *b.rule == rule => (b.limiter.clone(), Carried::Same),
            Some(b) => match b.limiter.requota(&rule) {
                Some(limiter) => (limiter, Carried::Requoted),
                None => (backend.limiter(&rule)?, Carried::Fresh),
            },
            None => (backend.limiter(&rule)?, Carried::Fresh),
        };
        let index = self.push(rule, limiter)?;
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
        // Allowed so far: (index in `demands`, outcome).
        let mut held: SmallVec<[(usize, Outcome); 8]> = SmallVec::new();
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
            match self.rules[d.rule].limiter.acquire(&d.key, d.cost) {
                Acquire::Ready(Ok(o)) if o.step.allowed => held.push((i, o)),
                Acquire::Ready(result) => {
                    self.give_back(demands, &held);
                    return Check::Ready(self.refusal(d, result));
                }
                Acquire::Pending(first) if demands.len() == 1 => {
                    // The common remote case, one rule: no combination to do.
                    let (set, d) = (self.clone(), *d);
                    return Check::Pending(Box::pin(async move {
                        match first.await {
                            Ok(o) if o.step.allowed => set.allowed(&[d], &[(0, o)]),
                            result => set.refusal(&d, result),
                        }
                    }));
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
        Check::Ready(self.allowed(demands, &held))
    }

    /// The asynchronous rest of a check: `held` allowed, `demands[first_at]`
    /// pending as `first`, the demands at `rest` (in asking order) not asked
    /// yet. Asks those at once so their round trips overlap.
    async fn finish(
        self,
        demands: Vec<Demand>,
        held: Vec<(usize, Outcome)>,
        first_at: usize,
        first: crate::backend::PendingOutcome,
        rest: Vec<usize>,
    ) -> Decision {
        let mut results: Vec<Option<Result<Outcome, Unavailable>>> = vec![None; demands.len()];
        for (i, o) in &held {
            results[*i] = Some(Ok(*o));
        }
        let mut pending = vec![(first_at, first)];
        for j in rest {
            let d = &demands[j];
            match self.rules[d.rule].limiter.acquire(&d.key, d.cost) {
                Acquire::Ready(r) => {
                    let stop = !matches!(r, Ok(o) if o.step.allowed);
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
        let allowed: Vec<(usize, Outcome)> = results
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Some(Ok(o)) if o.step.allowed => Some((i, *o)),
                _ => None,
            })
            .collect();
        let first_refusal = results
            .iter()
            .enumerate()
            .find(|(_, r)| matches!(r, Some(r) if !matches!(r, Ok(o) if o.step.allowed)));
        match first_refusal {
            Some((i, Some(r))) => {
                self.give_back(&demands, &allowed);
                self.refusal(&demands[i], r.clone())
            }
            _ => self.allowed(&demands, &allowed),
        }
    }

    fn give_back(&self, demands: &[Demand], held: &[(usize, Outcome)]) {
        for (i, o) in held {
            let d = &demands[*i];
            self.rules[d.rule].limiter.release(&d.key, d.cost, o);
        }
    }

    fn refusal(&self, d: &Demand, result: Result<Outcome, Unavailable>) -> Decision {
        let rule = d.rule;
        match result {
            Ok(Outcome { step, at_us, .. }) => Decision::Denied(Denied {
                at_us,
                limit: self.rules[rule].rule.capacity(),
                remaining: step.remaining,
                retry_after: Duration::from_micros(step.retry_after_us.max(1)),
                reset: Duration::from_micros(step.reset_us),
                rule,
            }),
            Err(error) => Decision::Unavailable(Refused { rule, error }),
        }
    }

    fn allowed(&self, demands: &[Demand], held: &[(usize, Outcome)]) -> Decision {
        let mut tightest: Option<(usize, Outcome)> = None;
        let mut delay_us = 0;
        for &(i, o) in held {
            delay_us = delay_us.max(o.step.delay_us);
            // A rule decided by its backend speaks for the fleet: it is
            // preferred over one decided by a failure policy.
            let tighter =
                |t: &Outcome| (o.degraded, o.step.remaining) < (t.degraded, t.step.remaining);
            if tightest.is_none_or(|(_, t)| tighter(&t)) {
                tightest = Some((i, o));
            }
        }
        match tightest {
            None => Decision::Unlimited,
            Some((
                i,
                Outcome {
                    step,
                    at_us,
                    degraded,
                },
            )) => {
                let rule = demands[i].rule;
                Decision::Allowed(Allowed {
                    limit: self.rules[rule].rule.capacity(),
                    remaining: step.remaining,
                    reset: Duration::from_micros(step.reset_us),
                    delay: Duration::from_micros(delay_us),
                    at_us,
                    rule,
                    degraded,
                })
            }
        }
    }
}
