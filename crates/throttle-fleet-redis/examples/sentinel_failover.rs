//! A Sentinel failover as the limiter sees it: how long from the primary's
//! kill to the first exact decision on the promoted replica.
//! `benches/sentinel-failover/run.sh` runs it.
//!
//! Each round starts a primary, a replica and three sentinels (real
//! processes, `down-after-milliseconds` = `DOWN_AFTER_MS`, default 500;
//! `failover-timeout` 2 s), and `INSTANCES` exact backends (default 4) on
//! them (command timeout 250 ms, probe interval `PROBE_MS`, default 100),
//! each with one client checking a fail-closed rule every 2 ms. After a
//! second of traffic the primary is killed (`SIGKILL`). Printed per round:
//! when the sentinels named the promoted replica (polled every 10 ms), and
//! when the last instance had its first exact decision there (a check
//! started after the kill that Redis answered), both from the kill; then
//! min / median / max over `ROUNDS` rounds (default 10).
//!
//! ```sh
//! ROUNDS=10 cargo run --example sentinel_failover -p throttle-fleet-redis
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use throttle_fleet_core::backend::{Backend as _, Limiter};
use throttle_fleet_core::{Answer, Key, Quota, Rule};
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::{RedisSentinel, SentinelSettings};

fn var(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Checks every 2 ms until `done`; returns when, after `killed` was set,
/// a check started then was first answered by Redis.
async fn client(
    limiter: Arc<dyn Limiter>,
    killed: Arc<parking_lot::Mutex<Option<Instant>>>,
    done: Arc<AtomicBool>,
) -> Option<Duration> {
    let key = Key::new("tenant-1");
    let mut first = None;
    while !done.load(Ordering::Relaxed) {
        let started = Instant::now();
        let decided = match limiter.acquire(&key, 1, u64::MAX) {
            Answer::Ready(_) => false,
            Answer::Pending(f) => f.await.is_ok_and(|o| !o.degraded),
        };
        let at = *killed.lock();
        if first.is_none()
            && decided
            && let Some(at) = at
            && started > at
        {
            first = Some(at.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    first
}

async fn round(down_after: Duration, probe: Duration, instances: u64) -> (Duration, Duration) {
    let settings = SentinelSettings {
        down_after,
        ..SentinelSettings::default()
    };
    let set = Arc::new(
        tokio::task::spawn_blocking(move || RedisSentinel::start(settings))
            .await
            .unwrap(),
    );
    let config = RedisConfig::sentinel(set.sentinel_urls(), set.service())
        .command_timeout(Duration::from_millis(250))
        .connect_timeout(Duration::from_millis(250))
        .probe_interval(probe);
    let rule = Rule::new("failover", Quota::per_second(1_000_000)).fail_closed();
    let (killed, done) = (Arc::default(), Arc::new(AtomicBool::new(false)));
    let (mut backends, mut clients) = (Vec::new(), Vec::new());
    for _ in 0..instances {
        let backend = RedisBackend::exact(config.clone()).await.unwrap();
        let limiter: Arc<dyn Limiter> = backend.limiter(&rule).unwrap();
        clients.push(tokio::spawn(client(
            limiter,
            Arc::clone(&killed),
            done.clone(),
        )));
        backends.push(backend);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let old = set.primary_port().expect("the sentinels name a primary");
    let at = Instant::now();
    set.data_node_at(old).unwrap().kill();
    *killed.lock() = Some(at);
    let switched = {
        let set = set.clone();
        tokio::task::spawn_blocking(move || {
            set.wait_failover(old, Duration::from_secs(30));
            at.elapsed()
        })
        .await
        .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let all_back = backends.iter().all(|b| !b.stats().breaker_open);
        if (all_back && at.elapsed() > switched + Duration::from_millis(500))
            || Instant::now() > deadline
        {
            break;
        }
    }
    done.store(true, Ordering::Relaxed);
    let mut last = Duration::ZERO;
    for c in clients {
        let first = c
            .await
            .unwrap()
            .expect("an instance never decided on Redis again");
        last = last.max(first);
    }
    (switched, last)
}

fn summary(mut figures: Vec<Duration>) -> String {
    figures.sort();
    let ms = |d: Duration| d.as_millis();
    format!(
        "{} / {} / {} ms",
        ms(figures[0]),
        ms(figures[(figures.len() - 1) / 2]),
        ms(figures[figures.len() - 1])
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds = var("ROUNDS", 10).max(1);
    let down_after = Duration::from_millis(var("DOWN_AFTER_MS", 500));
    let probe = Duration::from_millis(var("PROBE_MS", 100));
    let instances = var("INSTANCES", 4).max(1);
    let (mut switches, mut firsts) = (Vec::new(), Vec::new());
    for r in 1..=rounds {
        let (switched, first) = round(down_after, probe, instances).await;
        println!(
            "round {r}: sentinels switched {} ms, every instance deciding on the new primary {} ms after the kill",
            switched.as_millis(),
            first.as_millis()
        );
        switches.push(switched);
        firsts.push(first);
    }
    println!(
        "down-after-milliseconds {} ms, probe interval {} ms, {instances} instances, {rounds} kills: \
         sentinels switched {}; first exact decision on the new primary (the last instance's) {} \
         (min / median / max, from the kill)",
        down_after.as_millis(),
        probe.as_millis(),
        summary(switches),
        summary(firsts)
    );
}
