//! The rule set that combines rules into one decision: binding rules to
//! their backends ([`bind`](RuleSet::bind), reloads), checking a request's
//! demands, and combining the rules' answers into one [`Decision`].

mod bind;
mod check;
mod combine;
mod held;
mod observe;
pub(crate) mod operate;
mod shedding;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;

#[cfg(doc)]
use crate::Decision;
use crate::Rule;

use bind::Bound;
pub use bind::{Binding, Carried};
pub use held::{Checked, Held, RefundFn};
pub use observe::Observer;
pub use operate::Operator;

/// The ordered rules a request must all pass, each bound to its backend.
///
/// [`check`](Self::check) takes the demands of one request (a key and cost
/// per rule that applies) and decides: every rule must allow; the first
/// denial in rule order is reported; when a rule denies, the cost already
/// taken by the others is given back, so a denied request does not use up the
/// other dimensions' quota. With local backends the whole check completes
/// without awaiting or allocating.
///
/// A rule with tiers ([`Rule::with_tiers`]) checks each key against its tier's
/// counters; a shadow rule ([`Rule::shadow`]) is checked and counted like
/// the others but its denial only goes into
/// [`Decision::shadow_denied`]: the request goes on and no other rule gives
/// its cost back. (A shadow rule's own cost is given back when an
/// enforced rule denies, as any rule's is: it counts what it would count
/// if it were enforced.)
///
/// ```
/// use throttle_fleet_core::{Answer, decision::Demand, Key, memory::MemoryBackend, Quota, Rule, rule_set::RuleSet};
///
/// let mut rules = RuleSet::new();
/// let backend = MemoryBackend::default();
/// let ip = rules.bind(Rule::new("ip", Quota::per_minute(2)), &backend).unwrap();
/// let demand = [Demand::new(ip, Key::new("10.0.0.1"), 1)];
/// for _ in 0..2 {
///     assert!(matches!(rules.check(&demand), Answer::Ready(c) if c.decision().is_allowed()));
/// }
/// let Answer::Ready(checked) = rules.check(&demand) else { panic!() };
/// let denied = checked.decision();
/// assert!(denied.is_denied());
/// assert_eq!(rules.rule(denied.rule().unwrap()).name(), "ip");
/// ```
#[derive(Clone, Default)]
pub struct RuleSet {
    rules: Arc<[Bound]>,
    /// Whether a remote rule comes before a local one: checks then ask the
    /// local ones first.
    reorder: bool,
    /// Whether a rule keeps what it takes ([`RuleSet::holds`]).
    keeps: bool,
}

impl fmt::Debug for RuleSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.rules.iter().map(|b| &b.rule))
            .finish()
    }
}

impl RuleSet {
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
}
