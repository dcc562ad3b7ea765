//! The exact mode on a real Redis Cluster (3 primaries, 3 replicas): checks
//! spread over the slots, and a primary killed mid-traffic fails open until
//! its replica is promoted, after which limits hold again.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use support::RedisCluster;
use throttle_core::{Acquire, Key, Limiter, Outcome, Quota, Rule, Unavailable};
use throttle_redis::{RedisBackend, RedisConfig};

async fn check(limiter: &dyn Limiter, key: &Key) -> (Result<Outcome, Unavailable>, bool) {
    match limiter.acquire(key, 1) {
        Acquire::Ready(r) => (r, false),
        Acquire::Pending(f) => (f.await, true),
    }
}

/// The Redis key of a fixed-window rule's key, as the backend writes it.
fn redis_key(rule: &str, key: &Key) -> String {
    let mut hex = String::new();
    key.write_hex(&mut hex);
    format!("rl:{{{rule}:{hex}}}:fw")
}

/// Checks `key` until Redis (not a failure policy) says no; returns how many
/// Redis allowed.
async fn admitted_by_redis(limiter: &dyn Limiter, key: &Key) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut allowed = 0;
    loop {
        assert!(
            Instant::now() < deadline,
            "Redis did not answer for {key:?}"
        );
        match check(limiter, key).await {
            (Ok(o), true) if !o.degraded => {
                if !o.step.allowed {
                    return allowed;
                }
                allowed += 1;
            }
            // The breaker is open or the slot is moving: wait for Redis.
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_across_slots_and_through_a_failover() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 1))
        .await
        .unwrap();
    let config = RedisConfig::cluster(cluster.nodes())
        .command_timeout(Duration::from_millis(250))
        .connect_timeout(Duration::from_millis(250))
        .probe_interval(Duration::from_millis(100));
    let backend = RedisBackend::exact(config).await.unwrap();
    let rule = Rule::new("tenant", Quota::per_minute(5))
        .fixed_window()
        .fail_open();
    let limiter = throttle_core::Backend::limiter(&backend, &rule).unwrap();

    // Checks spread over many keys, hence over every primary.
    for i in 0..120u64 {
        assert_eq!(
            admitted_by_redis(limiter.as_ref(), &Key::from(i)).await,
            5,
            "key {i}"
        );
    }
    for primary in cluster.primaries() {
        let keys: u64 = primary.cli(&["DBSIZE"]).trim().parse().unwrap();
        assert!(keys >= 10, "{} holds {keys} keys", primary.port());
    }

    // Kill the primary of one key while 8 clients keep checking.
    let victim_key = Key::new("acme");
    let victim = cluster
        .primary_for_key(&redis_key("tenant", &victim_key))
        .port();
    let done = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicU64::new(0));
    let checks = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for c in 0..8u64 {
        let (limiter, done, refused, checks) = (
            limiter.clone(),
            done.clone(),
            refused.clone(),
            checks.clone(),
        );
        clients.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !done.load(Ordering::Relaxed) {
                let (r, _) = check(
                    limiter.as_ref(),
                    &Key::from(1_000 + c * 1_000_000 + i % 500),
                )
                .await;
                checks.fetch_add(1, Ordering::Relaxed);
                if r.is_err() {
                    refused.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
                tokio::task::yield_now().await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    cluster.node_by_port(victim).kill();
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.wait_for_failover(victim);
        cluster
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    done.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    assert_eq!(
        refused.load(Ordering::Relaxed),
        0,
        "fail-open: nothing refused during the failover"
    );
    assert!(checks.load(Ordering::Relaxed) > 100);

    // The promoted replica serves the slot, and the limit holds there again.
    let promoted = cluster
        .primary_for_key(&redis_key("tenant", &victim_key))
        .port();
    assert_ne!(promoted, victim);
    assert_eq!(admitted_by_redis(limiter.as_ref(), &victim_key).await, 5);
    assert_eq!(
        admitted_by_redis(limiter.as_ref(), &Key::new("fresh-after-failover")).await,
        5
    );
}

/// The goal: while one of three primaries hangs, at least 99% of the
/// checks for keys on the healthy primaries are still decided by Redis (each
/// primary has its own connections and breaker), and the hung primary's
/// keys are decided by Redis again within 2 s of it waking up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hung_primary_leaves_the_keys_of_the_others_to_redis() {
    // Without full coverage required, the healthy primaries go on serving
    // their slots once the hung one is judged failed (with the default,
    // Redis itself answers CLUSTERDOWN for every key from then on).
    let cluster = tokio::task::spawn_blocking(|| {
        RedisCluster::start_with_args(
            3,
            0,
            Duration::from_millis(1_000),
            &["--cluster-require-full-coverage", "no"],
        )
    })
    .await
    .unwrap();
    let config = RedisConfig::cluster(cluster.nodes())
        .command_timeout(Duration::from_millis(100))
        .connect_timeout(Duration::from_millis(100))
        .probe_interval(Duration::from_millis(100));
    let backend = RedisBackend::exact(config).await.unwrap();
    let rule = Rule::new("tenant", Quota::per_minute(1_000_000))
        .fixed_window()
        .fail_open();
    let limiter = throttle_core::Backend::limiter(&backend, &rule).unwrap();
    // 300 keys over every primary; which primary serves each.
    let keys: Vec<Key> = (0..300u64).map(Key::from).collect();
    let owner: Vec<u16> = keys
        .iter()
        .map(|k| cluster.primary_for_key(&redis_key("tenant", k)).port())
        .collect();
    for k in &keys {
        assert!(check(limiter.as_ref(), k).await.1, "asked Redis");
    }
    let hung = owner[0];
    let node = cluster.node_by_port(hung);
    node.stop();
    // 3 s of checks over all keys, round after round.
    let (mut healthy, mut healthy_by_redis, mut on_hung) = (0u64, 0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let round = keys.iter().zip(&owner).map(|(k, &port)| {
            let limiter = limiter.clone();
            async move { (port, check(limiter.as_ref(), k).await) }
        });
        for (port, (result, _)) in futures_util::future::join_all(round).await {
            let by_redis = matches!(result, Ok(o) if !o.degraded);
            if port == hung {
                on_hung += 1;
            } else {
                healthy += 1;
                healthy_by_redis += u64::from(by_redis);
            }
        }
    }
    node.resume();
    let woke = Instant::now();
    let hung_key = &keys[0];
    loop {
        if matches!(check(limiter.as_ref(), hung_key).await.0, Ok(o) if !o.degraded) {
            break;
        }
        assert!(
            woke.elapsed() < Duration::from_secs(2),
            "the hung primary's keys still not decided by Redis 2 s after it woke"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "the hung primary's keys went back to Redis {:?} after it woke",
        woke.elapsed()
    );
    let share = healthy_by_redis as f64 / healthy as f64;
    println!(
        "one of three primaries hung 3 s: {healthy_by_redis} of {healthy} checks for keys on the \
         healthy primaries decided by Redis ({:.2}%); {on_hung} checks on the hung one",
        100.0 * share
    );
    println!("{:?}", backend.stats());
    assert!(
        share >= 0.99,
        "{healthy_by_redis} of {healthy}: the hung primary took the others' keys along"
    );
    assert!(backend.stats().breaker_open || backend.stats().breaker_opened > 0);
}
