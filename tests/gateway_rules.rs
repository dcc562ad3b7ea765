//! The gateway's rule features seen from HTTP clients over TCP, on the memory
//! backend and on Redis: tiers (a premium key gets its own quota, and its
//! headers and 429 say so), shadow rules (they count and report, and never
//! deny) and response-aware cost (only failed logins count).
//!
//! Every quota is per hour on a token bucket or a sliding log, so nothing
//! refills while a test runs; the Redis backends read a manual clock.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::{HeaderMap, StatusCode};
use throttle_fleet_axum::core::backend::Backend;
use throttle_fleet_axum::key::Header;
use throttle_fleet_axum::{Limit, MemoryBackend, Policy, Quota, Rule};
use throttle_fleet_redis::schedule::TestTime;
use throttle_fleet_redis::{LeaseOptions, RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;
use throttle_fleet_test_support::http::{Reply, client};

const T0: u64 = 1_800_000_000_000_000;

/// Answers with the status asked for in `x-status` (200 by default).
async fn echo_status(headers: HeaderMap) -> StatusCode {
    headers
        .get("x-status")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK)
}

async fn app(policy: Policy, backend: impl Backend) -> SocketAddr {
    let layer = throttle_fleet_axum::ThrottleLayer::new(policy, backend).unwrap();
    let app = Router::new().route("/", get(echo_status)).layer(layer);
    throttle_fleet_test_support::http::serve(app, false).await
}

async fn get_as(addr: SocketAddr, key: &str, status: u16) -> Reply {
    let status = status.to_string();
    client()
        .get(addr, "/", &[("x-api-key", key), ("x-status", &status)])
        .await
}

fn redis(server: &RedisServer) -> RedisConfig {
    RedisConfig::standalone(server.url())
        .scheduler(TestTime::new(T0).scheduler())
        .command_timeout(Duration::from_secs(2))
}

// ---------------------------------------------------------------- tiers

fn tiered() -> Policy {
    let rule = Rule::new("tenant", Quota::per_hour(2))
        .token_bucket()
        .with_tiers([("premium-key", Quota::per_hour(5))]);
    Policy::new().rule(rule, Header::new("x-api-key"))
}

/// A premium key gets five, every other key two; each key's headers and 429
/// report its own quota.
async fn tiers_hold(addr: SocketAddr) {
    for left in (0..5).rev() {
        let r = get_as(addr, "premium-key", 200).await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        assert_eq!(r.header_u64("x-ratelimit-limit"), 5, "{r:?}");
        assert_eq!(r.header_u64("x-ratelimit-remaining"), left, "{r:?}");
    }
    let r = get_as(addr, "premium-key", 200).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{r:?}");
    assert_eq!(r.header_u64("x-ratelimit-limit"), 5);
    // One token every 12 minutes at 5 per hour.
    assert_eq!(r.header_u64("retry-after"), 720);

    for key in ["standard-1", "standard-2"] {
        for left in (0..2).rev() {
            let r = get_as(addr, key, 200).await;
            assert_eq!(r.status, StatusCode::OK, "{r:?}");
            assert_eq!(r.header_u64("x-ratelimit-limit"), 2, "{r:?}");
            assert_eq!(r.header_u64("x-ratelimit-remaining"), left, "{r:?}");
        }
        let r = get_as(addr, key, 200).await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{r:?}");
        assert_eq!(r.header_u64("x-ratelimit-limit"), 2);
        assert_eq!(r.header_u64("retry-after"), 1_800);
        assert_eq!(r.json()["dimension"], "tenant");
    }
}

#[tokio::test]
async fn tiers_on_the_memory_backend() {
    tiers_hold(app(tiered(), MemoryBackend::default()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiers_in_the_exact_mode() {
    let server = RedisServer::start();
    let backend = RedisBackend::exact(redis(&server)).await.unwrap();
    tiers_hold(app(tiered(), backend).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiers_in_the_leased_mode() {
    let server = RedisServer::start();
    let backend = RedisBackend::leased(redis(&server), LeaseOptions::default())
        .await
        .unwrap();
    tiers_hold(app(tiered(), backend).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approximate_mode_refuses_tiers_by_name() {
    let server = RedisServer::start();
    let backend = RedisBackend::approximate(redis(&server), Default::default())
        .await
        .unwrap();
    let rule = Rule::new("tenant", Quota::per_hour(2))
        .fixed_window()
        .with_tiers([("premium-key", Quota::per_hour(5))]);
    let err = throttle_fleet_axum::ThrottleLayer::new(
        Policy::new().rule(rule, Header::new("x-api-key")),
        backend,
    )
    .unwrap_err();
    assert_eq!(
        (err.rule(), err.field()),
        (Some("tenant"), "tiers"),
        "{err}"
    );
}

// --------------------------------------------------------------- shadow

fn shadowed(header: bool) -> Policy {
    Policy::new()
        .rule(
            Rule::new("tenant", Quota::per_hour(100)).token_bucket(),
            Header::new("x-api-key"),
        )
        .rule(
            Rule::new("trial", Quota::per_hour(2))
                .sliding_window_log()
                .shadow(),
            Header::new("x-api-key"),
        )
        .shadow_header(header)
}

/// The shadow rule would deny the third request: every request passes, the
/// enforced rule counts all of them (its cost is not given back), and the
/// response names the shadow rule only when asked to.
async fn shadow_never_denies(addr: SocketAddr, header: bool) {
    for n in 1..=6u64 {
        let r = get_as(addr, "k", 200).await;
        assert_eq!(r.status, StatusCode::OK, "request {n}: {r:?}");
        // The headers are the enforced rule's, never the shadow rule's.
        assert_eq!(r.header_u64("x-ratelimit-limit"), 100, "{r:?}");
        assert_eq!(r.header_u64("x-ratelimit-remaining"), 100 - n, "{r:?}");
        let shadow = r.header("x-ratelimit-shadow");
        match (n > 2, header) {
            (true, true) => assert_eq!(shadow, Some("trial"), "request {n}"),
            _ => assert_eq!(shadow, None, "request {n}"),
        }
    }
}

#[tokio::test]
async fn shadow_on_the_memory_backend() {
    shadow_never_denies(app(shadowed(true), MemoryBackend::default()).await, true).await;
    shadow_never_denies(app(shadowed(false), MemoryBackend::default()).await, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_in_the_exact_mode() {
    let server = RedisServer::start();
    let backend = RedisBackend::exact(redis(&server)).await.unwrap();
    shadow_never_denies(app(shadowed(true), backend).await, true).await;
}

// ------------------------------------------------- response-aware cost

fn failed_logins() -> Policy {
    let counted = |s: StatusCode| s == StatusCode::UNAUTHORIZED || s == StatusCode::FORBIDDEN;
    Policy::new().limit(
        Limit::new(
            Rule::new("failed-logins", Quota::per_hour(3)).sliding_window_log(),
            Header::new("x-api-key"),
        )
        .charge_when(counted),
    )
}

/// Successes are refunded, 401s and 403s counted: after any number of 200s
/// a user still has three failures, and the fourth is refused.
async fn only_failures_count(addr: SocketAddr) {
    for _ in 0..10 {
        let r = get_as(addr, "alice", 200).await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
    for status in [401, 403, 401] {
        let r = get_as(addr, "alice", status).await;
        assert_eq!(r.status.as_u16(), status, "{r:?}");
    }
    let r = get_as(addr, "alice", 200).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{r:?}");
    assert_eq!(r.json()["dimension"], "failed-logins");
    // Another user is untouched.
    assert_eq!(
        get_as(addr, "bob", 401).await.status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn response_aware_cost_on_the_memory_backend() {
    only_failures_count(app(failed_logins(), MemoryBackend::default()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_aware_cost_in_the_exact_mode() {
    let server = RedisServer::start();
    let backend = RedisBackend::exact(redis(&server)).await.unwrap();
    only_failures_count(app(failed_logins(), backend).await).await;
}
