//! The layer's behaviour without a network: remote (pending) backends, the
//! leaky bucket's delays in paused time, readiness, and build-time errors.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use throttle_fleet_core::backend::Outcome;
use throttle_fleet_core::backend::Unavailable;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{
    Answer, ConfigError, Key, Quota, Rule, backend::Backend, clock::ManualClock,
    memory::MemoryBackend,
};
use throttle_fleet_tower::key::{Global, Header};
use throttle_fleet_tower::{HttpResponder, Limit, MissingKey, Policy, ThrottleLayer};
use tower::{Layer, Service, ServiceExt};

type Layered = ThrottleLayer<HttpResponder>;

/// A backend that answers through a future, like a remote one: the memory
/// backend behind a task yield, so the layer's asynchronous path runs.
struct Deferred(MemoryBackend<ManualClock>);

struct DeferredLimiter(Arc<dyn Limiter>);

impl Backend for Deferred {
    fn limiter(&self, rule: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
        Ok(Arc::new(DeferredLimiter(self.0.limiter(rule)?)))
    }
}

impl Limiter for DeferredLimiter {
    fn acquire(&self, key: &Key, cost: u64, limit: u64) -> Answer<Result<Outcome, Unavailable>> {
        let (inner, key) = (self.0.clone(), *key);
        Answer::Pending(Box::pin(async move {
            tokio::task::yield_now().await;
            match inner.acquire(&key, cost, limit) {
                Answer::Ready(r) => r,
                Answer::Pending(f) => f.await,
            }
        }))
    }

    fn refund(&self, key: &Key, cost: u64, outcome: &throttle_fleet_core::backend::Outcome) {
        self.0.refund(key, cost, outcome);
    }
}

/// An inner service that counts its calls.
#[allow(clippy::type_complexity)]
fn counting() -> (
    Arc<AtomicUsize>,
    impl Service<
        Request<Full<Bytes>>,
        Response = Response<Full<Bytes>>,
        Error = Infallible,
        Future: Send,
    > + Clone,
) {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let svc = tower::service_fn(move |_req: Request<Full<Bytes>>| {
        seen.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok")))) }
    });
    (calls, svc)
}

fn get(key: &str) -> Request<Full<Bytes>> {
    Request::get("/")
        .header("x-api-key", key)
        .body(Full::default())
        .unwrap()
}

async fn body_json(
    res: Response<throttle_fleet_tower::ThrottleBody<Full<Bytes>>>,
) -> serde_json::Value {
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn pending_backends_allow_with_headers_and_deny_with_429() {
    let backend = Deferred(MemoryBackend::with_clock(ManualClock::new(1_000_000)));
    let policy = Policy::new().rule(
        Rule::new("tenant", Quota::per_minute(2)),
        Header::new("x-api-key"),
    );
    let (calls, inner) = counting();
    let mut svc = Layered::new(policy, backend).unwrap().layer(inner);

    for remaining in ["1", "0"] {
        let res = svc.ready().await.unwrap().call(get("a")).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()["x-ratelimit-remaining"], remaining);
        assert_eq!(res.headers()["x-ratelimit-limit"], "2");
    }
    let res = svc.ready().await.unwrap().call(get("a")).await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(res.headers()["retry-after"], "30");
    let body = body_json(res).await;
    assert_eq!(body["dimension"], "tenant");
    assert_eq!(body["retry_after_seconds"], 30);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "a denied request never reaches the service"
    );
    // Another key is untouched.
    let res = svc.ready().await.unwrap().call(get("b")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_denial_gives_back_what_the_other_rules_took() {
    let clock = ManualClock::new(1_000_000);
    let local = MemoryBackend::with_clock(clock.clone());
    // "tenant" decides locally and passes; "global" decides remotely and
    // denies after one request: the tenant's cost must be given back.
    let policy = Policy::new()
        .rule(
            Rule::new("tenant", Quota::per_minute(5)).fixed_window(),
            Header::new("x-api-key"),
        )
        .limit(
            Limit::new(
                Rule::new("global", Quota::per_minute(1)).fixed_window(),
                Global,
            )
            .backend(Deferred(MemoryBackend::with_clock(clock.clone()))),
        );
    let (calls, inner) = counting();
    let layer = Layered::new(policy, local).unwrap();
    let mut svc = layer.clone().layer(inner);

    let first = svc.ready().await.unwrap().call(get("a")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    for _ in 0..10 {
        let res = svc.ready().await.unwrap().call(get("a")).await.unwrap();
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(body_json(res).await["dimension"], "global");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Only the first request counts against the tenant: 4 of 5 left.
    let check = layer
        .rules()
        .check(&[throttle_fleet_core::decision::Demand::new(
            0,
            Key::new("a"),
            1,
        )]);
    let throttle_fleet_core::Answer::Ready(checked) = check else {
        panic!("{check:?}")
    };
    let a = checked.decision();
    assert!(a.is_allowed(), "{a:?}");
    assert_eq!(layer.rules().rule(a.rule().unwrap()).name(), "tenant");
    assert_eq!(
        a.remaining(),
        3,
        "one by the first request, one by this check"
    );
}

#[tokio::test(start_paused = true)]
async fn the_leaky_bucket_delays_admitted_requests_until_their_turn() {
    // One per second, up to three waiting.
    let policy = Policy::new().rule(
        Rule::new("queue", Quota::per_second(1).with_burst(3)).leaky_bucket(),
        Global,
    );
    let start = tokio::time::Instant::now();
    let times = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = times.clone();
    let inner = tower::service_fn(move |_req: Request<Full<Bytes>>| {
        seen.lock().unwrap().push(start.elapsed());
        async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::new()))) }
    });
    // The memory backend reads the system clock; paused tokio time does not
    // move it, so all requests arrive at the same backend instant.
    let svc = Layered::new(policy, MemoryBackend::default())
        .unwrap()
        .layer(inner);

    let mut handles = Vec::new();
    for _ in 0..4 {
        let svc = svc.clone();
        handles.push(tokio::spawn(async move {
            svc.oneshot(get("x")).await.unwrap().status()
        }));
    }
    let mut statuses = Vec::new();
    for h in handles {
        statuses.push(h.await.unwrap());
    }
    statuses.sort();
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    let mut times = times.lock().unwrap().clone();
    times.sort();
    assert_eq!(times.len(), 3);
    // Spaced by the emission interval (up to the microseconds that passed on
    // the real clock between the checks).
    assert!(times[0] < Duration::from_millis(50), "{times:?}");
    assert!(
        times[1] > Duration::from_millis(900) && times[1] < Duration::from_millis(1_050),
        "{times:?}"
    );
    assert!(
        times[2] > Duration::from_millis(1_900) && times[2] < Duration::from_millis(2_050),
        "{times:?}"
    );
}

#[tokio::test]
async fn missing_keys_reject_by_default_and_skip_when_told() {
    let rule = || Rule::new("tenant", Quota::per_minute(1));
    let (calls, inner) = counting();
    let mut svc = Layered::new(
        Policy::new().rule(rule(), Header::new("x-api-key")),
        MemoryBackend::default(),
    )
    .unwrap()
    .layer(inner.clone());
    let res = svc
        .ready()
        .await
        .unwrap()
        .call(Request::new(Full::default()))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let body = body_json(res).await;
    assert_eq!(body["error"], "RATE_LIMIT_KEY_MISSING");
    assert_eq!(body["dimension"], "tenant");
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    let skip = Policy::new()
        .limit(Limit::new(rule(), Header::new("x-api-key")).on_missing_key(MissingKey::Skip));
    let mut svc = Layered::new(skip, MemoryBackend::default())
        .unwrap()
        .layer(inner);
    for _ in 0..3 {
        let res = svc
            .ready()
            .await
            .unwrap()
            .call(Request::new(Full::default()))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert!(
            res.headers().get("x-ratelimit-limit").is_none(),
            "no rule applied"
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn cost_functions_weigh_requests_and_zero_exempts() {
    let policy = Policy::new().limit(
        Limit::new(
            // A day's window: the memory backend aligns it to the system
            // clock, and a boundary inside the run would restore the quota.
            Rule::new("bytes", Quota::per_day(100)).fixed_window(),
            Global,
        )
        .cost_fn(|req| {
            req.headers
                .get("x-cost")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(1)
        }),
    );
    let (_, inner) = counting();
    let mut svc = Layered::new(policy, MemoryBackend::default())
        .unwrap()
        .layer(inner);
    let weighted = |cost: &str| {
        Request::get("/")
            .header("x-cost", cost)
            .body(Full::default())
            .unwrap()
    };

    let res = svc
        .ready()
        .await
        .unwrap()
        .call(weighted("60"))
        .await
        .unwrap();
    assert_eq!(res.headers()["x-ratelimit-remaining"], "40");
    let res = svc
        .ready()
        .await
        .unwrap()
        .call(weighted("0"))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(
        res.headers().get("x-ratelimit-remaining").is_none(),
        "cost 0 is exempt"
    );
    let res = svc
        .ready()
        .await
        .unwrap()
        .call(weighted("41"))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(res.headers()["x-ratelimit-remaining"], "40");
    let res = svc
        .ready()
        .await
        .unwrap()
        .call(weighted("101"))
        .await
        .unwrap();
    assert_eq!(
        res.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "more than the capacity never fits"
    );
    let res = svc
        .ready()
        .await
        .unwrap()
        .call(weighted("40"))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers()["x-ratelimit-remaining"], "0");
}

#[tokio::test]
async fn ietf_headers_when_asked() {
    let policy = Policy::new().rule(Rule::new("ip", Quota::per_minute(100)), Global);
    let layer = ThrottleLayer::<_>::with_responder(
        policy,
        MemoryBackend::default(),
        HttpResponder::new().ietf_headers(true),
    )
    .unwrap();
    let (_, inner) = counting();
    let res = layer.layer(inner).oneshot(get("a")).await.unwrap();
    assert_eq!(res.headers()["ratelimit-policy"], "\"ip\";q=100;w=60");
    let r = res.headers()["ratelimit"].to_str().unwrap();
    assert!(r.starts_with("\"ip\";r=99;t="), "{r}");
}

/// A layer of `rule` keyed by nothing (`Global`), on the memory backend.
fn one_rule(rule: Rule, responder: HttpResponder) -> ThrottleLayer<HttpResponder> {
    let policy = Policy::new().rule(rule, Global);
    ThrottleLayer::<_>::with_responder(policy, MemoryBackend::default(), responder).unwrap()
}

/// The names of a response's headers, in order.
fn header_names<B>(res: &Response<B>) -> Vec<String> {
    res.headers()
        .keys()
        .map(|n| n.as_str().to_owned())
        .collect()
}

#[tokio::test]
async fn no_success_headers_when_turned_off_but_a_denial_keeps_them() {
    let quiet = HttpResponder::new().success_headers(false);
    let (_, inner) = counting();
    let mut svc = one_rule(Rule::new("ip", Quota::per_minute(1)), quiet).layer(inner);
    let res = svc.ready().await.unwrap().call(get("a")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let names = header_names(&res);
    assert!(!names.iter().any(|n| n.contains("ratelimit")), "{names:?}");
    let res = svc.ready().await.unwrap().call(get("a")).await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(res.headers()["x-ratelimit-limit"], "1");
}

#[tokio::test]
async fn ietf_only_sends_the_two_fields_and_no_trio() {
    // Two layers on this thread whose rules differ only by name: a policy
    // value kept for one is never sent for the other.
    let ietf_only = HttpResponder::new()
        .ietf_headers(true)
        .x_ratelimit_headers(false);
    // 100 a day, not a minute: a token back every 0.6 s could come between
    // the three requests (on the system clock) and change `r`.
    let layer = |name: &str| one_rule(Rule::new(name, Quota::per_day(100)), ietf_only);
    for (name, requests) in [("ip", 1), ("ix", 1), ("ip", 3)] {
        let (_, inner) = counting();
        let mut svc = layer(name).layer(inner);
        let mut res = None;
        for _ in 0..requests {
            res = Some(svc.ready().await.unwrap().call(get("a")).await.unwrap());
        }
        let res = res.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let names = header_names(&res);
        assert!(
            !names.iter().any(|n| n.starts_with("x-ratelimit")),
            "{names:?}"
        );
        let policy = format!("\"{name}\";q=100;w=86400");
        assert_eq!(res.headers()["ratelimit-policy"], policy.as_str());
        let r = res.headers()["ratelimit"].to_str().unwrap();
        let want = format!("\"{name}\";r={};t=", 100 - requests);
        assert!(r.starts_with(&want), "{r}");
    }
}

#[tokio::test]
async fn ietf_only_denial_keeps_retry_after() {
    let ietf_only = HttpResponder::new()
        .ietf_headers(true)
        .x_ratelimit_headers(false);
    let layer = one_rule(Rule::new("ip", Quota::per_minute(1)), ietf_only);
    let (_, inner) = counting();
    let mut svc = layer.layer(inner);
    svc.ready().await.unwrap().call(get("a")).await.unwrap();
    let res = svc.ready().await.unwrap().call(get("a")).await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let names = header_names(&res);
    assert_eq!(
        names,
        [
            "content-type",
            "content-length",
            "retry-after",
            "ratelimit-policy",
            "ratelimit"
        ]
    );
    let retry = res.headers()["retry-after"].to_str().unwrap().to_owned();
    assert_eq!(res.headers()["ratelimit-policy"], "\"ip\";q=1;w=60");
    assert_eq!(
        res.headers()["ratelimit"],
        format!("\"ip\";r=0;t={retry}").as_str()
    );
    let length: usize = res.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        res.into_body().collect().await.unwrap().to_bytes().len(),
        length
    );
}

#[test]
fn poll_ready_forwards_to_the_inner_service() {
    #[derive(Clone)]
    struct NotReady;
    impl Service<Request<Full<Bytes>>> for NotReady {
        type Response = Response<Full<Bytes>>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Self::Response, Infallible>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Pending
        }
        fn call(&mut self, _: Request<Full<Bytes>>) -> Self::Future {
            unreachable!("never ready")
        }
    }
    let policy = Policy::new().rule(Rule::new("g", Quota::per_second(1)), Global);
    let mut svc = Layered::new(policy, MemoryBackend::default())
        .unwrap()
        .layer(NotReady);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(svc.poll_ready(&mut cx).is_pending());
}

#[test]
fn build_errors_name_the_rule_and_field() {
    let err = Layered::new(Policy::new(), MemoryBackend::default()).unwrap_err();
    assert_eq!(err.field(), "policy");

    let dup = Policy::new()
        .rule(Rule::new("ip", Quota::per_second(1)), Global)
        .rule(Rule::new("ip", Quota::per_second(2)), Global);
    let err = Layered::new(dup, MemoryBackend::default()).unwrap_err();
    assert_eq!((err.rule(), err.field()), (Some("ip"), "name"));

    let bad_header = Policy::new().rule(
        Rule::new("tenant", Quota::per_second(1)),
        Header::new("x api key"),
    );
    let err = Layered::new(bad_header, MemoryBackend::default()).unwrap_err();
    assert_eq!((err.rule(), err.field()), (Some("tenant"), "key.header"));

    let zero = Policy::new().rule(Rule::new("ip", Quota::per_second(0)), Global);
    let err = Layered::new(zero, MemoryBackend::default()).unwrap_err();
    assert_eq!((err.rule(), err.field()), (Some("ip"), "quota.limit"));

    let err = Layered::new(
        Policy::new().rule(Rule::new("ip", Quota::per_second(1)), Global),
        MemoryBackend::default().max_keys(3),
    )
    .unwrap_err();
    assert_eq!((err.rule(), err.field()), (Some("ip"), "memory.max_keys"));
}

#[test]
fn the_layer_and_service_are_send_sync_clone() {
    fn assert_send_sync_clone<T: Send + Sync + Clone>() {}
    fn assert_send<T: Send>() {}
    type Svc = throttle_fleet_tower::Throttle<
        tower::util::BoxCloneSyncService<Request<Full<Bytes>>, Response<Full<Bytes>>, Infallible>,
        HttpResponder,
    >;
    assert_send_sync_clone::<Layered>();
    assert_send_sync_clone::<Svc>();
    assert_send::<<Svc as Service<Request<Full<Bytes>>>>::Future>();
}
