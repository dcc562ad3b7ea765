//! The goal: a Redis Cluster over TLS end to end (clients, the cluster
//! bus and replication: `tls-cluster yes`, `tls-replication yes`; no plain
//! port), three primaries with a replica each, the backend knowing one
//! seed and reaching the nodes it discovers with the seed's TLS settings.
//! Four instances (four exact-mode backends in this process) check two
//! keys on one primary, under a fail-open and a fail-closed rule; that
//! primary is killed. Meanwhile no check waits longer than twice the
//! command timeout and each rule's failure policy decides; once the
//! instances have followed the promotion (their next probe round reads the
//! new slot table: within a probe interval of it, given slack here for a
//! loaded machine), Redis decides every check again, and in every window
//! that starts after that the fleet admits exactly the quota. The
//! failover's time, from the kill to the first exact decision on the
//! promoted replica, is printed (and measured in the bench).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{Key, Quota, Rule, backend::Backend};
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::{RedisCluster, ServerTls, TlsFiles, check};

/// The command timeout: the bound a check may wait is twice this.
const TIMEOUT: Duration = Duration::from_millis(250);
/// `cluster-node-timeout`: failure detection takes about this long.
const NODE_TIMEOUT: Duration = Duration::from_millis(500);
/// The rules' quota: this many per window.
const QUOTA: u64 = 20;
const WINDOW: Duration = Duration::from_secs(1);
/// Whole windows checked after the promotion.
const WINDOWS_AFTER: u64 = 3;
const INSTANCES: usize = 4;
/// How often an instance probes a node whose breaker is open: a probe
/// round reads the slot table first.
const PROBE: Duration = Duration::from_millis(100);
/// How long after the test saw the promotion the instances may still
/// decide by policy: a probe round, and slack for a loaded machine.
const FOLLOW: Duration = Duration::from_millis(100 + 400);

/// The Redis key of a fixed-window rule's key, as the backend writes it.
fn redis_key(rule: &str, key: &Key) -> String {
    let mut hex = String::new();
    key.write_hex(&mut hex);
    format!("rl:{{{rule}:{hex}}}:fw")
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Got {
    Admitted,
    Denied,
    Refused,
}

/// One check as an instance saw it.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// Which rule: `open`, `closed`, or `probe` (a quota never reached, on
    /// the same primary, checked by one instance: its first admission by
    /// Redis after the kill is the failover's end).
    rule: &'static str,
    got: Got,
    degraded: bool,
    /// The decision's time (Redis's, or this process's when degraded), µs
    /// since the epoch.
    at_us: u64,
    /// When it was asked, since the test started.
    asked: Duration,
    waited: Duration,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_quota_through_a_failover_of_a_cluster_over_tls() {
    let files = TlsFiles::generate();
    let cluster = tokio::task::spawn_blocking({
        let tls = ServerTls::new(&files);
        move || RedisCluster::start_tls(3, 1, NODE_TIMEOUT, tls)
    })
    .await
    .unwrap();
    assert!(cluster.nodes().iter().all(|n| n.starts_with("rediss://")));

    let quota = Quota::new(QUOTA, WINDOW);
    let open_rule = Rule::new("open", quota).fixed_window().fail_open();
    let closed_rule = Rule::new("closed", quota).fixed_window().fail_closed();
    let open_key = Key::new("acme");
    let victim = cluster
        .primary_for_key(&redis_key("open", &open_key))
        .port();
    let on_victim = |rule: &str| {
        (0u64..)
            .map(Key::from)
            .find(|k| cluster.primary_for_key(&redis_key(rule, k)).port() == victim)
            .unwrap()
    };
    let closed_key = on_victim("closed");
    let probe_key = on_victim("probe");
    let probe_rule = Rule::new("probe", Quota::new(1_000_000, Duration::from_secs(60)))
        .fixed_window()
        .fail_open();

    type Checked = (&'static str, Arc<dyn Limiter>, Key);
    let mut limiters: Vec<Vec<Checked>> = Vec::new();
    let mut backends = Vec::new();
    for _ in 0..INSTANCES {
        let config = RedisConfig::cluster([cluster.nodes()[0].clone()])
            .tls_ca_file(&files.ca)
            .command_timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            .probe_interval(PROBE);
        let backend = RedisBackend::exact(config).await.unwrap();
        let mut checked = vec![
            ("open", backend.limiter(&open_rule).unwrap(), open_key),
            ("closed", backend.limiter(&closed_rule).unwrap(), closed_key),
        ];
        if limiters.is_empty() {
            checked.push(("probe", backend.limiter(&probe_rule).unwrap(), probe_key));
        }
        limiters.push(checked);
        backends.push(backend);
    }

    let start = Instant::now();
    let seen = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let done = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for checked in limiters {
        let (seen, done) = (seen.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                for (rule, limiter, key) in &checked {
                    let asked = start.elapsed();
                    let (result, _) = check(limiter.as_ref(), key).await;
                    let waited = start.elapsed() - asked;
                    let (got, degraded, at_us) = match result {
                        Ok(o) if o.step.allowed => (Got::Admitted, o.degraded, o.at_us),
                        Ok(o) => (Got::Denied, o.degraded, o.at_us),
                        Err(_) => (Got::Refused, true, unix_us()),
                    };
                    seen.lock().push(Seen {
                        rule,
                        got,
                        degraded,
                        at_us,
                        asked,
                        waited,
                    });
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
    }

    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed_at = start.elapsed();
    cluster.node_by_port(victim).kill();
    let cluster = tokio::task::spawn_blocking(move || {
        let promoted = cluster.wait_for_failover(victim).port();
        (cluster, promoted)
    })
    .await
    .unwrap();
    let (cluster, promoted) = cluster;
    let promoted_at = start.elapsed();
    let followed_us = unix_us() + FOLLOW.as_micros() as u64;
    let followed_at = promoted_at + FOLLOW;
    assert_ne!(promoted, victim);
    // Whole windows after the instances followed, and a little more.
    let first_window = followed_us.div_ceil(WINDOW.as_micros() as u64);
    let end_us = (first_window + WINDOWS_AFTER) * WINDOW.as_micros() as u64;
    tokio::time::sleep(Duration::from_micros(end_us - unix_us()) + WINDOW / 5).await;
    done.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    drop(backends);
    drop(cluster);

    let seen = seen.lock().clone();
    let slowest = seen.iter().map(|s| s.waited).max().unwrap();
    let first_exact = seen
        .iter()
        .filter(|s| s.rule == "probe" && s.asked >= killed_at && !s.degraded)
        .map(|s| s.asked + s.waited - killed_at)
        .min()
        .expect("no exact decision after the kill");
    let last_degraded = seen
        .iter()
        .filter(|s| s.degraded)
        .map(|s| s.asked + s.waited)
        .max()
        .unwrap_or_default();
    println!(
        "{} checks; slowest {slowest:?}; killed at {killed_at:?}, promotion seen at {promoted_at:?}; \
         first exact decision {first_exact:?} after the kill, last decision by policy {:?} after it \
         (cluster-node-timeout {NODE_TIMEOUT:?})",
        seen.len(),
        last_degraded.saturating_sub(killed_at)
    );

    // No check waited longer than twice the command timeout.
    assert!(slowest <= 2 * TIMEOUT, "a check waited {slowest:?}");
    // Each rule's failure policy decided what Redis could not.
    let during: Vec<&Seen> = seen.iter().filter(|s| s.degraded).collect();
    assert!(
        !during.is_empty(),
        "the failover went unnoticed: nothing degraded"
    );
    for s in &seen {
        if s.rule != "closed" {
            assert_ne!(s.got, Got::Refused, "fail-open refused: {s:?}");
        } else {
            assert!(
                !(s.degraded && s.got == Got::Admitted),
                "fail-closed admitted without Redis: {s:?}"
            );
        }
    }
    assert!(
        seen.iter()
            .any(|s| s.rule == "closed" && s.got == Got::Refused),
        "the fail-closed rule never refused while its primary was gone"
    );
    // Once followed, Redis decides every check.
    if let Some(s) = seen.iter().find(|s| s.degraded && s.asked >= followed_at) {
        panic!("decided by policy {FOLLOW:?} after the promotion was seen: {s:?}");
    }
    // Every window that starts after that: exactly the quota, across the
    // four instances.
    for rule in ["open", "closed"] {
        for w in first_window..first_window + WINDOWS_AFTER {
            let window = w * WINDOW.as_micros() as u64..(w + 1) * WINDOW.as_micros() as u64;
            let in_window: Vec<&Seen> = seen
                .iter()
                .filter(|s| s.rule == rule && window.contains(&s.at_us))
                .collect();
            let admitted = in_window.iter().filter(|s| s.got == Got::Admitted).count() as u64;
            let degraded = in_window.iter().filter(|s| s.degraded).count();
            assert_eq!(
                (admitted, degraded),
                (QUOTA, 0),
                "rule {rule}, window {w} ({} checks)",
                in_window.len()
            );
        }
    }
}
