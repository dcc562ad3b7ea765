//! The approximate mode under the traffic real load balancers produce: the
//! fleet scenario suite (`tests/support/fleet.rs`) with its goals asserted.
//!
//! Short versions run in CI; `THROTTLE_FLEET_LONG=1 cargo test -p
//! throttle-fleet-redis --test scenarios -- --nocapture --test-threads 1` runs the
//! long ones and prints the table that BENCHMARKS.md records.

mod support;

use std::time::Duration;

use support::fleet::{self, Event, Report, Req, Setup, long, merge, round_robin, run, shifted};
use throttle_fleet_test_support::Rng;

const TEN_S: Duration = Duration::from_secs(10);
const MINUTE: Duration = Duration::from_secs(60);

fn intervals(short: u64, long_: u64) -> f64 {
    (if long() { long_ } else { short }) as f64
}

/// Prints the report's row and checks what every scenario must hold: never
/// above the published worst case, at most `worst` times the quota in any
/// aligned interval, false denials at most `false_share`.
fn check(r: &Report, worst: f64, false_share: f64) {
    check_with(r, worst, false_share, true);
}

fn check_with(r: &Report, worst: f64, false_share: f64, bounded: bool) {
    println!("{}", r.row());
    println!(
        "  per interval: {:?} (reference {:?})",
        r.per_interval, r.reference_per_interval
    );
    assert!(
        !bounded || r.worst_interval() <= r.bound,
        "{}: {} admitted in an interval, above the published worst case {}",
        r.name,
        r.worst_interval(),
        r.bound
    );
    assert!(
        r.worst_ratio() <= worst,
        "{}: {:.3}x the quota in an interval (goal {worst}x): {:?}",
        r.name,
        r.worst_ratio(),
        r.per_interval
    );
    assert!(
        r.shortfall_share() <= false_share,
        "{}: {:.2}% of the reference's admissions not given (goal {:.0}%)",
        r.name,
        100.0 * r.shortfall_share(),
        100.0 * false_share
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uniform_load_at_three_times_the_quota() {
    let setup = Setup::new("uniform 3x", "round-robin, even in time", 1_000, TEN_S);
    let secs = 10.0 * intervals(6, 30);
    let reqs = round_robin(300.0, secs, 4, 1);
    let r = run(&setup, &[], &reqs).await;
    check(&r, 1.05, 0.03);
    // The goal is 0.024 (limitador's figure, at 1.23x the quota) and no
    // more than the 0.026 measured before requests could wait for a claim;
    // measured 0.033 now, at 1.003x. Not met; this catches a regression
    // past 0.036.
    assert!(
        r.commands_per_check() <= 0.036,
        "{:.4} Redis commands per check (measured 0.033, goal 0.024)",
        r.commands_per_check()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uniform_load_sliding_window_counter() {
    let mut setup = Setup::new(
        "uniform 3x, sliding counter",
        "round-robin, even in time",
        1_000,
        TEN_S,
    );
    setup.sliding = true;
    let reqs = round_robin(300.0, 10.0 * intervals(6, 30), 4, 1);
    let r = run(&setup, &[], &reqs).await;
    // Not met for the sliding counter: claims are sized at the flush, while
    // its room grows continuously, so it gives about 5% less than the
    // reference and flushes early once per span (the guide's Redis chapter, BENCHMARKS.md).
    check(&r, 1.05, 0.06);
    // The sliding counter's own bound: at most the quota in any window the
    // reference would have allowed.
    assert!(r.worst_sliding <= r.reference_worst_sliding + r.bound - r.limit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_load_zipf_over_instances() {
    let setup = Setup::new("zipf 2x", "Poisson, instance ~ Zipf(s=1)", 1_000, TEN_S);
    let mut rng = Rng::new(11);
    let reqs = fleet::zipf(200.0, 10.0 * intervals(6, 30), 4, 1.0, 1, &mut rng);
    let r = run(&setup, &[], &reqs).await;
    check(&r, 1.15, 0.03);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_traffic_that_moves_between_instances() {
    let setup = Setup::new(
        "sticky, moving",
        "Poisson 3x, one instance at a time, moves every 2 s on average",
        1_000,
        TEN_S,
    );
    let mut rng = Rng::new(12);
    let reqs = fleet::sticky_moving(300.0, 10.0 * intervals(6, 30), 4, 2e6, 1, &mut rng);
    let r = run(&setup, &[], &reqs).await;
    check(&r, 1.15, 0.03);
}

/// Other clients the fleet served for a while (round-robin, one request
/// every two seconds each), so that it has learnt its size.
fn background(clients: u64, secs: f64) -> Vec<Req> {
    merge(
        (0..clients)
            .map(|c| shifted(round_robin(0.5, secs, 4, 1_000 + c), c * 97_000))
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_each_over_a_small_quota() {
    let setup = Setup::new(
        "many small clients",
        "50 clients, each one request every 2 s round-robin (3x), quota 10 per minute",
        10,
        MINUTE,
    );
    let secs = 60.0 * intervals(3, 10);
    let reqs = merge(
        (0..50)
            .map(|c| shifted(round_robin(0.5, secs, 4, 100 + c), c * 37_000))
            .collect(),
    );
    let r = run(&setup, &[], &reqs).await;
    check(&r, 1.15, 0.03);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_on_a_brand_new_key() {
    let setup = Setup::new(
        "new key, burst",
        "100 requests round-robin within 1 s, quota 10 per minute",
        10,
        MINUTE,
    );
    let warmup = background(20, 30.0);
    // At the start of an interval and in the middle of one.
    for (at, key) in [(0, 1), (20_000_000, 2)] {
        let reqs = shifted(round_robin(100.0, 1.0, 4, key), at);
        let r = run(&setup, &warmup, &reqs).await;
        check(&r, 1.2, 1.0);
        assert!(r.admitted <= 12, "{} admitted of 100", r.admitted);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_on_a_long_lived_key_seen_alone() {
    let setup = Setup::new(
        "long-lived key, burst",
        "0.5x on one instance for 2 intervals, then 3x the quota in 1 s over all",
        1_000,
        TEN_S,
    );
    let quiet = round_robin(50.0, 23.0, 1, 1);
    let burst = shifted(round_robin(3_000.0, 1.0, 4, 1), 23_000_000);
    let reqs = merge(vec![quiet, burst]);
    let r = run(&setup, &[], &reqs).await;
    check(&r, 1.15, 0.03);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_churn_with_quotas_below_the_fleet_size() {
    let setup = Setup::new(
        "key churn",
        "10,000 new keys/s, 3 requests each on 3 instances within 0.2 s, quota 5/min",
        5,
        MINUTE,
    );
    let secs = if long() { 10 } else { 2 };
    let mut rng = Rng::new(13);
    let mut reqs = Vec::new();
    for k in 0..secs * 10_000 {
        let t = k * 100;
        let first = rng.below(4) as usize;
        for j in 0..3 {
            reqs.push(Req {
                at_us: t + rng.below(200_000),
                instance: (first + j) % 4,
                key: 10_000_000 + k,
            });
        }
    }
    reqs.sort_by_key(|r| r.at_us);
    let r = run(&setup, &[], &reqs).await;
    check(&r, 1.0, 0.03);
    println!(
        "  {} keys: {:.0} Redis commands per second, {:.5} per check",
        secs * 10_000,
        r.commands_per_second(),
        r.commands_per_check()
    );
    // With a quota of less than four requests per instance and span a new
    // key has no credit: its first request on each instance waits for an
    // early flush (0.0085 commands per check when it was admitted on
    // credit, at up to (instances - 1) requests over the quota). Early
    // flushes are batched per bucket and gap: about 0.28 calls per check
    // (three commands each), not one per request.
    assert!(
        r.commands_per_check() <= 0.9,
        "{:.4} commands per check (measured 0.85)",
        r.commands_per_check()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_churn_each_new_key_bursting_over_its_quota() {
    let setup = Setup::new(
        "key churn, bursts",
        "1,000 new keys/s, 8 requests each round-robin within 0.1 s, quota 5/min",
        5,
        MINUTE,
    );
    let mut reqs = Vec::new();
    for k in 0..2_000u64 {
        for j in 0..8 {
            reqs.push(Req {
                at_us: k * 1_000 + j * 12_500,
                instance: ((k + j) % 4) as usize,
                key: 20_000_000 + k,
            });
        }
    }
    reqs.sort_by_key(|r| r.at_us);
    let r = run(&setup, &[], &reqs).await;
    // Per key, not per interval: the table counts all keys together.
    println!("{}", r.row());
    let per_key = r.admitted as f64 / 2_000.0;
    println!(
        "  admitted per key {per_key:.3} (quota 5, bound {})",
        setup.bound()
    );
    // A key's burst that outruns the claims of the instances it hits ends
    // on the overdraft: the quota plus one at most (the goal for quotas
    // below 100, and the published bound here).
    assert!(per_key <= 6.0, "{per_key} per key");
    assert!(r.shortfall_share() <= 0.03, "{}", r.shortfall_share());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_ramping_up_and_down() {
    let setup = Setup::new(
        "ramp",
        "Poisson, 0.5x to 4x and back over 8 intervals, random instance",
        1_000,
        TEN_S,
    );
    let mut rng = Rng::new(14);
    let mut reqs = Vec::new();
    let mut t = 0u64;
    let end = 80_000_000u64;
    while t < end {
        let x = t as f64 / end as f64;
        let load = 0.5 + 3.5 * (1.0 - (2.0 * x - 1.0).abs());
        t += rng.exp(1e6 / (100.0 * load)).max(1);
        reqs.push(Req {
            at_us: t,
            instance: rng.below(4) as usize,
            key: 1,
        });
    }
    let r = run(&setup, &[], &reqs).await;
    check(&r, 1.15, 0.03);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_joining_and_leaving_mid_interval() {
    let setup = Setup::new(
        "join and leave",
        "3x; 2 instances, 4 from 15 s, 2 again from 45 s, random among the live",
        1_000,
        TEN_S,
    );
    let mut rng = Rng::new(15);
    let reqs: Vec<Req> = round_robin(300.0, 60.0, 1, 1)
        .into_iter()
        .map(|r| {
            let live = if (15_000_000..45_000_000).contains(&r.at_us) {
                4
            } else {
                2
            };
            Req {
                instance: rng.below(live) as usize,
                ..r
            }
        })
        .collect();
    let r = run(&setup, &[], &reqs).await;
    check(&r, 1.15, 0.03);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_hung_mid_interval() {
    let mut setup = Setup::new(
        "Redis hung 5 s",
        "uniform 3x; SIGSTOP at 22 s, SIGCONT at 27 s",
        1_000,
        TEN_S,
    );
    setup.events = vec![(22_000_000, Event::Stop), (27_000_000, Event::Resume)];
    let reqs = round_robin(300.0, 50.0, 4, 1);
    let r = run(&setup, &[], &reqs).await;
    check(&r, 1.15, 0.03);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_interval_and_restarted_empty() {
    let mut setup = Setup::new(
        "Redis killed 5 s",
        "uniform 3x; killed at 22 s, restarted empty at 27 s",
        1_000,
        TEN_S,
    );
    setup.events = vec![(22_000_000, Event::Kill), (27_000_000, Event::Restart)];
    let reqs = round_robin(300.0, 50.0, 4, 1);
    let r = run(&setup, &[], &reqs).await;
    // A Redis that lost its data is outside the published bound (the
    // instances rebuild the counts from what each heard last).
    check_with(&r, 1.15, 0.03, false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_apart_and_timers_out_of_phase() {
    let mut setup = Setup::new(
        "clock skew",
        "uniform 3x; clocks -50, -20, +20, +50 ms",
        1_000,
        TEN_S,
    );
    setup.skews_ms = vec![-50, -20, 20, 50];
    let reqs = round_robin(300.0, 10.0 * intervals(6, 30), 4, 1);
    let r = run(&setup, &[], &reqs).await;
    check(&r, 1.15, 0.03);
}

/// 1,000 keys each at `load` times its quota (100 per 10 s), round-robin.
fn thousand_keys(load: f64, secs: f64) -> Vec<Req> {
    let rate = 1_000.0 * 10.0 * load;
    round_robin(rate, secs, 4, 0)
        .into_iter()
        .enumerate()
        .map(|(i, r)| Req {
            key: (i as u64 * 7919) % 1_000,
            ..r
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_keys_cost_redis_by_time_not_by_requests() {
    let setup = Setup::new(
        "1,000 keys",
        "1,000 keys at 1x their quota (and at 0.5x), round-robin",
        100,
        TEN_S,
    );
    let secs = 10.0 * intervals(2, 6);
    let full = run(&setup, &[], &thousand_keys(1.0, secs)).await;
    let half = run(&setup, &[], &thousand_keys(0.5, secs)).await;
    println!("{}", full.row());
    println!("{}", half.row());
    // Goal: at most 0.05 at 1x (measured 0.017). At 0.5x the keys' claims
    // run out now and then and a request waits for one: 0.055 (0.022
    // before requests could wait), kept below 0.06.
    assert!(
        full.commands_per_check() <= 0.05,
        "{}",
        full.commands_per_check()
    );
    assert!(
        half.commands_per_check() <= 0.06,
        "{}",
        half.commands_per_check()
    );
    check(&full, 1.05, 0.03);
}
