//! Rules that weigh a request's class: a concurrency rule's reserve, and
//! its adaptive limit. The limit a request may fill is worked out here and
//! handed to the backend ([`Limiter::acquire`]); the backend only
//! counts.

use std::sync::Arc;

use crate::adaptive::Adaptive;
use crate::backend::{Limiter, Outcome, Unavailable};
use crate::decision::Demand;
use crate::operate::Blocks;
use crate::{Answer, ConfigError, InFlightLimit, Rule};

/// What a rule with a reserve or an adaptive limit adds to its binding.
#[derive(Debug)]
pub(super) struct Shedding {
    /// The rule's in-flight settings: its own limit, `n`, and its reserve.
    in_flight: InFlightLimit,
    /// The adaptive limit, if the rule has one.
    pub(super) adaptive: Option<Adaptive>,
    /// The clock of the limiter's own table of blocks, when it has one
    /// (the memory backend): the clock its answers are timed by
    /// ([`Outcome::at_us`]), so an admission's time is read from the
    /// answer and only a request's end reads a clock. `None`: the
    /// admission is timed here, from the rule set's clock.
    limiter_clock: Option<Arc<Blocks>>,
}

impl Shedding {
    /// The shedding of `rule` bound to `limiter`, or `None` when the rule
    /// has neither a reserve nor an adaptive limit. Refuses an adaptive
    /// limit on a limiter that asks a remote store (the limit is this
    /// process's).
    pub(super) fn of(rule: &Rule, limiter: &dyn Limiter) -> Result<Option<Self>, ConfigError> {
        let Some(&in_flight) = rule.in_flight_limit().filter(|_| rule.sheds()) else {
            return Ok(None);
        };
        if in_flight.adaptive.is_some() && limiter.is_remote() {
            return Err(ConfigError::new(
                "adaptive",
                "an adaptive limit is this process's own: bind the rule to a backend that decides in the process (the memory backend)",
            )
            .in_rule(rule.name()));
        }
        let adaptive = in_flight
            .adaptive
            .map(|v| Adaptive::new(v, in_flight.limit));
        let limiter_clock = adaptive.as_ref().and_then(|_| limiter.ops()?.blocks());
        Ok(Some(Self {
            in_flight,
            adaptive,
            limiter_clock,
        }))
    }

    /// The rule's limit now: the adaptive limit, or `n`.
    #[inline]
    pub(super) fn limit(&self) -> u64 {
        self.adaptive
            .as_ref()
            .map_or(self.in_flight.limit, Adaptive::limit)
    }

    /// Asks `limiter` for `d` under the limit of `d`'s class. A denial
    /// under a limit below `n` is shed. An admission under an adaptive
    /// limit is counted, and timed from `clock` (the rule set's: what
    /// [`ended`](Self::ended) reads).
    #[inline]
    pub(super) fn acquire(
        self: &Arc<Self>,
        limiter: &dyn Limiter,
        d: &Demand,
        clock: &Arc<Blocks>,
    ) -> Answer<Result<Outcome, Unavailable>> {
        let limit = self.in_flight.limit_for(d.class, self.limit());
        let shed = limit < self.in_flight.limit;
        let cost = d.cost;
        let mut answer = match limiter.acquire(&d.key, cost, limit) {
            Answer::Pending(f) => {
                let (this, clock) = (self.clone(), clock.clone());
                return Answer::Pending(Box::pin(async move {
                    f.await.map(|mut o| {
                        this.mark(&mut o, shed, cost, &clock);
                        o
                    })
                }));
            }
            ready => ready,
        };
        // A local limiter (every adaptive rule's) answers at once: no
        // clone of the rule's state or clock for a later answer, and the
        // answer marked where it lies (not copied into another).
        if let Answer::Ready(Ok(o)) = &mut answer {
            self.mark(o, shed, cost, clock);
        }
        answer
    }

    /// Marks `o` as the rule set reports it: a denial under a limit below
    /// `n` (`shed`) is shed; an admission under an adaptive limit is
    /// counted and timed (by the limiter's answer, or from `clock`).
    #[inline]
    fn mark(&self, o: &mut Outcome, shed: bool, cost: u64, clock: &Blocks) {
        if !o.step.allowed {
            o.shed = shed;
            if let Some(a) = &self.adaptive {
                a.denied();
            }
        } else if let Some(a) = &self.adaptive {
            a.admitted(cost);
            if self.limiter_clock.is_none() {
                o.at_us = clock.now_us();
            }
        }
    }

    /// A request that `d` admitted (`o`) gives its slot back: `ran` when it
    /// ran to its end (a sample of the backend's latency), not when another
    /// rule's denial sent it back.
    #[inline]
    pub(super) fn ended(&self, d: &Demand, o: &Outcome, ran: bool, clock: &Blocks) {
        if let Some(a) = &self.adaptive {
            if ran {
                let clock = self.limiter_clock.as_deref().unwrap_or(clock);
                a.ended(d.cost, o.at_us, clock.now_us());
            } else {
                a.left(d.cost);
            }
        }
    }
}
