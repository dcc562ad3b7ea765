//! The axum integration over real TCP: a real server on an ephemeral port and
//! a real HTTP client.

use std::net::Ipv4Addr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use throttle_fleet_axum::core::clock::ManualClock;
use throttle_fleet_axum::key::Header;
use throttle_fleet_axum::{ClientIp, MemoryBackend, Policy, Quota, Route, Rule, ThrottleLayer};
use throttle_fleet_test_support::http::{client, client_from, serve};
use throttle_fleet_test_support::unix_secs;

/// A memory backend on a clock that does not move: these tests count with
/// fixed windows, and a window aligned to the wall clock's minute could roll
/// over between two requests and refill.
fn frozen() -> MemoryBackend<ManualClock> {
    MemoryBackend::with_clock(ManualClock::new(1_000_000))
}

fn hello() -> Router {
    Router::new().route("/", get(|| async { "Hello, world!" }))
}

/// The example's policy: 10 per 60 s per client IP, token bucket, burst 10.
fn per_ip_10_per_minute() -> Policy {
    Policy::new().rule(
        Rule::new("ip", Quota::new(10, Duration::from_secs(60)).with_burst(10)).token_bucket(),
        ClientIp::default(),
    )
}

#[tokio::test]
async fn ten_pass_with_headers_then_a_429_with_retry_after_and_json() {
    let app = hello()
        .layer(ThrottleLayer::new(per_ip_10_per_minute(), MemoryBackend::default()).unwrap());
    let addr = serve(app, true).await;
    let c = client();

    for expected_remaining in (0..10).rev() {
        let r = c.get(addr, "/", &[]).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.header("x-ratelimit-limit"), Some("10"));
        assert_eq!(r.header_u64("x-ratelimit-remaining"), expected_remaining);
        let reset = r.header_u64("x-ratelimit-reset");
        assert!(reset >= unix_secs() && reset <= unix_secs() + 61, "{reset}");
        assert_eq!(&r.body[..], b"Hello, world!");
    }

    let r = c.get(addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let retry = r.header_u64("retry-after");
    assert!((1..=6).contains(&retry), "one token every 6 s: {retry}");
    assert_eq!(r.header("x-ratelimit-limit"), Some("10"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    let reset = r.header_u64("x-ratelimit-reset");
    assert!(reset > unix_secs() && reset <= unix_secs() + 61, "{reset}");
    let body = r.json();
    assert_eq!(body["error"], "RATE_LIMIT_EXCEEDED");
    assert_eq!(body["dimension"], "ip");
    assert_eq!(body["retry_after_seconds"], retry);
    assert_eq!(
        body["message"],
        format!("Quota exceeded. Please retry after {retry} seconds.")
    );
    assert_eq!(body.as_object().unwrap().len(), 4);
}

#[tokio::test]
async fn each_client_address_has_its_own_count() {
    let app = hello()
        .layer(ThrottleLayer::new(per_ip_10_per_minute(), MemoryBackend::default()).unwrap());
    let addr = serve(app, true).await;
    let (a, b) = (
        client_from(Ipv4Addr::new(127, 0, 0, 2)),
        client_from(Ipv4Addr::new(127, 0, 0, 3)),
    );
    for _ in 0..10 {
        assert_eq!(a.get(addr, "/", &[]).await.status, StatusCode::OK);
    }
    assert_eq!(
        a.get(addr, "/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    let r = b.get(addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("x-ratelimit-remaining"), Some("9"));
}

#[tokio::test]
async fn clones_and_routes_share_one_set_of_counters() {
    let layer = ThrottleLayer::new(
        Policy::new().rule(
            // A token bucket, not a fixed window: a window aligned to the
            // minute could roll over between the requests and refill.
            Rule::new("ip", Quota::per_minute(6).with_burst(6)).token_bucket(),
            ClientIp::default(),
        ),
        MemoryBackend::default(),
    )
    .unwrap();
    // Router::layer applies the layer to each route separately; a nested
    // router gets a clone. All must count together.
    let api = Router::new()
        .route("/v1/items", get(|| async { "items" }))
        .layer(layer.clone());
    let app = Router::new()
        .route("/a", get(|| async { "a" }))
        .route("/b", get(|| async { "b" }))
        .layer(layer)
        .nest("/api", api);
    let addr = serve(app, true).await;
    let c = client();
    let paths = ["/a", "/b", "/api/v1/items"];
    for i in 0..6 {
        let r = c.get(addr, paths[i % 3], &[]).await;
        assert_eq!(r.status, StatusCode::OK, "request {i}");
        assert_eq!(r.header_u64("x-ratelimit-remaining"), 5 - i as u64);
    }
    for path in paths {
        assert_eq!(
            c.get(addr, path, &[]).await.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{path}"
        );
    }
}

#[tokio::test]
async fn without_connect_info_client_ip_answers_500_naming_the_rule() {
    let app = hello()
        .layer(ThrottleLayer::new(per_ip_10_per_minute(), MemoryBackend::default()).unwrap());
    let addr = serve(app, false).await;
    let r = client().get(addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    let body = r.json();
    assert_eq!(body["error"], "RATE_LIMIT_KEY_MISSING");
    assert_eq!(body["dimension"], "ip");
}

#[tokio::test]
async fn route_only_limits_its_route_by_template() {
    let policy = Policy::new().rule(
        Rule::new("search", Quota::per_minute(2)).fixed_window(),
        Route::only(["/search/{term}"]),
    );
    let app = Router::new()
        .route("/", get(|| async { "home" }))
        .route("/search/{term}", get(|| async { "results" }))
        .layer(ThrottleLayer::new(policy, frozen()).unwrap());
    let addr = serve(app, true).await;
    let c = client();
    // Different terms, same template: one count.
    assert_eq!(c.get(addr, "/search/a", &[]).await.status, StatusCode::OK);
    assert_eq!(c.get(addr, "/search/b", &[]).await.status, StatusCode::OK);
    let r = c.get(addr, "/search/c", &[]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.json()["dimension"], "search");
    // Other routes skip the rule entirely: no headers, no limit.
    for _ in 0..5 {
        let r = c.get(addr, "/", &[]).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.header("x-ratelimit-limit"), None);
    }
    // Unrouted requests are not the search route either.
    assert_eq!(
        c.get(addr, "/nowhere", &[]).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn several_dimensions_all_must_allow_and_the_denial_names_one() {
    let policy = Policy::new()
        .rule(
            Rule::new("ip", Quota::per_minute(5)).fixed_window(),
            ClientIp::default(),
        )
        .rule(
            Rule::new("tenant", Quota::per_minute(2)).token_bucket(),
            Header::new("x-api-key"),
        );
    let app = hello().layer(ThrottleLayer::new(policy, frozen()).unwrap());
    let addr = serve(app, true).await;
    let c = client();
    let acme = [("x-api-key", "acme")];
    for left in [1, 0] {
        let r = c.get(addr, "/", &acme).await;
        assert_eq!(r.status, StatusCode::OK);
        // The most restrictive rule's figures: the tenant's.
        assert_eq!(r.header("x-ratelimit-limit"), Some("2"));
        assert_eq!(r.header_u64("x-ratelimit-remaining"), left);
    }
    for _ in 0..5 {
        let r = c.get(addr, "/", &acme).await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.json()["dimension"], "tenant");
    }
    // The five denied requests did not use up the address's quota: three of
    // five are left for other tenants from the same address.
    for (tenant, ip_left) in [("b", 2), ("c", 1), ("d", 0)] {
        let r = c.get(addr, "/", &[("x-api-key", tenant)]).await;
        assert_eq!(r.status, StatusCode::OK, "tenant {tenant}");
        if ip_left == 0 {
            assert_eq!(r.header("x-ratelimit-limit"), Some("5"));
            assert_eq!(r.header_u64("x-ratelimit-remaining"), 0);
        }
    }
    let r = c.get(addr, "/", &[("x-api-key", "e")]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.json()["dimension"], "ip");
    // A missing API key is rejected before anything is counted.
    let r = c.get(addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["dimension"], "tenant");
}
