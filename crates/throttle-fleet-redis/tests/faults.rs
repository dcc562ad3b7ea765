//! Redis failing under the limiter: hung (SIGSTOP), killed and restarted.
//! The limiter must degrade precision, never availability (unless a rule
//! fails closed), add at most one command timeout to a request and only
//! until the breaker opens, and return to Redis when it is back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use throttle_fleet_core::backend::{Backend as _, Limiter, Outcome, Unavailable};
use throttle_fleet_core::{Key, Quota, Rule};
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::{RedisServer, check};

const TIMEOUT: Duration = Duration::from_millis(50);
/// Slack on top of the command timeout for a loaded machine; a hung Redis
/// without a timeout would block for as long as it hangs.
const SLACK: Duration = Duration::from_millis(950);

fn config(server: &RedisServer) -> RedisConfig {
    RedisConfig::standalone(server.url())
        .command_timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .probe_interval(Duration::from_millis(100))
}

/// Checks once; returns the result, whether Redis was asked, and how long
/// it took.
async fn timed_check(
    limiter: &dyn Limiter,
    key: &Key,
) -> (Result<Outcome, Unavailable>, bool, Duration) {
    let t = Instant::now();
    let (result, asked) = check(limiter, key).await;
    (result, asked, t.elapsed())
}

/// Waits (up to 10 s) until a check is answered by Redis again.
async fn until_redis_answers(limiter: &dyn Limiter, key: &Key) -> Duration {
    let t = Instant::now();
    loop {
        let (r, asked, _) = timed_check(limiter, key).await;
        if asked && matches!(&r, Ok(o) if !o.degraded) {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "Redis never came back: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_costs_one_timeout_until_the_breaker_opens_then_nothing() {
    let server = RedisServer::start();
    let backend = RedisBackend::exact(config(&server)).await.unwrap();
    let rule = Rule::new("ip", Quota::per_second(1_000_000)).fail_open();
    let limiter = throttle_fleet_core::backend::Backend::limiter(&backend, &rule).unwrap();

    // Load from 16 clients while Redis is stopped in the middle.
    let stopped = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..16u64 {
        let (limiter, stopped, done) = (limiter.clone(), stopped.clone(), done.clone());
        clients.push(tokio::spawn(async move {
            let key = Key::from(c);
            let (mut worst, mut answered_while_stopped) = (Duration::ZERO, 0);
            while !done.load(Ordering::Relaxed) {
                let (r, _, took) = timed_check(limiter.as_ref(), &key).await;
                let o = r.expect("fail-open never refuses");
                assert!(o.step.allowed, "fail-open allows: {o:?}");
                worst = worst.max(took);
                if stopped.load(Ordering::Relaxed) && !o.degraded {
                    answered_while_stopped += 1;
                }
                tokio::task::yield_now().await;
            }
            (worst, answered_while_stopped)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!backend.stats().breaker_open);
    let before = backend.stats();

    server.stop();
    stopped.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let open = backend.stats();
    assert!(open.breaker_open, "{open:?}");
    assert_eq!(open.breaker_opened, before.breaker_opened + 1);
    // While open, the request path sends nothing to Redis.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let later = backend.stats();
    assert_eq!(
        later.calls, open.calls,
        "calls went to a hung Redis while the breaker was open"
    );
    assert!(
        later.degraded > open.degraded,
        "checks kept being answered locally"
    );
    let (r, asked, took) = timed_check(limiter.as_ref(), &Key::from(99)).await;
    assert!(
        !asked && r.unwrap().degraded,
        "an open breaker answers at once"
    );
    assert!(took < Duration::from_millis(5), "{took:?}");

    server.resume();
    stopped.store(false, Ordering::Relaxed);
    let back = until_redis_answers(limiter.as_ref(), &Key::from(100)).await;
    assert!(
        back < Duration::from_secs(3),
        "back to Redis {back:?} after SIGCONT"
    );
    done.store(true, Ordering::Relaxed);
    for c in clients {
        let (worst, _) = c.await.unwrap();
        assert!(
            worst < TIMEOUT + SLACK,
            "a check took {worst:?} with a {TIMEOUT:?} timeout"
        );
    }
    assert!(!backend.stats().breaker_open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_and_restarted_redis_is_used_again_with_its_scripts_reloaded() {
    let server = RedisServer::start();
    let backend = RedisBackend::exact(config(&server)).await.unwrap();
    // Five a day: the window is aligned to Redis `TIME`, and a wall-clock
    // window boundary inside the run would admit a second window's quota.
    let rule = Rule::new("tenant", Quota::per_day(5)).fixed_window();
    let limiter = backend.limiter(&rule).unwrap();
    let key = Key::new("acme");
    for _ in 0..2 {
        let (r, asked, _) = timed_check(&*limiter, &key).await;
        assert!(asked && r.unwrap().step.allowed);
    }
    server.kill();
    for _ in 0..10 {
        let (r, _, took) = timed_check(&*limiter, &key).await;
        assert!(r.unwrap().step.allowed, "fail-open while Redis is dead");
        assert!(took < TIMEOUT + SLACK, "{took:?}");
    }
    assert!(backend.stats().breaker_open);

    // A new, empty Redis on the same port: no scripts, no counts.
    server.restart();
    until_redis_answers(&*limiter, &key).await;
    let errors = backend.stats().errors;
    // The count restarted with the data; the limit holds again from here.
    let mut allowed = 1;
    loop {
        let (r, asked, _) = timed_check(&*limiter, &key).await;
        let o = r.unwrap();
        assert!(asked && !o.degraded, "{o:?}");
        if !o.step.allowed {
            break;
        }
        allowed += 1;
        assert!(allowed <= 5);
    }
    assert_eq!(allowed, 5);
    assert_eq!(
        backend.stats().errors,
        errors,
        "NOSCRIPT after the restart was handled without errors"
    );
    assert!(server.command_count("script|load") + server.command_count("eval") >= 1);
}

/// The breaker closes with every connection dialled again: with four
/// request-path connections, the checks right after it closed (round
/// robin, so each connection's first call since the outage) all reach
/// Redis; none fails on a connection the outage left lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_breaker_leaves_no_connection_lost_in_the_outage() {
    let server = RedisServer::start();
    let backend = RedisBackend::exact(config(&server).connections(4))
        .await
        .unwrap();
    let rule = Rule::new("tenant", Quota::per_minute(1_000)).fail_closed();
    let limiter = backend.limiter(&rule).unwrap();
    let key = Key::new("acme");
    for _ in 0..4 {
        let (r, asked, _) = timed_check(&*limiter, &key).await;
        assert!(asked && r.unwrap().step.allowed);
    }
    server.kill();
    let t = Instant::now();
    while !backend.stats().breaker_open {
        let _ = timed_check(&*limiter, &key).await;
        assert!(t.elapsed() < Duration::from_secs(10), "no breaker opened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A second of outage: every connection holds a failed dial.
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.restart();
    let t = Instant::now();
    while backend.stats().breaker_open {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the breaker never closed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let errors = backend.stats().errors;
    for i in 0..8 {
        let (r, asked, _) = timed_check(&*limiter, &key).await;
        assert!(asked, "check {i} did not reach Redis");
        assert!(r.is_ok(), "check {i} after the breaker closed: {r:?}");
    }
    assert_eq!(backend.stats().errors, errors);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_closed_rules_refuse_while_redis_is_away() {
    let server = RedisServer::start();
    let backend = RedisBackend::exact(config(&server)).await.unwrap();
    let limiter = backend
        .limiter(&Rule::new("payments", Quota::per_minute(100)).fail_closed())
        .unwrap();
    let key = Key::new("merchant-7");
    assert!(timed_check(&*limiter, &key).await.0.unwrap().step.allowed);
    server.stop();
    for _ in 0..5 {
        let (r, _, took) = timed_check(&*limiter, &key).await;
        assert!(r.is_err(), "fail-closed must refuse: {r:?}");
        assert!(took < TIMEOUT + SLACK, "{took:?}");
    }
    server.resume();
    until_redis_answers(&*limiter, &key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_fallback_allows_each_instance_its_share_of_the_quota() {
    let server = RedisServer::start();
    // Four instances share the quota of 40 per minute: 10 each while Redis
    // is away.
    let backend = RedisBackend::exact(config(&server).fleet_size(4))
        .await
        .unwrap();
    let limiter = backend
        .limiter(
            // A day's window: the local fallback's window is aligned to the
            // system clock, and a boundary inside the run would admit more.
            &Rule::new("search", Quota::per_day(40))
                .fixed_window()
                .local_fallback(),
        )
        .unwrap();
    let key = Key::new("10.0.0.1");
    server.kill();
    let mut allowed = 0;
    for _ in 0..30 {
        let o = timed_check(&*limiter, &key)
            .await
            .0
            .expect("the fallback decides");
        assert!(o.degraded);
        allowed += u64::from(o.step.allowed);
    }
    assert_eq!(allowed, 10);
    server.restart();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_while_redis_is_down_works_and_recovers() {
    let server = RedisServer::start();
    server.stop();
    let t = Instant::now();
    let backend = RedisBackend::exact(config(&server)).await.unwrap();
    assert!(
        t.elapsed() < TIMEOUT * 2 + SLACK,
        "startup waited {:?}",
        t.elapsed()
    );
    assert!(backend.stats().breaker_open, "starts with the breaker open");
    let limiter = backend
        .limiter(&Rule::new("ip", Quota::per_second(10)))
        .unwrap();
    let (r, asked, _) = timed_check(&*limiter, &Key::new("a")).await;
    assert!(!asked && r.unwrap().step.allowed);
    server.resume();
    until_redis_answers(&*limiter, &Key::new("a")).await;
}
