//! What a check answers: the decision, and what an allowed request holds
//! until it ends (slots under concurrency rules, charges that the response
//! settles).

use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::backend::Outcome;
use crate::decision::{Decision, Demand};

use super::RuleSet;

/// Whether the cost a request took under a rule is refunded, given the
/// status code of its response ([`Binding::settle_by`](super::Binding::settle_by);
/// `throttle_fleet_tower::Limit::refund_when` makes one).
pub type RefundFn = Arc<dyn Fn(u16) -> bool + Send + Sync>;

/// What [`RuleSet::check`] answers: the [`Decision`], and what the request
/// holds if it was allowed ([`held`](Self::held)).
///
/// Dropping it gives the held slots back at once: a layer keeps the
/// [`Held`] with the response (see [`into_parts`](Self::into_parts)).
#[derive(Debug)]
pub struct Checked {
    decision: Decision,
    held: Option<Box<Held>>,
}

impl Checked {
    #[inline(always)]
    pub(super) fn new(decision: Decision, held: Option<Box<Held>>) -> Self {
        Self { decision, held }
    }

    /// What the check decided.
    #[inline]
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// What the allowed request holds (`None` when it holds nothing: no
    /// concurrency rule took a slot and no rule kept its cost
    /// ([`Binding::keep`](crate::rule_set::Binding::keep), [`Binding::settle_by`](crate::rule_set::Binding::settle_by)), or it was not
    /// allowed).
    pub fn held(&self) -> Option<&Held> {
        self.held.as_deref()
    }

    /// The decision alone (anything held is given back now).
    pub fn into_decision(self) -> Decision {
        self.decision
    }

    /// The decision and what the request holds, apart: a layer answers
    /// from the one and keeps the other until the response ends.
    #[inline]
    pub fn into_parts(self) -> (Decision, Option<Box<Held>>) {
        (self.decision, self.held)
    }
}

/// What one admitted request holds until it ends: its slots under
/// concurrency rules ([`Rule::concurrency`](crate::Rule::concurrency)),
/// and the cost it took under rules that keep it ([`Binding::keep`](crate::rule_set::Binding::keep),
/// [`Binding::settle_by`](crate::rule_set::Binding::settle_by)).
///
/// [`settle`](Self::settle), once the response's status is known, refunds
/// the costs whose rule says so and forgets the other costs. Dropping it
/// gives the slots back, so a layer keeps it with the response until the
/// body has been sent in full or dropped: the slot is held exactly as long
/// as the request runs, whatever ends it (the last byte, a disconnect, a
/// panic unwinding through the handler, a cancelled future). A cost not
/// yet settled when it is dropped stays taken (a request that never got
/// its response keeps its cost).
///
/// Giving back never blocks: the memory backend does it in place; a
/// remote backend sends it in the background.
///
/// ```
/// use throttle_fleet_core::{Answer, decision::Demand, Key, memory::MemoryBackend, Rule, rule_set::RuleSet};
///
/// let mut rules = RuleSet::new();
/// let inflight = rules.bind(Rule::concurrency("inflight", 1), &MemoryBackend::default()).unwrap();
/// let demands = [Demand::new(inflight, Key::new("tenant-a"), 1)];
///
/// let Answer::Ready(first) = rules.check(&demands) else { unreachable!() };
/// let (decision, held) = first.into_parts();
/// assert!(decision.is_allowed() && held.is_some(), "a concurrency rule took a slot");
/// let Answer::Ready(second) = rules.check(&demands) else { unreachable!() };
/// assert!(second.decision().is_denied(), "the only slot is held");
///
/// drop(held); // the first request ended
/// let Answer::Ready(third) = rules.check(&demands) else { unreachable!() };
/// assert!(third.decision().is_allowed());
/// ```
pub struct Held {
    rules: RuleSet,
    /// What each kept demand took.
    taken: SmallVec<[Taken; 1]>,
}

struct Taken {
    demand: Demand,
    outcome: Outcome,
}

impl Held {
    /// Whether `t` is a slot (its rule is a concurrency rule).
    fn is_slot(&self, t: &Taken) -> bool {
        self.rules.is_slot(t.demand.rule)
    }
}

impl RuleSet {
    fn is_slot(&self, rule: usize) -> bool {
        self.rules[rule].rule.algorithm().is_concurrency()
    }
}

impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.taken.iter().map(|t| {
                (
                    self.rules.rule(t.demand.rule).name(),
                    t.demand.cost,
                    self.is_slot(t),
                )
            }))
            .finish()
    }
}

impl Held {
    /// Settles the costs it holds, given the response's status code: a
    /// cost under a rule bound with [`Binding::settle_by`](super::Binding::settle_by) is refunded if
    /// its [`RefundFn`] says so; every cost (those kept by
    /// [`Binding::keep`](super::Binding::keep) too) is forgotten either way, so a later
    /// [`refund`](Self::refund) gives back only the slots. The slots stay
    /// held.
    pub fn settle(&mut self, status: u16) {
        let rules = &self.rules;
        self.taken.retain(|t| {
            if rules.is_slot(t.demand.rule) {
                return true;
            }
            if rules.rules[t.demand.rule]
                .settle
                .as_ref()
                .is_some_and(|refund| refund(status))
            {
                rules.refund(&t.demand, &t.outcome);
            }
            false
        });
    }

    /// What each kept demand took, in the order the rules were asked (rule
    /// order unless a remote rule comes before a local one): its demand
    /// and its rule's outcome (the figures a per-demand answer reports).
    /// Slots are among them: give them back through this `Held` (dropping
    /// it, or [`refund`](Self::refund)), never with [`RuleSet::refund`] as
    /// well, or a slot comes back twice.
    pub fn taken(&self) -> impl Iterator<Item = (&Demand, &Outcome)> {
        self.taken.iter().map(|t| (&t.demand, &t.outcome))
    }

    /// Refunds everything it holds now, slots and costs alike (a later
    /// step of the same request was denied).
    pub fn refund(mut self) {
        for t in self.taken.drain(..) {
            self.rules.refund(&t.demand, &t.outcome);
        }
    }

    /// How many slots it holds (under as many concurrency rules).
    pub fn slots(&self) -> usize {
        self.taken.iter().filter(|t| self.is_slot(t)).count()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        for t in &self.taken {
            if self.is_slot(t) {
                self.rules.give_back(&t.demand, &t.outcome, true);
            }
        }
    }
}

impl RuleSet {
    /// What the allowed answers among `taken` (by index in `demands`) hold
    /// for the request: those of rules that keep theirs.
    pub(super) fn kept(&self, demands: &[Demand], taken: &[(usize, Outcome)]) -> Option<Box<Held>> {
        if !self.keeps {
            return None;
        }
        // One answer (a check of one demand): no list to filter and
        // collect.
        if let [(i, outcome)] = taken {
            let demand = demands[*i];
            return (outcome.step.allowed && self.rules[demand.rule].keep).then(|| {
                Box::new(Held {
                    rules: self.clone(),
                    taken: smallvec::smallvec![Taken {
                        demand,
                        outcome: *outcome,
                    }],
                })
            });
        }
        let taken: SmallVec<[Taken; 1]> = taken
            .iter()
            .filter(|(i, o)| o.step.allowed && self.rules[demands[*i].rule].keep)
            .map(|&(i, outcome)| Taken {
                demand: demands[i],
                outcome,
            })
            .collect();
        (!taken.is_empty()).then(|| {
            Box::new(Held {
                rules: self.clone(),
                taken,
            })
        })
    }
}

#[cfg(test)]
mod tests;
