//! The slots a request holds under concurrency rules, given back when the
//! request ends.

use std::fmt;

use smallvec::SmallVec;

use crate::backend::Outcome;
use crate::decision::{Charged, Demand};

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
        if !self.holds {
            return None;
        }
        let held: SmallVec<[(Demand, Outcome); 1]> = charged
            .taken
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
