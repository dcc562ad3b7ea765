//! Decisions: what a check of a request's rules says.

use std::time::Duration;

use smallvec::SmallVec;

use crate::backend::{Outcome, Unavailable};
use crate::{Key, Quota};
#[cfg(doc)]
use crate::{Rule, RuleSet};

/// The shadow rules that would have denied a request (see
/// [`Rule::shadow`]): a small set of rule indices, plain data.
///
/// Only the first 64 rules of a rule set may be shadow rules
/// ([`RuleSet::bind`] refuses others), so the set is one `u64`.
///
/// ```
/// use throttle_fleet_core::decision::ShadowDenials;
///
/// let none = ShadowDenials::default();
/// assert!(none.is_empty());
/// assert_eq!(none.iter().count(), 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ShadowDenials(u64);

impl ShadowDenials {
    /// The largest rule index a shadow rule may have, plus one.
    pub const MAX_RULES: usize = 64;

    /// Whether no shadow rule would have denied.
    pub const fn is_empty(&self) -> bool {
        self.0 == 0
    }

    /// How many shadow rules would have denied.
    pub const fn len(&self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether the rule at `index` would have denied.
    pub const fn contains(&self, index: usize) -> bool {
        index < Self::MAX_RULES && self.0 & (1 << index) != 0
    }

    /// The indices of the shadow rules that would have denied, in rule
    /// order ([`RuleSet::rule`] names them).
    pub fn iter(&self) -> impl Iterator<Item = usize> + use<> {
        let bits = self.0;
        (0..Self::MAX_RULES).filter(move |i| bits & (1 << i) != 0)
    }

    pub(crate) fn insert(&mut self, index: usize) {
        debug_assert!(index < Self::MAX_RULES);
        self.0 |= 1 << index;
    }
}

/// The request may go on. Figures are those of the most restrictive rule
/// (the fewest units remaining), which is what success headers report.
/// Shadow rules ([`Rule::shadow`]) never supply the figures while an
/// enforced rule applied; [`shadow_denied`](Self::shadow_denied) lists
/// those that would have denied.
///
/// Rules are named by their index in the [`RuleSet`] ([`RuleSet::rule`]):
/// a decision is plain data, cheap to make on every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    /// The most restrictive rule that applied (its index in the rule set).
    pub rule: usize,
    /// That rule's capacity for this key (`X-RateLimit-Limit`): its tier's,
    /// when the rule has tiers.
    pub limit: u64,
    /// The quota that rule applied to this key: its tier's, or the rule's.
    pub quota: Quota,
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
    /// Only shadow rules applied: the figures are a shadow rule's, which
    /// clients must not be told about; the layer sends no `X-RateLimit-*`
    /// headers for such a decision.
    pub shadow: bool,
    /// The shadow rules that would have denied this request (empty almost
    /// always). For logs and metrics (`outcome = shadow_denied`); the
    /// request goes on regardless, and the other rules keep their cost.
    pub shadow_denied: ShadowDenials,
}

/// The request is over a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Denied {
    /// The rule (dimension) that denied it, the first in policy order (its
    /// index in the rule set).
    pub rule: usize,
    /// That rule's capacity for this key (its tier's, when it has tiers).
    pub limit: u64,
    /// The quota that rule applied to this key: its tier's, or the rule's.
    pub quota: Quota,
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
    /// Every enforced rule that applied allowed the request (shadow rules
    /// may have said otherwise: [`Allowed::shadow_denied`]).
    Allowed(Allowed),
    /// A rule denied the request; no other rule keeps its cost.
    Denied(Denied),
    /// A fail-closed rule could not be checked.
    Refused(Refused),
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

/// A decision with what each allowed demand took, so that a cost can be
/// given back later ([`RuleSet::refund`]): what a layer needs to settle a
/// cost once the response is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charged {
    /// The decision, as [`RuleSet::check`] makes it.
    pub decision: Decision,
    /// `(index in the demands, outcome)` of every demand whose cost was
    /// taken; empty unless the request was allowed.
    pub taken: SmallVec<[(usize, Outcome); 4]>,
}
