//! The layer in front of hyper-util's client, against throttle's own axum
//! layer over real TCP, on tokio's paused clock (the server's limiter
//! counts on it too).

mod support;

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use support::{bucket, echo_behind, layer, serve, through};
use throttle_fleet_axum::HttpResponder;
use throttle_fleet_axum::Quota;
use throttle_fleet_client::{Budget, ClientLayer, Deadline, Error};
use tokio::time::Instant;
use tower::ServiceExt;

const SECOND: Duration = Duration::from_secs(1);

fn request(method: Method, addr: std::net::SocketAddr, body: &'static str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(format!("http://{addr}/items"))
        .header("x-client", "a")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap()
}

/// One call through `client` (a clone of it, as a caller would hold).
async fn send<S>(client: &S, request: Request<Full<Bytes>>) -> Result<S::Response, S::Error>
where
    S: tower::Service<Request<Full<Bytes>>> + Clone,
{
    client.clone().oneshot(request).await
}

/// Answers with the IETF fields only (`t` relative, no dates), and none on
/// allowed answers when `success` is off.
fn ietf(success: bool) -> HttpResponder {
    HttpResponder::new()
        .ietf_headers(true)
        .x_ratelimit_headers(false)
        .success_headers(success)
}

#[tokio::test(start_paused = true)]
async fn r_0_holds_the_next_call_for_t_instead_of_spending_it_on_a_429() {
    let (router, counts) = echo_behind(layer(2, SECOND, ietf(true)));
    let addr = serve(router).await;
    let client = through(ClientLayer::new());

    let start = Instant::now();
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let res = send(&client, request(Method::GET, addr, "")).await.unwrap();
        statuses.push(res.status());
    }
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    assert_eq!(
        counts.arrived.get(),
        6,
        "no request was refused, none repeated"
    );
    // 2 a second, a burst of 2: the 3rd and 5th each waited for `t`.
    assert!(start.elapsed() >= 2 * SECOND, "{:?}", start.elapsed());
}

/// A bucket of 3 that gains one every 1.5 s is full 4.5 s after it
/// empties, told as `t=5`: held to that, a client loses half a second each
/// time; paced (its resets move later as it empties), it gets the rate.
#[tokio::test(start_paused = true)]
async fn a_quota_that_refills_is_paced_to_its_rate_not_held_to_its_rounded_reset() {
    let quota = Quota::new(4, 6 * SECOND).with_burst(3);
    let (router, counts) = echo_behind(bucket(quota, ietf(true)));
    let addr = serve(router).await;
    let client = through(ClientLayer::new());

    let start = Instant::now();
    let mut answered = 0;
    while start.elapsed() < 60 * SECOND {
        let res = send(&client, request(Method::GET, addr, "")).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        answered += 1;
    }
    // The burst and one every 1.5 s over 60 s: 43.
    assert!(answered >= 42, "{answered} in {:?}", start.elapsed());
    assert_eq!(
        counts.arrived.get(),
        counts.handled.get(),
        "no request refused"
    );
}

#[tokio::test(start_paused = true)]
async fn a_refused_post_waits_out_retry_after_and_is_sent_again_with_its_body() {
    let (router, counts) = echo_behind(layer(1, 2 * SECOND, ietf(false)));
    let addr = serve(router).await;
    let client = through(ClientLayer::new());

    let first = send(&client, request(Method::POST, addr, "one"))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let start = Instant::now();
    let second = send(&client, request(Method::POST, addr, "two"))
        .await
        .unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(
        second.into_body().collect().await.unwrap().to_bytes(),
        "two"
    );
    assert!(
        start.elapsed() >= 2 * SECOND,
        "Retry-After: 2 waited out: {:?}",
        start.elapsed()
    );
    assert_eq!((counts.arrived.get(), counts.handled.get()), (3, 2));
}

#[tokio::test(start_paused = true)]
async fn a_call_that_may_not_wait_that_long_fails_at_once_saying_until_when() {
    let (router, counts) = echo_behind(layer(1, 30 * SECOND, ietf(true)));
    let addr = serve(router).await;
    let client = through(ClientLayer::new());
    send(&client, request(Method::GET, addr, "")).await.unwrap();

    // Told r=0;t=30: a call with 5 s to live is not sent.
    let mut call = request(Method::GET, addr, "");
    call.extensions_mut().insert(Deadline::after(5 * SECOND));
    let start = Instant::now();
    let err = send(&client, call).await.unwrap_err();
    let Error::Throttled(throttled) = err else {
        panic!("{err:?}")
    };
    assert_eq!(throttled.until() - start, 30 * SECOND);
    assert_eq!(start.elapsed(), Duration::ZERO, "failed at once");
    assert_eq!(counts.arrived.get(), 1, "nothing sent");

    // Failing fast: the same without a deadline.
    let fast = through(ClientLayer::new().fail_fast());
    // Its first call is refused (the quota is the other client's too),
    // and not waited out: the 429 is the caller's.
    let res = send(&fast, request(Method::GET, addr, "")).await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let err = send(&fast, request(Method::GET, addr, ""))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Throttled(_)), "{err:?}");
    assert!(err.to_string().contains("to wait 30"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn without_budget_a_refusal_goes_back_to_the_caller() {
    let (router, counts) = echo_behind(layer(1, SECOND, ietf(false)));
    let addr = serve(router).await;
    let budget = Budget::new(10 * SECOND, 0, 0.0).unwrap();
    let client = through(ClientLayer::new().budget(budget));
    send(&client, request(Method::GET, addr, "")).await.unwrap();
    let res = send(&client, request(Method::GET, addr, "")).await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(res.headers()["retry-after"], "1");
    assert_eq!(counts.arrived.get(), 2, "not retried");
}

#[tokio::test(start_paused = true)]
async fn other_failures_are_retried_for_idempotent_methods_only() {
    // A handler that answers 503 (no Retry-After: not a limiter's) to
    // every other request.
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = calls.clone();
    let router = axum::Router::new().route(
        "/items",
        axum::routing::any(move || {
            let n = seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                if n.is_multiple_of(2) {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    StatusCode::OK
                }
            }
        }),
    );
    let addr = serve(router).await;
    let client = through(ClientLayer::new());
    let get = send(&client, request(Method::GET, addr, "")).await.unwrap();
    assert_eq!(get.status(), StatusCode::OK, "retried after a backoff");
    let post = send(&client, request(Method::POST, addr, "x"))
        .await
        .unwrap();
    assert_eq!(
        post.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "not retried"
    );
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn a_queue_behind_a_wait_goes_as_the_quota_allows_not_all_at_once() {
    // 4 a second, a burst of 4: four calls empty it and the fourth answer
    // says r=0;t=1. Then 12 calls at once: they wait, and when the gate
    // opens 4 go (RateLimit-Policy's q), the rest after their answers.
    let (router, counts) = echo_behind(layer(4, SECOND, ietf(true)));
    let addr = serve(router).await;
    let client = through(ClientLayer::new().max_retries(0));
    for _ in 0..4 {
        let res = send(&client, request(Method::GET, addr, "")).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
    }
    let start = Instant::now();
    let calls = (0..12).map(|_| {
        let client = client.clone();
        async move {
            client
                .oneshot(request(Method::GET, addr, ""))
                .await
                .unwrap()
                .status()
        }
    });
    let statuses = futures_util::future::join_all(calls).await;
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    assert_eq!(counts.arrived.get(), 16, "none refused");
    assert!(start.elapsed() >= 3 * SECOND, "{:?}", start.elapsed());
}

#[tokio::test(start_paused = true)]
async fn this_projects_503_shed_answer_is_waited_out_and_retried() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use throttle_fleet_axum::prelude::*;
    use throttle_fleet_core::InFlightLimit;

    // 3 slots, 1 kept for critical requests: a third default request
    // while two run is shed, 503 with Retry-After: 1 and no rate fields.
    let pool = InFlightLimit {
        reserve: 1,
        ..InFlightLimit::new(3)
    };
    let policy = Policy::new().rule(Rule::concurrency("pool", pool), Header::new("x-client"));
    let layer = ThrottleLayer::new(policy, MemoryBackend::default()).unwrap();
    let shed = Arc::new(AtomicU64::new(0));
    let counted = shed.clone();
    let router = axum::Router::new()
        .route(
            "/items",
            axum::routing::post(|| async {
                tokio::time::sleep(SECOND / 2).await;
                "done"
            }),
        )
        .layer(layer)
        .layer(tower::util::MapResponseLayer::new(
            move |res: axum::response::Response| {
                if res.status() == StatusCode::SERVICE_UNAVAILABLE {
                    assert_eq!(res.headers()["retry-after"], "1");
                    counted.fetch_add(1, Ordering::SeqCst);
                }
                res
            },
        ));
    let addr = serve(router).await;
    let client = through(ClientLayer::new());
    // POSTs: repeated only because the 503 is a limiter's refusal.
    let calls = (0..3).map(|_| client.clone().oneshot(request(Method::POST, addr, "x")));
    let statuses: Vec<_> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .map(|r| r.unwrap().status())
        .collect();
    assert_eq!(statuses, [StatusCode::OK; 3]);
    assert_eq!(shed.load(Ordering::SeqCst), 1, "one was shed, then retried");
}
