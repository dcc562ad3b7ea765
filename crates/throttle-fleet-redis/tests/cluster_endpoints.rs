//! How the backend finds a Redis Cluster's nodes: from one seed (a
//! managed service's configuration endpoint) it learns every primary, and
//! keeps finding them after the seed's own node is killed; nodes that
//! announce a host name instead of an address
//! (`cluster-preferred-endpoint-type hostname`, Redis 7 and Valkey) are
//! reached by that name.

use std::time::{Duration, Instant};

use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{Key, Quota, Rule};
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::{RedisCluster, check};

/// One cluster test at a time (each runs a cluster and a load of its own).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

fn config(seed: String) -> RedisConfig {
    RedisConfig::cluster([seed])
        // Not tighter: a check that times out but ran in Redis would count
        // one admission the test cannot see.
        .command_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(1))
        .probe_interval(Duration::from_millis(100))
}

/// Three a day, in a fixed window: the exact mode aligns the window to Redis
/// `TIME`, and a wall-clock window boundary inside a key's run would admit a
/// second window's quota; a day's boundary is all but never inside it.
fn rule() -> Rule {
    Rule::new("tenant", Quota::per_day(3))
        .fixed_window()
        .fail_open()
}

/// The ports of the primaries holding keys of `rule()` now.
fn primaries_with_keys(cluster: &RedisCluster) -> usize {
    cluster
        .primaries()
        .iter()
        .filter(|p| p.cli(&["DBSIZE"]).trim().parse::<u64>().unwrap_or(0) > 0)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_seed_finds_every_primary_and_outlives_its_own_node() {
    let _one = SERIAL.lock().await;
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 1))
        .await
        .unwrap();
    // The one seed: the first primary, as a managed service's single
    // configuration endpoint would be.
    let seed = cluster.primaries()[0].port();
    let backend = RedisBackend::exact(config(format!("redis://127.0.0.1:{seed}")))
        .await
        .unwrap();
    let limiter = throttle_fleet_core::backend::Backend::limiter(&backend, &rule()).unwrap();
    for i in 0..60u64 {
        assert_eq!(
            admitted_by_redis(limiter.as_ref(), &Key::from(i)).await,
            3,
            "key {i}"
        );
    }
    assert_eq!(primaries_with_keys(&cluster), 3, "every primary was found");
    let degraded_before = backend.stats().degraded;
    assert_eq!(degraded_before, 0);

    // The seed's node dies; its replica takes over. Everything is found
    // again without it: the table is read from the primaries known.
    cluster.node_by_port(seed).kill();
    let (cluster, promoted) = tokio::task::spawn_blocking(move || {
        let promoted = cluster.wait_for_failover(seed).port();
        (cluster, promoted)
    })
    .await
    .unwrap();
    for i in 1_000..1_060u64 {
        assert_eq!(
            admitted_by_redis(limiter.as_ref(), &Key::from(i)).await,
            3,
            "key {i} after the seed's node was killed"
        );
    }
    let serving: Vec<u16> = cluster.primaries().iter().map(|p| p.port()).collect();
    assert!(!serving.contains(&seed), "{serving:?}");
    assert_eq!(primaries_with_keys(&cluster), 3);

    // The promoted replica never ran the scripts (the cache is not
    // replicated): its first calls met NOSCRIPT, each sent again once,
    // whole, with EVAL; none loaded with SCRIPT LOAD.
    let node = cluster.node_by_port(promoted);
    let noscript = node
        .info("errorstats")
        .lines()
        .find_map(|l| l.strip_prefix("errorstat_NOSCRIPT:count="))
        .and_then(|n| n.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let evals = node.command_count("eval");
    eprintln!("promoted replica: {noscript} NOSCRIPT, {evals} EVAL");
    assert!(noscript >= 1, "the promoted replica's cache was empty");
    assert_eq!(evals, noscript, "one EVAL per NOSCRIPT");
    assert_eq!(node.command_count("script|load"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_announce_a_host_name_are_reached_by_it() {
    let _one = SERIAL.lock().await;
    let probe = tokio::task::spawn_blocking(throttle_fleet_test_support::RedisServer::start)
        .await
        .unwrap();
    let info = probe.info("server");
    drop(probe);
    let valkey = info.contains("server_name:valkey");
    let major: u32 = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .and_then(|v| v.split('.').next()?.trim().parse().ok())
        .unwrap_or(0);
    if !valkey && major < 7 {
        // Host names in the cluster bus came with Redis 7.0.
        eprintln!("skipped: Redis {major} announces no host names");
        return;
    }
    let cluster = tokio::task::spawn_blocking(|| {
        RedisCluster::start_with_args(
            3,
            0,
            Duration::from_millis(1000),
            &[
                "--cluster-announce-hostname",
                "localhost",
                "--cluster-preferred-endpoint-type",
                "hostname",
            ],
        )
    })
    .await
    .unwrap();
    let port = cluster.primaries()[0].port();
    let slots = cluster.primaries()[0].cli(&["CLUSTER", "SLOTS"]);
    assert!(
        slots.lines().any(|l| l == "localhost"),
        "the nodes announce their host name:\n{slots}"
    );
    // The seed is a name too, as a configuration endpoint is.
    let backend = RedisBackend::exact(config(format!("redis://localhost:{port}")))
        .await
        .unwrap();
    let limiter = throttle_fleet_core::backend::Backend::limiter(&backend, &rule()).unwrap();
    for i in 0..60u64 {
        assert_eq!(
            admitted_by_redis(limiter.as_ref(), &Key::from(i)).await,
            3,
            "key {i}"
        );
    }
    assert_eq!(
        primaries_with_keys(&cluster),
        3,
        "every primary was reached"
    );
    assert_eq!(backend.stats().degraded, 0);
    assert_eq!(backend.stats().errors, 0, "no MOVED went unfollowed");
}
