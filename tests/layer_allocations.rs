//! Heap allocations per request through an axum router, bare or behind a
//! limiter, allowed and denied: ours (memory backend, client IP, with and
//! without success headers) next to `tower_governor` and `throttle-kit` on
//! the same router, the same client and the same work; and ours shedding a
//! request for capacity (a 503), which no peer does.
//!
//! The request goes through the router as axum's server hands it over
//! (`ConnectInfo<SocketAddr>` in its extensions, an empty body) and the
//! response body is read to its end, so the count is the router's and the
//! layer's, not the connection's (hyper allocates the same whatever the
//! layer). The figure is the allocations (and reallocations) of one
//! request, the least of several, minus the bare router's.
//!
//! No test harness (`harness = false`): `main` counts on the only thread
//! there is, so no harness thread can allocate inside a counted call; the
//! runtime is current-thread and the futures are polled on this thread.

use std::alloc::System;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;
use throttle_fleet_axum::InFlightLimit;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use throttle_fleet_axum::HttpResponder;
use throttle_fleet_axum::core::Class;
use throttle_fleet_axum::key::Global;
use throttle_fleet_axum::{
    ClientIp, Limit, MemoryBackend, Policy, Quota, RequestHead, Rule, ThrottleLayer,
};
use tower::{Service, ServiceExt};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Requests per subject; the least count of one request is kept.
const REQUESTS: usize = 50;

fn hello() -> Router {
    Router::new().route("/", get(|| async { "Hello, World!" }))
}

fn ours(quota: Quota, responder: HttpResponder) -> Router {
    let policy = Policy::new().rule(Rule::new("ip", quota), ClientIp::default());
    let layer = ThrottleLayer::with_responder(policy, MemoryBackend::default(), responder)
        .expect("a valid policy");
    hello().layer(layer)
}

/// A concurrency rule of 3 with a reserve of 1, every request sheddable
/// (its share is 1), and a request to `/hold` already holding that share
/// (its handler never ends): every request to `/` is shed.
fn ours_shedding(rt: &tokio::runtime::Runtime) -> Router {
    let rule = Rule::concurrency(
        "backend",
        InFlightLimit {
            reserve: 1,
            ..InFlightLimit::new(3)
        },
    );
    let limit = Limit::new(rule, Global).class_by(|_: &RequestHead<'_>| Class::Sheddable);
    let layer = ThrottleLayer::new(Policy::new().limit(limit), MemoryBackend::default())
        .expect("a valid policy");
    let router = hello()
        .route("/hold", get(std::future::pending::<&'static str>))
        .layer(layer);
    let mut holder = router.clone();
    rt.spawn(async move {
        let mut req = Request::get("/hold")
            .body(Body::empty())
            .expect("a request");
        req.extensions_mut().insert(ConnectInfo(peer()));
        let _ = ServiceExt::<Request<Body>>::ready(&mut holder)
            .await
            .expect("ready")
            .call(req)
            .await;
    });
    rt.block_on(tokio::task::yield_now());
    router
}

fn governor(allowed: bool, headers: bool) -> Router {
    let mut config = GovernorConfigBuilder::default();
    if allowed {
        config
            .period(Duration::from_nanos(1))
            .burst_size(1_000_000_000);
    } else {
        config.period(Duration::from_secs(3600)).burst_size(1);
    }
    if headers {
        config.use_headers();
    }
    let config = config.finish().expect("a valid config");
    hello().layer(GovernorLayer::new(config))
}

fn throttle_kit(allowed: bool) -> Router {
    let quota = if allowed {
        throttle_kit::Quota::per_second(1_000_000_000)
    } else {
        throttle_kit::Quota::per_hour(1)
    };
    hello().layer(throttle_kit::RateLimitLayer::new(
        quota,
        throttle_kit::InMemoryBackend::new(),
    ))
}

fn request() -> Request<Body> {
    let mut req = Request::get("/").body(Body::empty()).expect("a request");
    req.extensions_mut().insert(ConnectInfo(peer()));
    req
}

fn peer() -> SocketAddr {
    "127.0.0.7:40000".parse().expect("an address")
}

fn unwrap<T>(result: Result<T, Infallible>) -> T {
    match result {
        Ok(t) => t,
    }
}

/// One request through `router`, its body read: the status.
async fn once(router: &mut Router) -> StatusCode {
    let response = ServiceExt::<Request<Body>>::ready(router)
        .await
        .expect("ready")
        .call(request())
        .await;
    let response: Response<Body> = unwrap(response);
    let status = response.status();
    let _ = response.into_body().collect().await.expect("the body");
    status
}

/// The least allocations of one request through `router` answered
/// `expected` (the request itself is made outside the count).
fn per_request(rt: &tokio::runtime::Runtime, mut router: Router, expected: StatusCode) -> usize {
    rt.block_on(async {
        // The first request of a client inserts it; the denied subjects
        // use their one unit up.
        once(&mut router).await;
        let mut least = usize::MAX;
        for _ in 0..REQUESTS {
            let req = request();
            let region = Region::new(GLOBAL);
            let response = ServiceExt::<Request<Body>>::ready(&mut router)
                .await
                .expect("ready")
                .call(req)
                .await;
            let response = unwrap(response);
            assert_eq!(response.status(), expected);
            let _ = response.into_body().collect().await.expect("the body");
            let change = region.change();
            least = least.min(change.allocations + change.reallocations);
        }
        least
    })
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (ok, limited) = (StatusCode::OK, StatusCode::TOO_MANY_REQUESTS);
    let plenty = Quota::per_second(1_000_000_000);
    let bare = per_request(&rt, hello(), ok);
    let count =
        |router: Router, status: StatusCode| per_request(&rt, router, status) as i64 - bare as i64;

    let ours_allowed = count(ours(plenty, HttpResponder::new()), ok);
    let ours_no_headers = count(
        ours(plenty, HttpResponder::new().success_headers(false)),
        ok,
    );
    let ours_denied = count(ours(Quota::per_hour(1), HttpResponder::new()), limited);
    let ours_shed = count(ours_shedding(&rt), StatusCode::SERVICE_UNAVAILABLE);
    let governor_allowed = count(governor(true, true), ok);
    let governor_no_headers = count(governor(true, false), ok);
    let governor_denied = count(governor(false, true), limited);
    let kit_allowed = count(throttle_kit(true), ok);
    let kit_denied = count(throttle_kit(false), limited);

    println!("allocations per request over bare axum ({bare} for bare axum itself):");
    println!("  throttle memory, X-RateLimit-* headers, allowed: {ours_allowed}");
    println!("  throttle memory, no success headers, allowed:   {ours_no_headers}");
    println!("  throttle memory, denied (429, headers, JSON):    {ours_denied}");
    println!("  throttle memory, shed (503, Retry-After, JSON):  {ours_shed}");
    println!("  tower_governor with headers, allowed:            {governor_allowed}");
    println!("  tower_governor, no headers, allowed:             {governor_no_headers}");
    println!("  tower_governor, denied:                          {governor_denied}");
    println!("  throttle-kit (its three headers), allowed:       {kit_allowed}");
    println!("  throttle-kit, denied (empty 429):                {kit_denied}");

    // No more than tower_governor doing the same; every path exactly what
    // we know of, so that one more allocation goes red.
    assert!(
        ours_no_headers <= governor_no_headers
            && ours_allowed <= governor_allowed
            && ours_denied <= governor_denied,
        "more allocations than tower_governor"
    );
    assert_eq!(ours_no_headers, NO_HEADERS, "allowed, no success headers");
    assert_eq!(ours_allowed, NO_HEADERS + HEADERS, "allowed, with headers");
    assert_eq!(ours_denied, DENIED, "denied");
    assert_eq!(ours_shed, SHED, "shed");
    println!("layer_allocations: ok");
}

/// An allowed request without success headers, over bare axum: the
/// layer's future boxed by axum's router (what every layer pays). The
/// response's body is the handler's own, passed through
/// (`throttle_fleet_axum::AxumBodies`), as tower_governor's is; wrapping it
/// made axum box it once more (5).
const NO_HEADERS: i64 = 4;
/// The three `X-RateLimit-*` headers: none. Numbers below 1,024 are
/// static and larger ones that repeat (the limit, the reset time, a
/// remaining count near a full bucket) come from the per-thread cache; the
/// response's header map has room for them.
const HEADERS: i64 = 0;
/// A 429 with its headers (the template cloned, `Content-Length` in it so
/// that axum need not grow the clone to add it) and its JSON body (shared
/// with recent denials of the same wait), over bare axum, whose handler is
/// not called.
const DENIED: i64 = 1;
/// A shed 503, as a 429: its headers (a template cloned, values from the
/// per-thread cache) and its JSON body (shared with recent sheds of the
/// same wait and rule), over bare axum, whose handler is not called. Its
/// body built with `format!` and its headers one by one cost 6.
const SHED: i64 = 1;
