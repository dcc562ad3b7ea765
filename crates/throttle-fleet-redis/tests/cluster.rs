//! The backend on a real Redis Cluster: exact-mode checks spread over the
//! slots, a primary killed mid-traffic fails open until its replica is
//! promoted, after which limits hold again; a hung primary leaves the keys
//! of the others to Redis, in the exact and the approximate mode.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{Key, Quota, Rule};
use throttle_fleet_redis::{ApproximateOptions, RedisBackend, RedisConfig};
use throttle_fleet_test_support::{RedisCluster, check};

/// The Redis key of a fixed-window rule's key, as the backend writes it.
fn redis_key(rule: &str, key: &Key) -> String {
    let mut hex = String::new();
    key.write_hex(&mut hex);
    format!("rl:{{{rule}:{hex}}}:fw")
}

/// Checks `key` until Redis (not a failure policy) says no; returns how many
/// Redis allowed.
/// One cluster test at a time: each runs a cluster and a load of its own,
/// and what they measure (checks decided within a command timeout) should
/// not depend on how many others share the two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
    let _one = SERIAL.lock().await;
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 1))
        .await
        .unwrap();
    let config = RedisConfig::cluster(cluster.nodes())
        .command_timeout(Duration::from_millis(250))
        .connect_timeout(Duration::from_millis(250))
        .probe_interval(Duration::from_millis(100));
    let backend = RedisBackend::exact(config).await.unwrap();
    // Five a day: the window is aligned to Redis `TIME`, and a wall-clock
    // window boundary inside a key's run would admit a second window's quota.
    let rule = Rule::new("tenant", Quota::per_day(5))
        .fixed_window()
        .fail_open();
    let limiter = throttle_fleet_core::backend::Backend::limiter(&backend, &rule).unwrap();

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
    let _one = SERIAL.lock().await;
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
        .command_timeout(Duration::from_millis(250))
        .connect_timeout(Duration::from_millis(100))
        .probe_interval(Duration::from_millis(100));
    let backend = RedisBackend::exact(config).await.unwrap();
    let rule = Rule::new("tenant", Quota::per_minute(1_000_000))
        .fixed_window()
        .fail_open();
    let limiter = throttle_fleet_core::backend::Backend::limiter(&backend, &rule).unwrap();
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

/// Where the approximate mode wrote each key's counts: the port of the
/// primary holding the hash whose fields name the key (read from every
/// primary, not computed the way the backend computes it).
fn primary_of_keys(cluster: &RedisCluster, rule: &str) -> std::collections::HashMap<String, u16> {
    let mut at = std::collections::HashMap::new();
    for primary in cluster.primaries() {
        let hashes = primary.cli(&["KEYS", &format!("rl:{{{rule}:*}}:a:*")]);
        for hash in hashes.lines().filter(|l| !l.is_empty()) {
            for field in primary.cli(&["HKEYS", hash]).lines() {
                let key = field.split('.').next().unwrap_or_default();
                if !key.is_empty() {
                    at.insert(key.to_owned(), primary.port());
                }
            }
        }
    }
    at
}

/// One approximate rule's keys on a 16-primary cluster: its writes reach
/// every primary (0.1's eight buckets per rule reached eight at most).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_approximate_rule_writes_to_every_primary_of_sixteen() {
    let _one = SERIAL.lock().await;
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(16, 0))
        .await
        .unwrap();
    // Patient: this is about where the writes go, not how fast (sixteen
    // nodes' first connections, on a machine running other suites).
    let config = RedisConfig::cluster(cluster.nodes())
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2));
    let options = ApproximateOptions::default().flush_timeout(Duration::from_secs(5));
    let backend = RedisBackend::approximate(config, options).await.unwrap();
    let rule = Rule::new("tenant", Quota::per_minute(1_000_000)).fixed_window();
    let limiter = throttle_fleet_core::backend::Backend::limiter(&backend, &rule).unwrap();
    for k in 0..2_000u64 {
        assert!(check(limiter.as_ref(), &Key::from(k)).await.0.is_ok());
    }
    // A failed bucket keeps its counts for the next flush.
    let mut flushed = false;
    for _ in 0..5 {
        flushed = backend.flush().await;
        if flushed {
            break;
        }
    }
    assert!(flushed, "five flushes in a row failed");
    let at = primary_of_keys(&cluster, "tenant");
    assert_eq!(at.len(), 2_000, "every key's counts are in Redis");
    let mut per_primary = std::collections::BTreeMap::new();
    for port in at.values() {
        *per_primary.entry(*port).or_insert(0u32) += 1;
    }
    println!("keys per primary: {per_primary:?}");
    assert_eq!(
        per_primary.len(),
        16,
        "one rule's writes reached {} of 16 primaries",
        per_primary.len()
    );
    backend.shutdown().await.unwrap();
}

/// A fail-closed approximate rule while one primary hangs: keys whose
/// bucket lives on a healthy primary are never refused, the hung primary's
/// keys are (the policy holds for them), and they are served again within
/// 2 s of the primary waking up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approximate_one_hung_primary_closes_only_its_buckets() {
    let _one = SERIAL.lock().await;
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
        .command_timeout(Duration::from_millis(250))
        .connect_timeout(Duration::from_millis(100))
        .probe_interval(Duration::from_millis(100));
    let options = ApproximateOptions::default().flush_timeout(Duration::from_millis(100));
    let backend = RedisBackend::approximate(config, options).await.unwrap();
    let rule = Rule::new("tenant", Quota::per_second(1_000_000))
        .fixed_window()
        .fail_closed();
    let limiter = throttle_fleet_core::backend::Backend::limiter(&backend, &rule).unwrap();
    let keys: Vec<Key> = (0..200u64).map(Key::from).collect();
    // Rounds over every key: (refused on healthy, checks on healthy, refused on hung).
    let rounds = |secs: u64, on_hung: &[bool]| {
        let (limiter, keys, on_hung) = (limiter.clone(), keys.clone(), on_hung.to_vec());
        async move {
            let (mut refused_healthy, mut healthy, mut refused_hung) = (0u64, 0u64, 0u64);
            let deadline = Instant::now() + Duration::from_secs(secs);
            while Instant::now() < deadline {
                for (k, &h) in keys.iter().zip(&on_hung) {
                    let refused = check(limiter.as_ref(), k).await.0.is_err();
                    if h {
                        refused_hung += u64::from(refused);
                    } else {
                        healthy += 1;
                        refused_healthy += u64::from(refused);
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (refused_healthy, healthy, refused_hung)
        }
    };
    // Flushes reach every primary first.
    let (refused, _, refused_hung) = rounds(1, &vec![false; keys.len()]).await;
    assert_eq!((refused, refused_hung), (0, 0), "refused before any fault");
    assert!(backend.flush().await);
    let at = primary_of_keys(&cluster, "tenant");
    let port_of = |k: &Key| {
        let mut hex = String::new();
        k.write_hex(&mut hex);
        at[&hex]
    };
    let hung = port_of(&keys[0]);
    let on_hung: Vec<bool> = keys.iter().map(|k| port_of(k) == hung).collect();
    assert!(
        on_hung.iter().any(|&h| h) && on_hung.iter().any(|&h| !h),
        "every key on one primary"
    );

    let node = cluster.node_by_port(hung);
    node.stop();
    let (refused_healthy, healthy, refused_hung) = rounds(3, &on_hung).await;
    node.resume();
    let woke = Instant::now();
    println!(
        "approximate, one of three primaries hung 3 s, fail closed: {refused_healthy} of {healthy} \
         checks refused for keys on the healthy primaries; {refused_hung} refused on the hung one"
    );
    assert_eq!(
        refused_healthy, 0,
        "the hung primary closed the keys of the healthy ones"
    );
    assert!(
        refused_hung > 0,
        "fail closed: the hung primary's keys refused"
    );

    let hung_key = keys.iter().zip(&on_hung).find(|(_, h)| **h).unwrap().0;
    while check(limiter.as_ref(), hung_key).await.0.is_err() {
        assert!(
            woke.elapsed() < Duration::from_secs(2),
            "the hung primary's keys still refused 2 s after it woke"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("served again {:?} after the primary woke", woke.elapsed());
    backend.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_slots_hold_on_every_primary_and_a_hung_one_refuses_only_its_own_keys() {
    let _one = SERIAL.lock().await;
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
        .command_timeout(Duration::from_millis(250))
        .connect_timeout(Duration::from_millis(100))
        .probe_interval(Duration::from_millis(100));
    let backend = RedisBackend::exact(config).await.unwrap();
    let rule = Rule::concurrency("inflight", 2).fail_closed();
    let limiter = throttle_fleet_core::backend::Backend::limiter(&backend, &rule).unwrap();
    let keys: Vec<Key> = (0..60u64).map(Key::from).collect();
    let owner: Vec<u16> = keys
        .iter()
        .map(|k| {
            let mut hex = String::new();
            k.write_hex(&mut hex);
            cluster
                .primary_for_key(&format!("rl:{{inflight:{hex}}}:cz"))
                .port()
        })
        .collect();
    assert!(
        owner.iter().collect::<std::collections::HashSet<_>>().len() == 3,
        "the keys reach every primary"
    );
    // On every primary: two slots per key, the third refused by Redis.
    let mut held = Vec::new();
    for k in &keys {
        for expect in [true, true, false] {
            let (result, asked) = check(limiter.as_ref(), k).await;
            let outcome = result.unwrap();
            assert!(asked && !outcome.degraded, "decided by Redis");
            assert_eq!(outcome.step.allowed, expect, "{k:?}");
            if expect {
                held.push((*k, outcome));
            }
        }
    }
    for (k, outcome) in held.drain(..) {
        limiter.refund(&k, 1, &outcome);
    }
    // Once the releases have landed, every key has its two slots again.
    for k in &keys {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let (a, _) = check(limiter.as_ref(), k).await;
            let (b, _) = check(limiter.as_ref(), k).await;
            let (a, b) = (a.unwrap(), b.unwrap());
            let both = a.step.allowed && b.step.allowed;
            for o in [a, b].into_iter().filter(|o| o.step.allowed) {
                limiter.refund(k, 1, &o);
            }
            if both {
                break;
            }
            assert!(Instant::now() < deadline, "{k:?} never got its slots back");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // A hung primary: its keys are refused (fail closed); the others' keys
    // are still decided by Redis.
    let hung = owner[0];
    let node = cluster.node_by_port(hung);
    node.stop();
    for (k, &port) in keys.iter().zip(&owner) {
        let (result, _) = check(limiter.as_ref(), k).await;
        if port == hung {
            assert!(result.is_err(), "{k:?} on the hung primary: {result:?}");
        } else {
            let outcome = result.unwrap();
            assert!(outcome.step.allowed && !outcome.degraded, "{k:?}");
            limiter.refund(k, 1, &outcome);
        }
    }
    node.resume();
}
