//! What the layer reports through the `metrics` facade, read back from a
//! test recorder: decisions by rule and outcome, near-limit, the limit
//! gauge, the asynchronous path, failure policies, and no key in a label.
#![cfg(feature = "metrics")]

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use throttle_fleet_core::algorithm::Step;
use throttle_fleet_core::backend::{Limiter, Outcome, Unavailable};
use throttle_fleet_core::{
    Answer, ConfigError, Key, Quota, Rule, backend::Backend, memory::MemoryBackend,
};
use throttle_fleet_tower::key::{Global, Header};
use throttle_fleet_tower::metrics::{DECISIONS, LIMIT, NEAR_LIMIT};
use throttle_fleet_tower::{HttpResponder, Policy, ThrottleLayer};
use tower::{Layer, Service, ServiceExt, service_fn};

type Layered = ThrottleLayer<HttpResponder>;

/// One metric of a snapshot: name, labels, value.
type Metric = (String, Vec<(String, String)>, DebugValue);

/// Builds the layer with a fresh recorder current: the layer's handles are
/// registered with it, and keep recording into it after the closure.
fn recorded(build: impl FnOnce() -> Layered) -> (Layered, Snapshotter) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let layer = metrics::with_local_recorder(&recorder, build);
    (layer, snapshotter)
}

/// Every metric as `(name, labels, value)`. A snapshot drains counters, so
/// each test takes one, at its end.
fn snapshot(s: &Snapshotter) -> Vec<Metric> {
    s.snapshot()
        .into_vec()
        .into_iter()
        .map(|(ck, _, _, value)| {
            let key = ck.key();
            let labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            (key.name().to_owned(), labels, value)
        })
        .collect()
}

fn value<'a>(snap: &'a [Metric], name: &str, labels: &[(&str, &str)]) -> Option<&'a DebugValue> {
    snap.iter()
        .find(|(n, l, _)| {
            n == name
                && l.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(_, _, v)| v)
}

fn counter(snap: &[Metric], name: &str, labels: &[(&str, &str)]) -> u64 {
    match value(snap, name, labels) {
        Some(DebugValue::Counter(n)) => *n,
        None => 0,
        Some(other) => panic!("{name} is not a counter: {other:?}"),
    }
}

fn decisions(snap: &[Metric], rule: &str, outcome: &str) -> u64 {
    counter(snap, DECISIONS, &[("rule", rule), ("outcome", outcome)])
}

fn get(key: &str) -> Request<Full<Bytes>> {
    Request::get("/")
        .header("x-api-key", key)
        .body(Full::default())
        .unwrap()
}

async fn send(layer: &Layered, key: &str) -> StatusCode {
    let mut svc = layer.layer(service_fn(|_req: Request<Full<Bytes>>| async {
        Ok::<_, Infallible>(Response::new(Full::<Bytes>::default()))
    }));
    svc.ready()
        .await
        .unwrap()
        .call(get(key))
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn decisions_are_counted_by_rule_and_outcome() {
    let (layer, snapshots) = recorded(|| {
        let policy = Policy::new()
            .rule(
                Rule::new("tenant", Quota::per_minute(5)),
                Header::new("x-api-key"),
            )
            .rule(Rule::new("global", Quota::per_minute(100)), Global);
        Layered::new(policy, MemoryBackend::default()).unwrap()
    });
    for _ in 0..7 {
        send(&layer, "k1").await;
    }
    assert_eq!(send(&layer, "k2").await, StatusCode::OK);

    let snap = snapshot(&snapshots);
    assert_eq!(decisions(&snap, "tenant", "allowed"), 6);
    assert_eq!(decisions(&snap, "tenant", "denied"), 2);
    // A request the first rule denied never reached the second.
    assert_eq!(decisions(&snap, "global", "allowed"), 6);
    assert_eq!(decisions(&snap, "global", "denied"), 0);
    for outcome in ["shadow_denied", "degraded", "unavailable"] {
        assert_eq!(decisions(&snap, "tenant", outcome), 0, "{outcome}");
    }
}

#[tokio::test]
async fn near_limit_fires_once_80_percent_is_used() {
    let (layer, snapshots) = recorded(|| {
        let policy = Policy::new().rule(
            Rule::new("tenant", Quota::per_minute(10)),
            Header::new("x-api-key"),
        );
        Layered::new(policy, MemoryBackend::default()).unwrap()
    });
    // Remaining after each: 9, 8, .., 3 (under 80 % used), then 2, 1, 0.
    for _ in 0..7 {
        send(&layer, "k1").await;
    }
    let mut near = Vec::new();
    near.push(counter(
        &snapshot(&snapshots),
        NEAR_LIMIT,
        &[("rule", "tenant")],
    ));
    for _ in 0..4 {
        send(&layer, "k1").await;
    }
    let snap = snapshot(&snapshots);
    near.push(counter(&snap, NEAR_LIMIT, &[("rule", "tenant")]));
    // The 11th was denied: a denial is not "near" the limit.
    assert_eq!(near, [0, 3]);
    assert_eq!(decisions(&snap, "tenant", "denied"), 1);
}

#[tokio::test]
async fn the_limit_is_a_gauge_per_rule() {
    let (_layer, snapshots) = recorded(|| {
        let policy = Policy::new()
            .rule(
                Rule::new("tenant", Quota::per_minute(100).with_burst(150)).token_bucket(),
                Header::new("x-api-key"),
            )
            .rule(Rule::new("global", Quota::per_second(7)), Global);
        Layered::new(policy, MemoryBackend::default()).unwrap()
    });
    let snap = snapshot(&snapshots);
    assert_eq!(
        value(&snap, LIMIT, &[("rule", "tenant")]),
        Some(&DebugValue::Gauge(150.0.into()))
    );
    assert_eq!(
        value(&snap, LIMIT, &[("rule", "global")]),
        Some(&DebugValue::Gauge(7.0.into()))
    );
}

/// A backend that cannot be asked: fail-open rules get a degraded
/// allowance, fail-closed ones an error; answered through a future, like
/// a remote backend.
struct Down;

struct DownLimiter(bool);

impl Backend for Down {
    fn limiter(&self, rule: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
        let open = matches!(
            rule.failure_policy(),
            throttle_fleet_core::FailurePolicy::FailOpen
        );
        Ok(Arc::new(DownLimiter(open)))
    }
}

impl Limiter for DownLimiter {
    fn acquire(&self, _key: &Key, _cost: u64, _limit: u64) -> Answer<Result<Outcome, Unavailable>> {
        let open = self.0;
        Answer::Pending(Box::pin(async move {
            tokio::task::yield_now().await;
            if open {
                let step = Step {
                    allowed: true,
                    remaining: 0,
                    reset_us: 0,
                    retry_after_us: 0,
                    delay_us: 0,
                };
                Ok(Outcome {
                    degraded: true,
                    ..Outcome::new(step, 0)
                })
            } else {
                Err(Unavailable::new("down"))
            }
        }))
    }

    fn refund(&self, _key: &Key, _cost: u64, _outcome: &Outcome) {}

    fn is_remote(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn failure_policies_count_as_degraded_or_unavailable_on_the_async_path() {
    let (open, snapshots) = recorded(|| {
        let policy = Policy::new().rule(
            Rule::new("open", Quota::per_minute(10)).fail_open(),
            Header::new("x-api-key"),
        );
        Layered::new(policy, Down).unwrap()
    });
    assert_eq!(send(&open, "k1").await, StatusCode::OK);
    assert_eq!(send(&open, "k1").await, StatusCode::OK);
    let snap = snapshot(&snapshots);
    assert_eq!(decisions(&snap, "open", "degraded"), 2);
    assert_eq!(decisions(&snap, "open", "allowed"), 0);
    // A degraded "remaining" is this instance's guess: not near-limit evidence.
    assert_eq!(counter(&snap, NEAR_LIMIT, &[("rule", "open")]), 0);

    let (closed, snapshots) = recorded(|| {
        let policy = Policy::new().rule(
            Rule::new("closed", Quota::per_minute(10)).fail_closed(),
            Header::new("x-api-key"),
        );
        Layered::new(policy, Down).unwrap()
    });
    assert_eq!(send(&closed, "k1").await, StatusCode::SERVICE_UNAVAILABLE);
    let snap = snapshot(&snapshots);
    assert_eq!(decisions(&snap, "closed", "unavailable"), 1);
    assert_eq!(decisions(&snap, "closed", "denied"), 0);
}

#[tokio::test]
async fn no_label_carries_a_key() {
    let (layer, snapshots) = recorded(|| {
        let policy = Policy::new().rule(
            Rule::new("tenant", Quota::per_minute(2)),
            Header::new("x-api-key"),
        );
        Layered::new(policy, MemoryBackend::default()).unwrap()
    });
    for key in [
        "secret-key-1",
        "secret-key-2",
        "secret-key-1",
        "secret-key-1",
    ] {
        send(&layer, key).await;
    }
    let snap = snapshot(&snapshots);
    assert!(!snap.is_empty());
    for (name, labels, _) in &snap {
        for (k, v) in labels {
            assert!(!v.contains("secret"), "{name}{{{k}={v}}} carries a key");
            assert!(
                ["rule", "outcome"].contains(&k.as_str()),
                "{name} has label {k}"
            );
        }
    }
    assert_eq!(decisions(&snap, "tenant", "allowed"), 3);
    assert_eq!(decisions(&snap, "tenant", "denied"), 1);
}

#[test]
fn report_state_sets_each_rule_s_blocks_started_and_keys_blocked_now() {
    use std::time::Duration;
    use throttle_fleet_tower::metrics::{BLOCKED_KEYS, BLOCKS_STARTED, report_state};

    let policy = Policy::new()
        .rule(
            Rule::new("tenant", Quota::per_minute(10)),
            Header::new("x-api-key"),
        )
        .rule(Rule::new("global", Quota::per_minute(10)), Global);
    let layer = Layered::new(policy, MemoryBackend::default()).unwrap();
    let rules = layer.rules();
    let tenant = rules.index_of("tenant").unwrap();
    for key in ["a", "b"] {
        let Answer::Ready(Ok(_)) =
            rules
                .operate()
                .block(tenant, &Key::new(key), Duration::from_secs(60), key)
        else {
            panic!("not blocked")
        };
    }
    let Answer::Ready(Ok((true, _))) = rules.operate().unblock(tenant, &Key::new("a")) else {
        panic!("not unblocked")
    };
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || report_state(&layer.rules()));
    let snap = snapshot(&snapshotter);
    let tenant = [("rule", "tenant")];
    assert_eq!(
        value(&snap, BLOCKS_STARTED, &tenant),
        Some(&DebugValue::Counter(2))
    );
    assert_eq!(
        value(&snap, BLOCKED_KEYS, &tenant),
        Some(&DebugValue::Gauge(1.0.into()))
    );
    assert_eq!(
        value(&snap, BLOCKED_KEYS, &[("rule", "global")]),
        Some(&DebugValue::Gauge(0.0.into()))
    );
}
