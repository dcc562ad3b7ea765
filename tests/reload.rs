//! Replacing a running layer's rules over real HTTP: counts carry over for
//! rules whose name and algorithm stay, a new quota applies from the next
//! request, a changed algorithm starts afresh, and a policy that does not
//! validate is refused while the old rules keep running. On the memory
//! backend and the Redis exact mode.

use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use throttle_fleet_axum::core::backend::Backend;
use throttle_fleet_axum::core::rule_set::Carried;
use throttle_fleet_axum::key::Global;
use throttle_fleet_axum::{MemoryBackend, Policy, Quota, Rule, ThrottleLayer};
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;
use throttle_fleet_test_support::http::{HttpClient, client, serve};

fn policy(limit: u64, fixed: bool) -> Policy {
    let rule = Rule::new("all", Quota::per_minute(limit));
    let rule = if fixed {
        rule.fixed_window()
    } else {
        rule.sliding_window_log()
    };
    Policy::new().rule(rule, Global)
}

/// How many of `n` requests pass.
async fn passed(c: &HttpClient, addr: SocketAddr, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(c.get(addr, "/", &[]).await.status == StatusCode::OK);
    }
    ok
}

async fn counts_carry_over(backend: impl Backend + Clone) {
    let layer = ThrottleLayer::new(policy(5, true), backend.clone()).unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer.clone());
    let addr = serve(app, true).await;
    let c = client();
    assert_eq!(passed(&c, addr, 3).await, 3);

    // A new quota: the 3 already admitted still count against it.
    let reloaded = layer.reload(policy(8, true), backend.clone()).unwrap();
    assert_eq!(reloaded.rules, [("all".to_owned(), Carried::Requoted)]);
    assert_eq!(
        passed(&c, addr, 10).await,
        5,
        "8 in all, 3 of them before the reload"
    );
    let r = c.get(addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header("x-ratelimit-limit"), Some("8"));

    // The same rule again: the same counts.
    let same = layer.reload(policy(8, true), backend.clone()).unwrap();
    assert_eq!(same.rules, [("all".to_owned(), Carried::Same)]);
    assert_eq!(passed(&c, addr, 1).await, 0);

    // An invalid policy is refused whole; the running rule stays.
    let err = layer.reload(policy(0, true), backend.clone()).unwrap_err();
    assert_eq!(err.field(), "quota.limit");
    assert_eq!(passed(&c, addr, 1).await, 0);
    assert_eq!(layer.rules().rule(0).quota().limit(), 8);

    // Another algorithm cannot read the old states: it starts afresh.
    let fresh = layer.reload(policy(8, false), backend).unwrap();
    assert_eq!(fresh.rules, [("all".to_owned(), Carried::Fresh)]);
    assert_eq!(passed(&c, addr, 10).await, 8);
}

#[tokio::test]
async fn memory_counts_carry_over_a_reload() {
    counts_carry_over(MemoryBackend::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_exact_counts_carry_over_a_reload() {
    let server = RedisServer::start();
    let backend = RedisBackend::exact(RedisConfig::standalone(server.url()))
        .await
        .unwrap();
    counts_carry_over(backend).await;
}
