//! The exact mode's local deny cache under a denial flood: a key far over its
//! limit costs Redis about one call per instance and retry-after period, not
//! one per request, and counts stay exact.

use std::time::Duration;

use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{Answer, Key, Quota, Rule, backend::Backend};
use throttle_fleet_redis::schedule::TestTime;
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;

const T0: u64 = 1_800_000_000_000_000;

async fn allowed(limiter: &dyn Limiter, key: &Key) -> bool {
    match limiter.acquire(key, 1, u64::MAX) {
        Answer::Pending(f) => f.await.expect("redis answered").step.allowed,
        Answer::Ready(r) => {
            let o = r.expect("decided");
            assert!(!o.degraded);
            o.step.allowed
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_flood_costs_one_call_per_instance_and_retry_period() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let clock = time.clock();
    // 10 per minute, a burst of 10: one token every 6 s once drained.
    let rule = Rule::new("ip", Quota::per_minute(10).with_burst(10)).token_bucket();
    let mut fleet = Vec::new();
    for _ in 0..4 {
        let config = RedisConfig::standalone(server.url())
            .scheduler(time.scheduler())
            .command_timeout(Duration::from_secs(2));
        let backend = RedisBackend::exact(config).await.unwrap();
        let limiter = backend.limiter(&rule).unwrap();
        fleet.push((backend, limiter));
    }
    server.first_reads(4);
    server.cli(&["CONFIG", "RESETSTAT"]);
    let key = Key::new("203.0.113.9");
    // 1,000 requests per second for 10 s, round-robin over the four.
    let mut admitted = 0;
    for i in 0..10_000u64 {
        clock.set(T0 + i * 1_000);
        let (_, limiter) = &fleet[(i % 4) as usize];
        admitted += u64::from(allowed(limiter.as_ref(), &key).await);
    }
    let calls = server.command_count("evalsha");
    let local: u64 = fleet.iter().map(|(b, _)| b.stats().denied_locally).sum();
    println!("admitted {admitted}, {calls} script calls for 10,000 checks, {local} denied locally");
    // Exact: the full burst, then one token at 6 s (none yet at 12 s).
    assert_eq!(admitted, 11);
    // Each admitted request went to Redis; each instance asks again once
    // per retry-after period (from the start, 6 s, 12 s): three at most.
    let asked = 10_000 - local;
    assert!(asked <= admitted + 4 * 3, "{asked} checks went to Redis");
    // (The first call also met NOSCRIPT once and was sent again.)
    assert!(calls <= asked + 1, "{calls} calls for {asked} checks");
}
