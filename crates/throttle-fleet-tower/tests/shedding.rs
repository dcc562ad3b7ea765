//! Load shed for capacity through the layer, without a network: a
//! concurrency rule's reserve keeps slots for critical requests, a request
//! shed for it is answered 503 with the problem type
//! `temporary-reduced-capacity` (not a rate limit's 429), and its metric
//! label is `shed`.

use std::convert::Infallible;
use throttle_fleet_core::InFlightLimit;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use throttle_fleet_core::{Class, Rule, memory::MemoryBackend};
use throttle_fleet_tower::key::Global;
use throttle_fleet_tower::metrics::DECISIONS;
use throttle_fleet_tower::{Limit, Policy, ThrottleLayer};
use tower::{Layer, Service, ServiceExt};

fn request(priority: &str) -> Request<()> {
    Request::get("/")
        .header("x-priority", priority)
        .body(())
        .unwrap()
}

/// `backend`: 4 slots, one kept for each class above a request's, the
/// class read from `x-priority`.
fn layer() -> ThrottleLayer {
    let limit = Limit::new(
        Rule::concurrency(
            "backend",
            InFlightLimit {
                reserve: 1,
                ..InFlightLimit::new(4)
            },
        ),
        Global,
    )
    .class_by(|req| {
        req.headers
            .get("x-priority")
            .and_then(|v| Class::from_name(v.to_str().ok()?))
            .unwrap_or_default()
    });
    ThrottleLayer::new(Policy::new().limit(limit), MemoryBackend::default()).unwrap()
}

#[tokio::test]
async fn a_request_shed_for_the_reserve_gets_503_with_its_problem_type_and_a_critical_one_passes() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let layer = metrics::with_local_recorder(&recorder, layer);
    let mut svc = layer.layer(tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    }));
    let mut call = async |priority: &str| {
        svc.ready()
            .await
            .unwrap()
            .call(request(priority))
            .await
            .unwrap()
    };
    // Two sheddable requests hold 4 - 2 x 1 slots: the third is shed.
    let held = [call("sheddable").await, call("sheddable").await];
    assert!(held.iter().all(|r| r.status() == StatusCode::OK));
    let shed = call("sheddable").await;
    assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(shed.headers()["retry-after"], "1");
    assert!(
        shed.headers().get("x-ratelimit-limit").is_none(),
        "a shed request's client is not over a limit"
    );
    let body = shed.into_body().collect().await.unwrap().to_bytes();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["error"], "TEMPORARY_REDUCED_CAPACITY");
    assert_eq!(body["type"], "temporary-reduced-capacity");
    assert_eq!(body["dimension"], "backend");
    assert_eq!(body["retry_after_seconds"], 1);
    // A default request may take one more; a critical one the last.
    let default = call("default").await;
    assert_eq!(default.status(), StatusCode::OK);
    assert_eq!(
        call("default").await.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    let critical = call("critical").await;
    assert_eq!(critical.status(), StatusCode::OK);
    // Every slot held: a critical request is refused at the rule's own
    // limit, a plain concurrency denial.
    assert_eq!(
        call("critical").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    drop((held, default, critical));

    // (A snapshot takes the counters' values: one for the three.)
    let snapshot = snapshotter.snapshot().into_vec();
    let counted = |outcome: &str| {
        snapshot
            .iter()
            .find(|(ck, ..)| {
                ck.key().name() == DECISIONS
                    && ck
                        .key()
                        .labels()
                        .any(|l| l.key() == "outcome" && l.value() == outcome)
            })
            .map_or(0, |(.., v)| match v {
                DebugValue::Counter(n) => *n,
                _ => 0,
            })
    };
    assert_eq!(
        (counted("shed"), counted("denied"), counted("allowed")),
        (2, 1, 4)
    );
}
