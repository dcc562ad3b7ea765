//! Cost of one check, ours side by side with governor's keyed limiter and
//! throttle-kit's.
//!
//! Run with `cargo bench -p throttle-fleet-core --bench check` (about three
//! minutes); add a filter to run part of it, e.g. `-- allowed/2t`.
//!
//! Every scenario is one criterion group holding every subject, so the
//! report lists them together:
//!
//! - `throttle`: `MemoryLimiter::check` (token bucket) on the memory backend,
//!   with the key built from a `u64` in the loop as an extractor would.
//! - `throttle_ruleset`: the same limiter behind `RuleSet::check`, the call
//!   the Tower layer makes (one demand, and the `Decision` with the figures
//!   the headers need).
//! - `governor`: `governor::DefaultKeyedRateLimiter<u64>::check_key` (a
//!   `DashMap` with std's hasher, as `tower_governor` uses it).
//! - `throttle_kit`: `throttle_kit::RateLimiter<InMemoryBackend>::check`
//!   (GCRA on a `DashMap<String, _>`), the key's text rendered at setup.
//!
//! Groups are `allowed/<threads>t/<keys>` (a quota of 1e9 per second, so
//! nothing is denied; 1, 1,000, 10,000 and 1,000,000 keys) and
//! `denied/<threads>t/1` (1 per hour, the key used up during setup, so
//! every check takes the denial path: a denied hot key). Keys are inserted
//! before measuring and visited in one pre-generated pseudo-random order
//! that every subject shares. `<threads>` is 1, then as many threads as
//! `available_parallelism` gives (at least 2): each thread makes the same
//! number of checks from its own place in that order and the time reported
//! is wall time divided by all checks made, the cost of one check when the
//! cores share the work. Its inverse over the 1-thread figure is how much
//! more the cores check together than one alone.
//!
//! The memory backend is given room for two million keys: its default bound
//! is one million, and a table exactly at its bound sweeps and evicts, which
//! is not what these scenarios measure.

mod common;

use std::hint::black_box;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use common::{ORDER_LEN, ORDER_MASK, Subjects};
use criterion::{
    BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime,
};

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

/// The threads of the many-thread groups: one per core, at least two.
fn threads() -> usize {
    thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2)
}

/// Time per check with `n` threads checking at once: each thread makes
/// `iters` checks from its own place in the order; wall time (the slowest
/// thread) over `n * iters`.
fn n_threads(
    group: &mut BenchmarkGroup<'_, WallTime>,
    subjects: &Subjects,
    order: &[u64],
    n: usize,
) {
    for (name, subject) in subjects.each() {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let start = Barrier::new(n);
                let elapsed: Vec<Duration> = thread::scope(|s| {
                    let workers: Vec<_> = (0..n)
                        .map(|t| {
                            let (start, offset) = (&start, t * ORDER_LEN / n);
                            s.spawn(move || {
                                start.wait();
                                let t0 = Instant::now();
                                for i in 0..iters as usize {
                                    let key = order[(offset + i) & ORDER_MASK];
                                    black_box(subject.check(black_box(key)));
                                }
                                t0.elapsed()
                            })
                        })
                        .collect();
                    workers
                        .into_iter()
                        .map(|w| w.join().expect("bench thread panicked"))
                        .collect()
                });
                elapsed.into_iter().max().unwrap_or_default() / n as u32
            });
        });
    }
}

fn allowed(c: &mut Criterion) {
    let n = threads();
    for (label, keys) in [
        ("1", 1u64),
        ("1k", 1_000),
        ("10k", 10_000),
        ("1M", 1_000_000),
    ] {
        let (subjects, order) = common::scenario(keys, false, None);
        let mut group = c.benchmark_group(format!("allowed/1t/{label}"));
        one_thread(&mut group, &subjects, &order);
        group.finish();
        let mut group = c.benchmark_group(format!("allowed/{n}t/{label}"));
        n_threads(&mut group, &subjects, &order, n);
        group.finish();

        for (name, subject) in subjects.each() {
            assert!(subject.check(0), "{name}: a check was denied");
        }
    }
}

fn denied(c: &mut Criterion) {
    let (subjects, order) = common::scenario(1, true, None);
    let mut group = c.benchmark_group("denied/1t/1");
    one_thread(&mut group, &subjects, &order);
    group.finish();
    let n = threads();
    let mut group = c.benchmark_group(format!("denied/{n}t/1"));
    n_threads(&mut group, &subjects, &order, n);
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
