//! Combining the rules' answers into one decision.

use smallvec::SmallVec;

use crate::backend::{Outcome, Unavailable};
use crate::decision::{Decision, Demand, ShadowDenials};

use super::bind::Bound;
use super::{Checked, RuleSet};

/// How one rule's answer counts in a check: the fold's one step.
pub(super) enum Counted {
    /// Allowed: its cost is taken.
    Taken(Outcome),
    /// A shadow rule denied (or could not answer): reported, nothing taken.
    ShadowDenied(Outcome),
    /// An enforced rule denied, or failed closed.
    Refused(Result<Outcome, Unavailable>),
}

/// How `result`, the answer of a rule that is a shadow rule or not, counts.
#[inline(always)]
pub(super) fn count(shadow: bool, result: Result<Outcome, Unavailable>) -> Counted {
    match result {
        Ok(o) if o.step.allowed => Counted::Taken(o),
        result if shadow => Counted::ShadowDenied(shadow_outcome(result)),
        result => Counted::Refused(result),
    }
}

/// The rules' answers to one request, folded into one decision: the only
/// place that says how answers combine, for the one-demand path, the
/// synchronous loop and the asynchronous rest of a check alike.
///
/// Every enforced rule must allow; of the refusals, the first in rule
/// order is the one reported; a shadow rule's denial (or
/// failure) is recorded in the decision, never enforced. `N` is how many
/// answers are held without allocating.
pub(super) struct Tally<const N: usize> {
    /// `(index in the demands, outcome)` of every allowed answer (its cost
    /// taken) and of every shadow rule's denial (nothing taken).
    held: SmallVec<[(usize, Outcome); N]>,
    /// The shadow rules that denied.
    shadow: ShadowDenials,
    /// The first enforced refusal: `(index in the demands, answer)`.
    refusal: Option<(usize, Result<Outcome, Unavailable>)>,
}

impl<const N: usize> Tally<N> {
    /// No answer yet.
    #[inline(always)]
    pub(super) fn new() -> Self {
        Self {
            held: SmallVec::new(),
            shadow: ShadowDenials::default(),
            refusal: None,
        }
    }

    /// Adds `demands[i]`'s answer, `result`, from rule `rule` of `set`.
    #[inline(always)]
    pub(super) fn add(
        &mut self,
        set: &RuleSet,
        i: usize,
        rule: usize,
        result: Result<Outcome, Unavailable>,
    ) {
        let bound = &set.rules[rule];
        bound.observed(&result);
        match count(bound.shadow, result) {
            Counted::Taken(o) => self.held.push((i, o)),
            Counted::ShadowDenied(o) => {
                self.shadow = self.shadow.with(rule);
                self.held.push((i, o));
            }
            // The refusal reported is the first in rule order.
            Counted::Refused(result) => {
                if self.refusal.as_ref().is_none_or(|(j, _)| i < *j) {
                    self.refusal = Some((i, result));
                }
            }
        }
    }

    /// Weighs the allowed answers in rule order: the first of equally tight
    /// rules is then the first in rule order, not in asking order.
    pub(super) fn in_rule_order(&mut self) {
        self.held.sort_unstable_by_key(|(i, _)| *i);
    }

    /// Whether an enforced rule has refused: nothing more need be asked.
    #[inline(always)]
    pub(super) fn refused(&self) -> bool {
        self.refusal.is_some()
    }

    /// The decision on `demands`, with what the request holds. A refusal
    /// first gives back what the allowed answers took (the only effect of
    /// the fold), so that a denied request does not use up the other
    /// dimensions' quota.
    #[inline(always)]
    pub(super) fn decide(self, set: &RuleSet, demands: &[Demand]) -> Checked {
        match self.refusal {
            Some((i, result)) => {
                set.refund_held(demands, &self.held);
                let d = &demands[i];
                Checked::new(refusal(&set.rules[d.rule], d, result), None)
            }
            None => Checked::new(
                set.allowed(demands, &self.held, self.shadow),
                set.kept(demands, &self.held),
            ),
        }
    }
}

impl RuleSet {
    /// The fold of a single answer, `result` for the one demand `d`: what
    /// [`Tally`] decides for one answer, without holding it (the common
    /// case, one rule per request, pays for no list).
    #[inline(always)]
    pub(super) fn decide_one(
        &self,
        bound: &Bound,
        d: &Demand,
        result: Result<Outcome, Unavailable>,
    ) -> Checked {
        bound.observed(&result);
        let shadow = bound.shadow;
        match count(shadow, result) {
            Counted::Taken(o) => {
                // A shadow rule never shapes traffic.
                let delay_us = if shadow { 0 } else { o.step.delay_us };
                let decision = allowed_by(bound, d, &o, shadow, delay_us, ShadowDenials::default());
                let held = if bound.keep {
                    self.kept(std::slice::from_ref(d), &[(0, o)])
                } else {
                    None
                };
                Checked::new(decision, held)
            }
            Counted::ShadowDenied(o) => {
                let denied = ShadowDenials::default().with(d.rule);
                Checked::new(allowed_by(bound, d, &o, true, 0, denied), None)
            }
            Counted::Refused(result) => Checked::new(refusal(bound, d, result), None),
        }
    }

    /// Gives back what the allowed answers in `held` took.
    pub(super) fn refund_held(&self, demands: &[Demand], held: &[(usize, Outcome)]) {
        for (i, o) in held {
            if o.step.allowed {
                self.refund(&demands[*i], o);
            }
        }
    }

    pub(super) fn allowed(
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
            None => Decision::unlimited(),
            Some((i, o, shadow)) => {
                let d = &demands[i];
                allowed_by(&self.rules[d.rule], d, &o, shadow, delay_us, shadow_denied)
            }
        }
    }
}

/// What a shadow rule's denial (or failure) leaves for the report: an
/// outcome that took nothing.
pub(super) fn shadow_outcome(result: Result<Outcome, Unavailable>) -> Outcome {
    match result {
        Ok(o) => o,
        Err(_) => Outcome {
            step: crate::algorithm::Step::default(),
            at_us: crate::clock::unix_now_us(),
            degraded: true,
            shed: false,
        },
    }
}

/// The decision of a request `d`'s rule, `bound`, refused: denied with its
/// figures, or refused for a fail-closed rule that could not answer.
#[inline(always)]
fn refusal(bound: &Bound, d: &Demand, result: Result<Outcome, Unavailable>) -> Decision {
    match result {
        Ok(o) => {
            // A denial that starts a block answers the block's wait.
            let block = bound.denied(&d.key).unwrap_or(0);
            let wait = o.step.retry_after_us.max(block).max(1);
            let tier = bound.tier(&d.key);
            Decision::decided(
                d.rule as u16,
                tier,
                &o,
                wait,
                false,
                false,
                ShadowDenials::default(),
            )
        }
        Err(error) => Decision::refused(d.rule, error),
    }
}

/// An allowed decision reporting `d`'s rule, `bound`, which answered `o`.
#[inline(always)]
fn allowed_by(
    bound: &Bound,
    d: &Demand,
    o: &Outcome,
    shadow: bool,
    delay_us: u64,
    shadow_denied: ShadowDenials,
) -> Decision {
    let tier = bound.tier(&d.key);
    Decision::decided(
        d.rule as u16,
        tier,
        o,
        delay_us,
        true,
        shadow,
        shadow_denied,
    )
}
