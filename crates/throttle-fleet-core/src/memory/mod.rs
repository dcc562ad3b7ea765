//! The embedded default backend: bounded, sharded, in-process.

mod cell;
mod direct;
mod store;
mod table;

use std::sync::Arc;

use crate::Answer;
use crate::algorithm::Meter;
use crate::algorithm::Step;
use crate::backend::{Backend, KeyOps, Limiter, Outcome, Unavailable};
use crate::operate::{Blocks, OpError};
use crate::rule::MeterVisitor;
use crate::{Clock, ConfigError, Key, Rule, SystemClock};

pub(crate) use direct::Direct;
use store::Store;
pub use table::MemoryStats;

/// Counts in this process's memory. The embedded default: decisions
/// never await or allocate for a key already tracked, and take only the
/// shared lock of one shard of one rule's table; the shard is locked
/// exclusively only to insert or evict a key. A tracked key's state is
/// updated by compare-and-swap on one word where the algorithm's states
/// pack into 64 bits ([`Meter::packs`]: the token and leaky buckets within
/// the ranges [`Gcra`](crate::algorithm::Gcra) states, and concurrency),
/// and under a lock of the key's own otherwise (the windows). So cores
/// checking keys of one shard do not take turns, and a denial of a packed
/// key writes nothing.
///
/// Memory is **bounded**: each rule tracks at most [`max_keys`] keys. When a
/// shard is full, keys whose state has gone back to "never seen" (an expired
/// window, a refilled bucket) are swept out, at most once per eighth of the
/// shard's capacity in inserts; if none is idle, the key closest to idle among
/// a small random sample is evicted (and counted in
/// [`MemoryStats::evictions`]). Nobody has to run a pruning task.
///
/// Counts are per process: with several instances, each enforces its own
/// share. Use a Redis backend for fleet-wide limits.
///
/// [`max_keys`]: MemoryBackend::max_keys
///
/// ```
/// use throttle_fleet_core::{clock::ManualClock, memory::MemoryBackend};
///
/// let backend = MemoryBackend::default().max_keys(10_000);
/// let for_tests = MemoryBackend::with_clock(ManualClock::new(0));
/// # let _ = (backend, for_tests);
/// ```
#[derive(Debug, Clone)]
pub struct MemoryBackend<C = SystemClock> {
    clock: C,
    max_keys: usize,
    shards: usize,
}

impl Default for MemoryBackend<SystemClock> {
    fn default() -> Self {
        Self::with_clock(SystemClock::new())
    }
}

impl MemoryBackend<SystemClock> {
    /// A backend on the system clock, with the default bounds.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<C: Clock + Clone> MemoryBackend<C> {
    /// A backend reading time from `clock`: the Redis modes give it their
    /// scheduler's clock, a simulation a [`ManualClock`](crate::clock::ManualClock).
    pub fn with_clock(clock: C) -> Self {
        let cpus = std::thread::available_parallelism().map_or(4, |n| n.get());
        Self {
            clock,
            max_keys: crate::limits::DEFAULT_MAX_KEYS,
            shards: (cpus * 8).next_power_of_two().clamp(16, 256),
        }
    }

    /// Tracks at most `max_keys` keys per rule (default 1,000,000). Must be
    /// at least the number of shards (a power of two from 16 to 256; see
    /// [`shards`](Self::shards)), checked when a rule is bound.
    #[must_use]
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Splits each rule's table into `shards` independently locked parts
    /// (default: eight per CPU, from 16 to 256). Must be a power of two.
    #[must_use]
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }

    /// A limiter for `meter` directly, without a rule: an algorithm
    /// embedded elsewhere (the Redis modes keep their local state in one,
    /// a simulation runs the algorithms through it).
    pub fn limiter_for<M: Meter>(&self, meter: M) -> Result<Arc<MemoryLimiter<M, C>>, ConfigError> {
        if !self.shards.is_power_of_two() || self.shards == 0 {
            return Err(ConfigError::new(
                "memory.shards",
                format!("must be a power of two (got {})", self.shards),
            ));
        }
        if self.max_keys < self.shards {
            return Err(ConfigError::new(
                "memory.max_keys",
                format!(
                    "must be at least the shard count {} (got {})",
                    self.shards, self.max_keys
                ),
            ));
        }
        Ok(Arc::new(MemoryLimiter {
            store: Store::new(meter, self.shards, self.max_keys, self.clock.now_us()),
            blocks: Arc::new(Blocks::new(Arc::new(self.clock.clone()))),
            clock: self.clock.clone(),
        }))
    }
}

impl<C: Clock + Clone> Backend for MemoryBackend<C> {
    fn limiter(&self, rule: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
        struct Build<'a, C>(&'a MemoryBackend<C>);
        impl<C: Clock + Clone> MeterVisitor for Build<'_, C> {
            type Output = Result<Arc<dyn Limiter>, ConfigError>;
            fn visit<M: Meter>(self, meter: M) -> Self::Output {
                Ok(self.0.limiter_for(meter)? as Arc<dyn Limiter>)
            }
        }
        rule.with_meter(Build(self))?
            .map_err(|e| e.in_rule(rule.name()))
    }
}

/// One rule's counts in memory: a [`Meter`] over a bounded, sharded table.
#[derive(Debug)]
pub struct MemoryLimiter<M: Meter, C> {
    store: Store<M>,
    /// The rule's blocked keys, on this backend's clock.
    blocks: Arc<Blocks>,
    clock: C,
}

impl<M: Meter, C: Clock> MemoryLimiter<M, C> {
    /// Counters: keys tracked now, evictions so far.
    pub fn stats(&self) -> MemoryStats {
        self.store.stats()
    }

    /// Runs `f` on `key`'s state, tracking the key first if needed (for
    /// backends that keep their own per-key state in this table).
    pub fn with_state<R>(&self, key: &Key, f: impl FnOnce(&mut M::State, u64) -> R) -> R {
        let now = self.clock.now_us();
        self.store.with_state(key, now, |st| f(st, now))
    }

    /// Runs `f` on `key`'s state if the key is tracked.
    pub fn update<R>(&self, key: &Key, f: impl FnOnce(&mut M::State) -> R) -> Option<R> {
        self.store.update(key, f)
    }

    /// Visits every tracked key and its state, one shard at a time (other
    /// shards stay usable meanwhile).
    pub fn for_each(&self, f: impl FnMut(&Key, &mut M::State)) {
        self.store.for_each(f);
    }

    /// The meter.
    pub fn meter(&self) -> &M {
        self.store.meter()
    }

    /// Checks and takes `cost` for `key`, synchronously.
    #[inline]
    pub fn check(&self, key: &Key, cost: u64) -> Outcome {
        let now = self.clock.now_us();
        Outcome::new(self.store.acquire(key, now, cost, u64::MAX), now)
    }
}

impl<M: Meter, C: Clock + Clone> Limiter for MemoryLimiter<M, C> {
    #[inline]
    fn acquire(&self, key: &Key, cost: u64, limit: u64) -> Answer<Result<Outcome, Unavailable>> {
        if !M::TAKES_A_LIMIT {
            return Answer::Ready(Ok(self.check(key, cost)));
        }
        let now = self.clock.now_us();
        let step = self.store.acquire(key, now, cost, limit);
        Answer::Ready(Ok(Outcome::new(step, now)))
    }

    fn refund(&self, key: &Key, cost: u64, outcome: &Outcome) {
        self.store.refund(key, outcome.at_us, cost);
    }

    fn ops(&self) -> Option<&dyn KeyOps> {
        Some(self)
    }

    fn requota(&self, rule: &Rule) -> Option<Arc<dyn Limiter>> {
        struct Same<'a, M: Meter, C>(&'a MemoryLimiter<M, C>);
        impl<M: Meter, C: Clock + Clone> MeterVisitor for Same<'_, M, C> {
            type Output = Option<Arc<dyn Limiter>>;
            fn visit<N: Meter>(self, meter: N) -> Self::Output {
                // The same algorithm builds the same meter type: the table
                // carries over; another algorithm cannot read its states.
                let meter: Box<dyn std::any::Any> = Box::new(meter);
                let meter = *meter.downcast::<M>().ok()?;
                Some(Arc::new(MemoryLimiter {
                    store: self.0.store.with_meter(meter)?,
                    blocks: self.0.blocks.clone(),
                    clock: self.0.clock.clone(),
                }))
            }
        }
        rule.with_meter(Same(self)).ok().flatten()
    }
}

impl<M: Meter, C: Clock + Clone> KeyOps for MemoryLimiter<M, C> {
    /// A key not tracked is a fresh one: reading it tracks nothing.
    fn peek(&self, key: &Key) -> Answer<Result<Outcome, OpError>> {
        let now = self.clock.now_us();
        let meter = self.store.meter();
        let step = self
            .store
            .update(key, |st| meter.acquire(st, now, 0))
            .unwrap_or(Step {
                allowed: true,
                remaining: meter.capacity(),
                ..Step::default()
            });
        Answer::Ready(Ok(Outcome::new(step, now)))
    }

    fn reset(&self, key: &Key) -> Answer<Result<(), OpError>> {
        self.store.update(key, |st| *st = M::State::default());
        Answer::Ready(Ok(()))
    }

    fn blocks(&self) -> Option<Arc<Blocks>> {
        Some(self.blocks.clone())
    }
}
