//! Checking a request's demands against the bound rules.

use smallvec::SmallVec;

use crate::backend::{Acquire, Outcome, Unavailable};
use crate::decision::{Charged, Check, Demand, ShadowDenials};

use super::RuleSet;
use super::combine::{Keep, shadow_outcome};

impl RuleSet {
    /// Checks `demands` (at most one per rule, in rule order) and takes their
    /// cost if all allow. Rules decided locally are asked first, in order,
    /// then the remote ones: a request a local rule denies costs no round
    /// trip (and no refund of a remote charge).
    pub fn check(&self, demands: &[Demand]) -> Check {
        match demands {
            [d] => self.one(d),
            _ => self.run(demands),
        }
    }

    /// Like [`check`](Self::check), and also hands back what each allowed
    /// demand took ([`Charged::taken`]), for a cost to be given back once
    /// the request's outcome is known ([`release`](Self::release)).
    pub fn check_charged(&self, demands: &[Demand]) -> Check<Charged> {
        match demands {
            [d] => self.one(d),
            _ => self.run(demands),
        }
    }

    /// A check of one demand, the common case: no order to work out,
    /// nothing to give back, nothing to combine.
    #[inline]
    fn one<K: Keep>(&self, d: &Demand) -> Check<K> {
        let bound = &self.rules[d.rule];
        if let Some(o) = bound.local(&d.key, d.cost) {
            return Check::Ready(self.settle_one(d, Ok(o)));
        }
        match bound.limiter(&d.key).acquire(&d.key, d.cost) {
            Acquire::Ready(result) => Check::Ready(self.settle_one(d, result)),
            Acquire::Pending(first) => {
                let (set, d) = (self.clone(), *d);
                Check::Pending(Box::pin(async move { set.settle_one(&d, first.await) }))
            }
        }
    }

    /// The decision on the single demand `d`, whose rule answered `result`.
    #[inline(always)]
    fn settle_one<K: Keep>(&self, d: &Demand, result: Result<Outcome, Unavailable>) -> K {
        let shadow = self.rules[d.rule].shadow;
        match result {
            Ok(o) if o.step.allowed => {
                // A shadow rule never shapes traffic.
                let delay_us = if shadow { 0 } else { o.step.delay_us };
                let decision = self.allowed_by(d, o, shadow, delay_us, ShadowDenials::default());
                K::keep(decision, &[(0, o)])
            }
            result if shadow => {
                let mut denied = ShadowDenials::default();
                denied.insert(d.rule);
                let o = shadow_outcome(result);
                K::keep(self.allowed_by(d, o, true, 0, denied), &[(0, o)])
            }
            result => K::keep(self.refusal(d, result), &[]),
        }
    }

    // Kept out of `check`, so the one-demand path stays small.
    #[inline(never)]
    fn run<K: Keep>(&self, demands: &[Demand]) -> Check<K> {
        // Asked so far: (index in `demands`, outcome). Allowed outcomes
        // took their cost; a shadow rule's denial is kept too (not taken).
        let mut held: SmallVec<[(usize, Outcome); 8]> = SmallVec::new();
        let mut shadow = ShadowDenials::default();
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
            let bound = &self.rules[d.rule];
            match bound.acquire(&d.key, d.cost) {
                Acquire::Ready(Ok(o)) if o.step.allowed => held.push((i, o)),
                Acquire::Ready(result) if bound.shadow => {
                    held.push((i, shadow_outcome(result)));
                    shadow.insert(d.rule);
                }
                Acquire::Ready(result) => {
                    self.give_back(demands, &held);
                    return Check::Ready(K::keep(self.refusal(d, result), &[]));
                }
                Acquire::Pending(first) => {
                    let set = self.clone();
                    let demands = demands.to_vec();
                    let held = held.into_vec();
                    let rest = order[at + 1..].to_vec();
                    return Check::Pending(Box::pin(async move {
                        set.finish(demands, held, i, first, rest).await
                    }));
                }
            }
        }
        Check::Ready(K::keep(self.allowed(demands, &held, shadow), &held))
    }

    /// The asynchronous rest of a check: `held` asked, `demands[first_at]`
    /// pending as `first`, the demands at `rest` (in asking order) not asked
    /// yet. Asks those at once so their round trips overlap.
    async fn finish<K: Keep>(
        self,
        demands: Vec<Demand>,
        held: Vec<(usize, Outcome)>,
        first_at: usize,
        first: crate::backend::PendingOutcome,
        rest: Vec<usize>,
    ) -> K {
        let mut results: Vec<Option<Result<Outcome, Unavailable>>> = vec![None; demands.len()];
        for (i, o) in &held {
            results[*i] = Some(Ok(*o));
        }
        let mut pending = vec![(first_at, first)];
        for j in rest {
            let d = &demands[j];
            let bound = &self.rules[d.rule];
            match bound.acquire(&d.key, d.cost) {
                Acquire::Ready(r) => {
                    let stop = !bound.shadow && !matches!(r, Ok(o) if o.step.allowed);
                    results[j] = Some(r);
                    if stop {
                        break;
                    }
                }
                Acquire::Pending(f) => pending.push((j, f)),
            }
        }
        let (at, futs): (Vec<usize>, Vec<_>) = pending.into_iter().unzip();
        for (j, r) in at
            .into_iter()
            .zip(futures_util::future::join_all(futs).await)
        {
            results[j] = Some(r);
        }
        let mut shadow = ShadowDenials::default();
        let mut asked: Vec<(usize, Outcome)> = Vec::with_capacity(results.len());
        let mut first_refusal = None;
        for (i, r) in results.iter().enumerate() {
            let Some(r) = r else { continue };
            let rule = demands[i].rule;
            match r {
                Ok(o) if o.step.allowed => asked.push((i, *o)),
                r if self.rules[rule].shadow => {
                    shadow.insert(rule);
                    asked.push((i, shadow_outcome(r.clone())));
                }
                r => {
                    if first_refusal.is_none() {
                        first_refusal = Some((i, r.clone()));
                    }
                }
            }
        }
        match first_refusal {
            Some((i, r)) => {
                self.give_back(&demands, &asked);
                K::keep(self.refusal(&demands[i], r), &[])
            }
            None => K::keep(self.allowed(&demands, &asked, shadow), &asked),
        }
    }

    fn give_back(&self, demands: &[Demand], held: &[(usize, Outcome)]) {
        for (i, o) in held {
            if o.step.allowed {
                self.release(&demands[*i], o);
            }
        }
    }

    /// Gives back the cost that `demand` took in a check that allowed it
    /// (`outcome` is what its rule decided then). For costs that depend on
    /// how the request went: the layer's response-aware limits use it once
    /// the inner service has answered. Best effort and never blocking, like
    /// [`Limiter::release`](crate::Limiter::release).
    pub fn release(&self, demand: &Demand, outcome: &Outcome) {
        self.rules[demand.rule]
            .limiter(&demand.key)
            .release(&demand.key, demand.cost, outcome);
    }
}
