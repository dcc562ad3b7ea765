//! Cost of one check, ours side by side with governor's keyed limiter.
//!
//! Run with `cargo bench -p throttle-core --bench check` (about two
//! minutes); add a filter to run part of it, e.g. `-- allowed/2t`.
//!
//! Every scenario is one criterion group holding every subject, so the
//! report lists them together:
//!
//! - `throttle`: `MemoryLimiter::check` (token bucket) on the memory backend,
//!   with the key built from a `u64` in the loop as an extractor would.
//! - `throttle_ruleset`: the same limiter behind `RuleSet::check`, the call
//!   the Tower layer makes (dynamic dispatch, the `Decision` with its
//!   `Arc<Rule>`).
//! - `governor`: `governor::DefaultKeyedRateLimiter<u64>::check_key` (a
//!   `DashMap` with std's hasher, as `tower_governor` uses it).
//!
//! Groups are `allowed/<threads>t/<keys>` (a quota of 1e9 per second, so
//! nothing is denied) and `denied/<threads>t/1` (1 per hour, the key used up
//! during setup, so every check takes the denial path). Keys are inserted
//! before measuring and visited in one pre-generated pseudo-random order
//! that every subject shares. With two threads, each thread makes the same
//! number of checks from its own place in that order and the time reported
//! is wall time divided by all checks made: the cost of one check when two
//! cores share the work.
//!
//! The memory backend is given room for two million keys: its default bound
//! is one million, and a table exactly at its bound sweeps and evicts, which
//! is not what these scenarios measure.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{
    BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use governor::{DefaultKeyedRateLimiter, RateLimiter};
use throttle_core::algorithm::Gcra;
use throttle_core::{
    Check, Demand, Key, MemoryBackend, MemoryLimiter, Quota, Rule, RuleSet, SystemClock,
};

/// Length of the shared visiting order (a power of two, 1,048,576 entries).
const ORDER_LEN: usize = 1 << 20;
const ORDER_MASK: usize = ORDER_LEN - 1;

/// Room in the memory backend: above the largest key count measured.
const MAX_KEYS: usize = 2_000_000;

/// A rate limiter as the benchmark drives it: one check of one unit for the
/// key numbered `key`, answering whether it was allowed.
trait Subject: Sync {
    fn check(&self, key: u64) -> bool;
}

struct Ours(Arc<MemoryLimiter<Gcra, SystemClock>>);

impl Subject for Ours {
    #[inline]
    fn check(&self, key: u64) -> bool {
        self.0.check(&Key::from(key), 1).step.allowed
    }
}

struct OursRuleSet {
    rules: RuleSet,
    rule: usize,
}

impl Subject for OursRuleSet {
    #[inline]
    fn check(&self, key: u64) -> bool {
        let demand = [Demand {
            rule: self.rule,
            key: Key::from(key),
            cost: 1,
        }];
        match self.rules.check(&demand) {
            Check::Ready(decision) => decision.is_allowed(),
            Check::Pending(_) => unreachable!("the memory backend decides at once"),
        }
    }
}

struct Governor(DefaultKeyedRateLimiter<u64>);

impl Subject for Governor {
    #[inline]
    fn check(&self, key: u64) -> bool {
        self.0.check_key(&key).is_ok()
    }
}

/// The three subjects, all with the same quota.
struct Subjects {
    ours: Ours,
    ruleset: OursRuleSet,
    governor: Governor,
}

impl Subjects {
    fn new(quota: Quota, governor_quota: governor::Quota) -> Self {
        let backend = MemoryBackend::default().max_keys(MAX_KEYS);
        let ours = Ours(
            backend
                .limiter_for(Gcra::token_bucket(quota).expect("valid quota"))
                .expect("valid backend"),
        );
        let mut rules = RuleSet::new();
        let rule = rules
            .bind(Rule::new("bench", quota).token_bucket(), &backend)
            .expect("valid rule");
        Self {
            ours,
            ruleset: OursRuleSet { rules, rule },
            governor: Governor(RateLimiter::keyed(governor_quota)),
        }
    }

    fn each(&self) -> [(&'static str, &dyn Subject); 3] {
        [
            ("throttle", &self.ours),
            ("throttle_ruleset", &self.ruleset),
            ("governor", &self.governor),
        ]
    }
}

/// splitmix64: a small, fixed pseudo-random sequence.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `ORDER_LEN` key numbers below `keys`: shuffled rounds of every key, so
/// every key is visited and the order defeats the prefetcher.
fn visiting_order(keys: u64) -> Vec<u64> {
    let mut rng = 0x5EED_u64 ^ keys;
    let mut order = Vec::with_capacity(ORDER_LEN);
    let mut round: Vec<u64> = (0..keys).collect();
    while order.len() < ORDER_LEN {
        for i in (1..round.len()).rev() {
            let j = (splitmix(&mut rng) % (i as u64 + 1)) as usize;
            round.swap(i, j);
        }
        let take = round.len().min(ORDER_LEN - order.len());
        order.extend_from_slice(&round[..take]);
    }
    order
}

/// Time per check, on one thread.
fn one_thread(group: &mut BenchmarkGroup<'_, WallTime>, subjects: &Subjects, order: &[u64]) {
    for (name, subject) in subjects.each() {
        group.bench_function(name, |b| {
            let mut i = 0usize;
            b.iter(|| {
                let key = order[i & ORDER_MASK];
                i = i.wrapping_add(1);
                black_box(subject.check(black_box(key)))
            });
        });
    }
}

/// Time per check with two threads checking at once: each thread makes
/// `iters` checks; wall time (the slower thread) over `2 * iters`.
fn two_threads(group: &mut BenchmarkGroup<'_, WallTime>, subjects: &Subjects, order: &[u64]) {
    for (name, subject) in subjects.each() {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let start = Barrier::new(2);
                let elapsed = thread::scope(|s| {
                    let workers = [0, ORDER_LEN / 2].map(|offset| {
                        let start = &start;
                        s.spawn(move || {
                            start.wait();
                            let t0 = Instant::now();
                            for i in 0..iters as usize {
                                let key = order[(offset + i) & ORDER_MASK];
                                black_box(subject.check(black_box(key)));
                            }
                            t0.elapsed()
                        })
                    });
                    workers.map(|w| w.join().expect("bench thread panicked"))
                });
                elapsed[0].max(elapsed[1]) / 2
            });
        });
    }
}

fn nonzero(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

fn allowed(c: &mut Criterion) {
    for (label, keys) in [("1", 1u64), ("10k", 10_000), ("1M", 1_000_000)] {
        let subjects = Subjects::new(
            Quota::per_second(1_000_000_000),
            governor::Quota::per_second(nonzero(1_000_000_000)),
        );
        for (name, subject) in subjects.each() {
            for key in 0..keys {
                assert!(subject.check(key), "{name}: setup check was denied");
            }
        }
        let stats = subjects.ours.0.stats();
        assert_eq!(stats.tracked_keys as u64, keys, "{stats:?}");
        assert_eq!(stats.evictions, 0, "{stats:?}");
        let order = visiting_order(keys);

        let mut group = c.benchmark_group(format!("allowed/1t/{label}"));
        one_thread(&mut group, &subjects, &order);
        group.finish();
        let mut group = c.benchmark_group(format!("allowed/2t/{label}"));
        two_threads(&mut group, &subjects, &order);
        group.finish();

        for (name, subject) in subjects.each() {
            assert!(subject.check(0), "{name}: a check was denied");
        }
    }
}

fn denied(c: &mut Criterion) {
    let subjects = Subjects::new(Quota::per_hour(1), governor::Quota::per_hour(nonzero(1)));
    for (name, subject) in subjects.each() {
        assert!(subject.check(0), "{name}: the first check must be allowed");
        assert!(!subject.check(0), "{name}: the second check must be denied");
    }
    let order = visiting_order(1);
    let mut group = c.benchmark_group("denied/1t/1");
    one_thread(&mut group, &subjects, &order);
    group.finish();
    let mut group = c.benchmark_group("denied/2t/1");
    two_threads(&mut group, &subjects, &order);
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = allowed, denied
}
criterion_main!(benches);
