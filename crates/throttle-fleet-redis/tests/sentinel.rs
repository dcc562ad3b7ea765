//! Redis Sentinel under the limiter: three sentinels, a primary and a
//! replica, real processes. The primary is killed under load from four
//! instances; the sentinels promote the replica, and every instance follows
//! it. Meanwhile each rule's failure policy decides, and no request waits
//! longer than the fault suites allow (twice the command timeout); in
//! every window that starts after the promotion the fleet admits exactly
//! the quota.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use throttle_fleet_core::backend::{Backend as _, Limiter};
use throttle_fleet_core::{Key, Quota, Rule};
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::{RedisSentinel, SentinelSettings, check};

/// The fault suites' command timeout, and their bound: twice it.
const TIMEOUT: Duration = Duration::from_millis(250);
const INSTANCES: usize = 4;
/// Per fixed window of one second, over the fleet.
const QUOTA: u64 = 40;
const WINDOW_US: u64 = 1_000_000;

fn config(set: &RedisSentinel) -> RedisConfig {
    RedisConfig::sentinel(set.sentinel_urls(), set.service())
        .command_timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .probe_interval(Duration::from_millis(100))
}

fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// What one client saw.
#[derive(Debug, Default)]
struct Seen {
    /// Allowed by Redis, per window number (Redis time / window).
    allowed: BTreeMap<u64, u64>,
    /// The fail-closed rule's refusals.
    refused: u64,
    /// The fail-open rule's answers made by its policy.
    opened: u64,
    /// The longest a check took.
    slowest: Duration,
}

/// Checks both rules in turn, one request every few milliseconds (far
/// more than the quota), until `done`.
async fn client(exact: Arc<dyn Limiter>, open: Arc<dyn Limiter>, done: Arc<AtomicBool>) -> Seen {
    let (key, mut seen) = (Key::new("tenant-1"), Seen::default());
    while !done.load(Ordering::Relaxed) {
        let t = Instant::now();
        let (closed, _) = check(exact.as_ref(), &key).await;
        seen.slowest = seen.slowest.max(t.elapsed());
        match closed {
            Ok(o) if !o.degraded => {
                if o.step.allowed {
                    *seen.allowed.entry(o.at_us / WINDOW_US).or_default() += 1;
                }
            }
            Ok(o) => panic!("a fail-closed rule answered by its policy with an outcome: {o:?}"),
            Err(_) => seen.refused += 1,
        }
        let t = Instant::now();
        let (opened, _) = check(open.as_ref(), &key).await;
        seen.slowest = seen.slowest.max(t.elapsed());
        let o = opened.expect("a fail-open rule never refuses");
        if o.degraded {
            assert!(o.step.allowed, "fail-open allows: {o:?}");
            seen.opened += 1;
        }
        tokio::time::sleep(Duration::from_millis(4)).await;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_is_followed_to_the_promoted_replica_and_exact_counting_resumes() {
    the_primary_fails(Fault::Killed, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_primary_is_followed_to_the_promoted_replica_and_exact_counting_resumes() {
    the_primary_fails(Fault::Hung, None).await;
}

/// The same over TLS everywhere: the sentinels, the data nodes, the
/// replication and the sentinels' own links speak TLS only; the backend
/// knows the CA and reaches the primary the sentinels name with the
/// sentinels' TLS settings.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_a_killed_primary_is_followed_to_the_promoted_replica_and_exact_counting_resumes()
{
    let files = throttle_fleet_test_support::TlsFiles::generate();
    the_primary_fails(Fault::Killed, Some(files)).await;
}

/// How the primary fails.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// `SIGKILL`: its connections refused at once.
    Killed,
    /// `SIGSTOP`: its connections open, nothing answered; calls wait for
    /// the command timeout until the breaker opens.
    Hung,
}

async fn the_primary_fails(fault: Fault, tls: Option<Arc<throttle_fleet_test_support::TlsFiles>>) {
    let settings = SentinelSettings {
        tls: tls
            .as_ref()
            .map(throttle_fleet_test_support::ServerTls::new),
        ..SentinelSettings::default()
    };
    let set = Arc::new(
        tokio::task::spawn_blocking(move || RedisSentinel::start(settings))
            .await
            .unwrap(),
    );
    let config = |set: &RedisSentinel| {
        let config = config(set);
        #[cfg(feature = "tls")]
        if let Some(files) = &tls {
            return config.tls_ca_file(&files.ca);
        }
        config
    };
    let exact = Rule::new("sentinel-exact", Quota::per_second(QUOTA))
        .fixed_window()
        .fail_closed();
    let open = Rule::new("sentinel-open", Quota::per_second(1_000_000)).fail_open();
    let done = Arc::new(AtomicBool::new(false));
    let mut backends = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..INSTANCES {
        let backend = RedisBackend::exact(config(&set)).await.unwrap();
        let e: Arc<dyn Limiter> = backend.limiter(&exact).unwrap();
        let o: Arc<dyn Limiter> = backend.limiter(&open).unwrap();
        for _ in 0..2 {
            clients.push(tokio::spawn(client(e.clone(), o.clone(), done.clone())));
        }
        backends.push(backend);
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    for b in &backends {
        assert!(!b.stats().breaker_open, "{:?}", b.stats());
    }

    let old = set.primary_port().expect("the sentinels name the primary");
    let killed_at = Instant::now();
    let promoted = {
        let set = set.clone();
        tokio::task::spawn_blocking(move || {
            let primary = set.data_node_at(old).unwrap();
            match fault {
                Fault::Killed => primary.kill(),
                Fault::Hung => primary.stop(),
            }
            set.wait_failover(old, Duration::from_secs(30))
        })
        .await
        .unwrap()
    };
    // Seen by the test only after the sentinels made it: every window
    // starting later starts after the promotion.
    let promoted_us = unix_us();
    let failover = killed_at.elapsed();
    // Three whole windows after the promotion, and a little.
    tokio::time::sleep(Duration::from_millis(3_300)).await;
    let end_us = unix_us();
    done.store(true, Ordering::Relaxed);

    let mut all = Seen::default();
    for c in clients {
        let seen = c.await.unwrap();
        for (w, n) in seen.allowed {
            *all.allowed.entry(w).or_default() += n;
        }
        all.refused += seen.refused;
        all.opened += seen.opened;
        all.slowest = all.slowest.max(seen.slowest);
    }
    println!(
        "{fault:?}: failover from port {old} to {promoted} seen {failover:?} after the kill; slowest check {:?}; \
         {} refusals (fail-closed), {} allowed by policy (fail-open); allowed per window: {:?}",
        all.slowest, all.refused, all.opened, all.allowed
    );
    let after: Vec<u64> = all
        .allowed
        .keys()
        .copied()
        .filter(|w| w * WINDOW_US >= promoted_us && (w + 1) * WINDOW_US <= end_us)
        .collect();
    assert!(after.len() >= 2, "windows after the promotion: {after:?}");
    for w in after {
        assert_eq!(
            all.allowed[&w], QUOTA,
            "window {w} (after the promotion) admitted {} of a quota of {QUOTA}",
            all.allowed[&w]
        );
    }
    assert!(
        all.slowest <= 2 * TIMEOUT,
        "a check took {:?} during the failover",
        all.slowest
    );
    assert!(
        all.refused > 0,
        "the fail-closed rule never refused while no primary answered"
    );
    assert!(
        all.opened > 0,
        "the fail-open rule was never answered by its policy while no primary answered"
    );
    for b in &backends {
        let stats = b.stats();
        assert!(!stats.breaker_open, "{stats:?}");
    }
    let promoted = set.data_node_at(promoted).unwrap();
    assert!(promoted.command_count("evalsha") > 0);
}

/// The sentinels' own password (`requirepass`, here the default user's)
/// and the data nodes' differ: each is sent where it belongs, the
/// sentinels' from their URLs, the data nodes' from `password`. Without
/// the data nodes' password, or with a wrong one for the sentinels, the
/// backend does not start: the error names the field to mend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sentinels_and_the_data_nodes_have_passwords_of_their_own() {
    let set = tokio::task::spawn_blocking(|| RedisSentinel::start(SentinelSettings::default()))
        .await
        .unwrap();
    for node in set.data_nodes() {
        node.query(&["CONFIG", "SET", "masterauth", "data-secret"])
            .unwrap();
        node.query(&["CONFIG", "SET", "requirepass", "data-secret"])
            .unwrap();
    }
    for sentinel in set.sentinels() {
        sentinel
            .query(&["SENTINEL", "SET", set.service(), "auth-pass", "data-secret"])
            .unwrap();
        sentinel
            .query(&["ACL", "SETUSER", "default", "resetpass", ">sentinel-secret"])
            .unwrap();
    }
    let urls: Vec<String> = set
        .sentinels()
        .iter()
        .map(|s| format!("redis://:sentinel-secret@127.0.0.1:{}", s.port()))
        .collect();
    let rule = Rule::new("sentinel-auth", Quota::per_second(100)).fail_closed();
    let key = Key::new("tenant-1");

    let config = RedisConfig::sentinel(urls.clone(), set.service())
        .command_timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .password("data-secret");
    let backend = RedisBackend::exact(config).await.unwrap();
    let limiter = backend.limiter(&rule).unwrap();
    let (r, asked) = check(&*limiter, &key).await;
    let o = r.expect("with both passwords Redis decides");
    assert!(asked && !o.degraded && o.step.allowed, "{o:?}");

    let config = RedisConfig::sentinel(urls, set.service())
        .command_timeout(TIMEOUT)
        .connect_timeout(TIMEOUT);
    let Err(err) = RedisBackend::exact(config).await else {
        panic!("the backend started with credentials Redis refuses")
    };
    assert_eq!(err.field(), "redis.password", "{err}");

    let wrong: Vec<String> = set
        .sentinels()
        .iter()
        .map(|s| format!("redis://:not-it@127.0.0.1:{}", s.port()))
        .collect();
    let config = RedisConfig::sentinel(wrong, set.service())
        .command_timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .password("data-secret");
    let Err(err) = RedisBackend::exact(config).await else {
        panic!("the backend started with credentials Redis refuses")
    };
    assert_eq!(err.field(), "redis.sentinel", "{err}");
    assert!(!format!("{err}").contains("not-it"), "{err}");
}

/// With no sentinel answering at start, the backend starts all the same
/// (the breaker open, the policies deciding) and its discovery, a job of
/// the backend's scheduler, finds the primary once a sentinel answers:
/// under test time, at the first round the test lets run, not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primary_is_discovered_by_a_scheduler_job_once_a_sentinel_answers() {
    use throttle_fleet_redis::schedule::TestTime;

    let set = tokio::task::spawn_blocking(|| RedisSentinel::start(SentinelSettings::default()))
        .await
        .unwrap();
    for sentinel in set.sentinels() {
        sentinel.kill();
    }
    let time = TestTime::new(1_700_000_000_000_000);
    let interval = Duration::from_millis(100);
    let backend = RedisBackend::exact(config(&set).scheduler(time.scheduler()))
        .await
        .unwrap();
    assert!(backend.stats().breaker_open, "{:?}", backend.stats());
    time.advance(interval).await;
    assert!(backend.stats().breaker_open, "no sentinel answers yet");

    let set = tokio::task::spawn_blocking(move || {
        set.sentinels()[1].restart();
        set
    })
    .await
    .unwrap();
    // Wall time passes; the discovery waits for the test's time.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(backend.stats().breaker_open, "discovered off the scheduler");
    time.advance(interval).await;
    let stats = backend.stats();
    assert!(!stats.breaker_open, "{stats:?}");
    let limiter = backend
        .limiter(&Rule::new("discovered", Quota::per_second(10)).fail_closed())
        .unwrap();
    let (r, asked) = check(&*limiter, &Key::new("k")).await;
    assert!(asked && r.is_ok_and(|o| !o.degraded), "Redis decides");
    drop(set);
}
