//! What the policy makes of a request before the backends answer: every
//! limit's key and cost, then the rule set's check.

use http::request::Parts;
use smallvec::SmallVec;
use throttle_fleet_core::decision::Charged;
use throttle_fleet_core::rule_set::Holding;
use throttle_fleet_core::{Answer, Demand};

use super::{BoundLimit, Engine};
use crate::extract::Extracted;
use crate::policy::MissingKey;
use crate::responder::{Rejection, Responder};

/// What the policy made of a request before the backends are asked.
pub(crate) enum Prepared<'a> {
    Plain(Answer),
    /// A check whose charges a response-aware limit settles later, with
    /// any concurrency slots among them (boxed: only policies with such a
    /// limit pay for its size).
    Settle(Box<(Answer<Charged>, SmallVec<[Demand; 4]>)>),
    /// A check of a policy with a concurrency rule (and no response-aware
    /// limit): the decision and the slots it took.
    Held(Answer<Holding>),
    Rejected(Rejection<'a>),
}

impl BoundLimit {
    /// This rule's demand for `req`: `None` when the rule does not apply
    /// (skipped, or free), the status to answer when its key is missing and
    /// the rule rejects such requests.
    #[inline]
    fn demand(&self, req: &Parts) -> Result<Option<Demand>, http::StatusCode> {
        let key = match self.extractor.extract(req) {
            Extracted::Key(key) => key,
            Extracted::Skip => return Ok(None),
            Extracted::Missing => match self.on_missing {
                MissingKey::Skip => return Ok(None),
                MissingKey::Reject(status) => return Err(status),
            },
        };
        let cost = match &self.cost {
            Some(f) => u64::from(f(req)),
            None => self.static_cost,
        };
        Ok((cost > 0).then_some(Demand {
            rule: self.index,
            key,
            cost,
        }))
    }
}

impl<R: Responder> Engine<R> {
    #[cold]
    fn missing(&self, limit: &BoundLimit, status: http::StatusCode) -> Prepared<'_> {
        let rule = self.rules.rule(limit.index);
        tracing::debug!(rule = rule.name(), %status, "rate limit key missing: rejecting");
        Prepared::Rejected(Rejection::MissingKey { rule, status })
    }

    /// Extracts every rule's key and cost, then checks them.
    #[inline]
    pub(crate) fn prepare(&self, req: &Parts) -> Prepared<'_> {
        if let [limit] = &*self.limits
            && !self.settles
        {
            // One rule, nothing to settle: no list of demands.
            return match limit.demand(req) {
                Ok(Some(demand)) if self.holds => {
                    Prepared::Held(self.rules.check_holding(std::slice::from_ref(&demand)))
                }
                Ok(Some(demand)) => {
                    Prepared::Plain(self.rules.check(std::slice::from_ref(&demand)))
                }
                Ok(None) => {
                    Prepared::Plain(Answer::Ready(throttle_fleet_core::Decision::Unlimited))
                }
                Err(status) => self.missing(limit, status),
            };
        }
        let mut demands: SmallVec<[Demand; 4]> = SmallVec::new();
        for limit in self.limits.iter() {
            match limit.demand(req) {
                Ok(Some(demand)) => demands.push(demand),
                Ok(None) => {}
                Err(status) => return self.missing(limit, status),
            }
        }
        if self.settles {
            let check = self.rules.check_charged(&demands);
            return Prepared::Settle(Box::new((check, demands)));
        }
        if self.holds {
            return Prepared::Held(self.rules.check_holding(&demands));
        }
        Prepared::Plain(self.rules.check(&demands))
    }
}
