//! tonic services mounted in an axum router next to HTTP routes, behind one
//! throttle layer, served by `axum::serve` over real TCP: HTTP requests get
//! HTTP 429 with JSON, gRPC calls get status 8 with the gRPC details.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use throttle_fleet_test_support::grpc::{
    GreeterClient, channel, details, expect_code, meta, meta_u64, say_hello,
};
use throttle_fleet_test_support::http::{self as http1, serve};
use throttle_fleet_tonic::{
    GrpcResponder, HttpResponder, MemoryBackend, PeerIp, Policy, Quota, Rule, ThrottleLayer,
};
use tonic::Code;

/// The greeter and echo services plus `GET /health`, all behind `layer`.
fn app(layer: ThrottleLayer) -> Router {
    throttle_fleet_test_support::grpc::routes()
        .into_axum_router()
        .route("/health", get(|| async { "ok" }))
        .layer(layer)
}

/// `limit` a day in a fixed window: the memory backend aligns the window to
/// the system clock, and a window boundary inside the run would admit a
/// second window's quota; a day's boundary is all but never inside it.
fn per_peer(limit: u64) -> ThrottleLayer {
    let policy = Policy::new().rule(
        Rule::new("ip", Quota::per_day(limit)).fixed_window(),
        PeerIp::default(),
    );
    ThrottleLayer::new(policy, MemoryBackend::default()).unwrap()
}

fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}: {body:?}"))
}

#[tokio::test]
async fn one_layer_answers_http_with_429_and_grpc_with_resource_exhausted() {
    let addr = serve(app(per_peer(4)), true).await;
    let mut grpc = GreeterClient::new(channel(addr).await);

    // HTTP and gRPC from the same address share the peer's count.
    let r = http1::get(addr, "/health").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("x-ratelimit-remaining"), Some("3"));
    let reply = say_hello(&mut grpc, &[]).await.unwrap();
    assert_eq!(meta(reply.metadata(), "x-ratelimit-remaining"), Some("2"));
    assert_eq!(reply.into_inner().message, "Hello throttle!");
    assert_eq!(http1::get(addr, "/health").await.status, StatusCode::OK);
    say_hello(&mut grpc, &[]).await.unwrap();

    let r = http1::get(addr, "/health").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=86_400).contains(&retry), "{retry}");
    let body = json(&r.body);
    assert_eq!(body["error"], "RATE_LIMIT_EXCEEDED");
    assert_eq!(body["dimension"], "ip");
    assert_eq!(r.header("grpc-status"), None);

    let status = expect_code(say_hello(&mut grpc, &[]).await, Code::ResourceExhausted);
    assert_eq!(meta_u64(status.metadata(), "retry-after"), retry);
    let d = details(&status);
    assert!(d.retry.unwrap().retry_delay.unwrap() > Duration::ZERO);
    // The key kind is the extractor's own (`PeerIp`: `peer-ip`).
    assert_eq!(d.quota.unwrap().violations[0].subject, "ip:peer-ip");
}

#[tokio::test]
async fn without_connect_info_grpc_gets_internal_and_http_gets_500() {
    let addr = serve(app(per_peer(4)), false).await;
    let mut grpc = GreeterClient::new(channel(addr).await);

    let status = expect_code(say_hello(&mut grpc, &[]).await, Code::Internal);
    let info = details(&status).info.unwrap();
    assert_eq!(info.reason, "RATE_LIMIT_KEY_MISSING");
    assert_eq!(info.metadata["dimension"], "ip");

    let r = http1::get(addr, "/health").await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    let body = json(&r.body);
    assert_eq!(body["error"], "RATE_LIMIT_KEY_MISSING");
    assert_eq!(body["dimension"], "ip");
}

/// One layer whose HTTP responder is `http`: a quota of 2 a day per peer
/// (a day, so no window boundary falls inside the test).
fn per_peer_with(http: HttpResponder) -> ThrottleLayer {
    let policy = Policy::new().rule(
        Rule::new("ip", Quota::per_day(2)).fixed_window(),
        PeerIp::default(),
    );
    let responder = GrpcResponder::new().http(http);
    ThrottleLayer::with_responder(policy, MemoryBackend::default(), responder).unwrap()
}

/// The HTTP responder's settings choose the success headers of gRPC calls
/// too: none with `success_headers(false)` (a denial still says when to
/// come back), the IETF fields with `ietf_headers(true)`.
#[tokio::test]
async fn grpc_calls_take_their_success_metadata_from_the_http_responder() {
    let quiet = serve(
        app(per_peer_with(HttpResponder::new().success_headers(false))),
        true,
    )
    .await;
    let mut grpc = GreeterClient::new(channel(quiet).await);
    let reply = say_hello(&mut grpc, &[]).await.unwrap();
    for name in [
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ] {
        assert_eq!(meta(reply.metadata(), name), None, "{name}");
    }
    let r = http1::get(quiet, "/health").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("x-ratelimit-remaining"), None);
    let status = expect_code(say_hello(&mut grpc, &[]).await, Code::ResourceExhausted);
    assert!(meta_u64(status.metadata(), "retry-after") >= 1);

    let ietf = serve(
        app(per_peer_with(HttpResponder::new().ietf_headers(true))),
        true,
    )
    .await;
    let mut grpc = GreeterClient::new(channel(ietf).await);
    let reply = say_hello(&mut grpc, &[]).await.unwrap();
    let md = reply.metadata();
    assert_eq!(meta(md, "ratelimit-policy"), Some("\"ip\";q=2;w=86400"));
    assert!(
        meta(md, "ratelimit").unwrap().starts_with("\"ip\";r=1;t="),
        "{md:?}"
    );
    assert_eq!(meta(md, "x-ratelimit-remaining"), Some("1"));
}
