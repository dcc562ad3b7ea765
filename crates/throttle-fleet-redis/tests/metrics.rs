//! What the Redis backends report through the `metrics` facade, against a
//! real `redis-server`: errors and timeouts, the breaker gauge while Redis
//! is hung (SIGSTOP) and killed, flushes and their latency, the node
//! estimate, leases.
//!
//! The recorder is the process's and reads values without draining them
//! (metrics-util's `DebuggingRecorder` zeroes a gauge when it is read, so a
//! gauge that went back to 0 could not be told from one read before). Each
//! test's series are its own: labelled by its server's address or its
//! rule's name.
#![cfg(feature = "metrics")]

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use metrics::{
    Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString, Unit,
};
use metrics_util::registry::{AtomicStorage, Registry};
use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{Quota, Rule};
use throttle_fleet_redis::metrics::{
    BREAKER_OPEN, BREAKER_OPENED, ERRORS, FLUSH_SECONDS, FLUSHES, LEASE_CALLS, LEASE_TOKENS,
    NODES_ESTIMATE,
};
use throttle_fleet_redis::schedule::TestTime;
use throttle_fleet_redis::{ApproximateOptions, LeaseOptions, RedisBackend, RedisConfig};
use throttle_fleet_test_support::{RedisServer, check};

/// A recorder over a registry of atomics, read without resetting.
struct Live(Arc<Registry<Key, AtomicStorage>>);

impl Recorder for Live {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.0
            .get_or_create_counter(key, |c| Counter::from_arc(c.clone()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.0
            .get_or_create_gauge(key, |g| Gauge::from_arc(g.clone()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.0
            .get_or_create_histogram(key, |h| Histogram::from_arc(h.clone()))
    }
}

fn registry() -> &'static Registry<Key, AtomicStorage> {
    static REGISTRY: OnceLock<Arc<Registry<Key, AtomicStorage>>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let registry = Arc::new(Registry::atomic());
        metrics::set_global_recorder(Live(registry.clone())).unwrap();
        registry
    })
}

fn key(name: &'static str, labels: &[(&'static str, &str)]) -> Key {
    let labels: Vec<Label> = labels
        .iter()
        .map(|(k, v)| Label::new(*k, v.to_string()))
        .collect();
    Key::from_parts(name, labels)
}

fn counter(name: &'static str, labels: &[(&'static str, &str)]) -> u64 {
    registry()
        .get_counter(&key(name, labels))
        .map_or(0, |c| c.load(Ordering::SeqCst))
}

fn gauge(name: &'static str, labels: &[(&'static str, &str)]) -> Option<f64> {
    registry()
        .get_gauge(&key(name, labels))
        .map(|g| f64::from_bits(g.load(Ordering::SeqCst)))
}

fn histogram(name: &'static str, labels: &[(&'static str, &str)]) -> Vec<f64> {
    registry()
        .get_histogram(&key(name, labels))
        .map_or_else(Vec::new, |h| h.data())
}

fn config(server: &RedisServer) -> RedisConfig {
    RedisConfig::standalone(server.url())
        .command_timeout(Duration::from_millis(50))
        .connect_timeout(Duration::from_millis(50))
        .probe_interval(Duration::from_millis(50))
}

/// Checks one request on key `k`; what it reports is the point, not its
/// answer.
async fn check_k(limiter: &dyn Limiter) {
    let _ = check(limiter, &throttle_fleet_core::Key::new("k")).await;
}

/// Checks until `done` holds, for up to 20 s (a real process's fault: how
/// long it takes depends on the machine, so the deadline is generous and
/// nothing is asserted about the time).
async fn until(limiter: &dyn Limiter, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(20), "never: {what}");
        check_k(limiter).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_gauge_follows_a_hung_then_killed_redis_and_failures_are_counted() {
    registry();
    let server = RedisServer::start();
    let node = format!("127.0.0.1:{}", server.port());
    let node = [("node", node.as_str())];
    let backend = RedisBackend::exact(config(&server)).await.unwrap();
    let rule = Rule::new("breaker", Quota::per_second(1_000)).fail_open();
    let limiter = throttle_fleet_core::backend::Backend::limiter(&backend, &rule).unwrap();
    check_k(limiter.as_ref()).await;
    assert_eq!(gauge(BREAKER_OPEN, &node), Some(0.0), "registered, closed");
    let timeouts = counter(ERRORS, &[("kind", "timeout")]);

    server.stop();
    until(limiter.as_ref(), "the breaker opens", || {
        backend.stats().breaker_open
    })
    .await;
    assert_eq!(gauge(BREAKER_OPEN, &node), Some(1.0));
    assert_eq!(counter(BREAKER_OPENED, &node), 1);
    // Three consecutive failures open the breaker; a hung Redis times out.
    assert!(counter(ERRORS, &[("kind", "timeout")]) >= timeouts + 3);

    server.resume();
    until(limiter.as_ref(), "the breaker closes", || {
        !backend.stats().breaker_open
    })
    .await;
    assert_eq!(gauge(BREAKER_OPEN, &node), Some(0.0));

    let errors = counter(ERRORS, &[("kind", "error")]);
    server.kill();
    until(limiter.as_ref(), "the breaker opens again", || {
        backend.stats().breaker_open
    })
    .await;
    assert_eq!(gauge(BREAKER_OPEN, &node), Some(1.0));
    assert_eq!(counter(BREAKER_OPENED, &node), 2);
    // A dead Redis refuses connections: errors, not timeouts.
    assert!(counter(ERRORS, &[("kind", "error")]) > errors);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushes_their_latency_and_the_node_estimate_are_reported() {
    registry();
    let server = RedisServer::start();
    let time = TestTime::new(1_700_000_000_000_000);
    let config = RedisConfig::standalone(server.url())
        .scheduler(time.scheduler())
        .command_timeout(Duration::from_millis(500));
    let options = ApproximateOptions::default().flush_timeout(Duration::from_millis(100));
    let backend = RedisBackend::approximate(config, options).await.unwrap();
    let rule = Rule::new("flushed", Quota::per_minute(600)).sliding_window_counter();
    let limiter = throttle_fleet_core::backend::Backend::limiter(&backend, &rule).unwrap();
    let rule = [("rule", "flushed")];
    let ok = [("rule", "flushed"), ("result", "ok")];
    let failed = [("rule", "flushed"), ("result", "failed")];

    for _ in 0..5 {
        check_k(limiter.as_ref()).await;
    }
    assert!(backend.flush().await);
    assert_eq!(counter(FLUSHES, &ok), 1);
    let took = histogram(FLUSH_SECONDS, &rule);
    assert_eq!(took.len(), 1, "{took:?}");
    assert!(
        took[0] > 0.0 && took[0] < 0.1,
        "{took:?} s for a 100 ms timeout"
    );
    // One instance alone: the fleet's total is its own.
    assert_eq!(gauge(NODES_ESTIMATE, &rule), Some(1.0));

    check_k(limiter.as_ref()).await;
    server.stop();
    assert!(!backend.flush().await);
    server.resume();
    assert_eq!(counter(FLUSHES, &failed), 1);
    assert_eq!(counter(FLUSHES, &ok), 1);
    assert_eq!(
        histogram(FLUSH_SECONDS, &rule).len(),
        1,
        "failed flushes are not timed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_calls_and_tokens_are_counted() {
    registry();
    let server = RedisServer::start();
    let time = TestTime::new(1_700_000_000_000_000);
    let config = RedisConfig::standalone(server.url()).scheduler(time.scheduler());
    let backend = RedisBackend::leased(config, LeaseOptions::default())
        .await
        .unwrap();
    let rule = Rule::new("leases", Quota::per_minute(6_000)).token_bucket();
    let limiter = throttle_fleet_core::backend::Backend::limiter(&backend, &rule).unwrap();
    for _ in 0..200 {
        check_k(limiter.as_ref()).await;
    }
    backend.shutdown().await.unwrap();
    let stats = backend.lease_stats();
    assert!(stats.fetches >= 2, "{stats:?}");
    assert_eq!(counter(LEASE_CALLS, &[("rule", "leases")]), stats.fetches);
    assert_eq!(counter(LEASE_TOKENS, &[("rule", "leases")]), stats.leased);
    assert!(stats.leased >= 200, "{stats:?}");
}
