//! The approximate mode's clients under their quota, as their own class:
//! a client that stays under its quota is never denied, however its
//! requests spread over the instances, while the clients over theirs get
//! what a perfect limiter gives and no more than the quota.
//!
//! Every run of the matrix mixes eight clients under their quota (Poisson
//! at 0.2x to 0.9x, less the requests a perfect limiter would refuse them:
//! they never ask for more than their quota, so every 429 they get is a
//! false denial) with two over it (Poisson at 2x and 5x), each client
//! spread over the instances the same way (uniformly, by a Zipf law over
//! its own ranking of them, or sticky and moving), over 2, 4, 6 and 8
//! instances, with quotas of 10 and 50 per minute and 1,000 per 10 s; the
//! keys are new in the first interval and long-lived after it. Short
//! versions run in CI; `THROTTLE_FLEET_LONG=1 cargo test -p throttle-fleet-redis
//! --test under_quota -- --nocapture --test-threads 1` runs ten intervals
//! per case and prints the table that BENCHMARKS.md records.
//!
//! `UNDER_QUOTA_ROWS` runs only the rows whose label contains one of its
//! comma-separated parts, each with the seed it has in the whole matrix:
//! `UNDER_QUOTA_ROWS='1000/10s' cargo test -p throttle-fleet-redis --test
//! under_quota sliding_counter -- --nocapture` runs the sliding counter's
//! rows at 1,000 per 10 s (a label reads `sliding counter | uniform | 8 |
//! 1000/10s`).

mod support;

use std::time::Duration;

use support::fleet::{self, ClassReport, Report, Setup, Spread, client, long, merge};
use throttle_fleet_test_support::Rng;

const TEN_S: Duration = Duration::from_secs(10);
const MINUTE: Duration = Duration::from_secs(60);

/// The paces of the clients under their quota, and of those over it.
const UNDER: [f64; 8] = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9];
const OVER: [f64; 2] = [2.0, 5.0];

/// Keys of the clients over their quota start here.
const OVER_KEYS: u64 = 100;

struct Case {
    spread: Spread,
    instances: usize,
    limit: u64,
    interval: Duration,
}

struct Row {
    case: String,
    under: ClassReport,
    over: ClassReport,
    report: Report,
}

impl Row {
    fn print(&self) {
        let r = &self.report;
        println!(
            "| {} | {:.2}% ({} of {}) | {:.2}%, {:.1}/{:.1} ms | {:.3} ({:.3}) | {:.3}x ({}/{}) | {:.4} |",
            self.case,
            100.0 * self.under.false_denial_share(),
            self.under.false_denials,
            self.under.reference_admitted,
            100.0 * self.under.waited_share(),
            self.under.wait_p50_us as f64 / 1e3,
            self.under.wait_p99_us as f64 / 1e3,
            self.over.got(),
            self.over.worst_interval_got,
            r.worst_ratio(),
            r.worst_interval(),
            r.limit,
            r.commands_per_check(),
        );
    }

    /// What this case misses of the goals, and, where a goal is not met,
    /// of the bound that keeps what was reached (see [`Bounds`]).
    fn misses(&self, bounds: &Bounds) -> (Vec<String>, Vec<String>) {
        let r = &self.report;
        let (mut goals, mut guards) = (Vec::new(), Vec::new());
        let mut check = |value: f64, goal: f64, guard: f64, above: bool, what: &str| {
            let missed = |limit: f64| if above { value > limit } else { value < limit };
            if missed(goal) {
                goals.push(format!("{what}: {value:.4} (goal {goal})"));
            }
            if missed(guard) {
                guards.push(format!("{what}: {value:.4} (bound kept {guard})"));
            }
        };
        check(
            self.under.false_denial_share(),
            0.001,
            bounds.under_denied,
            true,
            "under-quota clients' share denied of what a perfect limiter admits",
        );
        check(
            self.under.waited_share(),
            0.05,
            bounds.waited.unwrap_or(f64::INFINITY),
            true,
            "under-quota clients' share of requests that waited for Redis",
        );
        check(
            self.over.worst_interval_got,
            0.97,
            bounds.over_got,
            false,
            "over-quota clients' worst interval against a perfect limiter",
        );
        // At most 1.05x the quota for quotas of 100 and more, the quota plus
        // one below, and never the published bound.
        let allowed = if r.limit >= 100 {
            (r.limit as f64 * 1.05) as u64
        } else {
            r.limit + 1
        };
        let worst = r.worst_interval();
        if worst > allowed.min(r.bound) {
            let msg = format!(
                "{worst} admitted in an interval for a quota of {} (at most {allowed}, published bound {})",
                r.limit, r.bound
            );
            goals.push(msg.clone());
            guards.push(msg);
        }
        (goals, guards)
    }
}

/// What a case must keep where a goal is not met (measured in CI's short
/// runs and with `THROTTLE_FLEET_LONG=1`; BENCHMARKS.md says which): a
/// regression past these fails the test, a goal missed within them is
/// printed.
struct Bounds {
    /// Goal 0.1%: met in CI's short runs but for sticky-and-moving traffic,
    /// whose old instance holds a claim for up to a span after the client
    /// left it (the client at the end of an interval, at its quota), and a
    /// few cases of a handful of requests; the long runs also show up to
    /// 0.3% for small quotas (a few requests of a client at its quota, at
    /// the end of an interval). The worst case: 2 of 634 (0.32%, fixed
    /// window, sticky-and-moving, 6 instances, 50 per minute; the whole
    /// matrix: 74 of 335,407, against 137 before issue 43's changes and
    /// 134 under the driver's own model of the flush schedule).
    /// The code before requests could wait denied 8-31%. Met, and kept,
    /// for quotas of ten requests or more per instance and span spread
    /// uniformly or by a Zipf law: the sliding counter's runs at 1,000 per
    /// 10 s over 4 to 8 instances denied 0.10-0.18% while the first
    /// instances to write in an interval were granted the room the others'
    /// unwritten last span had taken (`approximate/claims.rs`, `unwritten`).
    under_denied: f64,
    /// Goal 5%: met for quotas of ten requests or more per instance and
    /// span (1,000 per 10 s here); below that a request to an instance
    /// without a claim waits (one round trip) more often, since claims kept
    /// on every instance that saw the key would hold the quota many times
    /// over. `None`: not bounded, printed.
    waited: Option<f64>,
    /// Goal 0.97: met for the fixed window, and for the sliding counter at
    /// 1,000 per 10 s in the long runs (0.970 at the least) since a key
    /// granted nothing asks again once the window's room has grown by one
    /// request (`approximate/plan.rs`; it waited for the span end, and got
    /// down to 0.905; CI's short run, 0.926); kept at 0.95 there. At 10
    /// per minute one request of twenty is 0.95.
    over_got: f64,
}

fn bounds(case: &Case, sliding: bool) -> Bounds {
    let per_instance_span = case.limit as f64 / (case.instances as f64 * 10.0);
    Bounds {
        under_denied: if per_instance_span >= 10.0 && !matches!(case.spread, Spread::Sticky { .. })
        {
            0.001
        } else {
            0.01
        },
        waited: (per_instance_span >= 10.0).then_some(0.05),
        over_got: match (sliding, per_instance_span >= 10.0) {
            (false, _) => 0.97,
            (true, true) => 0.95,
            (true, false) => 0.90,
        },
    }
}

async fn run_case(case: &Case, sliding: bool, seed: u64) -> Row {
    let mut setup = Setup::new("under quota", "mixed", case.limit, case.interval);
    setup.instances = case.instances;
    setup.sliding = sliding;
    setup.seed = seed;
    let intervals = if long() { 10.0 } else { 3.0 };
    let secs = case.interval.as_secs_f64() * intervals;
    let per_second = case.limit as f64 / case.interval.as_secs_f64();
    let mut rng = Rng::new(seed);
    let mut streams = Vec::new();
    for (i, pace) in UNDER.iter().enumerate() {
        let key = i as u64 + 1;
        let reqs = client(
            per_second * pace,
            secs,
            case.instances,
            case.spread,
            key,
            &mut rng,
        );
        // Poisson at 0.9x goes over the quota now and then: those requests
        // are dropped, so the client never asks more than it may.
        streams.push(fleet::within_quota(&setup, &reqs));
    }
    for (i, pace) in OVER.iter().enumerate() {
        let key = OVER_KEYS + i as u64;
        streams.push(client(
            per_second * pace,
            secs,
            case.instances,
            case.spread,
            key,
            &mut rng,
        ));
    }
    let report = fleet::run(&setup, &[], &merge(streams)).await;
    Row {
        case: label(case, sliding),
        under: report.class(|k| k < OVER_KEYS),
        over: report.class(|k| k >= OVER_KEYS),
        report,
    }
}

/// A row's label: its first four columns.
fn label(case: &Case, sliding: bool) -> String {
    format!(
        "{} | {} | {} | {}/{}s",
        if sliding {
            "sliding counter"
        } else {
            "fixed window"
        },
        case.spread.name(),
        case.instances,
        case.limit,
        case.interval.as_secs()
    )
}

/// Whether `UNDER_QUOTA_ROWS` (comma-separated parts of labels; unset or
/// empty: every row) selects the row `label`.
fn selected(label: &str) -> bool {
    match std::env::var("UNDER_QUOTA_ROWS") {
        Ok(rows) if !rows.trim().is_empty() => rows
            .split(',')
            .map(str::trim)
            .any(|part| !part.is_empty() && label.contains(part)),
        _ => true,
    }
}

fn cases(spread: fn(Duration) -> Spread) -> Vec<Case> {
    let mut out = Vec::new();
    for instances in [2, 4, 6, 8] {
        for (limit, interval) in [(10, MINUTE), (50, MINUTE), (1_000, TEN_S)] {
            out.push(Case {
                spread: spread(interval),
                instances,
                limit,
                interval,
            });
        }
    }
    out
}

/// Runs every case and prints its row and the goals it misses, then fails
/// if any case fell past what it must keep.
async fn matrix(spread: fn(Duration) -> Spread, sliding: bool) {
    println!(
        "| algorithm | spread | instances | quota | under quota: denied of what a perfect limiter admits | \
         under quota: waited, p50/p99 | over quota: got of perfect (worst interval) | worst interval | \
         Redis commands per check |"
    );
    let (mut goals, mut guards) = (Vec::new(), Vec::new());
    for (i, case) in cases(spread).iter().enumerate() {
        if !selected(&label(case, sliding)) {
            continue;
        }
        let row = run_case(case, sliding, 40 + i as u64).await;
        row.print();
        let (g, k) = row.misses(&bounds(case, sliding));
        goals.extend(g.into_iter().map(|m| format!("{}: {m}", row.case)));
        guards.extend(k.into_iter().map(|m| format!("{}: {m}", row.case)));
    }
    println!("goals not met ({}):", goals.len());
    for g in &goals {
        println!("  {g}");
    }
    assert!(guards.is_empty(), "{}", guards.join("\n"));
}

fn uniform(_: Duration) -> Spread {
    Spread::Uniform
}

fn zipf(_: Duration) -> Spread {
    Spread::Zipf
}

/// Moves every fifth of an interval on average.
fn sticky(interval: Duration) -> Spread {
    Spread::Sticky {
        stay_us: interval.as_micros() as u64 / 5,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window_uniform() {
    matrix(uniform, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window_zipf() {
    matrix(zipf, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window_sticky_and_moving() {
    matrix(sticky, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_counter_uniform() {
    matrix(uniform, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_counter_zipf() {
    matrix(zipf, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_counter_sticky_and_moving() {
    matrix(sticky, true).await;
}
