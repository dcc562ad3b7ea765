//! The approximate mode's protocol against a real Redis, with simulated
//! time: counts survive restarts and late flushes, shutdown flushes, the
//! node estimate follows the fleet, configuration errors name their field.
//! Precision under realistic traffic is `scenarios.rs`'s job.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{Answer, Key, Quota, Rule};
use throttle_fleet_redis::schedule::{Lateness, TestTime};
use throttle_fleet_redis::{ApproximateBackend, ApproximateOptions, RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;

const T0: u64 = 1_700_000_000_000_000;

struct Instance {
    backend: ApproximateBackend,
    limiter: std::sync::Arc<dyn Limiter>,
    time: TestTime,
}

/// An instance on `time` through a clock `offset_us` apart, its early
/// flushes at once (no gap), so that a request that waits is answered
/// without moving time.
async fn instance(
    server: &RedisServer,
    time: &TestTime,
    offset_us: i64,
    rule: &Rule,
    spans: u32,
) -> Instance {
    let config = RedisConfig::standalone(server.url())
        .scheduler(time.instance(offset_us, Lateness::default()))
        .command_timeout(Duration::from_millis(500));
    let options = ApproximateOptions::default()
        .spans(spans)
        .early_flush_gap(Duration::ZERO);
    let backend = RedisBackend::approximate(config, options).await.unwrap();
    let limiter = throttle_fleet_core::backend::Backend::limiter(&backend, rule).unwrap();
    Instance {
        backend,
        limiter,
        time: time.clone(),
    }
}

/// Checks one request on `inst`. A request the instance has no claim for
/// waits for the early flush it asked for: its schedule runs it now, then
/// the request is decided.
async fn allowed(inst: &Instance, key: &Key) -> bool {
    match inst.limiter.acquire(key, 1, u64::MAX) {
        Answer::Ready(Ok(o)) => o.step.allowed,
        Answer::Pending(mut waiting) => {
            inst.time.advance(Duration::ZERO).await;
            match (&mut waiting).now_or_never() {
                Some(Ok(o)) => o.step.allowed,
                other => panic!("decided once the flush it waited for was back: {other:?}"),
            }
        }
        other => panic!("the approximate mode never refuses here: {other:?}"),
    }
}

/// Drives `instances` with `per_interval` requests per interval, spread
/// evenly in time and round-robin over the instances, for `intervals`
/// intervals of `interval_us`; the instances flush on their own schedule
/// as time moves. Returns what was admitted per interval (by test time).
async fn drive(
    time: &TestTime,
    instances: &[&Instance],
    key: &Key,
    interval_us: u64,
    per_interval: u64,
    intervals: u64,
) -> Vec<u64> {
    let step = interval_us / per_interval;
    let mut admitted = vec![0; intervals as usize];
    let start = time.now_us();
    for i in 0..per_interval * intervals {
        let now = start + i * step;
        time.advance_to(now).await;
        let inst = instances[(i % instances.len() as u64) as usize];
        if allowed(inst, key).await {
            admitted[((now - start) / interval_us) as usize] += 1;
        }
    }
    admitted
}

/// What Redis holds for `key` of `rule` in `interval`: the instances'
/// counts summed, how many instances, and the bucket hash it is in. Each
/// bucket hash maps a key (hex) to `instance=count:span` entries.
fn counted(server: &RedisServer, rule: &str, key: &Key, interval: u64) -> (u64, usize, String) {
    let mut hex = String::new();
    key.write_hex(&mut hex);
    let hashes = server.cli(&["KEYS", &format!("rl:{{{rule}:b*}}:a:{interval}")]);
    for hash in hashes.lines().filter(|l| !l.is_empty()) {
        let entries = server.cli(&["HGET", hash, &hex]);
        let entries = entries.trim();
        if entries.is_empty() {
            continue;
        }
        // `@<first span>:<overdrawn>,~<instances>;...=0:<counts>:...`.
        let (mut total, mut instances) = (0, 0);
        for entry in entries.split(',').filter(|e| !e.starts_with('@')) {
            let (id, numbers) = entry.split_once('=').unwrap();
            let count: u64 = numbers.split(':').nth(1).unwrap().parse().unwrap();
            total += count;
            instances += match id.strip_prefix('~') {
                Some(sums) => sums.split(';').next().unwrap().parse().unwrap(),
                None => 1,
            };
        }
        return (total, instances, hash.to_owned());
    }
    panic!("no counts for {key:?} in interval {interval}: {hashes:?}")
}

async fn aligned_start(time: &TestTime, interval_us: u64) {
    let now = time.now_us();
    time.advance_to((now / interval_us + 1) * interval_us).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_estimate_follows_instances_joining_and_leaving() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let interval = Duration::from_secs(10);
    let interval_us = interval.as_micros() as u64;
    let rule = Rule::new("api", Quota::new(100_000, interval)).fixed_window();
    let mut fleet = Vec::new();
    for _ in 0..4 {
        fleet.push(instance(&server, &time, 0, &rule, 10).await);
    }
    let key = Key::new("k");
    aligned_start(&time, interval_us).await;
    let two: Vec<&Instance> = fleet.iter().take(2).collect();
    let all: Vec<&Instance> = fleet.iter().collect();
    drive(&time, &two, &key, interval_us, 4_000, 2).await;
    let est = |i: usize| fleet[i].backend.approximate_stats().nodes_estimate_milli;
    assert!(
        (1_800..=2_200).contains(&est(0)),
        "two instances: {}",
        est(0)
    );
    // Two more join: within two intervals everyone sees four.
    drive(&time, &all, &key, interval_us, 8_000, 2).await;
    for i in 0..4 {
        assert!(
            (3_600..=4_400).contains(&est(i)),
            "instance {i} after joins: {}",
            est(i)
        );
    }
    // Two leave: the remaining ones see two again.
    drive(&time, &two, &key, interval_us, 4_000, 2).await;
    for i in 0..2 {
        assert!(
            (1_800..=2_200).contains(&est(i)),
            "instance {i} after leaves: {}",
            est(i)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_the_local_fallback_keeps_the_fleet_near_the_quota() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let interval = Duration::from_secs(10);
    let interval_us = interval.as_micros() as u64;
    let rule = Rule::new("api", Quota::new(1_000, interval))
        .fixed_window()
        .local_fallback();
    let mut fleet = Vec::new();
    for _ in 0..4 {
        fleet.push(instance(&server, &time, 0, &rule, 10).await);
    }
    let refs: Vec<&Instance> = fleet.iter().collect();
    let key = Key::new("tenant-1");
    aligned_start(&time, interval_us).await;
    // Two intervals with Redis up teach every instance that there are four.
    drive(&time, &refs, &key, interval_us, 3_000, 2).await;
    server.kill();
    let admitted = drive(&time, &refs, &key, interval_us, 3_000, 3).await;
    println!("Redis down, 4 instances at 3x: admitted per interval {admitted:?}");
    for n in &admitted {
        assert!(
            *n as f64 <= 1.5 * 1_000.0,
            "{admitted:?} (naive per-instance limits would admit 3000)"
        );
        assert!(*n >= 500, "still serving: {admitted:?}");
    }
    assert!(!fleet[0].backend.approximate_stats().redis_ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_two_seconds_apart_stay_within_fifteen_percent() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let interval = Duration::from_secs(60);
    let interval_us = interval.as_micros() as u64;
    let rule = Rule::new("api", Quota::new(1_000, interval)).fixed_window();
    let mut fleet = Vec::new();
    for offset_ms in [-2_000i64, -700, 700, 2_000] {
        fleet.push(instance(&server, &time, offset_ms * 1_000, &rule, 10).await);
    }
    let refs: Vec<&Instance> = fleet.iter().collect();
    aligned_start(&time, interval_us).await;
    let admitted = drive(&time, &refs, &Key::new("tenant-1"), interval_us, 3_000, 5).await;
    println!("clocks -2 s .. +2 s, interval 60 s: admitted per interval {admitted:?}");
    for n in &admitted[1..] {
        assert!(*n as f64 <= 1.15 * 1_000.0, "{admitted:?}");
        assert!(*n as f64 >= 0.85 * 1_000.0, "{admitted:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_mid_interval_loses_no_counts_and_shutdown_flushes() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let interval = Duration::from_secs(60);
    let interval_us = interval.as_micros() as u64;
    let rule = Rule::new("api", Quota::new(100_000, interval)).fixed_window();
    let a = instance(&server, &time, 0, &rule, 10).await;
    let b = instance(&server, &time, 0, &rule, 10).await;
    aligned_start(&time, interval_us).await;
    let key = Key::new("k");
    let interval_no = time.now_us() / interval_us;
    let mut admitted = 0;
    let tick = async |n: u64| {
        let mut ok = 0;
        for i in 0..n {
            time.advance_to(time.now_us() + 1_000).await;
            let inst = if i % 2 == 0 { &a } else { &b };
            ok += u64::from(allowed(inst, &key).await);
        }
        ok
    };
    admitted += tick(300).await;
    a.backend.flush().await;
    b.backend.flush().await;
    server.kill();
    admitted += tick(300).await;
    assert!(
        !a.backend.flush().await,
        "Redis is down: the counts are kept"
    );
    assert!(!a.backend.approximate_stats().redis_ok);
    server.restart();
    admitted += tick(300).await;
    // Graceful shutdown sends everything still pending.
    a.backend.shutdown().await.unwrap();
    b.backend.shutdown().await.unwrap();
    assert_eq!(admitted, 900);
    let (total, instances, hash) = counted(&server, "api", &key, interval_no);
    assert_eq!(instances, 2, "one entry per instance");
    assert_eq!(
        total, 900,
        "every admitted request is counted once in Redis"
    );
    let ttl: i64 = server.cli(&["PTTL", &hash]).trim().parse().unwrap();
    assert!(ttl > 0, "the interval's hash expires");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_window_algorithms_can_be_counted_approximately() {
    let server = RedisServer::start();
    let backend = RedisBackend::approximate(
        RedisConfig::standalone(server.url()),
        ApproximateOptions::default(),
    )
    .await
    .unwrap();
    let err = throttle_fleet_core::backend::Backend::limiter(
        &backend,
        &Rule::new("tb", Quota::per_second(5)),
    )
    .err()
    .unwrap();
    assert_eq!((err.rule(), err.field()), (Some("tb"), "algorithm"));
    let err = RedisBackend::approximate(
        RedisConfig::standalone(server.url()),
        ApproximateOptions::default().spans(1),
    )
    .await
    .unwrap_err();
    assert_eq!(err.field(), "approximate.spans");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushes_that_time_out_and_run_late_are_not_counted_twice() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let interval = Duration::from_secs(10);
    let interval_us = interval.as_micros() as u64;
    let rule = Rule::new("api", Quota::new(1_000, interval)).fixed_window();
    let mut fleet = Vec::new();
    for _ in 0..4 {
        let config = RedisConfig::standalone(server.url())
            .scheduler(time.scheduler())
            .command_timeout(Duration::from_millis(100));
        let options = ApproximateOptions::default()
            .flush_timeout(Duration::from_millis(100))
            .early_flush_gap(Duration::ZERO);
        let backend = RedisBackend::approximate(config, options).await.unwrap();
        let limiter = throttle_fleet_core::backend::Backend::limiter(&backend, &rule).unwrap();
        fleet.push(Instance {
            backend,
            limiter,
            time: time.clone(),
        });
    }
    let refs: Vec<&Instance> = fleet.iter().collect();
    let key = Key::new("tenant-1");
    // The counts' hashes expire in Redis's real time, while the test runs
    // on test time: a run slowed down by a loaded machine found interval
    // 0's hash gone before it was read ("no counts"). Their expiry is not
    // what this test checks: they are kept until it has read them.
    let keep = KeepCounts::start(&server, "rl:{api:b*}:a:*");
    aligned_start(&time, interval_us).await;
    let first = time.now_us() / interval_us;
    let mut admitted = drive(&time, &refs, &key, interval_us, 3_000, 1).await;
    // Redis hangs for five seconds of traffic: the flushes of those spans
    // time out here but stay queued in Redis' socket and run when it resumes.
    server.stop();
    admitted.extend(drive(&time, &refs, &key, interval_us / 2, 1_500, 1).await);
    server.resume();
    admitted.extend(drive(&time, &refs, &key, interval_us / 2, 1_500, 1).await);
    admitted.extend(drive(&time, &refs, &key, interval_us, 3_000, 1).await);
    for inst in &fleet {
        inst.backend.shutdown().await.unwrap();
    }
    let failed: u64 = fleet
        .iter()
        .map(|i| i.backend.approximate_stats().failed_flushes)
        .sum();
    assert!(failed >= 4, "the flushes during the hang failed: {failed}");
    let admitted = [admitted[0], admitted[1] + admitted[2], admitted[3]];
    for (i, n) in admitted.iter().enumerate() {
        let (counted, _, _) = counted(&server, "api", &key, first + i as u64);
        println!("interval {i}: admitted {n}, counted in Redis {counted}");
        assert_eq!(
            counted, *n,
            "interval {i}: every admitted request counted once"
        );
        assert!(*n as f64 <= 1.10 * 1_000.0, "{admitted:?}");
    }
    drop(keep);
}

/// Removes the expiry of the keys matching a pattern every 50 ms (while
/// the server answers), until dropped.
struct KeepCounts {
    done: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl KeepCounts {
    fn start(server: &RedisServer, pattern: &str) -> Self {
        use std::io::{Read, Write};

        const PERSIST: &str =
            "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('PERSIST', k) end";
        let mut request = String::from("*4\r\n");
        for arg in ["EVAL", PERSIST, "0", pattern] {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], server.port()));
        let thread = std::thread::spawn({
            let done = done.clone();
            move || {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    // A stopped server accepts and answers nothing: bounded.
                    if let Ok(mut conn) =
                        std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200))
                    {
                        let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
                        let _ = conn.write_all(request.as_bytes());
                        let _ = conn.read(&mut [0u8; 64]);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        });
        Self {
            done,
            thread: Some(thread),
        }
    }
}

impl Drop for KeepCounts {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Runs `requests` checks spread evenly over `secs` simulated seconds, over
/// `keys` keys and `instances` instances, flushing at every span end; returns
/// the Redis commands they cost.
async fn commands_for(requests: u64, secs: u64, keys: u64, instances: usize) -> u64 {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let interval = Duration::from_secs(10);
    let interval_us = interval.as_micros() as u64;
    let rule = Rule::new("api", Quota::new(1_000_000, interval)).fixed_window();
    let mut fleet = Vec::new();
    for _ in 0..instances {
        fleet.push(instance(&server, &time, 0, &rule, 10).await);
    }
    aligned_start(&time, interval_us).await;
    server.cli(&["CONFIG", "RESETSTAT"]);
    let start = time.now_us();
    let step = secs * 1_000_000 / requests;
    for i in 0..requests {
        time.advance_to(start + i * step).await;
        let inst = &fleet[i as usize % instances];
        assert!(allowed(inst, &Key::from(i % keys)).await);
    }
    for inst in &fleet {
        inst.backend.shutdown().await.unwrap();
    }
    server.commands()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_commands_follow_time_and_buckets_not_requests() {
    // 1,000 active keys, 100,000 requests, four instances.
    let fast = commands_for(100_000, 10, 1_000, 4).await;
    let slow = commands_for(100_000, 40, 1_000, 4).await;
    let (fast_per_req, slow_per_req) = (fast as f64 / 100_000.0, slow as f64 / 100_000.0);
    let (fast_per_sec, slow_per_sec) = (fast as f64 / 10.0, slow as f64 / 40.0);
    println!(
        "1k keys, 100k requests, 4 instances: {fast} commands over 10 s ({fast_per_req:.4} per request, \
         {fast_per_sec:.0} per second); {slow} over 40 s ({slow_per_req:.4} per request, {slow_per_sec:.0} per second)"
    );
    assert!(fast_per_req <= 0.02, "{fast_per_req}");
    // A flush costs a few commands per bucket whatever the traffic: commands
    // per second do not move with the request rate.
    let ratio = fast_per_sec / slow_per_sec;
    assert!(
        (0.85..=1.15).contains(&ratio),
        "{fast_per_sec} vs {slow_per_sec} commands per second"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_after_the_router_is_dropped_loses_no_counts() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let interval_us = 60_000_000;
    let rule = Rule::new("api", Quota::new(1_000, Duration::from_secs(60))).fixed_window();
    aligned_start(&time, interval_us).await;
    let interval_no = time.now_us() / interval_us;
    let key = Key::new("k");
    let inst = instance(&server, &time, 0, &rule, 10).await;
    let mut admitted = 0;
    // A lone instance's credit (a quarter of a span's share): no flush yet.
    for _ in 0..25 {
        time.advance_to(time.now_us() + 1_000).await;
        admitted += u64::from(allowed(&inst, &key).await);
    }
    assert_eq!(admitted, 25);
    // What `axum::serve` returning does: the router, and with it the
    // layer's limiters, are gone before the backend's shutdown is called.
    let Instance {
        backend, limiter, ..
    } = inst;
    drop(limiter);
    backend.shutdown().await.unwrap();
    let (total, _, _) = counted(&server, "api", &key, interval_no);
    assert_eq!(total, 25, "every admitted request is in Redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_says_what_it_could_not_write() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let rule = Rule::new("api", Quota::new(1_000, Duration::from_secs(60))).fixed_window();
    aligned_start(&time, 60_000_000).await;
    let key = Key::new("k");
    let inst = instance(&server, &time, 0, &rule, 10).await;
    for _ in 0..5 {
        time.advance_to(time.now_us() + 1_000).await;
        assert!(allowed(&inst, &key).await);
    }
    server.kill();
    let Instance {
        backend, limiter, ..
    } = inst;
    drop(limiter);
    let unflushed = backend.shutdown().await.unwrap_err();
    assert_eq!(unflushed.counts, 5, "{unflushed}");
    assert!(unflushed.to_string().contains("5 admitted"), "{unflushed}");
}

/// A fail-open rule whose claim runs out while its flush to a hung Redis
/// is out: for one command timeout a request waits for a claim, as it
/// would for any, then the failure policy decides (allowed, degraded),
/// without waiting for the whole flush timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_out_longer_than_the_command_timeout_hands_over_to_the_policy() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let config = RedisConfig::standalone(server.url())
        .scheduler(time.scheduler())
        .command_timeout(Duration::from_millis(50));
    let options = ApproximateOptions::default()
        .spans(10)
        .flush_timeout(Duration::from_secs(2));
    let backend = RedisBackend::approximate(config, options).await.unwrap();
    let rule = Rule::new("r", Quota::per_minute(600))
        .fixed_window()
        .fail_open();
    let limiter = throttle_fleet_core::backend::Backend::limiter(&backend, &rule).unwrap();
    let inst = Instance {
        backend,
        limiter,
        time: time.clone(),
    };
    // The heartbeat's first round, with Redis up (the next is a probe
    // interval away, after what this test plays).
    time.advance(Duration::ZERO).await;
    let key = Key::new("k");
    // A claim for a few requests, then spend it all: the next one waits.
    assert!(allowed(&inst, &key).await);
    assert!(inst.backend.flush().await);
    let mut spent = 0;
    while matches!(inst.limiter.acquire(&key, 1, u64::MAX), Answer::Ready(Ok(o)) if o.step.allowed)
    {
        spent += 1;
        assert!(spent < 600, "the claim never ran out");
    }
    // Redis hangs; the next flush goes out and waits.
    server.stop();
    let flusher = {
        let backend = inst.backend.clone();
        tokio::spawn(async move { backend.flush().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The clock moves without running the timers: the early flush the last
    // request asked for would go out too and, test time standing still
    // while it runs, come back failed; this test looks at the flush out.
    let clock = time.clock();
    clock.advance(Duration::from_millis(10));
    assert!(
        matches!(inst.limiter.acquire(&key, 1, u64::MAX), Answer::Pending(_)),
        "within a command timeout: waits for a claim"
    );
    clock.advance(Duration::from_millis(60));
    match inst.limiter.acquire(&key, 1, u64::MAX) {
        Answer::Ready(Ok(o)) => assert_eq!(
            (o.step.allowed, o.degraded),
            (true, true),
            "past it: fail open decides"
        ),
        other => panic!("past a command timeout the policy decides at once: {other:?}"),
    }
    server.resume();
    assert!(
        flusher.await.unwrap(),
        "the flush got through once Redis woke"
    );
}
