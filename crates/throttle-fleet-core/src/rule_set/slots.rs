//! The slots a request holds under concurrency rules, given back when the
//! request ends.

use std::fmt;

use smallvec::SmallVec;

use crate::Answer;
use crate::backend::Outcome;
use crate::decision::{Charged, Decision, Demand};

use super::combine::Keep;

use super::RuleSet;

/// The slots one admitted request holds under the concurrency rules of a
/// rule set ([`Rule::concurrency`](crate::Rule::concurrency)): dropping it
/// gives them back. A layer keeps it with the response until the body has
/// been sent in full or dropped, so the slot is held exactly as long as
/// the request runs, whatever ends it (the last byte, a disconnect, a
/// panic unwinding through the handler, a cancelled future).
///
/// Releasing never blocks: the memory backend gives the slot back in
/// place; a remote backend sends the release in the background.
///
/// ```
/// use throttle_fleet_core::{Answer, Decision, Demand, Key, MemoryBackend, Rule, RuleSet};
///
/// let mut rules = RuleSet::new();
/// let inflight = rules.bind(Rule::concurrency("inflight", 1), &MemoryBackend::default()).unwrap();
/// let demands = [Demand { rule: inflight, key: Key::new("tenant-a"), cost: 1 }];
///
/// let Answer::Ready(first) = rules.check_charged(&demands) else { unreachable!() };
/// let slots = rules.slots(&demands, &first).expect("a concurrency rule took a slot");
/// let Answer::Ready(second) = rules.check_charged(&demands) else { unreachable!() };
/// assert!(matches!(second.decision, Decision::Denied(_)), "the only slot is held");
///
/// drop(slots); // the first request ended
/// let Answer::Ready(third) = rules.check_charged(&demands) else { unreachable!() };
/// assert!(third.decision.is_allowed());
/// ```
pub struct Slots {
    rules: RuleSet,
    held: SmallVec<[(Demand, Outcome); 1]>,
}

impl fmt::Debug for Slots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(
                self.held
                    .iter()
                    .map(|(d, _)| (self.rules.rule(d.rule).name(), d.cost)),
            )
            .finish()
    }
}

impl Slots {
    /// Gives the slots back now (the same as dropping them).
    pub fn release(self) {}

    /// How many concurrency rules this request holds slots under.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether it holds none (never, for a value [`RuleSet::slots`] made).
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        for (demand, outcome) in &self.held {
            self.rules.refund(demand, outcome);
        }
    }
}

impl RuleSet {
    /// Whether any rule is a concurrency rule: a layer then keeps each
    /// admitted request's [`Slots`] until the request ends.
    pub fn holds_slots(&self) -> bool {
        self.holds
    }

    /// The slots that `charged`, a check of `demands` that allowed the
    /// request ([`check_charged`](Self::check_charged)), took under
    /// concurrency rules; `None` when it took none (no such rule applied,
    /// or the request was not allowed). A shadow rule that would have
    /// denied took nothing, and holds nothing.
    pub fn slots(&self, demands: &[Demand], charged: &Charged) -> Option<Box<Slots>> {
        self.slots_of(demands, &charged.taken)
    }

    /// Like [`check`](Self::check), and also hands back the slots the
    /// request took under concurrency rules, for a layer to hold until the
    /// response ends (what [`check_charged`](Self::check_charged) and
    /// [`slots`](Self::slots) give, without the list of every charge).
    pub fn check_holding(&self, demands: &[Demand]) -> Answer<Holding> {
        match demands {
            [d] => self.one(d),
            _ => self.run(demands),
        }
    }

    /// The slots among `taken` (by index in `demands`) that took their
    /// cost under a concurrency rule.
    fn slots_of(&self, demands: &[Demand], taken: &[(usize, Outcome)]) -> Option<Box<Slots>> {
        if !self.holds {
            return None;
        }
        let held: SmallVec<[(Demand, Outcome); 1]> = taken
            .iter()
            .filter(|(i, o)| {
                o.step.allowed
                    && self.rules[demands[*i].rule]
                        .rule
                        .algorithm()
                        .is_concurrency()
            })
            .map(|&(i, o)| (demands[i], o))
            .collect();
        (!held.is_empty()).then(|| {
            Box::new(Slots {
                rules: self.clone(),
                held,
            })
        })
    }
}

/// A decision and the slots the request took under concurrency rules
/// ([`RuleSet::check_holding`]): `None` unless it was allowed by such a
/// rule.
#[derive(Debug)]
pub struct Holding {
    /// What the check decided.
    pub decision: Decision,
    /// What the request holds until it ends (dropping it gives it back).
    pub slots: Option<Box<Slots>>,
}

impl Keep for Holding {
    fn keep(
        set: &RuleSet,
        demands: &[Demand],
        decision: Decision,
        held: &[(usize, Outcome)],
    ) -> Self {
        let slots = if decision.is_allowed() {
            set.slots_of(demands, held)
        } else {
            None
        };
        Self { decision, slots }
    }
}

#[cfg(test)]
mod tests {
    use crate::{Answer, Decision, Demand, Key, MemoryBackend, Rule, RuleSet};

    fn charged(rules: &RuleSet, demands: &[Demand]) -> crate::decision::Charged {
        match rules.check_charged(demands) {
            Answer::Ready(c) => c,
            Answer::Pending(_) => unreachable!("memory decides at once"),
        }
    }

    #[test]
    fn a_shadow_denial_holds_no_slot_so_its_end_frees_none_of_the_others() {
        let mut rules = RuleSet::new();
        let backend = MemoryBackend::default();
        let shadow = rules
            .bind(Rule::concurrency("shadow", 1).shadow(), &backend)
            .unwrap();
        let demands = [Demand {
            rule: shadow,
            key: Key::new("k"),
            cost: 1,
        }];
        let first = charged(&rules, &demands);
        let held = rules
            .slots(&demands, &first)
            .expect("the first takes the slot");
        let second = charged(&rules, &demands);
        let Decision::Allowed(a) = &second.decision else {
            panic!("{:?}", second.decision)
        };
        assert!(a.shadow_denied.contains(shadow));
        // It took nothing: it holds nothing, and its end gives nothing back.
        assert!(rules.slots(&demands, &second).is_none());
        let third = charged(&rules, &demands);
        let Decision::Allowed(a) = &third.decision else {
            panic!("{:?}", third.decision)
        };
        assert!(a.shadow_denied.contains(shadow), "the first still runs");
        drop(held);
        let fourth = charged(&rules, &demands);
        let Decision::Allowed(a) = &fourth.decision else {
            panic!("{:?}", fourth.decision)
        };
        assert!(a.shadow_denied.is_empty());
    }
}
