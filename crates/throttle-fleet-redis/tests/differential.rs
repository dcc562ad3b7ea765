//! Differential tests: every algorithm's Lua script against the Rust meter
//! it mirrors, on the same random timelines. A real redis-server per test;
//! "now" is passed into the scripts (a `TestTime` scheduler), so both sides see
//! exactly the same times. Between the checks, reads (an operator's inspect,
//! the algorithm's read script) are held to a check of cost 0 on a copy of
//! the Rust state, under the rule's quota and under a smaller one (a reload
//! that shrank it: the key is then over its new limit).

use std::time::Duration;

use throttle_fleet_core::algorithm::{
    FixedWindow, Gcra, Meter, SlidingWindowCounter, SlidingWindowLog,
};
use throttle_fleet_core::backend::Backend as _;
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

/// A rule and the meter it compiles to.
type Compiled<M> = (Rule, M);

/// Runs `OPS_PER_KEY` random (time, cost) operations for one key through the
/// Rust meter and the Redis script, and compares every step; reads the key
/// between them, through the rule and through `smaller` (the same rule with
/// a smaller quota), and compares every read.
async fn compare<M: Meter>(
    server_url: String,
    (rule, meter): Compiled<M>,
    (smaller, smaller_meter): Compiled<M>,
    seed: u64,
) -> (u64, u64)
where
    M::State: Clone,
{
    let start = 1_700_000_000_000_000 + seed * 7_919;
    let time = TestTime::new(start);
    let clock = time.clock();
    let config = |time: &TestTime| {
        RedisConfig::standalone(server_url.clone())
            .scheduler(time.scheduler())
            .command_timeout(Duration::from_secs(5))
            .key_prefix(format!("diff{seed}"))
    };
    let backend = RedisBackend::exact(config(&time)).await.unwrap();
    let limiter = backend.limiter(&rule).unwrap();
    // Reads go through an instance of their own, on a time of their own:
    // at a check's time or later (past a window's end, or an entry's, that
    // no check has seen yet), while the checks keep their timeline. They
    // draw from a generator of their own too.
    let read_time = TestTime::new(start);
    let read_clock = read_time.clock();
    let read_backend = RedisBackend::exact(config(&read_time)).await.unwrap();
    let readers = (
        read_backend.limiter(&rule).unwrap(),
        read_backend.limiter(&smaller).unwrap(),
    );
    let key = Key::from(seed);
    let mut reads = Rng(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
    let (mut read, mut read_over, mut read_at) = (0, 0, start);
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
        let outcome = match limiter.acquire(&key, cost, u64::MAX) {
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
        if reads.below(4) == 0 {
            let (reader, meter) = match reads.below(4) {
                0 => (&readers.1, &smaller_meter),
                _ => (&readers.0, &meter),
            };
            // The read time never goes back: a read after a long one is
            // made at the same time (later than this check too).
            let at = (now
                + match reads.below(3) {
                    0 => 0,
                    1 => reads.below(spacing + 1),
                    _ => reads.below(3 * period),
                })
            .max(read_at);
            read_at = at;
            read_clock.set(at);
            let expected = meter.acquire(&mut state.clone(), at, 0);
            let outcome = match reader
                .ops()
                .expect("a Redis mode reads its keys")
                .peek(&key)
            {
                Answer::Pending(f) => f.await,
                Answer::Ready(r) => r,
            }
            .expect("read");
            assert!(!outcome.degraded, "the breaker opened");
            assert_eq!(outcome.at_us, at, "read after op {op}");
            assert_eq!(
                outcome.step,
                expected,
                "{} read after op {op} at {at}, limit {}: redis (left) vs rust (right)",
                rule.name(),
                meter.capacity()
            );
            read += 1;
            read_over += u64::from(!expected.allowed);
        }
    }
    // Reads of a key over its (smaller) limit too, not only within it.
    assert!(read > OPS_PER_KEY / 8, "{read} reads");
    assert!(read_over > 0, "no read found the key over its limit");
    assert_eq!(backend.stats().errors + read_backend.stats().errors, 0);
    assert_eq!(backend.stats().denied_locally, cached);
    (allowed, cached)
}

async fn differential<M: Meter + Clone>(rule: Compiled<M>, smaller: Compiled<M>)
where
    M::State: Clone,
{
    let server = RedisServer::start();
    let mut tasks = Vec::new();
    for seed in 1..=KEYS {
        tasks.push(tokio::spawn(compare(
            server.url(),
            rule.clone(),
            smaller.clone(),
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
    let small = Quota::new(4, q.period());
    differential(
        (
            Rule::new("fw", q).fixed_window(),
            FixedWindow::new(q).unwrap(),
        ),
        (
            Rule::new("fw", small).fixed_window(),
            FixedWindow::new(small).unwrap(),
        ),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_window_counter_script_matches_rust() {
    let q = Quota::new(50, Duration::from_millis(700));
    let small = Quota::new(20, q.period());
    differential(
        (
            Rule::new("swc", q).sliding_window_counter(),
            SlidingWindowCounter::new(q).unwrap(),
        ),
        (
            Rule::new("swc", small).sliding_window_counter(),
            SlidingWindowCounter::new(small).unwrap(),
        ),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_window_log_script_matches_rust() {
    let q = Quota::new(20, Duration::from_millis(2_000));
    let small = Quota::new(8, q.period());
    differential(
        (
            Rule::new("log", q).sliding_window_log(),
            SlidingWindowLog::new(q).unwrap(),
        ),
        (
            Rule::new("log", small).sliding_window_log(),
            SlidingWindowLog::new(small).unwrap(),
        ),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_bucket_script_matches_rust() {
    // 7 per 3 s: an emission interval of 428,571 3/7 us, kept exact.
    let q = Quota::new(7, Duration::from_secs(3)).with_burst(10);
    // The same rate (the state's remainders are in its units), a smaller
    // bucket.
    let small = Quota::new(7, Duration::from_secs(3)).with_burst(4);
    differential(
        (
            Rule::new("tb", q).token_bucket(),
            Gcra::token_bucket(q).unwrap(),
        ),
        (
            Rule::new("tb", small).token_bucket(),
            Gcra::token_bucket(small).unwrap(),
        ),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaky_bucket_script_matches_rust() {
    let q = Quota::new(5, Duration::from_secs(1)).with_burst(3);
    let small = Quota::new(5, Duration::from_secs(1)).with_burst(1);
    differential(
        (
            Rule::new("lb", q).leaky_bucket(),
            Gcra::leaky_bucket(q).unwrap(),
        ),
        (
            Rule::new("lb", small).leaky_bucket(),
            Gcra::leaky_bucket(small).unwrap(),
        ),
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
        let limiter = throttle_fleet_core::backend::Backend::limiter(&backend, &rule).unwrap();
        let calls_before = server.command_count("evalsha");
        let checks: Vec<_> = (0..500)
            .map(|_| match limiter.acquire(&Key::new("hot"), 1, u64::MAX) {
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
