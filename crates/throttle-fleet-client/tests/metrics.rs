//! The layer's metrics, by partition group, from a real exchange with
//! throttle's axum layer over TCP.

#![cfg(feature = "metrics")]

mod support;

use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use support::{echo_behind, layer, serve, through};
use throttle_fleet_axum::HttpResponder;
use throttle_fleet_client::{ClientLayer, Partition, metrics};
use tower::ServiceExt;

#[tokio::test(start_paused = true)]
async fn waits_retries_and_refusals_are_counted_by_group_never_by_key() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = ::metrics::set_default_local_recorder(&recorder);

    // 1 a second, no headers on allowed answers: the second call is
    // refused, waits Retry-After and is retried.
    let responder = HttpResponder::new().success_headers(false);
    let (router, _) = echo_behind(layer(1, Duration::from_secs(1), responder));
    let addr = serve(router).await;
    let client = through(ClientLayer::new().partition_by(|parts| {
        Partition::new(
            "tenant",
            parts.headers.get("x-client").map(|v| v.as_bytes().to_vec()),
        )
    }));
    let request = || {
        Request::get(format!("http://{addr}/items"))
            .header("x-client", "secret-key-1")
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    for _ in 0..2 {
        let res = client.clone().oneshot(request()).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
    }

    let mut seen = Vec::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        // The server's own metrics share the recorder (one thread).
        if !key.key().name().starts_with("throttle_client_") {
            continue;
        }
        let labels: Vec<_> = key
            .key()
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        assert!(!labels.iter().any(|l| l.contains("secret")), "{labels:?}");
        let value = match value {
            DebugValue::Counter(n) => n,
            DebugValue::Histogram(v) => v.len() as u64,
            DebugValue::Gauge(_) => continue,
        };
        seen.push((key.key().name().to_owned(), labels.join(","), value));
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            (
                metrics::RETRIES.to_owned(),
                "group=tenant,reason=refused".to_owned(),
                1
            ),
            (
                metrics::WAIT_SECONDS.to_owned(),
                "group=tenant".to_owned(),
                1
            ),
            (metrics::WAITS.to_owned(), "group=tenant".to_owned(), 1),
        ]
    );
}
