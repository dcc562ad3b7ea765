//! Differential tests: every algorithm's Lua script against the Rust meter
//! it mirrors, on the same random timelines. A real redis-server per test;
//! "now" is passed into the scripts (a `TestTime` scheduler), so both sides see
//! exactly the same times.

use std::time::Duration;

use throttle_fleet_core::algorithm::{
    FixedWindow, Gcra, Meter, SlidingWindowCounter, SlidingWindowLog,
};
use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{Answer, Key, Quota, Rule};
use throttle_fleet_redis::schedule::TestTime;
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;

/// Keys checked concurrently, each with its own timeline.
const KEYS: u64 = 4;
/// Operations per key: 4 x 25,000 = 100,000 per algorithm.
const OPS_PER_KEY: u64 = 25_000;

/// xorshift64*: a deterministic timeline per seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Runs `OPS_PER_KEY` random (time, cost) operations for one key through the
/// Rust meter and the Redis script, and compares every step.
async fn compare<M: Meter>(server_url: String, rule: Rule, meter: M, seed: u64) -> (u64, u64) {
    let start = 1_700_000_000_000_000 + seed * 7_919;
    let time = TestTime::new(start);
    let clock = time.clock();
    let config = RedisConfig::standalone(server_url)
        .scheduler(time.scheduler())
        .command_timeout(Duration::from_secs(5))
        .key_prefix(format!("diff{seed}"));
    let backend = RedisBackend::exact(config).await.unwrap();
    let limiter = backend.exact_limiter(&rule).unwrap();
    let key = Key::from(seed);
    let period = rule.quota().period().as_micros() as u64;
    let spacing = period / rule.quota().limit();

    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut state = M::State::default();
    let mut now = start;
    let mut allowed = 0;
    let mut cached = 0;
    for op in 0..OPS_PER_KEY {
        // Mostly bursts and gaps around the emission interval, sometimes a
        // long idle stretch, sometimes the very same microsecond.
        now += match rng.below(10) {
            0 => 0,
            1 => rng.below(3 * period),
            2 => rng.below(10),
            _ => rng.below(spacing + 1),
        };
        clock.set(now);
        let cost = 1 + rng.below(3);
        let expected = meter.acquire(&mut state, now, cost);
        let outcome = match limiter.acquire(&key, cost) {
            Answer::Pending(f) => f.await.expect("redis answered"),
            // The deny cache answering for a key Redis showed over its
            // limit: held to the same model.
            Answer::Ready(r) => {
                cached += 1;
                r.expect("decided, not unavailable")
            }
        };
        assert!(!outcome.degraded, "the breaker opened");
        assert_eq!(outcome.at_us, now, "op {op}");
        assert_eq!(
            outcome.step,
            expected,
            "{} op {op} at {now} cost {cost}: redis (left) vs rust (right)",
            rule.name()
        );
        allowed += u64::from(expected.allowed);
    }
    assert_eq!(backend.stats().errors, 0);
    assert_eq!(backend.stats().denied_locally, cached);
    (allowed, cached)
}

async fn differential<M: Meter + Clone>(rule: Rule, meter: M) {
    let server = RedisServer::start();
    let mut tasks = Vec::new();
    for seed in 1..=KEYS {
        tasks.push(tokio::spawn(compare(
            server.url(),
            rule.clone(),
            meter.clone(),
            seed,
        )));
    }
    let (mut allowed, mut cached) = (0, 0);
    for t in tasks {
        let (a, c) = t.await.unwrap();
        allowed += a;
        cached += c;
    }
    // The deny cache answered some of the denials, and agreed with the model.
    assert!(cached > 0, "the deny cache never answered");
    let total = KEYS * OPS_PER_KEY;
    // The timelines must exercise both sides of every decision.
    assert!(
        allowed > total / 10 && allowed < total * 9 / 10,
        "{allowed} of {total} allowed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window_script_matches_rust() {
    let q = Quota::new(10, Duration::from_millis(1_000));
    differential(
        Rule::new("fw", q).fixed_window(),
        FixedWindow::new(q).unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_window_counter_script_matches_rust() {
    let q = Quota::new(50, Duration::from_millis(700));
    differential(
        Rule::new("swc", q).sliding_window_counter(),
        SlidingWindowCounter::new(q).unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_window_log_script_matches_rust() {
    let q = Quota::new(20, Duration::from_millis(2_000));
    differential(
        Rule::new("log", q).sliding_window_log(),
        SlidingWindowLog::new(q).unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_bucket_script_matches_rust() {
    // 7 per 3 s: an emission interval of 428,571 3/7 us, kept exact.
    let q = Quota::new(7, Duration::from_secs(3)).with_burst(10);
    differential(
        Rule::new("tb", q).token_bucket(),
        Gcra::token_bucket(q).unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaky_bucket_script_matches_rust() {
    let q = Quota::new(5, Duration::from_secs(1)).with_burst(3);
    differential(
        Rule::new("lb", q).leaky_bucket(),
        Gcra::leaky_bucket(q).unwrap(),
    )
    .await;
}

/// Checks that arrive together are sent together (one script call for many)
/// and decided exactly as if each had its own call: the same admissions and
/// every `remaining` value once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_checks_are_batched_and_still_exact() {
    let server = RedisServer::start();
    let time = TestTime::new(1_700_000_000_000_000);
    let config = RedisConfig::standalone(server.url())
        .scheduler(time.scheduler())
        .command_timeout(Duration::from_secs(5));
    let backend = RedisBackend::exact(config).await.unwrap();
    for (rule, capacity) in [
        (
            Rule::new("tb", Quota::per_minute(100)).token_bucket(),
            100u64,
        ),
        (Rule::new("fw", Quota::per_minute(100)).fixed_window(), 100),
        (
            Rule::new("swc", Quota::per_minute(100)).sliding_window_counter(),
            100,
        ),
    ] {
        let limiter = throttle_fleet_core::Backend::limiter(&backend, &rule).unwrap();
        let calls_before = server.command_count("evalsha");
        let checks: Vec<_> = (0..500)
            .map(|_| match limiter.acquire(&Key::new("hot"), 1) {
                Answer::Pending(f) => f,
                Answer::Ready(r) => panic!("{r:?}"),
            })
            .collect();
        let outcomes = futures_util::future::join_all(checks).await;
        let calls = server.command_count("evalsha") - calls_before;
        let mut remaining: Vec<u64> = outcomes
            .iter()
            .map(|o| o.as_ref().unwrap())
            .filter(|o| o.step.allowed)
            .map(|o| o.step.remaining)
            .collect();
        remaining.sort_unstable();
        assert_eq!(
            remaining,
            (0..capacity).collect::<Vec<_>>(),
            "{}",
            rule.name()
        );
        assert!(
            calls < 50,
            "{}: 500 concurrent checks took {calls} calls",
            rule.name()
        );
    }
}
