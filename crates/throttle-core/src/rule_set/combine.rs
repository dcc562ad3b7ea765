//! Combining the rules' answers into one decision.

use std::time::Duration;

use smallvec::SmallVec;

use crate::backend::{Outcome, Unavailable};
use crate::decision::{Allowed, Charged, Decision, Demand, Denied, Refused, ShadowDenials};

use super::RuleSet;

/// What a check hands back: a decision, or a decision and its charges.
pub(super) trait Keep: Send + 'static {
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

impl RuleSet {
    pub(super) fn refusal(&self, d: &Demand, result: Result<Outcome, Unavailable>) -> Decision {
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
            None => Decision::Unlimited,
            Some((i, o, shadow)) => {
                self.allowed_by(&demands[i], o, shadow, delay_us, shadow_denied)
            }
        }
    }

    /// An allowed decision reporting `d`'s rule, which answered `o`.
    #[inline]
    pub(super) fn allowed_by(
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
pub(super) fn shadow_outcome(result: Result<Outcome, Unavailable>) -> Outcome {
    match result {
        Ok(o) => o,
        Err(_) => Outcome {
            step: crate::Step::default(),
            at_us: crate::unix_now_us(),
            degraded: true,
        },
    }
}
