//! A fail-closed approximate rule closes at once: new keys are refused as
//! soon as the node holding their bucket is known down (its connection
//! lost, or no answer to a heartbeat within the command timeout), not at
//! the next flush, which here is an hour away; and it serves again once
//! the node answers. Real `redis-server`, real clock: the assertions are
//! on what decided (no flush had failed yet), not on how long it took
//! (that is a published figure, `benches/gateway-fleet`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{Key, Quota, Rule};
use throttle_fleet_redis::{ApproximateBackend, ApproximateOptions, RedisBackend, RedisConfig};
use throttle_fleet_test_support::{RedisServer, check};

/// What a new key's first request gets.
#[derive(Debug, PartialEq)]
enum Got {
    Admitted,
    Denied,
    Refused,
}

async fn answer(limiter: &dyn Limiter, key: &Key) -> Got {
    let (result, _) = check(limiter, key).await;
    match result {
        Ok(o) if o.step.allowed => Got::Admitted,
        Ok(_) => Got::Denied,
        Err(_) => Got::Refused,
    }
}

/// A fail-closed rule whose span-end flushes are an hour apart, on a
/// backend with the default timeouts.
async fn fail_closed(server: &RedisServer) -> (ApproximateBackend, Arc<dyn Limiter>) {
    let config = RedisConfig::standalone(server.url());
    let backend = RedisBackend::approximate(config, ApproximateOptions::default().spans(2))
        .await
        .unwrap();
    let rule = Rule::new("ip", Quota::new(1_000_000, Duration::from_secs(7_200)))
        .fixed_window()
        .fail_closed();
    let limiter = throttle_fleet_core::Backend::limiter(&backend, &rule).unwrap();
    (backend, limiter)
}

/// New keys, one after another, until one is refused (at most `within`);
/// returns how many were admitted before it.
async fn new_keys_until_refused(limiter: &dyn Limiter, first: u64, within: Duration) -> u64 {
    let deadline = Instant::now() + within;
    let mut admitted = 0;
    for i in first.. {
        match answer(limiter, &Key::from(i)).await {
            Got::Refused => return admitted,
            Got::Admitted => admitted += 1,
            Got::Denied => panic!("a new key denied with the fleet empty"),
        }
        assert!(
            Instant::now() < deadline,
            "new keys still admitted {within:?} after Redis went away ({admitted} of them)"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_closes_new_keys_before_any_flush_fails() {
    let server = RedisServer::start();
    let (backend, limiter) = fail_closed(&server).await;
    // Served while Redis is up, on the new-key credit.
    assert_eq!(
        answer(limiter.as_ref(), &Key::new("before")).await,
        Got::Admitted
    );
    // (The watch's subscription is made in the background.)
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill();
    let admitted = new_keys_until_refused(limiter.as_ref(), 0, Duration::from_secs(5)).await;
    let stats = backend.approximate_stats();
    println!("killed: {admitted} new keys admitted before the first refusal");
    assert_eq!(
        stats.failed_flushes, 0,
        "refused on a failed flush, not on the lost connection"
    );
    server.restart();
    wait_until_served(limiter.as_ref()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_closes_new_keys_within_a_heartbeat() {
    let server = RedisServer::start();
    let (backend, limiter) = fail_closed(&server).await;
    assert_eq!(
        answer(limiter.as_ref(), &Key::new("before")).await,
        Got::Admitted
    );
    server.stop();
    let admitted = new_keys_until_refused(limiter.as_ref(), 0, Duration::from_secs(5)).await;
    println!("hung: {admitted} new keys admitted before the first refusal");
    assert_eq!(backend.approximate_stats().failed_flushes, 0);
    server.resume();
    wait_until_served(limiter.as_ref()).await;
}

/// New keys are admitted again soon after Redis answers again.
async fn wait_until_served(limiter: &dyn Limiter) {
    let woke = Instant::now();
    for i in 1_000_000u64.. {
        if answer(limiter, &Key::from(i)).await == Got::Admitted {
            println!("served again {:?} after Redis came back", woke.elapsed());
            return;
        }
        assert!(
            woke.elapsed() < Duration::from_secs(5),
            "new keys still refused 5 s after Redis came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
