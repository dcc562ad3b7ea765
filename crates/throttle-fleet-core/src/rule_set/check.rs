//! Checking a request's demands against the bound rules.

use smallvec::SmallVec;

use crate::Answer;
use crate::backend::{Outcome, Pending, Unavailable};
use crate::decision::Demand;

use super::combine::Tally;
use super::{Checked, RuleSet};

impl RuleSet {
    /// Checks `demands` (at most one per rule, in rule order) and takes their
    /// cost if all allow. Rules decided locally are asked first, in order,
    /// then the remote ones: a request a local rule denies costs no round
    /// trip (and no refund of a remote charge).
    ///
    /// The answer owns what an allowed request holds ([`Checked::held`]):
    /// slots under concurrency rules, given back when it is dropped, and
    /// the charges of rules whose cost depends on the response
    /// ([`Binding::settle_by`](super::Binding::settle_by)), given back or kept by
    /// [`Held::settle`](super::Held::settle). A request that holds nothing
    /// costs no allocation.
    #[inline]
    pub fn check(&self, demands: &[Demand]) -> Answer<Checked> {
        match demands {
            [d] => self.one(d),
            _ => self.run(demands),
        }
    }

    /// A check of one demand, the common case: no order to work out,
    /// nothing to give back, nothing to combine.
    #[inline]
    pub(super) fn one(&self, d: &Demand) -> Answer<Checked> {
        let bound = &self.rules[d.rule];
        if let Some(o) = bound.local(&d.key, d.cost) {
            return Answer::Ready(self.decide_one(bound, d, Ok(o)));
        }
        match bound.ask(d) {
            Answer::Ready(result) => Answer::Ready(self.decide_one(bound, d, result)),
            Answer::Pending(first) => {
                let (set, d) = (self.clone(), *d);
                Answer::Pending(Box::pin(async move {
                    set.decide_one(&set.rules[d.rule], &d, first.await)
                }))
            }
        }
    }

    // Kept out of `check`, so the one-demand path stays small.
    #[inline(never)]
    pub(super) fn run(&self, demands: &[Demand]) -> Answer<Checked> {
        let mut tally = Tally::<8>::new();
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
            match self.rules[d.rule].acquire(d) {
                Answer::Ready(result) => {
                    tally.add(self, i, d.rule, result);
                    if tally.refused() {
                        break;
                    }
                }
                Answer::Pending(first) => {
                    let set = self.clone();
                    let demands = demands.to_vec();
                    let rest = order[at + 1..].to_vec();
                    return Answer::Pending(Box::pin(async move {
                        set.finish(demands, tally, i, first, rest).await
                    }));
                }
            }
        }
        Answer::Ready(tally.decide(self, demands))
    }

    /// The asynchronous rest of a check: `tally` holds the answers so far,
    /// `demands[first_at]` is pending as `first`, the demands at `rest` (in
    /// asking order) are not asked yet. Asks those at once so their round
    /// trips overlap.
    async fn finish(
        self,
        demands: Vec<Demand>,
        mut tally: Tally<8>,
        first_at: usize,
        first: Pending<Result<Outcome, Unavailable>>,
        rest: Vec<usize>,
    ) -> Checked {
        let mut pending = vec![(first_at, first)];
        let mut answered = Vec::new();
        for j in rest {
            let d = &demands[j];
            let bound = &self.rules[d.rule];
            match bound.acquire(d) {
                Answer::Ready(r) => {
                    let stop = !bound.shadow && !matches!(r, Ok(o) if o.step.allowed);
                    answered.push((j, r));
                    if stop {
                        break;
                    }
                }
                Answer::Pending(f) => pending.push((j, f)),
            }
        }
        let (at, futs): (Vec<usize>, Vec<_>) = pending.into_iter().unzip();
        answered.extend(
            at.into_iter()
                .zip(futures_util::future::join_all(futs).await),
        );
        for (j, r) in answered {
            tally.add(&self, j, demands[j].rule, r);
        }
        // After a wait the answers are weighed in rule order (the first
        // refusal, and the first of equally tight allowed rules, in rule
        // order), not in the order they were asked.
        tally.in_rule_order();
        tally.decide(&self, &demands)
    }

    /// Gives back the cost that `demand` took in a check that allowed it
    /// (`outcome` is what its rule decided then): for a caller that keeps
    /// charges of its own; what a check keeps in its [`Held`](super::Held)
    /// is refunded through it instead. Best effort and never blocking, like
    /// [`Limiter::refund`](crate::backend::Limiter::refund).
    pub fn refund(&self, demand: &Demand, outcome: &Outcome) {
        self.give_back(demand, outcome, false);
    }

    /// Gives back what `demand` took (`outcome`); `ran` when its request
    /// ran to its end, which an adaptive limit takes as a sample of the
    /// backend's latency.
    pub(super) fn give_back(&self, demand: &Demand, outcome: &Outcome, ran: bool) {
        let bound = &self.rules[demand.rule];
        if let Some(s) = &bound.shedding {
            s.ended(demand, outcome, ran, &bound.blocks);
        }
        bound
            .limiter(&demand.key)
            .refund(&demand.key, demand.cost, outcome);
    }

    /// The adaptive limit of the rule at `index` now, if it has one
    /// ([`InFlightLimit::adaptive`](crate::InFlightLimit::adaptive)): what a request of the
    /// highest class may fill. For a metric, or a look at how it moves.
    pub fn adaptive_limit(&self, index: usize) -> Option<u64> {
        let shedding = self.rules.get(index)?.shedding.as_ref()?;
        shedding.adaptive.as_ref().map(|_| shedding.limit())
    }
}
