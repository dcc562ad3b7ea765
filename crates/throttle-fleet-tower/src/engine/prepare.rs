//! What the policy makes of a request before the backends answer: every
//! limit's key and cost, then the rule set's check.

use smallvec::SmallVec;
use throttle_fleet_core::{Answer, decision::Demand, rule_set::Checked};

use super::{BoundLimit, Engine};
use crate::RequestHead;
use crate::extract::Extracted;
use crate::policy::MissingKey;
use crate::responder::{Rejection, Responder};

impl BoundLimit {
    /// This rule's demand for `req`: `None` when the rule does not apply
    /// (skipped, or free), the status to answer when its key is missing and
    /// the rule rejects such requests.
    #[inline]
    fn demand(&self, req: &RequestHead<'_>) -> Result<Option<Demand>, http::StatusCode> {
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
        let demand = Demand::new(self.index, key, cost);
        Ok((cost > 0).then(|| match &self.class {
            Some(class) => demand.class(class(req)),
            None => demand,
        }))
    }
}

impl<R: Responder> Engine<R> {
    #[cold]
    fn missing(&self, limit: &BoundLimit, status: http::StatusCode) -> Rejection<'_> {
        let rule = self.rules.rule(limit.index);
        tracing::debug!(rule = rule.name(), %status, "rate limit key missing: rejecting");
        Rejection::MissingKey { rule, status }
    }

    /// Extracts every rule's key and cost, then checks them; or the
    /// rejection of a request whose key is missing.
    #[inline]
    pub(crate) fn prepare(&self, req: &RequestHead<'_>) -> Result<Answer<Checked>, Rejection<'_>> {
        if let [limit] = &*self.limits {
            // One rule: no list of demands.
            return match limit.demand(req) {
                Ok(Some(demand)) => Ok(self.rules.check(std::slice::from_ref(&demand))),
                Ok(None) => Ok(self.rules.check(&[])),
                Err(status) => Err(self.missing(limit, status)),
            };
        }
        let mut demands: SmallVec<[Demand; 4]> = SmallVec::new();
        for limit in self.limits.iter() {
            match limit.demand(req) {
                Ok(Some(demand)) => demands.push(demand),
                Ok(None) => {}
                Err(status) => return Err(self.missing(limit, status)),
            }
        }
        Ok(self.rules.check(&demands))
    }
}
