//! Operations on one rule's key: read, reset, block, unblock, penalize,
//! reward (see [`operate`](crate::operate)).

use std::sync::Arc;
use std::time::Duration;

use crate::backend::Outcome;
use crate::operate::{Block, BlockCause, BlockStats, KeyState, OpError, Reach};
use crate::{Answer, Key};

use super::RuleSet;
use super::bind::Bound;

/// The longest block an operator may set (30 days).
pub const MAX_BLOCK: Duration = Duration::from_secs(30 * 86_400);

impl RuleSet {
    /// The index of the rule named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.rules.iter().position(|b| b.rule.name() == name)
    }

    /// The operations on this set's keys: read, reset, block, unblock,
    /// penalize, reward (see [`Operator`]).
    pub fn operate(&self) -> Operator<'_> {
        Operator { set: self }
    }
}

/// An operator's work on the keys of a [`RuleSet`]'s rules, each named by
/// its index ([`RuleSet::index_of`]): what an admin endpoint calls, apart
/// from the request path.
#[derive(Debug, Clone, Copy)]
pub struct Operator<'a> {
    set: &'a RuleSet,
}

impl Operator<'_> {
    /// `key`'s state under rule `rule`, spending nothing: what is left,
    /// when it is full again, and what is left of a block.
    ///
    /// A Redis mode reads the fleet's state (the approximate and leased
    /// modes: this instance's view of it); with Redis down, the rule's
    /// failure policy's figures, marked `degraded`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use throttle_fleet_core::{Answer, decision::Demand, Key, clock::ManualClock, memory::MemoryBackend, Quota, operate::Reach, Rule, rule_set::RuleSet};
    ///
    /// let mut rules = RuleSet::new();
    /// let backend = MemoryBackend::with_clock(ManualClock::new(0));
    /// let ip = rules.bind(Rule::new("ip", Quota::per_minute(10)).fixed_window(), &backend)?;
    /// let key = Key::new("10.0.0.1");
    /// let ops = rules.operate();
    /// let _ = rules.check(&[Demand::new(ip, key, 3)]);
    /// let Answer::Ready(Ok(state)) = ops.inspect(ip, &key) else { unreachable!() };
    /// assert_eq!((state.limit, state.remaining, state.blocked_for), (10, 7, None));
    ///
    /// let Answer::Ready(Ok(Reach::Instance)) = ops.block(ip, &key, Duration::from_secs(600), "10.0.0.1") else { unreachable!() };
    /// let Answer::Ready(checked) = rules.check(&[Demand::new(ip, key, 1)]) else { unreachable!() };
    /// assert!(checked.decision().is_denied());
    /// assert_eq!(checked.decision().retry_after(), Duration::from_secs(600));
    /// assert_eq!(ops.blocked(ip)[0].1.label.as_ref(), "10.0.0.1");
    ///
    /// let Answer::Ready(Ok((true, Reach::Instance))) = ops.unblock(ip, &key) else { unreachable!() };
    /// let Answer::Ready(Ok(())) = ops.reset(ip, &key) else { unreachable!() };
    /// let Answer::Ready(Ok(state)) = ops.inspect(ip, &key) else { unreachable!() };
    /// assert_eq!(state.remaining, 10);
    /// # Ok::<(), throttle_fleet_core::ConfigError>(())
    /// ```
    ///
    /// # Panics
    ///
    /// If `rule` is not an index of this set (see [`RuleSet::index_of`]).
    pub fn inspect(&self, rule: usize, key: &Key) -> Answer<Result<KeyState, OpError>> {
        let bound = &self.set.rules[rule];
        let limit = bound.rule.quota_for(key);
        let limit = bound.rule.capacity_of(limit);
        let blocked_for = bound.blocks.remaining_us(key).map(Duration::from_micros);
        crate::backend::peek(bound.limiter(key), key).map(move |r| {
            r.map(|o| KeyState {
                limit,
                remaining: if blocked_for.is_some() {
                    0
                } else {
                    o.step.remaining
                },
                reset_after: Duration::from_micros(o.step.reset_us),
                blocked_for,
                degraded: o.degraded,
            })
        })
    }

    /// Forgets `key`'s counts under rule `rule` (and its history of
    /// denials under the rule's penalty): its next request finds a fresh
    /// key, on every instance of a fleet-wide backend. A block stays: see
    /// [`unblock`](Self::unblock).
    ///
    /// A reset that the backend could not make (its store down) changes
    /// nothing, here or elsewhere.
    pub fn reset(&self, rule: usize, key: &Key) -> Answer<Result<(), OpError>> {
        let bound = &self.set.rules[rule];
        if let Err(e) = rate_only(bound, "reset") {
            return Answer::Ready(Err(e));
        }
        let (escalation, key) = (bound.escalation.clone(), *key);
        let reset = match bound.limiter(&key).ops() {
            Some(ops) => ops.reset(&key),
            None => crate::backend::no_reset(),
        };
        reset.map(move |r| {
            if let (Ok(()), Some(escalation)) = (&r, escalation) {
                escalation.forget(&key);
            }
            r
        })
    }

    /// Blocks `key` under rule `rule` for `duration`: its requests are
    /// denied before the backend is asked, with `Retry-After` equal to
    /// what is left of the block. `label` is what a listing shows beside
    /// the key (what the operator gave, secrets redacted). The block holds
    /// here at once; a fleet-wide backend tells every instance, or, while
    /// it cannot, keeps the block and tells them when it can: the answer
    /// says which ([`Reach`]).
    pub fn block(
        &self,
        rule: usize,
        key: &Key,
        duration: Duration,
        label: &str,
    ) -> Answer<Result<Reach, OpError>> {
        if duration.is_zero() || duration > MAX_BLOCK {
            return Answer::Ready(Err(OpError::Invalid(format!(
                "a block lasts from 1 µs to 30 days (got {duration:?})"
            ))));
        }
        let bound = &self.set.rules[rule];
        let block = Block {
            until_us: bound
                .blocks
                .now_us()
                .saturating_add(duration.as_micros() as u64),
            label: Arc::from(label),
            cause: BlockCause::Operator,
        };
        if !bound.blocks.insert(*key, block.clone()) {
            return Answer::Ready(Err(OpError::Invalid(format!(
                "rule `{}` holds {} blocked keys already",
                bound.rule.name(),
                crate::operate::blocks::MAX_BLOCKED_KEYS
            ))));
        }
        bound.blocks.count_start();
        share_block(bound, key, Some(&block))
    }

    /// Lifts `key`'s block under rule `rule`, here at once and on every
    /// instance of a fleet-wide backend (as for [`block`](Self::block),
    /// the [`Reach`] says whether that is done or queued); the `bool` is
    /// `true` when this instance knew of a block.
    pub fn unblock(&self, rule: usize, key: &Key) -> Answer<Result<(bool, Reach), OpError>> {
        let bound = &self.set.rules[rule];
        let had = bound.blocks.remove(key);
        share_block(bound, key, None).map(move |r| r.map(|reach| (had, reach)))
    }

    /// The keys blocked now under rule `rule` as this instance knows them,
    /// with their blocks and what is left of each, soonest to end first.
    pub fn blocked(&self, rule: usize) -> Vec<(Key, Block, Duration)> {
        self.set.rules[rule].blocks.list()
    }

    /// Rule `rule`'s block counters (see [`BlockStats`]).
    pub fn block_stats(&self, rule: usize) -> BlockStats {
        self.set.rules[rule].blocks.stats()
    }

    /// Takes up to `units` from `key` under rule `rule` without a request:
    /// what fits, at most what is left (a penalty never borrows from the
    /// future; a block does that). Answers the units taken.
    pub fn penalize(&self, rule: usize, key: &Key, units: u64) -> Answer<Result<u64, OpError>> {
        if let Err(e) = rate_only(&self.set.rules[rule], "penalize") {
            return Answer::Ready(Err(e));
        }
        let (set, key) = (self.set.clone(), *key);
        let limiter = set.rules[rule].limiter(&key);
        limiter
            .acquire(&key, units, u64::MAX)
            .then(move |first| match first {
                Err(u) => Answer::Ready(Err(OpError::Unavailable(u))),
                Ok(o) if o.step.allowed => Answer::Ready(Ok(units)),
                Ok(o) if o.step.remaining == 0 => Answer::Ready(Ok(0)),
                Ok(o) => {
                    let rest = o.step.remaining.min(units);
                    set.rules[rule]
                        .limiter(&key)
                        .acquire(&key, rest, u64::MAX)
                        .map(move |r| match r {
                            Ok(o) if o.step.allowed => Ok(rest),
                            Ok(_) => Ok(0),
                            Err(u) => Err(OpError::Unavailable(u)),
                        })
                }
            })
    }

    /// Gives back up to `units` to `key` under rule `rule` (never past a
    /// fresh key's allowance), as a refund would.
    pub fn reward(&self, rule: usize, key: &Key, units: u64) -> Answer<Result<(), OpError>> {
        if let Err(e) = rate_only(&self.set.rules[rule], "reward") {
            return Answer::Ready(Err(e));
        }
        let (set, key) = (self.set.clone(), *key);
        let limiter = set.rules[rule].limiter(&key);
        crate::backend::peek(limiter, &key).map(move |r| {
            let seen = r?;
            // A refund gives back what a check at `seen.at_us` took: the
            // backend's own time, so the window matches.
            let taken = Outcome {
                step: crate::algorithm::Step {
                    allowed: true,
                    ..seen.step
                },
                ..seen
            };
            set.rules[rule].limiter(&key).refund(&key, units, &taken);
            Ok(())
        })
    }
}

/// Tells `bound`'s fleet of a block or an unblock of `key`, if its backend
/// shares blocks; otherwise the change stays on this instance.
fn share_block(bound: &Bound, key: &Key, block: Option<&Block>) -> Answer<Result<Reach, OpError>> {
    match bound.limiter.ops() {
        Some(ops) => ops.share_block(key, block),
        None => Answer::Ready(Ok(Reach::Instance)),
    }
}

fn rate_only(bound: &Bound, operation: &'static str) -> Result<(), OpError> {
    if bound.rule.algorithm().is_concurrency() {
        return Err(OpError::unsupported(
            operation,
            "a concurrency rule's slots are held by running requests",
        ));
    }
    Ok(())
}
