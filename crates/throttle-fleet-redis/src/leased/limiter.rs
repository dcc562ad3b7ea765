//! One rule in the leased mode: spending local tokens and deciding; leasing
//! batches is in `fetch`, giving idle tokens back in `give_back`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use throttle_fleet_core::algorithm::{Gcra, GcraState, Meter, Step};
use throttle_fleet_core::backend::{KeyOps, Limiter, Outcome, Unavailable};
use throttle_fleet_core::memory::MemoryLimiter;
use throttle_fleet_core::operate::OpError;
use throttle_fleet_core::{
    Answer, ConfigError, Key, Rule, algorithm::Algorithm, clock::Clock, memory::MemoryBackend,
};

use crate::failure_policy::{degraded, local_limiter};
use crate::keys::KeyBase;
use crate::link::Redis;
use crate::metrics::LeaseMetrics;
use crate::operate::FleetOps;
use crate::registry::Registry;
use crate::schedule::{Every, Going, micros};

use super::options::{MAX_BATCH, WhenEmpty};
use super::shared::Shared;
use super::state::{Lease, LeaseMeter, LeaseState, Local, spend, start_fetch};

/// One rule in the leased mode.
pub(super) struct LeaseRule {
    pub(super) rule: Rule,
    pub(super) redis: Arc<Redis>,
    pub(super) shared: Arc<Shared>,
    pub(super) keys: KeyBase,
    pub(super) gcra: Gcra,
    pub(super) store: Arc<MemoryLimiter<LeaseMeter, Arc<dyn Clock>>>,
    pub(super) local: Option<Arc<dyn Limiter>>,
    pub(super) batch: u64,
    /// The first batch a key that keeps spending gets after its first
    /// lease (which takes only the request's cost).
    pub(super) first_batch: u64,
    /// The most a hot key's batch grows to.
    pub(super) max_batch: u64,
    /// How long the bucket takes to refill `batch` tokens: the longest a
    /// drained key waits before asking again.
    pub(super) refill_us: u64,
    /// Lease calls and tokens, as metrics.
    pub(super) metrics: LeaseMetrics,
    /// The rule's blocks and resets, shared with the fleet.
    ops: FleetOps,
}

/// A limiter of the leased mode.
#[derive(Clone)]
pub(super) struct LeaseLimiter(Arc<LeaseRule>);

impl LeaseLimiter {
    pub(super) fn new(
        redis: Arc<Redis>,
        shared: Arc<Shared>,
        rules: &Registry<LeaseRule>,
        rule: &Rule,
    ) -> Result<Self, ConfigError> {
        rule.validate()?;
        if rule.algorithm() != Algorithm::TokenBucket {
            return Err(ConfigError::new(
                "algorithm",
                format!(
                    "{} cannot be leased: the leased mode hands out tokens of a token bucket; use token_bucket(), \
                     or the exact or approximate mode",
                    rule.algorithm().name()
                ),
            )
            .in_rule(rule.name()));
        }
        let gcra = Gcra::token_bucket(rule.quota()).map_err(|e| e.in_rule(rule.name()))?;
        let options = &shared.options;
        let batch = options.batch.min(gcra.capacity());
        let (t_us, _) = gcra.increment(1);
        if u128::from(batch + 1) * u128::from(t_us + 1) + u128::from(gcra.tau().0) > 1 << 52 {
            return Err(ConfigError::new(
                "leased.batch",
                "times the emission interval is beyond what the Redis script counts exactly",
            )
            .in_rule(rule.name()));
        }
        let meter = LeaseMeter {
            capacity: gcra.capacity(),
            return_after_us: options.return_after.as_micros() as u64,
        };
        let store = MemoryBackend::with_clock(redis.local_clock())
            .max_keys(options.max_keys)
            .limiter_for(meter)
            .map_err(|e| e.in_rule(rule.name()))?;
        let local = local_limiter(&redis, rule)?;
        let this = Arc::new(LeaseRule {
            ops: FleetOps::new(&redis, rule),
            metrics: LeaseMetrics::new(rule.name()),
            rule: rule.clone(),
            keys: KeyBase::new(&redis.config.key_prefix, rule.name()),
            redis,
            shared: shared.clone(),
            gcra,
            store,
            local,
            batch,
            first_batch: (batch / 8).max(1),
            max_batch: batch.max((gcra.capacity() / 64).min(MAX_BATCH)),
            refill_us: gcra.increment(batch).0,
        });
        rules.add(&this);
        LeaseRule::schedule(&this);
        Ok(Self(this))
    }
}

impl LeaseRule {
    /// Gives back idle tokens every `return_after` until the rule is
    /// dropped, on the backend's scheduler.
    pub(super) fn schedule(this: &Arc<Self>) {
        let every = this.shared.options.return_after;
        let first = this.redis.local_now() + micros(every);
        let give_backs = Every::new(this, first, every, |rule: Arc<Self>| {
            Box::pin(async move {
                rule.give_back(false).await;
                Going::On
            })
        });
        this.redis.config.scheduler.start(give_backs);
    }

    /// The low-water mark of a key whose next batch is `batch`: the
    /// configured mark, scaled with the batch (rounded up).
    pub(super) fn low_water(&self, batch: u64) -> u64 {
        (self.shared.options.low_water * batch).div_ceil(self.batch)
    }

    /// The batch after `batch` for a key that spent its tokens: twice as
    /// large, from `first_batch` up to the configured batch (a hot key's
    /// larger batch is kept).
    pub(super) fn grow(&self, batch: u64) -> u64 {
        if batch >= self.batch {
            return batch;
        }
        (batch * 2).clamp(self.first_batch, self.batch)
    }

    /// The size of the lease a key takes next: a drained key's is what its
    /// demand here spends (see [`LeaseState::drained_lease`]); any other
    /// key's is its batch, which then grows (see [`LeaseRule::grow`]).
    pub(super) fn next_lease(&self, st: &mut LeaseState, now: u64) -> u64 {
        if st.drained {
            return st.drained_lease(now, self.refill_us);
        }
        let next = st.batch;
        st.batch = self.grow(next);
        next
    }

    /// What the fleet has left for a key, as far as this instance knows: what
    /// the bucket had left at the key's last lease, plus what it has refilled
    /// since (as if no other instance had taken any), plus the tokens held
    /// here (spends since are already taken from them), at most the bucket's
    /// capacity. Tokens other instances hold are not counted, and what they
    /// took since the last lease is not seen.
    pub(super) fn fleet_remaining(&self, st: &LeaseState, now: u64) -> u64 {
        let bucket = GcraState {
            tat_us: st.full_at,
            tat_rem: 0,
        };
        let left = self.gcra.report(&bucket, now, 1, true).remaining;
        (left + st.tokens).min(self.gcra.capacity())
    }

    /// The local part of a check: spend local tokens, or say what to fetch.
    ///
    /// `st.batch` is the size of the key's next batch. A key seen for the
    /// first time leases only its request's cost (a one-off client leaves
    /// nothing to give back); each batch lease of a key that keeps spending
    /// doubles the next one, from an eighth of the configured batch up to
    /// it. A key whose requests outrun its batches (they had to wait for
    /// one) doubles further, up to `max_batch`; the low-water mark scales
    /// with the batch. Tokens given back because the key went idle halve it
    /// (see [`LeaseRule::give_back`]).
    ///
    /// `counted`: the request is already in the key's demand (it waited for
    /// a batch and looks again); each request counts there once.
    pub(super) fn local(&self, key: &Key, cost: u64, counted: bool) -> (Local, u64) {
        let capacity = self.gcra.capacity();
        let period_us = self.gcra.period_us();
        self.store.with_state(key, |st, now| {
            if cost > capacity {
                // Can never fit: denied here, like every other backend does,
                // without asking Redis or touching the key.
                let step = Step {
                    allowed: false,
                    remaining: self.fleet_remaining(st, now),
                    reset_us: st.full_at.saturating_sub(now),
                    retry_after_us: period_us,
                    delay_us: 0,
                };
                return (Local::Decided(step, None), now);
            }
            if !counted {
                st.note_request(now, cost);
            }
            let exhausted = now < st.exhausted_until;
            if st.tokens >= cost {
                let mut step = spend(st, now, cost);
                step.remaining = self.fleet_remaining(st, now);
                let low = st.fetch_below(now, self.low_water(st.batch));
                let prefetch = st.tokens < low && !exhausted && start_fetch(st);
                let next = prefetch.then(|| self.next_lease(st, now));
                return (Local::Decided(step, next), now);
            }
            if exhausted {
                st.denied = st.denied.saturating_add(1);
                let step = Step {
                    allowed: false,
                    remaining: self.fleet_remaining(st, now),
                    reset_us: st.full_at.saturating_sub(now),
                    retry_after_us: st.exhausted_until - now,
                    delay_us: 0,
                };
                return (Local::Decided(step, None), now);
            }
            if let Some(notify) = &st.fetching {
                // Outran the batch on its way: a hot key.
                st.batch = (st.batch.max(self.first_batch) * 2).min(self.max_batch);
                return (Local::Wait(notify.clone().notified_owned()), now);
            }
            // Not enough here: lease this request's whole cost (tokens left
            // here may go to concurrent requests meanwhile) plus the next
            // batch.
            start_fetch(st);
            let next = self.next_lease(st, now);
            (
                Local::Fetch {
                    want: cost + next,
                    batch: true,
                },
                now,
            )
        })
    }

    /// Records a lease's result in the key's state; returns the step for a
    /// request that waited for it (`cost` already counted in `granted`).
    ///
    /// When the bucket could not fill the batch, the key asks again once its
    /// backoff (a second, doubling while the key is over its limit) or a
    /// batch refill has passed, whichever is sooner, and never before its own
    /// cost has refilled: a drained bucket under a flood costs about one
    /// Redis call per batch refill per instance, not one per token, and
    /// requests meanwhile are denied here with the time that takes.
    pub(super) fn record(
        &self,
        key: &Key,
        lease: &Lease,
        want: u64,
        cost: u64,
        batch: bool,
    ) -> Step {
        let Lease {
            granted,
            bucket,
            now,
        } = *lease;
        let bucket = &bucket;
        // Waits are worked out on Redis' clock and kept as instants on the
        // local one (the two need not agree).
        let local_now = self.redis.local_now();
        let full = self.gcra.report(bucket, now, 1, true);
        let full_at = local_now + full.reset_us;
        let short = granted < want;
        // When short: the waits for this request's own cost and for a batch
        // to refill (the most a key waits before asking again).
        let (own, refill) = if short {
            let wait = |n: u64| {
                let n = n.max(1).min(self.gcra.capacity());
                self.gcra
                    .report(bucket, now, n, false)
                    .retry_after_us
                    .max(1)
            };
            (wait(cost), wait(self.batch.max(cost)))
        } else {
            (0, 0)
        };
        let mut waiters = None;
        let mut again_at = 0;
        let step = self
            .store
            .update(key, |st| {
                if batch {
                    waiters = st.fetching.take();
                }
                st.full_at = full_at;
                let backoff = st.after_lease(short, cost, granted);
                if short {
                    // Asked again once its backoff has passed (or a batch
                    // has refilled, if sooner), never before this request's
                    // own cost has refilled.
                    again_at = local_now + own.max(refill.min(backoff));
                    st.exhausted_until = again_at;
                }
                st.tokens += granted;
                if cost == 0 {
                    return Step::default();
                }
                if granted == 0 {
                    return Step {
                        allowed: false,
                        remaining: self.fleet_remaining(st, local_now),
                        reset_us: full.reset_us,
                        retry_after_us: again_at.saturating_sub(local_now).max(1),
                        delay_us: 0,
                    };
                }
                let mut step = spend(st, local_now, cost);
                step.remaining = self.fleet_remaining(st, local_now);
                step
            })
            .unwrap_or(Step {
                // The key was evicted meanwhile: the request still gets its tokens.
                allowed: granted >= cost && granted > 0,
                remaining: (full.remaining + granted.saturating_sub(cost))
                    .min(self.gcra.capacity()),
                reset_us: full.reset_us,
                retry_after_us: u64::from(granted < cost),
                delay_us: 0,
            });
        if let Some(waiters) = waiters {
            waiters.notify_waiters();
        }
        step
    }
}

impl LeaseLimiter {
    fn fleet(&self) -> &FleetOps {
        &self.0.ops
    }
}

impl Limiter for LeaseLimiter {
    fn ops(&self) -> Option<&dyn KeyOps> {
        Some(self)
    }

    fn acquire(&self, key: &Key, cost: u64, _limit: u64) -> Answer<Result<Outcome, Unavailable>> {
        let rule = &self.0;
        let renamed = rule.ops.renamed(key);
        let key = renamed.as_ref().unwrap_or(key);
        match rule.local(key, cost, false) {
            (Local::Decided(step, prefetch), now) => {
                if let Some(batch) = prefetch {
                    rule.prefetch(*key, batch);
                }
                if !step.allowed {
                    rule.shared
                        .counters
                        .local_denials
                        .fetch_add(1, Ordering::Relaxed);
                }
                Answer::Ready(Ok(Outcome::new(step, now)))
            }
            (Local::Fetch { want, batch }, now) => {
                if rule.redis.is_open(rule.group(key)) {
                    if batch {
                        rule.end_fetch(key);
                    }
                    return Answer::Ready(degraded(
                        &rule.redis,
                        &rule.rule,
                        rule.local.as_deref(),
                        key,
                        cost,
                    ));
                }
                if rule.shared.options.when_empty == WhenEmpty::Deny {
                    if batch {
                        // The next batch, or (a new key's) the cost of the
                        // request's retry.
                        rule.prefetch(*key, (want - cost).max(cost));
                    }
                    rule.shared
                        .counters
                        .local_denials
                        .fetch_add(1, Ordering::Relaxed);
                    let step = Step {
                        allowed: false,
                        remaining: 0,
                        reset_us: 0,
                        retry_after_us: 1_000,
                        delay_us: 0,
                    };
                    return Answer::Ready(Ok(Outcome::new(step, now)));
                }
                Answer::Pending(Box::pin(rule.clone().wait(*key, cost, want, batch)))
            }
            (Local::Wait(notified), _) => {
                // Waiting for another request's lease, then perhaps leasing
                // again: bounded from now, so a hung Redis costs at most one
                // command timeout here too.
                let (this, key) = (rule.clone(), *key);
                let patience = rule.redis.config.command_timeout;
                Answer::Pending(Box::pin(async move {
                    match tokio::time::timeout(patience, this.clone().queue(key, cost, notified))
                        .await
                    {
                        Ok(decided) => decided,
                        Err(_) => {
                            degraded(&this.redis, &this.rule, this.local.as_deref(), &key, cost)
                        }
                    }
                }))
            }
        }
    }

    fn is_remote(&self) -> bool {
        // A request the local batch cannot pay for waits for a lease.
        true
    }

    fn refund(&self, key: &Key, cost: u64, outcome: &Outcome) {
        let renamed = self.0.ops.renamed(key);
        let key = renamed.as_ref().unwrap_or(key);
        if outcome.degraded {
            if let Some(local) = &self.0.local {
                local.refund(key, cost, outcome);
            }
            return;
        }
        // Spent tokens go back to the local batch.
        self.0.store.update(key, |st| st.tokens += cost);
    }
}

impl KeyOps for LeaseLimiter {
    /// What this instance can admit for the key now, leasing nothing (a
    /// check of cost 0 could take a batch from the fleet's bucket): the
    /// tokens it holds plus what it would lease, which is what the bucket
    /// had left at the key's last lease here and has refilled since (the
    /// `remaining` a request is told; full for a key not leased here).
    /// While the bucket is known empty it leases nothing: its tokens alone.
    /// While the breaker of the key's node is open it leases nothing
    /// either: its tokens plus what the failure policy's local count has
    /// left (nothing when failing closed), marked degraded.
    fn peek(&self, key: &Key) -> Answer<Result<Outcome, OpError>> {
        let rule = &self.0;
        let key = rule.ops.renamed(key).unwrap_or(*key);
        let now = rule.redis.local_now();
        let down = rule.redis.is_open(rule.group(&key));
        let policy_left = || match rule
            .local
            .as_deref()
            .and_then(|l| l.ops())
            .map(|o| o.peek(&key))
        {
            Some(Answer::Ready(Ok(o))) => o.step.remaining,
            _ => 0,
        };
        let beyond = down.then(policy_left);
        let read = |st: &LeaseState| {
            let reset_us = st.full_at.saturating_sub(now);
            if now < st.exhausted_until {
                return Step {
                    allowed: st.tokens > 0,
                    remaining: st.tokens,
                    reset_us,
                    retry_after_us: if st.tokens > 0 {
                        0
                    } else {
                        st.exhausted_until - now
                    },
                    delay_us: 0,
                };
            }
            let remaining = match beyond {
                None => rule.fleet_remaining(st, now),
                Some(left) => st.tokens.saturating_add(left),
            };
            Step {
                allowed: true,
                remaining,
                reset_us,
                ..Step::default()
            }
        };
        let step = rule
            .store
            .update(&key, |st| read(st))
            .unwrap_or_else(|| read(&LeaseState::default()));
        let mut outcome = Outcome::new(step, now);
        outcome.degraded = down;
        Answer::Ready(Ok(outcome))
    }

    crate::operate::fleet_operations!();
}
