//! The simulator that the laboratory shows: its traffic patterns against the
//! five algorithms, each run through the memory backend on a manual clock.
//!
//! Each bound is checked with equality where the algorithm reaches it, so a
//! change that lets one more request through (or one fewer) fails here, and
//! each algorithm's decisions are checked request by request against its
//! definition, computed independently from the timeline alone.

use throttle_fleet_core::algorithm::{FixedWindow, Gcra, SlidingWindowCounter, SlidingWindowLog};
use throttle_fleet_core::{Quota, algorithm::Algorithm};
use throttle_fleet_test_support::sim::{self, Custom, Event, Pattern, Run, Simulation};

const MS: u64 = 1_000;
const S: u64 = 1_000_000;

fn simulate(algorithm: Algorithm, quota: Quota, events: &[Event]) -> Simulation {
    sim::simulate(algorithm, quota, events).unwrap()
}

/// Cost admitted in `[from, to)` (by arrival).
fn admitted_in(run: &Run, from: u64, to: u64) -> u64 {
    run.steps
        .iter()
        .filter(|(e, s)| s.allowed && (from..to).contains(&e.at_us))
        .map(|(e, _)| e.cost)
        .sum()
}

/// Quotas with limits from 1 to 100 and periods from 1 s to an hour, some
/// with a burst of their own (dropped by the window algorithms).
fn quotas() -> Vec<Quota> {
    vec![
        Quota::per_minute(100),
        Quota::per_second(10),
        Quota::per_second(7).with_burst(20),
        Quota::per_second(1),
        Quota::per_hour(60).with_burst(5),
        Quota::per_second(4).with_burst(1),
    ]
}

// ---------------------------------------------------------------------------
// The window-edge burst
// ---------------------------------------------------------------------------

#[test]
fn edge_burst_passes_twice_the_quota_through_a_fixed_window_within_two_seconds() {
    // The seed's attack: 100 in the second before 10:01:00, 100 in the
    // second after, against 100 per minute.
    let q = Quota::per_minute(100);
    let boundary = 60 * S;
    let attack = sim::edge_burst(boundary, 100, S);

    let fw = simulate(Algorithm::FixedWindow, q, &attack);
    assert_eq!(fw.summary.admitted, 200);
    assert_eq!(fw.run.max_in_any_window(2 * S), 200, "2x the quota in 2 s");
    assert_eq!(fw.summary.worst_window, 200);
    assert_eq!(fw.summary.worst_window_start_us, boundary - S);
    assert_eq!(fw.run.max_in_aligned_window(60 * S), 100);
    assert_eq!(fw.summary.first_denial_us, None);

    let log = simulate(Algorithm::SlidingWindowLog, q, &attack);
    assert_eq!(log.summary.admitted, 100);
    assert_eq!(
        log.summary.worst_window, 100,
        "the log: never over the quota"
    );
    assert_eq!(admitted_in(&log.run, boundary, 2 * boundary), 0);
    assert_eq!(log.summary.first_denial_us, Some(boundary));

    // The lab's own edge burst, for every quota: the same, to the request.
    for q in quotas() {
        let (limit, p) = (q.limit(), q.period().as_micros() as u64);
        let attack = Pattern::EdgeBurst.events(q);
        assert_eq!(attack.len() as u64, 2 * limit);
        let fw = simulate(Algorithm::FixedWindow, q, &attack);
        assert_eq!(fw.run.max_in_any_window(2 * S), 2 * limit, "{q:?}");
        assert_eq!(fw.summary.worst_window, 2 * limit, "{q:?}");
        let log = simulate(Algorithm::SlidingWindowLog, q, &attack);
        assert_eq!(log.summary.worst_window, limit, "{q:?}");
        assert_eq!(log.summary.first_denial_us, Some(p), "{q:?}");
    }
}

#[test]
fn sliding_counter_admits_at_most_one_more_than_the_quota_at_the_boundary() {
    for q in quotas() {
        let limit = q.limit();
        let swc = simulate(
            Algorithm::SlidingWindowCounter,
            q,
            &Pattern::EdgeBurst.events(q),
        );
        // Just after the boundary the previous window's `limit` still
        // weighs `limit - 1`: one request passes, the rest wait.
        let expected = if limit == 1 { 1 } else { limit + 1 };
        assert_eq!(swc.summary.worst_window, expected, "{q:?}");
        assert_eq!(
            swc.run.max_in_aligned_window(q.period().as_micros() as u64),
            limit
        );
    }

    // Spread the second half longer and the estimate lets through what its
    // docs bound: `limit + ceil(prev * elapsed / period)`, here 100 + 2.
    let q = Quota::per_minute(100);
    let swc = simulate(
        Algorithm::SlidingWindowCounter,
        q,
        &sim::edge_burst(60 * S, 100, S),
    );
    assert_eq!(swc.summary.worst_window, 102);
}

// ---------------------------------------------------------------------------
// Token bucket, steady traffic
// ---------------------------------------------------------------------------

#[test]
fn token_bucket_admits_its_burst_and_then_its_refill_rate() {
    // A bucket of 30, refilled at 10 per second. 50 requests at once, then
    // 100 per second for five seconds.
    let q = Quota::per_second(10).with_burst(30);
    let mut events = vec![Event { at_us: 0, cost: 1 }; 50];
    events.extend(
        Custom {
            start_us: 0,
            duration_us: 5 * S,
            rate_per_s: 100.0,
            burst: 1,
            jitter_us: 0,
            seed: 0,
        }
        .events(),
    );
    let tb = simulate(Algorithm::TokenBucket, q, &events);
    assert_eq!(admitted_in(&tb.run, 0, 1), 30, "the burst, at once");
    assert_eq!(tb.summary.first_denial_us, Some(0));
    // Then one token every 100 ms: 9 more in the first second, 10 in each
    // of the next four.
    assert_eq!(admitted_in(&tb.run, 1, S), 9);
    for k in 1..5 {
        assert_eq!(admitted_in(&tb.run, k * S, (k + 1) * S), 10, "second {k}");
    }
    assert_eq!(tb.summary.admitted, 79);
    // Requests 100 ms apart, never two within one emission interval.
    let times: Vec<u64> = tb
        .run
        .admitted()
        .map(|e| e.at_us)
        .filter(|&t| t > 0)
        .collect();
    assert!(
        times.windows(2).all(|w| w[1] - w[0] == 100 * MS),
        "{times:?}"
    );
}

#[test]
fn steady_traffic_at_the_quota_rate_passes_all_but_one_request_at_the_counters_boundary() {
    for q in quotas() {
        let events = Pattern::Steady.events(q);
        let p = q.period().as_micros() as u64;
        for algorithm in Algorithm::ALL {
            let s = simulate(algorithm, q, &events).summary;
            assert_eq!(s.requests, 3 * q.limit());
            assert_eq!(s.worst_window, q.limit(), "{q:?} {algorithm:?}");
            if algorithm == Algorithm::SlidingWindowCounter {
                // The estimate counts the previous window as evenly spread
                // up to the boundary itself: the request that lands on it
                // is one too many.
                assert_eq!(s.denied, 1, "{q:?}");
                assert_eq!(s.first_denial_us, Some(p), "{q:?}");
            } else {
                assert_eq!(s.denied, 0, "{q:?} {algorithm:?}");
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Bot swarms, against each algorithm's definition
// ---------------------------------------------------------------------------

/// Every decision of `sim` against a replay of the definition, computed from
/// the timeline: `allows(now, admitted so far, cost)`.
fn check_definition(sim: &Simulation, allows: impl Fn(u64, &[Event], u64) -> bool) {
    let mut admitted = Vec::new();
    for (i, (e, step)) in sim.run.steps.iter().enumerate() {
        let expected = allows(e.at_us, &admitted, e.cost);
        assert_eq!(
            step.allowed, expected,
            "{:?} {:?}: request {i} at {} us",
            sim.algorithm, sim.quota, e.at_us
        );
        if step.allowed {
            admitted.push(*e);
        }
    }
}

fn sum(events: &[Event], keep: impl Fn(u64) -> bool) -> u64 {
    events
        .iter()
        .filter(|e| keep(e.at_us))
        .map(|e| e.cost)
        .sum()
}

/// A bucket of `burst` units refilled continuously at `limit` per period:
/// the token bucket's definition. In units of `1 / period`, so exact.
fn bucket_allows(quota: Quota) -> impl Fn(u64, &[Event], u64) -> bool {
    let (limit, p, burst) = (
        u128::from(quota.limit()),
        quota.period().as_micros(),
        u128::from(quota.burst()),
    );
    move |now, admitted, cost| {
        let mut level = 0u128; // units taken, times `period`
        let mut last = 0u64;
        for e in admitted {
            level = level.saturating_sub(u128::from(e.at_us - last) * limit);
            level += u128::from(e.cost) * p;
            last = e.at_us;
        }
        level = level.saturating_sub(u128::from(now - last) * limit);
        level + u128::from(cost) * p <= burst * p
    }
}

#[test]
fn a_bot_swarm_gets_what_each_definition_allows_and_no_more() {
    for q in quotas() {
        let mut tb_worst = 0;
        for seed in 1..=4 {
            let swarm = Pattern::BotSwarm { seed }.events(q);
            let (limit, p) = (q.limit(), q.period().as_micros() as u64);
            assert_eq!(swarm.len() as u64, 20 * limit, "ten times the rate");

            // Fixed window: `limit` per aligned window, no more, no less.
            let fw = simulate(Algorithm::FixedWindow, q, &swarm);
            check_definition(&fw, |now, admitted, cost| {
                sum(admitted, |t| t / p == now / p) + cost <= limit
            });
            assert_eq!(fw.summary.admitted, 2 * limit, "{q:?} seed {seed}");

            // Sliding log: `limit` in the period before every request.
            let log = simulate(Algorithm::SlidingWindowLog, q, &swarm);
            check_definition(&log, |now, admitted, cost| {
                sum(admitted, |t| t + p > now) + cost <= limit
            });
            assert_eq!(log.summary.worst_window, limit, "{q:?} seed {seed}");

            // Sliding counter: the previous window weighed by the part of it
            // still inside the sliding window, in doubles, rounded down.
            let swc = simulate(Algorithm::SlidingWindowCounter, q, &swarm);
            check_definition(&swc, |now, admitted, cost| {
                let w = now / p;
                let prev = sum(admitted, |t| w > 0 && t / p == w - 1);
                let elapsed = now - w * p;
                let weight = ((prev as f64) * ((p - elapsed) as f64) / (p as f64)).floor() as u64;
                weight + sum(admitted, |t| t / p == w) + cost <= limit
            });
            assert_eq!(swc.run.max_in_aligned_window(p), limit, "{q:?} seed {seed}");

            // Token bucket: the bucket, and so at most `burst + limit - 1`
            // in any period (the burst at once, then one per interval).
            let tb = simulate(Algorithm::TokenBucket, q, &swarm);
            check_definition(&tb, bucket_allows(q));
            assert!(
                tb.summary.worst_window < q.burst() + limit,
                "{q:?} seed {seed}: {:?}",
                tb.summary
            );
            tb_worst = tb_worst.max(tb.summary.worst_window);

            // Leaky bucket: the same admissions; admitted requests leave one
            // emission interval apart, with at most `burst` waiting.
            let lb = simulate(Algorithm::LeakyBucket, q, &swarm);
            check_definition(&lb, bucket_allows(q));
            let interval = p / limit;
            let leaves: Vec<u64> = lb.run.admitted().map(|e| e.at_us).collect();
            assert!(
                leaves.windows(2).all(|w| w[1] - w[0] >= interval),
                "{q:?} seed {seed}: closer than {interval} us"
            );
            let arrivals = lb.run.steps.iter().filter(|(_, s)| s.allowed);
            for (k, (e, _)) in arrivals.enumerate() {
                // This one and those admitted before it that have not left.
                let waiting = leaves[..=k].iter().filter(|&&t| t > e.at_us).count() as u64;
                assert!(
                    waiting <= q.burst(),
                    "{q:?} seed {seed}: {waiting} waiting at {e:?}"
                );
            }
            assert_eq!(lb.summary.worst_window, limit, "{q:?} seed {seed}");
        }
        // A swarm that empties the bucket in one volley gets the bound.
        assert_eq!(tb_worst, q.burst() + q.limit() - 1, "{q:?}");
    }
}

// ---------------------------------------------------------------------------
// Determinism
// ---------------------------------------------------------------------------

#[test]
fn the_same_seed_gives_the_same_timeline_and_another_seed_another() {
    let q = Quota::per_second(20).with_burst(40);
    let custom = |seed| Custom {
        start_us: 0,
        duration_us: 3 * S,
        rate_per_s: 150.0,
        burst: 7,
        jitter_us: 50 * MS,
        seed,
    };
    for (a, b) in [
        (
            Pattern::BotSwarm { seed: 42 },
            Pattern::BotSwarm { seed: 43 },
        ),
        (Pattern::Custom(custom(42)), Pattern::Custom(custom(43))),
    ] {
        let events = a.events(q);
        assert_eq!(events, a.events(q));
        assert_ne!(events, b.events(q), "{a:?}: the seed must matter");
        for algorithm in Algorithm::ALL {
            let first = simulate(algorithm, q, &events);
            let again = simulate(algorithm, q, &a.events(q));
            assert_eq!(first.run.steps, again.run.steps, "{algorithm:?}");
            assert_eq!(first.summary, again.summary);
        }
    }
}

#[test]
fn custom_traffic_has_its_rate_bursts_and_jitter() {
    let c = Custom {
        start_us: 5 * S,
        duration_us: 2 * S,
        rate_per_s: 45.0,
        burst: 4,
        jitter_us: 100 * MS,
        seed: 9,
    };
    let events = c.events();
    assert_eq!((c.count(), events.len()), (90, 90));
    assert!(events.iter().all(|e| (5 * S..7 * S).contains(&e.at_us)));
    // 23 instants: 22 bursts of four and one of two.
    let mut instants: Vec<(u64, usize)> = Vec::new();
    for e in &events {
        match instants.last_mut() {
            Some((t, n)) if *t == e.at_us => *n += 1,
            _ => instants.push((e.at_us, 1)),
        }
    }
    assert_eq!(instants.len(), 23);
    assert_eq!(instants.iter().filter(|(_, n)| *n == 4).count(), 22);
    // Jittered: not on the even slots.
    let slot = |b: u64| 5 * S + b * 2 * S / 23;
    assert!(instants.iter().zip(0..).any(|(&(t, _), b)| t != slot(b)));
    // Without jitter, exactly on them.
    let even = Custom { jitter_us: 0, ..c }.events();
    assert_eq!(even[0].at_us, slot(0));
    assert_eq!(even[89].at_us, slot(22));
    // Nothing for a rate that is no rate.
    for rate in [0.0, -1.0, f64::NAN] {
        assert!(
            Custom {
                rate_per_s: rate,
                ..c
            }
            .events()
            .is_empty()
        );
    }
}

// Moved from the core crate's algorithm tests with the simulator.

const T0: u64 = 1_699_999_200 * S;

#[test]
fn fixed_window_admits_twice_the_limit_across_a_boundary_and_the_others_do_not() {
    let q = Quota::per_minute(100);
    let boundary = T0 + 60 * S;
    // 100 in the last 10 ms of a window, 100 in the first 10 ms of the next.
    let timeline = sim::edge_burst(boundary, 100, 10 * MS);

    let fw = sim::run(&FixedWindow::new(q).unwrap(), &timeline);
    assert_eq!(fw.admitted_cost(), 200);
    assert_eq!(fw.max_in_any_window(20 * MS), 200, "2x the limit in 20 ms");
    assert_eq!(fw.max_in_aligned_window(60 * S), 100);

    let log = sim::run(&SlidingWindowLog::new(q).unwrap(), &timeline);
    assert_eq!(log.admitted_cost(), 100);
    assert_eq!(log.max_in_any_window(60 * S), 100);
    assert!(log.admitted().all(|e| e.at_us < boundary));

    // One token every 600 ms: nothing refills during the burst.
    let tb = sim::run(&Gcra::token_bucket(q).unwrap(), &timeline);
    assert_eq!(tb.admitted_cost(), 100);
    assert_eq!(tb.max_in_any_window(60 * S), 100);

    // The counter weighs the previous 100 as 99 a microsecond past the
    // boundary, so one more passes: 101 within a sliding minute.
    let swc = sim::run(&SlidingWindowCounter::new(q).unwrap(), &timeline);
    assert_eq!(swc.admitted_cost(), 101);
    assert_eq!(swc.max_in_any_window(60 * S), 101);
    assert_eq!(swc.max_in_aligned_window(60 * S), 100);
}

#[test]
fn sim_windows_are_half_open_and_weighted_by_cost() {
    let run = sim::run(
        &FixedWindow::new(Quota::per_second(10)).unwrap(),
        &[
            sim::Event { at_us: T0, cost: 2 },
            sim::Event {
                at_us: T0 + S - 1,
                cost: 3,
            },
            sim::Event {
                at_us: T0 + S,
                cost: 4,
            },
            sim::Event {
                at_us: T0 + 2 * S,
                cost: 1,
            },
        ],
    );
    assert_eq!(run.admitted_cost(), 10);
    // [t, t + 1 s) holds 2 + 3 or 3 + 4, never 2 + 3 + 4.
    assert_eq!(run.max_in_any_window(S), 7);
    assert_eq!(run.max_in_any_window(S + 1), 9);
    assert_eq!(run.max_in_aligned_window(S), 5);
    assert_eq!(run.max_in_aligned_window(2 * S), 9);
    assert_eq!(sim::steady(T0, 4, S).last().unwrap().at_us, T0 + 750 * MS);
    assert_eq!(sim::Run::default().max_in_any_window(S), 0);
}
