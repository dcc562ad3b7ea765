//! One rule in the approximate mode: the local decision on the request
//! path and the flush schedule.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;

use throttle_fleet_core::algorithm::{FixedWindow, SlidingWindowCounter};
use throttle_fleet_core::backend::{KeyOps, Limiter, Outcome, Unavailable};
use throttle_fleet_core::memory::MemoryLimiter;
use throttle_fleet_core::operate::OpError;
use throttle_fleet_core::{
    Answer, ConfigError, FailurePolicy, Key, Rule, algorithm::Algorithm, clock::Clock,
    memory::MemoryBackend,
};

use super::buckets::{AtomicBuckets, Buckets, Layout, each};
use super::meter::{Asks, Known, SpanMeter, SpanState, Window};
use super::shared::Shared;
use super::turns::Turns;
use super::view::View;
use crate::keys::KeyBase;
use crate::link::Redis;
use crate::metrics::FlushMetrics;
use crate::operate::FleetOps;
use crate::registry::Registry;

/// One rule in the approximate mode.
pub(super) struct ApproxRule {
    pub(super) rule: Rule,
    pub(super) redis: Arc<Redis>,
    pub(super) shared: Arc<Shared>,
    /// The backend's rules, this one among them (retired here when its
    /// limiter is dropped with counts to write).
    pub(super) rules: Arc<Registry<ApproxRule>>,
    pub(super) store: Arc<MemoryLimiter<SpanMeter, Arc<dyn Clock>>>,
    pub(super) interval_us: u64,
    pub(super) limit: u64,
    pub(super) cooldown_us: Option<u64>,
    /// Keys to write at the next flush, one list per bucket (which also
    /// keeps the request path off one lock); each key is listed once until
    /// a flush takes it.
    listed: Box<[Mutex<Vec<Key>>]>,
    /// The buckets (bit `b`) where a key ran out of claim and asked for an
    /// early flush.
    pub(super) asked: AtomicBuckets,
    /// Sequence number of the last flush.
    pub(super) seq: AtomicU32,
    /// When (µs, the rule's clock) a key first asked for an early flush
    /// since the last one left, or 0.
    pub(super) asked_at: AtomicU64,
    /// Wakes the flush schedule (`flush_job.rs`) before the time it set: a
    /// key asked for an early flush, or a bucket went down (its retries
    /// are every probe interval, not at the span end).
    pub(super) wake: Arc<Notify>,
    /// The limiter was dropped with counts still to write.
    pub(super) retired: AtomicBool,
    /// This rule's id in the shared hashes: the backend's instance id and
    /// the rule's number in it, so that two layers (or a new router next to
    /// a retired one) never write each other's entries.
    pub(super) instance: String,
    /// Per bucket, the flush out and the one waiting for it (`flush.rs`).
    pub(super) turns: Box<[Turns]>,
    /// Per bucket, the number of the last flush that took its list, and of
    /// the last whose answer is applied (or that failed): a request that
    /// waits for a claim waits for a flush that took the list after it was
    /// listed.
    pub(super) taken: Box<[AtomicU64]>,
    pub(super) answered: Box<[AtomicU64]>,
    /// Woken when a flush's answers are applied.
    pub(super) answers: Notify,
    /// Flushes and node estimate, as metrics.
    pub(super) metrics: FlushMetrics,
    /// The hashes the rule's keys are spread over, and their slots (whose
    /// node's breaker a decision reads).
    pub(super) layout: Layout,
    /// Which buckets answer, the flushes out, the fleet's size.
    pub(super) view: View,
    /// The rule's blocks and resets, shared with the fleet.
    ops: FleetOps,
}

/// A limiter of the approximate mode. Dropping it (the router went away)
/// retires its rule: the backend keeps it and flushes it until what it
/// counted is in Redis, so a shutdown after the router is gone loses
/// nothing.
pub(super) struct ApproxLimiter(Arc<ApproxRule>);

impl Drop for ApproxLimiter {
    fn drop(&mut self) {
        let rule = &self.0;
        if rule.unwritten() == 0 {
            return;
        }
        rule.retired.store(true, Ordering::Relaxed);
        rule.rules.retire(rule.clone());
        // Flush every bucket now rather than at the span end.
        rule.ask(rule.layout.all(), rule.redis.local_now());
    }
}

impl ApproxLimiter {
    pub(super) fn new(
        redis: Arc<Redis>,
        shared: Arc<Shared>,
        rules: Arc<Registry<ApproxRule>>,
        rule: &Rule,
    ) -> Result<Self, ConfigError> {
        rule.validate()?;
        if rule.tiers().is_some() {
            // The meter, the fleet estimate and the spending cap are the
            // rule's, learnt per rule from its flushes: one rule counted
            // under several limits would share none of them correctly.
            return Err(ConfigError::new(
                "tiers",
                "are not supported by the approximate mode (its fleet estimate and spending cap are per \
                 rule): use the exact or leased mode for a rule with tiers, or one rule per tier",
            )
            .in_rule(rule.name()));
        }
        let q = rule.quota();
        let named = |e: ConfigError| e.in_rule(rule.name());
        let window = match rule.algorithm() {
            Algorithm::FixedWindow => Window::Fixed(FixedWindow::new(q).map_err(named)?),
            Algorithm::SlidingWindowCounter => {
                Window::Sliding(SlidingWindowCounter::new(q).map_err(named)?)
            }
            other => {
                return Err(ConfigError::new(
                    "algorithm",
                    format!(
                        "{} cannot be counted approximately (the approximate mode counts per interval): use \
                         fixed_window() or sliding_window_counter(), the leased mode for a token bucket, or the \
                         exact mode",
                        other.name()
                    ),
                )
                .in_rule(rule.name()));
            }
        };
        let options = &shared.options;
        let interval_us = q.period().as_micros() as u64;
        if interval_us / u64::from(options.spans) < 1_000 {
            return Err(ConfigError::new(
                "approximate.spans",
                format!(
                    "would make spans shorter than 1 ms for a period of {:?}: use fewer spans",
                    q.period()
                ),
            )
            .in_rule(rule.name()));
        }
        if q.limit() > u64::from(u32::MAX) {
            return Err(ConfigError::new(
                "quota.limit",
                format!(
                    "must be at most {} in the approximate mode (got {})",
                    u32::MAX,
                    q.limit()
                ),
            )
            .in_rule(rule.name()));
        }
        let cooldown_us = options.cooldown.map(|c| c.as_micros() as u64);
        let keys = KeyBase::new(&redis.config.key_prefix, rule.name());
        let layout = Layout::new(&keys, redis.is_cluster());
        let count = layout.count() as usize;
        let meter = SpanMeter {
            window,
            limit: q.limit(),
            interval_us,
            spans: u64::from(options.spans),
            strict_when_down: rule.failure_policy() == FailurePolicy::LocalFallback,
            closed_when_down: rule.failure_policy() == FailurePolicy::FailClosed,
            configured_fleet: u64::from(redis.config.fleet_size.max(1)),
        };
        let store = MemoryBackend::with_clock(redis.local_clock())
            .max_keys(options.max_keys)
            .limiter_for(meter)
            .map_err(|e| e.in_rule(rule.name()))?;
        let this = Arc::new(ApproxRule {
            ops: FleetOps::new(&redis, rule),
            metrics: FlushMetrics::new(rule.name()),
            rule: rule.clone(),
            view: View::new(
                layout.count(),
                redis.config.command_timeout.as_micros() as u64,
            ),
            layout,
            redis,
            shared: shared.clone(),
            rules: rules.clone(),
            store,
            interval_us,
            limit: q.limit(),
            cooldown_us,
            listed: per_bucket(count),
            asked: AtomicBuckets::new(0),
            seq: AtomicU32::new(0),
            asked_at: AtomicU64::new(0),
            wake: Arc::new(Notify::new()),
            retired: AtomicBool::new(false),
            instance: format!(
                "{}.{}",
                shared.instance,
                shared.next_rule.fetch_add(1, Ordering::Relaxed)
            ),
            turns: per_bucket(count),
            taken: per_bucket(count),
            answered: per_bucket(count),
            answers: Notify::new(),
        });
        rules.add(&this);
        Ok(Self(this))
    }

    /// The rule, for the backend to schedule its flushes.
    pub(super) fn rule(&self) -> &Arc<ApproxRule> {
        &self.0
    }
}

/// One `T` per bucket.
fn per_bucket<T: Default>(count: usize) -> Box<[T]> {
    (0..count).map(|_| T::default()).collect()
}

impl ApproxRule {
    /// Asks for an early flush of `buckets` (bit `b`), `now`.
    pub(super) fn ask(&self, buckets: Buckets, now: u64) {
        self.asked.fetch_or(buckets, Ordering::Relaxed);
        let _ = self
            .asked_at
            .compare_exchange(0, now.max(1), Ordering::Relaxed, Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// Adds a key to the list of keys to write (its `LISTED` flag was
    /// just set).
    pub(super) fn list(&self, key: &Key) {
        self.listed[self.layout.bucket_of(key) as usize]
            .lock()
            .push(*key);
    }

    /// Whether the last flush of every bucket reached Redis.
    pub(super) fn redis_ok(&self) -> bool {
        !self.view.any_down()
    }

    /// Counts admitted but not yet in Redis.
    pub(super) fn unwritten(&self) -> u64 {
        let mut n = 0;
        self.store.for_each(|_, st| {
            n += u64::from(st.local.saturating_sub(st.flushed)) + u64::from(st.pending);
        });
        n
    }

    /// Takes the set of buckets that asked for an early flush.
    pub(super) fn take_asked(&self) -> Buckets {
        self.asked.swap(0, Ordering::Relaxed)
    }

    /// Takes the listed keys of the buckets in `buckets` (bit `b`), keeping
    /// the lists' memory for the next span.
    pub(super) fn take_listed(&self, buckets: Buckets) -> Vec<Key> {
        let mut keys = Vec::new();
        for b in each(buckets) {
            keys.extend(self.listed[b as usize].lock().drain(..));
        }
        keys
    }

    /// The local decision: no await, no allocation for a known key (a key's
    /// first request in a span appends it to a list that keeps its memory).
    /// A request the fleet has room for but this instance has no claim for
    /// waits for the early flush it asks for.
    pub(super) fn decide(
        self: &Arc<Self>,
        key: &Key,
        cost: u64,
    ) -> Answer<Result<Outcome, Unavailable>> {
        let bucket = self.layout.bucket_of(key);
        // Read before the key is listed: the flush the request waits for is
        // one numbered above this that has written the key.
        let after = self.taken[bucket as usize].load(Ordering::SeqCst);
        let (result, asks) = self.decide_now(key, bucket, cost, false, true);
        if !asks.wait {
            return Answer::Ready(result);
        }
        let this = self.clone();
        let key = *key;
        Answer::Pending(Box::pin(async move {
            this.wait(key, bucket, cost, after).await
        }))
    }

    /// Decides once on the state as it is: `retry` after a wait;
    /// `redis_ok`: false once a wait ran out of time.
    fn decide_now(
        self: &Arc<Self>,
        key: &Key,
        bucket: u64,
        cost: u64,
        retry: bool,
        redis_ok: bool,
    ) -> (Result<Outcome, Unavailable>, Asks) {
        let meter = self.store.meter();
        let (step, now, asks, redis_ok) = self.store.with_state(key, |st, now| {
            // A node known down (its watch, `link/watch.rs`) or a flush
            // that failed or is overdue: the failure policy decides what no
            // claim covers.
            let redis_ok = redis_ok
                && self.view.bucket_ok(bucket, now)
                && !self.redis.is_open(self.layout.slot(bucket));
            let known = Known {
                redis_ok,
                fleet: self.view.fleet.size(),
            };
            let (step, asks) = meter.decide(st, now, cost, known, retry);
            (step, now, asks, redis_ok)
        });
        if asks.dropped > 0 {
            self.shared
                .counters
                .dropped
                .fetch_add(asks.dropped, Ordering::Relaxed);
        }
        if asks.list {
            self.list(key);
        }
        if asks.early && redis_ok {
            self.shared
                .counters
                .early_flushes_asked
                .fetch_add(1, Ordering::Relaxed);
            self.ask(1 << bucket, now);
        }
        if asks.wait {
            self.shared.counters.waited.fetch_add(1, Ordering::Relaxed);
            return (Ok(Outcome::new(step, now)), asks);
        }
        if asks.degraded {
            self.redis.degraded.fetch_add(1, Ordering::Relaxed);
            if meter.closed_when_down {
                return (Err(crate::failure_policy::redis_unavailable()), asks);
            }
        }
        if !step.allowed {
            self.shared
                .counters
                .local_denials
                .fetch_add(1, Ordering::Relaxed);
        }
        let mut outcome = Outcome::new(step, now);
        outcome.degraded = asks.degraded;
        (Ok(outcome), asks)
    }

    /// Waits for the answer of a flush of `bucket` numbered above `after`
    /// that wrote the key (a flush that had taken the list before the key
    /// was listed leaves it asking), at most the command timeout (then the
    /// failure policy decides), and decides again.
    async fn wait(
        self: Arc<Self>,
        key: Key,
        bucket: u64,
        cost: u64,
        after: u64,
    ) -> Result<Outcome, Unavailable> {
        let answered = async {
            loop {
                let notified = self.answers.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if !self.asking(&key) && self.all_answered(bucket, after) {
                    return;
                }
                notified.await;
            }
        };
        // On the scheduler's time, as the flush it waits for.
        let in_time = self
            .redis
            .config
            .scheduler
            .timeout(self.redis.config.command_timeout, answered)
            .await
            .is_some();
        if !in_time {
            // Not written: the request no longer waits for it.
            self.store.update(&key, |st| {
                st.need = st.need.saturating_sub(super::meter::sat32(cost));
            });
        }
        self.decide_now(&key, bucket, cost, true, in_time).0
    }

    /// Completes once a flush of `bucket` numbered above `taken` is over.
    pub(super) async fn answered_after(&self, bucket: u64, taken: u64) {
        loop {
            let notified = self.answers.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.answered[bucket as usize].load(Ordering::SeqCst) > taken {
                return;
            }
            notified.await;
        }
    }

    /// Whether a flush of `bucket` numbered above `after` is over, and no
    /// flush of it is out. Read after the key was found taken (no longer
    /// asking): the flush that took it is then over too. One flush of a
    /// bucket is out at a time (`flush.rs`), so `taken` is at most one above
    /// `answered`. Without the second half, an earlier flush's answer (one
    /// that took the list before the key was listed) ended the wait while
    /// the flush that took the key was still out, and the request was
    /// decided on a claim that did not cover it yet: denied.
    fn all_answered(&self, bucket: u64, after: u64) -> bool {
        let b = bucket as usize;
        let taken = self.taken[b].load(Ordering::SeqCst);
        let answered = self.answered[b].load(Ordering::SeqCst);
        answered > after && answered >= taken
    }

    /// Whether `key` still asks for a write (no flush has taken it since).
    fn asking(&self, key: &Key) -> bool {
        self.store
            .update(key, |st| st.has(super::meter::flag::WANTS))
            .unwrap_or(false)
    }

    /// The flush of `bucket` numbered `number` is over (its answers
    /// applied, or it failed): the requests waiting for it decide again.
    pub(super) fn answered(&self, bucket: u64, number: u64) {
        self.answered[bucket as usize].fetch_max(number, Ordering::SeqCst);
        self.answers.notify_waiters();
    }
}

impl ApproxLimiter {
    fn fleet(&self) -> &FleetOps {
        &self.0.ops
    }
}

impl Limiter for ApproxLimiter {
    fn ops(&self) -> Option<&dyn KeyOps> {
        Some(self)
    }

    #[inline]
    fn acquire(&self, key: &Key, cost: u64, _limit: u64) -> Answer<Result<Outcome, Unavailable>> {
        let renamed = self.0.ops.renamed(key);
        ApproxRule::decide(&self.0, renamed.as_ref().unwrap_or(key), cost)
    }

    fn is_remote(&self) -> bool {
        // A request this instance has no claim for waits for a flush.
        true
    }

    fn refund(&self, key: &Key, cost: u64, outcome: &Outcome) {
        let renamed = self.0.ops.renamed(key);
        let key = renamed.as_ref().unwrap_or(key);
        self.0.store.refund(key, cost, outcome);
    }
}

impl KeyOps for ApproxLimiter {
    /// What this instance's decision would say for a cost of 0, found on a
    /// copy of the key's state: a read lists nothing to flush and asks for
    /// no claim (a check of cost 0 would, and the claims it shaped made
    /// another instance deny a client under its quota). While Redis cannot
    /// be asked for the key (its node's breaker open, or its bucket's last
    /// flush failed or overdue), the read is the decision this instance
    /// makes then (on the fleet's count as last heard, brought forward),
    /// marked degraded: nothing this instance hears is new.
    fn peek(&self, key: &Key) -> Answer<Result<Outcome, OpError>> {
        let rule = &self.0;
        let key = rule.ops.renamed(key).unwrap_or(*key);
        let meter = rule.store.meter();
        let now = rule.redis.local_now();
        let bucket = rule.layout.bucket_of(&key);
        let redis_ok =
            rule.view.bucket_ok(bucket, now) && !rule.redis.is_open(rule.layout.slot(bucket));
        let known = Known {
            redis_ok,
            fleet: rule.view.fleet.size(),
        };
        // A key not tracked here reads as a fresh one would be decided.
        let read = |st: &SpanState| meter.decide(&mut st.clone(), now, 0, known, false).0;
        let step = rule
            .store
            .update(&key, |st| read(st))
            .unwrap_or_else(|| read(&SpanState::default()));
        let mut outcome = Outcome::new(step, now);
        outcome.degraded = !redis_ok;
        Answer::Ready(Ok(outcome))
    }

    crate::operate::fleet_operations!();
}
